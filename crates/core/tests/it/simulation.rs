//! A deterministic simulation of the claim protocol: several dispatchers
//! share one `MemoryStore`, receivers answer with random latency and
//! failures, dispatchers are killed mid-delivery and replaced, and rows
//! keep arriving. Every seed is checked against the invariants in
//! [`check`]; a failing seed is printed so `SIM_SEED=<n>` replays it.
//! `SIM_SEEDS=<n>` runs more seeds. The same runs with task adoption on
//! (Phorge queueing a task per row and a taskmaster competing for them)
//! are held to adoption's invariants too (`adoption`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use futures::executor::{LocalPool, LocalSpawner};
use futures::future::{abortable, AbortHandle};
use futures::task::LocalSpawnExt;
use futures::FutureExt;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::Value;
use webhook_core::adoption::TaskAdoption;
use webhook_core::memory_store::{MemoryStore, NewRequest};
use webhook_core::windows::{Settings, Windows};
use webhook_core::{
    Clock, DeliveryResult, Dispatcher, LastResult, ManualClock, Metrics, OutboundRequest,
    RequestStatus, Resolution, Store, Target, Transport, TransportFailure,
};

use crate::support::{hook, START};

mod adoption;

const HOOKS: usize = 4;
const ROWS: usize = 24;
const DISPATCHERS: usize = 3;
const KILLS: usize = 3;
/// After this much virtual time receivers behave and nobody is killed, so
/// every row must reach a final state.
const CHAOS: Duration = Duration::from_secs(60);
const HORIZON: Duration = Duration::from_secs(3_600);
const DISABLED_HOOK: &str = "PHID-HWBH-simdisabledddddddddd";

fn settings() -> Settings {
    Settings {
        poll_interval: Duration::from_millis(500),
        wake_probe: Duration::from_millis(200),
        delivery_timeout: Duration::from_secs(2),
        max_concurrent: 2,
        breaker_window_secs: 20,
        breaker_threshold: 4,
        retry_backoff_secs: 3,
        claim_lease_secs: 5,
        retry_after_max_secs: 3600,
        batch_size: 8,
    }
}

/// One POST as a receiver saw it.
#[derive(Debug, Clone)]
struct Attempt {
    request: String,
    uri: String,
    dispatcher: usize,
    /// The row's `dateModified` when the POST began: the version its
    /// claim wrote (a row is claimed before it is sent, and nothing else
    /// writes it while the POST runs).
    claimed_version: u64,
    start: Duration,
    /// When the receiver's answer reached the dispatcher.
    end: Option<Duration>,
    /// When the dispatcher died with the request in flight.
    abandoned: Option<Duration>,
    ok: bool,
}

impl Attempt {
    fn stop(&self) -> Duration {
        self.end.or(self.abandoned).unwrap_or(Duration::MAX)
    }
}

struct World {
    rng: ChaCha8Rng,
    attempts: Vec<Attempt>,
    /// Phorge's task queue side, when adopting.
    phorge: adoption::Phorge,
}

#[derive(Clone)]
struct Shared {
    clock: ManualClock,
    world: Arc<Mutex<World>>,
}

impl Shared {
    fn world(&self) -> MutexGuard<'_, World> {
        self.world.lock().unwrap_or_else(|e| e.into_inner())
    }
}

struct SimTransport {
    id: usize,
    shared: Shared,
    /// To read the version the POSTed row was claimed with.
    store: MemoryStore,
}

/// Marks an attempt abandoned when its dispatcher is dropped mid-flight.
struct InFlight {
    shared: Shared,
    index: usize,
    done: bool,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if !self.done {
            let now = self.shared.clock.monotonic();
            self.shared.world().attempts[self.index].abandoned = Some(now);
        }
    }
}

#[async_trait]
impl Transport for SimTransport {
    async fn resolve(&self, uri: &str) -> Resolution {
        Resolution::Ready(Target {
            uri: uri.to_owned(),
            addrs: Vec::new(),
        })
    }

