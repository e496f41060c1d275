//! Task adoption racing a busy `phd`: a taskmaster played by the test
//! (test-support's `Taskmaster`) leases webhook tasks by Phorge's lease
//! query without ever sleeping and runs each as `HeraldWebhookWorker`
//! does up to its call (the request must be queued, then the hook's lock
//! is taken without waiting, or the task yields). With the daemon keeping
//! the hooks' locks, the taskmaster delivers none of a hundred requests
//! queued in bursts; each reaches the receiver once. And a daemon stopped
//! with unfinished tasks hands them back, so a taskmaster runs them at
//! once instead of after their 300 s lease.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use webhook_core::memory_store::NewRequest;
use webhook_core::{Hook, RequestStatus};
use webhook_test_support::mariadb::{with_phorge_side, PhorgeSide};
use webhook_test_support::worker_tasks::{Taskmaster, WorkerRun};
use webhook_test_support::{with_db, Receiver, Reply, TestDb};

use crate::daemon::Daemon;
use crate::e2e::{wait_log, DEADLINE};
use crate::support::until;

const HOOK: &str = "PHID-HWBH-contentionaaaaaaaaaa";
const NEVER: &str = r#"{"retry":"never","triggerPHIDs":["PHID-HRUL-contention"]}"#;
const FOREVER: &str = r#"{"retry":"forever","triggerPHIDs":["PHID-HRUL-contention"]}"#;
const TASKMASTER: &str = "4711:1700000000:php-host:1";
const BURSTS: usize = 10;
const BURST: usize = 10;

fn env(namespace: &str) -> Vec<(String, String)> {
    let mut env = crate::handoff::env(namespace);
    env.push(("GORGE_WEBHOOK_ADOPT_PHP_TASKS".into(), "1".into()));
    env
}

async fn hook_to(db: &TestDb, receiver: &Receiver) {
    db.insert_hook(&Hook {
        phid: HOOK.to_owned(),
        name: "contention".to_owned(),
        uri: receiver.url("/contention"),
        status: "enabled".to_owned(),
        hmac_key: "abcdefghijklmnopqrstuvwxyz234567".to_owned(),
    })
    .await;
}

/// Request `n` and its task, queued as Phorge's `queueCall` queues them,
/// each about an object of its own (the receiver counts by object).
async fn queue(db: &TestDb, side: &PhorgeSide, n: usize, properties: &str) -> u64 {
    let id = db
        .insert_request(&NewRequest {
            object_phid: format!("PHID-TASK-contention{n:010}"),
            ..NewRequest::queued(HOOK, properties)
        })
        .await;
    side.queue_webhook_task(&db.row(id).await.phid).await;
    id
}

