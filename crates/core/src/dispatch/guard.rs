//! The guard before every call (SPEC §5 step 6): the hook's pause (its
//! receiver's `Retry-After`, started here and asked first), the hook's
//! named lock — taken once per run or kept between runs, refused while a
//! claim of the hook may still be in flight, asked before each call whether
//! it is still ours — and the hook's breaker, counted when the lock is
//! taken and again after any failure. Together: no two deliverers ever
//! call one hook at once, and a paused or failing hook is not called.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tracing::{debug, info, warn};

use crate::events::EventKind;
use crate::metrics::bump;
use crate::model::{RequestRow, UnixTime};
use crate::pause::whole_secs;
use crate::store::HookLock;

use super::hook_run::HookRun;
use super::Dispatcher;
use super::LOG_TARGET;

impl Dispatcher {
    /// SPEC §5 step 6: the hook's pause, the per-hook lock (kept for the
    /// rest of the run, and checked before each call: see
    /// [`Self::lock_still_ours`]) and the breaker.
    pub(super) async fn may_call(&self, run: &mut HookRun, hook_phid: &str) -> bool {
        if let Some(until) = self.paused_until(hook_phid) {
            debug!(target: LOG_TARGET, event = "hook_paused_skip", hook = %hook_phid, until);
            return false;
        }
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
                    debug!(target: LOG_TARGET, event = "hook_lock_busy", hook = %hook_phid);
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
                debug!(target: LOG_TARGET, event = "hook_call_in_flight", hook = %hook_phid, rows,
                       "a claim of this hook is unanswered within its lease; waiting for it");
                false
            }
            Err(err) => {
                self.store_failed("in-flight check", &err);
                false
            }
        }
    }

    /// Asks, just before a call, whether the hook's lock is still held by
    /// the session that took it. If that session broke, the server freed
    /// the lock and another deliverer may be calling the hook already: the
    /// row is left to its lease and the run stops, so two calls never
    /// reach one hook at once.
    pub(super) async fn lock_still_ours(
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
                self.count_denied(&err);
                format!("it could not be checked: {err}")
            }
        };
        bump(&self.metrics.lock_lost);
        warn!(target: LOG_TARGET, event = "hook_lock_lost", hook = %row.webhook_phid, request = %row.phid,
              reason = %reason, "the hook's lock is no longer ours: not called until it is taken again");
        if let Some(lock) = run.lock.take() {
            if let Err(err) = lock.release().await {
                debug!(target: LOG_TARGET, event = "hook_lock_release_failed", hook = %row.webhook_phid, error = %err);
            }
        }
        run.breaker_closed = false;
        let waited = self.clock.monotonic().saturating_sub(claimed_at);
        self.leave_to_lease(row, waited, "lock_lost");
        false
    }

    /// When `hook_phid`'s pause ends, if it is paused now; keeps the
    /// paused-hooks gauge current.
    pub(super) fn paused_until(&self, hook_phid: &str) -> Option<UnixTime> {
        let until = self.pauses.until(hook_phid);
        self.count_paused();
        until
    }

    pub(super) fn count_paused(&self) {
        self.metrics
            .paused_hooks
            .store(self.pauses.len() as u64, Ordering::Relaxed);
    }

    /// A 429 or 503 with `Retry-After`: the hook is paused within the
    /// configured bounds (or not at all when they say to ignore it), said
    /// once per pause.
    pub(super) fn note_retry_after(&self, row: &RequestRow, status: u16, asked: Duration) {
        let Some(pause) = self.windows.retry_after_pause(asked) else {
            return;
        };
        let until = self.pauses.start(&row.webhook_phid, pause);
        bump(&self.metrics.retry_after_pauses);
        self.count_paused();
        let seconds = whole_secs(pause);
        warn!(target: LOG_TARGET, event = "hook_paused", hook = %row.webhook_phid, request = %row.phid,
              status, retry_after_secs = asked.as_secs(), pause_secs = seconds, until,
              "the receiver asked to slow down: none of this hook's rows is sent until then");
        self.emit(
            Some(&row.phid),
            Some(&row.webhook_phid),
            EventKind::HookPaused {
                status,
                seconds,
                until,
            },
        );
    }

    /// Logs breaker transitions once each, never per row or per tick.
    fn note_breaker(&self, hook_phid: &str, open: bool, failures: u64) {
        let breaker = self.windows.breaker();
        let mut open_hooks = self.open_breakers.lock().unwrap_or_else(|e| e.into_inner());
        let threshold = breaker.threshold;
        if open && open_hooks.insert(hook_phid.to_owned()) {
            warn!(target: LOG_TARGET, event = "breaker_opened", hook = %hook_phid, failures,
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
            info!(target: LOG_TARGET, event = "breaker_closed", hook = %hook_phid, failures, threshold);
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
}

/// Gives a hook's lock up; a failure is only logged.
pub(super) async fn release(lock: Box<dyn HookLock>, hook_phid: &str) {
    if let Err(err) = lock.release().await {
        warn!(target: LOG_TARGET, event = "hook_lock_release_failed", hook = %hook_phid, error = %err);
    }
}
