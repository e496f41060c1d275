//! The loop: when to poll and how many rows to ask for, which hook runs
//! take the free slots (hanging hooks share at most half), which kept
//! locks to give up, and what wakes it (shutdown, a finished run, the poll
//! timer, the wake-up probe between polls, a wake hint); poll failures
//! said once per outage, and a periodic summary.
//!
//! It owns the [`Backlog`], the slots (the runs in flight) and the kept
//! locks; a hook's rows are handled in `hook_run`.

use std::collections::HashMap;
use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tracing::{debug, info, warn};

use crate::metrics::{bump, Metrics, MetricsSnapshot};
use crate::store::{CandidateQuery, StoreError};

use super::backlog::Backlog;
use super::context::Context;
use super::guard::release;
use super::hook_run::{hook_run, HeldLock, RunReport};
use crate::wake_hints::Hint;
use crate::windows::Windows;

use super::wake::{Reading, WakeProbe};
use super::LOG_TARGET;
use super::{alongside, Dispatcher};

/// While polls come back full (a backlog), each candidate query asks for
/// twice as many rows as the last, up to this many batches: over many
/// hooks a small batch holds one row per hook, so every delivery would pay
/// for its own lock, breaker count and unlock. The first poll after a
/// quiet spell asks for one batch, so fresh rows never queue behind a
/// large fetch.
const BACKLOG_BATCHES_MAX: usize = 16;

/// How often a summary of the counters is logged while there is activity.
const SUMMARY_INTERVAL: Duration = Duration::from_secs(60);

/// What a candidate query found that this instance did not have yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    /// Nothing new (or the query failed).
    Nothing,
    /// Some new rows, fewer than the limit.
    Fresh,
    /// A full batch with new rows in it: there is a backlog.
    Full,
}

/// What the last candidate query could not see: the hooks it left out
/// (running, or kept out for a while), and when it ran. A run of one of
/// those hooks that finishes may leave rows behind that no poll has read
/// yet, so the next poll is due soon, not a whole interval later.
#[derive(Default)]
struct LastPoll {
    at: Duration,
    excluded: Vec<String>,
    /// It was a wake-up's: the new row may be a left-out hook's.
    woken: bool,
}

impl LastPoll {
    fn left_out(&self, hook: &str) -> bool {
        self.excluded
            .binary_search_by(|h| h.as_str().cmp(hook))
            .is_ok()
    }
}

/// A poll was brought forward by a wake-up, and by which.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Woken {
    /// The probe saw the highest id change.
    Probe,
    /// A hint said a row was logged.
    Hint,
}

/// After a hinted poll that found nothing, the next one: the log is
/// written before the storage engine commits, so a poll right on the
/// hint may just miss the row.
const HINT_RECHECK: Duration = Duration::from_millis(5);

/// What woke the loop.
enum Wake {
    Shutdown,
    RunDone(RunReport),
    Timer,
    Hint(Hint),
}

impl Dispatcher {
    /// Delivers until `shutdown` completes, then stops claiming, lets the
    /// deliveries already claimed finish and write their results, and
    /// returns. What it learns of each hook's pace lives as long as this
    /// call (the daemon makes one per process): a later call starts every
    /// hook at one row per claim.
    pub async fn run(&self, shutdown: impl Future<Output = ()> + Send) {
        let stop = AtomicBool::new(false);
        let mut shutdown = pin!(shutdown.fuse());
        let mut state = Loop::new(&self.cx, &stop);
        info!(target: LOG_TARGET, event = "dispatcher_started",
            lease_secs = self.cx.windows.lease_secs(),
            retry_spacing_secs = self.cx.windows.effective_retry_spacing_secs(),
            max_concurrent = self.cx.windows.max_concurrent(),
            batch_size = self.cx.windows.batch_size()
        );
        loop {
            state.probe_if_due().await;
            state.poll_if_due().await;
            state.start_runs();
            state.release_idle_locks().await;
            if state.book_finished() {
                // Their hooks may have more rows, and slots are free again.
                continue;
            }
            if state.stopping && state.runs.is_empty() {
                break;
            }
            match state.wait(shutdown.as_mut()).await {
                Wake::Shutdown => state.stop(),
                Wake::RunDone(report) => state.book(report),
                Wake::Timer => state.timer = None,
                Wake::Hint(hint) => state.hinted(hint),
            }
        }
        info!(target: LOG_TARGET, event = "dispatcher_stopped");
    }
}

