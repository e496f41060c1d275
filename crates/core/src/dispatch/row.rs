//! One row's way through the pipeline, the only place that knows the
//! stages' order: `prepare` → `guard` → (the last result stored) → `claim`
//! → `call` → `record`. A row claimed along with an earlier one enters at
//! the stage it has reached (the guard asked again, then `claim::resume`).
//! Whatever [`Exit`] a stage hands back is settled here: its hook error
//! written, its claim left to its lease, the claim group told how the row
//! went.
//!
//! A hook has at most one call whose result is not stored — the one in
//! flight: the last success's write-back is stored while the next row is
//! prepared and guarded, and the row is claimed (or, claimed along, called)
//! only once it is.

use std::pin::pin;

use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::StreamExt;

use crate::model::RequestRow;

use super::alongside;
use super::call::call;
use super::claim::{claim, resume};
use super::context::Context;
use super::guard::{guard, may_call};
use super::prepare::prepare;
use super::record::{hook_error, left_to_lease, record};
use super::stages::{Claimed, Exit, HookRun, Step};

/// The last success's write-back, still being stored; it resolves to
/// whether the result was stored.
pub(super) type Storing<'a> = FuturesUnordered<BoxFuture<'a, bool>>;

/// Takes `row` through the pipeline; the step its run takes next.
/// `upcoming` are the run's rows after it (a claim may take some along).
pub(super) async fn deliver_row<'a>(
    cx: &'a Context,
    run: &mut HookRun,
    row: &RequestRow,
    upcoming: &[RequestRow],
    storing: &mut Storing<'a>,
) -> Step {
    let claimed = match run.group.take_ahead(row.id) {
        Some(ahead) => claimed_along(cx, run, row, ahead, storing).await,
        None => claimed_own(cx, run, row, upcoming, storing).await,
    };
    let recorded = match claimed {
        Ok(claimed) => match call(cx, run, claimed).await {
            Ok(called) => record(cx, run, called).await,
            Err(exit) => Err(exit),
        },
        Err(exit) => Err(exit),
    };
    match recorded {
        Ok(recorded) => {
            finish_row(cx, run, recorded.sent);
            storing.extend(recorded.pending_write);
            recorded.step
        }
        Err(exit) => settle(cx, run, row, exit).await,
    }
}

/// A row of the run's own up to its claim: prepared and guarded while the
/// last write-back is stored, claimed once it is (and only if delivery was
/// not held meanwhile).
async fn claimed_own<'r, 'a>(
    cx: &'a Context,
    run: &mut HookRun,
    row: &'r RequestRow,
    upcoming: &'r [RequestRow],
    storing: &mut Storing<'a>,
) -> Result<Claimed<'r>, Exit> {
    let mut lost = false;
    let guarded = async {
        let prepared = prepare(cx, row).await?;
        guard(cx, &mut *run, prepared).await
    };
    let guarded = alongside(pin!(guarded), storing, |stored| lost |= !stored).await?;
    if last_result_stored(storing, lost).await? && cx.hold_now().await {
        return Err(Exit::Stop);
    }
    claim(cx, run, guarded, upcoming).await
}

/// A row claimed along with an earlier one, once the last result is
/// stored: its hook may still be called (pause, lock, breaker), and its
/// claim is still its own to use.
async fn claimed_along<'r>(
    cx: &Context,
    run: &mut HookRun,
    row: &'r RequestRow,
    ahead: Result<super::claim_group::AheadTurn, Exit>,
    storing: &mut Storing<'_>,
) -> Result<Claimed<'r>, Exit> {
    let ahead = ahead?;
    last_result_stored(storing, false).await?;
    if !may_call(cx, run, &ahead.hook.phid).await {
        return Err(Exit::Leave {
            claimed_at: ahead.claimed_at,
            reason: "run_stopped",
            step: Step::StopRun,
        });
    }
    resume(cx, row, ahead)
}

/// Waits until the last result is stored; whether it had to wait. `Err`
/// stops the run: the result was lost (`lost`, or found so now), and
/// calling on would leave a second one unstored.
async fn last_result_stored(storing: &mut Storing<'_>, mut lost: bool) -> Result<bool, Exit> {
    let waited = !storing.is_empty();
    while let Some(stored) = storing.next().await {
        lost |= !stored;
    }
    if lost {
        Err(Exit::Stop)
    } else {
        Ok(waited)
    }
}

/// What an [`Exit`] leaves to do; the step the run takes next.
async fn settle(cx: &Context, run: &mut HookRun, row: &RequestRow, exit: Exit) -> Step {
    match exit {
        Exit::Stop => Step::StopRun,
        Exit::Lost => {
            finish_row(cx, run, false);
            Step::Next
        }
        Exit::HookError {
            properties,
            error,
            claim,
        } => {
            hook_error(cx, row, &properties, error, claim).await;
            if claim.is_some() {
                finish_row(cx, run, true);
            }
            Step::Next
        }
        Exit::Leave {
            claimed_at,
            reason,
            step,
        } => {
            left_to_lease(cx, row, cx.waited_since(claimed_at), reason);
            finish_row(cx, run, false);
            step
        }
    }
}

/// Tells the claim group how a claimed row went (see `ClaimGroup::note`).
pub(super) fn finish_row(cx: &Context, run: &mut HookRun, smooth: bool) {
    let budget = cx.windows.claim_ahead_budget();
    run.group.note(smooth, || cx.clock.monotonic(), budget);
}
