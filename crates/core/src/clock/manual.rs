//! `ManualClock`, a clock for tests and simulations whose time moves only
//! when the test says so (the `testing` feature).

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures::future::BoxFuture;

use super::Clock;
use crate::model::UnixTime;

/// A clock for tests and simulations: time stands still until [`advance`]
/// (or [`advance_to_next_sleeper`]) moves it, then due sleepers wake.
///
/// [`advance`]: ManualClock::advance
/// [`advance_to_next_sleeper`]: ManualClock::advance_to_next_sleeper
#[derive(Clone)]
pub struct ManualClock {
    inner: Arc<Mutex<ManualInner>>,
}

#[derive(Default)]
struct ManualInner {
    origin_unix: UnixTime,
    elapsed: Duration,
    next_sleeper: u64,
    sleepers: BTreeMap<(Duration, u64), Option<Waker>>,
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = self.lock();
        f.debug_struct("ManualClock")
            .field("now", &(inner.origin_unix + inner.elapsed.as_secs()))
            .field("elapsed", &inner.elapsed)
            .field("sleepers", &inner.sleepers.len())
            .finish()
    }
}

impl ManualClock {
    /// A clock reading `start` Unix seconds.
    pub fn new(start: UnixTime) -> Self {
        Self {
            inner: Arc::new(Mutex::new(ManualInner {
                origin_unix: start,
                ..ManualInner::default()
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, ManualInner> {
        // A poisoned lock only means a test already panicked.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Moves time forward and wakes every sleeper that is now due.
    pub fn advance(&self, by: Duration) {
        let wakers = {
            let mut inner = self.lock();
            inner.elapsed += by;
            let now = inner.elapsed;
            let due: Vec<_> = inner
                .sleepers
                .range(..=(now, u64::MAX))
                .map(|(k, _)| *k)
                .collect();
            due.into_iter()
                .filter_map(|k| inner.sleepers.remove(&k).flatten())
                .collect::<Vec<_>>()
        };
        for waker in wakers {
            waker.wake();
        }
    }

    /// Jumps to the earliest pending sleeper's deadline and wakes it;
    /// returns false when nobody sleeps.
    pub fn advance_to_next_sleeper(&self) -> bool {
        let step = {
            let inner = self.lock();
            match inner.sleepers.keys().next() {
                Some((deadline, _)) => deadline.saturating_sub(inner.elapsed),
                None => return false,
            }
        };
        self.advance(step);
        true
    }

    /// Time until the earliest pending sleeper is due, if any.
    pub fn next_sleeper_in(&self) -> Option<Duration> {
        let inner = self.lock();
        inner
            .sleepers
            .keys()
            .next()
            .map(|(deadline, _)| deadline.saturating_sub(inner.elapsed))
    }

    /// Number of pending sleepers.
    pub fn sleepers(&self) -> usize {
        self.lock().sleepers.len()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> UnixTime {
        let inner = self.lock();
        inner.origin_unix + inner.elapsed.as_secs()
    }

    fn monotonic(&self) -> Duration {
        self.lock().elapsed
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        let key = {
            let mut inner = self.lock();
            let id = inner.next_sleeper;
            inner.next_sleeper += 1;
            let key = (inner.elapsed + duration, id);
            inner.sleepers.insert(key, None);
            key
        };
        Box::pin(ManualSleep {
            clock: self.clone(),
            key,
        })
    }
}

struct ManualSleep {
    clock: ManualClock,
    key: (Duration, u64),
}

impl Future for ManualSleep {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut inner = self.clock.lock();
        if inner.elapsed >= self.key.0 {
            inner.sleepers.remove(&self.key);
            return Poll::Ready(());
        }
        inner.sleepers.insert(self.key, Some(cx.waker().clone()));
        Poll::Pending
    }
}

impl Drop for ManualSleep {
    fn drop(&mut self) {
        self.clock.lock().sleepers.remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[test]
    fn sleepers_wake_only_when_time_reaches_them() {
        let clock = ManualClock::new(1_000);
        let mut short = clock.sleep(Duration::from_secs(1));
        let mut long = clock.sleep(Duration::from_secs(5));
        assert!((&mut short).now_or_never().is_none());
        clock.advance(Duration::from_millis(999));
        assert!((&mut short).now_or_never().is_none());
        assert!(clock.advance_to_next_sleeper());
        assert_eq!(clock.now(), 1_001);
        assert!((&mut short).now_or_never().is_some());
        assert!((&mut long).now_or_never().is_none());
        assert!(clock.advance_to_next_sleeper());
        assert_eq!(clock.now(), 1_005);
        assert!(long.now_or_never().is_some());
        assert!(!clock.advance_to_next_sleeper());
    }

    #[test]
    fn dropped_sleepers_are_forgotten() {
        let clock = ManualClock::new(0);
        drop(clock.sleep(Duration::from_secs(1)));
        assert_eq!(clock.sleepers(), 0);
    }
}
