//! Whether every call lately failed on this side (the egress proxy down,
//! descriptors used up): the latest local failure, kept until a call
//! reaches a receiver again. While one is kept, nothing is being delivered
//! whatever the receivers do, so [`crate::Dispatcher::refusal`] says it
//! (the daemon's `/readyz` answers 503 with it). State only; `record`
//! feeds it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::outcome::{DeliveryResult, LocalFailure};

/// The latest local failure since a call last reached a receiver.
#[derive(Default)]
pub(super) struct LocalStreak {
    latest: Mutex<Option<LocalFailure>>,
    /// Whether one is kept, read without the lock on every call.
    kept: AtomicBool,
}

impl LocalStreak {
    /// Notes a call's result: a local failure is kept; a result from a
    /// receiver (an answer, a timeout, a failure on the wire) ends the
    /// streak; a hop the outbound check refused reached nothing, so it
    /// changes nothing.
    pub(super) fn note(&self, result: &DeliveryResult) {
        match result {
            DeliveryResult::Local(failure) => {
                *self.latest() = Some(*failure);
                self.kept.store(true, Ordering::Release);
            }
            DeliveryResult::Refused(_) => {}
            _ => {
                if self.kept.swap(false, Ordering::AcqRel) {
                    *self.latest() = None;
                }
            }
        }
    }

    fn latest(&self) -> std::sync::MutexGuard<'_, Option<LocalFailure>> {
        self.latest.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// In words, while every call since the last one to reach a receiver
    /// failed on this side.
    pub(super) fn reason(&self) -> Option<String> {
        if !self.kept.load(Ordering::Acquire) {
            return None;
        }
        let failure = (*self.latest())?;
        Some(format!(
            "calls fail on this side, none reaches a receiver: {failure} ({})",
            failure.advice()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::{ProxyFailure, TransportFailure, UriRefusal};

    #[test]
    fn a_local_failure_is_kept_until_a_call_reaches_a_receiver() {
        let streak = LocalStreak::default();
        assert_eq!(streak.reason(), None);
        streak.note(&DeliveryResult::Local(LocalFailure::Proxy(
            ProxyFailure::Unreachable,
        )));
        assert_eq!(
            streak.reason().as_deref(),
            Some(
                "calls fail on this side, none reaches a receiver: the egress proxy is \
                 unreachable (is the egress proxy up and reachable?)"
            )
        );
        streak.note(&DeliveryResult::Refused(UriRefusal::UnknownHost));
        assert!(streak.reason().is_some(), "a refused hop reached nothing");
        streak.note(&DeliveryResult::Local(LocalFailure::Proxy(
            ProxyFailure::AuthRequired,
        )));
        assert!(streak.reason().is_some_and(|r| r.contains("407")));
        streak.note(&DeliveryResult::Failed(TransportFailure::Connect));
        assert_eq!(streak.reason(), None, "a receiver's failure ends it");
        streak.note(&DeliveryResult::Local(LocalFailure::Descriptors));
        streak.note(&DeliveryResult::Response { status: 200 });
        assert_eq!(streak.reason(), None);
    }
}
