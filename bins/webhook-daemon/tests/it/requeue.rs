//! A requeued failure is delivered once: the real daemon fails a request
//! on a receiver answering 500 (retry unset, so the row ends `failed`),
//! the row is requeued with `webhook-admin requeue`'s writer
//! (`MysqlRequeue`, the compare-and-set the command runs), and the daemon
//! delivers it exactly once to the receiver, now answering 200, within a
//! claim lease and the scan floor's look (the row sits below the floor's
//! frontier, where only the look or the ten-minute rescan finds it).

use std::time::Duration;

use webhook_core::memory_store::NewRequest;
use webhook_core::{LastResult, RequestStatus};
use webhook_store_mysql::{MysqlRequeue, Requeued, LOOK_EVERY};
use webhook_test_support::mariadb::config;
use webhook_test_support::{with_db, Receiver, Reply};

use crate::daemon::Daemon;
use crate::e2e::{add_hook, delivery_env, properties, wait_row, DEADLINE};

/// GORGE_WEBHOOK_DELIVERY_TIMEOUT=2 raises GORGE_WEBHOOK_CLAIM_LEASE_SEC=1
/// to 2 + 2 (as in `e2e`).
const EFFECTIVE_LEASE_SECS: u64 = 4;

/// No `retry`: one failed attempt is final.
const ONCE_PROPERTIES: &str = r#"{"triggerPHIDs":["PHID-HRUL-aaaaaaaaaaaaaaaaaaaa"],"transactionPHIDs":{"PHID-XACT-TASK-ddddddddddddddd":"PHID-XACT-TASK-ddddddddddddddd"}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requeued_failure_is_delivered_once() {
    with_db(|db| async move {
        let receiver = Receiver::start().await;
        receiver.always("/requeue", Reply::status(500));
        let hook = "PHID-HWBH-e2erequeueaaaaaaaaaa";
        add_hook(
            &db,
            hook,
            receiver.url("/requeue"),
            "abcdefghijklmnopqrstuvwxyz234567",
        )
        .await;
        // Created an hour ago, so the floor's first rescan puts its
        // frontier above the row.
        let created = db.now().await - 3_600;
        let id = db
            .insert_request(&NewRequest {
                date_created: Some(created),
                ..NewRequest::queued(hook, ONCE_PROPERTIES)
            })
            .await;
        let daemon = Daemon::start("requeue", &delivery_env(&db.namespace)).await;

        let first = receiver.wait_for(1, DEADLINE).await;
        assert_eq!(first.len(), 1, "the first attempt\n{}", daemon.log());
        let failed = wait_row(&db, &daemon, id, "failed", |r| {
            r.status == RequestStatus::Failed
        })
        .await;
        assert_eq!(failed.last_request_result, LastResult::Fail);
        assert_eq!(properties(&failed)["errorCode"], 500);

        receiver.always("/requeue", Reply::status(200));
        let writer = MysqlRequeue::new(&config(&db.namespace)).expect("valid config");
        assert_eq!(
            writer.requeue(&failed).await.expect("requeue"),
            Requeued::Yes
        );
        writer.disconnect().await.expect("close pool");

        let two = receiver.wait_for(2, DEADLINE).await;
        assert_eq!(
            two.len(),
            2,
            "the requeued row was not delivered\n{}",
            daemon.log()
        );
        assert_eq!(two[0].body, two[1].body, "the same request, the same bytes");
        let sent = wait_row(&db, &daemon, id, "sent", |r| {
            r.status == RequestStatus::Sent
        })
        .await;
        assert_eq!(sent.last_request_result, LastResult::Okay);
        assert_eq!(properties(&sent)["errorCode"], 200);

        // Longer than a lease and a look, over many polls: nothing more.
        let later = receiver
            .wait_for(
                3,
                Duration::from_secs(EFFECTIVE_LEASE_SECS + LOOK_EVERY + 2),
            )
            .await;
        assert_eq!(later.len(), 2, "delivered more than once\n{}", daemon.log());
        assert_eq!(db.row(id).await, sent);
    })
    .await;
}
