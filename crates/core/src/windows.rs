//! Settings of the delivery loop (their `GORGE_WEBHOOK_*` variables,
//! declared once here) and the three time windows derived from them: the
//! claim lease, the retry backoff and the hook circuit breaker.
//!
//! Everything here takes `now` as an argument; nothing reads a clock.

use std::fmt;
use std::time::Duration;

use crate::breaker::Breaker;
use crate::model::{LastResult, RequestRow, UnixTime};
use crate::setting::{Bounds, Lookup, Setting, SettingError, SettingInfo, Unit};

/// `GORGE_WEBHOOK_POLL_INTERVAL_MS`
pub const POLL_INTERVAL: Setting<Duration> = Setting::number(
    "GORGE_WEBHOOK_POLL_INTERVAL_MS",
    "1000",
    "idle poll spacing (a full batch is followed at once)",
    Bounds::between(10, 3_600_000, Unit::Millis),
);
/// `GORGE_WEBHOOK_WAKE_PROBE_MS`: between polls, how often the table's
/// highest id is read (one primary-key entry) to notice a new row without
/// waiting for the next poll; 0 turns the probe off. 45 ms is 22 cheap
/// statements a second, which with the idle poll's keeps an idle instance
/// under 25 a second, and a new row waits 23 ms for it on average.
pub const WAKE_PROBE: Setting<Duration> = Setting::number(
    "GORGE_WEBHOOK_WAKE_PROBE_MS",
    "45",
    "between polls, how often the highest id is read to notice new rows; 0 = off",
    Bounds::between(0, 3_600_000, Unit::Millis),
);
/// `GORGE_WEBHOOK_DELIVERY_TIMEOUT`
pub const DELIVERY_TIMEOUT: Setting<Duration> = Setting::number(
    "GORGE_WEBHOOK_DELIVERY_TIMEOUT",
    "15",
    "seconds for one whole HTTP exchange",
    Bounds::between(1, 600, Unit::Secs),
);
/// `GORGE_WEBHOOK_MAX_CONCURRENT`: HTTP calls in flight at once, across
/// hooks (each hook still gets one at a time). 256 by default: a call in
/// flight costs no database session (the hook locks share a few lock
/// sessions), so what bounds a backlog over many slow receivers is this
/// number over their latency — 256 / 100 ms is 2,560 calls/s. The Go
/// service's 8 was rows fetched per tick, not calls in flight.
pub const MAX_CONCURRENT: Setting<usize> = Setting::number(
    "GORGE_WEBHOOK_MAX_CONCURRENT",
    "256",
    "HTTP calls in flight at once, across hooks (one per hook)",
    Bounds::between(1, 1024, Unit::Count),
);
/// `GORGE_WEBHOOK_ERROR_BACKOFF_SEC`
pub const BREAKER_WINDOW: Setting<u64> = Setting::number(
    "GORGE_WEBHOOK_ERROR_BACKOFF_SEC",
    "300",
    "breaker window in seconds",
    Bounds::between(1, 86_400, Unit::Secs),
);
/// `GORGE_WEBHOOK_ERROR_THRESHOLD`
pub const BREAKER_THRESHOLD: Setting<u64> = Setting::number(
    "GORGE_WEBHOOK_ERROR_THRESHOLD",
    "10",
    "failed rows in the window that open a hook's breaker",
    Bounds::between(1, 1_000_000, Unit::Count),
);
/// `GORGE_WEBHOOK_RETRY_BACKOFF_SEC`
pub const RETRY_BACKOFF: Setting<u64> = Setting::number(
    "GORGE_WEBHOOK_RETRY_BACKOFF_SEC",
    "60",
    "seconds after a failed attempt before a retry",
    Bounds::between(0, 86_400, Unit::Secs),
);
/// `GORGE_WEBHOOK_CLAIM_LEASE_SEC`
pub const CLAIM_LEASE: Setting<u64> = Setting::number(
    "GORGE_WEBHOOK_CLAIM_LEASE_SEC",
    "30",
    "claim lease in seconds (raised to delivery timeout + 2)",
    Bounds::between(1, 86_400, Unit::Secs),
);
/// `GORGE_WEBHOOK_RETRY_AFTER_MAX_SEC`: the longest pause a receiver's
/// `Retry-After` (on a 429 or 503) may put on its hook; 0 ignores the
/// header.
pub const RETRY_AFTER_MAX: Setting<u64> = Setting::number(
    "GORGE_WEBHOOK_RETRY_AFTER_MAX_SEC",
    "3600",
    "longest pause a 429/503 Retry-After puts on its hook (from 1 s); 0 = ignore",
    Bounds::between(0, 86_400, Unit::Secs),
);
/// `GORGE_WEBHOOK_BATCH_SIZE`
pub const BATCH_SIZE: Setting<usize> = Setting::number(
    "GORGE_WEBHOOK_BATCH_SIZE",
    "0",
    "candidate rows kept ready; 0 = 8 x MAX_CONCURRENT (32..1024)",
    Bounds::between(0, 10_000, Unit::Count),
);