/// The loop's state between wake-ups.
struct Loop<'a> {
    cx: &'a Context,
    stop: &'a AtomicBool,
    runs: FuturesUnordered<BoxFuture<'a, RunReport>>,
    finished: Vec<RunReport>,
    backlog: Backlog,
    held: HashMap<String, HeldLock>,
    timer: Option<BoxFuture<'static, ()>>,
    next_poll: Duration,
    probe: WakeProbe,
    /// The next poll runs because a wake-up saw a new row.
    woken: Option<Woken>,
    /// The last poll found new rows (the busy spacing is on).
    busy: bool,
    last_poll: LastPoll,
    limit: usize,
    stopping: bool,
    poll_health: PollHealth,
    summary: Summary,
}

impl<'a> Loop<'a> {
    fn new(cx: &'a Context, stop: &'a AtomicBool) -> Self {
        let now = cx.clock.monotonic();
        Self {
            cx,
            stop,
            runs: FuturesUnordered::new(),
            finished: Vec::new(),
            backlog: Backlog::default(),
            held: HashMap::new(),
            timer: None,
            next_poll: now,
            probe: WakeProbe::new(cx, now),
            woken: None,
            busy: false,
            last_poll: LastPoll::default(),
            limit: cx.windows.batch_size(),
            stopping: false,
            poll_health: PollHealth::default(),
            summary: Summary::new(now, cx.metrics.snapshot()),
        }
    }

    /// Whether a poll is wanted: not stopping, and fewer than half a batch
    /// of rows wait for hooks that could start (rows a running or hanging
    /// hook holds never count, so a slow hook's queue cannot stop the
    /// polling that feeds the others).
    fn poll_wanted(&self) -> bool {
        let low_water = (self.cx.windows.batch_size() / 2).max(1);
        !self.stopping && self.backlog.startable(|h| self.cx.hooks.is_hanging(h)) < low_water
    }

    /// Reads the wake-up probe when it is due before the next poll, and
    /// brings the poll forward to now when the table's highest id
    /// changed; the runs go on meanwhile.
    async fn probe_if_due(&mut self) {
        let now = self.cx.clock.monotonic();
        if self.cx.hints_following() || !self.probe.take_due(now) {
            return;
        }
        self.timer = None;
        if now >= self.next_poll || !self.poll_wanted() || self.cx.held() {
            return;
        }
        let cx = self.cx;
        let finished = &mut self.finished;
        let probe = pin!(self.probe.read(cx));
        match alongside(probe, &mut self.runs, |r| finished.push(r)).await {
            Reading::Same => {}
            Reading::First => self.next_poll = now,
            Reading::Changed => {
                self.next_poll = now;
                self.woken = Some(Woken::Probe);
            }
        }
    }

    /// Polls when one is due and wanted, while the runs go on; sets when
    /// the next is due and how many rows it asks for.
    async fn poll_if_due(&mut self) {
        let now = self.cx.clock.monotonic();
        if now < self.next_poll || !self.poll_wanted() {
            return;
        }
        let cx = self.cx;
        let finished = &mut self.finished;
        if alongside(pin!(cx.hold_now()), &mut self.runs, |r| finished.push(r)).await {
            self.backlog.drop_waiting();
        }
        let found = if cx.held() {
            Found::Nothing
        } else {
            let poll = poll_once(
                cx,
                &mut self.backlog,
                &mut self.poll_health,
                self.limit,
                &mut self.last_poll,
            );
            alongside(pin!(poll), &mut self.runs, |r| finished.push(r)).await
        };
        let windows = &cx.windows;
        self.limit = match found {
            Found::Full => (self.limit * 2).min(windows.batch_size() * BACKLOG_BATCHES_MAX),
            _ => windows.batch_size(),
        };
        self.last_poll.woken = self.woken.is_some();
        (self.next_poll, self.woken) = next_poll(windows, found, self.woken.take(), now);
        self.busy = found != Found::Nothing;
        self.probe.polled(now);
        self.timer = None;
        self.summary.maybe_log(now, &cx.metrics);
    }

    /// Starts runs on free slots, oldest waiting row first. Hanging hooks
    /// (their last call took half the delivery timeout or more, timeouts
    /// included) share at most half the slots, so however many hooks hang,
    /// the others keep the rest.
    fn start_runs(&mut self) {
        let cx = self.cx;
        let hanging_slots = (cx.windows.max_concurrent() / 2).max(1);
        while !self.stopping && self.runs.len() < cx.windows.max_concurrent() {
            let hanging = |hook: &str| cx.hooks.is_hanging(hook);
            let hanging_running = self.backlog.running().filter(|h| hanging(h)).count();
            let may_start = |hook: &str| !hanging(hook) || hanging_running < hanging_slots;
            let Some((hook, rows)) = self.backlog.next_run(may_start) else {
                break;
            };
            let kept = self.held.remove(&hook);
            let pace = self.backlog.pace(&hook);
            let run = hook_run(cx, hook, rows, kept, pace, self.stop);
            self.runs.push(run.boxed());
        }
    }

