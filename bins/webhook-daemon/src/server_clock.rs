//! The daemon's clock is the database server's: a claim's `dateModified`
//! is the server's `UNIX_TIMESTAMP()`, so cutoffs taken from a host clock
//! that is off would re-send rows early or stall them, and the daemon's
//! own stamps (a write-back's `lastRequestEpoch`) must be on the same
//! clock as the cutoffs that read them.
//!
//! This module is the measurement, which `webhook-admin doctor` takes too:
//! a [`Measurement`] places one reading of the server's clock on this
//! host's clocks, and the skew of this host's system clock against the
//! server's is said past [`SKEW_WARN_SECS`]. With the feature `server`,
//! `keeper` adds the daemon's [`ServerClock`], which anchors on a
//! measurement and counts from it on this host's monotonic clock (a step
//! of the host's wall clock changes nothing); `keep_measured` measures at
//! once, then every [`MEASURE_EVERY`]. Until the first measurement it
//! reads the system clock, and the daemon starts polling only after it
//! (`once_measured`); a lasting skew is logged (`SkewAlarm`).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use webhook_store_mysql::ServerTimeReading;

#[cfg(feature = "server")]
mod keeper;

#[cfg(feature = "server")]
pub use keeper::ServerClock;
#[cfg(feature = "server")]
pub(crate) use keeper::{keep_measured, once_measured};

/// How often the server's clock is measured again. Between measurements
/// the monotonic clock carries the time, off by its drift from the
/// server's clock (a few parts per million: well under a millisecond in
/// 30 s); a step of the server's clock is followed within this long.
pub const MEASURE_EVERY: Duration = Duration::from_secs(30);

/// Skew past which this host's clock is said to be off, in seconds: the
/// margin the lease kept for clocks before the daemon read the server's,
/// and far above what time synchronisation leaves (milliseconds) and what
/// a measurement may be off by (half a round trip).
pub const SKEW_WARN_SECS: f64 = 2.0;

/// The longest round trip a measurement may take to replace one in force:
/// the server's time is known to within half the round trip, and a reading
/// that waited on the server (a busy server, a lock) would set the clock
/// ahead of it, which takes other deliverers' claims over early. A first
/// measurement is taken whatever its round trip (it is better than the
/// host's clock), then replaced as soon as a quicker one comes.
pub const ROUND_TRIP_MAX: Duration = Duration::from_millis(500);

/// This host's system clock since the Unix epoch (a clock set before 1970
/// reads as 0).
pub fn system_time() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// One reading of the server's clock placed on this host's clocks: the
/// server's time is taken to be read halfway between sending the statement
/// and its answer, which is off by at most half the round trip.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measurement {
    /// The server's time since the Unix epoch at `midpoint`.
    server: Duration,
    /// This host's monotonic clock halfway through the round trip.
    midpoint: Instant,
    /// This host's system clock at `midpoint`, since the Unix epoch.
    system: Duration,
    /// From sending the statement to its answer.
    round_trip: Duration,
}

impl Measurement {
    /// Places `reading` on this host's clocks; `system_now` is this host's
    /// system clock read at `read_at`, after the answer.
    pub fn new(reading: &ServerTimeReading, system_now: Duration, read_at: Instant) -> Self {
        let round_trip = reading.answered.saturating_duration_since(reading.sent);
        let midpoint = reading.sent + round_trip / 2;
        Self {
            server: reading.server,
            midpoint,
            system: system_now.saturating_sub(read_at.saturating_duration_since(midpoint)),
            round_trip,
        }
    }

    /// Places a reading just answered against this host's clocks now.
    pub fn taken(reading: &ServerTimeReading) -> Self {
        Self::new(reading, system_time(), Instant::now())
    }

    /// The server's time at this host's monotonic instant `at`.
    pub fn server_time_at(&self, at: Instant) -> Duration {
        match at.checked_duration_since(self.midpoint) {
            Some(since) => self.server + since,
            None => self.server.saturating_sub(self.midpoint.duration_since(at)),
        }
    }

    /// The server's time minus this host's system time, in seconds:
    /// positive when this host's clock is behind.
    pub fn skew_secs(&self) -> f64 {
        self.server.as_secs_f64() - self.system.as_secs_f64()
    }

    /// From sending the statement to its answer; the server's time is
    /// known to within half of it.
    pub fn round_trip(&self) -> Duration {
        self.round_trip
    }
}

/// A skew in words, completed by "the database server's": `0.004 s behind`
/// or `3600.000 s ahead of`.
pub fn skew_words(skew_secs: f64) -> String {
    let direction = if skew_secs >= 0.0 {
        "behind"
    } else {
        "ahead of"
    };
    format!("{:.3} s {direction}", skew_secs.abs())
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) const SERVER: Duration = Duration::from_secs(1_700_000_000);

    /// A reading sent at `base + sent_ms`, answered at `base + answered_ms`,
    /// in which the server read `server`.
    pub(super) fn reading(
        base: Instant,
        sent_ms: u64,
        answered_ms: u64,
        server: Duration,
    ) -> ServerTimeReading {
        ServerTimeReading {
            server,
            sent: base + Duration::from_millis(sent_ms),
            answered: base + Duration::from_millis(answered_ms),
        }
    }

    #[test]
    fn the_server_reading_is_placed_halfway_through_the_round_trip() {
        let base = Instant::now();
        let m = Measurement::new(
            &reading(base, 0, 40, SERVER),
            SERVER + Duration::from_millis(500),
            base + Duration::from_millis(40),
        );
        assert_eq!(m.round_trip(), Duration::from_millis(40));
        assert_eq!(m.server_time_at(base + Duration::from_millis(20)), SERVER);
        // The system clock read 20 ms after the midpoint said SERVER + 500 ms.
        assert!((m.skew_secs() + 0.48).abs() < 1e-6, "{}", m.skew_secs());
        assert_eq!(
            m.server_time_at(base + Duration::from_millis(10)),
            SERVER - Duration::from_millis(10)
        );
    }

    #[test]
    fn skew_reads_from_this_hosts_side() {
        assert_eq!(skew_words(0.0042), "0.004 s behind");
        assert_eq!(skew_words(-3_600.0), "3600.000 s ahead of");
    }
}
