//! Task adoption (`GORGE_WEBHOOK_ADOPT_PHP_TASKS`), so `phd` never runs a
//! webhook call beside the daemon on an upstream Phorge, which queues one
//! `HeraldWebhookWorker` task per request and has no hand-off switch.
//!
//! Phorge's task queue is a table protocol too: a taskmaster leases a task
//! by setting `leaseOwner` and `leaseExpires` on a row that has no owner
//! or whose lease lapsed, re-checking the owner it saw, and archives a
//! finished one by moving it to `worker_archivetask` in one transaction.
//! This module is the policy of the daemon's side; the queue comes in
//! through [`TaskQueue`] and the time through a [`Clock`](crate::Clock)
//! ([`run_rounds`]):
//!
//! - **Leases** ([`TaskAdoption::round`], and for new tasks the frequent
//!   [`TaskAdoption::sweep`]): every webhook task no taskmaster runs
//!   ([`TaskLease::adoptable`]: no owner, a lapsed lease, or a yield) is
//!   leased for [`TASK_LEASE`] under an owner string of this instance
//!   (`gorge-webhook:<host>:<pid>:<nonce>:<n>`, a new `n` for every lease
//!   taken, so a taskmaster's stale compare-and-set can never match a
//!   lease taken again after it lapsed), and extended while its request is
//!   queued. A stopped daemon's leases lapse by themselves within
//!   [`TASK_LEASE`]; then `phd` takes the tasks over.
//! - **The gate** ([`TaskAdoption::gate`], which a store's candidate query
//!   runs its rows through): a candidate row is delivered only while a
//!   daemon instance leases its task (taken on the spot when it is free);
//!   a row whose task a taskmaster holds waits until that task is done or
//!   its lease lapsed (left out of polls meanwhile,
//!   [`TaskAdoption::left_to_php`], looked at again every few seconds). A
//!   row with no task at all (its task cancelled, or not inserted yet:
//!   Phorge inserts it just after the row) goes once it is
//!   [`TASK_GRACE_SECS`] old.
//! - **The archive** ([`TaskAdoption::archive_ended`]): once its request
//!   is `sent` or `failed` (or gone), a daemon-leased task (this
//!   instance's, or one a stopped instance left) is archived as Phorge's
//!   worker would end it: success for `sent` and for a silent-mode
//!   failure, failure otherwise ([`archive_result`]).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::model::{RequestRow, UnixTime};
use crate::properties::Properties;
use crate::store::StoreError;

mod queue;
mod schedule;

pub use queue::{
    AdoptableTask, ArchiveResult, EndedTask, RequestTask, TaskLease, TaskQueue,
    DAEMON_LEASE_PREFIX, WEBHOOK_TASK_CLASS, YIELD_OWNER,
};
pub use schedule::{run_rounds, ADOPTION_EVERY, ARCHIVE_EVERY, SWEEP_EVERY};

/// How long one lease of a task lasts: a daemon gone for good hands its
/// tasks back to `phd` within this.
pub const TASK_LEASE: Duration = Duration::from_secs(300);

/// A lease is extended once less than this is left of it: about once a
/// minute, so a database away for up to four minutes costs no lease.
pub const RENEW_WITHIN: Duration = Duration::from_secs(240);

/// The gate does not rely on a daemon's lease that ends sooner than this:
/// leases are extended at 240 s left, so one this short has gone two
/// minutes without a round that could extend it.
pub const LEASE_MARGIN_SECS: i64 = 120;

/// A queued request without any task is delivered once it is this old:
/// Phorge inserts the task just after the request row.
pub const TASK_GRACE_SECS: UnixTime = 10;

/// Tasks leased, or archived, per round at most.
pub const ROUND_LIMIT: u64 = 1_000;

/// A row left to PHP is left out of polls for this long, then looked at
/// again: so rows whose tasks taskmasters hold do not fill every poll.
pub const LEFT_TO_PHP_SECS: UnixTime = 5;

/// Rows remembered as left to PHP at most (the lowest ids kept).
const LEFT_TO_PHP_MAX: usize = 1_024;

/// What one round did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AdoptionRound {
    /// Tasks leased.
    pub adopted: u64,
    /// Leases extended.
    pub renewed: u64,
    /// Tasks archived as succeeded.
    pub archived_success: u64,
    /// Tasks archived as failed.
    pub archived_failure: u64,
}

/// Totals since start, for `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AdoptionTotals {
    /// Tasks leased.
    pub adopted: u64,
    /// Tasks archived as succeeded.
    pub archived_success: u64,
    /// Tasks archived as failed.
    pub archived_failure: u64,
    /// Candidate rows left for a taskmaster that held their task, once per
    /// poll that met one.
    pub rows_waiting_for_php: u64,
    /// Tasks a taskmaster leased before this instance did, by what came
    /// of it ([`LostTasks`]).
    pub lost: LostTasks,
}

