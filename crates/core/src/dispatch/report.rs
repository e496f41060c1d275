//! What the dispatcher tells: events for the live stream, the log lines
//! for claims, attempts, rows left to their lease and store errors (those
//! refused for a missing privilege at most once a minute), poll failures
//! once per outage, and a periodic one-line summary.
//!
//! It decides nothing: every caller has already acted.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tracing::{debug, info, warn};

use crate::events::{Event, EventKind};
use crate::metrics::{bump, Metrics, MetricsSnapshot};
use crate::model::RequestRow;
use crate::outcome::{attempt_error, AttemptOutcome, DeliveryResult, HookError};
use crate::properties::ErrorCode;
use crate::store::{Claim, StoreError};

use super::Dispatcher;
use super::LOG_TARGET;

/// How often a summary of the counters is logged while there is activity.
const SUMMARY_INTERVAL: Duration = Duration::from_secs(60);
/// At most one `store_denied` warning this often, however many operations
/// the database refuses meanwhile.
const DENIED_WARN_EVERY: Duration = Duration::from_secs(60);
/// Longest prefix of unparseable properties quoted in a log line.
const LOGGED_PROPERTIES_MAX: usize = 512;

impl Dispatcher {
    pub(super) fn emit(&self, request: Option<&str>, hook: Option<&str>, kind: EventKind) {
        if let Some(events) = &self.events {
            events.emit(Event {
                at: self.clock.now(),
                request: request.map(str::to_owned),
                hook: hook.map(str::to_owned),
                kind,
            });
        }
    }

    pub(super) fn note_claim(&self, row: &RequestRow, hook_phid: &str, claim: Claim) {
        match claim {
            Claim::Won(_) => {
                bump(&self.metrics.claims_won);
                self.emit(Some(&row.phid), Some(hook_phid), EventKind::ClaimWon);
            }
            Claim::Lost => {
                bump(&self.metrics.claims_lost);
                self.emit(Some(&row.phid), Some(hook_phid), EventKind::ClaimLost);
                debug!(target: LOG_TARGET, event = "claim_lost", request = %row.phid, hook = %hook_phid);
            }
        }
    }

    /// A claimed row that will not be sent now: it is retried once its
    /// lease ends, like a row whose deliverer died.
    /// `reason`: `late` (past the budget), `run_stopped` (hook paused,
    /// breaker open, store error), `lock_lost` (the lock's session broke) or
    /// `local_failure` (this host could not make the call).
    pub(super) fn leave_to_lease(&self, row: &RequestRow, waited: Duration, reason: &'static str) {
        bump(&self.metrics.claims_unused);
        info!(target: LOG_TARGET, event = "claim_left_to_lease", request = %row.phid, hook = %row.webhook_phid,
              reason, waited_ms = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
              lease_secs = self.windows.lease_secs(),
              "claimed but not sent; retried after its lease");
    }

    pub(super) fn store_failed(&self, operation: &str, err: &StoreError) {
        bump(&self.metrics.store_errors);
        if matches!(err, StoreError::Denied(_)) {
            return self.store_denied(operation, err);
        }
        warn!(target: LOG_TARGET, event = "store_error", operation, error = %err, "hook skipped until the next poll");
    }

    /// A privilege the account lacks fails every hook alike, every poll,
    /// until it is granted: one warning a minute says so, with the server's
    /// words and how many refusals it held back since the last; the rest go
    /// to debug.
    fn store_denied(&self, operation: &str, err: &StoreError) {
        let count = self.count_denied(err);
        match self.denied_warning_due(count) {
            Some(suppressed) => {
                warn!(target: LOG_TARGET, event = "store_denied", operation, error = %err, suppressed,
                      "the database refused this account (a privilege it lacks, or its login); \
                       hooks are skipped until that is put right")
            }
            None => debug!(target: LOG_TARGET, event = "store_denied", operation, error = %err),
        }
    }

    /// Counts a refusal for a missing privilege (whatever logs the
    /// failure); the refusals counted so far.
    pub(super) fn count_denied(&self, err: &StoreError) -> u64 {
        if matches!(err, StoreError::Denied(_)) {
            self.metrics.store_denied.fetch_add(1, Ordering::Relaxed) + 1
        } else {
            self.metrics.store_denied.load(Ordering::Relaxed)
        }
    }

    /// Whether the warning for the `count`th refusal is due (none in the
    /// last [`DENIED_WARN_EVERY`]) and, if so, how many refusals since the
    /// last warning went without one.
    fn denied_warning_due(&self, count: u64) -> Option<u64> {
        let now = self.clock.monotonic();
        let mut last = self
            .denied_reported
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if last.is_some_and(|last| now.saturating_sub(last.at) < DENIED_WARN_EVERY) {
            return None;
        }
        let warned = last.map_or(0, |last| last.count);
        *last = Some(DeniedReported { at: now, count });
        Some(count.saturating_sub(warned + 1))
    }
}

pub(super) fn log_attempt(row: &RequestRow, result: &DeliveryResult, outcome: AttemptOutcome) {
    match (result, outcome) {
        (DeliveryResult::Response { status }, AttemptOutcome::Sent) => {
            debug!(target: LOG_TARGET, event = "delivered", request = %row.phid, hook = %row.webhook_phid, status = *status)
        }
        (DeliveryResult::Refused(why), _) => {
            warn!(target: LOG_TARGET, event = "hook_uri_refused", request = %row.phid, hook = %row.webhook_phid, reason = %why)
        }
        (result, outcome) => {
            info!(target: LOG_TARGET, event = "attempt_failed", request = %row.phid,
                                   hook = %row.webhook_phid, result = ?result,
                                   will_retry = outcome == AttemptOutcome::WillRetry)
        }
    }
}

/// The event for a finished attempt.
pub(super) fn attempt_event(
    result: &DeliveryResult,
    outcome: AttemptOutcome,
    latency: Duration,
) -> EventKind {
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

/// At most [`LOGGED_PROPERTIES_MAX`] bytes of `text`, cut at a character
/// boundary.
pub(super) fn truncated(text: &str) -> &str {
    if text.len() <= LOGGED_PROPERTIES_MAX {
        return text;
    }
    let mut end = LOGGED_PROPERTIES_MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// When the dispatcher last wrote its `store_denied` warning (on the
/// injected clock's monotonic reading), and the refusals counted then: the
/// next line says how many were held back in between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct DeniedReported {
    at: Duration,
    count: u64,
}

/// Logs candidate-query failures once per outage, not once per tick.
#[derive(Default)]
pub(super) struct PollHealth {
    failing_since_attempts: u64,
}

impl PollHealth {
    pub(super) fn failed(&mut self, err: &StoreError) {
        self.failing_since_attempts += 1;
        if self.failing_since_attempts == 1 {
            warn!(target: LOG_TARGET, event = "poll_failed", error = %err, "will keep polling");
        } else {
            debug!(target: LOG_TARGET, event = "poll_failed", error = %err, consecutive = self.failing_since_attempts);
        }
    }

    pub(super) fn succeeded(&mut self) {
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
pub(super) struct Summary {
    last_at: Duration,
    last: MetricsSnapshot,
}

impl Summary {
    pub(super) fn new(at: Duration, last: MetricsSnapshot) -> Self {
        Self { last_at: at, last }
    }

    pub(super) fn maybe_log(&mut self, now: Duration, metrics: &Metrics) {
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
