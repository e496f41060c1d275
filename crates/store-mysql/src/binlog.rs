//! Follows the server's binary log for rows added to the request table
//! (`GORGE_WEBHOOK_WAKE_BINLOG`), and turns each into a
//! [`WakeHints::notify`]: a new row is then noticed as soon as the server
//! logs it, at no statement per idle second.
//!
//! It registers as a replica with a random server id (so several
//! instances never take each other's stream), starts at the log's current
//! end, asks for a heartbeat every [`HEARTBEAT`], and reads. An insert
//! into `{namespace}_herald.herald_webhookrequest` is a hint, as a
//! statement (`binlog_format` `STATEMENT` or `MIXED`) or as rows (`ROW`);
//! updates, deletes and every other table are not (MariaDB's compressed
//! events, which the driver cannot read, all are). Nothing it reads is
//! trusted beyond that: the poll still decides what is delivered.
//!
//! When the log cannot be followed — it is off or leaves the herald
//! database out, the account lacks `REPLICATION SLAVE` or the right to
//! read the log's position, the connection is lost, or the server stays
//! silent past three heartbeats —
//! it says so once, marks the hints as not following (the dispatcher's
//! probe takes over at once), and tries again: after a [`HEARTBEAT`] when
//! a followed stream ended, every [`RETRY_EVERY`] while one cannot be
//! opened, so a grant restored or a log turned on is followed within that
//! bound.

use std::collections::HashSet;
use std::convert::Infallible;
use std::hash::{BuildHasher, RandomState};
use std::time::{Duration, Instant};

use futures::StreamExt;
use mysql_async::binlog::events::{Event, EventData, RowsEventData};
use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStream, BinlogStreamRequest, Conn, Opts, Row};
use tracing::info;
use webhook_core::WakeHints;

use crate::config::MysqlConfig;
use crate::error::{is_privilege_error, server_words, MysqlError};
use crate::schema::REQUEST_TABLE;

/// How often the server is asked to send a heartbeat while it logs
/// nothing.
pub const HEARTBEAT: Duration = Duration::from_secs(1);

/// How long a silent stream is trusted: three heartbeats.
const SILENCE_LIMIT: Duration = Duration::from_secs(3);

/// How long after the log could not be followed it is tried again.
pub const RETRY_EVERY: Duration = Duration::from_secs(30);

/// What the replica registration says its host is, for `SHOW SLAVE HOSTS`.
const REPLICA_NAME: &[u8] = b"gorge-webhook";

/// MySQL's "You have an error in your SQL syntax": `SHOW MASTER STATUS`
/// is gone (MySQL 8.4 renamed it).
const ER_PARSE_ERROR: u16 = 1064;

/// Why the log is not being followed.
#[derive(Debug, thiserror::Error)]
pub enum NotFollowing {
    /// The server keeps no binary log.
    #[error("the server's binary log is off (log_bin = 0)")]
    LogOff,
    /// The log leaves the herald database out (`binlog_do_db`,
    /// `binlog_ignore_db`).
    #[error("the server's binary log leaves {0} out (binlog_do_db / binlog_ignore_db)")]
    Filtered(String),
    /// Connecting or a statement failed, or the server refused a
    /// privilege.
    #[error(transparent)]
    Database(#[from] MysqlError),
    /// Neither an event nor a heartbeat came for this long.
    #[error("the binary log stream was silent for {}s", .0.as_secs())]
    Silent(Duration),
    /// The server ended the stream.
    #[error("the server ended the binary log stream")]
    Ended,
}

/// Follows the binary log for as long as it runs, feeding `hints`.
pub struct BinlogFollower {
    opts: Opts,
    database: String,
    connect_timeout: Duration,
    statement_timeout: Duration,
    retry_every: Duration,
    hints: WakeHints,
}

// By hand: the options hold the password.
impl std::fmt::Debug for BinlogFollower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BinlogFollower")
            .field("database", &self.database)
            .field("retry_every", &self.retry_every)
            .field("hints", &self.hints)
            .finish_non_exhaustive()
    }
}

