//! Task adoption in the daemon (`GORGE_WEBHOOK_ADOPT_PHP_TASKS`): once the
//! database answers, the grants it needs are checked as delivery's are
//! (`crate::access`; a missing one stops the daemon, named), then the
//! core's schedule ([`webhook_core::adoption::run_rounds`]) runs on the
//! store's task queue, its failures said in the log at most once a minute,
//! beside the keeping of the hooks' locks ([`keep_hook_locks`]); at a
//! stop, one last archive of the finished tasks and the hand-back of the
//! rest ([`hand_back_at_stop`]), within a bound.

use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};
use webhook_core::adoption::{run_rounds, LostTasks, TaskAdoption, TASK_LEASE};
use webhook_core::Clock;
use webhook_store_mysql::{KeptLocks, MysqlStore};

use crate::access::missing_once_answered;
use crate::pace::Pace;

/// A failed round is logged at most this often.
const FAILURE_LOG_EVERY: Duration = Duration::from_secs(60);

/// How often the kept hook locks follow Phorge's hooks: a hook created or
/// enabled is locked within this (until then a taskmaster that leases one
/// of its tasks first may deliver it), a lock lost with its session is
/// taken again within this.
pub const KEEP_LOCKS_EVERY: Duration = Duration::from_secs(1);

/// How long a stopping daemon may spend on its last archive. It runs beside
/// the diagnostics connections' own 5 s to finish, so the stop takes no
/// longer than before; an archive takes milliseconds on a database that
/// answers.
pub const ARCHIVE_AT_STOP_BOUND: Duration = Duration::from_secs(5);

/// Runs task adoption until dropped; returns only if the account lacks
/// grants adoption needs, with each one as `PRIVILEGE on db.table`.
pub async fn adopt_php_tasks(
    store: Arc<MysqlStore>,
    adoption: Arc<TaskAdoption>,
    clock: Arc<dyn Clock>,
) -> Vec<String> {
    // Said at warn: delivery waits too (the candidate gate cannot read the
    // task queue either), e.g. for a wrong namespace.
    let missing = missing_once_answered(
        "php_task_adoption_waiting",
        "cannot check Phorge's task queue; adoption, and delivery, start when it can",
        || store.adoption_grants_missing(),
        |_| {},
    )
    .await;
    if !missing.is_empty() {
        return missing;
    }
    info!(
        event = "php_task_adoption_started",
        lease_secs = TASK_LEASE.as_secs(),
        "leasing Phorge's HeraldWebhookWorker tasks so phd does not run them"
    );
    let mut failure_pace = Pace::every(FAILURE_LOG_EVERY);
    let rounds = run_rounds(&adoption, store.as_ref(), clock.as_ref(), |err| {
        if failure_pace.due() {
            warn!(event = "php_task_adoption_failed", error = %err,
                  "adoption round failed; leases last {} s, so rounds may fail that long \
                   before phd could take a task", TASK_LEASE.as_secs());
        }
    });
    tokio::select! {
        never = rounds => match never {},
        never = keep_hook_locks(&store) => match never {},
        never = say_lost_tasks(&adoption) => match never {},
    }
}

/// Tasks lost to `phd` are said at most this often, with the counts since
/// the last line.
const LOST_LOG_EVERY: Duration = Duration::from_secs(60);

/// Says, at most every [`LOST_LOG_EVERY`], how many tasks `phd`'s
/// taskmasters leased before this instance since the last line.
async fn say_lost_tasks(adoption: &TaskAdoption) -> std::convert::Infallible {
    let mut pace = Pace::every(LOST_LOG_EVERY);
    let mut said = LostTasks::default();
    loop {
        let lost = adoption.totals().lost;
        if lost.total() != said.total() && pace.due() {
            // Info, not a warning: on a busy pool a taskmaster leases most
            // new tasks first and yields them; a request left to PHP is
            // usually one a taskmaster held for the moment before its yield.
            info!(
                event = "php_tasks_lost",
                yielded = lost.yielded - said.yielded,
                left_to_php = lost.left_to_php - said.left_to_php,
                "phd taskmasters leased webhook tasks before this daemon: those yielded (the \
                 hook's lock held) were adopted and delivered here, one line each in phd's log; \
                 a request left to PHP is delivered by whichever of the two holds its hook's lock"
            );
            said = lost;
        }
        tokio::time::sleep(KEEP_LOCKS_EVERY).await;
    }
}

