//! The crate's typed error ([`MysqlError`]), the readiness verdict
//! ([`NotReady`]), and the one place driver errors are classified into
//! `webhook_core::StoreError` kinds. A failed connect or statement says
//! why in its `Display` — the server's own number and words with the
//! client's host taken out ([`server_words`]), or the socket's or driver's
//! reason, never a connection URL ([`failure_reason`]) — and so does not
//! also hand the driver's error on as its `source()`: a log line says each
//! cause once, and the driver's text, which names the client's host, stays
//! out of it. `/readyz` shows only [`NotReady`]'s words.

use std::sync::Arc;
use std::time::Duration;

use mysql_async::{DriverError, Error as DriverFailure};
use webhook_core::BoxError;
use webhook_core::StoreError;

/// MySQL's "Unknown database" (ER_BAD_DB_ERROR): Phorge has not run its
/// storage upgrade yet.
pub(crate) const ER_BAD_DB_ERROR: u16 = 1049;

/// Server error codes that mean the session is gone or cannot start, as
/// opposed to a statement the server rejected.
const CONNECTION_SERVER_CODES: &[u16] = &[
    1040, // ER_CON_COUNT_ERROR: too many connections
    1053, // ER_SERVER_SHUTDOWN
    1152, // ER_ABORTING_CONNECTION
    1158, // ER_NET_READ_ERROR
    1159, // ER_NET_READ_INTERRUPTED
    1160, // ER_NET_ERROR_ON_WRITE
    1161, // ER_NET_WRITE_INTERRUPTED
    1927, // ER_CONNECTION_KILLED (MariaDB)
    4031, // ER_CLIENT_INTERACTION_TIMEOUT (MySQL 8)
];

/// Server error codes that mean the account lacks a privilege for what it
/// asked, or may not log in: the server answered, and the same request
/// will be refused until a grant is given.
const PRIVILEGE_SERVER_CODES: &[u16] = &[
    1044, // ER_DBACCESS_DENIED_ERROR: the database
    1045, // ER_ACCESS_DENIED_ERROR: the login
    1142, // ER_TABLEACCESS_DENIED_ERROR: a table (`UPDATE command denied …`)
    1143, // ER_COLUMNACCESS_DENIED_ERROR: a column
    1227, // ER_SPECIFIC_ACCESS_DENIED_ERROR: a global privilege
    1370, // ER_PROCACCESS_DENIED_ERROR: a routine
    1698, // ER_ACCESS_DENIED_NO_PASSWORD_ERROR: the login
    1873, // ER_ACCESS_DENIED_CHANGE_USER_ERROR: the login, on a session reset
];

