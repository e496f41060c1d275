//! The wake-up probe: between polls, the request table's highest id is
//! read every `GORGE_WEBHOOK_WAKE_PROBE_MS` ([`Store::newest_id`], one
//! primary-key entry), and a poll is due at once when it changed. A new
//! row then waits for the next probe, not for the next poll, while an idle
//! instance sends one cheap statement per probe and runs the candidate
//! query only at the poll interval or on a change.
//!
//! It is a hint only: the poll stays the source of truth. What the probe
//! cannot see — a lower id committed after a higher one, a row set back to
//! `queued`, a retry backoff or a lease running out — the next poll finds,
//! as it would without the probe. A probe that fails is not retried early
//! and decides nothing.
//!
//! [`Store::newest_id`]: crate::Store::newest_id

use std::time::Duration;

use tracing::debug;

use crate::metrics::bump;

use super::context::Context;
use super::LOG_TARGET;

/// When the probe is next due and what it last read.
pub(super) struct WakeProbe {
    every: Option<Duration>,
    next_at: Duration,
    newest_seen: Option<u64>,
    failing: bool,
}

impl WakeProbe {
    /// A probe at the configured spacing (none when it is off), first due
    /// one spacing after `now`.
    pub(super) fn new(cx: &Context, now: Duration) -> Self {
        let every = cx.windows.wake_probe();
        Self {
            every,
            next_at: now + every.unwrap_or_default(),
            newest_seen: None,
            failing: false,
        }
    }

    /// When the next probe is due, if the probe is on.
    pub(super) fn due_at(&self) -> Option<Duration> {
        self.every.map(|_| self.next_at)
    }

    /// A poll ran at `now`: the next probe is due one spacing later.
    pub(super) fn polled(&mut self, now: Duration) {
        if let Some(every) = self.every {
            self.next_at = now + every;
        }
    }

    /// Whether a probe is due at `now`; if so, the one after is scheduled
    /// whether or not this one is read, so a skipped probe never leaves a
    /// timer in the past.
    pub(super) fn take_due(&mut self, now: Duration) -> bool {
        match self.every {
            Some(every) if now >= self.next_at => {
                self.next_at = now + every;
                true
            }
            _ => false,
        }
    }

    /// Reads the highest id and says how it compares with the last reading.
    pub(super) async fn read(&mut self, cx: &Context) -> Reading {
        bump(&cx.metrics.wake_probes);
        match cx.store.newest_id().await {
            Ok(newest) => {
                self.failing = false;
                let reading = match self.newest_seen.replace(newest) {
                    None => Reading::First,
                    Some(seen) if seen == newest => Reading::Same,
                    Some(_) => Reading::Changed,
                };
                if reading != Reading::Same {
                    bump(&cx.metrics.wakeups);
                }
                reading
            }
            Err(err) => {
                if !self.failing {
                    debug!(target: LOG_TARGET, event = "wake_probe_failed", error = %err,
                        "new rows wait for the next poll");
                }
                self.failing = true;
                Reading::Same
            }
        }
    }
}

/// What a probe read, against the reading before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reading {
    /// The first reading: a row may have come since the last poll, so
    /// poll now.
    First,
    /// The highest id changed: a new row (or the highest one deleted).
    Changed,
    /// Unchanged, or not read.
    Same,
}
