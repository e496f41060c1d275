//! Hooks paused because their receiver asked to slow down (a 429 or 503
//! with `Retry-After`): per hook, until when. The dispatcher starts a
//! pause and asks before every call; the daemon shows the current ones.
//!
//! In memory and per dispatcher (another instance learns of a receiver's
//! wish only from its own call). Bounded: one entry per hook, and expired
//! entries are dropped whenever the map is read or written. Time comes
//! from the [`Clock`] it was given.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::clock::Clock;
use crate::model::UnixTime;

/// One hook's pause as shown to operators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookPause {
    /// The hook's PHID.
    pub hook: String,
    /// The Unix second the pause ends (rounded up).
    pub until: UnixTime,
}

#[derive(Debug, Clone, Copy)]
struct Pause {
    /// Monotonic: what the dispatcher decides by.
    ends: Duration,
    /// Wall clock: what operators read.
    until: UnixTime,
}

/// The paused hooks of one dispatcher.
#[derive(Debug)]
pub struct HookPauses {
    clock: Arc<dyn Clock>,
    by_hook: Mutex<HashMap<String, Pause>>,
}

impl HookPauses {
    /// No hook paused, times read from `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            by_hook: Mutex::new(HashMap::new()),
        }
    }

    /// Pauses `hook` for `pause` from now, replacing any earlier pause of
    /// it (the receiver's latest answer wins); returns when it ends.
    pub fn start(&self, hook: &str, pause: Duration) -> UnixTime {
        let ends = self.clock.monotonic().saturating_add(pause);
        let until = self.clock.now().saturating_add(whole_secs(pause));
        self.live().insert(hook.to_owned(), Pause { ends, until });
        until
    }

    /// When `hook`'s pause ends on the clock's monotonic reading, if it is
    /// paused now.
    pub fn ends(&self, hook: &str) -> Option<Duration> {
        self.live().get(hook).map(|pause| pause.ends)
    }

    /// When `hook`'s pause ends, if it is paused now.
    pub fn until(&self, hook: &str) -> Option<UnixTime> {
        self.live().get(hook).map(|pause| pause.until)
    }

    /// The hooks paused now, by PHID.
    pub fn current(&self) -> Vec<HookPause> {
        let mut paused: Vec<HookPause> = self
            .live()
            .iter()
            .map(|(hook, pause)| HookPause {
                hook: hook.clone(),
                until: pause.until,
            })
            .collect();
        paused.sort_by(|a, b| a.hook.cmp(&b.hook));
        paused
    }

    /// How many hooks are paused now.
    pub fn len(&self) -> usize {
        self.live().len()
    }

    /// Whether no hook is paused now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The map with expired pauses dropped.
    fn live(&self) -> MutexGuard<'_, HashMap<String, Pause>> {
        let now = self.clock.monotonic();
        let mut by_hook = self.by_hook.lock().unwrap_or_else(|e| e.into_inner());
        by_hook.retain(|_, pause| pause.ends > now);
        by_hook
    }
}

/// A pause in whole seconds, rounded up, as operators are told it.
pub(crate) fn whole_secs(pause: Duration) -> u64 {
    pause.as_secs() + u64::from(pause.subsec_nanos() > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn a_pause_ends_on_the_clock_and_is_then_forgotten() {
        let clock = ManualClock::new(1_000);
        let pauses = HookPauses::new(Arc::new(clock.clone()));
        assert_eq!(
            pauses.start("PHID-HWBH-a", Duration::from_millis(4_500)),
            1_005
        );
        pauses.start("PHID-HWBH-b", Duration::from_secs(60));
        assert_eq!(pauses.until("PHID-HWBH-a"), Some(1_005));
        clock.advance(Duration::from_millis(4_499));
        assert_eq!(pauses.len(), 2);
        clock.advance(Duration::from_millis(1));
        assert_eq!(pauses.until("PHID-HWBH-a"), None);
        assert_eq!(
            pauses.current(),
            vec![HookPause {
                hook: "PHID-HWBH-b".into(),
                until: 1_060
            }]
        );
        pauses.start("PHID-HWBH-b", Duration::from_secs(1));
        assert_eq!(pauses.len(), 1, "one entry per hook");
        clock.advance(Duration::from_secs(1));
        assert!(pauses.is_empty());
    }
}