/// Everything this crate reports: bad settings, readiness, schema problems,
/// and the sources behind `StoreError`s.
#[derive(Debug, thiserror::Error)]
pub enum MysqlError {
    /// A setting cannot work; names its variable.
    #[error("invalid MySQL setting {0}")]
    InvalidConfig(#[from] webhook_core::setting::SettingError),
    /// The database cannot serve yet (see [`NotReady`]).
    #[error(transparent)]
    NotReady(#[from] NotReady),
    /// Opening a connection failed (TCP, TLS, handshake or login). Shows
    /// why as a statement's failure does: the server's `ERROR 1040 (08004):
    /// Too many connections` is what an operator acts on.
    #[error("cannot connect to the database server: {}", failure_reason(.0))]
    Connect(DriverFailure),
    /// No connection within the connect timeout (server silent, or every
    /// pool slot busy).
    #[error("no database connection within {}", seconds(*.0))]
    ConnectTimeout(Duration),
    /// A database operation did not finish in time (a half-open socket, a
    /// frozen server): the connection is abandoned and the pool replaced
    /// (`crate::session`).
    #[error("{operation} did not finish within {}", seconds(*after))]
    Timeout {
        /// What timed out.
        operation: &'static str,
        /// The bound it exceeded.
        after: Duration,
    },
    /// A statement failed on an open connection. Shows the server's error
    /// code and message (or the driver's or socket's reason), which a
    /// failing write-back's log line needs; never a connection URL.
    #[error("database statement failed: {}", failure_reason(.0))]
    Statement(DriverFailure),
    /// The server refused the account a privilege, or its login: what it
    /// said, without the client's host ([`server_words`]). It has no
    /// source, so every report of a refusal — the log's lines, `/readyz` —
    /// shows these words and no others.
    #[error("{0}")]
    Refused(String),
    /// A statement returned something its contract rules out.
    #[error("unexpected result from {statement}: {detail}")]
    UnexpectedResult {
        /// Which statement.
        statement: &'static str,
        /// What came back instead.
        detail: String,
    },
    /// `RELEASE_LOCK` said this connection did not hold the hook lock, so
    /// mutual exclusion was lost at some point (e.g. the session was reset).
    #[error("hook lock {name} was no longer held at release")]
    LockNotHeld {
        /// The `GET_LOCK` name.
        name: String,
    },
    /// The task owning a hook-lock session has stopped (its runtime shut
    /// down), so no lock can be taken or checked through it.
    #[error("the hook lock session has stopped")]
    LockSessionStopped,
    /// The server cannot hold several named locks on one session (MySQL
    /// before 5.7, MariaDB before 10.0.2: a second `GET_LOCK` silently
    /// frees the first), which the lock sessions rely on.
    #[error(
        "the database server {version} cannot hold several named locks on one session; \
         MySQL 5.7 or MariaDB 10.0.2 or newer is needed"
    )]
    ServerTooOldForLocks {
        /// What the server's handshake said, `major.minor.patch`.
        version: String,
    },
    /// No hook-lock session could be opened just now (an earlier take in
    /// the same round failed to connect).
    #[error("no hook lock session could be opened")]
    LockSessionUnavailable,
    /// One of Phorge's tables is absent.
    #[error("table {database}.{table} does not exist")]
    MissingTable {
        /// The herald database.
        database: String,
        /// The absent table.
        table: &'static str,
    },
    /// Columns the daemon reads or writes are absent.
    #[error("table {database}.{table} lacks column(s) {}", columns.join(", "))]
    MissingColumns {
        /// The herald database.
        database: String,
        /// The table.
        table: &'static str,
        /// Every expected column that is absent.
        columns: Vec<&'static str>,
    },
}

