//! The delivery loop: polls candidates, groups them per hook, and runs each
//! hook's rows through SPEC §5 in id order, one delivery per hook at a time
//! and at most `max_concurrent` at once.
//!
//! It owns scheduling and the order of steps; every effect goes through the
//! `Store`, `Transport` and `Clock` it was given. It never spawns: all work
//! is driven inside the future returned by [`Dispatcher::run`].

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt;
use std::future::{poll_fn, Future};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;
use std::time::Duration;

use futures::future::{join_all, BoxFuture};
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tracing::{debug, error, info, warn};

use crate::clock::Clock;
use crate::events::{Event, EventKind, EventSink};
use crate::hold::SilentMode;
use crate::metrics::{bump, Metrics};
use crate::model::{Hook, RequestRow, UnixTime};
use crate::objects::{ObjectLookup, PhorgeObjects, Unseen};
use crate::outcome::{
    attempt_error, attempt_write, hook_error_write, AttemptOutcome, DeliveryResult, HookError,
    TransportFailure,
};
use crate::payload::Payload;
use crate::properties::ErrorCode;
use crate::properties::Properties;
use crate::store::{CandidateQuery, Claim, HookLock, Store, StoreError, Written};
use crate::transport::{OutboundRequest, Resolution, Target, Transport};
use crate::triage::{triage, HookLookup, Triage};
use crate::windows::Windows;

/// Tries for one write-back before the row is left to its lease.
const WRITE_ATTEMPTS: u32 = 6;
/// First pause between write-back tries; doubles each time.
const WRITE_RETRY_DELAY: Duration = Duration::from_millis(500);
/// How often a summary of the counters is logged while there is activity.
const SUMMARY_INTERVAL: Duration = Duration::from_secs(60);
/// Longest prefix of unparseable properties quoted in a log line.
const LOGGED_PROPERTIES_MAX: usize = 512;
/// How long a looked-up hook row is reused: a hook disabled or edited in
/// Phorge is seen within this time.
const HOOK_CACHE_TTL: Duration = Duration::from_secs(5);
/// While polls come back full (a backlog), each candidate query asks for
/// twice as many rows as the last, up to this many batches: over many
/// hooks a small batch holds one row per hook, so every delivery would pay
/// for its own lock, breaker count and unlock. The first poll after a
/// quiet spell asks for one batch, so fresh rows never queue behind a
/// large fetch.
const BACKLOG_BATCHES_MAX: usize = 16;
/// Most rows one claim takes (the row and those claimed along with it):
/// a hook run claims a fast hook's next rows in one group commit instead
/// of waiting for a commit before each POST (see [`ClaimGroup`]).
const CLAIM_AHEAD_MAX: usize = 16;
/// Write-backs a hook run may have in flight before it waits for them:
/// enough for a whole claim group.
const WRITES_BEHIND_MAX: usize = CLAIM_AHEAD_MAX;
/// A call that takes at least this long is reported (`hook_slow`), at most
/// once per [`SLOW_REPORT_INTERVAL`] per hook: such a hook holds one of the
/// `max_concurrent` slots while it answers, and nothing else.
const SLOW_CALL: Duration = Duration::from_secs(1);
const SLOW_REPORT_INTERVAL: Duration = Duration::from_secs(60);

/// Delivers queued requests. Cheap to share: `run` takes `&self`.
pub struct Dispatcher {
    store: Arc<dyn Store>,
    transport: Arc<dyn Transport>,
    clock: Arc<dyn Clock>,
    windows: Windows,
    metrics: Arc<Metrics>,
    open_breakers: Mutex<HashSet<String>>,
    hooks: Mutex<HashMap<String, CachedHook>>,
    /// Rows per claim for each hook seen (see [`ClaimGroup`]); unknown
    /// hooks start at one.
    pace: Mutex<HashMap<String, usize>>,
    silent_mode: Option<Arc<SilentMode>>,
    objects: Option<Arc<dyn PhorgeObjects>>,
    /// Why objects could not be looked up, each logged once.
    unseen_reported: Mutex<HashSet<Unseen>>,
    /// When each slow hook was last reported.
    slow_reported: Mutex<HashMap<String, Duration>>,
    /// Hooks whose last call took half the delivery timeout or more (a
    /// timeout included): they share at most half the slots, and their
    /// runs give their slot back after every row (see [`Self::may_start`]).
    slow_hooks: Mutex<HashSet<String>>,
    events: Option<Arc<dyn EventSink>>,
    /// The hold last reported as an event.
    reported_hold: AtomicBool,
}

/// A hook row (or its absence) and when it was read.
#[derive(Clone)]
struct CachedHook {
    hook: Option<Hook>,
    read_at: Duration,
}

impl fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dispatcher")
            .field("windows", &self.windows)
            .finish_non_exhaustive()
    }
}

/// What a hook run reports back to the loop.
struct RunReport {
    hook: String,
    ids: Vec<u64>,
    /// Leave this hook's rows out of candidate queries until the next tick.
    exclude: bool,
    /// The hook's lock, still held, for the next run of the same hook.
    kept: Option<HeldLock>,
}

/// A per-hook lock kept between runs, so a hook with a steady stream of
/// rows is locked (and its breaker counted) once, not once per batch.
struct HeldLock {
    lock: Box<dyn HookLock>,
    /// The breaker was below its threshold when last counted, and nothing
    /// has failed since. While the lock is held nobody else can add
    /// failures, and time only lets old ones slide out, so it stays true.
    breaker_closed: bool,
    idle_since: Duration,
    /// A named lock lives on one database session; if that session broke,
    /// the server freed the lock without telling us. Re-taking it once per
    /// lease bounds how long a broken session can go unnoticed.
    acquired_at: Duration,
}

/// What a candidate query found that this instance did not have yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    /// Nothing new (or the query failed).
    Nothing,
    /// Some new rows, fewer than the limit.
    Some,
    /// A full batch with new rows in it: there is a backlog.
    Full,
}

/// How processing one row ended for the rest of its hook run.
enum Step {
    Next,
    StopRun,
}

/// Rows fetched but not finished, per hook, and hooks kept out for a while.
#[derive(Default)]
struct Backlog {
    waiting: HashMap<String, BTreeMap<u64, RequestRow>>,
    pending: HashSet<u64>,
    active: HashSet<String>,
    excluded: HashMap<String, Duration>,
}

impl Backlog {
    /// Adds fetched rows; returns how many were new to this instance.
    fn absorb(&mut self, rows: Vec<RequestRow>) -> usize {
        let mut new = 0;
        for row in rows {
            let waiting = self.waiting.entry(row.webhook_phid.clone()).or_default();
            if self.pending.insert(row.id) {
                new += 1;
                waiting.insert(row.id, row);
            } else if let Some(seen) = waiting.get_mut(&row.id) {
                // Still waiting here: keep the newest version for the claim.
                *seen = row;
            }
        }
        self.waiting.retain(|_, rows| !rows.is_empty());
        new
    }

    /// The idle hook that `may_start` allows whose oldest waiting row is
    /// oldest, with all its rows.
    fn next_run(&mut self, may_start: impl Fn(&str) -> bool) -> Option<(String, Vec<RequestRow>)> {
        let hook = self
            .waiting
            .iter()
            .filter(|(hook, _)| !self.active.contains(*hook) && may_start(hook))
            .filter_map(|(hook, rows)| rows.keys().next().map(|first| (*first, hook)))
            .min()
            .map(|(_, hook)| hook.clone())?;
        let rows = self.waiting.remove(&hook)?.into_values().collect();
        self.active.insert(hook.clone());
        Some((hook, rows))
    }

