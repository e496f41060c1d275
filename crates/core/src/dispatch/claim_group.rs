//! Claim groups: rows of one hook claimed together, in one group commit,
//! and the hook's *pace* — how many rows its next claim takes.
//!
//! Waiting for a commit before every POST would make a fast hook's run as
//! slow as the database's commit latency; so when a hook's recent groups
//! were delivered quickly and without failure, the claim of a row takes the
//! run's next rows along. The pace doubles after a quick, clean group (up
//! to [`CLAIM_AHEAD_MAX`]), halves after a slow one, and drops back to one
//! after a failed attempt, a lost claim or an unsent row ([`next_pace`]).
//! Each row is still sent one at a time, in id order, under the hook lock,
//! after the breaker check — but only within
//! [`Windows::claim_ahead_budget`] of the claim, so its POST ends with at
//! least that much of its lease left. A row that misses it, or whose run
//! stops first, is not sent; it is delivered again after its lease, as if
//! its deliverer had died (`claim_left_to_lease`).
//!
//! All of a run's claim-group state is in one [`ClaimGroup`]; the loop
//! keeps only each hook's pace between its runs. The `claim` stage starts
//! groups and the row's orchestrator takes their rows in turn; the rules
//! (the pace, the budget) are the pure functions here.
//!
//! [`Windows::claim_ahead_budget`]: crate::windows::Windows::claim_ahead_budget

use std::collections::VecDeque;
use std::time::Duration;

use crate::model::{Hook, UnixTime};
use crate::transport::Target;

use super::context::ObjectCheck;
use super::stages::Exit;

/// Most rows one claim takes (the row and those claimed along with it):
/// a hook run claims a fast hook's next rows in one group commit instead
/// of waiting for a commit before each POST (see [`ClaimGroup`]).
pub(super) const CLAIM_AHEAD_MAX: usize = 16;

/// A run's claim groups: the hook's pace, and the group in hand from its
/// claim until each of its rows had its turn.
pub(super) struct ClaimGroup {
    pace: usize,
    current: Option<Current>,
    /// The group's rows after its first, in id order, waiting for their
    /// turn (empty without a group; its buffer serves the run's groups).
    ahead: VecDeque<AheadRow>,
}

/// The group in hand.
struct Current {
    hook: Hook,
    target: Target,
    claimed_at: Duration,
    size: usize,
    /// Every row so far was sent, none left to its lease.
    smooth: bool,
}

/// A row claimed along with an earlier one, waiting for its turn.
pub(super) struct AheadRow {
    pub(super) id: u64,
    pub(super) claim: AheadClaim,
}

impl AheadRow {
    /// Whether its claim was won (so, unsent, it waits out its lease).
    pub(super) fn won(&self) -> bool {
        matches!(self.claim, AheadClaim::Won(..))
    }
}

/// A row claimed along and won, as its turn comes: its object as checked
/// beside its claim, the version the claim wrote, and the group's hook,
/// target and claim time.
pub(super) struct AheadTurn {
    pub(super) check: ObjectCheck,
    pub(super) version: UnixTime,
    pub(super) hook: Hook,
    pub(super) target: Target,
    pub(super) claimed_at: Duration,
}

/// How the claim of a row taken along went.
pub(super) enum AheadClaim {
    /// Ours at this version, with its object as checked beside the claim.
    /// Its properties are parsed again when its turn comes: a group's rows
    /// wait while the calls before them are in flight, and parsed they
    /// cost several times their text.
    Won(ObjectCheck, UnixTime),
    /// Another deliverer has it.
    Lost,
    /// The claim failed: it may or may not have landed.
    Unknown,
}

/// How a finished group went, for the next pace.
#[derive(Debug, Clone, Copy)]
struct GroupOutcome {
    /// Every row was sent, none left to its lease, nothing failed.
    smooth: bool,
    /// From the claim to the last row's end.
    took: Duration,
    /// Rows it claimed.
    size: usize,
}

/// The pace after a group: one after any failure, halved after a slow
/// group (it took more than half the claim-ahead `budget`), doubled (up
/// to [`CLAIM_AHEAD_MAX`]) after a quick one (a quarter of the budget or
/// less) that was as large as the pace allowed, else unchanged.
fn next_pace(pace: usize, group: GroupOutcome, budget: Duration) -> usize {
    if !group.smooth {
        1
    } else if group.took * 2 > budget {
        (pace / 2).max(1)
    } else if group.took * 4 <= budget && group.size >= pace {
        (pace * 2).min(CLAIM_AHEAD_MAX)
    } else {
        pace
    }
}

