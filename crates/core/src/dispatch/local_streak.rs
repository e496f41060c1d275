//! Whether every call lately failed on this side (the egress proxy down,
//! descriptors used up): how many calls in a row failed so, and the latest
//! such failure, kept until a call reaches a receiver again. From
//! [`UNREADY_AFTER`] in a row nothing is being delivered whatever the
//! receivers do, so [`crate::Dispatcher::refusal`] says it (the daemon's
//! `/readyz` answers 503 with it); one failure among calls that reach
//! their receivers does not. State only; `record` feeds it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::outcome::{DeliveryResult, LocalFailure};

/// Calls in a row that must fail on this side before delivery is said to
/// be unable to go on.
pub(crate) const UNREADY_AFTER: u64 = 3;

/// Local failures since a call last reached a receiver, and the latest.
#[derive(Default)]
pub(super) struct LocalStreak {
    latest: Mutex<Option<LocalFailure>>,
    /// How many in a row, read without the lock on every call.
    in_a_row: AtomicU64,
}

impl LocalStreak {
    /// Notes a call's result: a local failure lengthens the streak; a
    /// result from a receiver (an answer, a timeout, a failure on the
    /// wire) ends it; a hop the outbound check refused reached nothing,
    /// so it changes nothing.
    pub(super) fn note(&self, result: &DeliveryResult) {
        match result {
            DeliveryResult::Local(failure) => {
                *self.latest() = Some(*failure);
                self.in_a_row.fetch_add(1, Ordering::AcqRel);
            }
            DeliveryResult::Refused(_) => {}
            _ => {
                if self.in_a_row.swap(0, Ordering::AcqRel) > 0 {
                    *self.latest() = None;
                }
            }
        }
    }

    fn latest(&self) -> std::sync::MutexGuard<'_, Option<LocalFailure>> {
        self.latest.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// In words, while the last [`UNREADY_AFTER`] calls or more, and every
    /// call since the last one to reach a receiver, failed on this side.
    pub(super) fn reason(&self) -> Option<String> {
        let in_a_row = self.in_a_row.load(Ordering::Acquire);
        if in_a_row < UNREADY_AFTER {
            return None;
        }
        let failure = (*self.latest())?;
        Some(format!(
            "calls fail on this side, none reaches a receiver ({in_a_row} in a row): \
             {failure} ({})",
            failure.advice()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::{ProxyFailure, TransportFailure, UriRefusal};

    fn unreachable() -> DeliveryResult {
        DeliveryResult::Local(LocalFailure::Proxy(ProxyFailure::Unreachable))
    }

    #[test]
    fn local_failures_in_a_row_are_kept_until_a_call_reaches_a_receiver() {
        let streak = LocalStreak::default();
        assert_eq!(streak.reason(), None);
        streak.note(&unreachable());
        streak.note(&unreachable());
        assert_eq!(streak.reason(), None, "two in a row are not yet every call");
        streak.note(&DeliveryResult::Refused(UriRefusal::UnknownHost));
        assert_eq!(streak.reason(), None, "a refused hop reached nothing");
        streak.note(&unreachable());
        assert_eq!(
            streak.reason().as_deref(),
            Some(
                "calls fail on this side, none reaches a receiver (3 in a row): the egress \
                 proxy is unreachable (is the egress proxy up and reachable?)"
            )
        );
        streak.note(&DeliveryResult::Local(LocalFailure::Proxy(
            ProxyFailure::AuthRequired,
        )));
        assert!(streak.reason().is_some_and(|r| r.contains("407")));
        streak.note(&DeliveryResult::Failed(TransportFailure::Connect));
        assert_eq!(streak.reason(), None, "a receiver's failure ends it");
        for _ in 0..UNREADY_AFTER {
            streak.note(&DeliveryResult::Local(LocalFailure::Descriptors));
        }
        assert!(streak.reason().is_some());
        streak.note(&DeliveryResult::Response { status: 200 });
        assert_eq!(streak.reason(), None);
    }

    #[test]
    fn one_local_failure_among_calls_that_reach_receivers_is_not_a_streak() {
        let streak = LocalStreak::default();
        for _ in 0..10 {
            streak.note(&unreachable());
            streak.note(&DeliveryResult::Response { status: 200 });
            streak.note(&unreachable());
            assert_eq!(streak.reason(), None);
        }
    }
}
