//! The loop: when to poll and how many rows to ask for, which hook runs
//! take the free slots (hanging hooks share at most half), which kept
//! locks to give up, and what wakes it (shutdown, a finished run, the poll
//! timer).
//!
//! It owns the [`Backlog`] and the kept locks; a hook's rows are handled
//! in `hook_run`.

use std::collections::HashMap;
use std::future::{poll_fn, Future};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tracing::info;

use crate::metrics::bump;
use crate::store::CandidateQuery;

use super::backlog::Backlog;
use super::guard::release;
use super::hook_run::{HeldLock, RunReport};
use super::report::{PollHealth, Summary};
use super::LOG_TARGET;
use super::{alongside, Dispatcher};

/// While polls come back full (a backlog), each candidate query asks for
/// twice as many rows as the last, up to this many batches: over many
/// hooks a small batch holds one row per hook, so every delivery would pay
/// for its own lock, breaker count and unlock. The first poll after a
/// quiet spell asks for one batch, so fresh rows never queue behind a
/// large fetch.
const BACKLOG_BATCHES_MAX: usize = 16;

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

/// What the last candidate query could not see: the hooks it left out
/// (running, or kept out for a while), and when it ran. A run of one of
/// those hooks that finishes may leave rows behind that no poll has read
/// yet, so the next poll is due soon, not a whole interval later.
#[derive(Default)]
struct LastPoll {
    at: Duration,
    excluded: Vec<String>,
}

impl LastPoll {
    fn left_out(&self, hook: &str) -> bool {
        self.excluded
            .binary_search_by(|h| h.as_str().cmp(hook))
            .is_ok()
    }
}

/// What woke the loop.
enum Wake {
    Shutdown,
    RunDone(RunReport),
    Timer,
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
        let mut last_poll = LastPoll::default();
        info!(target: LOG_TARGET, event = "dispatcher_started",
            lease_secs = self.windows.lease_secs(),
            retry_spacing_secs = self.windows.effective_retry_spacing_secs(),
            max_concurrent = self.windows.max_concurrent(),
            batch_size = self.windows.batch_size()
        );

        let mut finished: Vec<RunReport> = Vec::new();
        loop {
            let now = self.clock.monotonic();
            if !stopping && now >= next_poll && backlog.startable(|h| self.is_slow(h)) < low_water {
                if alongside(pin!(self.hold_now()), &mut runs, |r| finished.push(r)).await {
                    backlog.drop_waiting();
                }
                let found = if self.held() {
                    Found::Nothing
                } else {
                    alongside(
                        pin!(self.poll_once(&mut backlog, &mut poller, limit, &mut last_poll)),
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
                let slow_running = backlog.running().filter(|hook| self.is_slow(hook)).count();
                let may_start = |hook: &str| self.may_start(hook, slow_running);
                let Some((hook, rows)) = backlog.next_run(may_start) else {
                    break;
                };
                let kept = held.remove(&hook);
                let pace = backlog.pace(&hook);
                runs.push(self.hook_run(hook, rows, kept, pace, &stop).boxed());
            }
            alongside(
                pin!(self.release_idle_locks(&mut held, runs.len(), stopping)),
                &mut runs,
                |r| finished.push(r),
            )
            .await;
            if !finished.is_empty() {
                for report in finished.drain(..) {
                    let due = self.run_finished(report, &mut backlog, &mut held, &last_poll);
                    if due < next_poll {
                        next_poll = due;
                        timer = None;
                    }
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
                    info!(target: LOG_TARGET, event = "dispatcher_stopping", in_flight_runs = runs.len());
                }
                Wake::RunDone(report) => {
                    let due = self.run_finished(report, &mut backlog, &mut held, &last_poll);
                    if due < next_poll {
                        next_poll = due;
                        timer = None;
                    }
                }
                Wake::Timer => timer = None,
            }
        }
        info!(target: LOG_TARGET, event = "dispatcher_stopped");
    }

    /// Whether a run of `hook` may take a free slot. Hanging hooks (their
    /// last call took half the delivery timeout or more, timeouts included)
    /// share at most half the slots, so however many hooks hang, the
    /// others keep the rest.
    fn may_start(&self, hook: &str, slow_running: usize) -> bool {
        let slow_slots = (self.windows.max_concurrent() / 2).max(1);
        !self.is_slow(hook) || slow_running < slow_slots
    }

    pub(super) fn is_slow(&self, hook: &str) -> bool {
        self.slow_hooks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(hook)
    }

    /// Books a finished run; returns when a poll is due for its sake. A
    /// hook the last poll left out (it was running) may have rows no poll
    /// has read: without an early poll, every hook of a backlog spread over
    /// no more hooks than `max_concurrent` would deliver one poll's rows
    /// per poll interval and then sit idle.
    fn run_finished(
        &self,
        mut report: RunReport,
        backlog: &mut Backlog,
        held: &mut HashMap<String, HeldLock>,
        last_poll: &LastPoll,
    ) -> Duration {
        // A paused hook's rows stay out of the candidate query until its
        // pause ends, not only until the next poll: polling them again
        // would only triage and skip them.
        let next_poll = self.clock.monotonic() + self.windows.poll_interval();
        let until = self
            .pauses
            .ends(&report.hook)
            .map_or(next_poll, |ends| ends.max(next_poll));
        backlog.finish(&report, until);
        let due = if !report.exclude && last_poll.left_out(&report.hook) {
            last_poll.at + self.windows.busy_poll_interval()
        } else {
            Duration::MAX
        };
        if let Some(kept) = report.kept.take() {
            held.insert(report.hook, kept);
        }
        due
    }

    /// One candidate query, and what it found that was new to this
    /// instance.
    async fn poll_once(
        &self,
        backlog: &mut Backlog,
        poller: &mut PollHealth,
        limit: usize,
        last_poll: &mut LastPoll,
    ) -> Found {
        backlog.end_exclusions(self.clock.monotonic());
        self.count_paused();
        let mut query = CandidateQuery {
            cutoffs: self.windows.cutoffs(self.clock.now()),
            limit,
            exclude_hooks: backlog.hooks_to_exclude(|h| self.is_slow(h)),
        };
        last_poll.at = self.clock.monotonic();
        bump(&self.metrics.polls);
        let polled = self.store.candidates(&query).await;
        // Kept (sorted by `hooks_to_exclude`) instead of copied.
        last_poll.excluded = std::mem::take(&mut query.exclude_hooks);
        match polled {
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
                self.count_denied(&err);
                poller.failed(&err);
                Found::Nothing
            }
        }
    }

    /// Frees kept locks that went idle for a poll interval, the oldest ones
    /// beyond what `max_concurrent` allows beside the `active` runs' locks
    /// (each keeps the hook from every other deliverer), or all of them
    /// when stopping.
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
}