impl ClaimGroup {
    /// No group in hand yet; the hook's pace as its last run left it.
    pub(super) fn new(pace: usize) -> Self {
        Self {
            pace,
            current: None,
            ahead: VecDeque::new(),
        }
    }

    /// Rows the hook's next claim may take, itself included.
    pub(super) fn pace(&self) -> usize {
        self.pace
    }

    /// Starts a group: its first row claimed at `claimed_at`, `ahead` the
    /// claims of the rows taken along.
    pub(super) fn begin(
        &mut self,
        hook: Hook,
        target: Target,
        claimed_at: Duration,
        ahead: impl Iterator<Item = AheadRow>,
    ) {
        self.ahead.clear();
        self.ahead.extend(ahead);
        self.current = Some(Current {
            hook,
            target,
            claimed_at,
            size: 1 + self.ahead.len(),
            smooth: true,
        });
    }

    /// The group's hook, its checked target and when it was claimed.
    #[cfg(test)]
    pub(super) fn current(&self) -> Option<(&Hook, &Target, Duration)> {
        self.current
            .as_ref()
            .map(|c| (&c.hook, &c.target, c.claimed_at))
    }

    /// The hook as it was just checked before a call, and its target: the
    /// group's later rows start from them (a hook edited in Phorge
    /// mid-group is resolved once, not once per row).
    pub(super) fn refresh(&mut self, hook: &Hook, target: &Target) {
        if let Some(current) = self.current.as_mut() {
            if current.hook != *hook || current.target != *target {
                current.hook = hook.clone();
                current.target = target.clone();
            }
        }
    }

    /// Whether row `id` was claimed along with an earlier one and waits
    /// for its turn.
    pub(super) fn has_ahead(&self, id: u64) -> bool {
        self.ahead_front().is_some_and(|ahead| ahead.id == id)
    }

    /// Row `id`'s turn, if it was claimed along with an earlier one: won,
    /// or what its claim's answer leaves to do (lost: nothing; unknown,
    /// the store failing: the run stops).
    pub(super) fn take_ahead(&mut self, id: u64) -> Option<Result<AheadTurn, Exit>> {
        if !self.has_ahead(id) {
            return None;
        }
        let current = self.current.as_ref()?;
        let (hook, target, claimed_at) = (
            current.hook.clone(),
            current.target.clone(),
            current.claimed_at,
        );
        Some(match self.ahead.pop_front()?.claim {
            AheadClaim::Won(check, version) => Ok(AheadTurn {
                check,
                version,
                hook,
                target,
                claimed_at,
            }),
            AheadClaim::Lost => Err(Exit::Lost),
            AheadClaim::Unknown => Err(Exit::Stop),
        })
    }

    /// Whether rows claimed along still wait for their turn.
    pub(super) fn has_more_ahead(&self) -> bool {
        self.ahead_front().is_some()
    }

    fn ahead_front(&self) -> Option<&AheadRow> {
        self.ahead.front()
    }

    /// Notes how a row went; once each row of the group had its turn, sets
    /// the pace for the next one (`now` is read only then). A row outside
    /// any group (its hook could not be resolved) that failed resets it
    /// too.
    pub(super) fn note(&mut self, smooth: bool, now: impl FnOnce() -> Duration, budget: Duration) {
        let Some(current) = self.current.as_mut() else {
            if !smooth {
                self.pace = 1;
            }
            return;
        };
        current.smooth &= smooth;
        if !self.ahead.is_empty() {
            return;
        }
        let outcome = GroupOutcome {
            smooth: current.smooth,
            took: now().saturating_sub(current.claimed_at),
            size: current.size,
        };
        self.pace = next_pace(self.pace, outcome, budget);
        self.current = None;
    }

