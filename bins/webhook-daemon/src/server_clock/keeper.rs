//! The daemon's [`ServerClock`]: the latest [`Measurement`] carried
//! forward on the monotonic clock, kept measured (`keep_measured`), the
//! wait for its first measurement before polling (`once_measured`), and
//! what the log says about the measurements and a lasting skew.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use tokio::sync::watch;
use tracing::{debug, info, warn};
use webhook_core::{Clock, UnixTime};
use webhook_store_mysql::MysqlReader;

use super::{skew_words, system_time, Measurement, MEASURE_EVERY, ROUND_TRIP_MAX, SKEW_WARN_SECS};

/// How soon a failed measurement is tried again while there is none yet:
/// polling waits for the first.
const FIRST_RETRY: Duration = Duration::from_secs(1);

/// Skew under which a warned skew is over: half the threshold, so a skew
/// hovering at the threshold is not said again at every measurement.
const SKEW_CLEAR_SECS: f64 = 1.0;

/// How often a lasting skew is said again.
const SKEW_REPEAT: Duration = Duration::from_secs(3_600);

/// How often a failing first measurement is said at warn: polling waits
/// for it, so an operator must hear why nothing is delivered.
const UNMEASURED_WARN_EVERY: Duration = Duration::from_secs(60);

/// A change of the server's time against what the anchor carried it to,
/// beyond which it is logged: the server's clock was stepped, or this
/// host's monotonic clock stood still (a suspended virtual machine).
const STEP_NOTED_SECS: f64 = 1.0;

impl Measurement {
    /// How far `next` finds the server's time from where this measurement
    /// carried it, in seconds (positive: the server's clock moved ahead).
    fn step_to(&self, next: &Self) -> f64 {
        next.server.as_secs_f64() - self.server_time_at(next.midpoint).as_secs_f64()
    }
}

/// The database server's time as the delivery clock: the latest
/// [`Measurement`] carried forward on the monotonic clock; the system
/// clock until there is one.
#[derive(Debug)]
pub struct ServerClock {
    origin: Instant,
    latest: watch::Sender<Option<Measurement>>,
}

impl Default for ServerClock {
    fn default() -> Self {
        Self::new()
    }
}

impl ServerClock {
    /// A clock with no measurement yet, whose monotonic readings start now.
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
            latest: watch::Sender::new(None),
        }
    }

    /// Reads the server's time from `measurement` from now on.
    pub fn anchor(&self, measurement: Measurement) {
        self.latest.send_replace(Some(measurement));
    }

    /// The measurement in force, if any.
    pub fn latest(&self) -> Option<Measurement> {
        *self.latest.borrow()
    }

    /// The skew at the latest measurement ([`Measurement::skew_secs`]).
    pub fn skew_secs(&self) -> Option<f64> {
        self.latest().map(|m| m.skew_secs())
    }

    /// Completes once the first measurement is in.
    pub async fn measured(&self) {
        let mut latest = self.latest.subscribe();
        // The sender lives in `self`, so the wait only ends with a value.
        let _ = latest.wait_for(Option::is_some).await;
    }

    /// Unix seconds at this host's monotonic instant `at`.
    fn unix_at(&self, at: Instant) -> UnixTime {
        match self.latest() {
            Some(measurement) => measurement.server_time_at(at).as_secs(),
            None => system_time().as_secs(),
        }
    }
}

impl Clock for ServerClock {
    fn now(&self) -> UnixTime {
        self.unix_at(Instant::now())
    }

    fn now_ms(&self) -> u64 {
        let at = Instant::now();
        let since_epoch = match self.latest() {
            Some(measurement) => measurement.server_time_at(at),
            None => system_time(),
        };
        u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX)
    }

    fn monotonic(&self) -> Duration {
        self.origin.elapsed()
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(duration))
    }
}

/// Runs `work` once `clock` has its first measurement, or nothing if `stop`
/// completes before: the dispatcher's first poll must not take its
/// cutoffs from this host's clock.
pub(crate) async fn once_measured(
    clock: &ServerClock,
    stop: impl Future<Output = ()>,
    work: impl Future<Output = ()>,
) {
    tokio::select! {
        () = clock.measured() => work.await,
        () = stop => {}
    }
}

/// What to say about the skew after a measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SkewNote {
    /// Past the threshold: newly, or an hour after it was last said.
    Off,
    /// Back within [`SKEW_CLEAR_SECS`] after it was said.
    Cleared,
}

/// When to say that this host's clock is off: on crossing
/// [`SKEW_WARN_SECS`], again every [`SKEW_REPEAT`] while it lasts, and once
/// when it is back within [`SKEW_CLEAR_SECS`].
#[derive(Debug, Default)]
struct SkewAlarm {
    /// The monotonic time it was last said to be off, while it is.
    said_at: Option<Duration>,
}