    fn finish(&mut self, report: &RunReport, exclude_until: Duration) {
        self.active.remove(&report.hook);
        for id in &report.ids {
            self.pending.remove(id);
        }
        if report.exclude {
            self.excluded.insert(report.hook.clone(), exclude_until);
        }
    }

    /// Rows waiting for a hook that is not running and not `held_back`:
    /// what the next runs can start on. Rows a running (or held back)
    /// hook holds do not count, so a slow hook's queue never keeps the
    /// others from being polled.
    fn startable(&self, held_back: impl Fn(&str) -> bool) -> usize {
        self.waiting
            .iter()
            .filter(|(hook, _)| !self.active.contains(*hook) && !held_back(hook))
            .map(|(_, rows)| rows.len())
            .sum()
    }

    /// Hooks to leave out of the next candidate query: those kept out for
    /// a while, those running now and those waiting but `held_back` (their
    /// rows are in hand; re-reading them would only crowd out other hooks'
    /// rows).
    fn hooks_to_exclude(&self, held_back: impl Fn(&str) -> bool) -> Vec<String> {
        let waiting_held_back = self.waiting.keys().filter(|hook| held_back(hook));
        let mut hooks: Vec<String> = self
            .excluded
            .keys()
            .chain(self.active.iter())
            .chain(waiting_held_back)
            .cloned()
            .collect();
        hooks.sort();
        hooks.dedup();
        hooks
    }

    fn drop_waiting(&mut self) {
        for rows in self.waiting.drain().map(|(_, rows)| rows) {
            for id in rows.keys() {
                self.pending.remove(id);
            }
        }
    }
}

/// Per-run state: the hook row (looked up once), the lock, whether the
/// breaker is known to be closed, and the rows claimed ahead of their turn.
#[derive(Default)]
struct HookRun {
    hook: Option<Option<Hook>>,
    lock: Option<Box<dyn HookLock>>,
    lock_acquired_at: Duration,
    breaker_closed: bool,
    /// The current claim group's rows after its first, in id order.
    claimed: VecDeque<AheadRow>,
    group: Option<ClaimGroup>,
}

impl HookRun {
    /// This row's claim, if it was claimed along with an earlier row.
    fn take_claimed(&mut self, id: u64) -> Option<AheadRow> {
        match self.claimed.front() {
            Some(ahead) if ahead.id == id => self.claimed.pop_front(),
            _ => None,
        }
    }

    fn has_claimed(&self, id: u64) -> bool {
        self.claimed.front().is_some_and(|ahead| ahead.id == id)
    }
}

/// A claimed row, ready for its POST (step 8).
struct Claimed<'r> {
    row: &'r RequestRow,
    properties: &'r Properties,
    hook: &'r Hook,
    target: Result<Target, TransportFailure>,
    transactions: Transactions,
    claim: ClaimToken,
}

/// A won claim: when it was sent (its lease began no earlier) and the
/// version it wrote, which guards every write of its result.
#[derive(Debug, Clone, Copy)]
struct ClaimToken {
    at: Duration,
    version: UnixTime,
}

/// A row that passed steps 1–5.
struct Ready {
    properties: Properties,
    hook: Hook,
    target: Result<Target, TransportFailure>,
}

/// The transactions a payload lists: as loaded from the object's
/// transaction table, or (`None`) the stored list in the order its shape
/// implies.
type Transactions = Option<Vec<String>>;

/// What the object check's lookup found, before it is acted on (and
/// counted): a row taken along is looked up beside its claim, and may yet
/// be left to its lease unsent.
enum ObjectCheck {
    /// The object exists; its listed transactions that do, newest first.
    Found(Vec<String>),
    /// Its tables cannot be read here.
    Unseen(Unseen),
    /// The object is gone.
    Gone,
    /// The store failed.
    Failed,
}

/// What to do about a row's object check, once it is acted on.
enum ObjectVerdict {
    /// Send these transactions.
    Send(Transactions),
    /// Hook error `object`, as Phorge's worker writes it.
    Gone,
    /// Nothing is written; the row is tried again later.
    Failed,
}

/// Rows claimed together, in one group commit. Waiting for a commit before
/// every POST would make a fast hook's run as slow as the database's
/// commit latency; so when a hook's recent groups were delivered quickly
/// and without failure, the claim of a row takes the run's next rows along
/// (the hook's *pace*: doubled after a quick, clean group, halved after a
/// slow one, back to one after a failed attempt, a lost claim or an unsent
/// row, up to [`CLAIM_AHEAD_MAX`]).
/// Each row is still sent one at a time, in id order, under the hook lock,
/// after the breaker check — but only within
/// [`Windows::claim_ahead_budget`] of the claim, so its POST ends with at
/// least that much of its lease left. A row that misses it, or whose run
/// stops first, is not sent; it is delivered again after its lease, as if
/// its deliverer had died (`claim_left_to_lease`).
struct ClaimGroup {
    hook: Hook,
    target: Target,
    claimed_at: Duration,
    size: usize,
    /// Every row so far was sent, none left to its lease.
    smooth: bool,
}

/// A row claimed along with an earlier one, waiting for its turn.
struct AheadRow {
    id: u64,
    claim: AheadClaim,
}

/// How the claim of a row taken along went.
enum AheadClaim {
    /// Ours at this version, with its object as checked beside the claim.
    Won(Properties, ObjectCheck, UnixTime),
    /// Another deliverer has it.
    Lost,
    /// The claim failed: it may or may not have landed.
    Unknown,
}

impl HookRun {
    fn resuming(held: Option<HeldLock>) -> Self {
        match held {
            Some(held) => Self {
                hook: None,
                lock: Some(held.lock),
                lock_acquired_at: held.acquired_at,
                breaker_closed: held.breaker_closed,
                ..Self::default()
            },
            None => Self::default(),
        }
    }
}

/// Keeps the in-flight gauge right even when a delivery future is dropped.
struct InFlight<'a>(&'a Metrics);

