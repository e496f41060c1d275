//! Which of delivery's store operations the database refuses now — a
//! privilege the account lacks, or its login — each with the store's
//! words for its latest refusal, until that operation succeeds again.
//! While any is refused delivery cannot go on: [`crate::Dispatcher::refusal`]
//! says why (the daemon's `/readyz` answers 503 with it) and the
//! `delivery_refused` gauge counts them. State only; `context` keeps the
//! gauge and writes the lines.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// The operations refused now, in the order they were first refused.
#[derive(Default)]
pub(super) struct Refusals {
    refused: Mutex<Vec<(&'static str, String)>>,
    /// How many are refused, read without the lock on every success.
    count: AtomicUsize,
}

impl Refusals {
    fn refused(&self) -> std::sync::MutexGuard<'_, Vec<(&'static str, String)>> {
        self.refused.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records that the database refused `operation`, saying `reason`;
    /// how many operations are refused now.
    pub(super) fn refuse(&self, operation: &'static str, reason: String) -> usize {
        let mut refused = self.refused();
        match refused.iter_mut().find(|(op, _)| *op == operation) {
            Some((_, latest)) => *latest = reason,
            None => refused.push((operation, reason)),
        }
        self.count.store(refused.len(), Ordering::Release);
        refused.len()
    }

    /// Records that `operation` succeeded: when it was refused, how many
    /// operations still are.
    pub(super) fn accept(&self, operation: &'static str) -> Option<usize> {
        if self.count.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut refused = self.refused();
        let at = refused.iter().position(|(op, _)| *op == operation)?;
        refused.remove(at);
        self.count.store(refused.len(), Ordering::Release);
        Some(refused.len())
    }

    /// The refusal first seen of those still in force, in words.
    pub(super) fn first(&self) -> Option<String> {
        if self.count.load(Ordering::Acquire) == 0 {
            return None;
        }
        let refused = self.refused();
        let (operation, reason) = refused.first()?;
        Some(format!(
            "the database refuses delivery's {operation}: {reason}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_lasts_until_its_own_operation_succeeds() {
        let refusals = Refusals::default();
        assert_eq!(refusals.first(), None);
        assert_eq!(refusals.accept("claim"), None);
        assert_eq!(refusals.refuse("claim", "no UPDATE".into()), 1);
        assert_eq!(refusals.refuse("write-back", "no UPDATE".into()), 2);
        assert_eq!(refusals.refuse("claim", "still no UPDATE".into()), 2);
        assert_eq!(
            refusals.first().as_deref(),
            Some("the database refuses delivery's claim: still no UPDATE")
        );
        assert_eq!(refusals.accept("poll"), None);
        assert_eq!(refusals.accept("claim"), Some(1));
        assert_eq!(
            refusals.first().as_deref(),
            Some("the database refuses delivery's write-back: no UPDATE")
        );
        assert_eq!(refusals.accept("write-back"), Some(0));
        assert_eq!(refusals.first(), None);
    }
}