    async fn deliver(&self, request: OutboundRequest) -> DeliveryResult {
        let now = self.shared.clock.monotonic();
        let (index, latency, result) = {
            let mut world = self.shared.world();
            let (latency, result) = if now >= CHAOS {
                (Duration::from_millis(world.rng.random_range(0..200)), ok())
            } else {
                let latency = Duration::from_millis(world.rng.random_range(0..3_000));
                let result = match world.rng.random_range(0..100) {
                    0..=69 => ok(),
                    70..=84 => DeliveryResult::Response { status: 500 },
                    _ => DeliveryResult::Failed(TransportFailure::Connect),
                };
                (latency, result)
            };
            world.attempts.push(Attempt {
                request: request.request_phid.clone(),
                uri: request.target.uri.clone(),
                dispatcher: self.id,
                claimed_version: claimed_version(&self.store, &request.request_phid),
                start: now,
                end: None,
                abandoned: None,
                ok: false,
            });
            (world.attempts.len() - 1, latency, result)
        };
        let mut guard = InFlight {
            shared: self.shared.clone(),
            index,
            done: false,
        };
        let (latency, result) = if latency > request.timeout {
            (request.timeout, DeliveryResult::Timeout)
        } else {
            (latency, result)
        };
        self.shared.clock.sleep(latency).await;
        guard.done = true;
        let mut world = self.shared.world();
        let attempt = &mut world.attempts[index];
        attempt.end = Some(self.shared.clock.monotonic());
        attempt.ok = result.is_success();
        result
    }
}

fn ok() -> DeliveryResult {
    DeliveryResult::Response { status: 200 }
}

/// Starts dispatchers on the pool and remembers how to kill them.
#[derive(Clone)]
struct Fleet {
    spawner: LocalSpawner,
    shared: Shared,
    store: MemoryStore,
    live: Arc<Mutex<Vec<AbortHandle>>>,
    started: Arc<Mutex<usize>>,
    /// Every dispatcher's counters, the killed ones' too.
    metrics: Arc<Mutex<Vec<Arc<Metrics>>>>,
    /// Whether each dispatcher adopts Phorge's tasks.
    adopting: bool,
    /// Every dispatcher's task adoption, the killed ones' too.
    adoptions: Arc<Mutex<Vec<Arc<TaskAdoption>>>>,
}

impl Fleet {
    fn spawn(&self) {
        let id = {
            let mut started = self.started.lock().unwrap_or_else(|e| e.into_inner());
            *started += 1;
            *started
        };
        let (store, rounds): (Arc<dyn Store>, _) = if self.adopting {
            let (store, adoption, rounds) = adoption::adopting_store(&self.store, &self.shared, id);
            self.adoptions
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(adoption);
            (store, rounds)
        } else {
            (
                Arc::new(self.store.clone()),
                futures::future::pending().boxed_local(),
            )
        };
        let dispatcher = Dispatcher::new(
            store,
            Arc::new(SimTransport {
                id,
                shared: self.shared.clone(),
                store: self.store.clone(),
            }),
            Arc::new(self.shared.clock.clone()),
            Windows::try_new(settings()).expect("valid"),
        );
        self.metrics
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(dispatcher.metrics());
        // Its adoption rounds die with it, as in one process.
        let (run, handle) = abortable(async move {
            futures::future::join(dispatcher.run(futures::future::pending()), rounds).await
        });
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(handle);
        self.spawner
            .spawn_local(async move {
                let _ = run.await;
            })
            .expect("spawn");
    }

    /// Drops a live dispatcher's future, as `kill -9` would end its process.
    fn kill(&self, victim: usize) {
        let handle = {
            let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
            let index = victim % live.len();
            live.remove(index)
        };
        handle.abort();
    }
}

struct Sim {
    shared: Shared,
    store: MemoryStore,
    pool: LocalPool,
    fleet: Fleet,
}

