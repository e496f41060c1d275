//! Time as an input: the `Clock` trait the dispatcher reads and sleeps on,
//! and (with the `testing` feature) `ManualClock`, a fake whose time moves
//! only when a test says so.

use std::fmt;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::model::UnixTime;

/// Wall-clock seconds, a monotonic reading, and sleeping.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Unix time in whole seconds, as stored in the epoch columns.
    fn now(&self) -> UnixTime;

    /// Unix time in milliseconds, for records finer than the epoch
    /// columns (the attempt history); by default [`Self::now`]'s second.
    fn now_ms(&self) -> u64 {
        self.now().saturating_mul(1000)
    }

    /// A monotonic reading from an arbitrary origin, for latencies and
    /// scheduling.
    fn monotonic(&self) -> Duration;

    /// Completes once `duration` has passed on this clock.
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()>;
}

#[cfg(any(test, feature = "testing"))]
mod manual;
#[cfg(any(test, feature = "testing"))]
pub use manual::ManualClock;
