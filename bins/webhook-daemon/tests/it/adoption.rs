//! Task adoption end to end (`GORGE_WEBHOOK_ADOPT_PHP_TASKS=1`), on Phorge's
//! worker tables beside the herald database, with a taskmaster played by
//! the test through Phorge's own lease protocol: the daemon leases what
//! `phd` could run, archives it once its request ends, leaves a task a
//! taskmaster holds (and its request) alone, fails rows as silent while
//! Phorge is, a stop or a second instance loses and doubles nothing, a
//! stop archives what ended first, and an account without the worker grants
//! stops the daemon, naming them.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use webhook_core::memory_store::NewRequest;
use webhook_core::{Hook, RequestStatus};
use webhook_test_support::mariadb::{with_phorge_side, PhorgeSide};
use webhook_test_support::{with_db, Receiver, Reply, TestDb};

use crate::daemon::Daemon;
use crate::support::until;

const DEADLINE: Duration = Duration::from_secs(60);
const HOOK: &str = "PHID-HWBH-adoptionaaaaaaaaaaaa";
const FOREVER: &str = r#"{"retry":"forever","triggerPHIDs":["PHID-HRUL-adoption"]}"#;
const NEVER: &str = r#"{"retry":"never","triggerPHIDs":["PHID-HRUL-adoption"]}"#;
const TASKMASTER: &str = "31337:1700000000:php-host:1";

/// The hand-off tests' daemon, adopting Phorge's tasks, with short
/// retries.
fn env(namespace: &str) -> Vec<(String, String)> {
    let mut env = crate::handoff::env(namespace);
    env.extend(
        [
            ("GORGE_WEBHOOK_ADOPT_PHP_TASKS", "1"),
            ("GORGE_WEBHOOK_RETRY_BACKOFF_SEC", "1"),
            // Retries wait out the claim lease at least: keep it short.
            ("GORGE_WEBHOOK_DELIVERY_TIMEOUT", "2"),
            ("GORGE_WEBHOOK_CLAIM_LEASE_SEC", "4"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned())),
    );
    env
}

async fn hook_to(db: &TestDb, receiver: &Receiver) {
    db.insert_hook(&Hook {
        phid: HOOK.to_owned(),
        name: "adoption".to_owned(),
        uri: receiver.url("/adoption"),
        status: "enabled".to_owned(),
        hmac_key: "abcdefghijklmnopqrstuvwxyz234567".to_owned(),
    })
    .await;
}

/// A queued request and its task, as Phorge's `queueCall` leaves them.
async fn request_with_task(db: &TestDb, side: &PhorgeSide, properties: &str) -> (u64, u64) {
    let id = db
        .insert_request(&NewRequest::queued(HOOK, properties))
        .await;
    let task = side.queue_webhook_task(&db.row(id).await.phid).await;
    (id, task)
}