impl<'a> InFlight<'a> {
    fn enter(metrics: &'a Metrics) -> Self {
        metrics.in_flight.fetch_add(1, Ordering::Relaxed);
        Self(metrics)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Dispatcher {
    /// A dispatcher over these effects, with validated windows.
    pub fn new(
        store: Arc<dyn Store>,
        transport: Arc<dyn Transport>,
        clock: Arc<dyn Clock>,
        windows: Windows,
    ) -> Self {
        Self {
            store,
            transport,
            clock,
            windows,
            metrics: Arc::new(Metrics::default()),
            open_breakers: Mutex::new(HashSet::new()),
            hooks: Mutex::new(HashMap::new()),
            pace: Mutex::new(HashMap::new()),
            silent_mode: None,
            objects: None,
            unseen_reported: Mutex::new(HashSet::new()),
            slow_reported: Mutex::new(HashMap::new()),
            slow_hooks: Mutex::new(HashSet::new()),
            events: None,
            reported_hold: AtomicBool::new(false),
        }
    }

    /// Reports what happens to `events` (see [`crate::events`]).
    pub fn with_events(mut self, events: Arc<dyn EventSink>) -> Self {
        self.events = Some(events);
        self
    }

    fn emit(&self, request: Option<&str>, hook: Option<&str>, kind: EventKind) {
        if let Some(events) = &self.events {
            events.emit(Event {
                at: self.clock.now(),
                request: request.map(str::to_owned),
                hook: hook.map(str::to_owned),
                kind,
            });
        }
    }

    /// Asks the silent-mode watch (if any) whether to hold, reporting a
    /// change of verdict as an event.
    async fn hold_now(&self) -> bool {
        let Some(silent_mode) = &self.silent_mode else {
            return false;
        };
        let held = silent_mode.refresh(self.clock.as_ref()).await;
        if self.reported_hold.swap(held, Ordering::Relaxed) != held {
            self.emit(None, None, EventKind::SilentHold { on: held });
        }
        held
    }

    /// Holds delivery while `silent_mode` says Phorge is silent: no polls,
    /// no claims, no writes, so rows stay queued for Phorge's own worker.
    pub fn with_silent_mode(mut self, silent_mode: Arc<SilentMode>) -> Self {
        self.silent_mode = Some(silent_mode);
        self
    }

    /// Checks each request's object and loads its transactions from
    /// Phorge's application tables before sending (see [`crate::objects`]).
    /// Without it every payload lists the stored transactions in the order
    /// their shape implies, and a destroyed object goes unnoticed.
    pub fn with_objects(mut self, objects: Arc<dyn PhorgeObjects>) -> Self {
        self.objects = Some(objects);
        self
    }

    /// Whether delivery is held right now (cached; see [`SilentMode`]).
    fn held(&self) -> bool {
        self.silent_mode.as_ref().is_some_and(|s| s.is_held())
    }

    /// The live counters, for a metrics endpoint.
    pub fn metrics(&self) -> Arc<Metrics> {
        Arc::clone(&self.metrics)
    }

    /// The windows in force.
    pub fn windows(&self) -> &Windows {
        &self.windows
    }

    /// Delivers until `shutdown` completes, then stops claiming, lets the
    /// deliveries already claimed finish and write their results, and
    /// returns.
    pub async fn run(&self, shutdown: impl Future<Output = ()> + Send) {
        let stop = AtomicBool::new(false);
        let mut shutdown = pin!(shutdown.fuse());
        let mut runs: FuturesUnordered<BoxFuture<'_, RunReport>> = FuturesUnordered::new();
        let mut backlog = Backlog::default();
        let mut timer: Option<BoxFuture<'static, ()>> = None;
        let mut next_poll = self.clock.monotonic();
        let mut poller = PollHealth::default();
        let mut summary = Summary::new(self.clock.monotonic(), self.metrics.snapshot());
        let low_water = (self.windows.batch_size() / 2).max(1);
        let mut limit = self.windows.batch_size();
        let mut stopping = false;
        let mut held: HashMap<String, HeldLock> = HashMap::new();
        info!(
            event = "dispatcher_started",
            lease_secs = self.windows.lease_secs(),
            retry_spacing_secs = self.windows.effective_retry_spacing_secs(),
            max_concurrent = self.windows.max_concurrent(),
            batch_size = self.windows.batch_size()
        );

        let mut finished: Vec<RunReport> = Vec::new();
        loop {
            let now = self.clock.monotonic();
            if !stopping && now >= next_poll && backlog.startable(|h| self.is_slow(h)) < low_water {
                if alongside(self.hold_now(), &mut runs, |r| finished.push(r)).await {
                    backlog.drop_waiting();
                }
                let found = if self.held() {
                    Found::Nothing
                } else {
                    alongside(
                        self.poll_once(&mut backlog, &mut poller, limit),
                        &mut runs,
                        |r| finished.push(r),
                    )
                    .await
                };
                limit = match found {
                    Found::Full => (limit * 2).min(self.windows.batch_size() * BACKLOG_BATCHES_MAX),
                    _ => self.windows.batch_size(),
                };
                next_poll = match found {
                    Found::Full => now,
                    // Rows are arriving: look again soon, so a steady
                    // stream waits a fraction of the interval, not all of it.
                    Found::Some => now + self.windows.busy_poll_interval(),
                    Found::Nothing => now + self.windows.poll_interval(),
                };
                timer = None;
                summary.maybe_log(now, &self.metrics);
            }
            while !stopping && runs.len() < self.windows.max_concurrent() {
                let slow_running = backlog
                    .active
                    .iter()
                    .filter(|hook| self.is_slow(hook))
                    .count();
                let may_start = |hook: &str| self.may_start(hook, slow_running);
                let Some((hook, rows)) = backlog.next_run(may_start) else {
                    break;
                };
                let kept = held.remove(&hook);
                runs.push(self.hook_run(hook, rows, kept, &stop).boxed());
            }
            alongside(
                self.release_idle_locks(&mut held, runs.len(), stopping),
                &mut runs,
                |r| finished.push(r),
            )
            .await;
            if !finished.is_empty() {
                for report in finished.drain(..) {
                    self.run_finished(report, &mut backlog, &mut held);
                }
                // Their hooks may have more rows, and slots are free again.
                continue;
            }
            if stopping && runs.is_empty() {
                break;
            }
            let poll_wanted = !stopping && backlog.startable(|h| self.is_slow(h)) < low_water;
            if poll_wanted && timer.is_none() {
                let now = self.clock.monotonic();
                timer = Some(self.clock.sleep(next_poll.saturating_sub(now)));
            }
            let woke = poll_fn(|cx| {
                if !stopping && shutdown.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Wake::Shutdown);
                }
                if let Poll::Ready(Some(report)) = runs.poll_next_unpin(cx) {
                    return Poll::Ready(Wake::RunDone(report));
                }
                if poll_wanted {
                    if let Some(t) = timer.as_mut() {
                        if t.as_mut().poll(cx).is_ready() {
                            return Poll::Ready(Wake::Timer);
                        }
                    }
                }
                Poll::Pending
            })
            .await;
            match woke {
                Wake::Shutdown => {
                    stopping = true;
                    stop.store(true, Ordering::Relaxed);
                    backlog.drop_waiting();
                    info!(event = "dispatcher_stopping", in_flight_runs = runs.len());
                }
                Wake::RunDone(report) => self.run_finished(report, &mut backlog, &mut held),
                Wake::Timer => timer = None,
            }
        }
        info!(event = "dispatcher_stopped");
    }

    /// Whether a run of `hook` may take a free slot. Hanging hooks (their
    /// last call took half the delivery timeout or more, timeouts included)
    /// share at most half the slots, so however many hooks hang, the
    /// others keep the rest.
    fn may_start(&self, hook: &str, slow_running: usize) -> bool {
        let slow_slots = (self.windows.max_concurrent() / 2).max(1);
        !self.is_slow(hook) || slow_running < slow_slots
    }

    fn is_slow(&self, hook: &str) -> bool {
        self.slow_hooks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(hook)
    }

    fn run_finished(
        &self,
        mut report: RunReport,
        backlog: &mut Backlog,
        held: &mut HashMap<String, HeldLock>,
    ) {
        let until = self.clock.monotonic() + self.windows.poll_interval();
        backlog.finish(&report, until);
        if let Some(kept) = report.kept.take() {
            held.insert(report.hook, kept);
        }
    }

    /// One candidate query, and what it found that was new to this
    /// instance.
    async fn poll_once(
        &self,
        backlog: &mut Backlog,
        poller: &mut PollHealth,
        limit: usize,
    ) -> Found {
        let now = self.clock.monotonic();
        backlog.excluded.retain(|_, until| *until > now);
        let query = CandidateQuery {
            cutoffs: self.windows.cutoffs(self.clock.now()),
            limit,
            exclude_hooks: backlog.hooks_to_exclude(|h| self.is_slow(h)),
        };
        bump(&self.metrics.polls);
        match self.store.candidates(&query).await {
            Ok(rows) => {
                poller.succeeded();
                let full = rows.len() >= query.limit;
                match backlog.absorb(rows) {
                    0 => Found::Nothing,
                    _ if full => Found::Full,
                    _ => Found::Some,
                }
            }
            Err(err) => {
                bump(&self.metrics.poll_errors);
                poller.failed(&err);
                Found::Nothing
            }
        }
    }

