//! A live account of what the dispatcher does, for a stream to operators:
//! claims won and lost, deliveries, failed attempts, hook errors, breaker
//! transitions, hooks paused by `Retry-After` and silent-mode holds. Each
//! event names the request and hook by PHID and never carries a URI, a
//! key, a body or SQL.
//!
//! The dispatcher hands events to an [`EventSink`] synchronously; a sink
//! must never block (drop rather than wait), so a slow watcher cannot slow
//! delivery.

use serde_json::{json, Value};

use crate::model::UnixTime;
use crate::properties::ErrorCode;

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    /// The claim's compare-and-set succeeded: a POST follows.
    ClaimWon,
    /// Another deliverer moved the row first: nothing was sent.
    ClaimLost,
    /// A 2xx answer.
    Delivered {
        /// HTTP status.
        status: u16,
        /// From the start of the POST to the final answer.
        latency_ms: u64,
    },
    /// An attempt that did not succeed.
    AttemptFailed {
        /// `http` or `timeout`.
        error_type: &'static str,
        /// HTTP status or cURL number, as written to the row.
        error_code: ErrorCode,
        /// Whether the row stays `queued` (retry=forever).
        will_retry: bool,
        /// From the start of the POST to the failure (0 when none was made).
        latency_ms: u64,
    },
    /// The row failed without an attempt (hook missing, disabled, URI
    /// refused, unparseable properties, unreadable row).
    HookError {
        /// The `errorCode` written.
        code: &'static str,
    },
    /// The hook's breaker opened: it is not called for a while.
    BreakerOpened {
        /// Failed rows in the window.
        failures: u64,
        /// The threshold.
        threshold: u64,
    },
    /// The hook's breaker closed again.
    BreakerClosed {
        /// Failed rows in the window.
        failures: u64,
        /// The threshold.
        threshold: u64,
    },
    /// The hook's receiver answered 429 or 503 with `Retry-After`: none of
    /// the hook's rows is sent until the pause ends.
    HookPaused {
        /// The status that asked for it.
        status: u16,
        /// The pause, in whole seconds, after the bounds.
        seconds: u64,
        /// The Unix second it ends.
        until: UnixTime,
    },
    /// Phorge's global silent mode started (`on`) or ended holding delivery.
    SilentHold {
        /// Whether delivery is held now.
        on: bool,
    },
    /// The hook's HMAC key differs from the one its last request was
    /// signed with; the previous key signs too until `grace_until`.
    KeyChanged {
        /// When the previous key stops signing (absent: no grace).
        grace_until: Option<UnixTime>,
    },
}

impl EventKind {
    /// The stable name of the event type.
    pub fn name(&self) -> &'static str {
        match self {
            Self::ClaimWon => "claim_won",
            Self::ClaimLost => "claim_lost",
            Self::Delivered { .. } => "delivered",
            Self::AttemptFailed { .. } => "attempt_failed",
            Self::HookError { .. } => "hook_error",
            Self::BreakerOpened { .. } => "breaker_opened",
            Self::BreakerClosed { .. } => "breaker_closed",
            Self::HookPaused { .. } => "hook_paused",
            Self::SilentHold { .. } => "silent_hold",
            Self::KeyChanged { .. } => "key_changed",
        }
    }
}

/// One event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// When, in Unix seconds.
    pub at: UnixTime,
    /// The request row's PHID, when the event is about one.
    pub request: Option<String>,
    /// The hook's PHID, when the event is about one.
    pub hook: Option<String>,
    /// What happened.
    pub kind: EventKind,
}

impl Event {
    /// The event as one flat JSON object: `type`, `at`, `request`, `hook`
    /// and the kind's own fields.
    pub fn to_json(&self) -> Value {
        let mut value = json!({
            "type": self.kind.name(),
            "at": self.at,
            "request": self.request,
            "hook": self.hook,
        });
        let extra = match &self.kind {
            EventKind::ClaimWon | EventKind::ClaimLost => json!({}),
            EventKind::Delivered { status, latency_ms } => {
                json!({"status": status, "latencyMs": latency_ms})
            }
            EventKind::AttemptFailed {
                error_type,
                error_code,
                will_retry,
                latency_ms,
            } => json!({
                "errorType": error_type,
                "errorCode": match error_code {
                    ErrorCode::Number(n) => json!(n),
                    ErrorCode::Text(t) => json!(t),
                },
                "willRetry": will_retry,
                "latencyMs": latency_ms,
            }),
            EventKind::HookError { code } => json!({"errorType": "hook", "errorCode": code}),
            EventKind::BreakerOpened {
                failures,
                threshold,
            }
            | EventKind::BreakerClosed {
                failures,
                threshold,
            } => json!({"failures": failures, "threshold": threshold}),
            EventKind::HookPaused {
                status,
                seconds,
                until,
            } => json!({"status": status, "seconds": seconds, "until": until}),
            EventKind::SilentHold { on } => json!({"held": on}),
            EventKind::KeyChanged { grace_until } => json!({"graceUntil": grace_until}),
        };
        if let (Some(target), Value::Object(fields)) = (value.as_object_mut(), extra) {
            target.extend(fields);
        }
        value
    }
}

/// Where events go. Must not block.
pub trait EventSink: Send + Sync {
    /// Takes one event.
    fn emit(&self, event: Event);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_flat_json_with_stable_names() {
        let event = Event {
            at: 1_700_000_000,
            request: Some("PHID-HWBR-1".into()),
            hook: Some("PHID-HWBH-1".into()),
            kind: EventKind::AttemptFailed {
                error_type: "http",
                error_code: ErrorCode::Number(500),
                will_retry: true,
                latency_ms: 12,
            },
        };
        assert_eq!(
            event.to_json(),
            json!({"type": "attempt_failed", "at": 1_700_000_000u64, "request": "PHID-HWBR-1",
                   "hook": "PHID-HWBH-1", "errorType": "http", "errorCode": 500,
                   "willRetry": true, "latencyMs": 12})
        );
        let hold = Event {
            at: 1,
            request: None,
            hook: None,
            kind: EventKind::SilentHold { on: true },
        };
        assert_eq!(
            hold.to_json(),
            json!({"type": "silent_hold", "at": 1, "request": null, "hook": null, "held": true})
        );
    }
}
