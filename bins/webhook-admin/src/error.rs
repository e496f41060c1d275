//! The tool's one error type and its exit statuses. Every failure a user
//! can cause or meet maps to a documented status, so scripts can tell a
//! missing row (1) from a typo (2) from a database that is down (3).

use std::net::SocketAddr;

use webhook_core::setting::SettingError;
use webhook_core::StoreError;

/// Exit statuses, as `--help` documents them.
pub mod exit {
    /// Success; for `verify`, the signature matches.
    pub const OK: u8 = 0;
    /// A check failed or something was not found: no such request, a
    /// signature mismatch, no payload for a row, unusable row data.
    pub const CHECK_FAILED: u8 = 1;
    /// Usage error or a bad setting (the message names the variable).
    pub const USAGE: u8 = 2;
    /// The database is unreachable or unusable.
    pub const DATABASE: u8 = 3;
    /// `watch`: the daemon's event stream could not be followed.
    pub const STREAM: u8 = 4;
}

/// The text `--help` shows about exit statuses.
pub const EXIT_STATUS_HELP: &str = "\
Exit status:
  0  success (verify: the signature matches)
  1  check failed or not found (no such request, signature mismatch,
     no payload for this row, unusable row data)
  2  usage error or bad setting (the message names the variable)
  3  database unreachable or unusable (down, missing database, failed query)
  4  watch: the daemon's event stream unreachable, refused or broken off";

/// Why a command could not do its job.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// A `GORGE_*` variable holds a value the daemon would refuse too.
    #[error("{variable}: {reason}")]
    Setting {
        /// The variable's name.
        variable: String,
        /// What is wrong, with what is allowed.
        reason: String,
    },
    /// An argument the command cannot use.
    #[error("{0}")]
    Usage(String),
    /// `listen` could not bind its address.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address asked for.
        addr: SocketAddr,
        /// What the system said.
        source: std::io::Error,
    },
    /// Standard input could not be read (`sign`, `verify`).
    #[error("cannot read standard input: {0}")]
    Stdin(#[source] std::io::Error),
    /// Nothing by that id or PHID.
    #[error("{0}")]
    NotFound(String),
    /// The row exists but no payload would be built for it.
    #[error("{0}")]
    NoPayload(String),
    /// The database could not answer.
    #[error(
        "database {database} at {address}: {}",
        webhook_core::error_chain(source)
    )]
    Database {
        /// `{namespace}_herald`.
        database: String,
        /// `host:port`.
        address: String,
        /// The store's error, with the driver's reason as its source.
        source: StoreError,
    },
    /// The attempt history's database does not exist: the daemon keeps
    /// no history, or has not run with it on yet.
    #[error(
        "the attempt history database {database} does not exist: the history is off \
         (GORGE_WEBHOOK_HISTORY) or no daemon has run with it on yet (its database is \
         GORGE_WEBHOOK_HISTORY_DATABASE, by default {{namespace}}_webhook_history)"
    )]
    HistoryMissing {
        /// The history database looked for.
        database: String,
    },
    /// Writing the answer failed (e.g. a closed pipe).
    #[error("cannot write output: {0}")]
    Output(#[source] std::io::Error),
    /// `watch` could not follow the daemon's event stream.
    #[error("event stream {url}: {reason}")]
    Stream {
        /// The stream's URL.
        url: String,
        /// What went wrong (the daemon's error envelope, when it sent one).
        reason: String,
    },
}

impl From<SettingError> for AdminError {
    fn from(err: SettingError) -> Self {
        Self::Setting {
            variable: err.variable.to_owned(),
            reason: err.reason,
        }
    }
}

impl AdminError {
    /// The exit status for this error.
    pub fn exit_status(&self) -> u8 {
        match self {
            Self::Setting { .. } | Self::Usage(_) | Self::Listen { .. } | Self::Stdin(_) => {
                exit::USAGE
            }
            Self::NotFound(_) | Self::NoPayload(_) | Self::Output(_) => exit::CHECK_FAILED,
            // A row outside Phorge's domain is a fact about the data, not
            // about the database being reachable.
            Self::Database {
                source: StoreError::MalformedRow { .. },
                ..
            } => exit::CHECK_FAILED,
            Self::Database { .. } | Self::HistoryMissing { .. } => exit::DATABASE,
            Self::Stream { .. } => exit::STREAM,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_follow_the_documented_table() {
        let db = |source| AdminError::Database {
            database: "phorge_herald".into(),
            address: "127.0.0.1:1".into(),
            source,
        };
        let io = || std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(
            db(StoreError::Unavailable(Box::new(io()))).exit_status(),
            exit::DATABASE
        );
        assert_eq!(
            db(StoreError::MissingDatabase("x".into())).exit_status(),
            exit::DATABASE
        );
        assert_eq!(
            db(StoreError::Denied("SELECT command denied".into())).exit_status(),
            exit::DATABASE
        );
        assert_eq!(
            db(StoreError::MalformedRow {
                id: 1,
                reason: "r".into()
            })
            .exit_status(),
            exit::CHECK_FAILED
        );
        assert_eq!(AdminError::NotFound("x".into()).exit_status(), 1);
        assert_eq!(
            AdminError::HistoryMissing {
                database: "phorge_webhook_history".into()
            }
            .exit_status(),
            exit::DATABASE
        );
        let stream = AdminError::Stream {
            url: "http://127.0.0.1:1/api/webhook/events".into(),
            reason: "cannot connect".into(),
        };
        assert_eq!(stream.exit_status(), exit::STREAM);
        assert_eq!(
            AdminError::Setting {
                variable: "V".into(),
                reason: "r".into()
            }
            .exit_status(),
            2
        );
    }

    #[derive(Debug, thiserror::Error)]
    #[error("Input/output error: {0}")]
    struct Wrapper(#[source] std::io::Error);

    #[test]
    fn wrapped_driver_reasons_are_printed_once() {
        let err = StoreError::Unavailable(Box::new(Wrapper(std::io::Error::other(
            "Connection refused (os error 111)",
        ))));
        assert_eq!(
            webhook_core::error_chain(&err),
            "database unavailable: Input/output error: Connection refused (os error 111)"
        );
    }

    #[test]
    fn database_errors_carry_the_driver_reason() {
        let err = AdminError::Database {
            database: "phorge_herald".into(),
            address: "127.0.0.1:1".into(),
            source: StoreError::Unavailable(Box::new(std::io::Error::other("connection refused"))),
        };
        assert_eq!(
            err.to_string(),
            "database phorge_herald at 127.0.0.1:1: database unavailable: connection refused"
        );
    }
}