    async fn hook_run(
        &self,
        hook_phid: String,
        rows: Vec<RequestRow>,
        held: Option<HeldLock>,
        stop: &AtomicBool,
    ) -> RunReport {
        let mut run = HookRun::resuming(held);
        let mut exclude = false;
        // Write-backs of successful deliveries, still being stored while
        // the run goes on with its next row (see `process`).
        let mut storing: FuturesUnordered<BoxFuture<'_, ()>> = FuturesUnordered::new();
        for (i, row) in rows.iter().enumerate() {
            // A row claimed along with an earlier one is dealt with even
            // when stopping: its claim group was taken before the stop.
            if stop.load(Ordering::Relaxed) && !run.has_claimed(row.id) {
                break;
            }
            let mut stored_later = None;
            let step = alongside(
                self.process(&mut run, row, &rows[i + 1..], &mut stored_later),
                &mut storing,
                drop,
            )
            .await;
            storing.extend(stored_later);
            if storing.len() > WRITES_BEHIND_MAX {
                while storing.next().await.is_some() {}
            }
            if let Step::StopRun = step {
                exclude = true;
                break;
            }
            // A slow hook gives its slot back after each row (its other
            // rows are polled again), so it cannot keep a slot for a whole
            // queue of slow calls; rows already claimed along still go.
            let next_claimed = rows.get(i + 1).is_some_and(|next| run.has_claimed(next.id));
            if self.is_slow(&hook_phid) && !next_claimed {
                break;
            }
        }
        self.abandon_claimed(&mut run, &hook_phid, &rows);
        // Every result is stored before the lock is given up or kept.
        while storing.next().await.is_some() {}
        let mut kept = None;
        if let Some(lock) = run.lock.take() {
            let now = self.clock.monotonic();
            let lease = Duration::from_secs(self.windows.lease_secs());
            if exclude || now.saturating_sub(run.lock_acquired_at) >= lease {
                release(lock, &hook_phid).await;
            } else {
                kept = Some(HeldLock {
                    lock,
                    breaker_closed: run.breaker_closed,
                    idle_since: now,
                    acquired_at: run.lock_acquired_at,
                });
            }
        }
        RunReport {
            hook: hook_phid,
            ids: rows.iter().map(|r| r.id).collect(),
            exclude,
            kept,
        }
    }

    /// Frees kept locks that went idle for a poll interval, the oldest ones
    /// beyond what `max_concurrent` allows beside the `active` runs' locks
    /// (each pins a database connection), or all of them when stopping.
    async fn release_idle_locks(
        &self,
        held: &mut HashMap<String, HeldLock>,
        active: usize,
        stopping: bool,
    ) {
        if held.is_empty() {
            return;
        }
        let now = self.clock.monotonic();
        let idle_limit = self.windows.poll_interval();
        let mut by_age: Vec<(Duration, String)> = held
            .iter()
            .map(|(hook, h)| (h.idle_since, hook.clone()))
            .collect();
        by_age.sort();
        let surplus = (held.len() + active).saturating_sub(self.windows.max_concurrent());
        for (n, (idle_since, hook)) in by_age.into_iter().enumerate() {
            if stopping || n < surplus || now.saturating_sub(idle_since) >= idle_limit {
                if let Some(h) = held.remove(&hook) {
                    release(h.lock, &hook).await;
                }
            }
        }
    }

