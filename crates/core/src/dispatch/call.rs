//! The pipeline's fourth stage, step 8's call, for a claimed row whose hook
//! was just checked again (`prepare::recheck`): the lock asked once more on
//! its own session, and the claim still within its budget; then the payload built and signed and the POST
//! through the transport with one deadline, and what its latency says
//! about the hook (hanging, slow). A [`Claimed`] row becomes [`Called`],
//! or an [`Exit`].

use std::sync::atomic::Ordering;
use std::time::Duration;

use tracing::{debug, warn};

use crate::events::EventKind;
use crate::metrics::{bump, Metrics};
use crate::model::{Hook, RequestRow};
use crate::outcome::DeliveryResult;
use crate::payload::Payload;
use crate::signing::Signatures;
use crate::transport::{OutboundRequest, Target};

use super::attempts::{self, CallRecord};
use super::context::Context;
use super::stages::{Called, Claimed, Exit, HookRun, Step};
use super::LOG_TARGET;

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

/// Step 8's call for a claimed row.
pub(super) async fn call<'r>(
    cx: &Context,
    run: &mut HookRun,
    claimed: Claimed<'r>,
) -> Result<Called<'r>, Exit> {
    let Claimed {
        row,
        properties,
        hook,
        target,
        transactions,
        claim,
    } = claimed;
    let (result, latency, record) = match target {
        Ok(target) => {
            run.group.refresh(&hook, &target);
            lock_still_ours(cx, run, row, claim.at).await?;
            // The checks above may have waited on the database: the call
            // still has to fit in its claim's lease.
            if cx.past_claim_budget(claim.at) {
                return Err(Exit::Leave {
                    claimed_at: claim.at,
                    reason: "late",
                    step: Step::Next,
                });
            }
            let payload = match &transactions {
                Some(loaded) => Payload::with_transactions(row, &properties, loaded),
                None => Payload::build(row, &properties),
            };
            deliver(cx, row, payload, &hook, target).await
        }
        Err(failure) => (DeliveryResult::Failed(failure), Duration::ZERO, None),
    };
    Ok(Called {
        row,
        properties,
        hook: hook.phid,
        claim,
        result,
        latency,
        record,
    })
}

/// Asks, just before a call, whether the hook's lock is still held by the
/// session that took it. If that session broke, the server freed the lock
/// and another deliverer may be calling the hook already: the row is left
/// to its lease and the run stops, so two calls never reach one hook at
/// once.
async fn lock_still_ours(
    cx: &Context,
    run: &mut HookRun,
    row: &RequestRow,
    claimed_at: Duration,
) -> Result<(), Exit> {
    let held = match run.lock.as_mut() {
        Some(lock) => lock.still_held().await,
        None => Ok(false),
    };
    if held.is_ok() {
        cx.accepted("lock check");
    }
    let reason = match held {
        Ok(true) => return Ok(()),
        Ok(false) => "the session holding it is gone".to_owned(),
        Err(err) => {
            bump(&cx.metrics.store_errors);
            cx.refused("lock check", &err);
            format!("it could not be checked: {err}")
        }
    };
    bump(&cx.metrics.lock_lost);
    warn!(target: LOG_TARGET, event = "hook_lock_lost", hook = %row.webhook_phid, request = %row.phid,
          reason = %reason, "the hook's lock is no longer ours: not called until it is taken again");
    if let Some(lock) = run.lock.take() {
        if let Err(err) = lock.release().await {
            debug!(target: LOG_TARGET, event = "hook_lock_release_failed", hook = %row.webhook_phid, error = %err);
        }
    }
    run.breaker_closed = false;
    Err(Exit::Leave {
        claimed_at,
        reason: "lock_lost",
        step: Step::StopRun,
    })
}

/// The POST, and what its latency says about the hook; with the history
/// on, what the call sent and saw.
async fn deliver(
    cx: &Context,
    row: &RequestRow,
    payload: Payload,
    hook: &Hook,
    target: Target,
) -> (DeliveryResult, Duration, Option<CallRecord>) {
    let timeout = cx.windows.delivery_timeout();
    let signatures = sign(cx, row, hook, payload.as_bytes());
    let mut record = attempts::before_call(cx, payload.as_bytes(), &signatures);
    let request = OutboundRequest {
        target,
        signatures,
        body: payload.into_bytes(),
        request_phid: row.phid.clone(),
        timeout,
    };
    if row.last_request_epoch == 0 {
        // Its first attempt: how long it queued, by Phorge's whole-second
        // `dateCreated`.
        let waited = cx.clock.now().saturating_sub(row.date_created);
        cx.metrics.observe_queue_time(Duration::from_secs(waited));
    }
    let _in_flight = InFlight::enter(&cx.metrics);
    let started = cx.clock.monotonic();
    let result = match record.as_mut() {
        Some(record) => {
            let exchange = &mut record.exchange;
            cx.transport.deliver_recording(request, exchange).await
        }
        None => cx.transport.deliver(request).await,
    };
    let latency = cx.waited_since(started);
    cx.metrics.observe_latency(latency);
    if cx
        .hooks
        .note_latency(&hook.phid, latency, timeout, cx.clock.monotonic())
    {
        warn!(target: LOG_TARGET, event = "hook_slow", hook = %hook.phid,
              latency_ms = millis(latency), timeout_ms = millis(timeout),
              "this hook answers slowly: its rows go one at a time in one delivery slot, \
               other hooks are not held up");
    }
    (result, latency, record)
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Signs the attempt, reporting a key change once (log and event) and a
/// key that cannot give Standard Webhooks headers once per hook.
fn sign(cx: &Context, row: &RequestRow, hook: &Hook, body: &[u8]) -> Signatures {
    let signed = cx.signer.sign(hook, &row.phid, cx.clock.now(), body);
    if let Some(change) = signed.key_changed {
        warn!(target: LOG_TARGET, event = "hook_key_changed", hook = %hook.phid,
              grace_until = change.grace_until.unwrap_or(0),
              "this hook's HMAC key changed: requests are signed with the previous key too \
               until grace_until (0: not at all, GORGE_WEBHOOK_KEY_GRACE_SEC=0)");
        let kind = EventKind::KeyChanged {
            grace_until: change.grace_until,
        };
        cx.emit(Some(&row.phid), Some(&hook.phid), kind);
    }
    if signed.standard_unavailable && cx.hooks.first_standard_unavailable(&hook.phid) {
        warn!(target: LOG_TARGET, event = "standard_signature_unavailable", hook = %hook.phid,
              "this hook's HMAC key is not base64, so it cannot be a Standard Webhooks \
               secret: its requests carry Phorge's signature only");
    }
    signed.signatures
}
