//! `MysqlStore`: the pool, the `Store` implementation over the statements
//! in [`crate::sql`], the readiness probe and the schema check.
//!
//! Each read borrows one pooled connection for one statement (the hook
//! lock keeps its connection until released); claims and write-backs go
//! through the group commit of [`crate::batch`]. Every connection and
//! statement is bounded in time ([`crate::session`]). No session variables, and
//! no transaction outlives a batch, so connections stay interchangeable.

use std::fmt;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use mysql_async::{Opts, Row, Value};
use webhook_core::{
    CandidateQuery, Claim, Hook, HookLock, QueueStats, RequestRow, ResultWrite, Store, StoreError,
    UnixTime, Written,
};

use crate::batch::{RowWrite, WriteBatcher};
use crate::candidates::{self, UnreadableRows};
use crate::config::MysqlConfig;
use crate::error::{MysqlError, NotReady};
use crate::lock::MysqlHookLock;
use crate::objects::UnreadableTables;
use crate::rows;
use crate::schema::{self, SchemaWarning};
use crate::session::{Failure, Session};
use crate::sql;

/// Phorge's herald tables on MySQL/MariaDB.
#[derive(Clone)]
pub struct MysqlStore {
    connector: Connector,
    namespace: String,
    pool_max: usize,
    batcher: Arc<OnceLock<WriteBatcher>>,
    unreadable: UnreadableTables,
    unreadable_rows: UnreadableRows,
}

/// The pool (replaced after a timeout), and the database its errors are
/// reported against; see [`crate::session`].
pub(crate) use crate::session::Connector;

// Hand-written: the pool's options hold the password.
impl fmt::Debug for MysqlStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlStore")
            .field("database", &self.connector.database)
            .field("pool_max", &self.pool_max)
            .finish()
    }
}

impl MysqlStore {
    /// Validates `config` and builds the pool. Does not connect: the first
    /// statement (or [`ready`](Self::ready)) opens the first connection.
    pub fn new(config: &MysqlConfig) -> Result<Self, MysqlError> {
        config.validate()?;
        Ok(Self {
            connector: Connector::new(
                Opts::from(config.opts()),
                config.database(),
                config.connect_timeout,
                config.statement_timeout,
            ),
            namespace: config.namespace.clone(),
            pool_max: config.pool_max,
            batcher: Arc::new(OnceLock::new()),
            unreadable: UnreadableTables::default(),
            unreadable_rows: UnreadableRows::default(),
        })
    }

    /// The herald database, `{namespace}_herald`.
    pub fn database(&self) -> &str {
        &self.connector.database
    }

    /// Phorge's namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The `GET_LOCK` name guarding deliveries to `hook_phid`.
    pub fn hook_lock_name(&self, hook_phid: &str) -> String {
        webhook_core::hook_lock_name(&self.namespace, hook_phid)
    }

    /// `(transactions, writes in them)`: how many claims and write-backs
    /// were committed in groups of two or more so far ([`crate::batch`]).
    pub fn grouped_write_counts(&self) -> (u64, u64) {
        self.batcher.get().map_or((0, 0), WriteBatcher::counts)
    }

    /// Candidate rows skipped so far because they could not be read (wider
    /// than the connection's `max_allowed_packet`), once per poll that met
    /// one ([`crate::candidates`]).
    pub fn rows_unreadable(&self) -> u64 {
        self.unreadable_rows.skipped()
    }

    /// The group-commit workers, started on first use (inside the runtime).
    fn batcher(&self) -> &WriteBatcher {
        self.batcher
            .get_or_init(|| WriteBatcher::start(self.connector.clone()))
    }

    pub(crate) async fn conn(&self) -> Result<Session, StoreError> {
        self.connector.conn().await
    }

    /// How many times a timeout replaced the connection pool so far
    /// ([`crate::session`]).
    pub fn pool_replacements(&self) -> u64 {
        self.connector.replacements()
    }

    /// Application tables recently found unreadable.
    pub(crate) fn unreadable_tables(&self) -> &UnreadableTables {
        &self.unreadable
    }

    pub(crate) fn statement_error(&self, err: impl Into<Failure>) -> StoreError {
        self.connector.statement_error(err)
    }

    fn unexpected(&self, statement: &'static str, detail: &str) -> StoreError {
        MysqlError::UnexpectedResult {
            statement,
            detail: detail.to_owned(),
        }
        .into_store_error(&self.connector.database)
    }

    /// The `/readyz` probe: a connection to the herald database and a
    /// `COM_PING` on it. Creates nothing.
    pub async fn ready(&self) -> Result<(), NotReady> {
        let mut conn = self
            .connector
            .connect()
            .await
            .map_err(|err| err.into_not_ready(&self.connector.database))?;
        conn.ping()
            .await
            .map_err(|err| err.into_not_ready(&self.connector.database))
    }

