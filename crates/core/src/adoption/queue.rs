//! `TaskQueue`: the port to Phorge's task queue (`{ns}_worker`'s
//! `worker_activetask` and `worker_archivetask`) that task adoption works
//! through, the values it answers with, and the one meaning of a task's
//! lease ([`TaskLease`]: whose it is, whether a taskmaster could run it).
//!
//! Each method is one operation a store performs on the queue, on the
//! queue's own clock (the database server's `UNIX_TIMESTAMP()`; the
//! `MemoryStore`'s clock). A store's statements must mean exactly what
//! [`TaskLease`] says; the conformance suite holds both stores to it.

use std::time::Duration;

use async_trait::async_trait;

use crate::model::UnixTime;
use crate::store::StoreError;

/// The class of Phorge's webhook delivery tasks: the only tasks adopted.
pub const WEBHOOK_TASK_CLASS: &str = "HeraldWebhookWorker";

/// The `leaseOwner` every daemon instance's leases start with; Phorge's
/// taskmasters write `pid:time:host:seq` or [`YIELD_OWNER`], which never
/// do.
pub const DAEMON_LEASE_PREFIX: &str = "gorge-webhook:";

/// The `leaseOwner` of a task whose taskmaster let it go until its
/// `leaseExpires` (a yield): nobody runs it meanwhile.
pub const YIELD_OWNER: &str = "(yield)";

/// A task's lease as the queue holds it, read on the queue's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskLease {
    /// `leaseOwner`.
    pub owner: Option<String>,
    /// `leaseExpires` minus the queue's now (negative: lapsed).
    pub secs_left: Option<i64>,
}

impl TaskLease {
    /// Whether the lease lapsed: `leaseExpires` is before now.
    pub fn lapsed(&self) -> bool {
        self.secs_left.is_some_and(|left| left < 0)
    }

    /// Whether a daemon instance's owner string holds it (lapsed or not).
    pub fn is_daemons(&self) -> bool {
        self.owner
            .as_deref()
            .is_some_and(|owner| owner.starts_with(DAEMON_LEASE_PREFIX))
    }

    /// A task no taskmaster runs, nor will before someone leases it again:
    /// what Phorge's lease query takes (no owner, or a lapsed lease), and a
    /// task that yielded. Such a task may be adopted.
    pub fn adoptable(&self) -> bool {
        self.owner.is_none() || self.owner.as_deref() == Some(YIELD_OWNER) || self.lapsed()
    }

    /// A task Phorge's taskmasters could lease right now (their lease
    /// query's two phases: no owner, or a lapsed lease).
    pub fn runnable_by_php(&self) -> bool {
        self.owner.is_none() || self.lapsed()
    }
}

/// A task no taskmaster runs, as the round finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdoptableTask {
    /// The task's id.
    pub id: u64,
    /// Whether a taskmaster leased it first and yielded it (owner
    /// [`YIELD_OWNER`]): Phorge's worker found the hook's lock held.
    pub yielded: bool,
}

/// A webhook task of a request, as the candidate gate reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestTask {
    /// The request's PHID (the task's `objectPHID`).
    pub request_phid: String,
    /// The task's id.
    pub id: u64,
    /// Its lease.
    pub lease: TaskLease,
}

/// A daemon-leased webhook task whose request is no longer queued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndedTask {
    /// The task's id.
    pub id: u64,
    /// The request's `status`; `None` when the request is gone.
    pub status: Option<String>,
    /// The request's `properties`; `None` when the request is gone.
    pub properties: Option<String>,
}

/// An archived task's `result`, as Phorge's `PhabricatorWorkerArchiveTask`
/// numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArchiveResult {
    /// 0: the task succeeded.
    Success,
    /// 1: the task failed for good.
    Failure,
}

impl ArchiveResult {
    /// The number stored in `result`.
    pub fn code(self) -> u64 {
        match self {
            Self::Success => 0,
            Self::Failure => 1,
        }
    }
}

