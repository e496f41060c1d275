//! The hook circuit breaker's arithmetic: from when failures count, whether
//! a count keeps the hook from being called, which failures count at a
//! moment and when an open breaker closes by itself.
//!
//! Pure: every answer takes `now`; nothing reads a clock or a database.
//! The dispatcher counts failures through the store; `webhook-admin`
//! explains the same rule from the failures' epochs.

use crate::model::UnixTime;

/// The hook circuit breaker: at `threshold` or more rows of one hook that
/// failed within the last `window_secs`, the hook is not called at all. It
/// closes by itself as old failures slide out of the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Breaker {
    /// Window length in seconds.
    pub window_secs: u64,
    /// Failed rows that open it.
    pub threshold: u64,
}

impl Breaker {
    /// Failures are counted from `lastRequestEpoch >= since(now)`.
    pub fn since(&self, now: UnixTime) -> UnixTime {
        now.saturating_sub(self.window_secs)
    }

    /// Whether `failed_rows` recent failures keep the hook from being called.
    pub fn is_open(&self, failed_rows: u64) -> bool {
        failed_rows >= self.threshold
    }

    /// The failures counted at `now` (epoch `>= since(now)`) among
    /// `epochs`, oldest first.
    pub fn counted_failures<'a>(&self, now: UnixTime, epochs: &'a [UnixTime]) -> &'a [UnixTime] {
        let since = self.since(now);
        let start = epochs.partition_point(|e| *e < since);
        &epochs[start..]
    }

    /// When an open breaker closes if no new failures come in: once the
    /// `(failures - threshold + 1)`-th oldest counted failure is out of the
    /// window (`now - window > epoch`), fewer than `threshold` remain. `None`
    /// while the breaker is closed. `epochs` are oldest first.
    pub fn closes_at(&self, now: UnixTime, epochs: &[UnixTime]) -> Option<UnixTime> {
        let counted = self.counted_failures(now, epochs);
        if !self.is_open(counted.len() as u64) {
            return None;
        }
        let threshold = usize::try_from(self.threshold).unwrap_or(usize::MAX);
        counted
            .get(counted.len().saturating_sub(threshold))
            .map(|epoch| epoch.saturating_add(self.window_secs + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: UnixTime = 1_700_000_000;

    /// The defaults: 10 rows in 300 s.
    const BREAKER: Breaker = Breaker {
        window_secs: 300,
        threshold: 10,
    };

    #[test]
    fn it_opens_at_the_threshold() {
        assert!(!BREAKER.is_open(9));
        assert!(BREAKER.is_open(10));
        assert_eq!(BREAKER.since(1_000), 700);
        assert_eq!(BREAKER.since(5), 0);
    }

    #[test]
    fn only_failures_inside_the_window_count() {
        let epochs = [NOW - 301, NOW - 300, NOW - 1];
        assert_eq!(
            BREAKER.counted_failures(NOW, &epochs),
            &[NOW - 300, NOW - 1]
        );
        assert!(BREAKER.counted_failures(NOW + 300, &epochs).is_empty());
        assert!(BREAKER.counted_failures(NOW, &[]).is_empty());
    }

    #[test]
    fn an_open_breaker_closes_when_enough_failures_slide_out() {
        // 12 failures (one too old to count), threshold 10: the breaker
        // closes once the 2 oldest counted ones leave the 300 s window.
        let mut epochs: Vec<UnixTime> = vec![NOW - 301];
        epochs.extend((0..11).map(|i| NOW - 290 + i * 10));
        assert_eq!(BREAKER.counted_failures(NOW, &epochs).len(), 11);
        let second_oldest = NOW - 280;
        assert_eq!(BREAKER.closes_at(NOW, &epochs), Some(second_oldest + 301));
        // At that second it counts 9 rows: closed.
        let closed_at = second_oldest + 301;
        assert_eq!(BREAKER.counted_failures(closed_at, &epochs).len(), 9);
        assert_eq!(BREAKER.closes_at(closed_at, &epochs), None);
        // One second earlier it was still open.
        assert!(BREAKER.closes_at(closed_at - 1, &epochs).is_some());
    }

    #[test]
    fn a_closed_breaker_has_no_closing_time() {
        let epochs: Vec<UnixTime> = (0..9).map(|i| NOW - 100 + i).collect();
        assert_eq!(BREAKER.closes_at(NOW, &epochs), None);
    }
}
