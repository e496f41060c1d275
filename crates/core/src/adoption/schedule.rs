//! Task adoption's schedule ([`run_rounds`]): how often new tasks are
//! leased, the full round runs and finished tasks are archived, as one
//! loop on an injected [`Clock`], so a simulation runs it on virtual time
//! and the daemon on its own.

use std::convert::Infallible;
use std::time::Duration;

use super::{TaskAdoption, TaskQueue};
use crate::clock::Clock;
use crate::store::StoreError;

/// How often the tasks Phorge queued are looked for (those with no owner):
/// a new task is leased within about this long, unless a candidate poll
/// meets its request first; until then a taskmaster may take it (then the
/// daemon leaves it to PHP).
pub const SWEEP_EVERY: Duration = Duration::from_millis(200);

/// How often the full round runs instead of a sweep: leases that are due
/// extended, and tasks with a lapsed lease or a yield leased.
pub const ADOPTION_EVERY: Duration = Duration::from_secs(1);

/// How often finished tasks are archived: the step reads every
/// daemon-leased task, and a finished task may wait a few seconds.
pub const ARCHIVE_EVERY: Duration = Duration::from_secs(5);

/// Runs task adoption on `queue` until dropped: a step every
/// [`SWEEP_EVERY`] (a step that overruns delays the next), which is the
/// full [`TaskAdoption::round`] once [`ADOPTION_EVERY`] has passed since
/// the last and otherwise a [`TaskAdoption::sweep`]; after a step that
/// worked, [`TaskAdoption::archive_ended`] once [`ARCHIVE_EVERY`] has
/// passed since the last. A failed step is handed to `failed` and the
/// schedule goes on: leases last [`super::TASK_LEASE`], so rounds may fail
/// that long before `phd` could take a task.
pub async fn run_rounds<F>(
    adoption: &TaskAdoption,
    queue: &dyn TaskQueue,
    clock: &dyn Clock,
    mut failed: F,
) -> Infallible
where
    F: FnMut(StoreError) + Send,
{
    let mut next_step = clock.monotonic();
    let mut last_round: Option<Duration> = None;
    let mut last_archive: Option<Duration> = None;
    loop {
        let early = next_step.saturating_sub(clock.monotonic());
        if !early.is_zero() {
            clock.sleep(early).await;
        }
        let now = clock.monotonic();
        next_step = now + SWEEP_EVERY;
        let due =
            |last: Option<Duration>, every| last.is_none_or(|at| now.saturating_sub(at) >= every);
        let mut outcome = if due(last_round, ADOPTION_EVERY) {
            last_round = Some(now);
            adoption.round(queue).await.map(|_| ())
        } else {
            adoption.sweep(queue).await.map(|_| ())
        };
        if outcome.is_ok() && due(last_archive, ARCHIVE_EVERY) {
            last_archive = Some(now);
            outcome = adoption.archive_ended(queue).await.map(|_| ());
        }
        if let Err(err) = outcome {
            failed(err);
        }
    }
}
