//! The attempt history: every delivery attempt
//! ([`webhook_core::history::Attempt`]), kept in a database of the
//! daemon's own on Phorge's server (`{namespace}_webhook_history` unless
//! named), never in one of Phorge's.
//!
//! * [`HistoryConfig`] and its variables ([`config::VARIABLES`]).
//! * [`MysqlHistory`], what the daemon builds when the history is on: its
//!   own small pool, with no default database, over the daemon's account.
//!   [`MysqlHistory::prepare`] creates the database and applies the
//!   schema's migrations (`schema`), then checks the privileges writing
//!   and pruning need; [`MysqlHistory::queue`] is the
//!   [`webhook_core::history::AttemptLog`] the dispatcher records into;
//!   [`MysqlHistory::enforce_retention`] prunes by age and by count
//!   (`retention`).
//! * [`HistoryQueue`] (`writer`): `record` queues in memory and returns;
//!   a [`crate::MysqlStore`] given the queue
//!   ([`crate::MysqlStore::with_history`]) has its group-commit workers
//!   wake the queue's writer after each batch, once the batch's replies
//!   are sent, so no delivery ever waits on, fails with, or repeats for
//!   the history; the writer yields to delivery, writing once it pauses
//!   (`pacing`). A write that fails drops its attempts, counted and
//!   reported ([`HistoryQueue::failing`]).
//! * [`HistoryReader`] (`query`), read-only, on a [`crate::MysqlReader`]'s
//!   pool ([`crate::MysqlReader::history`]): the attempts a query asks
//!   for, newest first.

pub mod config;
mod pacing;
mod query;
mod retention;
mod schema;
mod writer;

use std::fmt;

use mysql_async::Opts;
use webhook_core::StoreError;

pub use config::HistoryConfig;
pub use query::HistoryReader;
pub use retention::RetentionPass;
pub use schema::{HISTORY_SCHEMA_VERSION, MIGRATIONS};
pub use writer::{HistoryQueue, HistoryTotals, CHUNK_ROWS};

use crate::config::MysqlConfig;
use crate::connector::Connector;
use crate::error::MysqlError;

/// Connections of the history's own pool: its writer's, and one for
/// preparing and pruning beside it. Apart from delivery's pool, so a slow
/// or failing history never holds, times out or replaces a connection a
/// claim or a write-back needs.
const POOL_MAX: usize = 2;

/// The table every attempt is a row of.
pub(crate) const ATTEMPT_TABLE: &str = "attempt";

/// `database` quoted for a statement (the name is checked to be letters,
/// digits and `_`; quoting keeps any other name harmless too).
pub(crate) fn quoted(database: &str) -> String {
    format!("`{}`", database.replace('`', "``"))
}

/// `database`.`attempt`, quoted.
pub(crate) fn attempt_table(database: &str) -> String {
    format!("{}.`{ATTEMPT_TABLE}`", quoted(database))
}

/// Why the history cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The database's schema is newer than this daemon knows: a newer
    /// daemon migrated it, and this one will not write what it may no
    /// longer understand.
    #[error(
        "the attempt history database `{database}` is at schema version {found}, newer \
         than the newest this daemon knows ({known}); upgrade the daemon, or name another \
         database in GORGE_WEBHOOK_HISTORY_DATABASE"
    )]
    TooNew {
        /// The history database.
        database: String,
        /// The version the database records.
        found: u32,
        /// The newest version this build knows.
        known: u32,
    },
    /// The account lacks privileges the history needs, each named
    /// `PRIVILEGE on db.table` (or `CREATE on db`).
    #[error(
        "the database account lacks what the attempt history needs: {}; grant it, or turn \
         GORGE_WEBHOOK_HISTORY off",
        .0.join(", ")
    )]
    Privileges(Vec<String>),
    /// The database could not be asked or changed.
    #[error("attempt history: {0}")]
    Store(#[from] StoreError),
}

impl HistoryError {
    /// Whether only an operator can mend it: a schema newer than this
    /// build, a privilege the account lacks (named, or refused by the
    /// server). Anything else — the server away, another instance's
    /// migration holding the lock, a lock wait — may pass if tried again.
    pub fn needs_operator(&self) -> bool {
        matches!(
            self,
            Self::TooNew { .. } | Self::Privileges(_) | Self::Store(StoreError::Denied(_))
        )
    }
}

/// The attempt history as the daemon runs it: preparation, the queue its
/// dispatcher records into, and retention. Clones share one pool and one
/// queue.
#[derive(Clone)]
pub struct MysqlHistory {
    connector: Connector,
    config: HistoryConfig,
    queue: HistoryQueue,
}

// Hand-written: the pool's options hold the password.
impl fmt::Debug for MysqlHistory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlHistory")
            .field("config", &self.config)
            .field("queue", &self.queue)
            .finish()
    }
}

impl MysqlHistory {
    /// Validates both configurations and builds a lazy pool of its own on
    /// `mysql`'s server and account, with no default database (the
    /// history's may not exist yet). `instance` names this daemon in each
    /// attempt it records (`host:pid`). Does not connect.
    pub fn new(
        mysql: &MysqlConfig,
        config: HistoryConfig,
        instance: impl Into<String>,
    ) -> Result<Self, MysqlError> {
        mysql.validate()?;
        config.validate()?;
        let own = MysqlConfig {
            pool_max: POOL_MAX,
            ..mysql.clone()
        };
        let opts = own.opts().db_name(None::<String>);
        let connector = Connector::new(
            Opts::from(opts),
            config.database.clone(),
            mysql.connect_timeout,
            mysql.statement_timeout,
        );
        Ok(Self {
            queue: HistoryQueue::new(&config, instance, connector.clone()),
            connector,
            config,
        })
    }

    /// The history's database.
    pub fn database(&self) -> &str {
        &self.config.database
    }

    /// What it keeps.
    pub fn config(&self) -> &HistoryConfig {
        &self.config
    }

    /// The queue attempts are recorded into; hand it to the store
    /// ([`crate::MysqlStore::with_history`]), which writes it.
    pub fn queue(&self) -> HistoryQueue {
        self.queue.clone()
    }

    /// Creates the database if missing, applies the schema's missing
    /// migrations (once, however many instances start at once), refuses a
    /// schema newer than this build knows, and checks the privileges
    /// writing and pruning need (see `schema`). Run it before the first
    /// attempt is recorded, and again after the database was lost.
    pub async fn prepare(&self) -> Result<(), HistoryError> {
        schema::prepare(&self.connector, &self.config).await
    }

    /// Closes the pool, bounded by the statement timeout.
    pub async fn disconnect(&self) -> Result<(), StoreError> {
        self.connector
            .disconnect(self.connector.statement_timeout())
            .await
    }
}