    /// Frees kept locks that went idle for a poll interval, the oldest ones
    /// beyond what `max_concurrent` allows beside the active runs' locks
    /// (each keeps the hook from every other deliverer), or all of them
    /// when stopping; the runs go on meanwhile.
    async fn release_idle_locks(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let now = self.cx.clock.monotonic();
        let idle_limit = self.cx.windows.poll_interval();
        let mut by_age: Vec<(Duration, String)> = self
            .held
            .iter()
            .map(|(hook, h)| (h.idle_since, hook.clone()))
            .collect();
        by_age.sort();
        let active = self.runs.len();
        let surplus = (self.held.len() + active).saturating_sub(self.cx.windows.max_concurrent());
        let mut freed = Vec::new();
        for (n, (idle_since, hook)) in by_age.into_iter().enumerate() {
            if self.stopping || n < surplus || now.saturating_sub(idle_since) >= idle_limit {
                if let Some(h) = self.held.remove(&hook) {
                    freed.push((h.lock, hook));
                }
            }
        }
        let releases = async {
            for (lock, hook) in freed {
                release(lock, &hook).await;
            }
        };
        let finished = &mut self.finished;
        alongside(pin!(releases), &mut self.runs, |r| finished.push(r)).await;
    }

    /// Books the runs that finished while the loop polled or released
    /// locks; whether there were any.
    fn book_finished(&mut self) -> bool {
        if self.finished.is_empty() {
            return false;
        }
        for report in std::mem::take(&mut self.finished) {
            self.book(report);
        }
        true
    }

    /// Books a finished run, and polls early for its sake if need be.
    fn book(&mut self, report: RunReport) {
        let due = run_finished(
            self.cx,
            report,
            &mut self.backlog,
            &mut self.held,
            &self.last_poll,
        );
        if due < self.next_poll {
            self.next_poll = due;
            self.timer = None;
        }
    }

    /// Waits for shutdown, a run to finish, or (when a poll is wanted) the
    /// timer of the next poll or wake-up probe.
    async fn wait(&mut self, mut shutdown: Pin<&mut impl Future<Output = ()>>) -> Wake {
        let poll_wanted = self.poll_wanted();
        if poll_wanted && self.timer.is_none() {
            let now = self.cx.clock.monotonic();
            let probe =
                (self.probe.due_at()).filter(|_| !self.cx.held() && !self.cx.hints_following());
            let due = probe.map_or(self.next_poll, |p| p.min(self.next_poll));
            self.timer = Some(self.cx.clock.sleep(due.saturating_sub(now)));
        }
        let stopping = self.stopping;
        let hints = self.cx.wake_hints.as_ref().filter(|_| poll_wanted);
        let (runs, timer) = (&mut self.runs, &mut self.timer);
        poll_fn(|task| {
            if !stopping && shutdown.as_mut().poll(task).is_ready() {
                return Poll::Ready(Wake::Shutdown);
            }
            if let Poll::Ready(Some(report)) = runs.poll_next_unpin(task) {
                return Poll::Ready(Wake::RunDone(report));
            }
            if let Some(Poll::Ready(hint)) = hints.map(|h| h.poll_hint(task)) {
                return Poll::Ready(Wake::Hint(hint));
            }
            if poll_wanted {
                if let Some(t) = timer.as_mut() {
                    if t.as_mut().poll(task).is_ready() {
                        return Poll::Ready(Wake::Timer);
                    }
                }
            }
            Poll::Pending
        })
        .await
    }

    /// Acts on a wake hint: a possible new row brings the poll forward to
    /// now (unless delivery is held: the hold's own timer polls); a source
    /// that started or stopped following sets the timer again, so the
    /// probe rests or resumes.
    /// While rows keep coming (the last poll found some), hinted polls
    /// keep the probe's spacing, so a steady stream of inserts costs no
    /// more polls than the probe would have run.
    fn hinted(&mut self, hint: Hint) {
        self.timer = None;
        if hint == Hint::Poll && !self.cx.held() {
            bump(&self.cx.metrics.wakeups);
            let now = self.cx.clock.monotonic();
            let earliest = match self.busy {
                true => now.max(self.last_poll.at + self.cx.windows.wake_spacing()),
                false => now,
            };
            self.next_poll = self.next_poll.min(earliest);
            self.woken = Some(Woken::Hint);
        }
    }

