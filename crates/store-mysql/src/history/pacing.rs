//! When the history's writer writes: it yields to delivery.
//!
//! Attempts are queued as they are recorded, and each group commit of
//! write-backs wakes the writer (`crate::batch`), so a wake says that
//! delivery is at work. The writer gathers while those wakes keep coming
//! and writes once delivery has been quiet for [`Pacing::quiet`] (no
//! batch committed since), so during a burst the server's time goes to
//! the claims and write-backs, and the attempts follow in large
//! statements right after it. The gathering is bounded two ways, so a
//! delivery that never pauses still has its attempts written:
//!
//! * by age: no attempt waits more than about [`Pacing::max_wait`];
//! * by size: a queue holding [`Pacing::max_rows`] attempts or
//!   [`Pacing::max_bytes`] bytes — half of what it may hold before it
//!   drops ([`super::writer::PENDING_MAX`],
//!   [`super::writer::PENDING_BYTES_MAX`]) — is written at once, leaving
//!   the other half for what arrives while it is written.
//!
//! A stopping daemon (`HistoryQueue::settled`) writes at once. The
//! decision is [`Pacing::next`], pure: the writer's loop gives it what it
//! sees, and waits or writes as told.

use std::time::Duration;

/// The writer's bounds (see the module header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pacing {
    /// How long without a group commit counts as delivery pausing.
    pub(crate) quiet: Duration,
    /// How long the first attempt of a round waits at most.
    pub(crate) max_wait: Duration,
    /// Attempts queued that are written without waiting further.
    pub(crate) max_rows: usize,
    /// Bytes queued that are written without waiting further.
    pub(crate) max_bytes: usize,
}

/// What the writer sees when it decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Gathered {
    /// Attempts queued.
    pub(crate) rows: usize,
    /// About how many bytes they hold.
    pub(crate) bytes: usize,
    /// Since this round's first wake.
    pub(crate) waited: Duration,
    /// Whether the queue is to be written now (a stopping daemon).
    pub(crate) flush: bool,
}

/// What the writer does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Write what is queued.
    Write,
    /// Wait for the next wake at most this long; write if none comes
    /// (delivery paused, or the age bound was reached).
    Gather(Duration),
}

impl Pacing {
    /// What the writer does, having gathered `seen`.
    pub(crate) fn next(&self, seen: Gathered) -> Next {
        let full = seen.rows >= self.max_rows || seen.bytes >= self.max_bytes;
        if seen.flush || full || seen.waited >= self.max_wait {
            return Next::Write;
        }
        Next::Gather(self.quiet.min(self.max_wait - seen.waited))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PACING: Pacing = Pacing {
        quiet: Duration::from_millis(50),
        max_wait: Duration::from_secs(2),
        max_rows: 100,
        max_bytes: 1000,
    };

    fn seen(rows: usize, bytes: usize, waited_ms: u64) -> Gathered {
        Gathered {
            rows,
            bytes,
            waited: Duration::from_millis(waited_ms),
            flush: false,
        }
    }

    #[test]
    fn a_small_queue_waits_for_delivery_to_pause() {
        assert_eq!(
            PACING.next(seen(1, 10, 0)),
            Next::Gather(Duration::from_millis(50))
        );
        assert_eq!(
            PACING.next(seen(99, 999, 1000)),
            Next::Gather(Duration::from_millis(50))
        );
    }

    #[test]
    fn no_attempt_waits_past_the_age_bound() {
        assert_eq!(
            PACING.next(seen(1, 10, 1980)),
            Next::Gather(Duration::from_millis(20))
        );
        assert_eq!(PACING.next(seen(1, 10, 2000)), Next::Write);
        assert_eq!(PACING.next(seen(1, 10, 5000)), Next::Write);
    }

    #[test]
    fn half_a_queue_by_count_or_bytes_is_written_at_once() {
        assert_eq!(PACING.next(seen(100, 10, 0)), Next::Write);
        assert_eq!(PACING.next(seen(1, 1000, 0)), Next::Write);
    }

    #[test]
    fn a_flush_writes_at_once() {
        let flush = Gathered {
            flush: true,
            ..seen(1, 10, 0)
        };
        assert_eq!(PACING.next(flush), Next::Write);
    }
}
