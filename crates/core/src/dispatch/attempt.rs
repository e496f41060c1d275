//! Step 8 for a claimed row: the hook checked again as Phorge has it now,
//! the lock asked once more, the payload built and signed, the POST through the transport with one deadline, what its
//! latency says about the hook (hanging, slow), and the result counted,
//! reported and handed to the write-back.

use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::FutureExt;
use tracing::warn;

use crate::events::EventKind;
use crate::metrics::{bump, Metrics};
use crate::model::{Hook, RequestRow, UnixTime};
use crate::outcome::{attempt_write, AttemptOutcome, DeliveryResult, TransportFailure};
use crate::payload::Payload;
use crate::properties::Properties;
use crate::signing::Signatures;
use crate::transport::{OutboundRequest, Target};

use super::hook_run::{Attempted, HookRun, Step};
use super::prepare::Transactions;
use super::report::{attempt_event, log_attempt};
use super::Dispatcher;
use super::LOG_TARGET;

/// A call that takes at least this long is reported (`hook_slow`), at most
/// once per [`SLOW_REPORT_INTERVAL`] per hook: such a hook holds one of the
/// `max_concurrent` slots while it answers, and nothing else.
const SLOW_CALL: Duration = Duration::from_secs(1);
const SLOW_REPORT_INTERVAL: Duration = Duration::from_secs(60);

/// A claimed row, ready for its POST (step 8).
pub(super) struct Claimed<'r> {
    pub(super) row: &'r RequestRow,
    pub(super) properties: Properties,
    pub(super) hook: Hook,
    pub(super) target: Result<Target, TransportFailure>,
    pub(super) transactions: Transactions,
    pub(super) claim: ClaimToken,
}

