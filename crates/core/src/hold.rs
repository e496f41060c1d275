//! Holding delivery while Phorge is in global silent mode
//! (`phabricator.silent`): Phorge then stops handing requests over and its
//! PHP worker marks each one `failed`/`silent` — but only when that worker
//! runs, so until then the row is `queued` and a poller could send what
//! Phorge meant to keep silent.
//!
//! [`SilentMode`] reads Phorge's database-stored configuration through
//! [`PhorgeConfig`] at most once per [`CHECK_INTERVAL`], logs each change
//! once, and answers "hold?" from its cached verdict in between.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tracing::{info, warn};

use crate::clock::Clock;
use crate::store::StoreError;

/// How stale the silent-mode verdict may get.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(2);

/// Phorge's own configuration, as far as delivery needs it.
#[async_trait]
pub trait PhorgeConfig: Send + Sync {
    /// Whether `phabricator.silent` is on in Phorge's database-stored
    /// configuration. Silent mode set only in `local.json` is invisible here.
    async fn silent_mode(&self) -> Result<bool, StoreError>;
}

/// What the daemon last knew about silent mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visibility {
    /// Not checked yet.
    Unchecked,
    /// Readable and off: delivering.
    Off,
    /// Readable and on: holding delivery.
    On,
    /// Not readable (no grant, no table): delivering, unable to see it.
    Invisible,
}

impl Visibility {
    fn code(self) -> u64 {
        match self {
            Self::Unchecked => 0,
            Self::Off => 1,
            Self::On => 2,
            Self::Invisible => 3,
        }
    }

    fn from_code(code: u64) -> Self {
        match code {
            1 => Self::Off,
            2 => Self::On,
            3 => Self::Invisible,
            _ => Self::Unchecked,
        }
    }
}

/// The cached silent-mode verdict; cheap to ask, refreshed on demand.
pub struct SilentMode {
    config: Arc<dyn PhorgeConfig>,
    held: AtomicBool,
    state: AtomicU64,
    checked_at: Mutex<Option<Duration>>,
}

impl fmt::Debug for SilentMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SilentMode")
            .field("visibility", &self.visibility())
            .finish_non_exhaustive()
    }
}

impl SilentMode {
    /// Watches `config`.
    pub fn new(config: Arc<dyn PhorgeConfig>) -> Self {
        Self {
            config,
            held: AtomicBool::new(false),
            state: AtomicU64::new(Visibility::Unchecked.code()),
            checked_at: Mutex::new(None),
        }
    }

    /// The cached verdict: true while delivery must be held.
    pub fn is_held(&self) -> bool {
        self.held.load(Ordering::Relaxed)
    }

    /// What the last check found.
    pub fn visibility(&self) -> Visibility {
        Visibility::from_code(self.state.load(Ordering::Relaxed))
    }

    /// Re-reads Phorge's configuration when the verdict is older than
    /// [`CHECK_INTERVAL`]; returns whether delivery must be held.
    pub async fn refresh(&self, clock: &dyn Clock) -> bool {
        let now = clock.monotonic();
        {
            let mut checked = self.checked_at.lock().unwrap_or_else(|e| e.into_inner());
            if checked.is_some_and(|at| now.saturating_sub(at) < CHECK_INTERVAL) {
                return self.is_held();
            }
            *checked = Some(now);
        }
        let next = match self.config.silent_mode().await {
            Ok(true) => Visibility::On,
            Ok(false) => Visibility::Off,
            Err(err) => {
                if self.visibility() != Visibility::Invisible {
                    warn!(event = "silent_mode_invisible", error = %err,
                          "cannot read Phorge's configuration, so cannot see global silent mode \
                           (phabricator.silent); delivering anyway. Grant SELECT on \
                           {{namespace}}_config.config_entry, or stop this daemon whenever Phorge is silent");
                }
                Visibility::Invisible
            }
        };
        self.transition(next);
        self.is_held()
    }

    fn transition(&self, next: Visibility) {
        let previous = Visibility::from_code(self.state.swap(next.code(), Ordering::Relaxed));
        self.held.store(next == Visibility::On, Ordering::Relaxed);
        match (previous, next) {
            (before, Visibility::On) if before != Visibility::On => warn!(
                event = "silent_mode_on",
                "Phorge is in global silent mode (phabricator.silent): claiming nothing; rows stay \
                 queued for Phorge's worker to mark failed/silent"
            ),
            (Visibility::On, Visibility::Off) => {
                info!(
                    event = "silent_mode_off",
                    "Phorge left silent mode: delivery resumes"
                )
            }
            (Visibility::Invisible, Visibility::Off) => {
                info!(
                    event = "silent_mode_visible",
                    "Phorge's configuration is readable again"
                )
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use futures::executor::block_on;
    use std::sync::Mutex as StdMutex;

    struct Scripted(StdMutex<Vec<Result<bool, ()>>>, AtomicU64);

    #[async_trait]
    impl PhorgeConfig for Scripted {
        async fn silent_mode(&self) -> Result<bool, StoreError> {
            self.1.fetch_add(1, Ordering::Relaxed);
            let mut answers = self.0.lock().unwrap_or_else(|e| e.into_inner());
            match answers.remove(0) {
                Ok(on) => Ok(on),
                Err(()) => Err(StoreError::Query("no grant".into())),
            }
        }
    }

    #[test]
    fn reads_at_most_once_per_interval_and_follows_changes() {
        let config = Arc::new(Scripted(
            StdMutex::new(vec![Ok(false), Ok(true), Err(()), Ok(false)]),
            AtomicU64::new(0),
        ));
        let watch = SilentMode::new(config.clone());
        let clock = ManualClock::new(0);
        assert!(!block_on(watch.refresh(&clock)));
        assert_eq!(watch.visibility(), Visibility::Off);
        assert!(!block_on(watch.refresh(&clock)), "cached");
        assert_eq!(config.1.load(Ordering::Relaxed), 1);
        clock.advance(CHECK_INTERVAL);
        assert!(block_on(watch.refresh(&clock)));
        assert!(watch.is_held());
        clock.advance(CHECK_INTERVAL);
        assert!(
            !block_on(watch.refresh(&clock)),
            "unreadable: deliver anyway"
        );
        assert_eq!(watch.visibility(), Visibility::Invisible);
        clock.advance(CHECK_INTERVAL);
        assert!(!block_on(watch.refresh(&clock)));
        assert_eq!(watch.visibility(), Visibility::Off);
        assert_eq!(config.1.load(Ordering::Relaxed), 4);
    }
}