impl Sim {
    fn new(seed: u64, adopting: bool) -> Self {
        let clock = ManualClock::new(START);
        let shared = Shared {
            clock: clock.clone(),
            world: Arc::new(Mutex::new(World {
                rng: ChaCha8Rng::seed_from_u64(seed),
                attempts: Vec::new(),
                phorge: adoption::Phorge::default(),
            })),
        };
        let store = MemoryStore::new(Arc::new(clock));
        for i in 0..HOOKS {
            store.put_hook(hook(&hook_phid(i), &hook_uri(i)));
        }
        let mut disabled = hook(DISABLED_HOOK, "http://sim-disabled.test/");
        disabled.status = "disabled".into();
        store.put_hook(disabled);
        let pool = LocalPool::new();
        let fleet = Fleet {
            spawner: pool.spawner(),
            shared: shared.clone(),
            store: store.clone(),
            live: Arc::default(),
            started: Arc::default(),
            metrics: Arc::default(),
            adopting,
            adoptions: Arc::default(),
        };
        Self {
            shared,
            store,
            pool,
            fleet,
        }
    }

    fn start(&mut self) {
        for _ in 0..DISPATCHERS {
            self.fleet.spawn();
        }
        self.spawn_producer();
        self.spawn_chaos();
        if self.fleet.adopting {
            adoption::spawn_taskmaster(&self.pool.spawner(), &self.shared, &self.store);
        }
    }

    /// Inserts rows at random moments during the first 30 s.
    fn spawn_producer(&self) {
        let shared = self.shared.clone();
        let store = self.store.clone();
        let (spawner, adopting) = (self.pool.spawner(), self.fleet.adopting);
        self.pool
            .spawner()
            .spawn_local(async move {
                for n in 0..ROWS {
                    let (pause, hook, forever) = {
                        let mut world = shared.world();
                        (
                            Duration::from_millis(world.rng.random_range(0..2_500)),
                            world.rng.random_range(0..HOOKS),
                            world.rng.random_range(0..100) < 80,
                        )
                    };
                    shared.clock.sleep(pause).await;
                    let hook_phid = if n % 12 == 11 {
                        DISABLED_HOOK.to_owned()
                    } else {
                        hook_phid(hook)
                    };
                    let retry = if forever { "forever" } else { "never" };
                    let id = store.insert_request(NewRequest::queued(
                        &hook_phid,
                        &format!(r#"{{"retry":"{retry}","triggerPHIDs":["PHID-HRUL-sim"]}}"#),
                    ));
                    if adopting {
                        let phid = store.row(id).map(|row| row.phid).unwrap_or_default();
                        adoption::queue_task_soon(&spawner, &shared, &store, phid);
                    }
                }
            })
            .expect("spawn");
    }

    /// Kills random dispatchers mid-run and starts replacements.
    fn spawn_chaos(&self) {
        let shared = self.shared.clone();
        let fleet = self.fleet.clone();
        self.pool
            .spawner()
            .spawn_local(async move {
                for _ in 0..KILLS {
                    let (pause, victim, restart_after) = {
                        let mut world = shared.world();
                        (
                            Duration::from_millis(world.rng.random_range(1_000..15_000)),
                            world.rng.random_range(0..DISPATCHERS),
                            Duration::from_millis(world.rng.random_range(0..5_000)),
                        )
                    };
                    shared.clock.sleep(pause).await;
                    fleet.kill(victim);
                    shared.clock.sleep(restart_after).await;
                    fleet.spawn();
                }
            })
            .expect("spawn");
    }

    /// Every row final and, when adopting, every task archived.
    fn all_final(&self) -> bool {
        let rows = self.store.rows();
        rows.len() == ROWS
            && rows.iter().all(|r| r.status != RequestStatus::Queued)
            && (!self.fleet.adopting || adoption::all_archived(&self.shared, &self.store))
    }

    /// Runs until every row is final or the horizon passes.
    fn run(&mut self) -> bool {
        loop {
            self.pool.run_until_stalled();
            if self.all_final() {
                return true;
            }
            if self.shared.clock.monotonic() > HORIZON
                || !self.shared.clock.advance_to_next_sleeper()
            {
                return false;
            }
        }
    }
}

fn hook_phid(i: usize) -> String {
    format!("PHID-HWBH-sim{i:017}")
}

fn hook_uri(i: usize) -> String {
    format!("http://sim-{i}.test/")
}

fn claimed_version(store: &MemoryStore, request_phid: &str) -> u64 {
    store
        .rows()
        .iter()
        .find(|row| row.phid == request_phid)
        .map_or(0, |row| row.date_modified)
}

fn secs_at(t: Duration) -> u64 {
    START + t.as_secs()
}

/// The invariants, stated once.
fn check(sim: &Sim, finished: bool) -> Result<(), String> {
    if sim.fleet.adopting {
        adoption::check(&sim.shared, &sim.store)?;
    }
    let lease = Windows::try_new(settings()).expect("valid").lease_secs();
    let world = sim.shared.world();
    let rows = sim.store.rows();
    if !finished {
        let stuck: Vec<_> = rows
            .iter()
            .filter(|r| r.status == RequestStatus::Queued)
            .map(|r| r.id)
            .collect();
        return Err(format!("rows never reached a final state: {stuck:?}"));
    }

    let mut by_request: HashMap<&str, Vec<&Attempt>> = HashMap::new();
    let mut by_uri: HashMap<&str, Vec<&Attempt>> = HashMap::new();
    for attempt in &world.attempts {
        by_request
            .entry(&attempt.request)
            .or_default()
            .push(attempt);
        by_uri.entry(&attempt.uri).or_default().push(attempt);
    }

    // 1. A row is POSTed again only after the previous attempt ended, and
    //    after a dead claimer's lease; never after a stored success.
    for (request, attempts) in &by_request {
        for pair in attempts.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            if a.ok && a.abandoned.is_none() {
                return Err(format!(
                    "{request}: sent again after a stored 2xx: {a:?} then {b:?}"
                ));
            }
            if b.start < a.stop() {
                return Err(format!("{request}: overlapping POSTs {a:?} and {b:?}"));
            }
            // The store offers a row again once `dateModified` is a lease
            // old; the claim, not the POST, set it (a row claimed along
            // with an earlier one is POSTed a little after its claim).
            if a.abandoned.is_some() && secs_at(b.start) < a.claimed_version + lease {
                return Err(format!(
                    "{request}: taken over inside the dead claimer's lease: {a:?} then {b:?}"
                ));
            }
        }
    }

