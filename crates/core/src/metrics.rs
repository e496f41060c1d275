//! Counters the dispatcher keeps for a metrics endpoint: plain atomics, read
//! as a consistent-enough snapshot. No exporter here; binaries render them.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::outcome::ProxyFailure;

/// Upper bounds (seconds) of the delivery latency histogram buckets.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Upper bounds (seconds) of the queue-time histogram buckets. Phorge
/// stamps `dateCreated` in whole seconds, so the first bucket holds every
/// row sent within the second it was created or the next.
pub const QUEUE_TIME_BUCKETS: &[f64] = &[
    1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
];

/// A histogram's bucket bounds, as a type, so each histogram field of
/// [`Metrics`] builds itself by `Default`.
trait Bounds {
    const BOUNDS: &'static [f64];
}

/// [`LATENCY_BUCKETS`].
#[derive(Debug)]
struct CallLatency;

impl Bounds for CallLatency {
    const BOUNDS: &'static [f64] = LATENCY_BUCKETS;
}

/// [`QUEUE_TIME_BUCKETS`].
#[derive(Debug)]
struct QueueTime;

impl Bounds for QueueTime {
    const BOUNDS: &'static [f64] = QUEUE_TIME_BUCKETS;
}

/// A histogram of durations over `B`'s bucket bounds (seconds).
#[derive(Debug)]
struct Histogram<B> {
    buckets: Vec<AtomicU64>,
    count: AtomicU64,
    sum_micros: AtomicU64,
    bounds: PhantomData<B>,
}

impl<B: Bounds> Default for Histogram<B> {
    fn default() -> Self {
        Self {
            buckets: B::BOUNDS.iter().map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_micros: AtomicU64::new(0),
            bounds: PhantomData,
        }
    }
}

impl<B: Bounds> Histogram<B> {
    fn observe(&self, value: Duration) {
        let secs = value.as_secs_f64();
        for (bound, bucket) in B::BOUNDS.iter().zip(&self.buckets) {
            if secs <= *bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(value.as_micros()).unwrap_or(u64::MAX);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            bounds: B::BOUNDS,
            buckets: self
                .buckets
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect(),
            count: self.count.load(Ordering::Relaxed),
            sum_micros: self.sum_micros.load(Ordering::Relaxed),
        }
    }
}

/// A point-in-time copy of a histogram.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    /// Each bucket's upper bound, in seconds.
    pub bounds: &'static [f64],
    /// Cumulative counts per bound.
    pub buckets: Vec<u64>,
    /// Number of observations.
    pub count: u64,
    /// Sum of the observations in microseconds.
    pub sum_micros: u64,
}

impl HistogramSnapshot {
    /// Nothing observed yet, over `bounds`.
    pub fn empty(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            buckets: vec![0; bounds.len()],
            count: 0,
            sum_micros: 0,
        }
    }
}

/// Live counters, shared between the dispatcher and whoever reports them.
#[derive(Debug, Default)]
pub struct Metrics {
    pub(crate) delivered_ok: AtomicU64,
    pub(crate) delivered_http_error: AtomicU64,
    pub(crate) delivered_timeout: AtomicU64,
    pub(crate) delivered_transport_error: AtomicU64,
    pub(crate) hook_errors: AtomicU64,
    pub(crate) claims_won: AtomicU64,
    pub(crate) claims_lost: AtomicU64,
    pub(crate) claims_unused: AtomicU64,
    pub(crate) breaker_skips: AtomicU64,
    pub(crate) lock_busy: AtomicU64,
    pub(crate) poll_errors: AtomicU64,
    pub(crate) polls: AtomicU64,
    pub(crate) wake_probes: AtomicU64,
    pub(crate) wakeups: AtomicU64,
    pub(crate) store_errors: AtomicU64,
    pub(crate) store_denied: AtomicU64,
    pub(crate) delivery_refused: AtomicU64,
    pub(crate) writeback_retries: AtomicU64,
    pub(crate) writeback_failures: AtomicU64,
    pub(crate) writeback_stale: AtomicU64,
    pub(crate) lock_lost: AtomicU64,
    pub(crate) local_failures: AtomicU64,
    /// Of `local_failures`, the egress proxy's, by [`ProxyFailure::ALL`]'s
    /// order.
    proxy_failures: [AtomicU64; ProxyFailure::ALL.len()],
    pub(crate) in_flight: AtomicU64,
    pub(crate) breaker_open_hooks: AtomicU64,
    pub(crate) retry_after_pauses: AtomicU64,
    pub(crate) paused_hooks: AtomicU64,
    pub(crate) objects_found: AtomicU64,
    pub(crate) objects_gone: AtomicU64,
    pub(crate) objects_unseen: AtomicU64,
    latency: Histogram<CallLatency>,
    queue_time: Histogram<QueueTime>,
}