    /// The rows still waiting in an unfinished group, taken out of it, and
    /// when they were claimed; `None` once the last group was finished.
    pub(super) fn unsent(&mut self) -> Option<(Duration, impl Iterator<Item = AheadRow> + '_)> {
        let current = self.current.as_ref()?;
        Some((current.claimed_at, self.ahead.drain(..)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default claim-ahead budget (lease 30 s, timeout 15 s).
    const BUDGET: Duration = Duration::from_millis(6_500);

    fn group(smooth: bool, took_ms: u64, size: usize) -> GroupOutcome {
        GroupOutcome {
            smooth,
            took: Duration::from_millis(took_ms),
            size,
        }
    }

    #[test]
    fn a_quick_clean_full_group_doubles_the_pace_up_to_the_maximum() {
        assert_eq!(next_pace(1, group(true, 10, 1), BUDGET), 2);
        assert_eq!(next_pace(4, group(true, 1_625, 4), BUDGET), 8);
        assert_eq!(next_pace(16, group(true, 10, 16), BUDGET), CLAIM_AHEAD_MAX);
        assert_eq!(next_pace(12, group(true, 10, 12), BUDGET), CLAIM_AHEAD_MAX);
    }

    #[test]
    fn a_group_smaller_than_the_pace_or_not_quick_keeps_it() {
        // Fewer rows were there to take: no evidence for a larger pace.
        assert_eq!(next_pace(8, group(true, 10, 3), BUDGET), 8);
        // Between a quarter and half of the budget.
        assert_eq!(next_pace(8, group(true, 1_626, 8), BUDGET), 8);
        assert_eq!(next_pace(8, group(true, 3_250, 8), BUDGET), 8);
    }

    #[test]
    fn a_slow_group_halves_the_pace_but_never_below_one() {
        assert_eq!(next_pace(8, group(true, 3_251, 8), BUDGET), 4);
        assert_eq!(next_pace(1, group(true, 60_000, 1), BUDGET), 1);
    }

    #[test]
    fn any_failure_drops_the_pace_to_one() {
        assert_eq!(next_pace(16, group(false, 10, 16), BUDGET), 1);
        assert_eq!(next_pace(4, group(false, 60_000, 4), BUDGET), 1);
    }

    fn ahead(ids: &[u64]) -> VecDeque<AheadRow> {
        ids.iter()
            .map(|&id| AheadRow {
                id,
                claim: AheadClaim::Lost,
            })
            .collect()
    }

    fn target() -> Target {
        Target {
            uri: "https://example.invalid/".into(),
            addrs: Vec::new(),
        }
    }

    fn hook() -> Hook {
        Hook {
            phid: "PHID-HWBH-groupaaaaaaaaaaaaaa".into(),
            name: "group".into(),
            uri: "https://example.invalid/".into(),
            status: "enabled".into(),
            hmac_key: "abcdefghijklmnopqrstuvwxyz234567".into(),
        }
    }

    #[test]
    fn a_group_sets_the_pace_once_its_last_row_had_its_turn() {
        let mut group = ClaimGroup::new(2);
        group.begin(hook(), target(), Duration::ZERO, ahead(&[8]).into_iter());
        assert!(group.has_ahead(8) && !group.has_ahead(9));
        group.note(true, || Duration::from_millis(10), BUDGET);
        assert_eq!(group.pace(), 2, "row 8 still to go");
        assert!(group.take_ahead(8).is_some());
        assert!(!group.has_more_ahead());
        group.note(true, || Duration::from_millis(10), BUDGET);
        assert_eq!(group.pace(), 4);
        assert!(group.current().is_none());
        // Outside a group only a failure changes it.
        group.note(true, || panic!("no clock read outside a group"), BUDGET);
        assert_eq!(group.pace(), 4);
        group.note(false, || panic!("no clock read outside a group"), BUDGET);
        assert_eq!(group.pace(), 1);
    }

    #[test]
    fn an_unsent_row_makes_its_group_a_failure() {
        let mut group = ClaimGroup::new(4);
        group.begin(
            hook(),
            target(),
            Duration::ZERO,
            ahead(&[8, 9, 10]).into_iter(),
        );
        group.note(true, || Duration::ZERO, BUDGET);
        let (claimed_at, unsent) = group.unsent().expect("a group in hand");
        assert_eq!(claimed_at, Duration::ZERO);
        assert_eq!(unsent.count(), 3);
        group.note(false, || Duration::ZERO, BUDGET);
        assert_eq!(group.pace(), 1);
        assert!(group.unsent().is_none());
    }
}
