//! `MysqlStore`: the [`webhook_core::Store`] and
//! [`webhook_core::QueueCounts`] on a [`MysqlReader`]: its reads are the
//! reader's; the claim and the write-back go through the group commit of
//! `batch`, the hook lock through [`crate::lock`], the candidate
//! query through `candidates` above the scan floor of
//! `queued_floor` and, with task adoption on, through the core's
//! gate on Phorge's task queue ([`crate::task_queue`]).
//!
//! Each read borrows one pooled connection for one statement (the hook
//! lock keeps its connection until released). Every connection and
//! statement is bounded in time ([`crate::session`]). No session
//! variables, and no transaction outlives a batch, so connections stay
//! interchangeable.

use std::fmt;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use webhook_core::adoption::TaskAdoption;
use webhook_core::hold::{ConfigUnreadable, PhorgeConfig};
use webhook_core::{
    CandidateQuery, Claim, DueRow, Hook, HookLock, ObjectLookup, PhorgeObjects, QueueCounts,
    QueueStats, RequestRow, ResultWrite, Store, StoreError, UnixTime, Written,
};

use crate::batch::{RowWrite, WriteBatcher};
use crate::candidates::{self, UnreadableRows};
use crate::config::MysqlConfig;
use crate::connector::Connector;
use crate::error::{MysqlError, NotReady};
use crate::handoff::PhpDeliveryTasks;
use crate::history::HistoryQueue;
use crate::lock::{KeptLocks, LockSessions, MysqlHookLock};
use crate::queued_floor::QueuedFloor;
use crate::reader::MysqlReader;
use crate::reads;
use crate::schema::SchemaWarning;

/// The hook whose lock [`MysqlStore::delivery_needs_missing`] takes: no
/// hook has it (Phorge's PHIDs end in 20 letters and digits).
const LOCK_PROBE_HOOK: &str = "PHID-HWBH-gorge-webhook-lock-check";

/// A failure of the named-lock check: the reason locks cannot serve when
/// the server answered the statements with a refusal of its own, an error
/// when it could not be asked.
fn refused_or_unknown(err: StoreError) -> Result<Option<String>, StoreError> {
    match err {
        StoreError::Query(_) => Ok(Some(err.to_string())),
        other => Err(other),
    }
}

/// Phorge's herald tables on MySQL/MariaDB, read and written: the daemon's
/// store. The operator's tool gets only a [`MysqlReader`].
#[derive(Clone)]
pub struct MysqlStore {
    reader: MysqlReader,
    pool_max: usize,
    batcher: Arc<OnceLock<WriteBatcher>>,
    locks: LockSessions,
    unreadable_rows: UnreadableRows,
    queued_floor: QueuedFloor,
    adoption: Option<Arc<TaskAdoption>>,
    history: Option<HistoryQueue>,
}

// Hand-written: the pool's options hold the password.
impl fmt::Debug for MysqlStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlStore")
            .field("database", &self.database())
            .field("pool_max", &self.pool_max)
            .finish()
    }
}

impl MysqlStore {
    /// Validates `config` and builds the pool. Does not connect: the first
    /// statement (or [`ready`](Self::ready)) opens the first connection.
    pub fn new(config: &MysqlConfig) -> Result<Self, MysqlError> {
        let reader = MysqlReader::new(config)?;
        Ok(Self {
            locks: LockSessions::new(reader.connector().clone(), config.lock_sessions),
            reader,
            pool_max: config.pool_max,
            batcher: Arc::new(OnceLock::new()),
            unreadable_rows: UnreadableRows::default(),
            queued_floor: QueuedFloor::default(),
            adoption: None,
            history: None,
        })
    }

    /// Adopts Phorge's webhook tasks through `adoption`
    /// ([`webhook_core::adoption`]): only rows whose task a daemon leases
    /// (or that have none) are candidates. The store is also the
    /// adoption's [`webhook_core::adoption::TaskQueue`] (module `task_queue`).
    pub fn with_task_adoption(mut self, adoption: Arc<TaskAdoption>) -> Self {
        self.adoption = Some(adoption);
        self
    }

    /// Writes the attempts recorded into `queue` to the history
    /// (`crate::history`): the group-commit workers wake its writer after
    /// each batch, once the batch's replies are sent, and the writer runs
    /// on the history's own pool. A failing history never delays, fails or
    /// repeats a write. This store gets group-commit workers of its own
    /// (clones made before share the earlier ones).
    pub fn with_history(mut self, queue: HistoryQueue) -> Self {
        self.history = Some(queue);
        self.batcher = Arc::new(OnceLock::new());
        self
    }

