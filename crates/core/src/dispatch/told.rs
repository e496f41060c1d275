//! What the dispatcher has already said, so it says it once or at a pace:
//! each reason objects could not be looked up (once), refusals for a
//! missing privilege (one warning a minute, with how many were held back)
//! and the silent-mode hold (an event on each change). State and the
//! decisions only; `context` writes the lines.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::objects::Unseen;

/// At most one `store_denied` warning this often, however many operations
/// the database refuses meanwhile.
const DENIED_WARN_EVERY: Duration = Duration::from_secs(60);

/// When the last `store_denied` warning went out (monotonic), and the
/// refusals counted then.
#[derive(Debug, Clone, Copy)]
struct DeniedSaid {
    at: Duration,
    count: u64,
}

/// What has been said.
#[derive(Default)]
pub(super) struct Told {
    unseen: Mutex<HashSet<Unseen>>,
    denied: Mutex<Option<DeniedSaid>>,
    hold: AtomicBool,
}

impl Told {
    /// Whether `why` is said for the first time.
    pub(super) fn first_unseen(&self, why: &Unseen) -> bool {
        let mut said = self.unseen.lock().unwrap_or_else(|e| e.into_inner());
        !said.contains(why) && said.insert(why.clone())
    }

    /// Whether the warning for the `count`th refusal is due at `now` (none
    /// in the last [`DENIED_WARN_EVERY`]) and, if so, how many refusals
    /// since the last warning went without one.
    pub(super) fn denied_warning_due(&self, count: u64, now: Duration) -> Option<u64> {
        let mut last = self.denied.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_some_and(|last| now.saturating_sub(last.at) < DENIED_WARN_EVERY) {
            return None;
        }
        let warned = last.map_or(0, |last| last.count);
        *last = Some(DeniedSaid { at: now, count });
        Some(count.saturating_sub(warned + 1))
    }

    /// Records the hold's verdict; whether it changed since last said.
    pub(super) fn hold_changed(&self, silent: bool) -> bool {
        self.hold.swap(silent, Ordering::Relaxed) != silent
    }
}