/// Webhook tasks a `phd` taskmaster leased before the daemon did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LostTasks {
    /// It found the hook's lock held (the daemon keeps it) and yielded;
    /// this instance then adopted it. One line in phd's log each.
    pub yielded: u64,
    /// The gate met its request while a taskmaster held it, and left the
    /// request to PHP: PHP may deliver it (a hook whose lock the daemon
    /// did not hold yet), or yield it in a moment.
    pub left_to_php: u64,
}

impl LostTasks {
    /// Both together.
    pub fn total(self) -> u64 {
        self.yielded + self.left_to_php
    }
}

#[derive(Debug, Default)]
struct Totals {
    adopted: AtomicU64,
    archived_success: AtomicU64,
    archived_failure: AtomicU64,
    rows_waiting_for_php: AtomicU64,
    yields_adopted: AtomicU64,
    left_to_php: AtomicU64,
}

/// How a task stands for the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    /// A daemon instance leases it for at least [`LEASE_MARGIN_SECS`].
    Daemon,
    /// No taskmaster runs it: it may be leased; `yielded` when a
    /// taskmaster leased it first and yielded it.
    Free { yielded: bool },
    /// A daemon's lease on it is about to end: not relied on, not free.
    Lapsing,
    /// A taskmaster holds it.
    Php,
}

impl Standing {
    fn of(lease: &TaskLease) -> Self {
        if lease.is_daemons()
            && lease
                .secs_left
                .is_some_and(|left| left >= LEASE_MARGIN_SECS)
        {
            Self::Daemon
        } else if lease.adoptable() {
            Self::Free {
                yielded: lease.owner.as_deref() == Some(YIELD_OWNER),
            }
        } else if lease.is_daemons() {
            Self::Lapsing
        } else {
            Self::Php
        }
    }
}

/// One daemon instance's side of Phorge's task protocol: its owner
/// strings, the rows its gate left to PHP, and its totals. Share one per
/// instance between its store (the gate) and its [`run_rounds`].
#[derive(Debug)]
pub struct TaskAdoption {
    /// `gorge-webhook:<host>:<pid>:<nonce>:`: every owner string of this
    /// instance starts with it.
    prefix: String,
    next_lease: AtomicU64,
    totals: Totals,
    /// Rows the gate left to PHP, with when: left out of polls for
    /// [`LEFT_TO_PHP_SECS`].
    left_to_php: Mutex<HashMap<u64, UnixTime>>,
    /// Rows counted as lost to PHP, so each is counted once (the highest
    /// [`LEFT_TO_PHP_MAX`] ids kept).
    lost_to_php: Mutex<BTreeSet<u64>>,
}

