//! One hook run: the hook's rows one at a time, in id order, each through
//! the pipeline (`row`); at the end, the claimed rows left unsent, the
//! last write-back stored, and the lock kept for the hook's next run or
//! given up.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;

use crate::model::RequestRow;
use crate::store::HookLock;

use super::claim_group::ClaimGroup;
use super::context::Context;
use super::guard::release;
use super::record::left_to_lease;
use super::row::{deliver_row, finish_row, Storing};
use super::stages::{HookRun, Step};

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