/// The delivery loop's variables, in `--help` order.
pub const VARIABLES: &[SettingInfo] = &[
    POLL_INTERVAL.info(),
    WAKE_PROBE.info(),
    DELIVERY_TIMEOUT.info(),
    MAX_CONCURRENT.info(),
    BREAKER_WINDOW.info(),
    BREAKER_THRESHOLD.info(),
    RETRY_BACKOFF.info(),
    CLAIM_LEASE.info(),
    RETRY_AFTER_MAX.info(),
    BATCH_SIZE.info(),
];

/// The raw settings, as configured (protocol §9 defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Idle poll spacing.
    pub poll_interval: Duration,
    /// Spacing of the wake-up probe between polls; zero = off.
    pub wake_probe: Duration,
    /// Deadline for one whole HTTP exchange.
    pub delivery_timeout: Duration,
    /// Deliveries in flight at once, across all hooks.
    pub max_concurrent: usize,
    /// Breaker window in seconds.
    pub breaker_window_secs: u64,
    /// Failed rows within the window that open the breaker.
    pub breaker_threshold: u64,
    /// Seconds after a failed attempt before the row is tried again.
    pub retry_backoff_secs: u64,
    /// Seconds a claim protects a row from other claimers, as configured.
    pub claim_lease_secs: u64,
    /// Longest hook pause a `Retry-After` may ask for; 0 = ignore it.
    pub retry_after_max_secs: u64,
    /// Candidate rows kept ready per instance; 0 = derive from concurrency.
    pub batch_size: usize,
}

impl Default for Settings {
    /// Every variable unset.
    fn default() -> Self {
        Self::from_lookup(&|_| None)
            .unwrap_or_else(|err| panic!("a declared default does not parse: {err}"))
    }
}

impl Settings {
    /// Reads every setting by its variable through `get` (the environment,
    /// for the binaries), with protocol §9's defaults. A value that is not a
    /// whole number, or outside its declared bounds, is an error naming
    /// the variable.
    pub fn from_lookup(get: Lookup<'_>) -> Result<Self, SettingError> {
        Ok(Self {
            poll_interval: POLL_INTERVAL.read(get)?,
            wake_probe: WAKE_PROBE.read(get)?,
            delivery_timeout: DELIVERY_TIMEOUT.read(get)?,
            max_concurrent: MAX_CONCURRENT.read(get)?,
            breaker_window_secs: BREAKER_WINDOW.read(get)?,
            breaker_threshold: BREAKER_THRESHOLD.read(get)?,
            retry_backoff_secs: RETRY_BACKOFF.read(get)?,
            claim_lease_secs: CLAIM_LEASE.read(get)?,
            retry_after_max_secs: RETRY_AFTER_MAX.read(get)?,
            batch_size: BATCH_SIZE.read(get)?,
        })
    }

    /// Holds each value to its variable's declared bounds: those read from
    /// text already are; these may have been built in code (the demo,
    /// tests).
    fn check(&self) -> Result<(), SettingError> {
        POLL_INTERVAL.check(&self.poll_interval)?;
        WAKE_PROBE.check(&self.wake_probe)?;
        DELIVERY_TIMEOUT.check(&self.delivery_timeout)?;
        MAX_CONCURRENT.check(&self.max_concurrent)?;
        BREAKER_WINDOW.check(&self.breaker_window_secs)?;
        BREAKER_THRESHOLD.check(&self.breaker_threshold)?;
        RETRY_BACKOFF.check(&self.retry_backoff_secs)?;
        CLAIM_LEASE.check(&self.claim_lease_secs)?;
        RETRY_AFTER_MAX.check(&self.retry_after_max_secs)?;
        BATCH_SIZE.check(&self.batch_size)
    }
}