impl BinlogFollower {
    /// A follower of the server `config` names, for its herald database.
    pub fn new(config: &MysqlConfig, hints: WakeHints) -> Self {
        Self {
            opts: Opts::from(config.opts()),
            database: config.database(),
            connect_timeout: config.connect_timeout,
            statement_timeout: config.statement_timeout,
            retry_every: RETRY_EVERY,
            hints,
        }
    }

    /// Tries again this long after the log could not be followed, instead
    /// of [`RETRY_EVERY`] (for tests).
    pub fn retrying_every(mut self, every: Duration) -> Self {
        self.retry_every = every;
        self
    }

    /// Follows, and follows again after every failure, until dropped
    /// (when dropped or if it panicked, the hints stop following, so the
    /// probe never rests on a follower that is gone).
    pub async fn run(self) {
        let _stopped = NotFollowingWhenDropped(self.hints.clone());
        let mut log = FollowLog::default();
        loop {
            let started = Instant::now();
            let Err(reason) = self.follow(&mut log).await;
            // A stream that was followed and ended (a server restart, a
            // killed session) is opened again a heartbeat later; one that
            // could not be opened waits the retry spacing.
            let pause = if self.hints.following() {
                HEARTBEAT
            } else {
                self.retry_every
            };
            self.hints.set_following(false);
            log.stopped(&reason.to_string(), started.elapsed(), pause);
            tokio::time::sleep(pause).await;
        }
    }

    /// Whether the log can be followed now: opens a stream and reads its
    /// first event (what `webhook-admin doctor` asks).
    pub async fn check(&self) -> Result<(), NotFollowing> {
        let mut stream = self.open(&self.database).await?;
        next_event(&mut stream).await.map(drop)
    }

    /// Opens the stream and reads it until it fails.
    async fn follow(&self, log: &mut FollowLog) -> Result<Infallible, NotFollowing> {
        let mut stream = self.open(&self.database).await?;
        let mut inserts = RequestInserts::new(&self.database);
        loop {
            let event = next_event(&mut stream).await?;
            if !self.hints.following() {
                log.following(&self.database);
                self.hints.set_following(true);
            }
            if inserts.adds_a_request(&event) {
                self.hints.notify();
            }
        }
    }

    /// A stream from the log's end, within the statement timeout.
    async fn open(&self, database: &str) -> Result<BinlogStream, NotFollowing> {
        let conn = self.connect().await?;
        let setup = tokio::time::timeout(self.statement_timeout, start_stream(conn, database));
        setup.await.map_err(|_| MysqlError::Timeout {
            operation: "starting the binary log stream",
            after: self.statement_timeout,
        })?
    }

    async fn connect(&self) -> Result<Conn, MysqlError> {
        match tokio::time::timeout(self.connect_timeout, Conn::new(self.opts.clone())).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(err)) => Err(MysqlError::Connect(err)),
            Err(_elapsed) => Err(MysqlError::ConnectTimeout(self.connect_timeout)),
        }
    }
}

/// Marks the hints not following when the follower's task ends.
struct NotFollowingWhenDropped(WakeHints);

impl Drop for NotFollowingWhenDropped {
    fn drop(&mut self) {
        self.0.set_following(false);
    }
}

/// What the follower has said, so a stream that keeps dropping is told
/// once, not at every reconnect: a reason is said again only after it
/// changed or after the stream was followed for [`STEADY`].
#[derive(Default)]
struct FollowLog {
    /// The last reason said, until a steady stream clears it.
    said: Option<String>,
    /// Following was said since the last reason.
    said_following: bool,
}

/// How long a followed stream must last before its end is news again.
const STEADY: Duration = Duration::from_secs(60);

