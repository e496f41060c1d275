//! What the dispatcher knows about each hook, in one place: its row as
//! last read (reused for [`HOOK_CACHE_TTL`]), whether its breaker is
//! open, whether it hangs, when its slowness was last said, and whether its key
//! was found unusable for Standard Webhooks. State and small decisions only: the stages log what these
//! decisions say.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crate::model::Hook;
use crate::store::{Store, StoreError};
use crate::triage::HookLookup;

/// How long a looked-up hook row is reused: a hook disabled or edited in
/// Phorge is seen within this time, as every call asks for its hook just
/// before it is made.
pub(super) const HOOK_CACHE_TTL: Duration = Duration::from_secs(5);

/// A call that takes at least this long is reported (`hook_slow`), at most
/// once per [`SLOW_REPORT_INTERVAL`] per hook.
pub(super) const SLOW_CALL: Duration = Duration::from_secs(1);
const SLOW_REPORT_INTERVAL: Duration = Duration::from_secs(60);

/// What is known about one hook.
#[derive(Default)]
struct HookFacts {
    /// The hook row (or its absence) and when it was read.
    row: Option<(Option<Hook>, Duration)>,
    breaker_open: bool,
    /// Its last call took half the delivery timeout or more (a timeout
    /// included): hanging hooks share at most half the slots, and their
    /// runs give their slot back after every row.
    hanging: bool,
    slow_said_at: Option<Duration>,
    standard_unavailable_said: bool,
}

/// Every hook's facts.
#[derive(Default)]
pub(super) struct HookBook {
    facts: Mutex<HashMap<String, HookFacts>>,
}

impl HookBook {
    fn facts(&self) -> MutexGuard<'_, HashMap<String, HookFacts>> {
        self.facts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The hook row, read from `store` at most every [`HOOK_CACHE_TTL`]
    /// (`now` on the monotonic clock), and whether `store` was asked now
    /// (its answer, not the cache's).
    pub(super) async fn lookup(
        &self,
        store: &dyn Store,
        phid: &str,
        now: Duration,
    ) -> Result<(HookLookup, bool), StoreError> {
        let cached = self.facts().get(phid).and_then(|f| f.row.clone());
        let (hook, asked) = match cached {
            Some((hook, read_at)) if now.saturating_sub(read_at) < HOOK_CACHE_TTL => (hook, false),
            _ => {
                let hook = store.hook(phid).await?;
                self.facts().entry(phid.to_owned()).or_default().row = Some((hook.clone(), now));
                (hook, true)
            }
        };
        Ok((hook.map_or(HookLookup::Missing, HookLookup::Found), asked))
    }

    /// Records the breaker's verdict; whether it changed, and how many
    /// hooks have theirs open now.
    pub(super) fn note_breaker(&self, phid: &str, open: bool) -> (bool, usize) {
        let mut facts = self.facts();
        let fact = facts.entry(phid.to_owned()).or_default();
        let changed = fact.breaker_open != open;
        fact.breaker_open = open;
        let open_hooks = facts.values().filter(|f| f.breaker_open).count();
        (changed, open_hooks)
    }

    /// The hooks whose breaker was open when last checked.
    pub(super) fn breaker_open(&self) -> Vec<String> {
        let facts = self.facts();
        facts
            .iter()
            .filter(|(_, f)| f.breaker_open)
            .map(|(phid, _)| phid.clone())
            .collect()
    }

    /// Whether `phid` hangs (its last call took half the timeout or more).
    pub(super) fn is_hanging(&self, phid: &str) -> bool {
        self.facts().get(phid).is_some_and(|f| f.hanging)
    }

    /// Records a call's latency: whether the hook hangs, and whether its
    /// slowness is to be said now (at most once per
    /// [`SLOW_REPORT_INTERVAL`]).
    pub(super) fn note_latency(
        &self,
        phid: &str,
        latency: Duration,
        timeout: Duration,
        now: Duration,
    ) -> bool {
        let mut facts = self.facts();
        let fact = facts.entry(phid.to_owned()).or_default();
        fact.hanging = latency >= timeout / 2;
        if latency < SLOW_CALL {
            return false;
        }
        match fact.slow_said_at {
            Some(at) if now.saturating_sub(at) < SLOW_REPORT_INTERVAL => false,
            _ => {
                fact.slow_said_at = Some(now);
                true
            }
        }
    }

    /// Whether this is the first time `phid`'s key was found unusable as a
    /// Standard Webhooks secret.
    pub(super) fn first_standard_unavailable(&self, phid: &str) -> bool {
        let mut facts = self.facts();
        let fact = facts.entry(phid.to_owned()).or_default();
        !std::mem::replace(&mut fact.standard_unavailable_said, true)
    }
}
