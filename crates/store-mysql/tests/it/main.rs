//! Integration tests of `webhook-store-mysql` against the real local
//! MariaDB (127.0.0.1:3306, root, no password). No mocks: every test gets
//! its own freshly created database, so tests run in parallel safely.

mod adoption;
mod batch;
mod binlog;
mod claims;
mod conformance;
mod fixture;
mod floor;
mod grants;
mod handoff;
mod history_failures;
mod history_fixture;
mod history_migrations;
mod history_queries;
mod history_recording;
mod history_retention;
mod indexes;
mod locks;
mod objects;
mod properties;
mod readiness;
mod reads;
mod requeue;
mod rows;
mod schema;
mod server_time;
mod sizes;
mod timeouts;
