//! Shared test fixtures, compiled once for every crate's integration tests:
//! Phorge's two tables in a fresh database on the local MariaDB
//! ([`mariadb`]), attempt records for the history's tests ([`attempts`]),
//! an application's object and transaction tables beside
//! them ([`applications`]), a recording or counting receiver on loopback
//! ([`receiver`], its per-object [`receipts`]), Phorge's
//! `conf/local/local.json` in a temporary directory ([`local_config`]), a
//! fault-injecting TCP proxy for database outages ([`fault_proxy`]), and
//! the daemon binary run as a child process ([`daemon_process`]), its
//! database sessions as the server lists them ([`process_sessions`]), a raw
//! HTTP/1.1 client for its diagnostics listener ([`raw_http`]), a reader
//! of its `/metrics` text ([`metrics_text`]), and libfaketime's variables
//! to run it with its wall clock shifted ([`faketime`]), and a private
//! MariaDB with its binary log on ([`binlog_server`]), a real egress
//! proxy ([`tinyproxy`]), and a test CA for TLS receivers and proxies
//! ([`tls`]).
//!
//! Test-only code: failures panic with a message saying what was expected.

#![allow(clippy::expect_used, clippy::missing_panics_doc)]

pub mod applications;
pub mod attempts;
pub mod binlog_server;
pub mod daemon_process;
pub mod faketime;
pub mod fault_proxy;
pub mod local_config;
pub mod mariadb;
pub mod metrics_text;
pub mod process_sessions;
pub mod raw_http;
pub mod receipts;
pub mod receiver;
pub mod tinyproxy;
pub mod tls;
pub mod worker_tasks;

pub use applications::{with_application_tables, ApplicationTables};
pub use binlog_server::BinlogServer;
pub use daemon_process::{DaemonCommand, DaemonProcess};
pub use fault_proxy::FaultProxy;
pub use local_config::LocalJson;
pub use mariadb::{with_db, TestDb};
pub use raw_http::HttpResponse;
pub use receipts::Receipt;
pub use receiver::{Receiver, Recorded, Replied, Reply};
pub use tinyproxy::Tinyproxy;
