//! One hook run: the hook's rows one at a time, in id order, each through
//! SPEC §5's steps in order — the silent-mode hold, `prepare` (steps 1–5),
//! the guard (lock, breaker), the object check, the claim (with the rows
//! it takes along), the attempt — and, at the end, the claimed rows left
//! unsent, the write-backs still being stored and the lock kept or given
//! up.
//!
//! A row's turn goes through typed stages: guarded ([`Guarded`], while
//! the previous delivery's write-back is still being stored), claimed
//! ([`Turn`], once that write-back is stored) and called ([`Attempted`]).
//! So at most one of a hook's calls has no stored result at any moment —
//! the one in flight — and a deliverer that dies or pauses can only cause
//! a hook's receiver one repeat.

use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::future::{join, join_all, BoxFuture};
use futures::stream::FuturesUnordered;
use futures::StreamExt;

use crate::model::RequestRow;
use crate::outcome::HookError;
use crate::properties::Properties;
use crate::store::{Claim, HookLock};

use super::attempt::{ClaimToken, Claimed};
use super::claim_group::{AheadClaim, ClaimGroup};
use super::guard::release;
use super::prepare::{ObjectVerdict, Ready, Transactions};
use super::{alongside, Dispatcher};

/// What a hook run reports back to the loop.
pub(super) struct RunReport {
    pub(super) hook: String,
    pub(super) ids: Vec<u64>,
    /// Leave this hook's rows out of candidate queries until the next tick.
    pub(super) exclude: bool,
    /// The hook's lock, still held, for the next run of the same hook.
    pub(super) kept: Option<HeldLock>,
    /// The hook's pace, for its next run.
    pub(super) pace: usize,
}

/// A per-hook lock kept between runs, so a hook with a steady stream of
/// rows is locked (and its breaker counted) once, not once per batch.
pub(super) struct HeldLock {
    pub(super) lock: Box<dyn HookLock>,
    /// The breaker was below its threshold when last counted, and nothing
    /// has failed since. While the lock is held nobody else can add
    /// failures, and time only lets old ones slide out, so it stays true.
    breaker_closed: bool,
    pub(super) idle_since: Duration,
    /// A named lock lives on one database session; if that session broke,
    /// the server freed the lock without telling us. Re-taking it once per
    /// lease bounds how long a broken session can go unnoticed.
    acquired_at: Duration,
}

/// How processing one row ended for the rest of its hook run.
pub(super) enum Step {
    Next,
    StopRun,
}

/// How a row's turn up to its call ended: with the row claimed and ready
/// to be sent, or with the step the run takes next.
// Moved once, from the turn to the call; never kept in a collection, so
// boxing the large variant would only add an allocation per row.
#[allow(clippy::large_enum_variant)]
pub(super) enum Turn<'r> {
    Call(Claimed<'r>),
    Done(Step),
}

impl From<Step> for Turn<'_> {
    fn from(step: Step) -> Self {
        Self::Done(step)
    }
}

/// A row of the run's own that passed steps 1–6 and its object check:
/// ready to be claimed.
pub(super) struct Guarded<'r> {
    row: &'r RequestRow,
    ready: Ready,
    transactions: Transactions,
}

/// What a row's call did: the step the run takes next, and the write-back
/// of a successful delivery, still to be stored while the run takes its
/// next row up to its call (see [`Dispatcher::hook_run`]).
pub(super) struct Attempted<'a> {
    pub(super) step: Step,
    /// Resolves to whether the result was stored (see
    /// [`Dispatcher::write_back`]).
    pub(super) pending_write: Option<BoxFuture<'a, bool>>,
}

impl From<Step> for Attempted<'_> {
    fn from(step: Step) -> Self {
        Self {
            step,
            pending_write: None,
        }
    }
}

