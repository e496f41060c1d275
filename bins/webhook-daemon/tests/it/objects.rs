//! The object check on Phorge's own tables, end to end: a live edit with
//! several transactions (one since removed) is delivered as Phorge's
//! worker delivers it, newest first and without the removed one; a request
//! about a destroyed object is failed as Phorge fails it and never sent.

use serde_json::Value;
use webhook_core::memory_store::NewRequest;
use webhook_core::{LastResult, Payload, Properties, RequestStatus};
use webhook_store_mysql::object_tables;
use webhook_test_support::{with_application_tables, with_db, Receiver};

use crate::daemon::Daemon;
use crate::e2e::{add_hook, delivery_env, properties, wait_row, DEADLINE};
use crate::support::{count, metrics};

const KEY: &str = "abcdefghijklmnopqrstuvwxyz234567";
const HOOK: &str = "PHID-HWBH-e2eobjectsaaaaaaaaaa";
const TASK: &str = "PHID-TASK-e2eobjectsaaaaaaaaaa";
const DESTROYED: &str = "PHID-TASK-e2eobjectsdestroyedx";

/// A live edit's `properties`, as Phorge's editor stores them: keyed by
/// PHID, in the order the edit applied the transactions.
fn live_edit(applied: &[&str]) -> String {
    let keyed: Vec<String> = applied.iter().map(|t| format!("\"{t}\":\"{t}\"")).collect();
    format!(
        r#"{{"retry":"forever","transactionPHIDs":{{{}}},"triggerPHIDs":["PHID-HRUL-e2eobjectsaaaaaaaaaa"],"silent":false,"secure":false}}"#,
        keyed.join(",")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_edits_go_in_phorges_order_and_destroyed_objects_fail_as_in_phorge() {
    with_db(|db| async move {
        let maniphest = object_tables("TASK").expect("tasks are mapped");
        let namespace = db.namespace.clone();
        let db = &db;
        with_application_tables(&namespace, maniphest, |tasks| async move {
            let receiver = Receiver::start().await;
            add_hook(db, HOOK, receiver.url("/objects"), KEY).await;
            let applied: Vec<String> = (1..=4)
                .map(|n| format!("PHID-XACT-TASK-e2e{n:011}"))
                .collect();
            let applied: Vec<&str> = applied.iter().map(String::as_str).collect();
            tasks.insert_object(TASK, &applied).await;
            tasks
                .insert_object(DESTROYED, &["PHID-XACT-TASK-e2edestroyed"])
                .await;
            let edit = live_edit(&applied);
            let live = db
                .insert_request(&NewRequest {
                    object_phid: TASK.to_owned(),
                    ..NewRequest::queued(HOOK, &edit)
                })
                .await;
            let gone = db
                .insert_request(&NewRequest {
                    object_phid: DESTROYED.to_owned(),
                    ..NewRequest::queued(HOOK, &live_edit(&["PHID-XACT-TASK-e2edestroyed"]))
                })
                .await;
            tasks.delete_transaction(applied[1]).await;
            tasks.destroy_object(DESTROYED).await;

            let daemon = Daemon::start("objects", &delivery_env(&db.namespace)).await;
            let got = receiver.wait_for(1, DEADLINE).await;
            let row = db.row(live).await;
            let newest_first = [applied[3], applied[2], applied[0]].map(str::to_owned);
            let expected = Payload::with_transactions(
                &row,
                &Properties::parse(&edit).expect("parses"),
                &newest_first,
            );
            assert_eq!(
                String::from_utf8_lossy(&got[0].body),
                String::from_utf8_lossy(expected.as_bytes()),
                "newest first, the removed transaction left out\n{}",
                daemon.log()
            );
            assert_eq!(
                got[0].header("x-phabricator-webhook-signature"),
                Some(expected.sign(KEY).as_str())
            );

            let failed = wait_row(db, &daemon, gone, "failed", |r| {
                r.status != RequestStatus::Queued
            })
            .await;
            assert_eq!(
                (
                    failed.status,
                    failed.last_request_result,
                    failed.last_request_epoch
                ),
                (RequestStatus::Failed, LastResult::None, 0),
                "{failed:?}"
            );
            let stored = properties(&failed);
            assert_eq!(stored["errorType"], "hook");
            assert_eq!(stored["errorCode"], Value::from("object"));
            wait_row(db, &daemon, live, "sent", |r| {
                r.status == RequestStatus::Sent
            })
            .await;
            // Both rows are final, and the destroyed object's was never sent.
            assert_eq!(receiver.requests().len(), 1, "{}", daemon.log());

            let text = metrics(&daemon).await;
            assert_eq!(
                count(&text, "gorge_webhook_object_checks_total{result=\"found\"}"),
                1
            );
            assert_eq!(
                count(&text, "gorge_webhook_object_checks_total{result=\"gone\"}"),
                1
            );
            assert!(
                daemon.stderr().contains("object_missing"),
                "{}",
                daemon.log()
            );
        })
        .await;
    })
    .await;
}