    /// The startup schema check: an error naming a missing table or its
    /// missing columns; warnings for what only costs performance (the
    /// `key_status` index). Never runs DDL.
    pub async fn check_schema(&self) -> Result<Vec<SchemaWarning>, MysqlError> {
        let mut conn =
            self.connector.connect().await.map_err(|err| {
                MysqlError::NotReady(err.into_not_ready(&self.connector.database))
            })?;
        schema::check(&mut conn, &self.connector.database).await
    }

    /// [`Store::lock_hook`] with the concrete lock type (its name and
    /// holding session are visible, for diagnostics and tests).
    pub async fn try_lock_hook(
        &self,
        hook_phid: &str,
    ) -> Result<Option<MysqlHookLock>, StoreError> {
        let conn = self.conn().await?;
        MysqlHookLock::acquire(
            conn,
            self.hook_lock_name(hook_phid),
            &self.connector.database,
        )
        .await
    }

    /// Closes the pool once every borrowed connection is back (shutdown),
    /// or fails after the statement timeout: a connection that never comes
    /// back (a half-open socket) must not hold the process.
    pub async fn disconnect(&self) -> Result<(), StoreError> {
        self.disconnect_within(self.connector.statement_timeout())
            .await
    }

    /// [`Self::disconnect`], giving up after `bound`.
    pub async fn disconnect_within(&self, bound: std::time::Duration) -> Result<(), StoreError> {
        self.connector
            .disconnect(bound)
            .await
            .map_err(|err| self.statement_error(err))
    }

    /// A single-row `COUNT(*)`-style answer.
    async fn count(&self, statement: &'static str, params: Vec<Value>) -> Result<u64, StoreError> {
        let mut conn = self.conn().await?;
        let row: Option<Row> = conn
            .exec_first(statement, params)
            .await
            .map_err(|err| self.statement_error(err))?;
        let mut row = row.ok_or_else(|| self.unexpected(statement, "no row"))?;
        rows::unsigned(&mut row, 0, "COUNT(*)", 0)
    }
}

#[async_trait]
impl Store for MysqlStore {
    async fn candidates(&self, query: &CandidateQuery) -> Result<Vec<RequestRow>, StoreError> {
        candidates::candidates(&self.connector, &self.unreadable_rows, query).await
    }

    async fn claim(&self, id: u64, seen_version: UnixTime) -> Result<Claim, StoreError> {
        let applied = self
            .batcher()
            .run(RowWrite::Claim { id, seen_version })
            .await?;
        // CLIENT_FOUND_ROWS: matched rows; the id is the primary key, so
        // this is 0 or 1.
        if applied.matched != 1 {
            return Ok(Claim::Lost);
        }
        match applied.last_insert_id {
            Some(version) if version > seen_version => Ok(Claim::Won(version)),
            other => Err(MysqlError::UnexpectedResult {
                statement: "claim",
                detail: format!("won, but reported the version {other:?} (seen {seen_version})"),
            }
            .into_store_error(&self.connector.database)),
        }
    }

    async fn write_result(&self, write: &ResultWrite) -> Result<Written, StoreError> {
        let applied = self.batcher().run(RowWrite::Result(write.clone())).await?;
        Ok(if applied.matched == 0 {
            Written::Skipped
        } else {
            Written::Yes
        })
    }

    async fn hook(&self, phid: &str) -> Result<Option<Hook>, StoreError> {
        let mut conn = self.conn().await?;
        let row: Option<Row> = conn
            .exec_first(sql::HOOK, (phid,))
            .await
            .map_err(|err| self.statement_error(err))?;
        row.map(rows::hook).transpose()
    }

    async fn breaker_failures(&self, hook_phid: &str, since: UnixTime) -> Result<u64, StoreError> {
        self.count(sql::BREAKER_FAILURES, vec![hook_phid.into(), since.into()])
            .await
    }

    async fn claims_in_flight(
        &self,
        hook_phid: &str,
        lease_cutoff: UnixTime,
    ) -> Result<u64, StoreError> {
        self.count(
            sql::CLAIMS_IN_FLIGHT,
            vec![hook_phid.into(), lease_cutoff.into()],
        )
        .await
    }

    async fn lock_hook(&self, hook_phid: &str) -> Result<Option<Box<dyn HookLock>>, StoreError> {
        Ok(self
            .try_lock_hook(hook_phid)
            .await?
            .map(|lock| Box::new(lock) as Box<dyn HookLock>))
    }

    async fn stats(&self) -> Result<QueueStats, StoreError> {
        let mut conn = self.conn().await?;
        let row: Option<Row> = conn
            .exec_first(sql::STATS, ())
            .await
            .map_err(|err| self.statement_error(err))?;
        let mut row = row.ok_or_else(|| self.unexpected("stats", "no row"))?;
        Ok(QueueStats {
            queued: rows::unsigned(&mut row, 0, "queued count", 0)?,
            sent: rows::unsigned(&mut row, 1, "sent count", 0)?,
            failed: rows::unsigned(&mut row, 2, "failed count", 0)?,
            active_hooks: rows::unsigned(&mut row, 3, "active hook count", 0)?,
        })
    }

    async fn hook_count(&self) -> Result<u64, StoreError> {
        self.count(sql::HOOK_COUNT, Vec::new()).await
    }
}
