//! [`Pace`]: "at most once every so often" for log lines that a loop
//! would otherwise repeat on every turn.

use std::time::Duration;

use tokio::time::Instant;

/// Lets something happen at most once every `every` (monotonic time).
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    every: Duration,
    last: Option<Instant>,
}

impl Pace {
    /// Due at once, then at most once every `every`.
    pub const fn every(every: Duration) -> Self {
        Self { every, last: None }
    }

    /// Whether it is due now; when it is, the next is `every` away.
    pub fn due(&mut self) -> bool {
        let now = Instant::now();
        if self.last.is_some_and(|at| now - at < self.every) {
            return false;
        }
        self.last = Some(now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn due_at_once_then_once_per_period() {
        let mut pace = Pace::every(Duration::from_secs(60));
        assert!(pace.due());
        assert!(!pace.due());
        tokio::time::advance(Duration::from_secs(59)).await;
        assert!(!pace.due());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(pace.due());
        assert!(!pace.due());
    }
}
