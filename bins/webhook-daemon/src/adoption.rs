//! Task adoption in the daemon (`GORGE_WEBHOOK_ADOPT_PHP_TASKS`): once the
//! database answers, the grants it needs are checked as delivery's are
//! (`crate::access`; a missing one stops the daemon, named), then the
//! core's schedule ([`webhook_core::adoption::run_rounds`]) runs on the
//! store's task queue, its failures said in the log at most once a minute;
//! at a stop, one last archive of the finished tasks ([`archive_at_stop`]),
//! within a bound.

use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};
use webhook_core::adoption::{run_rounds, TaskAdoption, TASK_LEASE};
use webhook_core::Clock;
use webhook_store_mysql::MysqlStore;

use crate::access::missing_once_answered;

/// A failed round is logged at most this often.
const FAILURE_LOG_EVERY: Duration = Duration::from_secs(60);

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
    let mut last_failure_logged: Option<tokio::time::Instant> = None;
    let never = run_rounds(&adoption, store.as_ref(), clock.as_ref(), |err| {
        let now = tokio::time::Instant::now();
        if last_failure_logged.is_none_or(|at| now - at >= FAILURE_LOG_EVERY) {
            last_failure_logged = Some(now);
            warn!(event = "php_task_adoption_failed", error = %err,
                  "adoption round failed; leases last {} s, so rounds may fail that long \
                   before phd could take a task", TASK_LEASE.as_secs());
        }
    })
    .await;
    match never {}
}

/// Archives, once, the daemon-leased tasks whose request ended: a stopping
/// daemon's last step, after its deliveries wrote their results. The
/// schedule archives only every 5 s, and a finished task left under its
/// lease stays in Phorge's queue until another instance archives it or the
/// lease lapses and a taskmaster runs it, on a request no longer queued.
/// Bounded by [`ARCHIVE_AT_STOP_BOUND`]; what it did, or why not, is said in
/// the log.
pub async fn archive_at_stop(store: &MysqlStore, adoption: &TaskAdoption) {
    match tokio::time::timeout(ARCHIVE_AT_STOP_BOUND, adoption.archive_ended(store)).await {
        Ok(Ok(round)) => info!(
            event = "php_tasks_archived_at_stop",
            succeeded = round.archived_success,
            failed = round.archived_failure
        ),
        Ok(Err(err)) => warn!(event = "php_task_archive_at_stop_failed", error = %err,
                              "finished tasks stay leased until another instance archives them \
                               or their lease lapses"),
        Err(_) => warn!(
            event = "php_task_archive_at_stop_failed",
            bound_secs = ARCHIVE_AT_STOP_BOUND.as_secs(),
            "the database did not answer in time; finished tasks stay leased until \
                         another instance archives them or their lease lapses"
        ),
    }
}
