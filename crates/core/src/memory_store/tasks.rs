//! Phorge's task queue in memory: `MemoryStore`'s [`TaskQueue`], with the
//! SQL's semantics (tasks of any class, leases and yields, expiry by the
//! store's clock, the archive keeping a task's id), and the Phorge side a
//! test plays: queueing a task as `queueCall` does, setting a lease, and
//! a taskmaster's lease taken by Phorge's protocol.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;

use super::{MemoryStore, StoreOp};
use crate::adoption::{
    AdoptableTask, ArchiveResult, EndedTask, RequestTask, TaskLease, TaskQueue, WEBHOOK_TASK_CLASS,
    YIELD_OWNER,
};
use crate::model::{RequestStatus, UnixTime};
use crate::store::StoreError;

/// Phorge's default task priority, which webhook tasks get.
const PRIORITY_DEFAULT: u32 = 2_000;

/// A task in `worker_activetask`.
#[derive(Debug, Clone)]
struct ActiveTask {
    class: String,
    object_phid: Option<String>,
    lease_owner: Option<String>,
    lease_expires: Option<UnixTime>,
    priority: u32,
}

impl ActiveTask {
    fn lease(&self, now: UnixTime) -> TaskLease {
        TaskLease {
            owner: self.lease_owner.clone(),
            secs_left: self.lease_expires.map(|at| signed(at) - signed(now)),
        }
    }

    fn is_webhook(&self) -> bool {
        self.class == WEBHOOK_TASK_CLASS
    }
}

fn signed(secs: UnixTime) -> i64 {
    i64::try_from(secs).unwrap_or(i64::MAX)
}

/// A task in `worker_archivetask`, as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchivedTask {
    /// `result`.
    pub result: ArchiveResult,
    /// `leaseOwner` as it stood when archived.
    pub lease_owner: Option<String>,
    /// `taskClass`.
    pub task_class: String,
    /// `objectPHID`.
    pub object_phid: Option<String>,
    /// `archivedEpoch`.
    pub archived_at: UnixTime,
}

/// `worker_activetask` and `worker_archivetask`.
#[derive(Debug, Default)]
pub(super) struct Tasks {
    active: BTreeMap<u64, ActiveTask>,
    archived: BTreeMap<u64, ArchivedTask>,
}

impl Tasks {
    /// Phorge allocates task ids from a counter, and an archived task
    /// keeps its id.
    fn next_id(&self) -> u64 {
        let last = |ids: Option<&u64>| ids.copied().unwrap_or(0);
        last(self.active.keys().next_back()).max(last(self.archived.keys().next_back())) + 1
    }
}

impl MemoryStore {
    /// Queues a webhook task for `request_phid` as Phorge's `queueCall`
    /// does: unleased, of class `HeraldWebhookWorker`, its `objectPHID`
    /// the request. The id.
    pub fn queue_webhook_task(&self, request_phid: &str) -> u64 {
        self.queue_task(WEBHOOK_TASK_CLASS, Some(request_phid))
    }

    /// Queues an unleased task of `class` with this `objectPHID`. The id.
    pub fn queue_task(&self, class: &str, object_phid: Option<&str>) -> u64 {
        let mut inner = self.lock();
        let id = inner.tasks.next_id();
        inner.tasks.active.insert(
            id,
            ActiveTask {
                class: class.to_owned(),
                object_phid: object_phid.map(str::to_owned),
                lease_owner: None,
                lease_expires: None,
                priority: PRIORITY_DEFAULT,
            },
        );
        id
    }

    /// Sets a task's lease: `owner`, and `leaseExpires` this many seconds
    /// from the store's now (negative: lapsed; `None`: no expiry).
    pub fn set_task_lease(&self, id: u64, owner: Option<&str>, expires_in: Option<i64>) {
        let now = self.clock.now();
        let mut inner = self.lock();
        if let Some(task) = inner.tasks.active.get_mut(&id) {
            task.lease_owner = owner.map(str::to_owned);
            task.lease_expires = expires_in.map(|secs| now.saturating_add_signed(secs));
        }
    }