    /// SPEC §5 for one row, in order. The write-back of a successful
    /// delivery is handed back in `stored_later` instead of awaited, so the
    /// run claims its next row while it is stored: the two statements then
    /// share a commit (the store's group commit) and the hook's next
    /// delivery does not wait for it. A failure is stored before the next
    /// claim, whose breaker count must see it.
    ///
    /// The claim may take some of the `upcoming` rows along (see
    /// [`ClaimGroup`]); when their turn comes they skip steps 1–5.
    async fn process<'a>(
        &'a self,
        run: &mut HookRun,
        row: &RequestRow,
        upcoming: &[RequestRow],
        stored_later: &mut Option<BoxFuture<'a, ()>>,
    ) -> Step {
        // A row claimed along with an earlier one is in flight: like the
        // delivery under way, it is sent even if a hold began meanwhile.
        if let Some(ahead) = run.take_claimed(row.id) {
            return self.process_claimed(run, row, ahead, stored_later).await;
        }
        if self.hold_now().await {
            return Step::StopRun;
        }
        let Ready {
            properties,
            hook,
            target,
        } = match self.prepare(run, row).await {
            Ok(ready) => ready,
            Err(step) => return step,
        };
        if !self.may_call(run, &hook.phid).await {
            return Step::StopRun;
        }
        // Phorge's worker fails a destroyed object's request before it
        // calls; checked once the hook may be called, so a blocked hook
        // costs no lookups.
        let check = self.look_up_object(row, &properties).await;
        let transactions = match self.act_on(row, check) {
            ObjectVerdict::Send(transactions) => transactions,
            ObjectVerdict::Gone => {
                self.fail_hook(row, &properties, HookError::Object, None)
                    .await;
                return Step::Next;
            }
            ObjectVerdict::Failed => return Step::StopRun,
        };
        let along = match &target {
            Ok(_) => self.look_ahead(&hook.phid, upcoming),
            Err(_) => Vec::new(),
        };
        let claimed_at = self.clock.monotonic();
        // The objects of the rows taken along are looked up while their
        // claims commit, so their POSTs can follow each other at once; one
        // after the other, so a group holds one pooled connection for them.
        let look_ups = async {
            let mut checks = Vec::with_capacity(along.len());
            for (row, properties) in &along {
                checks.push(self.look_up_object(row, properties).await);
            }
            checks
        };
        let (claims, checks) = futures::future::join(
            join_all(
                std::iter::once(row)
                    .chain(along.iter().map(|(r, _)| *r))
                    .map(|r| self.store.claim(r.id, r.date_modified)),
            ),
            look_ups,
        )
        .await;
        let along = along.into_iter().zip(checks).map(|((r, p), c)| (r, p, c));
        let mut claims = claims.into_iter();
        let first = claims.next().unwrap_or(Ok(Claim::Lost));
        match &first {
            Ok(claim) => self.note_claim(row, &hook.phid, *claim),
            Err(err) => self.store_failed("claim", err),
        }
        if let Ok(target) = &target {
            self.keep_claimed(run, &hook, target, claimed_at, along, claims);
        }
        let version = match first {
            Ok(Claim::Won(version)) => version,
            Ok(Claim::Lost) => {
                self.after_attempt(run, &hook.phid, false);
                return Step::Next;
            }
            Err(_) => return Step::StopRun,
        };
        // Its lease runs from its own claim, which may have committed well
        // before the slowest of its group's.
        if !run.claimed.is_empty() && self.left_late(run, row, claimed_at) {
            return Step::Next;
        }
        let claimed = Claimed {
            row,
            properties: &properties,
            hook: &hook,
            target,
            transactions,
            claim: ClaimToken {
                at: claimed_at,
                version,
            },
        };
        self.attempt(run, claimed, stored_later).await
    }

    /// Steps 1–5: the row's properties, its hook and where to send it; or
    /// the step to take after a hook error was written (or the lookup
    /// failed).
    async fn prepare(&self, run: &mut HookRun, row: &RequestRow) -> Result<Ready, Step> {
        let (properties, hook) = match triage(row, || self.hook_for(run, row)).await {
            Triage::Ready { properties, hook } => (properties, hook),
            Triage::InvalidRow { defect, properties } => {
                warn!(event = "row_invalid", request_id = row.id, hook = %row.webhook_phid,
                      defect = %defect, "failed without delivery");
                self.fail_hook(row, &properties, HookError::InvalidRow, None)
                    .await;
                return Err(Step::Next);
            }
            Triage::InvalidProperties { error, properties } => {
                warn!(event = "properties_invalid", request = %row.phid, hook = %row.webhook_phid,
                      error = %error, original = %truncated(&row.properties),
                      "kept under gorgeOriginalProperties");
                self.fail_hook(row, &properties, HookError::InvalidProperties, None)
                    .await;
                return Err(Step::Next);
            }
            Triage::HookMissing { properties } => {
                warn!(event = "hook_missing", request = %row.phid, hook = %row.webhook_phid);
                self.fail_hook(row, &properties, HookError::NotFound, None)
                    .await;
                return Err(Step::Next);
            }
            Triage::HookDisabled { properties, hook } => {
                debug!(event = "hook_disabled", request = %row.phid, hook = %hook.phid);
                self.fail_hook(row, &properties, HookError::Disabled, None)
                    .await;
                return Err(Step::Next);
            }
            Triage::HookUnavailable => return Err(Step::StopRun),
        };
        let target = match self.transport.resolve(&hook.uri).await {
            Resolution::Ready(target) => Ok(target),
            Resolution::Refused(why) => {
                warn!(event = "hook_uri_refused", request = %row.phid, hook = %hook.phid, reason = %why);
                self.fail_hook(row, &properties, HookError::Uri, None).await;
                return Err(Step::Next);
            }
            Resolution::Failed(failure) => Err(failure),
        };
        Ok(Ready {
            properties,
            hook,
            target,
        })
    }

    /// Phorge's worker loads the request's object, and fails the request
    /// when it is gone; then it sends only the listed transactions that
    /// still exist, newest first. Asked afresh for every delivery: nothing
    /// cached could keep a deleted object alive.
    async fn look_up_object(&self, row: &RequestRow, properties: &Properties) -> ObjectCheck {
        let Some(objects) = &self.objects else {
            return ObjectCheck::Unseen(Unseen::NoSource);
        };
        let listed = properties.listed_transaction_phids();
        match objects.lookup(&row.object_phid, &listed).await {
            Ok(ObjectLookup::Found { transactions }) => ObjectCheck::Found(transactions),
            Ok(ObjectLookup::Gone) => ObjectCheck::Gone,
            Ok(ObjectLookup::Unseen(why)) => ObjectCheck::Unseen(why),
            Err(err) => {
                self.store_failed("object_lookup", &err);
                ObjectCheck::Failed
            }
        }
    }

    /// Counts and reports an object check as its row is acted on.
    fn act_on(&self, row: &RequestRow, check: ObjectCheck) -> ObjectVerdict {
        match check {
            ObjectCheck::Found(transactions) => {
                bump(&self.metrics.objects_found);
                ObjectVerdict::Send(Some(transactions))
            }
            ObjectCheck::Gone => {
                bump(&self.metrics.objects_gone);
                warn!(event = "object_missing", request = %row.phid, hook = %row.webhook_phid,
                      object = %row.object_phid, "the object no longer exists: failed as Phorge does");
                ObjectVerdict::Gone
            }
            ObjectCheck::Unseen(why) => {
                self.note_unseen(why);
                ObjectVerdict::Send(None)
            }
            ObjectCheck::Failed => ObjectVerdict::Failed,
        }
    }

    fn note_unseen(&self, why: Unseen) {
        bump(&self.metrics.objects_unseen);
        let kind = why.kind();
        let first = {
            let mut reported = self
                .unseen_reported
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            !reported.contains(&why) && reported.insert(why.clone())
        };
        if first {
            warn!(event = "objects_unseen", kind, reason = %why,
                  "transactions are sent in the order the stored list implies, and a destroyed \
                   object is not noticed; grant SELECT on the application's tables to do as \
                   Phorge's worker does");
        }
    }

    /// The rows after this one to claim with it: as many as the hook's pace
    /// allows, stopping at the first that would fail before its claim (a
    /// defect, unparseable properties: it takes the ordinary path in its
    /// turn). Their objects are looked up beside their claims.
    fn look_ahead<'r>(
        &self,
        hook_phid: &str,
        upcoming: &'r [RequestRow],
    ) -> Vec<(&'r RequestRow, Properties)> {
        if self.windows.claim_ahead_budget().is_zero() {
            return Vec::new();
        }
        let pace = self.paces().get(hook_phid).copied().unwrap_or(1);
        upcoming
            .iter()
            .take(pace.saturating_sub(1))
            .map_while(|row| match row.defect {
                Some(_) => None,
                None => Properties::parse(&row.properties).ok().map(|p| (row, p)),
            })
            .collect()
    }

    /// Records the claims of the rows taken along, in order, as the run's
    /// claim group.
    fn keep_claimed<'r>(
        &self,
        run: &mut HookRun,
        hook: &Hook,
        target: &Target,
        claimed_at: Duration,
        along: impl Iterator<Item = (&'r RequestRow, Properties, ObjectCheck)>,
        claims: impl Iterator<Item = Result<Claim, StoreError>>,
    ) {
        run.claimed.clear();
        for ((row, properties, check), claim) in along.zip(claims) {
            let claim = match claim {
                Ok(claim) => {
                    self.note_claim(row, &hook.phid, claim);
                    match claim {
                        Claim::Won(version) => AheadClaim::Won(properties, check, version),
                        Claim::Lost => AheadClaim::Lost,
                    }
                }
                Err(err) => {
                    self.store_failed("claim", &err);
                    AheadClaim::Unknown
                }
            };
            run.claimed.push_back(AheadRow { id: row.id, claim });
        }
        run.group = Some(ClaimGroup {
            hook: hook.clone(),
            target: target.clone(),
            claimed_at,
            size: 1 + run.claimed.len(),
            smooth: true,
        });
    }

    fn note_claim(&self, row: &RequestRow, hook_phid: &str, claim: Claim) {
        match claim {
            Claim::Won(_) => {
                bump(&self.metrics.claims_won);
                self.emit(Some(&row.phid), Some(hook_phid), EventKind::ClaimWon);
            }
            Claim::Lost => {
                bump(&self.metrics.claims_lost);
                self.emit(Some(&row.phid), Some(hook_phid), EventKind::ClaimLost);
                debug!(event = "claim_lost", request = %row.phid, hook = %hook_phid);
            }
        }
    }

    /// A row claimed along with an earlier one: steps 6 and 8. It is sent
    /// only while the lock is still ours, the breaker (counted again after
    /// a failure) closed, its object there (checked beside its claim), and
    /// the claim within [`Windows::claim_ahead_budget`].
    async fn process_claimed<'a>(
        &'a self,
        run: &mut HookRun,
        row: &RequestRow,
        ahead: AheadRow,
        stored_later: &mut Option<BoxFuture<'a, ()>>,
    ) -> Step {
        let (properties, check, version) = match ahead.claim {
            AheadClaim::Won(properties, check, version) => (properties, check, version),
            AheadClaim::Lost => {
                self.after_attempt(run, &row.webhook_phid, false);
                return Step::Next;
            }
            // The store is failing: like a failed claim of a run's row.
            AheadClaim::Unknown => return Step::StopRun,
        };
        let Some(group) = run.group.as_ref() else {
            // Not reachable: a claimed row always has its group.
            self.leave_to_lease(row, Duration::ZERO, "run_stopped");
            return Step::StopRun;
        };
        let (hook, target, claimed_at) =
            (group.hook.clone(), group.target.clone(), group.claimed_at);
        let claim = ClaimToken {
            at: claimed_at,
            version,
        };
        if !self.may_call(run, &hook.phid).await {
            let waited = self.clock.monotonic().saturating_sub(claimed_at);
            self.leave_to_lease(row, waited, "run_stopped");
            return Step::StopRun;
        }
        // Late, it is not ours to write: not even the object's verdict.
        if self.left_late(run, row, claimed_at) {
            return Step::Next;
        }
        let transactions = match self.act_on(row, check) {
            ObjectVerdict::Send(transactions) => transactions,
            ObjectVerdict::Gone => {
                self.fail_hook(row, &properties, HookError::Object, Some(claim))
                    .await;
                self.after_attempt(run, &hook.phid, true);
                return Step::Next;
            }
            ObjectVerdict::Failed => {
                let waited = self.clock.monotonic().saturating_sub(claimed_at);
                self.leave_to_lease(row, waited, "run_stopped");
                return Step::StopRun;
            }
        };
        let claimed = Claimed {
            row,
            properties: &properties,
            hook: &hook,
            target: Ok(target),
            transactions,
            claim,
        };
        self.attempt(run, claimed, stored_later).await
    }

    /// Whether a claimed row's claim is past the claim-ahead budget, so it
    /// was left to its lease instead of being sent.
    fn left_late(&self, run: &mut HookRun, row: &RequestRow, claimed_at: Duration) -> bool {
        let waited = self.clock.monotonic().saturating_sub(claimed_at);
        if waited <= self.windows.claim_ahead_budget() {
            return false;
        }
        self.leave_to_lease(row, waited, "late");
        self.after_attempt(run, &row.webhook_phid, false);
        true
    }

    /// A claimed row that will not be sent now: it is retried once its
    /// lease ends, like a row whose deliverer died.
    /// `reason`: `late` (past the budget), `run_stopped` (breaker open,
    /// store error), `lock_lost` (the lock's session broke) or
    /// `local_failure` (this host could not make the call).
    fn leave_to_lease(&self, row: &RequestRow, waited: Duration, reason: &'static str) {
        bump(&self.metrics.claims_unused);
        info!(event = "claim_left_to_lease", request = %row.phid, hook = %row.webhook_phid,
              reason, waited_ms = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
              lease_secs = self.windows.lease_secs(),
              "claimed but not sent; retried after its lease");
    }

    /// Step 8 for a claimed row: the POST and its write-back.
    async fn attempt<'a>(
        &'a self,
        run: &mut HookRun,
        claimed: Claimed<'_>,
        stored_later: &mut Option<BoxFuture<'a, ()>>,
    ) -> Step {
        let Claimed {
            row,
            properties,
            hook,
            target,
            transactions,
            claim,
        } = claimed;
        let (result, latency) = match target {
            Ok(target) => {
                if !self.lock_still_ours(run, row, claim.at).await {
                    self.after_attempt(run, &hook.phid, false);
                    return Step::StopRun;
                }
                let payload = match &transactions {
                    Some(loaded) => Payload::with_transactions(row, properties, loaded),
                    None => Payload::build(row, properties),
                };
                self.deliver(row, payload, hook, target).await
            }
            Err(failure) => (DeliveryResult::Failed(failure), Duration::ZERO),
        };
        self.count_result(&result);
        let now = self.clock.now();
        let Some((write, outcome)) = attempt_write(row.id, claim.version, properties, &result, now)
        else {
            self.local_failure(row, &result, claim.at);
            self.after_attempt(run, &hook.phid, false);
            return Step::StopRun;
        };
        log_attempt(row, &result, outcome);
        self.emit(
            Some(&row.phid),
            Some(&hook.phid),
            attempt_event(&result, outcome, latency),
        );
        let sent = outcome == AttemptOutcome::Sent;
        if sent {
            let request_phid = row.phid.clone();
            *stored_later = Some(
                async move {
                    self.write_back(&write, &request_phid, Some(claim.at)).await;
                }
                .boxed(),
            );
        } else {
            self.write_back(&write, &row.phid, Some(claim.at)).await;
            // A new failure may have opened the breaker: look again before
            // the next claim (or the next row claimed along).
            run.breaker_closed = false;
        }
        self.after_attempt(run, &hook.phid, sent);
        Step::Next
    }

    /// Asks, just before a call, whether the hook's lock is still held by
    /// the session that took it. If that session broke, the server freed
    /// the lock and another deliverer may be calling the hook already: the
    /// row is left to its lease and the run stops, so two calls never
    /// reach one hook at once.
    async fn lock_still_ours(
        &self,
        run: &mut HookRun,
        row: &RequestRow,
        claimed_at: Duration,
    ) -> bool {
        let held = match run.lock.as_mut() {
            Some(lock) => lock.still_held().await,
            None => Ok(false),
        };
        let reason = match held {
            Ok(true) => return true,
            Ok(false) => "the session holding it is gone".to_owned(),
            Err(err) => {
                bump(&self.metrics.store_errors);
                format!("it could not be checked: {err}")
            }
        };
        bump(&self.metrics.lock_lost);
        warn!(event = "hook_lock_lost", hook = %row.webhook_phid, request = %row.phid,
              reason = %reason, "the hook's lock is no longer ours: not called until it is taken again");
        if let Some(lock) = run.lock.take() {
            if let Err(err) = lock.release().await {
                debug!(event = "hook_lock_release_failed", hook = %row.webhook_phid, error = %err);
            }
        }
        run.breaker_closed = false;
        let waited = self.clock.monotonic().saturating_sub(claimed_at);
        self.leave_to_lease(row, waited, "lock_lost");
        false
    }

    /// This host could not make the call: nothing reached the receiver and
    /// nothing is written; the row waits out its lease like a dead
    /// deliverer's, and the run stops.
    fn local_failure(&self, row: &RequestRow, result: &DeliveryResult, claimed_at: Duration) {
        let kind = match result {
            DeliveryResult::Local(failure) => failure.as_str(),
            _ => "unknown",
        };
        warn!(event = "delivery_local_failure", request = %row.phid, hook = %row.webhook_phid,
              kind, "this host could not make the call (raise LimitNOFILE?); nothing written");
        let waited = self.clock.monotonic().saturating_sub(claimed_at);
        self.leave_to_lease(row, waited, "local_failure");
    }

    /// Notes how a row of the run's claim group went; once the group is
    /// done, sets the hook's pace for the next one. A row outside any
    /// group (its hook could not be resolved) that failed resets it too.
    fn after_attempt(&self, run: &mut HookRun, hook_phid: &str, smooth: bool) {
        let Some(group) = run.group.as_mut() else {
            if !smooth {
                self.paces().insert(hook_phid.to_owned(), 1);
            }
            return;
        };
        group.smooth &= smooth;
        if !run.claimed.is_empty() {
            return;
        }
        let took = self.clock.monotonic().saturating_sub(group.claimed_at);
        let budget = self.windows.claim_ahead_budget();
        let mut paces = self.paces();
        let pace = paces.entry(hook_phid.to_owned()).or_insert(1);
        *pace = if !group.smooth {
            1
        } else if took * 2 > budget {
            (*pace / 2).max(1)
        } else if took * 4 <= budget && group.size >= *pace {
            (*pace * 2).min(CLAIM_AHEAD_MAX)
        } else {
            *pace
        };
        run.group = None;
    }

    fn paces(&self) -> MutexGuard<'_, HashMap<String, usize>> {
        self.pace.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Claimed rows a stopped run will not send: they wait out their lease.
    fn abandon_claimed(&self, run: &mut HookRun, hook_phid: &str, rows: &[RequestRow]) {
        let Some(group) = &run.group else {
            // The last group was finished: its rows all had their turn.
            return;
        };
        let waited = self.clock.monotonic().saturating_sub(group.claimed_at);
        for ahead in run.claimed.drain(..) {
            if !matches!(ahead.claim, AheadClaim::Won(..)) {
                continue;
            }
            if let Some(row) = rows.iter().find(|r| r.id == ahead.id) {
                self.leave_to_lease(row, waited, "run_stopped");
            }
        }
        self.after_attempt(run, hook_phid, false);
    }

    async fn hook_for(&self, run: &mut HookRun, row: &RequestRow) -> HookLookup {
        if let Some(hook) = &run.hook {
            return found(hook.clone());
        }
        let now = self.clock.monotonic();
        let cached = self
            .hooks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&row.webhook_phid)
            .filter(|c| now.saturating_sub(c.read_at) < HOOK_CACHE_TTL)
            .cloned();
        if let Some(cached) = cached {
            run.hook = Some(cached.hook.clone());
            return found(cached.hook);
        }
        match self.store.hook(&row.webhook_phid).await {
            Ok(hook) => {
                run.hook = Some(hook.clone());
                self.hooks.lock().unwrap_or_else(|e| e.into_inner()).insert(
                    row.webhook_phid.clone(),
                    CachedHook {
                        hook: hook.clone(),
                        read_at: now,
                    },
                );
                found(hook)
            }
            Err(err) => {
                self.store_failed("hook lookup", &err);
                HookLookup::Unavailable
            }
        }
    }

    /// SPEC §5 step 6: the per-hook lock (kept for the rest of the run, and
    /// checked before each call: see [`Self::lock_still_ours`]) and the
    /// breaker.
    async fn may_call(&self, run: &mut HookRun, hook_phid: &str) -> bool {
        if run.lock.is_none() {
            match self.store.lock_hook(hook_phid).await {
                Ok(Some(lock)) => {
                    if !self.nothing_in_flight(hook_phid).await {
                        release(lock, hook_phid).await;
                        return false;
                    }
                    run.lock = Some(lock);
                    run.lock_acquired_at = self.clock.monotonic();
                    run.breaker_closed = false;
                }
                Ok(None) => {
                    bump(&self.metrics.lock_busy);
                    debug!(event = "hook_lock_busy", hook = %hook_phid);
                    return false;
                }
                Err(err) => {
                    self.store_failed("hook lock", &err);
                    return false;
                }
            }
        }
        if run.breaker_closed {
            return true;
        }
        let breaker = self.windows.breaker();
        let since = breaker.since(self.clock.now());
        match self.store.breaker_failures(hook_phid, since).await {
            Ok(failures) => {
                let open = breaker.is_open(failures);
                self.note_breaker(hook_phid, open, failures);
                if open {
                    bump(&self.metrics.breaker_skips);
                } else {
                    run.breaker_closed = true;
                }
                !open
            }
            Err(err) => {
                self.store_failed("breaker count", &err);
                false
            }
        }
    }

    /// Whether the hook's lock, just taken, may be used at once: a named
    /// lock dies with its session, so a holder whose session broke in the
    /// middle of a call leaves the lock free while that call goes on. Its
    /// claimed row, unwritten and within its lease, says so; the hook
    /// waits (as if the lock were busy) until that row is written or its
    /// lease ends, so two calls never reach it at once.
    async fn nothing_in_flight(&self, hook_phid: &str) -> bool {
        let lease_cutoff = self.windows.cutoffs(self.clock.now()).lease_cutoff;
        match self.store.claims_in_flight(hook_phid, lease_cutoff).await {
            Ok(0) => true,
            Ok(rows) => {
                bump(&self.metrics.lock_busy);
                debug!(event = "hook_call_in_flight", hook = %hook_phid, rows,
                       "a claim of this hook is unanswered within its lease; waiting for it");
                false
            }
            Err(err) => {
                self.store_failed("in-flight check", &err);
                false
            }
        }
    }

    /// Logs breaker transitions once each, never per row or per tick.
    fn note_breaker(&self, hook_phid: &str, open: bool, failures: u64) {
        let breaker = self.windows.breaker();
        let mut open_hooks = self.open_breakers.lock().unwrap_or_else(|e| e.into_inner());
        let threshold = breaker.threshold;
        if open && open_hooks.insert(hook_phid.to_owned()) {
            warn!(event = "breaker_opened", hook = %hook_phid, failures,
                  threshold, window_secs = breaker.window_secs,
                  "hook not called until failures slide out of the window");
            self.emit(
                None,
                Some(hook_phid),
                EventKind::BreakerOpened {
                    failures,
                    threshold,
                },
            );
        } else if !open && open_hooks.remove(hook_phid) {
            info!(event = "breaker_closed", hook = %hook_phid, failures, threshold);
            self.emit(
                None,
                Some(hook_phid),
                EventKind::BreakerClosed {
                    failures,
                    threshold,
                },
            );
        }
        self.metrics
            .breaker_open_hooks
            .store(open_hooks.len() as u64, Ordering::Relaxed);
    }

    async fn deliver(
        &self,
        row: &RequestRow,
        payload: Payload,
        hook: &Hook,
        target: crate::transport::Target,
    ) -> (DeliveryResult, Duration) {
        let signature = payload.sign(&hook.hmac_key);
        let request = OutboundRequest {
            target,
            body: payload.into_bytes(),
            signature,
            request_phid: row.phid.clone(),
            timeout: self.windows.delivery_timeout(),
        };
        let _in_flight = InFlight::enter(&self.metrics);
        let started = self.clock.monotonic();
        let result = self.transport.deliver(request).await;
        let latency = self.clock.monotonic().saturating_sub(started);
        self.metrics.observe_latency(latency);
        let hanging = latency >= self.windows.delivery_timeout() / 2;
        {
            let mut slow_hooks = self.slow_hooks.lock().unwrap_or_else(|e| e.into_inner());
            if hanging {
                slow_hooks.insert(hook.phid.clone());
            } else {
                slow_hooks.remove(&hook.phid);
            }
        }
        if latency >= SLOW_CALL {
            self.note_slow(&hook.phid, latency);
        }
        (result, latency)
    }

    /// Reports a slow hook at most once per [`SLOW_REPORT_INTERVAL`].
    fn note_slow(&self, hook_phid: &str, latency: Duration) {
        let now = self.clock.monotonic();
        {
            let mut reported = self.slow_reported.lock().unwrap_or_else(|e| e.into_inner());
            match reported.get(hook_phid) {
                Some(at) if now.saturating_sub(*at) < SLOW_REPORT_INTERVAL => return,
                _ => {
                    reported.insert(hook_phid.to_owned(), now);
                }
            }
        }
        warn!(event = "hook_slow", hook = %hook_phid,
              latency_ms = u64::try_from(latency.as_millis()).unwrap_or(u64::MAX),
              timeout_ms = u64::try_from(self.windows.delivery_timeout().as_millis()).unwrap_or(u64::MAX),
              "this hook answers slowly: its rows go one at a time in one delivery slot, \
               other hooks are not held up");
    }

    fn count_result(&self, result: &DeliveryResult) {
        let counter = match result {
            r if r.is_success() => &self.metrics.delivered_ok,
            DeliveryResult::Response { .. } => &self.metrics.delivered_http_error,
            DeliveryResult::Timeout => &self.metrics.delivered_timeout,
            DeliveryResult::Failed(_) => &self.metrics.delivered_transport_error,
            DeliveryResult::Refused(_) => &self.metrics.hook_errors,
            DeliveryResult::Local(_) => &self.metrics.local_failures,
        };
        bump(counter);
    }

    /// A hook-configuration error. Without a claim it is written only onto
    /// the version that was judged; after one, like an attempt's result,
    /// onto the version the claim wrote.
    async fn fail_hook(
        &self,
        row: &RequestRow,
        properties: &Properties,
        error: HookError,
        claim: Option<ClaimToken>,
    ) {
        bump(&self.metrics.hook_errors);
        self.emit(
            Some(&row.phid),
            Some(&row.webhook_phid),
            EventKind::HookError { code: error.code() },
        );
        let version = claim.map_or(row.date_modified, |claim| claim.version);
        let write = hook_error_write(row.id, version, properties, error, self.clock.now());
        self.write_back(&write, &row.phid, claim.map(|claim| claim.at))
            .await;
    }

    /// Writes a result, retrying for a while: a lost write-back means the row
    /// is delivered again once its lease ends. Every try is guarded by the
    /// version the write expects (for a claimed attempt, the one its claim
    /// wrote), so it lands only while that claim still owns the row: a
    /// deliverer that was paused past its lease, and whose row another
    /// claimed meanwhile, has its result dropped and counted
    /// (`result_dropped_stale`) instead of stored over the newer one. Its
    /// first try is made however late it comes: if nobody claimed the row
    /// meanwhile, storing the answer is what keeps it from being sent
    /// twice. With `claimed_at`, retries stop one second before the claim's
    /// lease ends.
    async fn write_back(
        &self,
        write: &crate::outcome::ResultWrite,
        request_phid: &str,
        claimed_at: Option<Duration>,
    ) {
        let lease = Duration::from_secs(self.windows.lease_secs());
        let give_up_at = claimed_at.map(|at| at + lease.saturating_sub(Duration::from_secs(1)));
        let mut delay = WRITE_RETRY_DELAY;
        for attempt in 1..=WRITE_ATTEMPTS {
            if attempt > 1 && give_up_at.is_some_and(|end| self.clock.monotonic() >= end) {
                bump(&self.metrics.writeback_failures);
                error!(event = "writeback_failed", request = %request_phid, attempts = attempt - 1,
                       "lease over: result not stored, so as not to overwrite another deliverer's; \
                        the row will be delivered again");
                return;
            }
            match self.store.write_result(write).await {
                Ok(Written::Yes) => return,
                Ok(Written::Skipped) if claimed_at.is_some() => {
                    bump(&self.metrics.writeback_stale);
                    warn!(event = "result_dropped_stale", request = %request_phid, attempt,
                          "the row moved on since this claim (another deliverer claimed it after \
                           the lease, or an earlier try of this write landed): not stored over it");
                    return;
                }
                Ok(Written::Skipped) => {
                    debug!(event = "write_skipped", request = %request_phid,
                           "row changed since it was read; another deliverer owns it");
                    return;
                }
                Err(err) if attempt < WRITE_ATTEMPTS => {
                    bump(&self.metrics.writeback_retries);
                    warn!(event = "writeback_retry", request = %request_phid, attempt,
                          error = %err, retry_in_ms = delay.as_millis() as u64);
                    self.clock.sleep(delay).await;
                    delay *= 2;
                }
                Err(err) => {
                    bump(&self.metrics.writeback_failures);
                    error!(event = "writeback_failed", request = %request_phid, attempts = attempt,
                           error = %err, "result not stored; the row will be delivered again after its lease");
                }
            }
        }
    }

    fn store_failed(&self, operation: &str, err: &StoreError) {
        bump(&self.metrics.store_errors);
        warn!(event = "store_error", operation, error = %err, "hook skipped until the next poll");
    }
}