    /// The read-only side, sharing this store's pool.
    pub fn reader(&self) -> &MysqlReader {
        &self.reader
    }

    pub(crate) fn connector(&self) -> &Connector {
        self.reader.connector()
    }

    /// The herald database, `{namespace}_herald`.
    pub fn database(&self) -> &str {
        self.reader.database()
    }

    /// Phorge's namespace.
    pub fn namespace(&self) -> &str {
        self.reader.namespace()
    }

    /// Phorge's task queue, `database.table`, as the log names it.
    pub fn task_queue_table(&self) -> String {
        self.reader.task_queue_table()
    }

    /// The `GET_LOCK` name guarding deliveries to `hook_phid`.
    pub fn hook_lock_name(&self, hook_phid: &str) -> String {
        self.reader.hook_lock_name(hook_phid)
    }

    /// `(transactions, writes in them)`: how many claims and write-backs
    /// were committed in groups of two or more so far (`batch`).
    pub fn grouped_write_counts(&self) -> (u64, u64) {
        self.batcher.get().map_or((0, 0), WriteBatcher::counts)
    }

    /// Candidate rows skipped so far because they could not be read (wider
    /// than the connection's `max_allowed_packet`), once per poll that met
    /// one (`candidates`).
    pub fn rows_unreadable(&self) -> u64 {
        self.unreadable_rows.skipped()
    }

    /// The scan floor's frontier: candidate polls read ids from here up,
    /// plus the few below it last seen queued (`queued_floor`).
    pub fn scan_floor(&self) -> u64 {
        self.queued_floor.frontier()
    }

    /// The group-commit workers, started on first use (inside the runtime).
    fn batcher(&self) -> &WriteBatcher {
        self.batcher
            .get_or_init(|| WriteBatcher::start(self.connector().clone(), self.history.clone()))
    }

    /// [`MysqlReader::pool_replacements`].
    pub fn pool_replacements(&self) -> u64 {
        self.reader.pool_replacements()
    }

    /// [`MysqlReader::ready`], the `/readyz` probe.
    pub async fn ready(&self) -> Result<(), NotReady> {
        self.reader.ready().await
    }

    /// [`MysqlReader::check_schema`], the startup schema check.
    pub async fn check_schema(&self) -> Result<Vec<SchemaWarning>, MysqlError> {
        self.reader.check_schema().await
    }

    /// [`MysqlReader::php_delivery_tasks`], for the hand-off watch.
    pub async fn php_delivery_tasks(&self) -> Result<PhpDeliveryTasks, StoreError> {
        self.reader.php_delivery_tasks().await
    }

    /// [`Store::lock_hook`] with the concrete lock type (its name and
    /// holding session are visible, for diagnostics and tests).
    pub async fn try_lock_hook(
        &self,
        hook_phid: &str,
    ) -> Result<Option<MysqlHookLock>, StoreError> {
        self.locks.try_lock(self.hook_lock_name(hook_phid)).await
    }

    /// What delivery needs that the account or the server does not give,
    /// each named; empty when nothing is missing. The privileges
    /// ([`MysqlReader::delivery_grants_missing`]), then Phorge's named
    /// locks, taken, checked and freed as a delivery does (`GET_LOCK`,
    /// `IS_USED_LOCK`, `RELEASE_LOCK`, on a lock session) under a name no
    /// hook has: they need no privilege, but a server or a proxy in front
    /// of it may refuse them or share sessions between clients. A named
    /// lock changes no row. An error when nothing can be said yet (the
    /// server away, a table missing, the login refused).
    pub async fn delivery_needs_missing(&self) -> Result<Vec<String>, StoreError> {
        let mut missing = self.reader.delivery_grants_missing().await?;
        if let Some(why) = self.named_locks_refused().await? {
            missing.push(format!(
                "named locks (GET_LOCK, IS_USED_LOCK, RELEASE_LOCK): {why}"
            ));
        }
        Ok(missing)
    }

    /// Why a named lock cannot serve as a hook's, if it cannot.
    async fn named_locks_refused(&self) -> Result<Option<String>, StoreError> {
        let lock = match self.try_lock_hook(LOCK_PROBE_HOOK).await {
            Ok(Some(lock)) => lock,
            // Another instance's check holds it this instant: locks work.
            Ok(None) => return Ok(None),
            Err(err) => return refused_or_unknown(err),
        };
        let mut lock: Box<dyn HookLock> = Box::new(lock);
        let held = lock.still_held().await;
        let released = lock.release().await;
        match (held, released) {
            (Ok(true), Ok(())) => Ok(None),
            (Ok(false), _) => Ok(Some(
                "a lock just taken is not held by the session that took it".to_owned(),
            )),
            (Err(err), _) | (_, Err(err)) => refused_or_unknown(err),
        }
    }

