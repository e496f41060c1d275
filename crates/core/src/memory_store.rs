//! `MemoryStore`: the database ports (`Store`, `QueueCounts`,
//! `TaskQueue`) held in memory (and, in `attempts`, the attempt history's
//! port) with exactly the SQL's semantics (the
//! conformance suite runs against it and the MySQL store alike). It
//! serves core tests, simulations, the demo and embedders.
//!
//! Its clock stands in for the database server's `UNIX_TIMESTAMP()`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;

use crate::adoption::TaskAdoption;
use crate::clock::Clock;
use crate::hold::{ConfigUnreadable, PhorgeConfig};
use crate::model::{phid_type, Hook, LastResult, RequestRow, RequestStatus, UnixTime};
use crate::objects::{ObjectLookup, PhorgeObjects, Unseen};
use crate::outcome::ResultWrite;
use crate::store::{
    CandidateQuery, Claim, DueRow, HookLock, QueueCounts, QueueStats, Store, StoreError, Written,
};

mod attempts;
mod lock;
mod tasks;

pub use attempts::MemoryAttemptLog;
use lock::MemoryHookLock;
pub use tasks::ArchivedTask;

/// A store operation, for fault injection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreOp {
    /// [`Store::candidates`]
    Candidates,
    /// [`Store::newest_id`]
    NewestId,
    /// [`Store::claim`]
    Claim,
    /// [`Store::write_result`]
    WriteResult,
    /// [`Store::hook`]
    Hook,
    /// [`Store::breaker_failures`]
    BreakerFailures,
    /// [`Store::lock_hook`]
    LockHook,
    /// [`HookLock::still_held`]
    LockCheck,
    /// [`Store::claims_in_flight`]
    ClaimsInFlight,
    /// [`QueueCounts::stats`]
    Stats,
    /// [`QueueCounts::hook_count`]
    HookCount,
    /// [`QueueCounts::longest_due`]
    LongestDue,
    /// [`PhorgeObjects::lookup`]
    ObjectLookup,
    /// Every [`TaskQueue`](crate::adoption::TaskQueue) operation.
    Tasks,
}

/// How an injected fault fails its operation.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// `StoreError::Unavailable`.
    Unavailable,
    /// `StoreError::Denied`.
    Denied,
}

/// A request to insert, as Phorge would (fields not given take Phorge's
/// insert defaults: `queued`, `none`, epoch 0, dates = now).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRequest {
    /// PHID; generated from the id when empty.
    pub phid: String,
    /// The hook.
    pub webhook_phid: String,
    /// The edited object.
    pub object_phid: String,
    /// Raw properties text.
    pub properties: String,
    /// Status.
    pub status: RequestStatus,
    /// lastRequestResult.
    pub last_request_result: LastResult,
    /// lastRequestEpoch.
    pub last_request_epoch: UnixTime,
    /// dateCreated; `None` = the store's now.
    pub date_created: Option<UnixTime>,
    /// dateModified; `None` = dateCreated.
    pub date_modified: Option<UnixTime>,
}

impl NewRequest {
    /// A fresh queued request for `webhook_phid` with these properties.
    pub fn queued(webhook_phid: &str, properties: &str) -> Self {
        Self {
            phid: String::new(),
            webhook_phid: webhook_phid.to_owned(),
            object_phid: "PHID-TASK-aaaaaaaaaaaaaaaaaaaa".to_owned(),
            properties: properties.to_owned(),
            status: RequestStatus::Queued,
            last_request_result: LastResult::None,
            last_request_epoch: 0,
            date_created: None,
            date_modified: None,
        }
    }
}