/// Awaits `work` while still driving `others` (hook runs, or a run's
/// write-backs), handing each that finishes meanwhile to `finished`. The
/// loop's own store calls must not freeze the runs: a run waiting to be
/// polled may hold the pooled connection `work` is waiting for, and with
/// the pool exhausted neither would ever move (a stall until the connect
/// timeout). Likewise a run's write-backs progress while it goes on.
async fn alongside<'a, T, R>(
    work: impl Future<Output = T>,
    others: &mut FuturesUnordered<BoxFuture<'a, R>>,
    mut finished: impl FnMut(R),
) -> T {
    let mut work = pin!(work);
    poll_fn(|cx| {
        while let Poll::Ready(Some(done)) = others.poll_next_unpin(cx) {
            finished(done);
        }
        work.as_mut().poll(cx)
    })
    .await
}

async fn release(lock: Box<dyn HookLock>, hook_phid: &str) {
    if let Err(err) = lock.release().await {
        warn!(event = "hook_lock_release_failed", hook = %hook_phid, error = %err);
    }
}

enum Wake {
    Shutdown,
    RunDone(RunReport),
    Timer,
}

fn log_attempt(row: &RequestRow, result: &DeliveryResult, outcome: AttemptOutcome) {
    match (result, outcome) {
        (DeliveryResult::Response { status }, AttemptOutcome::Sent) => {
            debug!(event = "delivered", request = %row.phid, hook = %row.webhook_phid, status = *status)
        }
        (DeliveryResult::Refused(why), _) => {
            warn!(event = "hook_uri_refused", request = %row.phid, hook = %row.webhook_phid, reason = %why)
        }
        (result, outcome) => info!(event = "attempt_failed", request = %row.phid,
                                   hook = %row.webhook_phid, result = ?result,
                                   will_retry = outcome == AttemptOutcome::WillRetry),
    }
}

