//! `SystemClock`: the system's Unix time, a monotonic origin, and tokio's
//! timer, for the in-memory demo and tests, which have no database whose
//! clock to read. Delivery from the database runs on
//! [`crate::server_clock::ServerClock`].

use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use webhook_core::{Clock, UnixTime};

use crate::server_clock::system_time;

/// System time and tokio sleeps.
#[derive(Debug)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    /// A clock whose monotonic readings start now.
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> UnixTime {
        // A clock set before 1970 reads as 0: every row then looks new,
        // which errs towards delivering rather than losing.
        system_time().as_secs()
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(system_time().as_millis()).unwrap_or(u64::MAX)
    }

    fn monotonic(&self) -> Duration {
        self.origin.elapsed()
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(duration))
    }
}
