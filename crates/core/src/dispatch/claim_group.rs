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
//! keeps only each hook's pace between its runs.
//!
//! [`Windows::claim_ahead_budget`]: crate::windows::Windows::claim_ahead_budget

use std::collections::VecDeque;
use std::time::Duration;

use crate::model::{Hook, RequestRow, UnixTime};
use crate::properties::Properties;
use crate::store::{Claim, StoreError};
use crate::transport::Target;

use super::hook_run::HookRun;
use super::prepare::ObjectCheck;
use super::Dispatcher;

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
    id: u64,
    claim: AheadClaim,
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

    /// Row `id`'s claim, if it was claimed along with an earlier one.
    pub(super) fn take_ahead(&mut self, id: u64) -> Option<AheadClaim> {
        if !self.has_ahead(id) {
            return None;
        }
        self.ahead.pop_front().map(|ahead| ahead.claim)
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
    fn note(&mut self, smooth: bool, now: impl FnOnce() -> Duration, budget: Duration) {
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
    fn unsent(&mut self) -> Option<(Duration, impl Iterator<Item = AheadRow> + '_)> {
        let current = self.current.as_ref()?;
        Some((current.claimed_at, self.ahead.drain(..)))
    }
}

impl Dispatcher {
    /// The rows after this one to claim with it: as many as the hook's pace
    /// allows, stopping at the first that would fail before its claim (a
    /// defect, unparseable properties: it takes the ordinary path in its
    /// turn). Their objects are looked up beside their claims.
    pub(super) fn look_ahead<'r>(
        &self,
        group: &ClaimGroup,
        upcoming: &'r [RequestRow],
    ) -> Vec<(&'r RequestRow, Properties)> {
        if self.windows.claim_ahead_budget().is_zero() {
            return Vec::new();
        }
        upcoming
            .iter()
            .take(group.pace().saturating_sub(1))
            .map_while(|row| match row.defect {
                Some(_) => None,
                None => Properties::parse(&row.properties).ok().map(|p| (row, p)),
            })
            .collect()
    }

    /// Starts the run's claim group on the first row's claim: the claims
    /// of the rows taken along, in order, counted and reported.
    pub(super) fn begin_group<'r>(
        &self,
        run: &mut HookRun,
        hook: &Hook,
        target: &Target,
        claimed_at: Duration,
        along: impl Iterator<Item = (&'r RequestRow, Properties, ObjectCheck)>,
        claims: impl Iterator<Item = Result<Claim, StoreError>>,
    ) {
        let ahead = along.zip(claims).map(|((row, _properties, check), claim)| {
            let claim = match claim {
                Ok(claim) => {
                    self.note_claim(row, &hook.phid, claim);
                    match claim {
                        Claim::Won(version) => AheadClaim::Won(check, version),
                        Claim::Lost => AheadClaim::Lost,
                    }
                }
                Err(err) => {
                    self.store_failed("claim", &err);
                    AheadClaim::Unknown
                }
            };
            AheadRow { id: row.id, claim }
        });
        run.group
            .begin(hook.clone(), target.clone(), claimed_at, ahead);
    }

    /// Notes how a row of the run's claim group went (see
    /// [`ClaimGroup::note`]).
    pub(super) fn after_attempt(&self, run: &mut HookRun, smooth: bool) {
        let budget = self.windows.claim_ahead_budget();
        run.group.note(smooth, || self.clock.monotonic(), budget);
    }

    /// Whether a claimed row's claim is past the claim-ahead budget, so it
    /// was left to its lease instead of being sent. Without a budget (the
    /// lease leaves no room beyond one call) nothing is claimed ahead and
    /// a row is called straight after its claim: nothing to judge.
    pub(super) fn left_late(
        &self,
        run: &mut HookRun,
        row: &RequestRow,
        claimed_at: Duration,
    ) -> bool {
        let budget = self.windows.claim_ahead_budget();
        let waited = self.clock.monotonic().saturating_sub(claimed_at);
        if budget.is_zero() || waited <= budget {
            return false;
        }
        self.leave_to_lease(row, waited, "late");
        self.after_attempt(run, false);
        true
    }

    /// Claimed rows a stopped run will not send: they wait out their lease.
    pub(super) fn abandon_claimed(&self, run: &mut HookRun, rows: &[RequestRow]) {
        let Some((claimed_at, unsent)) = run.group.unsent() else {
            // The last group was finished: its rows all had their turn.
            return;
        };
        let waited = self.clock.monotonic().saturating_sub(claimed_at);
        for ahead in unsent {
            if !matches!(ahead.claim, AheadClaim::Won(..)) {
                continue;
            }
            if let Some(row) = rows.iter().find(|r| r.id == ahead.id) {
                self.leave_to_lease(row, waited, "run_stopped");
            }
        }
        self.after_attempt(run, false);
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