/// The event for a finished attempt.
fn attempt_event(result: &DeliveryResult, outcome: AttemptOutcome, latency: Duration) -> EventKind {
    let latency_ms = u64::try_from(latency.as_millis()).unwrap_or(u64::MAX);
    match (result, attempt_error(result)) {
        (DeliveryResult::Response { status }, _) if outcome == AttemptOutcome::Sent => {
            EventKind::Delivered {
                status: *status,
                latency_ms,
            }
        }
        (_, Some((error_type, code))) => EventKind::AttemptFailed {
            error_type: error_type.as_str(),
            error_code: ErrorCode::Number(code),
            will_retry: outcome == AttemptOutcome::WillRetry,
            latency_ms,
        },
        (_, None) => EventKind::HookError {
            code: HookError::Uri.code(),
        },
    }
}

/// A hook row as a lookup's answer.
fn found(hook: Option<Hook>) -> HookLookup {
    hook.map_or(HookLookup::Missing, HookLookup::Found)
}

fn truncated(text: &str) -> &str {
    if text.len() <= LOGGED_PROPERTIES_MAX {
        return text;
    }
    let mut end = LOGGED_PROPERTIES_MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Logs candidate-query failures once per outage, not once per tick.
#[derive(Default)]
struct PollHealth {
    failing_since_attempts: u64,
}

impl PollHealth {
    fn failed(&mut self, err: &StoreError) {
        self.failing_since_attempts += 1;
        if self.failing_since_attempts == 1 {
            warn!(event = "poll_failed", error = %err, "will keep polling");
        } else {
            debug!(event = "poll_failed", error = %err, consecutive = self.failing_since_attempts);
        }
    }

    fn succeeded(&mut self) {
        if self.failing_since_attempts > 0 {
            info!(
                event = "poll_recovered",
                failed_polls = self.failing_since_attempts
            );
            self.failing_since_attempts = 0;
        }
    }
}

/// A periodic one-line account of what happened, so claims won and lost
/// are visible at the default level without a line per row.
struct Summary {
    last_at: Duration,
    last: crate::metrics::MetricsSnapshot,
}

impl Summary {
    fn new(at: Duration, last: crate::metrics::MetricsSnapshot) -> Self {
        Self { last_at: at, last }
    }

    fn maybe_log(&mut self, now: Duration, metrics: &Metrics) {
        if now.saturating_sub(self.last_at) < SUMMARY_INTERVAL {
            return;
        }
        let snap = metrics.snapshot();
        let attempts = snap.attempts() - self.last.attempts();
        let lost = snap.claims_lost - self.last.claims_lost;
        let hook_errors = snap.hook_errors - self.last.hook_errors;
        if attempts + lost + hook_errors > 0 {
            info!(
                event = "delivery_summary",
                period_secs = now.saturating_sub(self.last_at).as_secs(),
                delivered = snap.delivered_ok - self.last.delivered_ok,
                failed_attempts = attempts - (snap.delivered_ok - self.last.delivered_ok),
                hook_errors,
                claims_won = snap.claims_won - self.last.claims_won,
                claims_lost = lost,
                breaker_open_hooks = snap.breaker_open_hooks
            );
        }
        self.last_at = now;
        self.last = snap;
    }
}