/// A point-in-time copy of [`Metrics`].
#[derive(Debug, Clone, PartialEq)]
pub struct MetricsSnapshot {
    /// Attempts answered 2xx.
    pub delivered_ok: u64,
    /// Attempts answered with another status.
    pub delivered_http_error: u64,
    /// Attempts that timed out.
    pub delivered_timeout: u64,
    /// Attempts that failed below HTTP.
    pub delivered_transport_error: u64,
    /// Rows failed for hook configuration (no attempt).
    pub hook_errors: u64,
    /// Claims won.
    pub claims_won: u64,
    /// Claims lost to another deliverer (nothing was sent).
    pub claims_lost: u64,
    /// Rows claimed along with an earlier row but not sent (the run
    /// stopped, or their turn came too late); retried after their lease.
    pub claims_unused: u64,
    /// Hook runs skipped because the breaker was open.
    pub breaker_skips: u64,
    /// Hook runs skipped because another deliverer held the hook's lock.
    pub lock_busy: u64,
    /// Candidate queries that failed.
    pub poll_errors: u64,
    /// Candidate queries run.
    pub polls: u64,
    /// Wake-up probes read between polls (the table's highest id).
    pub wake_probes: u64,
    /// Polls brought forward by a wake-up: a probe that found the highest
    /// id changed, or a wake hint.
    pub wakeups: u64,
    /// Other store operations that failed.
    pub store_errors: u64,
    /// Store operations (of `store_errors`) the database refused because
    /// the account lacks a privilege.
    pub store_denied: u64,
    /// Delivery's operations (the poll, the hook's lookup and lock, the
    /// claim, the write-back, …) the database refuses now, each until it
    /// succeeds again: above 0, delivery cannot go on
    /// ([`crate::Dispatcher::refusal`]).
    pub delivery_refused: u64,
    /// Write-backs that needed another try.
    pub writeback_retries: u64,
    /// Write-backs given up on (the row will be re-sent after its lease).
    pub writeback_failures: u64,
    /// Results of a claim dropped unwritten because the row had moved on
    /// (another deliverer claimed it after this claim's lease): never
    /// stored over the newer claim's.
    pub writeback_stale: u64,
    /// Hook runs stopped because the hook lock's database session was
    /// lost (the claimed row was not sent; retried after its lease).
    pub lock_lost: u64,
    /// Calls this side could not make (out of file descriptors or memory,
    /// or the egress proxy failed them): nothing written, the row retried
    /// after its lease.
    pub local_failures: u64,
    /// Of `local_failures`, the egress proxy's, by how it failed, in
    /// [`ProxyFailure::ALL`]'s order.
    pub proxy_failures: Vec<(ProxyFailure, u64)>,
    /// Deliveries in flight now.
    pub in_flight: u64,
    /// Hooks whose breaker this instance last saw open.
    pub breaker_open_hooks: u64,
    /// Hook pauses started by a 429 or 503 with `Retry-After`.
    pub retry_after_pauses: u64,
    /// Hooks paused by `Retry-After` now (as of the dispatcher's last look:
    /// every poll, pause and call).
    pub paused_hooks: u64,
    /// Object checks that found the object (its transactions as loaded).
    pub objects_found: u64,
    /// Object checks that found the object gone (hook error `object`).
    pub objects_gone: u64,
    /// Object checks that could not see the object's tables (the stored
    /// transactions were sent in the order their shape implies).
    pub objects_unseen: u64,
    /// Each call's time from its start to the receiver's final answer,
    /// over [`LATENCY_BUCKETS`].
    pub latency: HistogramSnapshot,
    /// Each row's time from its creation to its first attempt, over
    /// [`QUEUE_TIME_BUCKETS`].
    pub queue_time: HistogramSnapshot,
}

