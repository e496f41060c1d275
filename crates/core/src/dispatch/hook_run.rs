//! One hook run: the hook's rows one at a time, in id order, each taken
//! through the pipeline by [`deliver_row`] — the only place that knows the
//! stages' order: `prepare` → `guard` → (the last result stored) → `claim`
//! → `prepare::recheck` → `call` → `record`. A row claimed along with an
//! earlier one enters at the stage it has reached (the guard asked again,
//! then `claim::resume`). Whatever [`Exit`] a stage hands back is settled
//! here: its hook error written, its claim left to its lease, the claim
//! group told how the row went. At the run's end: the claimed rows left
//! unsent, the last write-back stored, and the lock kept for the hook's
//! next run or given up.
//!
//! A hook has at most one call whose result is not stored — the one in
//! flight: the last success's write-back is stored while the next row is
//! prepared and guarded, and the row is claimed (or, claimed along, called)
//! only once it is.

use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::StreamExt;

use crate::model::RequestRow;
use crate::store::HookLock;

use super::alongside;
use super::call::call;
use super::claim::{claim, resume};
use super::claim_group::{AheadTurn, ClaimGroup};
use super::context::Context;
use super::guard::{guard, may_call, release};
use super::prepare::{prepare, recheck};
use super::record::{hook_error, left_to_lease, record};
use super::stages::{Claimed, Exit, HookRun, Step};

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

/// Runs `rows` of `hook` (in id order) until they are done, the run
/// stops, or `stop` is set (rows claimed along with an earlier one still
/// go: their group was claimed before the stop). A hanging hook gives its
/// slot back after each row (`hanging`), so it cannot keep a slot for a
/// whole queue of slow calls.
pub(super) async fn hook_run(
    cx: &Context,
    hook: String,
    rows: Vec<RequestRow>,
    held: Option<HeldLock>,
    pace: usize,
    stop: &AtomicBool,
) -> RunReport {
    let mut run = HookRun::resuming(held, pace);
    let mut storing = Storing::new();
    let mut exclude = false;
    for (i, row) in rows.iter().enumerate() {
        if stop.load(Ordering::Relaxed) && !run.group.has_ahead(row.id) {
            break;
        }
        if deliver_row(cx, &mut run, row, &rows[i + 1..], &mut storing).await == Step::StopRun {
            exclude = true;
            break;
        }
        let next_claimed = rows.get(i + 1).is_some_and(|r| run.group.has_ahead(r.id));
        if cx.hooks.is_hanging(&hook) && !next_claimed {
            break;
        }
    }
    abandon_claimed(cx, &mut run, &rows);
    // Every result is stored before the lock is given up or kept.
    while storing.next().await.is_some() {}
    let kept = keep_or_release(cx, &mut run, &hook, exclude).await;
    RunReport {
        hook,
        ids: rows.iter().map(|r| r.id).collect(),
        exclude,
        kept,
        pace: run.group.pace(),
    }
}

/// Claimed rows a stopped run will not send: they wait out their lease.
fn abandon_claimed(cx: &Context, run: &mut HookRun, rows: &[RequestRow]) {
    let Some((claimed_at, unsent)) = run.group.unsent() else {
        // The last group was finished: its rows all had their turn.
        return;
    };
    let waited = cx.waited_since(claimed_at);
    for ahead in unsent.filter(|ahead| ahead.won()) {
        if let Some(row) = rows.iter().find(|r| r.id == ahead.id) {
            left_to_lease(cx, row, waited, "run_stopped");
        }
    }
    finish_row(cx, run, false);
}

/// The run's lock, kept for the hook's next run unless the run stopped
/// or the lock is a lease old (then it is taken afresh, which finds out a
/// session that broke unnoticed).
async fn keep_or_release(
    cx: &Context,
    run: &mut HookRun,
    hook: &str,
    exclude: bool,
) -> Option<HeldLock> {
    let lock = run.lock.take()?;
    let now = cx.clock.monotonic();
    let lease = Duration::from_secs(cx.windows.lease_secs());
    if exclude || now.saturating_sub(run.lock_acquired_at) >= lease {
        release(lock, hook).await;
        return None;
    }
    Some(HeldLock {
        lock,
        breaker_closed: run.breaker_closed,
        idle_since: now,
        acquired_at: run.lock_acquired_at,
    })
}

/// The last success's write-back, still being stored; it resolves to
/// whether the result was stored.
type Storing<'a> = FuturesUnordered<BoxFuture<'a, bool>>;

/// Takes `row` through the pipeline; the step its run takes next.
/// `upcoming` are the run's rows after it (a claim may take some along).
async fn deliver_row<'a>(
    cx: &'a Context,
    run: &mut HookRun,
    row: &RequestRow,
    upcoming: &[RequestRow],
    storing: &mut Storing<'a>,
) -> Step {
    let recorded = async {
        let claimed = match run.group.take_ahead(row.id) {
            Some(ahead) => claimed_along(cx, run, row, ahead, storing).await,
            None => claimed_own(cx, run, row, upcoming, storing).await,
        }?;
        let claimed = recheck(cx, claimed).await?;
        let called = call(cx, run, claimed).await?;
        record(cx, run, called).await
    };
    match recorded.await {
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
    ahead: Result<AheadTurn, Exit>,
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
fn finish_row(cx: &Context, run: &mut HookRun, smooth: bool) {
    let budget = cx.windows.claim_ahead_budget();
    run.group.note(smooth, || cx.clock.monotonic(), budget);
}