    /// The lease of a task in the active queue, if it is there.
    pub fn task_lease(&self, id: u64) -> Option<TaskLease> {
        let now = self.clock.now();
        self.lock()
            .tasks
            .active
            .get(&id)
            .map(|task| task.lease(now))
    }

    /// A task in the archive, if it is there.
    pub fn archived_task(&self, id: u64) -> Option<ArchivedTask> {
        self.lock().tasks.archived.get(&id).cloned()
    }

    /// Tasks in the archive.
    pub fn archived_task_count(&self) -> usize {
        self.lock().tasks.archived.len()
    }

    /// Leases one task as a Phorge taskmaster does, for `lease_secs`, or
    /// `None` when its lease query finds nothing it may run: first a task
    /// with no owner (by priority, then id), then one whose lease lapsed
    /// (soonest lapsed first). Any task class, as the taskmaster takes
    /// any.
    pub fn taskmaster_lease(&self, owner: &str, lease_secs: u64) -> Option<u64> {
        let now = self.clock.now();
        let mut inner = self.lock();
        let active = &mut inner.tasks.active;
        let unleased = active
            .iter()
            .filter(|(_, task)| task.lease_owner.is_none())
            .min_by_key(|(id, task)| (task.priority, **id))
            .map(|(id, _)| *id);
        let lapsed = || {
            active
                .iter()
                .filter(|(_, task)| task.lease(now).lapsed())
                .min_by_key(|(id, task)| (task.lease_expires, **id))
                .map(|(id, _)| *id)
        };
        let id = unleased.or_else(lapsed)?;
        let task = active.get_mut(&id)?;
        task.lease_owner = Some(owner.to_owned());
        task.lease_expires = Some(now.saturating_add(lease_secs));
        Some(id)
    }

    /// Counts the call, and fails it when a fault is injected.
    fn tasks_call(&self) -> Result<(), StoreError> {
        Self::check_fault(&mut self.lock(), StoreOp::Tasks)
    }
}

#[async_trait]
impl TaskQueue for MemoryStore {
    async fn unleased_tasks(&self, limit: u64) -> Result<Vec<u64>, StoreError> {
        self.tasks_call()?;
        Ok(self.webhook_tasks(limit, |task, _| task.lease_owner.is_none()))
    }

    async fn adoptable_tasks(&self, limit: u64) -> Result<Vec<AdoptableTask>, StoreError> {
        self.tasks_call()?;
        Ok(self.webhook_tasks_as(
            limit,
            |task, now| task.lease(now).adoptable(),
            |id, task| AdoptableTask {
                id,
                yielded: task.lease_owner.as_deref() == Some(YIELD_OWNER),
            },
        ))
    }

    async fn lease_tasks(
        &self,
        ids: &[u64],
        owner: &str,
        lease: Duration,
    ) -> Result<u64, StoreError> {
        self.tasks_call()?;
        let now = self.clock.now();
        let mut inner = self.lock();
        let mut leased = 0;
        for (id, task) in inner.tasks.active.iter_mut() {
            if ids.contains(id) && task.is_webhook() && task.lease(now).adoptable() {
                task.lease_owner = Some(owner.to_owned());
                task.lease_expires = Some(now.saturating_add(lease.as_secs()));
                leased += 1;
            }
        }
        Ok(leased)
    }

    async fn renew_daemon_leases(
        &self,
        lease: Duration,
        due_within: Duration,
    ) -> Result<u64, StoreError> {
        self.tasks_call()?;
        let now = self.clock.now();
        let due_within = signed(due_within.as_secs());
        let mut inner = self.lock();
        let mut renewed = 0;
        for task in inner.tasks.active.values_mut() {
            let held = task.lease(now);
            let due = held
                .secs_left
                .is_some_and(|left| (0..due_within).contains(&left));
            if task.is_webhook() && held.is_daemons() && due {
                task.lease_expires = Some(now.saturating_add(lease.as_secs()));
                renewed += 1;
            }
        }
        Ok(renewed)
    }