/// Why the store cannot serve yet: the `/readyz` verdict. `Display` is the
/// reason to report; the driver's detail is only in `source()`.
#[derive(Debug, thiserror::Error)]
pub enum NotReady {
    /// Nothing answers at the configured address (refused, no route, TLS
    /// failure, timeout).
    #[error("database server unreachable")]
    Unreachable(#[source] BoxError),
    /// The server answers but `{namespace}_herald` does not exist: Phorge
    /// has not run its storage upgrade yet.
    #[error("database `{database}` does not exist yet")]
    MissingDatabase {
        /// The herald database.
        database: String,
    },
    /// The server answers but refuses the session (credentials, grants,
    /// too many connections); `reason` is what it said, without the
    /// client's host ([`server_words`]).
    #[error("database server rejected the connection: {reason}")]
    Rejected {
        /// The server's words.
        reason: String,
        /// The failure.
        #[source]
        source: BoxError,
    },
    /// Connected, but the probe itself failed.
    #[error("database server did not answer the readiness probe")]
    ProbeFailed(#[source] BoxError),
}

/// A bound as a reader writes it: `5 s`, `0.25 s`.
fn seconds(bound: Duration) -> String {
    format!("{} s", bound.as_secs_f64())
}

/// At most this many bytes of a server's or driver's message are shown: a
/// syntax error quotes the statement, which may inline a whole row.
const REASON_MAX: usize = 300;

/// What a failed statement's `Display` says about its cause: the server's
/// code and message, the driver's or the socket's text; never a URL error's
/// (it may quote the connection URL, password included) nor an opaque
/// `Other`.
fn failure_reason(err: &DriverFailure) -> String {
    let text = match err {
        DriverFailure::Server(server) => return server_words(server),
        DriverFailure::Io(io) => format!("connection error: {io}"),
        DriverFailure::Driver(driver) => format!("driver error: {driver}"),
        DriverFailure::Url(_) => "invalid connection settings".to_owned(),
        DriverFailure::Other(_) => "driver failure".to_owned(),
    };
    bounded(text)
}

/// What the server said, as the driver writes it (`ERROR 1045 (28000):
/// Access denied for user 'wh' (using password: YES)`), bounded, with the
/// client's host taken out: the server names it in a refusal (`'wh'@'10.0.0.5'`,
/// `Host '10.0.0.5' is not allowed to connect`), and `/readyz`, which shows
/// these words to anyone who asks, names no host. The account's user name
/// stays: it is a setting shown anyway (`webhook-admin config`), and what
/// a grant names.
pub(crate) fn server_words(server: &mysql_async::ServerError) -> String {
    bounded(format!(
        "ERROR {} ({}): {}",
        server.code,
        server.state,
        without_hosts(&server.message)
    ))
}

/// `message` without the host of each `'user'@'host'` and of a leading
/// `Host 'host'`.
fn without_hosts(message: &str) -> String {
    let mut text = String::with_capacity(message.len());
    let mut rest = message;
    if let Some(after) = rest.strip_prefix("Host '") {
        text.push_str("This host");
        rest = after.split_once('\'').map_or("", |(_, tail)| tail);
    }
    while let Some((before, after)) = rest.split_once("'@'") {
        text.push_str(before);
        text.push('\'');
        rest = after.split_once('\'').map_or("", |(_, tail)| tail);
    }
    text.push_str(rest);
    text
}

fn bounded(mut text: String) -> String {
    if text.len() > REASON_MAX {
        let mut cut = REASON_MAX;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push('…');
    }
    text
}

/// Whether `err` is the driver refusing an incoming packet larger than its
/// `max_allowed_packet` (which it takes from the server's at connect;
/// libmysqlclient's 2020, `CR_NET_PACKET_TOO_LARGE`): the connection is
/// unusable afterwards, but the cause is the data, not the server.
pub(crate) fn is_packet_too_large(err: &DriverFailure) -> bool {
    match err {
        // mysql_common's codec error is not re-exported, so it is known by
        // its text (the integration test `an_unreadable_row_is_skipped`
        // holds the driver to it).
        DriverFailure::Io(mysql_async::IoError::Io(io)) => io
            .get_ref()
            .is_some_and(|inner| inner.to_string() == CODEC_PACKET_TOO_LARGE),
        DriverFailure::Driver(DriverError::PacketTooLarge) => true,
        DriverFailure::Server(server) => server.code == ER_NET_PACKET_TOO_LARGE,
        _ => false,
    }
}

/// mysql_common's `PacketCodecError::PacketTooLarge`, as displayed.
const CODEC_PACKET_TOO_LARGE: &str = "Packet is larger than max_allowed_packet";

/// The server's "Got a packet bigger than 'max_allowed_packet' bytes".
pub(crate) const ER_NET_PACKET_TOO_LARGE: u16 = 1153;

fn server_code(err: &DriverFailure) -> Option<u16> {
    match err {
        DriverFailure::Server(server) => Some(server.code),
        _ => None,
    }
}

/// The server's error number behind a failed statement, if the server
/// answered one.
pub(crate) fn server_code_of(err: &MysqlError) -> Option<u16> {
    match err {
        MysqlError::Statement(failure) => server_code(failure),
        _ => None,
    }
}

/// Whether a server error number means the session is gone or cannot
/// start, rather than that the server rejected the statement.
pub(crate) fn is_connection_loss_code(code: u16) -> bool {
    CONNECTION_SERVER_CODES.contains(&code)
}

/// Whether the server refused `err`'s request for a privilege the account
/// lacks (or refused its login).
pub(crate) fn is_privilege_error(err: &DriverFailure) -> bool {
    server_code(err).is_some_and(|code| PRIVILEGE_SERVER_CODES.contains(&code))
}

/// Whether a failed statement means the connection itself is gone.
fn is_connection_loss(err: &DriverFailure) -> bool {
    match err {
        DriverFailure::Io(_) => true,
        DriverFailure::Driver(driver) => matches!(
            driver,
            DriverError::ConnectionClosed
                | DriverError::PoolDisconnected
                | DriverError::PacketOutOfOrder
                | DriverError::UnexpectedPacket { .. }
        ),
        DriverFailure::Server(server) => is_connection_loss_code(server.code),
        DriverFailure::Other(_) | DriverFailure::Url(_) => false,
    }
}

/// Which `StoreError` a failure becomes.
enum StoreErrorKind {
    MissingDatabase(String),
    Denied,
    Unavailable,
    Query,
}

/// One failure handed to every write of a batch (`crate::batch`).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub(crate) struct SharedFailure(Arc<MysqlError>);

impl MysqlError {
    fn store_error_kind(&self, database: &str) -> StoreErrorKind {
        match self {
            Self::Connect(err) | Self::Statement(err)
                if server_code(err) == Some(ER_BAD_DB_ERROR) =>
            {
                StoreErrorKind::MissingDatabase(database.to_owned())
            }
            Self::NotReady(NotReady::MissingDatabase { database }) => {
                StoreErrorKind::MissingDatabase(database.clone())
            }
            Self::Connect(err) | Self::Statement(err) if is_privilege_error(err) => {
                StoreErrorKind::Denied
            }
            Self::Refused(_) => StoreErrorKind::Denied,
            Self::Connect(_)
            | Self::ConnectTimeout(_)
            | Self::Timeout { .. }
            | Self::LockSessionStopped
            | Self::LockSessionUnavailable
            | Self::NotReady(_) => StoreErrorKind::Unavailable,
            Self::Statement(err) if is_connection_loss(err) => StoreErrorKind::Unavailable,
            _ => StoreErrorKind::Query,
        }
    }

    /// The `StoreError` kind for this failure: `MissingDatabase` for 1049,
    /// `Denied` when the server refused a privilege or the login (its
    /// source the server's words alone, [`MysqlError::Refused`]),
    /// `Unavailable` when no usable connection exists, `Query` otherwise.
    pub(crate) fn into_store_error(self, database: &str) -> StoreError {
        match self.store_error_kind(database) {
            StoreErrorKind::MissingDatabase(database) => StoreError::MissingDatabase(database),
            StoreErrorKind::Denied => StoreError::Denied(Box::new(self.refused())),
            StoreErrorKind::Unavailable => StoreError::Unavailable(Box::new(self)),
            StoreErrorKind::Query => StoreError::Query(Box::new(self)),
        }
    }

    /// [`Self::into_store_error`] for a failure shared by several callers.
    pub(crate) fn shared_store_error(shared: &Arc<Self>, database: &str) -> StoreError {
        let source = Box::new(SharedFailure(Arc::clone(shared)));
        match shared.store_error_kind(database) {
            StoreErrorKind::MissingDatabase(database) => StoreError::MissingDatabase(database),
            StoreErrorKind::Denied => StoreError::Denied(Box::new(shared.refused())),
            StoreErrorKind::Unavailable => StoreError::Unavailable(source),
            StoreErrorKind::Query => StoreError::Query(source),
        }
    }

    /// This failure as [`MysqlError::Refused`]: the server's words when it
    /// answered one, this error's own otherwise.
    fn refused(&self) -> Self {
        match self {
            Self::Connect(DriverFailure::Server(server))
            | Self::Statement(DriverFailure::Server(server)) => Self::Refused(server_words(server)),
            Self::Refused(words) => Self::Refused(words.clone()),
            other => Self::Refused(other.to_string()),
        }
    }

    /// The readiness verdict for a failure to connect.
    pub(crate) fn into_not_ready(self, database: &str) -> NotReady {
        if let Self::NotReady(not_ready) = self {
            return not_ready;
        }
        match &self {
            Self::Connect(err) | Self::Statement(err)
                if server_code(err) == Some(ER_BAD_DB_ERROR) =>
            {
                NotReady::MissingDatabase {
                    database: database.to_owned(),
                }
            }
            Self::Connect(DriverFailure::Server(server)) => NotReady::Rejected {
                reason: server_words(server),
                source: Box::new(self),
            },
            Self::Connect(_) | Self::ConnectTimeout(_) | Self::Timeout { .. } => {
                NotReady::Unreachable(Box::new(self))
            }
            Self::Statement(err) if is_connection_loss(err) => {
                NotReady::Unreachable(Box::new(self))
            }
            _ => NotReady::ProbeFailed(Box::new(self)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mysql_async::{IoError, ServerError};

    fn server(code: u16) -> DriverFailure {
        DriverFailure::Server(ServerError {
            code,
            message: "m".into(),
            state: "HY000".into(),
        })
    }

    fn io() -> DriverFailure {
        DriverFailure::Io(IoError::Io(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        )))
    }

    #[test]
    fn store_error_kinds() {
        let db = "x_herald";
        assert!(matches!(
            MysqlError::Connect(server(ER_BAD_DB_ERROR)).into_store_error(db),
            StoreError::MissingDatabase(name) if name == db
        ));
        assert!(matches!(
            MysqlError::Connect(io()).into_store_error(db),
            StoreError::Unavailable(_)
        ));
        for code in [1044, 1045, 1698] {
            assert!(matches!(
                MysqlError::Connect(server(code)).into_store_error(db),
                StoreError::Denied(_)
            ));
        }
        for code in [1044, 1045, 1142, 1143, 1227, 1370, 1873] {
            assert!(matches!(
                MysqlError::Statement(server(code)).into_store_error(db),
                StoreError::Denied(_)
            ));
        }
        assert!(matches!(
            MysqlError::Connect(server(1040)).into_store_error(db),
            StoreError::Unavailable(_)
        ));
        assert!(matches!(
            MysqlError::ConnectTimeout(Duration::from_secs(1)).into_store_error(db),
            StoreError::Unavailable(_)
        ));
        assert!(matches!(
            MysqlError::Timeout {
                operation: "database statement",
                after: Duration::from_secs(1)
            }
            .into_store_error(db),
            StoreError::Unavailable(_)
        ));
        assert!(matches!(
            MysqlError::Statement(io()).into_store_error(db),
            StoreError::Unavailable(_)
        ));
        assert!(matches!(
            MysqlError::Statement(server(1927)).into_store_error(db),
            StoreError::Unavailable(_)
        ));
        assert!(matches!(
            MysqlError::Statement(DriverFailure::Driver(DriverError::ConnectionClosed))
                .into_store_error(db),
            StoreError::Unavailable(_)
        ));
        assert!(matches!(
            MysqlError::Statement(server(1146)).into_store_error(db),
            StoreError::Query(_)
        ));
    }

    /// What the poll-failure line says: each cause once, the server's
    /// number and words where it answered, bounds in seconds.
    #[test]
    fn unavailable_says_why_once() {
        let db = "x_herald";
        let said = |e: MysqlError| webhook_core::error_chain(&e.into_store_error(db));
        let full = DriverFailure::Server(ServerError {
            code: 1040,
            message: "Too many connections".into(),
            state: "08004".into(),
        });
        assert_eq!(
            said(MysqlError::Connect(full)),
            "database unavailable: cannot connect to the database server: ERROR 1040 (08004): \
             Too many connections"
        );
        assert_eq!(
            said(MysqlError::ConnectTimeout(Duration::from_millis(2500))),
            "database unavailable: no database connection within 2.5 s"
        );
        let refused = said(MysqlError::Connect(io()));
        assert!(
            refused.starts_with(
                "database unavailable: cannot connect to the database server: \
                                 connection error: "
            ),
            "{refused}"
        );
        assert_eq!(
            refused.matches("connection refused").count(),
            1,
            "{refused}"
        );
    }

    #[test]
    fn readiness_reasons() {
        let db = "x_herald";
        let reason = |e: MysqlError| e.into_not_ready(db).to_string();
        assert_eq!(
            reason(MysqlError::Connect(server(ER_BAD_DB_ERROR))),
            "database `x_herald` does not exist yet"
        );
        assert_eq!(
            reason(MysqlError::Connect(io())),
            "database server unreachable"
        );
        assert_eq!(
            reason(MysqlError::ConnectTimeout(Duration::from_secs(1))),
            "database server unreachable"
        );
        assert_eq!(
            reason(MysqlError::Timeout {
                operation: "database statement",
                after: Duration::from_secs(1)
            }),
            "database server unreachable"
        );
        assert_eq!(
            reason(MysqlError::Connect(server(1045))),
            "database server rejected the connection: ERROR 1045 (HY000): m"
        );
        assert_eq!(
            reason(MysqlError::Statement(server(1146))),
            "database server did not answer the readiness probe"
        );
    }

    /// A failing write-back's log line (`error = %err`) says why.
    #[test]
    fn a_failed_statement_names_the_servers_code_and_message() {
        let err = MysqlError::Statement(DriverFailure::Server(ServerError {
            code: 1153,
            message: "Got a packet bigger than 'max_allowed_packet' bytes".into(),
            state: "08S01".into(),
        }))
        .into_store_error("x_herald");
        assert_eq!(
            err.to_string(),
            "database query failed: database statement failed: ERROR 1153 (08S01): Got a \
             packet bigger than 'max_allowed_packet' bytes"
        );
        let long = MysqlError::Statement(DriverFailure::Server(ServerError {
            code: 1064,
            message: format!("near '{}'", "\u{e9}".repeat(1_000)),
            state: "42000".into(),
        }));
        assert!(long.to_string().len() < REASON_MAX + 64, "{long}");
        let url = MysqlError::Statement(DriverFailure::Url(
            mysql_async::UrlError::InvalidParamValue {
                param: "password".into(),
                value: "hunter2".into(),
            },
        ));
        assert!(!url.to_string().contains("hunter2"), "{url}");
    }

    /// The dispatcher's line for a refused privilege names it, as the
    /// server did, whether a statement or the login was refused; the
    /// client's host is taken out.
    #[test]
    fn a_refusal_says_what_the_server_said() {
        let refused = |code, message: &str| {
            DriverFailure::Server(ServerError {
                code,
                message: message.into(),
                state: "42000".into(),
            })
        };
        let table = "UPDATE command denied to user 'wh'@'localhost' for table \
                     `x_herald`.`herald_webhookrequest`";
        let statement = MysqlError::Statement(refused(1142, table)).into_store_error("x_herald");
        assert_eq!(
            statement.to_string(),
            "database access denied: ERROR 1142 (42000): UPDATE command denied to user 'wh' \
             for table `x_herald`.`herald_webhookrequest`"
        );
        let database = "Access denied for user 'wh'@'%' to database 'x_herald'";
        let login = MysqlError::Connect(refused(1044, database)).into_store_error("x_herald");
        assert_eq!(
            login.to_string(),
            "database access denied: ERROR 1044 (42000): Access denied for user 'wh' to \
             database 'x_herald'"
        );
        let column = "UPDATE command denied to user 'wh'@'10.0.0.5' for column 'status' in \
                      table 'herald_webhookrequest'";
        let shared = Arc::new(MysqlError::Statement(refused(1143, column)));
        assert_eq!(
            MysqlError::shared_store_error(&shared, "x_herald").to_string(),
            "database access denied: ERROR 1143 (42000): UPDATE command denied to user 'wh' \
             for column 'status' in table 'herald_webhookrequest'"
        );
    }

    #[test]
    fn the_clients_host_is_never_shown() {
        for (message, shown) in [
            (
                "Access denied for user 'wh'@'10.1.2.3' (using password: YES)",
                "Access denied for user 'wh' (using password: YES)",
            ),
            (
                "Host '10.1.2.3' is not allowed to connect to this MariaDB server",
                "This host is not allowed to connect to this MariaDB server",
            ),
            (
                "Host 'db-client.example' is blocked because of many connection errors",
                "This host is blocked because of many connection errors",
            ),
            ("Too many connections", "Too many connections"),
            ("user 'a'@'h1' and 'b'@'h2'", "user 'a' and 'b'"),
            ("cut 'a'@'h1", "cut 'a'"),
        ] {
            assert_eq!(without_hosts(message), shown);
        }
    }

    #[test]
    fn display_says_the_reason_without_the_hosts_or_the_driver_error() {
        let err = MysqlError::Connect(DriverFailure::Server(ServerError {
            code: 1045,
            message: "Access denied for user 'wh'@'10.1.2.3' (using password: YES)".into(),
            state: "28000".into(),
        }));
        assert_eq!(
            err.to_string(),
            "cannot connect to the database server: ERROR 1045 (28000): Access denied for user \
             'wh' (using password: YES)"
        );
        assert!(std::error::Error::source(&err).is_none());
        let not_ready = err.into_not_ready("x_herald");
        assert_eq!(
            not_ready.to_string(),
            "database server rejected the connection: ERROR 1045 (28000): Access denied for \
             user 'wh' (using password: YES)"
        );
        let io = MysqlError::Connect(io()).into_not_ready("x_herald");
        assert_eq!(io.to_string(), "database server unreachable");
    }
}
