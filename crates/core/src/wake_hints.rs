//! Wake hints: how a source outside the dispatcher that sees changes as
//! they are committed (the MySQL store follows the server's binary log)
//! tells the dispatcher "a row may have been added", so it polls at once
//! instead of at its next probe or poll.
//!
//! A hint is only a hint: the poll decides what is delivered, exactly as
//! without one, and a lost or spurious hint costs latency or one poll,
//! never a delivery. While the source says it is following, the wake-up
//! probe rests; when it stops following (connection lost, grant revoked),
//! the probe takes over at once, and when it follows again the dispatcher
//! polls once for whatever was added in between.
//!
//! Runtime-free: one flag for a pending hint, one for the source's state,
//! and the dispatcher's waker.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::task::AtomicWaker;

/// The two ends of a hint source: the source calls [`WakeHints::notify`]
/// and [`WakeHints::set_following`]; the dispatcher given a clone
/// ([`crate::Dispatcher::with_wake_hints`]) listens. One listener only: a
/// hint is taken once, so two dispatchers sharing a clone would take
/// each other's.
#[derive(Clone, Default)]
pub struct WakeHints {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    /// A hint arrived that the dispatcher has not taken yet.
    pending: AtomicBool,
    /// The source follows the table now.
    following: AtomicBool,
    /// The source started or stopped following since the dispatcher last
    /// looked: the probe's timer is to be set again.
    turned: AtomicBool,
    /// Hints given since the start.
    given: AtomicU64,
    waker: AtomicWaker,
}

/// What the dispatcher found when it looked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hint {
    /// A row may have been added: poll now.
    Poll,
    /// The source started or stopped following: the probe resumes or
    /// rests.
    Turned,
}

impl std::fmt::Debug for WakeHints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WakeHints")
            .field("following", &self.following())
            .finish_non_exhaustive()
    }
}

impl WakeHints {
    /// A source that does not follow anything yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A row may have been added to the request table.
    pub fn notify(&self) {
        self.shared.given.fetch_add(1, Ordering::Relaxed);
        self.shared.pending.store(true, Ordering::Release);
        self.shared.waker.wake();
    }

    /// The source follows the table (`true`) or no longer does. Starting to
    /// follow is also a hint: rows added while it did not were seen by no
    /// one but the probe.
    pub fn set_following(&self, following: bool) {
        let was = self.shared.following.swap(following, Ordering::AcqRel);
        if was == following {
            return;
        }
        if following {
            self.shared.pending.store(true, Ordering::Release);
        }
        self.shared.turned.store(true, Ordering::Release);
        self.shared.waker.wake();
    }

    /// Whether the source follows the table now.
    pub fn following(&self) -> bool {
        self.shared.following.load(Ordering::Acquire)
    }

    /// How many hints the source gave since the start (several may wake
    /// one poll).
    pub fn given(&self) -> u64 {
        self.shared.given.load(Ordering::Relaxed)
    }

    /// Takes a pending hint or turn, or registers the task to be woken by
    /// the next one.
    pub(crate) fn poll_hint(&self, task: &mut Context<'_>) -> Poll<Hint> {
        if let Some(hint) = self.take() {
            return Poll::Ready(hint);
        }
        self.shared.waker.register(task.waker());
        // A hint that came between the look and the registration.
        self.take().map_or(Poll::Pending, Poll::Ready)
    }

    fn take(&self) -> Option<Hint> {
        if self.shared.turned.swap(false, Ordering::AcqRel) {
            return Some(Hint::Turned);
        }
        self.shared
            .pending
            .swap(false, Ordering::AcqRel)
            .then_some(Hint::Poll)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::task::noop_waker_ref;

    fn look(hints: &WakeHints) -> Poll<Hint> {
        hints.poll_hint(&mut Context::from_waker(noop_waker_ref()))
    }

    #[test]
    fn a_hint_is_taken_once() {
        let hints = WakeHints::new();
        assert_eq!(look(&hints), Poll::Pending);
        hints.notify();
        hints.notify();
        assert_eq!(hints.given(), 2);
        assert_eq!(look(&hints), Poll::Ready(Hint::Poll));
        assert_eq!(look(&hints), Poll::Pending);
    }

    #[test]
    fn starting_to_follow_turns_and_then_polls() {
        let hints = WakeHints::new();
        hints.set_following(true);
        assert!(hints.following());
        assert_eq!(look(&hints), Poll::Ready(Hint::Turned));
        assert_eq!(look(&hints), Poll::Ready(Hint::Poll));
        assert_eq!(look(&hints), Poll::Pending);
        hints.set_following(true);
        assert_eq!(look(&hints), Poll::Pending, "no change, no turn");
        hints.set_following(false);
        assert!(!hints.following());
        assert_eq!(look(&hints), Poll::Ready(Hint::Turned));
        assert_eq!(look(&hints), Poll::Pending, "stopping is no hint");
    }
}