    // 2. One delivery per hook at a time, across all dispatchers.
    for (uri, attempts) in &by_uri {
        let mut spans: Vec<(Duration, Duration, usize)> = attempts
            .iter()
            .map(|a| (a.start, a.stop(), a.dispatcher))
            .collect();
        spans.sort();
        for pair in spans.windows(2) {
            if pair[1].0 < pair[0].1 {
                return Err(format!("{uri}: concurrent deliveries {pair:?}"));
            }
        }
    }

    // 3. Every row ends in a state Phorge allows, consistent with what the
    //    receivers saw.
    for row in &rows {
        let props: Value = serde_json::from_str(&row.properties)
            .map_err(|e| format!("row {}: properties not JSON: {e}", row.id))?;
        let seen = by_request
            .get(row.phid.as_str())
            .map_or(&[][..], |v| v.as_slice());
        match (row.status, row.last_request_result) {
            (RequestStatus::Sent, LastResult::Okay) => {
                if props["errorType"] != "http" || props["errorCode"] != 200 {
                    return Err(format!("row {}: sent with {props}", row.id));
                }
                if !seen.iter().any(|a| a.ok) {
                    return Err(format!("row {}: sent without a 2xx", row.id));
                }
            }
            (RequestStatus::Failed, LastResult::Fail) => {
                if props["retry"] == "forever" {
                    return Err(format!("row {}: retry=forever row failed", row.id));
                }
            }
            (RequestStatus::Failed, LastResult::None) => {
                if row.webhook_phid != DISABLED_HOOK
                    || props["errorCode"] != "disabled"
                    || row.last_request_epoch != 0
                    || !seen.is_empty()
                {
                    return Err(format!("row {}: unexpected hook error {props}", row.id));
                }
            }
            other => return Err(format!("row {}: state {other:?} not allowed", row.id)),
        }
    }
    Ok(())
}