impl SkewAlarm {
    fn observe(&mut self, skew_secs: f64, now: Duration) -> Option<SkewNote> {
        let off = skew_secs.abs();
        match self.said_at {
            Some(_) if off < SKEW_CLEAR_SECS => {
                self.said_at = None;
                Some(SkewNote::Cleared)
            }
            Some(at) if off > SKEW_WARN_SECS && now >= at + SKEW_REPEAT => {
                self.said_at = Some(now);
                Some(SkewNote::Off)
            }
            None if off > SKEW_WARN_SECS => {
                self.said_at = Some(now);
                Some(SkewNote::Off)
            }
            _ => None,
        }
    }
}

/// Whether `next` should replace the measurement in force: always when
/// there is none, else only when its round trip is within
/// [`ROUND_TRIP_MAX`].
fn replaces(current: Option<&Measurement>, next: &Measurement) -> bool {
    current.is_none() || next.round_trip() <= ROUND_TRIP_MAX
}

/// How long until the next measurement: soon while there is none or the
/// one in force took longer than [`ROUND_TRIP_MAX`], else
/// [`MEASURE_EVERY`].
fn next_measurement_in(current: Option<&Measurement>) -> Duration {
    match current {
        Some(m) if m.round_trip() <= ROUND_TRIP_MAX => MEASURE_EVERY,
        _ => FIRST_RETRY,
    }
}

/// Measures the server's clock through `reader` until dropped: at once
/// (again every [`FIRST_RETRY`] until it answers quickly enough), then
/// every [`MEASURE_EVERY`]; a measurement that [`replaces`] the one in
/// force becomes `clock`'s anchor. A failed one leaves the anchor as it
/// was; while there is none, failures are said at warn once a minute
/// (delivery waits for it).
pub(crate) async fn keep_measured(clock: Arc<ServerClock>, reader: MysqlReader) {
    let mut alarm = SkewAlarm::default();
    let mut unmeasured_said: Option<Duration> = None;
    loop {
        let current = clock.latest();
        match reader.server_time().await {
            Ok(reading) => {
                let measurement = Measurement::taken(&reading);
                if replaces(current.as_ref(), &measurement) {
                    note_measurement(current, &measurement);
                    clock.anchor(measurement);
                    note_skew(&mut alarm, &measurement, clock.monotonic());
                } else {
                    debug!(
                        event = "server_clock_reading_skipped",
                        round_trip_ms =
                            three_decimals(measurement.round_trip().as_secs_f64() * 1e3),
                        "too slow to place the server's time; the measurement in force is kept"
                    );
                }
            }
            Err(err) if current.is_none() => {
                let now = clock.monotonic();
                if unmeasured_said.is_none_or(|at| now >= at + UNMEASURED_WARN_EVERY) {
                    unmeasured_said = Some(now);
                    warn!(event = "server_clock_unmeasured", error = %err,
                          "cannot read the database server's clock; delivery waits for it");
                } else {
                    debug!(event = "server_clock_unmeasured", error = %err);
                }
            }
            Err(err) => debug!(event = "server_clock_unmeasured", error = %err),
        }
        tokio::time::sleep(next_measurement_in(clock.latest().as_ref())).await;
    }
}

/// `value` to three decimals, for the log: the float's further digits are
/// noise next to a measurement's round trip.
fn three_decimals(value: f64) -> f64 {
    (value * 1e3).round() / 1e3
}

fn note_measurement(previous: Option<Measurement>, next: &Measurement) {
    let skew_secs = three_decimals(next.skew_secs());
    let round_trip_ms = three_decimals(next.round_trip().as_secs_f64() * 1e3);
    let Some(previous) = previous else {
        info!(
            event = "server_clock_measured",
            skew_secs, round_trip_ms, "delivery runs on the database server's clock from now on"
        );
        return;
    };
    let step_secs = three_decimals(previous.step_to(next));
    if step_secs.abs() > STEP_NOTED_SECS {
        info!(
            event = "server_clock_stepped",
            step_secs,
            skew_secs,
            "the database server's time moved against this host's monotonic clock; followed"
        );
    } else {
        debug!(
            event = "server_clock_measured",
            skew_secs, step_secs, round_trip_ms
        );
    }
}