impl FollowLog {
    fn following(&mut self, database: &str) {
        if !self.said_following {
            info!(event = "binlog_wake_following", database = %database,
                "new rows are noticed as the server logs them");
            self.said_following = true;
        }
    }

    fn stopped(&mut self, reason: &str, lasted: Duration, retry: Duration) {
        if lasted >= STEADY {
            self.said = None;
        }
        if self.said.as_deref() == Some(reason) {
            return;
        }
        info!(event = "binlog_wake_unavailable", reason = %reason, retry_secs = retry.as_secs(),
            "new rows are noticed by the wake-up probe until the binary log can be followed");
        self.said = Some(reason.to_owned());
        self.said_following = false;
    }
}

/// The stream's next event, within [`SILENCE_LIMIT`].
async fn next_event(stream: &mut BinlogStream) -> Result<Event, NotFollowing> {
    match tokio::time::timeout(SILENCE_LIMIT, stream.next()).await {
        Err(_) => Err(NotFollowing::Silent(SILENCE_LIMIT)),
        Ok(None) => Err(NotFollowing::Ended),
        Ok(Some(read)) => Ok(read.map_err(driver_failure)?),
    }
}

/// Checks the log is on and keeps `database`, reads where it ends, asks
/// for heartbeats and turns `conn` into a stream from there.
async fn start_stream(mut conn: Conn, database: &str) -> Result<BinlogStream, NotFollowing> {
    let log_bin: Option<Row> = conn
        .query_first("SELECT @@log_bin")
        .await
        .map_err(driver_failure)?;
    let on = log_bin.and_then(|mut row| row.take_opt::<u8, _>(0)?.ok()) == Some(1);
    if !on {
        return Err(NotFollowing::LogOff);
    }
    let end = log_end(&mut conn).await?;
    if !end.keeps(database) {
        return Err(NotFollowing::Filtered(database.to_owned()));
    }
    // MySQL 8.4 reads the newer name; every server ignores the other.
    let heartbeat_ns = HEARTBEAT.as_nanos();
    conn.query_drop(format!(
        "SET @master_heartbeat_period = {heartbeat_ns}, @source_heartbeat_period = {heartbeat_ns}"
    ))
    .await
    .map_err(driver_failure)?;
    let request = BinlogStreamRequest::new(replica_server_id())
        .with_filename(end.file.as_bytes())
        .with_pos(end.position)
        .with_hostname(REPLICA_NAME);
    let stream = conn.get_binlog_stream(request).await;
    stream.map_err(|err| driver_failure(err).into())
}

/// Where the log ends now, and which databases it keeps.
struct LogEnd {
    file: String,
    position: u64,
    /// `binlog_do_db`: only these, when any.
    only: Vec<String>,
    /// `binlog_ignore_db`: never these.
    ignored: Vec<String>,
}

impl LogEnd {
    /// Whether writes to `database` reach the log.
    fn keeps(&self, database: &str) -> bool {
        let named = |list: &[String]| list.iter().any(|d| d.eq_ignore_ascii_case(database));
        (self.only.is_empty() || named(&self.only)) && !named(&self.ignored)
    }
}

