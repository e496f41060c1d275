//! The shared MariaDB fixture (`webhook-test-support`), as this crate's
//! tests use it.

pub use webhook_test_support::mariadb::*;