fn note_skew(alarm: &mut SkewAlarm, measurement: &Measurement, now: Duration) {
    let skew_secs = three_decimals(measurement.skew_secs());
    match alarm.observe(skew_secs, now) {
        Some(SkewNote::Off) => warn!(
            event = "clock_skew",
            skew_secs,
            threshold_secs = SKEW_WARN_SECS,
            "this host's clock is {} the database server's: delivery runs on the server's \
             clock, but log times and TLS certificate checks use this host's; fix its time \
             synchronisation",
            skew_words(skew_secs)
        ),
        Some(SkewNote::Cleared) => info!(event = "clock_skew_resolved", skew_secs),
        None => {}
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::server_clock::tests::{reading, SERVER};

    #[test]
    fn the_clock_counts_on_from_its_anchor_with_the_monotonic_clock() {
        let base = Instant::now();
        let clock = ServerClock::new();
        // The host's system clock an hour ahead: it changes nothing.
        let m = Measurement::new(
            &reading(base, 0, 2, SERVER + Duration::from_millis(999)),
            SERVER + Duration::from_secs(3_600),
            base + Duration::from_millis(2),
        );
        clock.anchor(m);
        assert_eq!(
            clock.unix_at(base + Duration::from_millis(1)),
            1_700_000_000
        );
        assert_eq!(
            clock.unix_at(base + Duration::from_millis(2)),
            1_700_000_001
        );
        assert_eq!(
            clock.unix_at(base + Duration::from_secs(3_600)),
            1_700_003_600
        );
        let skew = clock.skew_secs().expect("measured");
        assert!((skew + 3_599.0).abs() < 1e-3, "{skew}");
    }

    #[test]
    fn a_new_measurement_replaces_the_anchor_and_its_step_is_measured() {
        let base = Instant::now();
        let clock = ServerClock::new();
        let first = Measurement::new(&reading(base, 0, 0, SERVER), SERVER, base);
        clock.anchor(first);
        // 30 s later on this host the server says 5 s more than that: its
        // clock was stepped ahead.
        let later = base + Duration::from_secs(30);
        let second = Measurement::new(
            &reading(later, 0, 0, SERVER + Duration::from_secs(35)),
            SERVER + Duration::from_secs(30),
            later,
        );
        assert!((first.step_to(&second) - 5.0).abs() < 1e-6);
        clock.anchor(second);
        assert_eq!(clock.unix_at(later), 1_700_000_035);
    }

    #[test]
    fn before_the_first_measurement_it_reads_the_system_clock() {
        let clock = ServerClock::new();
        assert_eq!(clock.latest(), None);
        assert_eq!(clock.skew_secs(), None);
        let system = system_time().as_secs();
        assert!(clock.unix_at(Instant::now()).abs_diff(system) <= 1);
    }

    #[test]
    fn a_skew_is_said_on_crossing_hourly_while_it_lasts_and_once_when_over() {
        let mut alarm = SkewAlarm::default();
        let at = Duration::from_secs;
        assert_eq!(alarm.observe(0.5, at(0)), None);
        assert_eq!(alarm.observe(-2.0, at(30)), None, "at the threshold");
        assert_eq!(alarm.observe(-2.5, at(60)), Some(SkewNote::Off));
        assert_eq!(alarm.observe(-3.0, at(90)), None);
        assert_eq!(alarm.observe(1.5, at(120)), None, "not yet within 1 s");
        assert_eq!(alarm.observe(3_600.0, at(3_659)), None);
        assert_eq!(alarm.observe(3_600.0, at(3_660)), Some(SkewNote::Off));
        assert_eq!(alarm.observe(0.2, at(3_690)), Some(SkewNote::Cleared));
        assert_eq!(alarm.observe(0.2, at(3_720)), None);
        assert_eq!(alarm.observe(2.1, at(3_750)), Some(SkewNote::Off));
    }

    #[tokio::test]
    async fn work_waits_for_the_first_measurement_or_ends_with_stop() {
        use futures::FutureExt;
        use std::sync::atomic::{AtomicBool, Ordering};

        let clock = ServerClock::new();
        let ran = AtomicBool::new(false);
        let work = async { ran.store(true, Ordering::SeqCst) };
        let mut waiting = Box::pin(once_measured(&clock, std::future::pending(), work));
        assert!((&mut waiting).now_or_never().is_none());
        assert!(
            !ran.load(Ordering::SeqCst),
            "ran before the clock was measured"
        );
        let base = Instant::now();
        clock.anchor(Measurement::new(&reading(base, 0, 0, SERVER), SERVER, base));
        assert!(waiting.now_or_never().is_some());
        assert!(ran.load(Ordering::SeqCst));

        let unmeasured = ServerClock::new();
        let never = AtomicBool::new(false);
        once_measured(&unmeasured, std::future::ready(()), async {
            never.store(true, Ordering::SeqCst);
        })
        .await;
        assert!(!never.load(Ordering::SeqCst), "ran although stopped first");
    }

    #[test]
    fn a_slow_reading_does_not_replace_a_quick_one_but_is_taken_when_there_is_none() {
        let base = Instant::now();
        let quick = Measurement::new(&reading(base, 0, 20, SERVER), SERVER, base);
        // It waited 3 s on the server: placed mid-way, it would read the
        // server's time up to 1.5 s ahead.
        let slow = Measurement::new(&reading(base, 0, 3_000, SERVER), SERVER, base);
        assert!(replaces(None, &slow), "better than the host's clock");
        assert!(!replaces(Some(&quick), &slow));
        assert!(replaces(Some(&slow), &quick));
        assert!(replaces(Some(&quick), &quick));
        // Measured again soon while there is none or only a slow one.
        assert_eq!(next_measurement_in(None), FIRST_RETRY);
        assert_eq!(next_measurement_in(Some(&slow)), FIRST_RETRY);
        assert_eq!(next_measurement_in(Some(&quick)), MEASURE_EVERY);
    }
}