/// What the taskmaster did, by outcome.
#[derive(Debug, Default)]
struct Runs {
    declined: usize,
    /// Yields, and the tasks that yielded (a yield the daemon has not
    /// adopted within its 15 s is leased and yielded again).
    yields: usize,
    yielded: std::collections::BTreeSet<u64>,
    delivered: usize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taskmaster_that_never_sleeps_delivers_none_of_a_hundred_tasks() {
    with_db(|db| async move {
        let db = &db;
        with_phorge_side(&db.namespace, |side| async move {
            let side = &side;
            let receiver = Receiver::start().await;
            receiver.always("/contention", Reply::status(200));
            hook_to(db, &receiver).await;
            let daemon = Daemon::start("contention", &env(&db.namespace)).await;
            wait_log(&daemon, r#"event="hook_locks_kept" held=1"#).await;

            let done = AtomicBool::new(false);
            let taskmaster = async {
                let mut taskmaster = Taskmaster::new(side, &db.namespace, TASKMASTER).await;
                let mut runs = Runs::default();
                while !done.load(Ordering::Acquire) {
                    match taskmaster.run_next().await {
                        Some((_, WorkerRun::Declined)) => runs.declined += 1,
                        Some((id, WorkerRun::Yielded)) => {
                            runs.yields += 1;
                            runs.yielded.insert(id);
                        }
                        Some((_, WorkerRun::Delivered)) => runs.delivered += 1,
                        None => tokio::task::yield_now().await,
                    }
                }
                runs
            };
            let producer = async {
                let mut ids = Vec::new();
                for burst in 0..BURSTS {
                    for n in 0..BURST {
                        ids.push(queue(db, side, burst * BURST + n, NEVER).await);
                    }
                    until(&daemon, "the burst sent", async || {
                        for id in &ids {
                            if db.row(*id).await.status != RequestStatus::Sent {
                                return false;
                            }
                        }
                        true
                    })
                    .await;
                }
                done.store(true, Ordering::Release);
            };
            let (runs, ()) = tokio::join!(taskmaster, producer);
            assert_eq!(
                runs.delivered,
                0,
                "the taskmaster delivered some itself: {runs:?}\n{}",
                daemon.log()
            );
            // The tasks won back from the taskmaster are counted (at most
            // once each of those that yielded) and said in the log.
            let won_back = crate::support::metrics(&daemon)
                .await
                .lines()
                .find_map(|l| {
                    l.strip_prefix(r#"gorge_webhook_php_tasks_lost_total{outcome="yielded"} "#)
                })
                .and_then(|n| n.trim().parse::<usize>().ok())
                .unwrap_or(0);
            assert!(
                won_back > 0 && won_back <= runs.yielded.len(),
                "{won_back} counted as won back, {} tasks yielded",
                runs.yielded.len()
            );
            until(&daemon, "the lost tasks said", async || {
                daemon.stderr().contains(r#"event="php_tasks_lost""#)
            })
            .await;
            let receipts = receiver.receipts();
            assert_eq!(receipts.len(), BURSTS * BURST, "{runs:?}");
            let twice: Vec<_> = receipts.iter().filter(|(_, r)| r.count != 1).collect();
            assert!(twice.is_empty(), "delivered more than once: {twice:?}");
            println!(
                "a taskmaster that never sleeps, 100 tasks in {BURSTS} bursts: delivered {}, \
                 declined {}, {} yields of {} tasks (each yield is one line in phd's log), \
                 {won_back} counted as won back; the daemon delivered all 100 once",
                runs.delivered,
                runs.declined,
                runs.yields,
                runs.yielded.len()
            );
        })
        .await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_daemon_hands_its_unfinished_tasks_to_phd_at_once() {
    with_db(|db| async move {
        let db = &db;
        with_phorge_side(&db.namespace, |side| async move {
            let side = &side;
            let receiver = Receiver::start().await;
            receiver.always("/contention", Reply::status(500));
            hook_to(db, &receiver).await;
            let mut ids = Vec::new();
            for n in 0..3 {
                ids.push(queue(db, side, n, FOREVER).await);
            }
            let mut daemon = Daemon::start("contention-stop", &env(&db.namespace)).await;
            // Each row tried once and failed: queued, its task the daemon's.
            receiver.wait_for(3, DEADLINE).await;
            daemon.terminate();
            let status = daemon.wait_exit(DEADLINE).await;
            assert_eq!(status.code(), Some(0), "{}", daemon.log());
            let stopped = Instant::now();
            assert!(
                daemon
                    .stderr()
                    .contains(r#"event="php_tasks_handed_back" released=3"#),
                "{}",
                daemon.log()
            );

            let mut taskmaster = Taskmaster::new(side, &db.namespace, TASKMASTER).await;
            let mut delivered = 0;
            while delivered < ids.len() {
                match taskmaster.run_next().await {
                    Some((_, WorkerRun::Delivered)) => delivered += 1,
                    Some((id, other)) => panic!("task {id}: {other:?}\n{}", daemon.log()),
                    None => {
                        assert!(
                            stopped.elapsed() < Duration::from_secs(30),
                            "the tasks are still leased {:?} after the stop\n{}",
                            stopped.elapsed(),
                            daemon.log()
                        );
                        tokio::task::yield_now().await;
                    }
                }
            }
            println!(
                "after SIGTERM, a taskmaster ran the 3 unfinished tasks within {:?}",
                stopped.elapsed()
            );
        })
        .await;
    })
    .await;
}