/// The current log file, the position of its end and its filters.
async fn log_end(conn: &mut Conn) -> Result<LogEnd, NotFollowing> {
    let status: Result<Option<Row>, _> = conn.query_first("SHOW MASTER STATUS").await;
    let status = match status {
        Err(mysql_async::Error::Server(err)) if err.code == ER_PARSE_ERROR => {
            conn.query_first("SHOW BINARY LOG STATUS").await
        }
        other => other,
    };
    let Some(mut row) = status.map_err(driver_failure)? else {
        return Err(NotFollowing::LogOff);
    };
    let mut text = |column: &str| row.take_opt::<String, _>(column).and_then(Result::ok);
    let list = |value: Option<String>| -> Vec<String> {
        value
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|d| !d.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let (file, only, ignored) = (
        text("File"),
        list(text("Binlog_Do_DB")),
        list(text("Binlog_Ignore_DB")),
    );
    let position = row.take_opt::<u64, _>("Position").and_then(Result::ok);
    match (file, position) {
        (Some(file), Some(position)) => Ok(LogEnd {
            file,
            position,
            only,
            ignored,
        }),
        _ => Err(MysqlError::UnexpectedResult {
            statement: "SHOW MASTER STATUS",
            detail: format!("no File and Position in {row:?}"),
        }
        .into()),
    }
}

/// A driver error as the crate reports it: a refused privilege in the
/// server's words, anything else as a failed statement.
fn driver_failure(err: mysql_async::Error) -> MysqlError {
    match &err {
        mysql_async::Error::Server(server) if is_privilege_error(&err) => {
            MysqlError::Refused(server_words(server))
        }
        _ => MysqlError::Statement(err),
    }
}

/// A server id in the upper half of the range, different for every
/// stream: a primary drops a replica's stream when another registers with
/// the same id, and real replicas are numbered from 1.
fn replica_server_id() -> u32 {
    let random = RandomState::new().hash_one(std::process::id());
    (random as u32) | 0x8000_0000
}

/// MariaDB's compressed events (`log_bin_compress`) that may insert: a
/// statement, and written rows in both versions.
const MARIADB_COMPRESSED_INSERTS: [u8; 3] = [165, 166, 169];

/// Which logged events add a row to the request table: an insert as a
/// statement (`binlog_format` `STATEMENT`, `MIXED`) or as rows (`ROW`).
/// Read the events of one stream in order: rows name their table through
/// the table map before them.
#[derive(Debug)]
pub struct RequestInserts {
    database: String,
    /// Table ids the server mapped to the request table.
    request_table_ids: HashSet<u64>,
}

impl RequestInserts {
    /// For the request table of the herald database `database`.
    pub fn new(database: &str) -> Self {
        Self {
            database: database.to_ascii_lowercase(),
            request_table_ids: HashSet::new(),
        }
    }

    /// Whether `event` adds a row to the request table. An event the
    /// driver cannot read is no hint.
    pub fn adds_a_request(&mut self, event: &Event) -> bool {
        if MARIADB_COMPRESSED_INSERTS.contains(&event.header().event_type_raw()) {
            // MariaDB's `log_bin_compress`: the driver cannot read what it
            // names, so any compressed insert or statement may be ours.
            return true;
        }
        match event.read_data() {
            Ok(Some(EventData::TableMapEvent(map))) => {
                let ours = map
                    .database_name_raw()
                    .eq_ignore_ascii_case(self.database.as_bytes())
                    && map
                        .table_name_raw()
                        .eq_ignore_ascii_case(REQUEST_TABLE.as_bytes());
                if ours {
                    self.request_table_ids.insert(map.table_id());
                } else {
                    self.request_table_ids.remove(&map.table_id());
                }
                false
            }
            Ok(Some(EventData::RowsEvent(rows))) => {
                matches!(
                    rows,
                    RowsEventData::WriteRowsEventV1(_) | RowsEventData::WriteRowsEvent(_)
                ) && self.request_table_ids.contains(&rows.table_id())
            }
            Ok(Some(EventData::QueryEvent(query))) => {
                self.inserts_a_request(query.schema_raw(), query.query_raw())
            }
            _ => false,
        }
    }

    /// Whether a logged statement, run with `schema` as its default
    /// database, inserts into the request table.
    fn inserts_a_request(&self, schema: &[u8], statement: &[u8]) -> bool {
        let Some((database, table)) = insert_target(statement) else {
            return false;
        };
        let ours = match database {
            Some(database) => database.eq_ignore_ascii_case(&self.database),
            None => schema.eq_ignore_ascii_case(self.database.as_bytes()),
        };
        ours && table.eq_ignore_ascii_case(REQUEST_TABLE)
    }
}

/// The table a logged `INSERT` or `REPLACE` writes to: its database, if
/// the statement names one, and its name. `None` for any other statement
/// (an `INSERT … SELECT` reading the request table writes elsewhere).
fn insert_target(statement: &[u8]) -> Option<(Option<String>, String)> {
    const MODIFIERS: [&str; 5] = ["low_priority", "delayed", "high_priority", "ignore", "into"];
    let mut words = Words(statement);
    let (verb, _) = words.identifier()?;
    if !(verb.eq_ignore_ascii_case("insert") || verb.eq_ignore_ascii_case("replace")) {
        return None;
    }
    let mut name = words.identifier()?;
    while !name.1 && MODIFIERS.iter().any(|m| name.0.eq_ignore_ascii_case(m)) {
        name = words.identifier()?;
    }
    if words.dot() {
        let (table, _) = words.identifier()?;
        Some((Some(name.0), table))
    } else {
        Some((None, name.0))
    }
}

/// What is left of a statement, read a name at a time.
struct Words<'a>(&'a [u8]);