impl Default for MetricsSnapshot {
    fn default() -> Self {
        Metrics::default().snapshot()
    }
}

impl MetricsSnapshot {
    /// All delivery attempts.
    pub fn attempts(&self) -> u64 {
        self.delivered_ok
            + self.delivered_http_error
            + self.delivered_timeout
            + self.delivered_transport_error
    }
}

pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl Metrics {
    pub(crate) fn observe_latency(&self, latency: Duration) {
        self.latency.observe(latency);
    }

    pub(crate) fn count_proxy_failure(&self, failure: ProxyFailure) {
        if let Some(at) = ProxyFailure::ALL.iter().position(|f| *f == failure) {
            bump(&self.proxy_failures[at]);
        }
    }

    pub(crate) fn observe_queue_time(&self, waited: Duration) {
        self.queue_time.observe(waited);
    }

    /// Copies every counter.
    pub fn snapshot(&self) -> MetricsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        MetricsSnapshot {
            delivered_ok: get(&self.delivered_ok),
            delivered_http_error: get(&self.delivered_http_error),
            delivered_timeout: get(&self.delivered_timeout),
            delivered_transport_error: get(&self.delivered_transport_error),
            hook_errors: get(&self.hook_errors),
            claims_won: get(&self.claims_won),
            claims_lost: get(&self.claims_lost),
            claims_unused: get(&self.claims_unused),
            breaker_skips: get(&self.breaker_skips),
            lock_busy: get(&self.lock_busy),
            poll_errors: get(&self.poll_errors),
            polls: get(&self.polls),
            wake_probes: get(&self.wake_probes),
            wakeups: get(&self.wakeups),
            store_errors: get(&self.store_errors),
            store_denied: get(&self.store_denied),
            delivery_refused: get(&self.delivery_refused),
            writeback_retries: get(&self.writeback_retries),
            writeback_failures: get(&self.writeback_failures),
            writeback_stale: get(&self.writeback_stale),
            lock_lost: get(&self.lock_lost),
            local_failures: get(&self.local_failures),
            proxy_failures: ProxyFailure::ALL
                .iter()
                .zip(&self.proxy_failures)
                .map(|(failure, count)| (*failure, get(count)))
                .collect(),
            in_flight: get(&self.in_flight),
            breaker_open_hooks: get(&self.breaker_open_hooks),
            retry_after_pauses: get(&self.retry_after_pauses),
            paused_hooks: get(&self.paused_hooks),
            objects_found: get(&self.objects_found),
            objects_gone: get(&self.objects_gone),
            objects_unseen: get(&self.objects_unseen),
            latency: self.latency.snapshot(),
            queue_time: self.queue_time.snapshot(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_histogram_is_cumulative() {
        let metrics = Metrics::default();
        metrics.observe_latency(Duration::from_millis(7));
        metrics.observe_latency(Duration::from_secs(60));
        let snap = metrics.snapshot();
        assert_eq!(snap.latency.count, 2);
        assert_eq!(snap.latency.buckets[0], 0);
        assert_eq!(snap.latency.buckets[1], 1);
        assert_eq!(snap.latency.buckets[11], 1);
        assert_eq!(snap.latency.sum_micros, 60_007_000);
        assert_eq!(
            snap.queue_time,
            HistogramSnapshot::empty(QUEUE_TIME_BUCKETS)
        );
    }

    #[test]
    fn queue_time_has_its_own_buckets() {
        let metrics = Metrics::default();
        metrics.observe_queue_time(Duration::from_secs(1));
        metrics.observe_queue_time(Duration::from_secs(90));
        let snap = metrics.snapshot();
        assert_eq!(snap.queue_time.count, 2);
        assert_eq!(
            snap.queue_time.buckets[0], 1,
            "1 s is within the first bound"
        );
        assert_eq!(snap.queue_time.buckets[5], 1, "90 s is past 60 s");
        assert_eq!(snap.queue_time.buckets[6], 2, "and within 120 s");
        assert_eq!(snap.latency.count, 0);
    }
}
