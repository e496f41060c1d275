//! Task adoption against Phorge's task tables on the real MariaDB: which
//! tasks are leased and which are left to a taskmaster, what a taskmaster
//! can still run, the candidate gate, the archive as Phorge writes it, a
//! lapsed lease, two instances, and the grants check.

use std::collections::HashSet;
use std::sync::Arc;

use mysql_async::prelude::Queryable;
use webhook_core::adoption::{AdoptionRound, TaskAdoption, TASK_GRACE_SECS};
use webhook_core::memory_store::NewRequest;
use webhook_core::windows::{Settings, Windows};
use webhook_core::{CandidateQuery, RequestStatus, Store, StoreError};
use webhook_store_mysql::MysqlStore;
use webhook_test_support::mariadb::{server_conn, with_phorge_side, PhorgeSide};

use crate::fixture::{with_db, TestDb};

const HOOK: &str = "PHID-HWBH-adoptaaaaaaaaaaaaaaa";
const TASKMASTER: &str = "4242:1700000000:php-host:1";

/// A store adopting Phorge's tasks as instance `pid` of `test-host`, and
/// its adoption, whose rounds run on the store's task queue.
struct Adopting {
    store: MysqlStore,
    adoption: Arc<TaskAdoption>,
}

impl Adopting {
    async fn round(&self) -> Result<AdoptionRound, StoreError> {
        self.adoption.round(&self.store).await
    }

    async fn sweep(&self) -> Result<u64, StoreError> {
        self.adoption.sweep(&self.store).await
    }

    async fn archive(&self) -> Result<AdoptionRound, StoreError> {
        self.adoption.archive_ended(&self.store).await
    }
}

fn adopting(db: &TestDb, pid: u32) -> Adopting {
    let adoption = Arc::new(TaskAdoption::new("test-host", pid));
    Adopting {
        store: db.store().with_task_adoption(Arc::clone(&adoption)),
        adoption,
    }
}

fn query(now: u64) -> CandidateQuery {
    CandidateQuery {
        cutoffs: Windows::try_new(Settings::default())
            .expect("defaults")
            .cutoffs(now),
        limit: 100,
        exclude_hooks: Vec::new(),
    }
}

async fn candidate_ids(adopting: &Adopting, now: u64) -> Vec<u64> {
    adopting
        .store
        .candidates(&query(now))
        .await
        .expect("candidates")
        .into_iter()
        .map(|row| row.id)
        .collect()
}

/// Ends a request as a deliverer would: `status`, `properties`.
async fn set_outcome(db: &TestDb, id: u64, status: RequestStatus, properties: &str) {
    let mut conn = db.conn().await;
    conn.exec_drop(
        "UPDATE herald_webhookrequest SET status = ?, properties = ? WHERE id = ?",
        (status.as_str(), properties, id),
    )
    .await
    .expect("end the request");
    conn.disconnect().await.expect("disconnect");
}

/// A queued request and its webhook task, as Phorge queues both.
async fn request_with_task(db: &TestDb, side: &PhorgeSide) -> (u64, String, u64) {
    let id = db.insert_request(&NewRequest::queued(HOOK, "{}")).await;
    let phid = db.row(id).await.phid;
    let task = side.queue_webhook_task(&phid).await;
    (id, phid, task)
}

#[tokio::test]
async fn free_webhook_tasks_are_leased_and_a_taskmaster_finds_none_of_them() {
    with_db(|db| async move {
        let db = &db;
        with_phorge_side(&db.namespace, |side| async move {
            let store = adopting(db, 1);
            let (_, _, unleased) = request_with_task(db, &side).await;
            let (_, _, yielded) = request_with_task(db, &side).await;
            side.set_lease(yielded, Some("(yield)"), Some(15)).await;
            let (_, _, lapsed) = request_with_task(db, &side).await;
            side.set_lease(lapsed, Some("1:1:gone-host:9"), Some(-1))
                .await;
            let (_, _, running) = request_with_task(db, &side).await;
            side.set_lease(running, Some(TASKMASTER), Some(7_000)).await;
            let other_class = side.queue_task("PhabricatorSearchWorker", None).await;

            let round = store.round().await.expect("round");
            assert_eq!(round.adopted, 3, "{round:?}");
            for id in [unleased, yielded, lapsed] {
                let task = side.active_task(id).await.expect("still active");
                let owner = task.lease_owner.expect("leased");
                assert!(owner.starts_with("gorge-webhook:test-host:1:"), "{owner}");
                let left = task.lease_left_secs.expect("expiry");
                assert!((295..=300).contains(&left), "lease left {left}");
            }
            let running_task = side.active_task(running).await.expect("active");
            assert_eq!(running_task.lease_owner.as_deref(), Some(TASKMASTER));
            // A taskmaster now finds only the other class's task.
            assert_eq!(side.taskmaster_lease("7:7:php:1").await, Some(other_class));
            assert_eq!(side.taskmaster_lease("7:7:php:2").await, None);
        })
        .await;
    })
    .await;
}