impl Words<'_> {
    /// The next name, bare or in backticks, and whether it was quoted.
    fn identifier(&mut self) -> Option<(String, bool)> {
        let text = self.0.trim_ascii_start();
        let (name, rest, quoted) = match text.strip_prefix(b"`") {
            Some(quoted) => {
                let end = quoted.iter().position(|&b| b == b'`')?;
                (&quoted[..end], &quoted[end + 1..], true)
            }
            None => {
                let bare = |b: &u8| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'$';
                let end = text.iter().position(|b| !bare(b)).unwrap_or(text.len());
                (&text[..end], &text[end..], false)
            }
        };
        self.0 = rest;
        (!name.is_empty()).then(|| (String::from_utf8_lossy(name).into_owned(), quoted))
    }

    /// Takes a `.` between a database and a table name, if next.
    fn dot(&mut self) -> bool {
        let text = self.0.trim_ascii_start();
        match text.strip_prefix(b".") {
            Some(rest) => {
                self.0 = rest;
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_inserts_into_the_request_table_of_this_database_are_hints() {
        let watch = RequestInserts::new("phorge_herald");
        let ours = b"phorge_herald".as_slice();
        let hint = |schema: &[u8], sql: &str| watch.inserts_a_request(schema, sql.as_bytes());
        assert!(hint(
            ours,
            "INSERT INTO `herald_webhookrequest` (a) VALUES (1)"
        ));
        assert!(hint(
            ours,
            "  insert into herald_webhookrequest (a) values (1)"
        ));
        assert!(hint(
            b"",
            "INSERT INTO `phorge_herald`.`herald_webhookrequest` (a) VALUES (1)"
        ));
        assert!(hint(
            b"phorge_user",
            "REPLACE INTO phorge_herald.herald_webhookrequest VALUES ()"
        ));
        assert!(!hint(
            ours,
            "UPDATE herald_webhookrequest SET status = 'sent'"
        ));
        assert!(!hint(ours, "INSERT INTO herald_transcript (a) VALUES (1)"));
        assert!(!hint(
            b"other_herald",
            "INSERT INTO herald_webhookrequest (a) VALUES (1)"
        ));
        assert!(hint(ours, "INSERT IGNORE herald_webhookrequest VALUES ()"));
        assert!(!hint(
            ours,
            "INSERT INTO o.herald_webhookrequest SELECT * FROM herald_webhookrequest"
        ));
        assert!(!hint(
            b"phorge_herald",
            "INSERT INTO `herald_webhookrequest_old` VALUES ()"
        ));
        assert!(!hint(ours, "BEGIN"));
        assert!(!hint(ours, ""));
    }

    #[test]
    fn server_ids_are_in_the_upper_half_and_differ() {
        let (a, b) = (replica_server_id(), replica_server_id());
        assert!(a >= 0x8000_0000 && b >= 0x8000_0000);
        assert_ne!(a, b);
    }
}
