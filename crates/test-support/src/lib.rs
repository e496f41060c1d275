//! Shared test fixtures, compiled once for every crate's integration tests:
//! Phorge's two tables in a fresh database on the local MariaDB
//! ([`mariadb`]), an application's object and transaction tables beside
//! them ([`applications`]), a recording receiver on loopback
//! ([`receiver`]), Phorge's `conf/local/local.json` in a temporary
//! directory ([`local_config`]) and a fault-injecting TCP proxy for
//! database outages ([`fault_proxy`]).
//!
//! Test-only code: failures panic with a message saying what was expected.

#![allow(clippy::expect_used, clippy::missing_panics_doc)]

pub mod applications;
pub mod fault_proxy;
pub mod local_config;
pub mod mariadb;
pub mod receiver;

pub use applications::{with_application_tables, ApplicationTables};
pub use fault_proxy::FaultProxy;
pub use local_config::LocalJson;
pub use mariadb::{with_db, TestDb};
pub use receiver::{Receiver, Recorded, Replied, Reply};
