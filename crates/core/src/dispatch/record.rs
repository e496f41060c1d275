//! The pipeline's last stage, step 8's write-back: what a [`Called`] row's
//! answer means in Phorge's value domain, counted, logged and reported,
//! and stored in one guarded UPDATE (a success's while the run goes on to
//! its next row's checks, a failure's at once); a receiver's `Retry-After`
//! pauses its hook. Also what the other ends of the pipeline write or say:
//! a hook error in place of a call ([`hook_error`]) and a claimed row left
//! to its lease ([`left_to_lease`]). Every write is retried for a while and
//! never lands over a newer claim's row ([`write_back`]).

use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use tracing::{debug, error, info, warn};

use crate::events::EventKind;
use crate::metrics::bump;
use crate::model::RequestRow;
use crate::outcome::{
    attempt_error, attempt_write, hook_error_write, AttemptOutcome, DeliveryResult, HookError,
    LocalFailure, ResultWrite,
};
use crate::pause::whole_secs;
use crate::properties::{ErrorCode, Properties};
use crate::store::Written;

use super::attempts;
use super::context::Context;
use super::stages::{Called, ClaimToken, Exit, HookRun, Step};
use super::LOG_TARGET;

/// Tries for one write-back before the row is left to its lease.
const WRITE_ATTEMPTS: u32 = 6;
/// First pause between write-back tries; doubles each time.
const WRITE_RETRY_DELAY: Duration = Duration::from_millis(500);

/// A called row once its result is written or on its way: what the run
/// does next, whether it was sent, and the write-back of a success, to be
/// stored while the run takes its next row up to its claim (it resolves to
/// whether the result was stored, see [`write_back`]).
pub(super) struct Recorded<'a> {
    pub(super) step: Step,
    pub(super) sent: bool,
    pub(super) pending_write: Option<BoxFuture<'a, bool>>,
}

/// The result of a call, recorded.
pub(super) async fn record<'a>(
    cx: &'a Context,
    run: &mut HookRun,
    called: Called<'_>,
) -> Result<Recorded<'a>, Exit> {
    let Called {
        row,
        properties,
        hook,
        claim,
        result,
        latency,
        record: call_record,
    } = called;
    count_result(cx, &result);
    if let DeliveryResult::Throttled {
        status,
        retry_after,
    } = result
    {
        note_retry_after(cx, row, status, retry_after);
    }
    let now = cx.clock.now();
    let Some((write, outcome)) = attempt_write(row.id, claim.version, &properties, &result, now)
    else {
        return Err(local_failure(row, &result, claim.at));
    };
    attempts::note_call(
        cx,
        row,
        claim.version,
        &write,
        &result,
        latency,
        call_record,
    );
    say_attempt(cx, row, &hook, &result, outcome, latency);
    if outcome == AttemptOutcome::Sent {
        let phid = row.phid.clone();
        let pending = async move { write_back(cx, &write, &phid, Some(claim.at)).await }.boxed();
        return Ok(Recorded {
            step: Step::Next,
            sent: true,
            pending_write: Some(pending),
        });
    }
    let stored = write_back(cx, &write, &row.phid, Some(claim.at)).await;
    // A new failure may have opened the breaker: look again before the
    // next claim (or the next row claimed along).
    run.breaker_closed = false;
    Ok(Recorded {
        // Calling on would leave a second result unstored.
        step: if stored { Step::Next } else { Step::StopRun },
        sent: false,
        pending_write: None,
    })
}

fn count_result(cx: &Context, result: &DeliveryResult) {
    let metrics = &cx.metrics;
    let counter = match result {
        r if r.is_success() => &metrics.delivered_ok,
        DeliveryResult::Response { .. } | DeliveryResult::Throttled { .. } => {
            &metrics.delivered_http_error
        }
        DeliveryResult::Timeout => &metrics.delivered_timeout,
        DeliveryResult::Failed(_) => &metrics.delivered_transport_error,
        DeliveryResult::Refused(_) => &metrics.hook_errors,
        DeliveryResult::Local(_) => &metrics.local_failures,
    };
    bump(counter);
    if let DeliveryResult::Local(LocalFailure::Proxy(failure)) = result {
        metrics.count_proxy_failure(*failure);
    }
    cx.local_streak.note(result);
}

