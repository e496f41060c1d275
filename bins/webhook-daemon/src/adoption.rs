//! Task adoption's schedule in the daemon (`GORGE_WEBHOOK_ADOPT_PHP_TASKS`):
//! once the database answers, the grants it needs are checked (a missing
//! one stops the daemon, named), then every [`SWEEP_EVERY`] new tasks are
//! leased, every [`ADOPTION_EVERY`] one round of the store's adoption
//! extends leases and leases any free task, and every [`ARCHIVE_EVERY`]
//! finished tasks are archived. What each does is
//! store-mysql's `adoption`.

use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};
use webhook_store_mysql::{MysqlStore, TASK_LEASE};

/// How often the tasks Phorge queued are looked for (those with no owner,
/// through an index): a new task is leased within about this long, unless
/// a candidate poll meets its request first; until then a taskmaster may
/// take it (then the daemon leaves it to PHP).
pub const SWEEP_EVERY: Duration = Duration::from_millis(200);

/// How often the full round runs: leases that are due extended, and
/// tasks with a lapsed lease or a yield leased.
pub const ADOPTION_EVERY: Duration = Duration::from_secs(1);

/// How often finished tasks are archived: the step reads every
/// daemon-leased task, and a finished task may wait a few seconds.
pub const ARCHIVE_EVERY: Duration = Duration::from_secs(5);

/// How long to wait before checking the grants again while the database
/// (or Phorge's worker database) cannot answer.
const CHECK_RETRY: Duration = Duration::from_secs(5);

/// A failed round is logged at most this often.
const FAILURE_LOG_EVERY: Duration = Duration::from_secs(60);

/// Runs task adoption until dropped; returns only if the account lacks
/// grants adoption needs, with each one as `PRIVILEGE on db.table`.
pub async fn adopt_php_tasks(store: Arc<MysqlStore>) -> Vec<String> {
    loop {
        match store.adoption_grants_missing().await {
            Ok(missing) if missing.is_empty() => break,
            Ok(missing) => return missing,
            Err(err) => {
                // Loud: delivery waits too (the candidate gate cannot read
                // the task queue either), e.g. for a wrong namespace.
                warn!(event = "php_task_adoption_waiting", error = %err,
                      "cannot check Phorge's task queue; adoption, and delivery, start when it can");
                tokio::time::sleep(CHECK_RETRY).await;
            }
        }
    }
    info!(
        event = "php_task_adoption_started",
        lease_secs = TASK_LEASE.as_secs(),
        "leasing Phorge's HeraldWebhookWorker tasks so phd does not run them"
    );
    let mut sweeps = tokio::time::interval(SWEEP_EVERY);
    sweeps.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_failure_logged: Option<tokio::time::Instant> = None;
    let mut last_round: Option<tokio::time::Instant> = None;
    let mut last_archive: Option<tokio::time::Instant> = None;
    loop {
        sweeps.tick().await;
        let now = tokio::time::Instant::now();
        let due =
            |last: Option<tokio::time::Instant>, every| last.is_none_or(|at| now - at >= every);
        let mut outcome = if due(last_round, ADOPTION_EVERY) {
            last_round = Some(now);
            store.adoption_round().await.map(|_| ())
        } else {
            store.adoption_sweep().await.map(|_| ())
        };
        if outcome.is_ok() && due(last_archive, ARCHIVE_EVERY) {
            last_archive = Some(now);
            outcome = store.adoption_archive().await.map(|_| ());
        }
        if let Err(err) = outcome {
            let now = tokio::time::Instant::now();
            if last_failure_logged.is_none_or(|at| now - at >= FAILURE_LOG_EVERY) {
                last_failure_logged = Some(now);
                warn!(event = "php_task_adoption_failed", error = %err,
                      "adoption round failed; leases last {} s, so rounds may fail that long \
                       before phd could take a task", TASK_LEASE.as_secs());
            }
        }
    }
}