/// A won claim: when it was sent (its lease began no earlier) and the
/// version it wrote, which guards every write of its result.
#[derive(Debug, Clone, Copy)]
pub(super) struct ClaimToken {
    pub(super) at: Duration,
    pub(super) version: UnixTime,
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
    /// Step 8 for a claimed row: the POST and its write-back. A success's
    /// write-back is handed back to be stored while the run goes on; a
    /// failure's is stored first.
    pub(super) async fn attempt<'a>(
        &'a self,
        run: &mut HookRun,
        claimed: Claimed<'_>,
    ) -> Attempted<'a> {
        let claimed = match self.recheck_hook(claimed).await {
            Ok(claimed) => claimed,
            Err(step) => {
                // A hook error was written (or the hook could not be read):
                // nothing reached the receiver.
                self.after_attempt(run, matches!(step, Step::Next));
                return step.into();
            }
        };
        if let Ok(target) = &claimed.target {
            run.group.refresh(&claimed.hook, target);
        }
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
                    self.after_attempt(run, false);
                    return Step::StopRun.into();
                }
                // The checks above may have waited on the database: the
                // call still has to fit in its claim's lease.
                if self.left_late(run, row, claim.at) {
                    return Step::Next.into();
                }
                let payload = match &transactions {
                    Some(loaded) => Payload::with_transactions(row, &properties, loaded),
                    None => Payload::build(row, &properties),
                };
                self.deliver(row, payload, &hook, target).await
            }
            Err(failure) => (DeliveryResult::Failed(failure), Duration::ZERO),
        };
        self.count_result(&result);
        if let DeliveryResult::Throttled {
            status,
            retry_after,
        } = result
        {
            self.note_retry_after(row, status, retry_after);
        }
        let now = self.clock.now();
        let Some((write, outcome)) =
            attempt_write(row.id, claim.version, &properties, &result, now)
        else {
            self.local_failure(row, &result, claim.at);
            self.after_attempt(run, false);
            return Step::StopRun.into();
        };
        log_attempt(row, &result, outcome);
        self.emit(
            Some(&row.phid),
            Some(&hook.phid),
            attempt_event(&result, outcome, latency),
        );
        let sent = outcome == AttemptOutcome::Sent;
        let mut pending_write = None;
        let mut step = Step::Next;
        if sent {
            let request_phid = row.phid.clone();
            pending_write = Some(
                async move { self.write_back(&write, &request_phid, Some(claim.at)).await }.boxed(),
            );
        } else {
            if !self.write_back(&write, &row.phid, Some(claim.at)).await {
                // Calling on would leave a second result unstored.
                step = Step::StopRun;
            }
            // A new failure may have opened the breaker: look again before
            // the next claim (or the next row claimed along).
            run.breaker_closed = false;
        }
        self.after_attempt(run, sent);
        Attempted {
            step,
            pending_write,
        }
    }

    async fn deliver(
        &self,
        row: &RequestRow,
        payload: Payload,
        hook: &Hook,
        target: Target,
    ) -> (DeliveryResult, Duration) {
        let signatures = self.sign(row, hook, payload.as_bytes());
        let request = OutboundRequest {
            target,
            body: payload.into_bytes(),
            signatures,
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

    /// Signs the attempt, reporting a key change once (log and event) and
    /// a key that cannot give Standard Webhooks headers once per hook.
    fn sign(&self, row: &RequestRow, hook: &Hook, body: &[u8]) -> Signatures {
        let signed = self.signer.sign(hook, &row.phid, self.clock.now(), body);
        if let Some(change) = signed.key_changed {
            warn!(target: LOG_TARGET, event = "hook_key_changed", hook = %hook.phid,
                  grace_until = change.grace_until.unwrap_or(0),
                  "this hook's HMAC key changed: requests are signed with the previous key too \
                   until grace_until (0: not at all, GORGE_WEBHOOK_KEY_GRACE_SEC=0)");
            self.emit(
                Some(&row.phid),
                Some(&hook.phid),
                EventKind::KeyChanged {
                    grace_until: change.grace_until,
                },
            );
        }
        if signed.standard_unavailable {
            let mut reported = self
                .standard_unavailable_reported
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if reported.insert(hook.phid.clone()) {
                warn!(target: LOG_TARGET, event = "standard_signature_unavailable", hook = %hook.phid,
                      "this hook's HMAC key is not base64, so it cannot be a Standard Webhooks \
                       secret: its requests carry Phorge's signature only");
            }
        }
        signed.signatures
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
        warn!(target: LOG_TARGET, event = "hook_slow", hook = %hook_phid,
              latency_ms = u64::try_from(latency.as_millis()).unwrap_or(u64::MAX),
              timeout_ms = u64::try_from(self.windows.delivery_timeout().as_millis()).unwrap_or(u64::MAX),
              "this hook answers slowly: its rows go one at a time in one delivery slot, \
               other hooks are not held up");
    }

    fn count_result(&self, result: &DeliveryResult) {
        let counter = match result {
            r if r.is_success() => &self.metrics.delivered_ok,
            DeliveryResult::Response { .. } | DeliveryResult::Throttled { .. } => {
                &self.metrics.delivered_http_error
            }
            DeliveryResult::Timeout => &self.metrics.delivered_timeout,
            DeliveryResult::Failed(_) => &self.metrics.delivered_transport_error,
            DeliveryResult::Refused(_) => &self.metrics.hook_errors,
            DeliveryResult::Local(_) => &self.metrics.local_failures,
        };
        bump(counter);
    }

    /// This host could not make the call: nothing reached the receiver and
    /// nothing is written; the row waits out its lease like a dead
    /// deliverer's, and the run stops.
    fn local_failure(&self, row: &RequestRow, result: &DeliveryResult, claimed_at: Duration) {
        let kind = match result {
            DeliveryResult::Local(failure) => failure.as_str(),
            _ => "unknown",
        };
        warn!(target: LOG_TARGET, event = "delivery_local_failure", request = %row.phid, hook = %row.webhook_phid,
              kind, "this host could not make the call (raise LimitNOFILE?); nothing written");
        let waited = self.clock.monotonic().saturating_sub(claimed_at);
        self.leave_to_lease(row, waited, "local_failure");
    }
}
