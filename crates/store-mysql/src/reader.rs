//! `MysqlReader`: Phorge's tables, read-only by construction. Everything
//! the operator's tool (`webhook-admin`) asks the database goes through
//! it: one request row, a hook's queued rows before one, a hook, the
//! queue's counts, per-hook summaries, the breaker's failure epochs, who
//! holds a hook's lock, readiness, the server's clock, the schema check,
//! the privileges delivery needs (its statements under `EXPLAIN`), the
//! object check
//! ([`webhook_core::PhorgeObjects`]) and the hand-off reads (silent mode,
//! leftover PHP delivery tasks).
//!
//! It has no method that writes, claims or locks, and holds nothing that
//! could: no group-commit workers, no `Store` implementation. The daemon's
//! [`crate::MysqlStore`] is built on one and adds the writes.

use std::fmt;

use async_trait::async_trait;
use mysql_async::{Opts, Value};
use webhook_core::hold::{ConfigUnreadable, PhorgeConfig};
use webhook_core::{
    CandidateQuery, DueRow, Hook, ObjectLookup, PhorgeObjects, QueueStats, RequestRow, StoreError,
    UnixTime,
};

use crate::config::MysqlConfig;
use crate::connector::Connector;
use crate::error::{MysqlError, NotReady};
use crate::grants;
use crate::handoff::{self, PhpDeliveryTasks, TaskRunners};
use crate::object_tables::ObjectTables;
use crate::objects::{self, UnreadableTables};
use crate::queued_floor::QueuedFloor;
use crate::reads::{self, HookSummary};
use crate::rows;
use crate::schema::{self, SchemaWarning};
use crate::server_time::{self, ServerTimeReading};
use crate::sql;

/// Read-only access to Phorge's herald tables (and, for the hand-off and
/// the object check, its config, worker and application tables): plain
/// `SELECT`s, a ping and `IS_USED_LOCK`; never a write, a claim or a lock.
/// Clones share one pool.
#[derive(Clone)]
pub struct MysqlReader {
    connector: Connector,
    namespace: String,
    unreadable: UnreadableTables,
}

// Hand-written: the pool's options hold the password.
impl fmt::Debug for MysqlReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlReader")
            .field("database", &self.connector.database)
            .finish()
    }
}