#[derive(Default)]
struct Inner {
    rows: BTreeMap<u64, RequestRow>,
    /// Inserts whose id is handed out but whose transaction has not
    /// committed: invisible until [`MemoryStore::commit_insert`].
    uncommitted: BTreeMap<u64, RequestRow>,
    hooks: HashMap<String, Hook>,
    /// Held per-hook locks and the "session" holding each, so a lost
    /// session can be simulated (see [`MemoryStore::lose_lock_sessions`]).
    held_locks: HashMap<String, u64>,
    next_lock_session: u64,
    next_id: u64,
    /// Calls of an operation still to fail, and how.
    faults: HashMap<StoreOp, (u32, Fault)>,
    /// Claims whose answer is held up: how many more, and for how long.
    slow_claim_replies: Option<(u32, Duration)>,
    /// Result writes that wait before they land: how many more, and for
    /// how long.
    slow_writes: Option<(u32, Duration)>,
    calls: HashMap<StoreOp, u64>,
    /// The `limit` of every candidate query, in order.
    candidate_limits: Vec<usize>,
    /// Phorge's `phabricator.silent`; `None` = the configuration is not
    /// readable.
    silent: Option<bool>,
    /// Phorge's application objects: each object's transactions as `(id,
    /// PHID)`, in id order.
    objects: HashMap<String, Vec<(u64, String)>>,
    /// PHID types whose application tables exist (any object of the type
    /// was ever added).
    object_types: HashSet<String>,
    next_transaction_id: u64,
    /// Phorge's task queue.
    tasks: tasks::Tasks,
}

/// An in-memory `herald_webhookrequest` + `herald_webhook`, and Phorge's
/// task queue. Clones share the tables; each has its own task adoption.
#[derive(Clone)]
pub struct MemoryStore {
    clock: Arc<dyn Clock>,
    inner: Arc<Mutex<Inner>>,
    adoption: Option<Arc<TaskAdoption>>,
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = self.lock();
        f.debug_struct("MemoryStore")
            .field("rows", &inner.rows.len())
            .field("hooks", &inner.hooks.len())
            .finish()
    }
}

