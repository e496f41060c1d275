//! `MemoryAttemptLog`: the attempt history's port held in memory, in the
//! order attempts were handed over (for tests and the demo).

use std::sync::{Arc, Mutex};

use crate::history::{Attempt, AttemptLog};

/// Every attempt handed to it, kept in order.
#[derive(Debug, Clone, Default)]
pub struct MemoryAttemptLog {
    attempts: Arc<Mutex<Vec<Attempt>>>,
}

impl MemoryAttemptLog {
    /// Every attempt so far, oldest first.
    pub fn attempts(&self) -> Vec<Attempt> {
        self.attempts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl AttemptLog for MemoryAttemptLog {
    fn record(&self, attempt: Attempt) {
        self.attempts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(attempt);
    }
}