/// Keeps the lock of every hook that is not disabled, every
/// [`KEEP_LOCKS_EVERY`]: Phorge's worker takes a hook's lock without
/// waiting before it calls and yields its task when the lock is held, so
/// a taskmaster that leases a webhook task before the daemon does hands
/// it over (a yield, one line in phd's log) instead of delivering it. A
/// change in what is held is said once.
async fn keep_hook_locks(store: &MysqlStore) -> std::convert::Infallible {
    let mut said: Option<KeptLocks> = None;
    let mut failure_pace = Pace::every(FAILURE_LOG_EVERY);
    loop {
        match store.keep_hook_locks().await {
            Ok(kept) if said != Some(kept) => {
                said = Some(kept);
                info!(
                    event = "hook_locks_kept",
                    held = kept.held,
                    held_elsewhere = kept.elsewhere,
                    "holding the locks of the hooks Phorge's worker would call, so a phd \
                       taskmaster yields their tasks to this daemon; a lock held elsewhere \
                       (another instance, or a taskmaster mid-call) is taken once it is free"
                );
            }
            Ok(_) => {}
            Err(err) if failure_pace.due() => {
                warn!(event = "hook_locks_keep_failed", error = %err,
                      "the hooks' locks cannot be taken now; until they are, a phd \
                       taskmaster that leases a webhook task first may deliver it");
            }
            Err(_) => {}
        }
        tokio::time::sleep(KEEP_LOCKS_EVERY).await;
    }
}

/// A stopping daemon's last steps with Phorge's task queue, after its
/// deliveries wrote their results: archives, once, the daemon-leased tasks
/// whose request ended (the schedule archives only every 5 s, and a
/// finished task left under its lease would wait for its lease to lapse
/// and then be run by a taskmaster on a request no longer queued); frees
/// the hooks' locks; then hands back this instance's other tasks, so a
/// taskmaster, or another instance, runs them at once rather than after
/// their lease lapsed. The locks go first: a taskmaster that leased a
/// handed-back task while they were held would yield it for 15 s. Each
/// step bounded by [`ARCHIVE_AT_STOP_BOUND`]; what they did, or why not,
/// is said in the log.
pub async fn hand_back_at_stop(store: &MysqlStore, adoption: &TaskAdoption) {
    let archived = step_at_stop(
        "php_task_archive_at_stop_failed",
        "finished tasks stay leased until another instance archives them or their lease lapses",
        adoption.archive_ended(store),
    );
    if let Some(round) = archived.await {
        info!(
            event = "php_tasks_archived_at_stop",
            succeeded = round.archived_success,
            failed = round.archived_failure
        );
    }
    store.free_hook_locks().await;
    let handed = step_at_stop(
        "php_task_hand_back_failed",
        "unfinished tasks stay leased until another instance takes them or their lease lapses",
        adoption.hand_back(store),
    );
    if let Some(released) = handed.await {
        info!(
            event = "php_tasks_handed_back",
            released, "unfinished tasks are free for phd or another instance now"
        );
    }
}

/// One step of a stop, within [`ARCHIVE_AT_STOP_BOUND`]: its result, or
/// `None` when it failed or the database did not answer in time, said as
/// `failed_event` with what is `left` behind.
async fn step_at_stop<T>(
    failed_event: &'static str,
    left: &'static str,
    step: impl std::future::Future<Output = Result<T, webhook_core::StoreError>>,
) -> Option<T> {
    match tokio::time::timeout(ARCHIVE_AT_STOP_BOUND, step).await {
        Ok(Ok(done)) => Some(done),
        Ok(Err(err)) => {
            warn!(event = failed_event, error = %err, "{left}");
            None
        }
        Err(_) => {
            warn!(
                event = failed_event,
                bound_secs = ARCHIVE_AT_STOP_BOUND.as_secs(),
                "the database did not answer in time; {left}"
            );
            None
        }
    }
}