/// Per-run state: the lock, whether the breaker is known to be closed, and
/// the claim group.
pub(super) struct HookRun {
    pub(super) lock: Option<Box<dyn HookLock>>,
    pub(super) lock_acquired_at: Duration,
    pub(super) breaker_closed: bool,
    pub(super) group: ClaimGroup,
}

impl HookRun {
    fn resuming(held: Option<HeldLock>, pace: usize) -> Self {
        let (lock, lock_acquired_at, breaker_closed) = match held {
            Some(held) => (Some(held.lock), held.acquired_at, held.breaker_closed),
            None => (None, Duration::ZERO, false),
        };
        Self {
            lock,
            lock_acquired_at,
            breaker_closed,
            group: ClaimGroup::new(pace),
        }
    }
}

impl Dispatcher {
    pub(super) async fn hook_run(
        &self,
        hook_phid: String,
        rows: Vec<RequestRow>,
        held: Option<HeldLock>,
        pace: usize,
        stop: &AtomicBool,
    ) -> RunReport {
        let mut run = HookRun::resuming(held, pace);
        let mut exclude = false;
        // A write-back that finished alongside the row's guard lost its
        // result.
        let mut lost = false;
        // The write-back of the last successful delivery, stored while the
        // run takes its next row up to its claim.
        let mut storing: FuturesUnordered<BoxFuture<'_, bool>> = FuturesUnordered::new();
        for (i, row) in rows.iter().enumerate() {
            // A row claimed along with an earlier one is dealt with even
            // when stopping: its claim group was taken before the stop.
            if stop.load(Ordering::Relaxed) && !run.group.has_ahead(row.id) {
                break;
            }
            // A row claimed along with an earlier one is in flight: like
            // the delivery under way, it is sent even if a hold began
            // meanwhile.
            let turn = match run.group.take_ahead(row.id) {
                Some(ahead) => match Self::last_result_stored(&mut storing, false).await {
                    Ok(_) => self.process_claimed(&mut run, row, ahead).await,
                    Err(step) => Turn::Done(step),
                },
                None => {
                    let guarded = alongside(
                        pin!(self.guard_row(&mut run, row)),
                        &mut storing,
                        |stored| lost |= !stored,
                    )
                    .await;
                    match guarded {
                        Ok(guarded) => match Self::last_result_stored(&mut storing, lost).await {
                            // A hold that began while it waited keeps the
                            // row unclaimed.
                            Ok(true) if self.hold_now().await => Turn::Done(Step::StopRun),
                            Ok(_) => self.claim_row(&mut run, guarded, &rows[i + 1..]).await,
                            Err(step) => Turn::Done(step),
                        },
                        Err(step) => Turn::Done(step),
                    }
                }
            };
            lost = false;
            let step = match turn {
                Turn::Done(step) => step,
                Turn::Call(claimed) => {
                    let Attempted {
                        step,
                        pending_write,
                    } = self.attempt(&mut run, claimed).await;
                    storing.extend(pending_write);
                    step
                }
            };
            if let Step::StopRun = step {
                exclude = true;
                break;
            }
            // A slow hook gives its slot back after each row (its other
            // rows are polled again), so it cannot keep a slot for a whole
            // queue of slow calls; rows already claimed along still go.
            let next_claimed = rows
                .get(i + 1)
                .is_some_and(|next| run.group.has_ahead(next.id));
            if self.is_slow(&hook_phid) && !next_claimed {
                break;
            }
        }
        self.abandon_claimed(&mut run, &rows);
        // Every result is stored before the lock is given up or kept.
        while storing.next().await.is_some() {}
        let mut kept = None;
        if let Some(lock) = run.lock.take() {
            let now = self.clock.monotonic();
            let lease = Duration::from_secs(self.windows.lease_secs());
            if exclude || now.saturating_sub(run.lock_acquired_at) >= lease {
                release(lock, &hook_phid).await;
            } else {
                kept = Some(HeldLock {
                    lock,
                    breaker_closed: run.breaker_closed,
                    idle_since: now,
                    acquired_at: run.lock_acquired_at,
                });
            }
        }
        RunReport {
            hook: hook_phid,
            ids: rows.iter().map(|r| r.id).collect(),
            exclude,
            kept,
            pace: run.group.pace(),
        }
    }