/// Warnings about settings that do not do what they seem to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WindowWarning {
    /// The lease was raised so a claim outlives the delivery it protects.
    LeaseRaised {
        /// As configured.
        configured: u64,
        /// As used.
        effective: u64,
    },
    /// A retry backoff below the lease has no effect: a failed row's
    /// write-back refreshes `dateModified`, so the lease governs.
    BackoffBelowLease {
        /// As configured.
        backoff: u64,
        /// The effective lease that wins.
        lease: u64,
    },
}

impl fmt::Display for WindowWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::LeaseRaised {
                configured,
                effective,
            } => write!(
                f,
                "{} = {configured} s is shorter than a delivery can take; using {effective} s \
                 ({} + 2 s) so a claim outlives its delivery",
                CLAIM_LEASE.name, DELIVERY_TIMEOUT.name
            ),
            Self::BackoffBelowLease { backoff, lease } => write!(
                f,
                "{} = {backoff} s has no effect below the claim lease: failed rows are retried \
                 every {lease} s (the effective lease), because a failed attempt's write-back \
                 refreshes dateModified as well as lastRequestEpoch",
                RETRY_BACKOFF.name
            ),
        }
    }
}

/// Both candidate cutoffs, from one reading of the clock (protocol §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cutoffs {
    /// The clock reading both cutoffs come from.
    pub now: UnixTime,
    /// Claimed rows with `dateModified <= lease_cutoff` may be taken over.
    pub lease_cutoff: UnixTime,
    /// Failed rows with `lastRequestEpoch <= retry_cutoff` may be retried.
    pub retry_cutoff: UnixTime,
}

impl Cutoffs {
    /// The lease half of the candidate predicate: `dateModified =
    /// dateCreated OR dateModified <= lease_cutoff` (fresh, or no claim
    /// protects it any more).
    pub fn past_lease(&self, row: &RequestRow) -> bool {
        row.is_fresh() || row.date_modified <= self.lease_cutoff
    }

    /// The retry half: `lastRequestResult <> 'fail' OR lastRequestEpoch <=
    /// retry_cutoff` (no failed attempt, or its backoff is over).
    pub fn past_backoff(&self, row: &RequestRow) -> bool {
        row.last_request_result != LastResult::Fail || row.last_request_epoch <= self.retry_cutoff
    }

    /// When a row both halves let through became due: the later of when
    /// its lease half turned true (created, for a fresh row; its claim's
    /// `dateModified` plus the lease, otherwise) and when its retry half
    /// did (its failed attempt's `lastRequestEpoch` plus the backoff).
    /// What it has waited since is the delivery's lag.
    pub fn due_since(&self, row: &RequestRow) -> UnixTime {
        let lease = self.now.saturating_sub(self.lease_cutoff);
        let backoff = self.now.saturating_sub(self.retry_cutoff);
        let after_claim = match row.is_fresh() {
            true => row.date_created,
            false => row.date_modified.saturating_add(lease),
        };
        let after_failure = match row.last_request_result {
            LastResult::Fail => row.last_request_epoch.saturating_add(backoff),
            _ => 0,
        };
        after_claim.max(after_failure)
    }
}

/// Validated settings with the effective windows worked out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Windows {
    settings: Settings,
    lease_secs: u64,
}

/// Margin added to the delivery timeout for the lease: one second because
/// `dateModified` is truncated to whole seconds, one for the write-back.
const LEASE_MARGIN_SECS: u64 = 2;

/// The shortest hook pause a `Retry-After` sets: `Retry-After: 0` from a
/// receiver that answered 429 still means "not at once".
pub const RETRY_AFTER_MIN: Duration = Duration::from_secs(1);

impl Windows {
    /// Works out the windows from `settings`, each held to its
    /// variable's declared bounds; the error names the variable.
    pub fn try_new(settings: Settings) -> Result<Self, SettingError> {
        settings.check()?;
        let lease_secs = settings
            .claim_lease_secs
            .max(settings.delivery_timeout.as_secs() + LEASE_MARGIN_SECS);
        Ok(Self {
            settings,
            lease_secs,
        })
    }