#[tokio::test]
async fn only_rows_whose_task_a_daemon_leases_are_candidates() {
    with_db(|db| async move {
        let db = &db;
        with_phorge_side(&db.namespace, |side| async move {
            let store = adopting(db, 1);
            let (free, _, free_task) = request_with_task(db, &side).await;
            let (php, _, php_task) = request_with_task(db, &side).await;
            side.set_lease(php_task, Some(TASKMASTER), Some(7_000))
                .await;
            let (other_daemon, _, other_task) = request_with_task(db, &side).await;
            side.set_lease(other_task, Some("gorge-webhook:elsewhere:9:9:1"), Some(300))
                .await;
            let (ending, _, ending_task) = request_with_task(db, &side).await;
            side.set_lease(ending_task, Some("gorge-webhook:elsewhere:9:9:1"), Some(5))
                .await;
            let now = db.now().await;
            // Rows without a task: one just made (Phorge inserts the task
            // next), one older than the grace by the server's clock.
            let fresh_taskless = db.insert_request(&NewRequest::queued(HOOK, "{}")).await;
            let old_taskless = db
                .insert_request(&NewRequest {
                    date_created: Some(now - TASK_GRACE_SECS),
                    ..NewRequest::queued(HOOK, "{}")
                })
                .await;

            // The free task is leased on the spot; another instance's lease
            // counts (every instance extends every daemon lease); the
            // taskmaster's task, a daemon lease about to lapse and a fresh
            // row with no task yet wait, judged by the server's clock
            // whatever the poll's says.
            assert_eq!(
                candidate_ids(&store, now + 3_600).await,
                vec![free, other_daemon, old_taskless]
            );
            assert_eq!(
                candidate_ids(&store, now).await,
                vec![free, other_daemon, old_taskless]
            );
            let owner = side
                .active_task(free_task)
                .await
                .expect("active")
                .lease_owner;
            assert!(owner
                .expect("leased")
                .starts_with("gorge-webhook:test-host:1:"));
            // Once the taskmaster's lease lapses, its task is adopted and
            // its row goes: at the next look, as a row left to PHP stays out
            // of polls for a few seconds (so many such rows cannot fill
            // every poll).
            side.set_lease(php_task, Some(TASKMASTER), Some(-1)).await;
            let later = now + 3_600;
            assert!(!candidate_ids(&store, later).await.contains(&php));
            let ids = candidate_ids(&store, later + 5).await;
            assert!(ids.contains(&php), "{ids:?}");
            assert!(!ids.contains(&ending), "{ids:?}");
            assert!(!ids.contains(&fresh_taskless), "{ids:?}");
            assert!(store.adoption.totals().rows_waiting_for_php >= 2);
        })
        .await;
    })
    .await;
}

#[tokio::test]
async fn tasks_of_ended_requests_are_archived_as_phorges_worker_ends_them() {
    with_db(|db| async move {
        let db = &db;
        with_phorge_side(&db.namespace, |side| async move {
            let store = adopting(db, 1);
            let (sent, _, sent_task) = request_with_task(db, &side).await;
            let (silent, _, silent_task) = request_with_task(db, &side).await;
            let (http, _, http_task) = request_with_task(db, &side).await;
            let (_, _, queued_task) = request_with_task(db, &side).await;
            store.round().await.expect("round");
            // A task whose request is gone: adopted, then archived.
            let gone_task = side
                .queue_webhook_task("PHID-HWBR-gonegonegonegonegone")
                .await;
            set_outcome(db, sent, RequestStatus::Sent, "{}").await;
            set_outcome(
                db,
                silent,
                RequestStatus::Failed,
                r#"{"errorType":"hook","errorCode":"silent"}"#,
            )
            .await;
            set_outcome(
                db,
                http,
                RequestStatus::Failed,
                r#"{"errorType":"http","errorCode":500}"#,
            )
            .await;

            store.round().await.expect("round");
            let round = store.archive().await.expect("archive");
            assert_eq!(
                (round.archived_success, round.archived_failure),
                (2, 2),
                "{round:?}"
            );
            for (task, result) in [
                (sent_task, 0),
                (silent_task, 0),
                (http_task, 1),
                (gone_task, 1),
            ] {
                assert!(
                    side.active_task(task).await.is_none(),
                    "task {task} left the queue"
                );
                let archived = side.archived_task(task).await.expect("archived, same id");
                assert_eq!(archived.result, result, "task {task}");
                assert_eq!(archived.task_class, "HeraldWebhookWorker");
                assert!(archived
                    .lease_owner
                    .expect("owner kept")
                    .starts_with("gorge-webhook:"));
                assert!(archived.archived_epoch_set);
                assert!(archived.data_id > 0);
            }
            assert!(
                side.active_task(queued_task).await.is_some(),
                "a queued request's task stays"
            );
            assert_eq!(side.archived_count().await, 4);
            // Nothing is archived twice.
            let again = store.archive().await.expect("archive");
            assert_eq!((again.archived_success, again.archived_failure), (0, 0));
        })
        .await;
    })
    .await;
}