impl MemoryStore {
    /// An empty store whose "server time" is `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            inner: Arc::new(Mutex::new(Inner {
                next_id: 1,
                silent: Some(false),
                ..Inner::default()
            })),
            adoption: None,
        }
    }

    /// This handle, as a daemon instance adopting Phorge's webhook tasks
    /// through `adoption`: only rows whose task a daemon leases (or that
    /// have none) are candidates ([`TaskAdoption::gate`]).
    pub fn with_task_adoption(mut self, adoption: Arc<TaskAdoption>) -> Self {
        self.adoption = Some(adoption);
        self
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The lock is never held across a panic in normal use; recover the
        // data rather than cascade a test failure.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds or replaces a hook.
    pub fn put_hook(&self, hook: Hook) {
        self.lock().hooks.insert(hook.phid.clone(), hook);
    }

    /// Removes a hook (its requests stay, as in Phorge).
    pub fn remove_hook(&self, phid: &str) {
        self.lock().hooks.remove(phid);
    }

    /// Inserts a request as Phorge would and returns its id.
    pub fn insert_request(&self, new: NewRequest) -> u64 {
        let (id, row) = self.new_row(new);
        self.lock().rows.insert(id, row);
        id
    }

    /// Begins an insert as a transaction that commits later: the id is
    /// handed out now (so later inserts get higher ones), the row is seen
    /// only once [`commit_insert`](Self::commit_insert) is called.
    pub fn begin_insert(&self, new: NewRequest) -> u64 {
        let (id, row) = self.new_row(new);
        self.lock().uncommitted.insert(id, row);
        id
    }

    /// Commits an insert [`begin_insert`](Self::begin_insert) began.
    pub fn commit_insert(&self, id: u64) {
        let mut inner = self.lock();
        if let Some(row) = inner.uncommitted.remove(&id) {
            inner.rows.insert(id, row);
        }
    }

    /// Deletes a row, as Phorge's garbage collector or an operator does.
    pub fn delete_request(&self, id: u64) {
        self.lock().rows.remove(&id);
    }

    fn new_row(&self, new: NewRequest) -> (u64, RequestRow) {
        let now = self.clock.now();
        let mut inner = self.lock();
        let id = inner.next_id;
        inner.next_id += 1;
        let date_created = new.date_created.unwrap_or(now);
        let phid = if new.phid.is_empty() {
            format!("PHID-HWBR-{id:020}")
        } else {
            new.phid
        };
        let row = RequestRow {
            id,
            phid,
            webhook_phid: new.webhook_phid,
            object_phid: new.object_phid,
            status: new.status,
            properties: new.properties,
            last_request_result: new.last_request_result,
            last_request_epoch: new.last_request_epoch,
            date_created,
            date_modified: new.date_modified.unwrap_or(date_created),
            defect: None,
        };
        (id, row)
    }

    /// The current state of one row.
    pub fn row(&self, id: u64) -> Option<RequestRow> {
        self.lock().rows.get(&id).cloned()
    }

    /// Every row, in id order.
    pub fn rows(&self) -> Vec<RequestRow> {
        self.lock().rows.values().cloned().collect()
    }

    /// Marks a row as a store would one whose stored values lie outside
    /// Phorge's domain (see [`RequestRow::defect`]).
    pub fn mark_defective(&self, id: u64, defect: &str) {
        if let Some(row) = self.lock().rows.get_mut(&id) {
            row.defect = Some(defect.to_owned());
        }
    }

    /// Sets Phorge's global silent mode as [`PhorgeConfig`] reports it;
    /// `None` makes the configuration unreadable.
    pub fn set_silent_mode(&self, silent: Option<bool>) {
        self.lock().silent = silent;
    }

    /// Adds an application object (making its PHID type's tables visible)
    /// with these transactions, applied in this order.
    pub fn add_object(&self, object_phid: &str, transactions: &[&str]) {
        let mut inner = self.lock();
        inner.object_types.insert(phid_type(object_phid).to_owned());
        inner.objects.entry(object_phid.to_owned()).or_default();
        for phid in transactions {
            inner.next_transaction_id += 1;
            let id = inner.next_transaction_id;
            if let Some(list) = inner.objects.get_mut(object_phid) {
                list.push((id, (*phid).to_owned()));
            }
        }
    }

    /// Destroys an object and its transactions, as `bin/remove destroy`.
    pub fn destroy_object(&self, object_phid: &str) {
        self.lock().objects.remove(object_phid);
    }

    /// Makes the next `times` calls of `op` fail with `Unavailable`.
    pub fn fail_next(&self, op: StoreOp, times: u32) {
        self.lock().faults.insert(op, (times, Fault::Unavailable));
    }

    /// Makes the next `times` calls of `op` fail with `Denied`, as a
    /// server refuses an account without the privilege.
    pub fn deny_next(&self, op: StoreOp, times: u32) {
        self.lock().faults.insert(op, (times, Fault::Denied));
    }

    /// Makes the next `times` claims answer `by` late on the store's clock:
    /// each takes effect at once, its reply is held up (as in a slow group
    /// commit of a real store).
    pub fn delay_claim_replies(&self, times: u32, by: Duration) {
        self.lock().slow_claim_replies = Some((times, by));
    }

    /// Makes the next `times` result writes wait `by` on the store's clock
    /// before they land (as a write queued behind a slow group commit of a
    /// real store): until then the row reads as it was.
    pub fn delay_writes(&self, times: u32, by: Duration) {
        self.lock().slow_writes = Some((times, by));
    }

    /// Whether the per-hook lock for `hook_phid` is held.
    pub fn is_hook_locked(&self, hook_phid: &str) -> bool {
        self.lock().held_locks.contains_key(hook_phid)
    }

    /// Frees every held per-hook lock behind its holders' backs, as the
    /// server does when the sessions holding them break.
    pub fn lose_lock_sessions(&self) {
        self.lock().held_locks.clear();
    }

    /// How many times `op` was called (the database round trips a real
    /// store would have made).
    pub fn calls(&self, op: StoreOp) -> u64 {
        self.lock().calls.get(&op).copied().unwrap_or(0)
    }

    /// The `limit` of every candidate query so far, in order.
    pub fn candidate_limits(&self) -> Vec<usize> {
        self.lock().candidate_limits.clone()
    }

    fn check_fault(inner: &mut Inner, op: StoreOp) -> Result<(), StoreError> {
        *inner.calls.entry(op).or_default() += 1;
        match inner.faults.get_mut(&op) {
            Some((left, fault)) if *left > 0 => {
                *left -= 1;
                Err(match fault {
                    Fault::Unavailable => {
                        StoreError::Unavailable(format!("injected fault in {op:?}").into())
                    }
                    Fault::Denied => StoreError::Denied(
                        format!("injected refusal: {op:?} command denied").into(),
                    ),
                })
            }
            _ => Ok(()),
        }
    }

    fn take_reply_delay(inner: &mut Inner) -> Option<Duration> {
        let (left, by) = inner.slow_claim_replies.as_mut()?;
        *left = left.checked_sub(1)?;
        Some(*by)
    }
}

