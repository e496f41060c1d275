//! Task adoption in the simulation. Phorge's side: a webhook task queued
//! just after most rows (none for a few), and a taskmaster that leases
//! whatever Phorge's lease query finds, then never finishes it (or yields
//! it), so its lease lapses. The daemon's side: every dispatcher's store
//! gated by an adoption of its own whose rounds run beside it and die with
//! it. The invariants: a claim is won only while a daemon leases the row's
//! task (or, without a task, once the row is past the grace), and every
//! task ends archived with the result its row's end calls for.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::executor::LocalSpawner;
use futures::future::LocalBoxFuture;
use futures::task::LocalSpawnExt;
use futures::FutureExt;
use rand::Rng;
use webhook_core::adoption::{run_rounds, ArchiveResult, TaskAdoption, TASK_GRACE_SECS};
use webhook_core::memory_store::MemoryStore;
use webhook_core::{
    CandidateQuery, Claim, Clock, Hook, HookLock, RequestRow, RequestStatus, ResultWrite, Store,
    StoreError, UnixTime, Written,
};

use super::{Shared, CHAOS};

/// Phorge's side of the run, as it happened.
#[derive(Debug, Default)]
pub(super) struct Phorge {
    /// Every task queued: its request's PHID and its id.
    tasks: Vec<(String, u64)>,
    /// Tasks decided on but not queued yet.
    pending: usize,
    /// Leases a taskmaster took.
    pub(super) php_leases: usize,
    /// Claims of rows whose task no daemon leased.
    violations: Vec<String>,
}

/// One dispatcher's store, adopting tasks, and the rounds to run beside
/// it (they end with it).
pub(super) fn adopting_store(
    store: &MemoryStore,
    shared: &Shared,
    instance: usize,
) -> (
    Arc<dyn Store>,
    Arc<TaskAdoption>,
    LocalBoxFuture<'static, ()>,
) {
    let pid = u32::try_from(instance).unwrap_or(u32::MAX);
    let adoption = Arc::new(TaskAdoption::new("sim", pid));
    let gated = store.clone().with_task_adoption(Arc::clone(&adoption));
    let watched = Arc::new(ClaimWatch {
        store: gated,
        shared: shared.clone(),
    });
    let (queue, clock, rounds_of) = (store.clone(), shared.clock.clone(), Arc::clone(&adoption));
    let rounds = async move {
        let never = run_rounds(&rounds_of, &queue, &clock, |err| {
            panic!("an adoption round failed in memory: {err}")
        })
        .await;
        match never {}
    };
    (watched, adoption, rounds.boxed_local())
}

/// Decides whether `request_phid` gets a task (most do) and queues it a
/// moment later, as Phorge inserts it just after the row.
pub(super) fn queue_task_soon(
    spawner: &LocalSpawner,
    shared: &Shared,
    store: &MemoryStore,
    request_phid: String,
) {
    let delay = {
        let mut world = shared.world();
        if world.rng.random_range(0..100) < 10 {
            return;
        }
        world.phorge.pending += 1;
        Duration::from_millis(world.rng.random_range(0..2_000))
    };
    let (shared, store) = (shared.clone(), store.clone());
    spawner
        .spawn_local(async move {
            shared.clock.sleep(delay).await;
            let task = store.queue_webhook_task(&request_phid);
            let mut world = shared.world();
            world.phorge.pending -= 1;
            world.phorge.tasks.push((request_phid, task));
        })
        .expect("spawn");
}

/// A taskmaster looking for work now and then during the chaos: it leases
/// what Phorge's lease query finds (any task, for 5 to 40 s), and then
/// either dies with it or yields it for a while.
pub(super) fn spawn_taskmaster(spawner: &LocalSpawner, shared: &Shared, store: &MemoryStore) {
    let (shared, store) = (shared.clone(), store.clone());
    spawner
        .spawn_local(async move {
            let mut looks = 0;
            while shared.clock.monotonic() < CHAOS {
                let (pause, lease_secs, yield_secs) = {
                    let mut world = shared.world();
                    let yields = world.rng.random_range(0..100) < 25;
                    (
                        Duration::from_millis(world.rng.random_range(100..1_000)),
                        world.rng.random_range(5..40),
                        yields.then(|| world.rng.random_range(1..20)),
                    )
                };
                shared.clock.sleep(pause).await;
                looks += 1;
                let owner = format!("{looks}:1700000000:php-sim:1");
                if let Some(task) = store.taskmaster_lease(&owner, lease_secs) {
                    shared.world().phorge.php_leases += 1;
                    if let Some(secs) = yield_secs {
                        store.set_task_lease(task, Some("(yield)"), Some(secs));
                    }
                }
            }
        })
        .expect("spawn");
}