    /// Waits until the last result is stored: a hook's next claim (or, for
    /// a row claimed along, its call) waits for it, so a deliverer that
    /// pauses or dies mid-call leaves one unstored call per hook, not a
    /// queue. `Ok(waited)`: whether it had to wait. `Err` stops the run:
    /// the result was lost (`lost`, or found so now), and calling on
    /// would leave a second one unstored.
    async fn last_result_stored(
        storing: &mut FuturesUnordered<BoxFuture<'_, bool>>,
        mut lost: bool,
    ) -> Result<bool, Step> {
        let waited = !storing.is_empty();
        while let Some(stored) = storing.next().await {
            lost |= !stored;
        }
        if lost {
            Err(Step::StopRun)
        } else {
            Ok(waited)
        }
    }

    /// SPEC §5 for one row of the run's own, up to its claim: the hold,
    /// steps 1–5, the guard and the object check. The write-back of the
    /// run's last successful delivery is still being stored meanwhile.
    async fn guard_row<'r>(
        &self,
        run: &mut HookRun,
        row: &'r RequestRow,
    ) -> Result<Guarded<'r>, Step> {
        if self.hold_now().await {
            return Err(Step::StopRun);
        }
        if self.fail_when_silent && row.defect.is_none() && self.silent_now().await {
            // Phorge's worker checks silent mode first, before the hook.
            if let Ok(properties) = Properties::parse(&row.properties) {
                self.fail_hook(row, &properties, HookError::Silent, None)
                    .await;
                return Err(Step::Next);
            }
        }
        // Boxed: its states (the hook lookup, the triage) are live only
        // before the claim, and inline they would size the whole turn.
        let Ready {
            properties,
            hook,
            target,
        } = Box::pin(self.prepare(row)).await?;
        if !self.may_call(run, &hook.phid).await {
            return Err(Step::StopRun);
        }
        // Phorge's worker fails a destroyed object's request before it
        // calls; checked once the hook may be called, so a blocked hook
        // costs no lookups.
        let check = self.look_up_object(row, &properties).await;
        let transactions = match self.act_on(row, check) {
            ObjectVerdict::Send(transactions) => transactions,
            ObjectVerdict::Gone => {
                self.fail_hook(row, &properties, HookError::Object, None)
                    .await;
                return Err(Step::Next);
            }
            ObjectVerdict::Failed => return Err(Step::StopRun),
        };
        Ok(Guarded {
            row,
            ready: Ready {
                properties,
                hook,
                target,
            },
            transactions,
        })
    }

    /// Step 7 for a guarded row: its claim, taking some of the `upcoming`
    /// rows along (see [`ClaimGroup`]); when their turn comes they skip
    /// steps 1–5 ([`Dispatcher::process_claimed`] instead).
    async fn claim_row<'r>(
        &self,
        run: &mut HookRun,
        guarded: Guarded<'r>,
        upcoming: &'r [RequestRow],
    ) -> Turn<'r> {
        let Guarded {
            row,
            ready:
                Ready {
                    properties,
                    hook,
                    target,
                },
            transactions,
        } = guarded;
        let along = match &target {
            Ok(_) => self.look_ahead(&run.group, upcoming),
            Err(_) => Vec::new(),
        };
        let claimed_at = self.clock.monotonic();
        // The objects of the rows taken along are looked up while their
        // claims commit, so their POSTs can follow each other at once; one
        // after the other, so a group holds one pooled connection for them.
        let look_ups = async {
            let mut checks = Vec::with_capacity(along.len());
            for (row, properties) in &along {
                checks.push(self.look_up_object(row, properties).await);
            }
            checks
        };
        let (claims, checks) = join(
            join_all(
                std::iter::once(row)
                    .chain(along.iter().map(|(r, _)| *r))
                    .map(|r| self.store.claim(r.id, r.date_modified)),
            ),
            look_ups,
        )
        .await;
        let along = along.into_iter().zip(checks).map(|((r, p), c)| (r, p, c));
        let mut claims = claims.into_iter();
        let first = claims.next().unwrap_or(Ok(Claim::Lost));
        match &first {
            Ok(claim) => self.note_claim(row, &hook.phid, *claim),
            Err(err) => self.store_failed("claim", err),
        }
        if let Ok(target) = &target {
            self.begin_group(run, &hook, target, claimed_at, along, claims);
        }
        let version = match first {
            Ok(Claim::Won(version)) => version,
            Ok(Claim::Lost) => {
                self.after_attempt(run, false);
                return Step::Next.into();
            }
            Err(_) => return Step::StopRun.into(),
        };
        // Its lease runs from its own claim, which may have committed well
        // before the slowest of its group's.
        if run.group.has_more_ahead() && self.left_late(run, row, claimed_at) {
            return Step::Next.into();
        }
        Turn::Call(Claimed {
            row,
            properties,
            hook,
            target,
            transactions,
            claim: ClaimToken {
                at: claimed_at,
                version,
            },
        })
    }

    /// A row claimed along with an earlier one, up to its call: steps 6
    /// and 8. It is sent only while the lock is still ours, the breaker
    /// (counted again after a failure) closed, its object there (checked
    /// beside its claim), and the claim within
    /// [`Windows::claim_ahead_budget`].
    ///
    /// [`Windows::claim_ahead_budget`]: crate::windows::Windows::claim_ahead_budget
    async fn process_claimed<'r>(
        &self,
        run: &mut HookRun,
        row: &'r RequestRow,
        ahead: AheadClaim,
    ) -> Turn<'r> {
        let (check, version) = match ahead {
            AheadClaim::Won(check, version) => (check, version),
            AheadClaim::Lost => {
                self.after_attempt(run, false);
                return Step::Next.into();
            }
            // The store is failing: like a failed claim of a run's row.
            AheadClaim::Unknown => return Step::StopRun.into(),
        };
        let Some((hook, target, claimed_at)) = run.group.current() else {
            // Not reachable: a claimed row always has its group.
            self.leave_to_lease(row, Duration::ZERO, "run_stopped");
            return Step::StopRun.into();
        };
        // Parsed when it was taken along (`look_ahead`): not reachable.
        let Ok(properties) = Properties::parse(&row.properties) else {
            let waited = self.clock.monotonic().saturating_sub(claimed_at);
            self.leave_to_lease(row, waited, "run_stopped");
            return Step::StopRun.into();
        };
        let (hook, target) = (hook.clone(), target.clone());
        let claim = ClaimToken {
            at: claimed_at,
            version,
        };
        if !self.may_call(run, &hook.phid).await {
            let waited = self.clock.monotonic().saturating_sub(claimed_at);
            self.leave_to_lease(row, waited, "run_stopped");
            return Step::StopRun.into();
        }
        // Late, it is not ours to write: not even the object's verdict.
        if self.left_late(run, row, claimed_at) {
            return Step::Next.into();
        }
        let transactions = match self.act_on(row, check) {
            ObjectVerdict::Send(transactions) => transactions,
            ObjectVerdict::Gone => {
                self.fail_hook(row, &properties, HookError::Object, Some(claim))
                    .await;
                self.after_attempt(run, true);
                return Step::Next.into();
            }
            ObjectVerdict::Failed => {
                let waited = self.clock.monotonic().saturating_sub(claimed_at);
                self.leave_to_lease(row, waited, "run_stopped");
                return Step::StopRun.into();
            }
        };
        Turn::Call(Claimed {
            row,
            properties,
            hook,
            target: Ok(target),
            transactions,
            claim,
        })
    }
}