impl TaskAdoption {
    /// This instance's owner strings: `host` is cut to 12 characters of
    /// `[A-Za-z0-9.-]` (others become `-`), so its owner strings hold no
    /// `LIKE` wildcard and fit Phorge's 64-character column; a random
    /// nonce tells apart instances whose host and pid agree (pid 1 in
    /// containers of one deployment).
    pub fn new(host: &str, pid: u32) -> Self {
        let host: String = host
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '-'
                }
            })
            .take(12)
            .collect();
        Self {
            prefix: format!("{DAEMON_LEASE_PREFIX}{host}:{pid}:{:08x}:", nonce()),
            next_lease: AtomicU64::new(1),
            totals: Totals::default(),
            left_to_php: Mutex::new(HashMap::new()),
            lost_to_php: Mutex::new(BTreeSet::new()),
        }
    }

    /// The owner string of the next lease taken.
    fn next_owner(&self) -> String {
        let n = self.next_lease.fetch_add(1, Ordering::Relaxed);
        format!("{}{n}", self.prefix)
    }

    /// Rows to leave out of the poll at `now` (the poll's clock): those
    /// the gate left to PHP less than [`LEFT_TO_PHP_SECS`] ago.
    pub fn left_to_php(&self, now: UnixTime) -> Vec<u64> {
        let mut left = self.left_to_php.lock().unwrap_or_else(|e| e.into_inner());
        left.retain(|_, at| at.saturating_add(LEFT_TO_PHP_SECS) > now);
        left.keys().copied().collect()
    }

    /// Keeps `ids` out of polls for a while, and counts those of
    /// `held_by_php` (a taskmaster holds their task) as lost to PHP, each
    /// row once.
    fn note_left_to_php(&self, ids: &[u64], held_by_php: &[u64], now: UnixTime) {
        let mut left = self.left_to_php.lock().unwrap_or_else(|e| e.into_inner());
        for id in ids {
            if left.len() >= LEFT_TO_PHP_MAX {
                break;
            }
            left.insert(*id, now);
        }
        drop(left);
        let mut lost = self.lost_to_php.lock().unwrap_or_else(|e| e.into_inner());
        for id in held_by_php {
            if lost.insert(*id) {
                self.totals.left_to_php.fetch_add(1, Ordering::Relaxed);
            }
        }
        while lost.len() > LEFT_TO_PHP_MAX {
            lost.pop_first();
        }
    }

    /// Totals since start.
    pub fn totals(&self) -> AdoptionTotals {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        AdoptionTotals {
            adopted: read(&self.totals.adopted),
            archived_success: read(&self.totals.archived_success),
            archived_failure: read(&self.totals.archived_failure),
            rows_waiting_for_php: read(&self.totals.rows_waiting_for_php),
            lost: LostTasks {
                yielded: read(&self.totals.yields_adopted),
                left_to_php: read(&self.totals.left_to_php),
            },
        }
    }

    /// Leases the tasks Phorge queued since the last sweep (no owner yet):
    /// cheap enough to run several times a second, so a taskmaster rarely
    /// meets one first. The count leased.
    pub async fn sweep(&self, queue: &dyn TaskQueue) -> Result<u64, StoreError> {
        let found = queue.unleased_tasks(ROUND_LIMIT).await?;
        self.adopt(queue, &found).await
    }

    /// Extends the daemon leases that are due, every instance's (rows on a
    /// stopped instance's leases are delivered by the others, so those
    /// leases must not lapse under them), and leases free tasks.
    pub async fn round(&self, queue: &dyn TaskQueue) -> Result<AdoptionRound, StoreError> {
        let renewed = queue.renew_daemon_leases(TASK_LEASE, RENEW_WITHIN).await?;
        let found = queue.adoptable_tasks(ROUND_LIMIT).await?;
        let found: Vec<(u64, bool)> = found.iter().map(|t| (t.id, t.yielded)).collect();
        let adopted = self.adopt_counting_yields(queue, &found).await?;
        Ok(AdoptionRound {
            renewed,
            adopted,
            ..AdoptionRound::default()
        })
    }

    /// Hands back every task this instance leases (a stopping daemon's
    /// last step, after its deliveries and [`Self::archive_ended`]): a
    /// taskmaster may run them at once instead of after their lease
    /// lapsed. Another instance adopts them as it adopts any free task.
    /// How many were handed back.
    pub async fn hand_back(&self, queue: &dyn TaskQueue) -> Result<u64, StoreError> {
        queue.release_leases(&self.prefix).await
    }

    /// Archives the daemon-leased tasks whose request ended, each with
    /// the result Phorge's worker would record.
    pub async fn archive_ended(&self, queue: &dyn TaskQueue) -> Result<AdoptionRound, StoreError> {
        let ended = queue.ended_tasks(ROUND_LIMIT).await?;
        let (success, failure): (Vec<&EndedTask>, Vec<&EndedTask>) =
            ended.iter().partition(|task| {
                archive_result(task.status.as_deref(), task.properties.as_deref())
                    == ArchiveResult::Success
            });
        let ids = |tasks: Vec<&EndedTask>| tasks.iter().map(|task| task.id).collect::<Vec<_>>();
        let round = AdoptionRound {
            archived_success: archive(queue, &ids(success), ArchiveResult::Success).await?,
            archived_failure: archive(queue, &ids(failure), ArchiveResult::Failure).await?,
            ..AdoptionRound::default()
        };
        self.totals
            .archived_success
            .fetch_add(round.archived_success, Ordering::Relaxed);
        self.totals
            .archived_failure
            .fetch_add(round.archived_failure, Ordering::Relaxed);
        Ok(round)
    }

    /// The candidate rows a daemon may deliver now (see the module's
    /// gate), in their order; free tasks of the rows are leased first.
    /// `now` (the poll's clock) times how long rows left to PHP stay out
    /// of polls; a row without a task is judged by the queue's clock, as
    /// Phorge's own timestamps are (the poll's may run ahead).
    pub async fn gate(
        &self,
        queue: &dyn TaskQueue,
        rows: Vec<RequestRow>,
        now: UnixTime,
    ) -> Result<Vec<RequestRow>, StoreError> {
        if rows.is_empty() {
            return Ok(rows);
        }
        let mut tasks = tasks_of(queue, &rows).await?;
        let free: Vec<(u64, bool)> = tasks
            .values()
            .flatten()
            .filter_map(|(id, standing)| match standing {
                Standing::Free { yielded } => Some((*id, *yielded)),
                _ => None,
            })
            .collect();
        if !free.is_empty() {
            self.adopt_counting_yields(queue, &free).await?;
            tasks = tasks_of(queue, &rows).await?;
        }
        let queue_now = if rows.iter().any(|row| !tasks.contains_key(&row.phid)) {
            queue.queue_now().await?
        } else {
            0
        };
        let mut waiting_for_php = Vec::new();
        let mut held_by_php = Vec::new();
        let allowed = rows
            .into_iter()
            .filter(|row| match tasks.get(&row.phid) {
                None => row.date_created.saturating_add(TASK_GRACE_SECS) <= queue_now,
                Some(standing) => {
                    let ours = standing.iter().all(|(_, s)| *s == Standing::Daemon);
                    if !ours {
                        waiting_for_php.push(row.id);
                    }
                    if standing.iter().any(|(_, s)| *s == Standing::Php) {
                        held_by_php.push(row.id);
                    }
                    ours
                }
            })
            .collect();
        self.note_left_to_php(&waiting_for_php, &held_by_php, now);
        self.totals.rows_waiting_for_php.fetch_add(
            u64::try_from(waiting_for_php.len()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        Ok(allowed)
    }

    /// Leases the `(id, yielded)` tasks that are still free; the yields
    /// in a lease of their own, so those won back are counted exactly.
    async fn adopt_counting_yields(
        &self,
        queue: &dyn TaskQueue,
        tasks: &[(u64, bool)],
    ) -> Result<u64, StoreError> {
        let (yields, others): (Vec<_>, Vec<_>) = tasks.iter().partition(|(_, yielded)| *yielded);
        let ids = |tasks: Vec<&(u64, bool)>| tasks.iter().map(|(id, _)| *id).collect::<Vec<_>>();
        let won_back = self.adopt(queue, &ids(yields)).await?;
        self.totals
            .yields_adopted
            .fetch_add(won_back, Ordering::Relaxed);
        Ok(won_back + self.adopt(queue, &ids(others)).await?)
    }

    /// Leases those of `ids` that are still free, under a new owner string.
    async fn adopt(&self, queue: &dyn TaskQueue, ids: &[u64]) -> Result<u64, StoreError> {
        if ids.is_empty() {
            return Ok(0);
        }
        let adopted = queue
            .lease_tasks(ids, &self.next_owner(), TASK_LEASE)
            .await?;
        self.totals.adopted.fetch_add(adopted, Ordering::Relaxed);
        Ok(adopted)
    }
}

/// Each listed request's tasks and how they stand, by request PHID.
async fn tasks_of(
    queue: &dyn TaskQueue,
    rows: &[RequestRow],
) -> Result<HashMap<String, Vec<(u64, Standing)>>, StoreError> {
    let phids: Vec<&str> = rows
        .iter()
        .map(|row| row.phid.as_str())
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    let mut tasks: HashMap<String, Vec<(u64, Standing)>> = HashMap::new();
    for task in queue.tasks_of_requests(&phids).await? {
        tasks
            .entry(task.request_phid)
            .or_default()
            .push((task.id, Standing::of(&task.lease)));
    }
    Ok(tasks)
}

async fn archive(
    queue: &dyn TaskQueue,
    ids: &[u64],
    result: ArchiveResult,
) -> Result<u64, StoreError> {
    if ids.is_empty() {
        return Ok(0);
    }
    queue.archive_tasks(ids, result).await
}

/// The archive result Phorge's worker records for a request that ended
/// this way (`status` and `properties`; both `None` for a request gone):
/// success for `sent` and for the silent-mode failure (`errorType` `hook`,
/// `errorCode` `silent`, which its worker returns from normally), failure
/// for any other end and for a request gone.
pub fn archive_result(status: Option<&str>, properties: Option<&str>) -> ArchiveResult {
    match status {
        Some("sent") => ArchiveResult::Success,
        Some("failed") => {
            let silent = properties
                .and_then(|text| Properties::parse(text).ok())
                .is_some_and(|parsed| {
                    let (error_type, code) = parsed.error();
                    error_type == Some("hook") && code.and_then(|c| c.as_str()) == Some("silent")
                });
            if silent {
                ArchiveResult::Success
            } else {
                ArchiveResult::Failure
            }
        }
        _ => ArchiveResult::Failure,
    }
}

/// 32 random bits, from the standard library's hash keys (random per
/// process, and different for every `RandomState` made in it).
fn nonce() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let hasher = std::collections::hash_map::RandomState::new().build_hasher();
    // Truncation intended: any 32 of the 64 bits will do.
    hasher.finish() as u32
}

#[cfg(test)]
mod tests;
