//! The `webhook_core::Store` on MySQL/MariaDB, through `mysql_async` over
//! rustls (ring). This is the only crate that speaks SQL.
//!
//! It runs exactly the statements of SPEC §4 against Phorge's own
//! `{namespace}_herald` tables and never creates, alters or indexes
//! anything there: the table is the protocol, and Phorge owns its schema.
//!
//! * [`MysqlConfig`] / [`MysqlStore::new`]: validates settings and builds a
//!   bounded, lazy pool; nothing connects until the first statement, so a
//!   slow or absent database never blocks startup.
//! * [`MysqlStore`] implements [`webhook_core::Store`]; every statement is a
//!   prepared statement, cached per pooled connection.
//! * [`MysqlStore::ready`] is the `/readyz` probe; [`MysqlStore::check_schema`]
//!   the startup check of the columns and of the `key_status` index.
//! * [`MysqlHookLock`] is Phorge's per-hook `GET_LOCK`, so a daemon and a
//!   leftover PHP worker exclude each other.
//! * Read-only lookups for the admin tool ([`MysqlStore::request_by_id`],
//!   [`MysqlStore::hook_summaries`], [`HookSummary`], …): plain `SELECT`s
//!   that never write, claim or lock.
//!
//! Values read from the database are validated, never trusted: a VARBINARY
//! column that is not UTF-8, an unknown `status` / `lastRequestResult`, a
//! NULL or a negative number all become [`webhook_core::StoreError::MalformedRow`]
//! (strictly: no lossy conversion, because a repaired string written back
//! would silently destroy Phorge's bytes).

mod config;
mod error;
mod lock;
mod reads;
mod rows;
mod schema;
pub mod sql;
mod store;

pub use config::{MysqlConfig, DEFAULT_CONNECT_TIMEOUT, DEFAULT_POOL_MAX};
pub use error::{MysqlError, NotReady};
pub use lock::MysqlHookLock;
pub use reads::HookSummary;
pub use schema::{SchemaWarning, HOOK_COLUMNS, REQUEST_COLUMNS};
pub use store::MysqlStore;