    /// The settings as configured.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Effective claim lease in seconds: the configured lease, raised to
    /// cover a whole delivery.
    pub fn lease_secs(&self) -> u64 {
        self.lease_secs
    }

    /// How far apart attempts on one failed row really are:
    /// `max(effective lease, retry backoff)`.
    pub fn effective_retry_spacing_secs(&self) -> u64 {
        self.lease_secs.max(self.settings.retry_backoff_secs)
    }

    /// Idle poll spacing.
    pub fn poll_interval(&self) -> Duration {
        self.settings.poll_interval
    }

    /// How soon a poll that found new rows (fewer than a full batch) is
    /// followed by the next: a tenth of the poll interval, so a steady
    /// stream of rows does not wait a whole interval each.
    pub fn busy_poll_interval(&self) -> Duration {
        self.settings.poll_interval / 10
    }

    /// How often the wake-up probe runs between polls, when it is on and
    /// more often than the polls themselves.
    pub fn wake_probe(&self) -> Option<Duration> {
        let probe = self.settings.wake_probe;
        (!probe.is_zero() && probe < self.settings.poll_interval).then_some(probe)
    }

    /// How close together polls a wake-up (the probe, or a hint from a
    /// source that follows the table) brings forward may come while rows
    /// keep arriving: the probe's spacing, its default when the probe is
    /// off, and never more than the busy poll spacing.
    pub fn wake_spacing(&self) -> Duration {
        self.wake_probe()
            .unwrap_or_else(|| WAKE_PROBE.default_value())
            .min(self.busy_poll_interval())
    }

    /// Deadline for one whole HTTP exchange.
    pub fn delivery_timeout(&self) -> Duration {
        self.settings.delivery_timeout
    }

    /// How long a row claimed ahead of its turn in a hook run may wait for
    /// its POST: half of what the lease leaves beyond one delivery timeout
    /// and the lease's own margin. A row sent within it ends its POST with
    /// that margin and at least as much again to spare; zero (a lease of
    /// just the timeout plus the margin) turns claiming ahead off.
    pub fn claim_ahead_budget(&self) -> Duration {
        Duration::from_secs(self.lease_secs)
            .saturating_sub(self.settings.delivery_timeout)
            .saturating_sub(Duration::from_secs(LEASE_MARGIN_SECS))
            / 2
    }

    /// How long a hook is paused after a 429 or 503 whose `Retry-After`
    /// asked for `asked`: clamped to 1 s up to the configured maximum, or
    /// `None` when that maximum is 0 (the header is ignored).
    pub fn retry_after_pause(&self, asked: Duration) -> Option<Duration> {
        match self.settings.retry_after_max_secs {
            0 => None,
            max => Some(asked.clamp(RETRY_AFTER_MIN, Duration::from_secs(max))),
        }
    }

    /// Deliveries in flight at once.
    pub fn max_concurrent(&self) -> usize {
        self.settings.max_concurrent
    }

    /// Candidate rows kept ready per instance.
    pub fn batch_size(&self) -> usize {
        match self.settings.batch_size {
            0 => (self.settings.max_concurrent * 8).clamp(32, 1024),
            n => n,
        }
    }

    /// Both candidate cutoffs from one clock reading.
    pub fn cutoffs(&self, now: UnixTime) -> Cutoffs {
        Cutoffs {
            now,
            lease_cutoff: now.saturating_sub(self.lease_secs),
            retry_cutoff: now.saturating_sub(self.settings.retry_backoff_secs),
        }
    }

    /// The breaker rule for this configuration.
    pub fn breaker(&self) -> Breaker {
        Breaker {
            window_secs: self.settings.breaker_window_secs,
            threshold: self.settings.breaker_threshold,
        }
    }

    /// Settings that do not do what they seem to, for startup logs and the
    /// admin tool.
    pub fn warnings(&self) -> Vec<WindowWarning> {
        let mut warnings = Vec::new();
        if self.lease_secs > self.settings.claim_lease_secs {
            warnings.push(WindowWarning::LeaseRaised {
                configured: self.settings.claim_lease_secs,
                effective: self.lease_secs,
            });
        }
        if self.settings.retry_backoff_secs < self.lease_secs {
            warnings.push(WindowWarning::BackoffBelowLease {
                backoff: self.settings.retry_backoff_secs,
                lease: self.lease_secs,
            });
        }
        warnings
    }
}

#[cfg(test)]
mod tests;