/// The candidate predicate: queued, past its lease and its retry backoff,
/// and not of an excluded hook.
fn is_candidate(row: &RequestRow, query: &CandidateQuery) -> bool {
    let c = query.cutoffs;
    row.status == RequestStatus::Queued
        && c.past_lease(row)
        && c.past_backoff(row)
        && !query.exclude_hooks.contains(&row.webhook_phid)
}

#[async_trait]
impl Store for MemoryStore {
    async fn candidates(&self, query: &CandidateQuery) -> Result<Vec<RequestRow>, StoreError> {
        let c = query.cutoffs;
        let left_to_php = self
            .adoption
            .as_ref()
            .map(|adoption| adoption.left_to_php(c.now))
            .unwrap_or_default();
        let rows = {
            let mut inner = self.lock();
            Self::check_fault(&mut inner, StoreOp::Candidates)?;
            inner.candidate_limits.push(query.limit);
            inner
                .rows
                .values()
                .filter(|r| is_candidate(r, query))
                .filter(|r| !left_to_php.contains(&r.id))
                .take(query.limit)
                .cloned()
                .collect()
        };
        match &self.adoption {
            None => Ok(rows),
            Some(adoption) => adoption.gate(self, rows, c.now).await,
        }
    }

    async fn newest_id(&self) -> Result<u64, StoreError> {
        let mut inner = self.lock();
        Self::check_fault(&mut inner, StoreOp::NewestId)?;
        Ok(inner.rows.keys().next_back().copied().unwrap_or(0))
    }

    async fn claim(&self, id: u64, seen_version: UnixTime) -> Result<Claim, StoreError> {
        let now = self.clock.now();
        let (claim, reply_delay) = {
            let mut inner = self.lock();
            Self::check_fault(&mut inner, StoreOp::Claim)?;
            let claim = match inner.rows.get_mut(&id) {
                Some(row)
                    if row.status == RequestStatus::Queued && row.date_modified == seen_version =>
                {
                    // `+ 1`: one-second resolution must not let a
                    // same-second claim leave the version unchanged.
                    row.date_modified = (row.date_modified + 1).max(now);
                    Claim::Won(row.date_modified)
                }
                _ => Claim::Lost,
            };
            (claim, Self::take_reply_delay(&mut inner))
        };
        if let Some(delay) = reply_delay {
            self.clock.sleep(delay).await;
        }
        Ok(claim)
    }

    async fn write_result(&self, write: &ResultWrite) -> Result<Written, StoreError> {
        let delay = {
            let mut inner = self.lock();
            inner.slow_writes.as_mut().and_then(|(left, by)| {
                *left = left.checked_sub(1)?;
                Some(*by)
            })
        };
        if let Some(delay) = delay {
            self.clock.sleep(delay).await;
        }
        let mut inner = self.lock();
        Self::check_fault(&mut inner, StoreOp::WriteResult)?;
        let Some(row) = inner.rows.get_mut(&write.id) else {
            return Ok(Written::Skipped);
        };
        if row.status != RequestStatus::Queued || row.date_modified != write.expected_version {
            return Ok(Written::Skipped);
        }
        row.status = write.status;
        row.last_request_result = write.last_request_result;
        row.last_request_epoch = write.last_request_epoch;
        row.date_modified = (row.date_modified + 1).max(write.date_modified);
        row.properties.clone_from(&write.properties);
        Ok(Written::Yes)
    }

    async fn hook(&self, phid: &str) -> Result<Option<Hook>, StoreError> {
        let mut inner = self.lock();
        Self::check_fault(&mut inner, StoreOp::Hook)?;
        Ok(inner.hooks.get(phid).cloned())
    }

    async fn breaker_failures(&self, hook_phid: &str, since: UnixTime) -> Result<u64, StoreError> {
        let mut inner = self.lock();
        Self::check_fault(&mut inner, StoreOp::BreakerFailures)?;
        Ok(inner
            .rows
            .values()
            .filter(|r| {
                r.webhook_phid == hook_phid
                    && r.last_request_result == LastResult::Fail
                    && r.last_request_epoch >= since
            })
            .count() as u64)
    }