    /// Stops claiming: runs finish what they have claimed, nothing new
    /// starts.
    fn stop(&mut self) {
        self.stopping = true;
        self.stop.store(true, Ordering::Relaxed);
        self.backlog.drop_waiting();
        info!(target: LOG_TARGET, event = "dispatcher_stopping", in_flight_runs = self.runs.len());
    }
}

/// When the poll after one that found `found` is due, and whether it is
/// still a wake-up's.
fn next_poll(
    windows: &Windows,
    found: Found,
    woken: Option<Woken>,
    now: Duration,
) -> (Duration, Option<Woken>) {
    match (found, woken) {
        (Found::Full, _) => (now, None),
        // Rows are arriving: look again soon, so a steady stream waits a
        // fraction of the interval, not all of it. So does a wake-up that
        // found nothing to take: the new row may not be deliverable yet
        // (with task adoption, Phorge queues its task just after it), and
        // the highest id will not change again.
        (Found::Fresh, _) | (Found::Nothing, Some(Woken::Probe)) => {
            (now + windows.busy_poll_interval(), None)
        }
        // Then once more as a probe's wake-up would.
        (Found::Nothing, Some(Woken::Hint)) => (now + HINT_RECHECK, Some(Woken::Probe)),
        (Found::Nothing, None) => (now + windows.poll_interval(), None),
    }
}

/// Books a finished run; returns when a poll is due for its sake. A hook
/// the last poll left out (it was running) may have rows no poll has read:
/// without an early poll, every hook of a backlog spread over no more
/// hooks than `max_concurrent` would deliver one poll's rows per poll
/// interval and then sit idle.
fn run_finished(
    cx: &Context,
    mut report: RunReport,
    backlog: &mut Backlog,
    held: &mut HashMap<String, HeldLock>,
    last_poll: &LastPoll,
) -> Duration {
    // A paused hook's rows stay out of the candidate query until its pause
    // ends, not only until the next poll: polling them again would only
    // triage and skip them.
    let next_poll = cx.clock.monotonic() + cx.windows.poll_interval();
    let until = cx
        .pauses
        .ends(&report.hook)
        .map_or(next_poll, |ends| ends.max(next_poll));
    backlog.finish(&report, until);
    let due = if !report.exclude && last_poll.left_out(&report.hook) {
        // After a wake-up's poll, the new row may be this hook's.
        last_poll.at
            + match last_poll.woken {
                true => cx.windows.wake_spacing(),
                false => cx.windows.busy_poll_interval(),
            }
    } else {
        Duration::MAX
    };
    if let Some(kept) = report.kept.take() {
        held.insert(report.hook, kept);
    }
    due
}

/// One candidate query, and what it found that was new to this instance.
async fn poll_once(
    cx: &Context,
    backlog: &mut Backlog,
    poll_health: &mut PollHealth,
    limit: usize,
    last_poll: &mut LastPoll,
) -> Found {
    backlog.end_exclusions(cx.clock.monotonic());
    cx.count_paused();
    let mut query = CandidateQuery {
        cutoffs: cx.windows.cutoffs(cx.clock.now()),
        limit,
        exclude_hooks: backlog.hooks_to_exclude(|h| cx.hooks.is_hanging(h)),
    };
    last_poll.at = cx.clock.monotonic();
    bump(&cx.metrics.polls);
    let polled = cx.store.candidates(&query).await;
    // Kept (sorted by `hooks_to_exclude`) instead of copied.
    last_poll.excluded = std::mem::take(&mut query.exclude_hooks);
    match polled {
        Ok(rows) => {
            cx.accepted("poll");
            poll_health.succeeded();
            let full = rows.len() >= query.limit;
            match backlog.absorb(rows) {
                0 => Found::Nothing,
                _ if full => Found::Full,
                _ => Found::Fresh,
            }
        }
        Err(err) => {
            bump(&cx.metrics.poll_errors);
            cx.refused("poll", &err);
            poll_health.failed(&err);
            Found::Nothing
        }
    }
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
            warn!(target: LOG_TARGET, event = "poll_failed", error = %err, "will keep polling");
        } else {
            debug!(target: LOG_TARGET, event = "poll_failed", error = %err, consecutive = self.failing_since_attempts);
        }
    }

    fn succeeded(&mut self) {
        if self.failing_since_attempts > 0 {
            info!(target: LOG_TARGET, event = "poll_recovered",
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
    last: MetricsSnapshot,
}

impl Summary {
    fn new(at: Duration, last: MetricsSnapshot) -> Self {
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
            info!(target: LOG_TARGET, event = "delivery_summary",
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