/// Phorge's task queue, as task adoption uses it. Only tasks of
/// [`WEBHOOK_TASK_CLASS`] are ever read, leased or archived; "adoptable",
/// "a daemon's" and "lapsed" are [`TaskLease`]'s, on the queue's clock.
#[async_trait]
pub trait TaskQueue: Send + Sync {
    /// Up to `limit` webhook tasks with no owner at all, lowest id first:
    /// what Phorge queues, found without reading the leased ones.
    async fn unleased_tasks(&self, limit: u64) -> Result<Vec<u64>, StoreError>;

    /// Up to `limit` adoptable webhook tasks, lowest id first, each with
    /// whether it is a yield.
    async fn adoptable_tasks(&self, limit: u64) -> Result<Vec<AdoptableTask>, StoreError>;

    /// Leases those of `ids` that are still adoptable webhook tasks to
    /// `owner` until `lease` from now, in one compare-and-set against
    /// Phorge's taskmasters (whose own lease re-checks the owner it saw).
    /// How many it leased.
    async fn lease_tasks(
        &self,
        ids: &[u64],
        owner: &str,
        lease: Duration,
    ) -> Result<u64, StoreError>;

    /// Extends to `lease` from now every daemon instance's lease on a
    /// webhook task that has not lapsed and ends within `due_within`; a
    /// lapsed lease is never extended. How many it extended.
    async fn renew_daemon_leases(
        &self,
        lease: Duration,
        due_within: Duration,
    ) -> Result<u64, StoreError>;

    /// The webhook tasks whose `objectPHID` is one of `request_phids`.
    async fn tasks_of_requests(
        &self,
        request_phids: &[&str],
    ) -> Result<Vec<RequestTask>, StoreError>;

    /// Up to `limit` webhook tasks a daemon instance leases (lapsed or
    /// not) whose request is no longer `queued` or is gone, lowest id
    /// first.
    async fn ended_tasks(&self, limit: u64) -> Result<Vec<EndedTask>, StoreError>;

    /// Archives those of `ids` a daemon instance still leases as Phorge
    /// archives a task (the same id, lease and data row, `result`, a
    /// duration of 0, archived now) and removes them from the queue, so
    /// that of two deliverers only one moves a task; a task found in the
    /// archive already (an earlier move whose answer was lost) is only
    /// removed. How many it moved.
    async fn archive_tasks(&self, ids: &[u64], result: ArchiveResult) -> Result<u64, StoreError>;

    /// Hands back every webhook task leased under an owner string that
    /// starts with `owner_prefix` (one instance's): no owner, so a
    /// taskmaster's lease query takes it at once, as Phorge's own
    /// "break the lease" does. How many it handed back.
    async fn release_leases(&self, owner_prefix: &str) -> Result<u64, StoreError>;

    /// The queue's clock, which Phorge's own timestamps run on.
    async fn queue_now(&self) -> Result<UnixTime, StoreError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(owner: Option<&str>, secs_left: Option<i64>) -> TaskLease {
        TaskLease {
            owner: owner.map(str::to_owned),
            secs_left,
        }
    }

    #[test]
    fn what_a_taskmaster_could_run_and_what_may_be_adopted() {
        let taskmaster = Some("4242:1700000000:php-host:1");
        let daemon = Some("gorge-webhook:host:1:0000abcd:1");
        // (lease, adoptable, runnable by PHP, a daemon's)
        for (lease, adoptable, runnable, daemons) in [
            (lease(None, None), true, true, false),
            (lease(Some(YIELD_OWNER), Some(15)), true, false, false),
            (lease(Some(YIELD_OWNER), Some(-1)), true, true, false),
            (lease(taskmaster, Some(7_000)), false, false, false),
            (lease(taskmaster, Some(0)), false, false, false),
            (lease(taskmaster, Some(-1)), true, true, false),
            (lease(taskmaster, None), false, false, false),
            (lease(daemon, Some(300)), false, false, true),
            (lease(daemon, Some(-1)), true, true, true),
        ] {
            assert_eq!(lease.adoptable(), adoptable, "{lease:?}");
            assert_eq!(lease.runnable_by_php(), runnable, "{lease:?}");
            assert_eq!(lease.is_daemons(), daemons, "{lease:?}");
        }
    }
}