#[tokio::test]
async fn leases_are_extended_while_held_and_taken_again_under_a_new_owner_when_lapsed() {
    with_db(|db| async move {
        let db = &db;
        with_phorge_side(&db.namespace, |side| async move {
            let store = adopting(db, 1);
            let (_, _, due) = request_with_task(db, &side).await;
            let (_, _, lapsed) = request_with_task(db, &side).await;
            store.round().await.expect("round");
            let owner_of = |task: Option<webhook_test_support::worker_tasks::ActiveTask>| {
                task.expect("active").lease_owner.expect("leased")
            };
            let due_owner = owner_of(side.active_task(due).await);
            let lapsed_owner = owner_of(side.active_task(lapsed).await);
            side.set_lease(due, Some(&due_owner), Some(30)).await;
            side.set_lease(lapsed, Some(&lapsed_owner), Some(-1)).await;

            let round = store.round().await.expect("round");
            assert_eq!((round.renewed, round.adopted), (1, 1), "{round:?}");
            let renewed = side.active_task(due).await.expect("active");
            assert_eq!(renewed.lease_owner.as_deref(), Some(due_owner.as_str()));
            assert!(renewed.lease_left_secs.expect("expiry") >= 295);
            // A taskmaster that saw the lapsed lease cannot take it now:
            // the owner it would re-check changed.
            let retaken = owner_of(side.active_task(lapsed).await);
            assert_ne!(retaken, lapsed_owner);
        })
        .await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_lease_each_task_once_and_archive_each_once() {
    with_db(|db| async move {
        let db = &db;
        with_phorge_side(&db.namespace, |side| async move {
            let (one, two) = (adopting(db, 1), adopting(db, 2));
            let mut requests = Vec::new();
            for _ in 0..40 {
                requests.push(request_with_task(db, &side).await);
            }
            let (a, b) = tokio::join!(one.round(), two.round());
            let adopted = a.expect("one").adopted + b.expect("two").adopted;
            assert_eq!(adopted, 40);
            for (id, _, _) in &requests {
                set_outcome(db, *id, RequestStatus::Sent, "{}").await;
            }
            let mut archived = 0;
            for _ in 0..2 {
                let (a, b) = tokio::join!(one.archive(), two.archive());
                for round in [a, b] {
                    archived += round.expect("round").archived_success;
                }
            }
            assert_eq!(archived, 40);
            assert_eq!(side.archived_count().await, 40);
            let tasks: HashSet<u64> = requests.iter().map(|(_, _, task)| *task).collect();
            for task in tasks {
                assert!(side.active_task(task).await.is_none());
            }
        })
        .await;
    })
    .await;
}

#[tokio::test]
async fn missing_grants_are_named_one_by_one() {
    with_db(|db| async move {
        let db = &db;
        with_phorge_side(&db.namespace, |side| async move {
            assert!(db
                .store()
                .adoption_grants_missing()
                .await
                .expect("checked")
                .is_empty());
            let user = format!("{}_adopt", db.namespace);
            let mut conn = server_conn().await;
            conn.query_drop(format!("CREATE USER '{user}'@'%'"))
                .await
                .expect("user");
            for grant in [
                format!("GRANT SELECT ON `{}`.* TO '{user}'@'%'", db.database),
                format!(
                    "GRANT SELECT ON `{}`.worker_activetask TO '{user}'@'%'",
                    side.worker
                ),
            ] {
                conn.query_drop(grant).await.expect("grant");
            }
            let mut config = webhook_test_support::mariadb::config(&db.namespace);
            config.user = user.clone();
            let missing = MysqlStore::new(&config)
                .expect("config")
                .adoption_grants_missing()
                .await;
            conn.query_drop(format!("DROP USER '{user}'@'%'"))
                .await
                .expect("drop user");
            conn.disconnect().await.expect("disconnect");
            let ns = &db.namespace;
            assert_eq!(
                missing.expect("checked"),
                vec![
                    format!("UPDATE on {ns}_worker.worker_activetask"),
                    format!("DELETE on {ns}_worker.worker_activetask"),
                    format!("INSERT on {ns}_worker.worker_archivetask"),
                ]
            );
        })
        .await;
    })
    .await;
}

#[tokio::test]
async fn a_taskmaster_that_saw_a_lapsed_lease_cannot_take_it_once_readopted() {
    with_db(|db| async move {
        let db = &db;
        with_phorge_side(&db.namespace, |side| async move {
            let store = adopting(db, 1);
            let (_, _, task) = request_with_task(db, &side).await;
            store.round().await.expect("round");
            let seen = side
                .active_task(task)
                .await
                .expect("active")
                .lease_owner
                .expect("leased");
            // The lease lapses (a database away too long); a taskmaster's
            // lease query sees it (SELECT id, leaseOwner ...)...
            side.set_lease(task, Some(&seen), Some(-1)).await;
            // ...the daemon takes it again first...
            let round = store.round().await.expect("round");
            assert_eq!(round.adopted, 1);
            // ...and the taskmaster's UPDATE, re-checking the owner it saw,
            // matches nothing.
            let mut conn = server_conn().await;
            conn.exec_drop(
                format!(
                    "UPDATE `{}`.worker_activetask SET leaseOwner = ?, \
                     leaseExpires = UNIX_TIMESTAMP() + 7200 WHERE id = ? AND leaseOwner = ?",
                    side.worker
                ),
                (TASKMASTER, task, &seen),
            )
            .await
            .expect("the taskmaster's update");
            assert_eq!(
                conn.affected_rows(),
                0,
                "the taskmaster took a re-adopted task"
            );
            conn.disconnect().await.expect("disconnect");
            let owner = side.active_task(task).await.expect("active").lease_owner;
            assert!(owner
                .expect("leased")
                .starts_with("gorge-webhook:test-host:1:"));
        })
        .await;
    })
    .await;
}

#[tokio::test]
async fn a_stopped_instances_leases_are_extended_by_the_next() {
    with_db(|db| async move {
        let db = &db;
        with_phorge_side(&db.namespace, |side| async move {
            let (_, _, task) = request_with_task(db, &side).await;
            adopting(db, 1).round().await.expect("round");
            let owner = side
                .active_task(task)
                .await
                .expect("active")
                .lease_owner
                .expect("leased");
            // Instance 1 stops; its lease runs down while its row waits
            // (retry spacing, a slow hook).
            side.set_lease(task, Some(&owner), Some(60)).await;
            let round = adopting(db, 2).round().await.expect("round");
            assert_eq!(round.renewed, 1, "{round:?}");
            let renewed = side.active_task(task).await.expect("active");
            assert_eq!(renewed.lease_owner.as_deref(), Some(owner.as_str()));
            assert!(renewed.lease_left_secs.expect("expiry") >= 295);
        })
        .await;
    })
    .await;
}

#[tokio::test]
async fn the_frequent_sweep_leases_new_tasks_only() {
    with_db(|db| async move {
        let db = &db;
        with_phorge_side(&db.namespace, |side| async move {
            let store = adopting(db, 1);
            let (_, _, fresh) = request_with_task(db, &side).await;
            let (_, _, yielded) = request_with_task(db, &side).await;
            side.set_lease(yielded, Some("(yield)"), Some(15)).await;
            let other_class = side.queue_task("PhabricatorSearchWorker", None).await;
            assert_eq!(store.sweep().await.expect("sweep"), 1);
            let leased = |task: Option<webhook_test_support::worker_tasks::ActiveTask>| {
                task.and_then(|t| t.lease_owner)
            };
            assert!(leased(side.active_task(fresh).await)
                .expect("leased")
                .starts_with("gorge-webhook:"));
            // A yield waits for the full round; other classes are never taken.
            assert_eq!(
                leased(side.active_task(yielded).await).as_deref(),
                Some("(yield)")
            );
            assert_eq!(leased(side.active_task(other_class).await), None);
        })
        .await;
    })
    .await;
}