/// Whether every listed task is archived with `result`.
async fn all_archived(side: &PhorgeSide, tasks: &[u64], result: u32) -> bool {
    for task in tasks {
        match side.archived_task(*task).await {
            Some(archived) if archived.result == result => {}
            _ => return false,
        }
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adopted_tasks_are_not_runnable_by_phd_and_are_archived_once_sent() {
    with_db(|db| async move {
        let db = &db;
        with_phorge_side(&db.namespace, |side| async move {
            let receiver = Receiver::start().await;
            hook_to(db, &receiver).await;
            // A request in its retry spacing is no candidate, but its task
            // must still be taken from phd.
            receiver.script("/adoption", [Reply::status(500)]);
            receiver.always("/adoption", Reply::status(200));
            let mut tasks = Vec::new();
            let mut rows = Vec::new();
            for _ in 0..5 {
                let (id, task) = request_with_task(db, &side, FOREVER).await;
                rows.push(id);
                tasks.push(task);
            }
            let other_class = side.queue_task("PhabricatorSearchWorker", None).await;
            let mut daemon = Daemon::start("adopt", &env(&db.namespace)).await;
            until(&daemon, "every row sent", async || {
                for id in &rows {
                    if db.row(*id).await.status != RequestStatus::Sent {
                        return false;
                    }
                }
                true
            })
            .await;
            until(&daemon, "every task archived as succeeded", async || {
                all_archived(&side, &tasks, 0).await
            })
            .await;
            // Tasks queued while it runs are taken too.
            let (late_row, late_task) = request_with_task(db, &side, NEVER).await;
            until(&daemon, "the late task archived", async || {
                all_archived(&side, &[late_task], 0).await
            })
            .await;
            assert_eq!(db.row(late_row).await.status, RequestStatus::Sent);
            assert_eq!(receiver.requests().len(), 7, "one 500, then each row once");
            // The other class was never touched: phd still finds it.
            assert_eq!(side.taskmaster_lease(TASKMASTER).await, Some(other_class));
            let text = daemon.get("/metrics", &[]).await.text();
            assert!(
                text.contains("gorge_webhook_php_tasks_archived_total{result=\"success\"} 6"),
                "{text}"
            );
            assert!(!daemon.stderr().contains("php_delivery_detected"));
            daemon.terminate();
            daemon.wait_exit(DEADLINE).await;
        })
        .await;
    })
    .await;
}

/// The issue's case: the daemon's attempt fails (500) on a `retry=forever`
/// row, and a PHP taskmaster looks for work right after. It finds none,
/// and the daemon's retry is the only other call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_500_then_a_php_task_run_is_delivered_once() {
    with_db(|db| async move {
        let db = &db;
        with_phorge_side(&db.namespace, |side| async move {
            let receiver = Receiver::start().await;
            hook_to(db, &receiver).await;
            receiver.script("/adoption", [Reply::status(500)]);
            receiver.always(
                "/adoption",
                Reply::status(200).after(Duration::from_millis(1)),
            );
            let (id, task) = request_with_task(db, &side, FOREVER).await;
            let mut env = env(&db.namespace);
            env.push(("GORGE_WEBHOOK_RETRY_BACKOFF_SEC".to_owned(), "3".to_owned()));
            let mut daemon = Daemon::start("adopt-500", &env).await;
            receiver.wait_for(1, DEADLINE).await;
            until(&daemon, "the 500 written back", async || {
                db.row(id).await.last_request_result == webhook_core::LastResult::Fail
            })
            .await;
            assert_eq!(db.row(id).await.status, RequestStatus::Queued);
            // PHP's taskmaster, 0 to 3 s after the failure: nothing to run.
            for _ in 0..10 {
                assert_eq!(
                    side.taskmaster_lease(TASKMASTER).await,
                    None,
                    "phd found the task"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            until(&daemon, "the retry sent", async || {
                db.row(id).await.status == RequestStatus::Sent
            })
            .await;
            until(&daemon, "the task archived", async || {
                all_archived(&side, &[task], 0).await
            })
            .await;
            assert_eq!(side.taskmaster_lease(TASKMASTER).await, None);
            let requests = receiver.requests();
            assert_eq!(requests.len(), 2, "the 500 and the retry, nothing else");
            daemon.terminate();
            daemon.wait_exit(DEADLINE).await;
        })
        .await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_a_taskmaster_holds_is_left_to_it_until_its_lease_lapses() {
    with_db(|db| async move {
        let db = &db;
        with_phorge_side(&db.namespace, |side| async move {
            let receiver = Receiver::start().await;
            hook_to(db, &receiver).await;
            receiver.always("/adoption", Reply::status(200));
            let (held_row, held_task) = request_with_task(db, &side, NEVER).await;
            side.set_lease(held_task, Some(TASKMASTER), Some(3_600))
                .await;
            let (free_row, free_task) = request_with_task(db, &side, NEVER).await;
            let mut daemon = Daemon::start("adopt-held", &env(&db.namespace)).await;
            until(&daemon, "the free row sent and archived", async || {
                db.row(free_row).await.status == RequestStatus::Sent
                    && all_archived(&side, &[free_task], 0).await
            })
            .await;
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            let held = db.row(held_row).await;
            assert!(
                held.is_fresh() && held.status == RequestStatus::Queued,
                "{held:?}"
            );
            let task = side.active_task(held_task).await.expect("still active");
            assert_eq!(task.lease_owner.as_deref(), Some(TASKMASTER));
            // The taskmaster is gone and its lease lapses: adopted, sent.
            side.set_lease(held_task, Some(TASKMASTER), Some(-1)).await;
            until(
                &daemon,
                "the lapsed task's row sent and archived",
                async || {
                    db.row(held_row).await.status == RequestStatus::Sent
                        && all_archived(&side, &[held_task], 0).await
                },
            )
            .await;
            assert_eq!(receiver.requests().len(), 2);
            daemon.terminate();
            daemon.wait_exit(DEADLINE).await;
        })
        .await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_adoption_silent_mode_fails_rows_as_phorges_worker_and_archives_them() {
    with_db(|db| async move {
        let db = &db;
        with_phorge_side(&db.namespace, |side| async move {
            let receiver = Receiver::start().await;
            hook_to(db, &receiver).await;
            side.set_silent(Some("true")).await;
            let (id, task) = request_with_task(db, &side, FOREVER).await;
            let mut daemon = Daemon::start("adopt-silent", &env(&db.namespace)).await;
            until(
                &daemon,
                "the row failed as silent and its task archived",
                async || {
                    db.row(id).await.status == RequestStatus::Failed
                        && all_archived(&side, &[task], 0).await
                },
            )
            .await;
            let row = db.row(id).await;
            assert_eq!(row.last_request_result, webhook_core::LastResult::None);
            assert_eq!(row.last_request_epoch, 0);
            let properties: serde_json::Value =
                serde_json::from_str(&row.properties).expect("properties");
            assert_eq!(properties["errorType"], "hook");
            assert_eq!(properties["errorCode"], "silent");
            assert!(receiver.requests().is_empty());
            // The log says what this mode does, not the hand-off's "rows
            // stay queued".
            let said: Vec<String> = daemon
                .stderr()
                .lines()
                .filter(|l| l.contains(r#"event="silent_mode_on""#))
                .map(str::to_owned)
                .collect();
            assert_eq!(said.len(), 1, "{said:?}");
            assert!(said[0].contains("failed hook/silent"), "{said:?}");
            assert!(!said[0].contains("stay queued"), "{said:?}");
            daemon.terminate();
            daemon.wait_exit(DEADLINE).await;
        })
        .await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_killed_mid_delivery_keeps_phd_out_and_a_restart_finishes() {
    with_db(|db| async move {
        let db = &db;
        with_phorge_side(&db.namespace, |side| async move {
            let receiver = Receiver::start().await;
            hook_to(db, &receiver).await;
            receiver.script(
                "/adoption",
                [Reply::status(200).after(Duration::from_secs(30))],
            );
            receiver.always("/adoption", Reply::status(200));
            let (id, task) = request_with_task(db, &side, NEVER).await;
            let env = env(&db.namespace);
            let mut first = Daemon::start("adopt-kill", &env).await;
            receiver.wait_for(1, DEADLINE).await;
            first.kill_hard().await;
            // Its lease outlives it: phd cannot take the task.
            assert_eq!(side.taskmaster_lease(TASKMASTER).await, None);
            let owner = side.active_task(task).await.expect("active").lease_owner;
            assert!(owner.expect("leased").starts_with("gorge-webhook:"));
            let mut second = Daemon::start("adopt-restart", &env).await;
            until(&second, "the row sent and its task archived", async || {
                db.row(id).await.status == RequestStatus::Sent
                    && all_archived(&side, &[task], 0).await
            })
            .await;
            assert_eq!(side.archived_count().await, 1);
            second.terminate();
            second.wait_exit(DEADLINE).await;
        })
        .await;
    })
    .await;
}

/// The schedule archives finished tasks every 5 s; a daemon stopped in
/// between used to leave its last delivery's task in `worker_activetask`
/// under its lease, for a taskmaster to run once the lease lapsed. Stopped
/// with a call in flight (its schedule stops with the signal), it writes
/// the call's result and then archives the task before it exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_archives_the_finished_tasks_it_leases_before_it_exits() {
    with_db(|db| async move {
        let db = &db;
        with_phorge_side(&db.namespace, |side| async move {
            let receiver = Receiver::start().await;
            hook_to(db, &receiver).await;
            receiver.always(
                "/adoption",
                Reply::status(200).after(Duration::from_millis(1_500)),
            );
            let (id, task) = request_with_task(db, &side, NEVER).await;
            let mut daemon = Daemon::start("adopt-stop", &env(&db.namespace)).await;
            receiver.wait_for(1, DEADLINE).await;
            daemon.terminate();
            let status = daemon.wait_exit(DEADLINE).await;
            assert_eq!(status.code(), Some(0), "{}", daemon.log());
            assert_eq!(db.row(id).await.status, RequestStatus::Sent);
            assert!(
                all_archived(&side, &[task], 0).await,
                "the task is not archived as succeeded\n{}",
                daemon.log()
            );
            assert!(side.active_task(task).await.is_none(), "left active");
            let log = daemon.stderr();
            assert!(
                log.contains(r#"event="php_tasks_archived_at_stop" succeeded=1 failed=0"#),
                "{log}"
            );
        })
        .await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_deliver_each_row_once_and_archive_each_task_once() {
    with_db(|db| async move {
        let db = &db;
        with_phorge_side(&db.namespace, |side| async move {
            let receiver = Receiver::start().await;
            hook_to(db, &receiver).await;
            receiver.always("/adoption", Reply::status(200));
            let mut tasks = Vec::new();
            for _ in 0..30 {
                tasks.push(request_with_task(db, &side, NEVER).await.1);
            }
            let mut one = Daemon::start("adopt-one", &env(&db.namespace)).await;
            let mut two = Daemon::start("adopt-two", &env(&db.namespace)).await;
            until(&one, "every task archived", async || {
                all_archived(&side, &tasks, 0).await
            })
            .await;
            assert_eq!(side.archived_count().await, 30);
            let requests = receiver.requests();
            assert_eq!(requests.len(), 30, "each row once");
            for daemon in [&mut one, &mut two] {
                daemon.terminate();
                daemon.wait_exit(DEADLINE).await;
            }
        })
        .await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_without_the_worker_grants_stops_the_daemon_naming_them() {
    with_db(|db| async move {
        let db = &db;
        with_phorge_side(&db.namespace, |side| async move {
            let user = format!("{}_noadopt", db.namespace);
            let mut conn = webhook_test_support::mariadb::server_conn().await;
            for statement in [
                format!("CREATE USER '{user}'@'%'"),
                format!(
                    "GRANT SELECT, UPDATE ON `{}`.* TO '{user}'@'%'",
                    db.database
                ),
                format!("GRANT SELECT ON `{}`.* TO '{user}'@'%'", side.worker),
            ] {
                conn.query_drop(statement)
                    .await
                    .expect("set up the account");
            }
            let mut env = env(&db.namespace);
            env.push(("GORGE_WEBHOOK_MYSQL_USER".to_owned(), user.clone()));
            let mut daemon = Daemon::spawn("adopt-grants", &[], &env);
            let status = daemon.try_wait_exit(DEADLINE).await;
            conn.query_drop(format!("DROP USER '{user}'@'%'"))
                .await
                .expect("drop the account");
            conn.disconnect().await.expect("disconnect");
            let status = status.expect("the daemon stops by itself");
            assert_eq!(status.code(), Some(1), "{}", daemon.log());
            let log = daemon.stderr();
            let ns = &db.namespace;
            for missing in [
                format!("UPDATE on {ns}_worker.worker_activetask"),
                format!("DELETE on {ns}_worker.worker_activetask"),
                format!("INSERT on {ns}_worker.worker_archivetask"),
            ] {
                assert!(log.contains(&missing), "{missing} not named:\n{log}");
            }
            assert!(log.contains("php_task_adoption_refused"), "{log}");
        })
        .await;
    })
    .await;
}