impl MysqlReader {
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
            unreadable: UnreadableTables::default(),
        })
    }

    /// The pools, shared with the store built on this reader.
    pub(crate) fn connector(&self) -> &Connector {
        &self.connector
    }

    /// The herald database, `{namespace}_herald`.
    pub fn database(&self) -> &str {
        &self.connector.database
    }

    /// Phorge's namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Phorge's task queue, `database.table`, as the log names it.
    pub fn task_queue_table(&self) -> String {
        sql::task_queue_table(&self.namespace)
    }

    /// The `GET_LOCK` name guarding deliveries to `hook_phid`.
    pub fn hook_lock_name(&self, hook_phid: &str) -> String {
        webhook_core::hook_lock_name(&self.namespace, hook_phid)
    }

    /// How many times a timeout replaced the connection pool so far
    /// (`session`).
    pub fn pool_replacements(&self) -> u64 {
        self.connector.replacements()
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

    /// The server's clock, read between two readings of this host's
    /// monotonic clock (`SERVER_TIME` in `sql`): what the daemon's clock runs
    /// on, and what `webhook-admin doctor` measures this host's skew by.
    pub async fn server_time(&self) -> Result<ServerTimeReading, StoreError> {
        server_time::read(&self.connector).await
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

    /// Closes the pool once every borrowed connection is back, or fails
    /// after the statement timeout: a connection that never comes back (a
    /// half-open socket) must not hold the process.
    pub async fn disconnect(&self) -> Result<(), StoreError> {
        self.disconnect_within(self.connector.statement_timeout())
            .await
    }

    /// [`Self::disconnect`], giving up after `bound`.
    pub async fn disconnect_within(&self, bound: std::time::Duration) -> Result<(), StoreError> {
        self.connector.disconnect(bound).await
    }

    /// The request row with this id, if any (`sql::REQUEST_BY_ID`).
    pub async fn request_by_id(&self, id: u64) -> Result<Option<RequestRow>, StoreError> {
        reads::request(&self.connector, sql::REQUEST_BY_ID, Value::from(id)).await
    }

    /// The request row with this PHID, if any (`sql::REQUEST_BY_PHID`).
    pub async fn request_by_phid(&self, phid: &str) -> Result<Option<RequestRow>, StoreError> {
        reads::request(&self.connector, sql::REQUEST_BY_PHID, Value::from(phid)).await
    }

    /// The hook with this PHID, if any, as `Store::hook` reads it.
    pub async fn hook(&self, phid: &str) -> Result<Option<Hook>, StoreError> {
        reads::hook(&self.connector, phid).await
    }

    /// Queue counts, as `Store::stats` reads them.
    pub async fn stats(&self) -> Result<QueueStats, StoreError> {
        reads::stats(&self.connector).await
    }

    /// The PHIDs of the hooks that are not disabled, lowest id first.
    pub async fn callable_hook_phids(&self) -> Result<Vec<String>, StoreError> {
        let rows = self.connector.all_rows(sql::CALLABLE_HOOKS, ()).await?;
        rows.into_iter()
            .map(|mut row| {
                let id = rows::unsigned(&mut row, 0, "id", 0)?;
                rows::text(&mut row, 1, "phid", id)
            })
            .collect()
    }

    /// The candidates due longest, as `QueueCounts::longest_due` reads them,
    /// through a scan floor of its own: built afresh for this one read (on
    /// Phorge's stock schema, one scan of the table), as an operator's
    /// command reads it once.
    pub async fn longest_due(&self, query: &CandidateQuery) -> Result<Vec<DueRow>, StoreError> {
        reads::longest_due(&self.connector, &QueuedFloor::default(), query).await
    }

    /// The request table's highest id, as `Store::newest_id` reads it.
    pub async fn newest_id(&self) -> Result<u64, StoreError> {
        reads::count(&self.connector, sql::NEWEST_ID, Vec::new()).await
    }

    /// Number of hooks, as `Store::hook_count` reads it.
    pub async fn hook_count(&self) -> Result<u64, StoreError> {
        reads::count(&self.connector, sql::HOOK_COUNT, Vec::new()).await
    }

    /// Every hook, lowest id first, with its queued and failed row counts
    /// and the breaker's count of failed rows with `lastRequestEpoch >=
    /// since` (pass `Breaker::since(now)` for the daemon's view).
    pub async fn hook_summaries(&self, since: UnixTime) -> Result<Vec<HookSummary>, StoreError> {
        reads::hook_summaries(&self.connector, since).await
    }

    /// The `lastRequestEpoch` of each row the breaker counts for this hook
    /// (`fail`, epoch `>= since`), oldest first. Its length is what
    /// `Store::breaker_failures` returns for the same arguments.
    pub async fn breaker_failure_epochs(
        &self,
        hook_phid: &str,
        since: UnixTime,
    ) -> Result<Vec<UnixTime>, StoreError> {
        reads::breaker_failure_epochs(&self.connector, hook_phid, since).await
    }

    /// Up to `limit` queued rows of `hook_phid` with ids below `id`, lowest
    /// id first: the rows a run of the hook takes before that one.
    pub async fn queued_before(
        &self,
        hook_phid: &str,
        id: u64,
        limit: u64,
    ) -> Result<Vec<RequestRow>, StoreError> {
        reads::queued_before(&self.connector, hook_phid, id, limit).await
    }

    /// `Store::breaker_failures`: how many rows the breaker counts.
    pub(crate) async fn breaker_failures(
        &self,
        hook_phid: &str,
        since: UnixTime,
    ) -> Result<u64, StoreError> {
        let params = vec![hook_phid.into(), since.into()];
        reads::count(&self.connector, sql::BREAKER_FAILURES, params).await
    }

    /// `Store::claims_in_flight`: rows of the hook claimed within their
    /// lease and not written since.
    pub(crate) async fn claims_in_flight(
        &self,
        hook_phid: &str,
        lease_cutoff: UnixTime,
    ) -> Result<u64, StoreError> {
        let params = vec![hook_phid.into(), lease_cutoff.into()];
        reads::count(&self.connector, sql::CLAIMS_IN_FLIGHT, params).await
    }

    /// The server session holding this hook's lock (Phorge's `GET_LOCK`
    /// name), or `None` when it is free. Looks only; takes nothing.
    pub async fn hook_lock_holder(&self, hook_phid: &str) -> Result<Option<u64>, StoreError> {
        reads::lock_holder(&self.connector, self.hook_lock_name(hook_phid)).await
    }

    /// Counts `HeraldWebhookWorker` tasks in Phorge's task queue. Any means
    /// PHP delivery was not switched off and receivers get every request
    /// twice.
    pub async fn php_delivery_tasks(&self) -> Result<PhpDeliveryTasks, StoreError> {
        handoff::php_delivery_tasks(&self.connector, &self.namespace).await
    }

    /// Who ran the last `limit` archived `HeraldWebhookWorker` tasks: a
    /// daemon (task adoption) or `phd`'s taskmasters.
    pub async fn recent_task_runners(&self, limit: u64) -> Result<TaskRunners, StoreError> {
        handoff::recent_task_runners(&self.connector, &self.namespace, limit).await
    }

    /// The privileges delivery needs that the account lacks, each as
    /// `PRIVILEGE on db.table`; empty when it has them all. Each statement
    /// delivery runs on the herald tables is checked under `EXPLAIN`
    /// ([`crate::grants`]), which runs nothing. A check failing for
    /// another reason (a missing table, the server away, the login
    /// refused) is an error.
    pub async fn delivery_grants_missing(&self) -> Result<Vec<String>, StoreError> {
        grants::missing(
            &self.connector,
            &sql::delivery_grant_probes(&self.namespace),
        )
        .await
    }

    /// Whether this account can read a PHID type's object and transaction
    /// tables: `Err` names the first `database.table` it cannot (for
    /// `webhook-admin doctor`).
    pub async fn object_tables_readable(
        &self,
        tables: &ObjectTables,
    ) -> Result<Result<(), String>, StoreError> {
        objects::tables_readable(&self.connector, &self.namespace, tables).await
    }
}

#[async_trait]
impl PhorgeObjects for MysqlReader {
    async fn lookup(
        &self,
        object_phid: &str,
        transaction_phids: &[&str],
    ) -> Result<ObjectLookup, StoreError> {
        objects::lookup(
            &self.connector,
            &self.namespace,
            &self.unreadable,
            object_phid,
            transaction_phids,
        )
        .await
    }
}

#[async_trait]
impl PhorgeConfig for MysqlReader {
    async fn silent_mode(&self) -> Result<bool, ConfigUnreadable> {
        handoff::silent_mode(&self.connector, &self.namespace).await
    }

    fn location(&self) -> String {
        sql::config_entry_table(&self.namespace)
    }
}
