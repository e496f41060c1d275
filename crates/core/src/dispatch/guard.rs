//! The pipeline's second stage, step 6 and the object check: the hook's
//! pause (its receiver's `Retry-After`), its named lock — taken once per
//! run or kept between runs, refused while a claim of the hook may still
//! be in flight — and its breaker, counted when the lock is taken and
//! again after any failure; then the object check Phorge's worker makes
//! before it calls. A [`Prepared`] row becomes [`Guarded`], or an
//! [`Exit`]. Together with the lock check before each call (`call`): no
//! two deliverers ever call one hook at once, and a paused or failing hook
//! is not called.

use std::sync::atomic::Ordering;

use tracing::{debug, info, warn};

use crate::events::EventKind;
use crate::metrics::bump;
use crate::outcome::HookError;
use crate::store::HookLock;

use super::context::{Context, ObjectVerdict};
use super::stages::{Exit, Guarded, HookRun, Prepared};
use super::LOG_TARGET;

/// Step 6 and the object check for a prepared row. The object is looked
/// up once the hook may be called, so a blocked hook costs no lookups.
pub(super) async fn guard<'r>(
    cx: &Context,
    run: &mut HookRun,
    prepared: Prepared<'r>,
) -> Result<Guarded<'r>, Exit> {
    if !may_call(cx, run, &prepared.hook.phid).await {
        return Err(Exit::Stop);
    }
    let check = cx.look_up_object(prepared.row, &prepared.properties).await;
    match cx.object_verdict(prepared.row, check) {
        ObjectVerdict::Send(transactions) => Ok(Guarded {
            prepared,
            transactions,
        }),
        ObjectVerdict::Gone => Err(Exit::HookError {
            properties: prepared.properties,
            error: HookError::Object,
            claim: None,
        }),
        ObjectVerdict::Failed => Err(Exit::Stop),
    }
}

/// Step 6: the hook's pause, the per-hook lock (kept for the rest of the
/// run, and checked before each call) and the breaker. Also asked again
/// for a row claimed along with an earlier one.
pub(super) async fn may_call(cx: &Context, run: &mut HookRun, hook_phid: &str) -> bool {
    let paused_until = cx.pauses.until(hook_phid);
    cx.count_paused();
    if let Some(until) = paused_until {
        debug!(target: LOG_TARGET, event = "hook_paused_skip", hook = %hook_phid, until);
        return false;
    }
    if run.lock.is_none() && !take_lock(cx, run, hook_phid).await {
        return false;
    }
    run.breaker_closed || breaker_closed(cx, run, hook_phid).await
}

/// Takes the hook's lock for the run, unless someone else holds it or a
/// claim of the hook may still be in flight.
async fn take_lock(cx: &Context, run: &mut HookRun, hook_phid: &str) -> bool {
    let taken = cx.store.lock_hook(hook_phid).await;
    if taken.is_ok() {
        cx.accepted("hook lock");
    }
    match taken {
        Ok(Some(lock)) => {
            if !nothing_in_flight(cx, hook_phid).await {
                release(lock, hook_phid).await;
                return false;
            }
            run.lock = Some(lock);
            run.lock_acquired_at = cx.clock.monotonic();
            run.breaker_closed = false;
            true
        }
        Ok(None) => {
            bump(&cx.metrics.lock_busy);
            debug!(target: LOG_TARGET, event = "hook_lock_busy", hook = %hook_phid);
            false
        }
        Err(err) => {
            cx.store_failed("hook lock", &err);
            false
        }
    }
}

/// Counts the hook's breaker; whether it is closed (and so known to stay
/// closed while the lock is held and nothing fails).
async fn breaker_closed(cx: &Context, run: &mut HookRun, hook_phid: &str) -> bool {
    let breaker = cx.windows.breaker();
    let since = breaker.since(cx.clock.now());
    match cx.store.breaker_failures(hook_phid, since).await {
        Ok(failures) => {
            cx.accepted("breaker count");
            let open = breaker.is_open(failures);
            note_breaker(cx, hook_phid, open, failures);
            if open {
                bump(&cx.metrics.breaker_skips);
            } else {
                run.breaker_closed = true;
            }
            !open
        }
        Err(err) => {
            cx.store_failed("breaker count", &err);
            false
        }
    }
}

/// Whether the hook's lock, just taken, may be used at once: a named
/// lock dies with its session, so a holder whose session broke in the
/// middle of a call leaves the lock free while that call goes on. Its
/// claimed row, unwritten and within its lease, says so; the hook waits
/// (as if the lock were busy) until that row is written or its lease ends,
/// so two calls never reach it at once.
async fn nothing_in_flight(cx: &Context, hook_phid: &str) -> bool {
    let lease_cutoff = cx.windows.cutoffs(cx.clock.now()).lease_cutoff;
    let in_flight = cx.store.claims_in_flight(hook_phid, lease_cutoff).await;
    if in_flight.is_ok() {
        cx.accepted("in-flight check");
    }
    match in_flight {
        Ok(0) => true,
        Ok(rows) => {
            bump(&cx.metrics.lock_busy);
            debug!(target: LOG_TARGET, event = "hook_call_in_flight", hook = %hook_phid, rows,
                   "a claim of this hook is unanswered within its lease; waiting for it");
            false
        }
        Err(err) => {
            cx.store_failed("in-flight check", &err);
            false
        }
    }
}

/// Logs breaker transitions once each, never per row or per tick.
fn note_breaker(cx: &Context, hook_phid: &str, open: bool, failures: u64) {
    let (changed, open_hooks) = cx.hooks.note_breaker(hook_phid, open);
    cx.metrics
        .breaker_open_hooks
        .store(open_hooks as u64, Ordering::Relaxed);
    if !changed {
        return;
    }
    let breaker = cx.windows.breaker();
    let threshold = breaker.threshold;
    if open {
        warn!(target: LOG_TARGET, event = "breaker_opened", hook = %hook_phid, failures,
              threshold, window_secs = breaker.window_secs,
              "hook not called until failures slide out of the window");
        let kind = EventKind::BreakerOpened {
            failures,
            threshold,
        };
        cx.emit(None, Some(hook_phid), kind);
    } else {
        info!(target: LOG_TARGET, event = "breaker_closed", hook = %hook_phid, failures, threshold);
        let kind = EventKind::BreakerClosed {
            failures,
            threshold,
        };
        cx.emit(None, Some(hook_phid), kind);
    }
}

/// Gives a hook's lock up; a failure is only logged.
pub(super) async fn release(lock: Box<dyn HookLock>, hook_phid: &str) {
    if let Err(err) = lock.release().await {
        warn!(target: LOG_TARGET, event = "hook_lock_release_failed", hook = %hook_phid, error = %err);
    }
}
