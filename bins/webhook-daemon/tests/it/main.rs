//! Integration tests of the `webhook-daemon` binary, run as a separate
//! process (`CARGO_BIN_EXE_webhook-daemon`) against the local MariaDB
//! (127.0.0.1:3306, root, no password) and a recording receiver on
//! loopback. One test binary for the crate; `cargo xtask contract-test`
//! runs the `contracts` module alone.

mod adoption;
mod allocator;
mod binlog_wake;
mod clock_skew;
mod contention;
mod contracts;
mod daemon;
mod e2e;
mod grants;
mod handoff;
mod history;
mod hook_edits;
mod hostile;
mod image;
mod install;
mod listener;
mod live;
mod log_reading;
mod logging;
mod objects;
mod outage;
mod prometheus;
mod proxy;
mod raw;
mod reliability;
mod requeue;
mod retry_after;
mod secrets;
mod sessions;
mod signals;
mod signatures;
mod support;