/// This side (the host, or its egress proxy) could not make the call: nothing reached the receiver and
/// nothing is written; the row waits out its lease like a dead
/// deliverer's, and the run stops.
fn local_failure(row: &RequestRow, result: &DeliveryResult, claimed_at: Duration) -> Exit {
    if let DeliveryResult::Local(failure) = result {
        let reason = match failure {
            LocalFailure::Proxy(why) => why.as_str(),
            _ => "",
        };
        warn!(target: LOG_TARGET, event = "delivery_local_failure", request = %row.phid, hook = %row.webhook_phid,
              kind = failure.as_str(), reason, error = %failure,
              "this side could not make the call ({}); nothing written, the row waits its lease", failure.advice());
    }
    Exit::Leave {
        claimed_at,
        reason: "local_failure",
        step: Step::StopRun,
    }
}

/// A 429 or 503 with `Retry-After`: the hook is paused within the
/// configured bounds (or not at all when they say to ignore it), said once
/// per pause.
fn note_retry_after(cx: &Context, row: &RequestRow, status: u16, asked: Duration) {
    let Some(pause) = cx.windows.retry_after_pause(asked) else {
        return;
    };
    let until = cx.pauses.start(&row.webhook_phid, pause);
    bump(&cx.metrics.retry_after_pauses);
    cx.count_paused();
    let seconds = whole_secs(pause);
    warn!(target: LOG_TARGET, event = "hook_paused", hook = %row.webhook_phid, request = %row.phid,
          status, retry_after_secs = asked.as_secs(), pause_secs = seconds, until,
          "the receiver asked to slow down: none of this hook's rows is sent until then");
    let kind = EventKind::HookPaused {
        status,
        seconds,
        until,
    };
    cx.emit(Some(&row.phid), Some(&row.webhook_phid), kind);
}

/// An attempt's log line and event.
fn say_attempt(
    cx: &Context,
    row: &RequestRow,
    hook: &str,
    result: &DeliveryResult,
    outcome: AttemptOutcome,
    latency: Duration,
) {
    log_attempt(row, result, outcome);
    let event = attempt_event(result, outcome, latency);
    cx.emit(Some(&row.phid), Some(hook), event);
}

