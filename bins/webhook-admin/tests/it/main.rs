//! Integration tests of `webhook-admin`: every subcommand runs as a
//! process (the built binary), against fresh databases on the local
//! MariaDB (127.0.0.1:3306, root, no password) seeded with rows for each
//! case, or against a local `listen` receiver, or (`watch`) recorded and
//! locally served event streams. `requeue`, the one command that writes,
//! is checked to write exactly Phorge's values and only with `--apply`.

mod config;
mod docs;
mod doctor;
mod errors;
mod explain;
mod history;
mod listen;
mod objects;
mod payload;
mod readonly;
mod requeue;
mod signing;
mod stats;
mod support;
mod watch;