    /// Keeps the lock of every hook that is not disabled from now on, and
    /// no others (task adoption: see `crate::lock`); call it again to
    /// follow Phorge's hooks and to take back a lock lost with its
    /// session or held elsewhere until now.
    pub async fn keep_hook_locks(&self) -> Result<KeptLocks, StoreError> {
        let names: Vec<String> = self
            .reader
            .callable_hook_phids()
            .await?
            .iter()
            .map(|phid| self.hook_lock_name(phid))
            .collect();
        self.locks.keep(&names).await
    }

    /// Frees every hook lock at once, kept or lent (a stopping daemon,
    /// before it hands its tasks back): the lock sessions are closed.
    pub async fn free_hook_locks(&self) {
        self.locks.close().await;
    }

    /// Hook locks this store holds now, over all its lock sessions.
    pub fn hook_locks_held(&self) -> usize {
        self.locks.held()
    }

    /// Closes the lock sessions, then [`MysqlReader::disconnect`]: closes
    /// the pool (shutdown), bounded.
    pub async fn disconnect(&self) -> Result<(), StoreError> {
        self.disconnect_within(self.connector().statement_timeout())
            .await
    }

    /// [`Self::disconnect`] within `bound`.
    pub async fn disconnect_within(&self, bound: std::time::Duration) -> Result<(), StoreError> {
        let started = std::time::Instant::now();
        // Each close is bounded (`crate::session`); the whole is too.
        let _ = tokio::time::timeout(bound, self.locks.close()).await;
        self.reader
            .disconnect_within(bound.saturating_sub(started.elapsed()))
            .await
    }
}

#[async_trait]
impl Store for MysqlStore {
    async fn candidates(&self, query: &CandidateQuery) -> Result<Vec<RequestRow>, StoreError> {
        let left_to_php = self
            .adoption
            .as_ref()
            .map(|adoption| adoption.left_to_php(query.cutoffs.now))
            .unwrap_or_default();
        let rows = candidates::candidates(
            self.connector(),
            &self.unreadable_rows,
            &self.queued_floor,
            query,
            &left_to_php,
        )
        .await?;
        match &self.adoption {
            None => Ok(rows),
            Some(adoption) => adoption.gate(self, rows, query.cutoffs.now).await,
        }
    }

    async fn newest_id(&self) -> Result<u64, StoreError> {
        let newest = self.reader.newest_id().await?;
        self.queued_floor.note_newest_id(newest);
        Ok(newest)
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
            other => Err(self.connector().unexpected(
                "claim",
                &format!("won, but reported the version {other:?} (seen {seen_version})"),
            )),
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
        self.reader.hook(phid).await
    }

    async fn breaker_failures(&self, hook_phid: &str, since: UnixTime) -> Result<u64, StoreError> {
        self.reader.breaker_failures(hook_phid, since).await
    }

    async fn claims_in_flight(
        &self,
        hook_phid: &str,
        lease_cutoff: UnixTime,
    ) -> Result<u64, StoreError> {
        self.reader.claims_in_flight(hook_phid, lease_cutoff).await
    }

    async fn lock_hook(&self, hook_phid: &str) -> Result<Option<Box<dyn HookLock>>, StoreError> {
        Ok(self
            .try_lock_hook(hook_phid)
            .await?
            .map(|lock| Box::new(lock) as Box<dyn HookLock>))
    }
}

#[async_trait]
impl QueueCounts for MysqlStore {
    async fn stats(&self) -> Result<QueueStats, StoreError> {
        self.reader.stats().await
    }

    async fn hook_count(&self) -> Result<u64, StoreError> {
        self.reader.hook_count().await
    }

    async fn longest_due(&self, query: &CandidateQuery) -> Result<Vec<DueRow>, StoreError> {
        reads::longest_due(self.connector(), &self.queued_floor, query).await
    }
}

#[async_trait]
impl PhorgeObjects for MysqlStore {
    async fn lookup(
        &self,
        object_phid: &str,
        transaction_phids: &[&str],
    ) -> Result<ObjectLookup, StoreError> {
        self.reader.lookup(object_phid, transaction_phids).await
    }
}

#[async_trait]
impl PhorgeConfig for MysqlStore {
    async fn silent_mode(&self) -> Result<bool, ConfigUnreadable> {
        self.reader.silent_mode().await
    }

    fn location(&self) -> String {
        self.reader.location()
    }
}