fn log_attempt(row: &RequestRow, result: &DeliveryResult, outcome: AttemptOutcome) {
    match (result, outcome) {
        (DeliveryResult::Response { status }, AttemptOutcome::Sent) => {
            debug!(target: LOG_TARGET, event = "delivered", request = %row.phid, hook = %row.webhook_phid, status = *status)
        }
        (DeliveryResult::Refused(why), _) => {
            warn!(target: LOG_TARGET, event = "hook_uri_refused", request = %row.phid, hook = %row.webhook_phid, reason = %why)
        }
        (result, outcome) => {
            info!(target: LOG_TARGET, event = "attempt_failed", request = %row.phid,
                  hook = %row.webhook_phid, result = %result,
                  will_retry = outcome == AttemptOutcome::WillRetry)
        }
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

/// A hook-configuration error in place of a call. Without a claim it is
/// written only onto the version that was judged; after one, like an
/// attempt's result, onto the version the claim wrote.
pub(super) async fn hook_error(
    cx: &Context,
    row: &RequestRow,
    properties: &Properties,
    error: HookError,
    claim: Option<ClaimToken>,
) {
    bump(&cx.metrics.hook_errors);
    let kind = EventKind::HookError { code: error.code() };
    cx.emit(Some(&row.phid), Some(&row.webhook_phid), kind);
    let version = claim.map_or(row.date_modified, |claim| claim.version);
    let write = hook_error_write(row.id, version, properties, error, cx.clock.now());
    attempts::note_hook_error(cx, row, claim.map(|claim| claim.version), &write, error);
    write_back(cx, &write, &row.phid, claim.map(|claim| claim.at)).await;
}

/// A claimed row that will not be sent now: it is retried once its lease
/// ends, like a row whose deliverer died. `reason`: `late` (past the
/// budget), `run_stopped` (hook paused, breaker open, store error),
/// `lock_lost` (the lock's session broke) or `local_failure` (this host
/// could not make the call).
pub(super) fn left_to_lease(
    cx: &Context,
    row: &RequestRow,
    waited: Duration,
    reason: &'static str,
) {
    bump(&cx.metrics.claims_unused);
    info!(target: LOG_TARGET, event = "claim_left_to_lease", request = %row.phid, hook = %row.webhook_phid,
          reason, waited_ms = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
          lease_secs = cx.windows.lease_secs(),
          "claimed but not sent; retried after its lease");
}

/// Writes a result, retrying for a while: a lost write-back means the row
/// is delivered again once its lease ends. Every try is guarded by the
/// version the write expects (for a claimed attempt, the one its claim
/// wrote), so it lands only while that claim still owns the row: a
/// deliverer that was paused past its lease, and whose row another claimed
/// meanwhile, has its result dropped and counted (`result_dropped_stale`)
/// instead of stored over the newer one. Its first try is made however
/// late it comes: if nobody claimed the row meanwhile, storing the answer
/// is what keeps it from being sent twice. With `claimed_at`, retries stop
/// one second before the claim's lease ends.
///
/// Whether the row is settled: the result stored, or the row moved on
/// (nothing of ours to store any more). `false`: the result is lost and
/// the row will be delivered again after its lease.
pub(super) async fn write_back(
    cx: &Context,
    write: &ResultWrite,
    request_phid: &str,
    claimed_at: Option<Duration>,
) -> bool {
    let lease = Duration::from_secs(cx.windows.lease_secs());
    let give_up_at = claimed_at.map(|at| at + lease.saturating_sub(Duration::from_secs(1)));
    let mut delay = WRITE_RETRY_DELAY;
    for attempt in 1..=WRITE_ATTEMPTS {
        if attempt > 1 && give_up_at.is_some_and(|end| cx.clock.monotonic() >= end) {
            bump(&cx.metrics.writeback_failures);
            error!(target: LOG_TARGET, event = "writeback_failed", request = %request_phid, attempts = attempt - 1,
                   "lease over: result not stored, so as not to overwrite another deliverer's; \
                    the row will be delivered again");
            return false;
        }
        let err = match cx.store.write_result(write).await {
            Ok(written) => {
                cx.accepted("write-back");
                return settled(cx, written, request_phid, attempt, claimed_at);
            }
            Err(err) => err,
        };
        cx.refused("write-back", &err);
        if attempt == WRITE_ATTEMPTS {
            bump(&cx.metrics.writeback_failures);
            error!(target: LOG_TARGET, event = "writeback_failed", request = %request_phid, attempts = attempt,
                   error = %err, "result not stored; the row will be delivered again after its lease");
            break;
        }
        bump(&cx.metrics.writeback_retries);
        warn!(target: LOG_TARGET, event = "writeback_retry", request = %request_phid, attempt,
              error = %err, retry_in_ms = delay.as_millis() as u64);
        cx.clock.sleep(delay).await;
        delay *= 2;
    }
    false
}

/// A write the store answered: stored, or the row moved on since it was
/// read (said, and settled all the same: nothing of ours to store).
fn settled(
    cx: &Context,
    written: Written,
    request_phid: &str,
    attempt: u32,
    claimed_at: Option<Duration>,
) -> bool {
    match (written, claimed_at) {
        (Written::Yes, _) => {}
        (Written::Skipped, Some(_)) => {
            bump(&cx.metrics.writeback_stale);
            warn!(target: LOG_TARGET, event = "result_dropped_stale", request = %request_phid, attempt,
                  "the row moved on since this claim (another deliverer claimed it after \
                   the lease, or an earlier try of this write landed): not stored over it");
        }
        (Written::Skipped, None) => {
            debug!(target: LOG_TARGET, event = "write_skipped", request = %request_phid,
                   "row changed since it was read; another deliverer owns it");
        }
    }
    true
}