/// Whether every task decided on is queued and archived.
pub(super) fn all_archived(shared: &Shared, store: &MemoryStore) -> bool {
    let world = shared.world();
    world.phorge.pending == 0
        && world
            .phorge
            .tasks
            .iter()
            .all(|(_, task)| store.archived_task(*task).is_some())
}

/// Task adoption's invariants, once every row is final.
pub(super) fn check(shared: &Shared, store: &MemoryStore) -> Result<(), String> {
    let world = shared.world();
    if let Some(violation) = world.phorge.violations.first() {
        return Err(violation.clone());
    }
    for (request, task) in &world.phorge.tasks {
        let Some(archived) = store.archived_task(*task) else {
            return Err(format!("task {task} of {request} never archived"));
        };
        let row = store
            .rows()
            .into_iter()
            .find(|row| &row.phid == request)
            .ok_or_else(|| format!("{request}: no row"))?;
        let expected = match row.status {
            RequestStatus::Sent => ArchiveResult::Success,
            _ => ArchiveResult::Failure,
        };
        if archived.result != expected {
            return Err(format!(
                "task {task} of {request} archived as {:?}, its row is {}",
                archived.result, row.status
            ));
        }
    }
    Ok(())
}

/// The store as one dispatcher sees it: every claim is checked first.
struct ClaimWatch {
    store: MemoryStore,
    shared: Shared,
}

impl ClaimWatch {
    /// Notes a claim won on a row whose task no daemon leases, or on a
    /// row without a task inside the grace.
    fn check_claim(&self, id: u64) {
        let Some(row) = self.store.row(id) else {
            return;
        };
        let now = self.shared.clock.now();
        let mut world = self.shared.world();
        let leases: Vec<_> = world
            .phorge
            .tasks
            .iter()
            .filter(|(request, _)| *request == row.phid)
            .filter_map(|(_, task)| self.store.task_lease(*task))
            .collect();
        let claimable = if leases.is_empty() {
            row.date_created + TASK_GRACE_SECS <= now
        } else {
            leases
                .iter()
                .all(|lease| lease.is_daemons() && !lease.lapsed())
        };
        if !claimable {
            world.phorge.violations.push(format!(
                "row {id} claimed at {now} while its task stood {leases:?} \
                 (created {})",
                row.date_created
            ));
        }
    }
}

#[async_trait]
impl Store for ClaimWatch {
    async fn candidates(&self, query: &CandidateQuery) -> Result<Vec<RequestRow>, StoreError> {
        self.store.candidates(query).await
    }

    async fn newest_id(&self) -> Result<u64, StoreError> {
        self.store.newest_id().await
    }

    async fn claim(&self, id: u64, seen_version: UnixTime) -> Result<Claim, StoreError> {
        let claim = self.store.claim(id, seen_version).await?;
        if let Claim::Won(_) = claim {
            self.check_claim(id);
        }
        Ok(claim)
    }

    async fn write_result(&self, write: &ResultWrite) -> Result<Written, StoreError> {
        self.store.write_result(write).await
    }

    async fn hook(&self, phid: &str) -> Result<Option<Hook>, StoreError> {
        self.store.hook(phid).await
    }

    async fn breaker_failures(&self, hook_phid: &str, since: UnixTime) -> Result<u64, StoreError> {
        self.store.breaker_failures(hook_phid, since).await
    }

    async fn claims_in_flight(
        &self,
        hook_phid: &str,
        lease_cutoff: UnixTime,
    ) -> Result<u64, StoreError> {
        self.store.claims_in_flight(hook_phid, lease_cutoff).await
    }

    async fn lock_hook(&self, hook_phid: &str) -> Result<Option<Box<dyn HookLock>>, StoreError> {
        self.store.lock_hook(hook_phid).await
    }
}