    async fn claims_in_flight(
        &self,
        hook_phid: &str,
        lease_cutoff: UnixTime,
    ) -> Result<u64, StoreError> {
        let mut inner = self.lock();
        Self::check_fault(&mut inner, StoreOp::ClaimsInFlight)?;
        Ok(inner
            .rows
            .values()
            .filter(|r| {
                r.webhook_phid == hook_phid
                    && r.status == RequestStatus::Queued
                    && r.date_modified > lease_cutoff
                    && r.date_modified != r.date_created
                    && r.date_modified != r.last_request_epoch
            })
            .count() as u64)
    }

    async fn lock_hook(&self, hook_phid: &str) -> Result<Option<Box<dyn HookLock>>, StoreError> {
        let mut inner = self.lock();
        Self::check_fault(&mut inner, StoreOp::LockHook)?;
        if inner.held_locks.contains_key(hook_phid) {
            return Ok(None);
        }
        inner.next_lock_session += 1;
        let session = inner.next_lock_session;
        inner.held_locks.insert(hook_phid.to_owned(), session);
        Ok(Some(Box::new(MemoryHookLock::new(
            Arc::clone(&self.inner),
            hook_phid.to_owned(),
            session,
        ))))
    }
}

#[async_trait]
impl QueueCounts for MemoryStore {
    async fn stats(&self) -> Result<QueueStats, StoreError> {
        let mut inner = self.lock();
        Self::check_fault(&mut inner, StoreOp::Stats)?;
        let mut stats = QueueStats::default();
        for row in inner.rows.values() {
            match row.status {
                RequestStatus::Queued => stats.queued += 1,
                RequestStatus::Sent => stats.sent += 1,
                RequestStatus::Failed => stats.failed += 1,
            }
        }
        stats.active_hooks = inner.hooks.values().filter(|h| !h.is_disabled()).count() as u64;
        Ok(stats)
    }

    async fn hook_count(&self) -> Result<u64, StoreError> {
        let mut inner = self.lock();
        Self::check_fault(&mut inner, StoreOp::HookCount)?;
        Ok(inner.hooks.len() as u64)
    }

    async fn longest_due(&self, query: &CandidateQuery) -> Result<Vec<DueRow>, StoreError> {
        let mut inner = self.lock();
        Self::check_fault(&mut inner, StoreOp::LongestDue)?;
        let mut due: Vec<DueRow> = inner
            .rows
            .values()
            .filter(|r| is_candidate(r, query))
            .map(|r| DueRow {
                id: r.id,
                phid: r.phid.clone(),
                webhook_phid: r.webhook_phid.clone(),
                due_since: query.cutoffs.due_since(r),
            })
            .collect();
        due.sort_by_key(|r| (r.due_since, r.id));
        due.truncate(query.limit);
        Ok(due)
    }
}

#[async_trait]
impl PhorgeConfig for MemoryStore {
    async fn silent_mode(&self) -> Result<bool, ConfigUnreadable> {
        self.lock()
            .silent
            .ok_or_else(|| ConfigUnreadable("configuration table not readable".into()))
    }

    fn location(&self) -> String {
        "the memory store's configuration".to_owned()
    }
}

#[async_trait]
impl PhorgeObjects for MemoryStore {
    async fn lookup(
        &self,
        object_phid: &str,
        transaction_phids: &[&str],
    ) -> Result<ObjectLookup, StoreError> {
        let mut inner = self.lock();
        Self::check_fault(&mut inner, StoreOp::ObjectLookup)?;
        let phid_type = phid_type(object_phid);
        if !inner.object_types.contains(phid_type) {
            return Ok(ObjectLookup::Unseen(Unseen::UnknownType(
                phid_type.to_owned(),
            )));
        }
        let Some(existing) = inner.objects.get(object_phid) else {
            return Ok(ObjectLookup::Gone);
        };
        let transactions = existing
            .iter()
            .rev()
            .filter(|(_, phid)| transaction_phids.contains(&phid.as_str()))
            .map(|(_, phid)| phid.clone())
            .collect();
        Ok(ObjectLookup::Found { transactions })
    }
}

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Inner")
            .field("rows", &self.rows.len())
            .finish()
    }
}