fn run_seed(seed: u64, adopting: bool) -> Result<usize, String> {
    let mut sim = Sim::new(seed, adopting);
    sim.start();
    let finished = sim.run();
    check(&sim, finished)?;
    let attempts = sim.shared.world().attempts.len();
    Ok(attempts)
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn seeds() -> Vec<u64> {
    match env_u64("SIM_SEED") {
        Some(seed) => vec![seed],
        None => (0..env_u64("SIM_SEEDS").unwrap_or(1_000)).collect(),
    }
}

#[test]
fn many_dispatchers_never_double_send_and_lose_nothing() {
    run_seeds(false);
}

/// With task adoption on: rows whose task no daemon leases are never
/// claimed, every task ends archived, and still no row goes twice.
#[test]
fn adopting_dispatchers_claim_only_rows_whose_task_a_daemon_leases() {
    run_seeds(true);
}

fn run_seeds(adopting: bool) {
    let seeds = seeds();
    let mut attempts = 0;
    for seed in &seeds {
        match run_seed(*seed, adopting) {
            Ok(n) => attempts += n,
            Err(why) => panic!(
                "simulation seed {seed} (adopting: {adopting}) failed \
                 (replay with SIM_SEED={seed}): {why}"
            ),
        }
    }
    // Failures and takeovers mean more POSTs than rows.
    assert!(attempts > seeds.len() * ROWS, "{attempts} attempts");
}

#[test]
fn the_simulation_exercises_kills_retries_and_breakers() {
    // Guards against a simulation that silently stopped testing anything.
    let mut abandoned = 0;
    let mut failures = 0;
    let mut claims_unused = 0;
    for seed in 0..50 {
        let mut sim = Sim::new(seed, false);
        sim.start();
        assert!(sim.run(), "seed {seed} did not finish");
        let world = sim.shared.world();
        abandoned += world
            .attempts
            .iter()
            .filter(|a| a.abandoned.is_some())
            .count();
        failures += world
            .attempts
            .iter()
            .filter(|a| a.end.is_some() && !a.ok)
            .count();
        for metrics in sim
            .fleet
            .metrics
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            claims_unused += metrics.snapshot().claims_unused;
        }
    }

    assert!(abandoned > 0, "no delivery was ever cut by a kill");
    assert!(failures > 50, "receivers hardly failed: {failures}");
    // Rows claimed along with an earlier one and then not sent in time:
    // the claim groups, and their way out, are exercised.
    assert!(
        claims_unused > 0,
        "no row claimed ahead was ever left to its lease"
    );
}

#[test]
fn the_adopting_simulation_exercises_taskmasters_and_the_gate() {
    // Guards against an adoption simulation that stopped testing anything:
    // taskmasters win tasks, and the gate leaves their rows waiting.
    let (mut php_leases, mut rows_waiting, mut archived) = (0, 0, 0);
    for seed in 0..50 {
        let mut sim = Sim::new(seed, true);
        sim.start();
        assert!(sim.run(), "seed {seed} did not finish");
        php_leases += sim.shared.world().phorge.php_leases;
        archived += sim.store.archived_task_count();
        for adoption in sim
            .fleet
            .adoptions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            rows_waiting += adoption.totals().rows_waiting_for_php;
        }
    }
    assert!(php_leases > 50, "taskmasters hardly leased: {php_leases}");
    assert!(rows_waiting > 0, "the gate never left a row to PHP");
    assert!(archived > 50 * ROWS / 2, "few tasks archived: {archived}");
}