    async fn release_leases(&self, owner_prefix: &str) -> Result<u64, StoreError> {
        self.tasks_call()?;
        let now = self.clock.now();
        let mut inner = self.lock();
        let mut released = 0;
        for task in inner.tasks.active.values_mut() {
            let ours = task
                .lease_owner
                .as_deref()
                .is_some_and(|owner| owner.starts_with(owner_prefix));
            if task.is_webhook() && ours {
                task.lease_owner = None;
                task.lease_expires = Some(now);
                released += 1;
            }
        }
        Ok(released)
    }

    async fn tasks_of_requests(
        &self,
        request_phids: &[&str],
    ) -> Result<Vec<RequestTask>, StoreError> {
        self.tasks_call()?;
        let now = self.clock.now();
        let inner = self.lock();
        Ok(inner
            .tasks
            .active
            .iter()
            .filter(|(_, task)| task.is_webhook())
            .filter_map(|(id, task)| {
                let phid = task.object_phid.as_deref()?;
                request_phids.contains(&phid).then(|| RequestTask {
                    request_phid: phid.to_owned(),
                    id: *id,
                    lease: task.lease(now),
                })
            })
            .collect())
    }

    async fn ended_tasks(&self, limit: u64) -> Result<Vec<EndedTask>, StoreError> {
        self.tasks_call()?;
        let now = self.clock.now();
        let inner = self.lock();
        let request = |phid: Option<&str>| {
            let phid = phid?;
            inner.rows.values().find(|row| row.phid == phid)
        };
        Ok(inner
            .tasks
            .active
            .iter()
            .filter(|(_, task)| task.is_webhook() && task.lease(now).is_daemons())
            .filter_map(|(id, task)| match request(task.object_phid.as_deref()) {
                Some(row) if row.status == RequestStatus::Queued => None,
                Some(row) => Some(EndedTask {
                    id: *id,
                    status: Some(row.status.as_str().to_owned()),
                    properties: Some(row.properties.clone()),
                }),
                None => Some(EndedTask {
                    id: *id,
                    status: None,
                    properties: None,
                }),
            })
            .take(usize::try_from(limit).unwrap_or(usize::MAX))
            .collect())
    }

    async fn archive_tasks(&self, ids: &[u64], result: ArchiveResult) -> Result<u64, StoreError> {
        self.tasks_call()?;
        let now = self.clock.now();
        let mut inner = self.lock();
        let tasks = &mut inner.tasks;
        let ours: Vec<u64> = tasks
            .active
            .iter()
            .filter(|(id, task)| {
                ids.contains(id) && task.is_webhook() && task.lease(now).is_daemons()
            })
            .map(|(id, _)| *id)
            .collect();
        for id in &ours {
            let Some(task) = tasks.active.remove(id) else {
                continue;
            };
            tasks.archived.entry(*id).or_insert(ArchivedTask {
                result,
                lease_owner: task.lease_owner,
                task_class: task.class,
                object_phid: task.object_phid,
                archived_at: now,
            });
        }
        Ok(u64::try_from(ours.len()).unwrap_or(u64::MAX))
    }

    async fn queue_now(&self) -> Result<UnixTime, StoreError> {
        self.tasks_call()?;
        Ok(self.clock.now())
    }
}

impl MemoryStore {
    /// Up to `limit` webhook tasks that `matches` (at the store's now),
    /// lowest id first.
    fn webhook_tasks(
        &self,
        limit: u64,
        matches: impl Fn(&ActiveTask, UnixTime) -> bool,
    ) -> Vec<u64> {
        self.webhook_tasks_as(limit, matches, |id, _| id)
    }

    /// Up to `limit` webhook tasks that `matches`, lowest id first, each
    /// as `view` makes it from its id and the task.
    fn webhook_tasks_as<T>(
        &self,
        limit: u64,
        matches: impl Fn(&ActiveTask, UnixTime) -> bool,
        view: impl Fn(u64, &ActiveTask) -> T,
    ) -> Vec<T> {
        let now = self.clock.now();
        self.lock()
            .tasks
            .active
            .iter()
            .filter(|(_, task)| task.is_webhook() && matches(task, now))
            .map(|(id, task)| view(*id, task))
            .take(usize::try_from(limit).unwrap_or(usize::MAX))
            .collect()
    }
}
