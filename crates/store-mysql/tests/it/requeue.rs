//! `MysqlRequeue` on the real MariaDB: the failed-rows pages, the
//! compare-and-set that leaves a row changed meanwhile alone, and that
//! what it writes is exactly Phorge's value domain.

use webhook_core::memory_store::NewRequest;
use webhook_core::{LastResult, RequestStatus};
use webhook_store_mysql::{MysqlRequeue, Requeued};

use crate::fixture::{config, with_db, TestDb};

const HOOK: &str = "PHID-HWBH-requeueaaaaaaaaaaaaa";
const FAILED_PROPERTIES: &str = r#"{"retry":"never","errorType":"http","errorCode":500}"#;

fn requeue(db: &TestDb) -> MysqlRequeue {
    MysqlRequeue::new(&config(&db.namespace)).expect("valid config")
}

async fn insert_failed(db: &TestDb, epoch: u64) -> u64 {
    db.insert_request(&NewRequest {
        status: RequestStatus::Failed,
        last_request_result: LastResult::Fail,
        last_request_epoch: epoch,
        date_created: Some(epoch - 10),
        date_modified: Some(epoch),
        ..NewRequest::queued(HOOK, FAILED_PROPERTIES)
    })
    .await
}

#[tokio::test]
async fn pages_hold_only_failed_rows_in_id_order() {
    with_db(|db| async move {
        let now = db.now().await;
        let mut failed = Vec::new();
        for _ in 0..5 {
            failed.push(insert_failed(&db, now - 100).await);
            db.insert_request(&NewRequest::queued(HOOK, "{}")).await;
        }
        let writer = requeue(&db);
        let first = writer.failed_page(0, 2).await.expect("page");
        let ids: Vec<u64> = first.iter().map(|row| row.id).collect();
        assert_eq!(ids, failed[..2]);
        let rest = writer.failed_page(ids[1], 10).await.expect("page");
        let ids: Vec<u64> = rest.iter().map(|row| row.id).collect();
        assert_eq!(ids, failed[2..]);
        writer.disconnect().await.expect("close pool");
    })
    .await;
}

#[tokio::test]
async fn a_requeue_writes_phorge_values_and_leaves_properties_alone() {
    with_db(|db| async move {
        let now = db.now().await;
        let id = insert_failed(&db, now - 100).await;
        let writer = requeue(&db);
        let read = db.row(id).await;
        assert_eq!(writer.requeue(&read).await.expect("requeue"), Requeued::Yes);
        let after = db.row(id).await;
        let server_now = db.now().await;
        assert_eq!(after.status, RequestStatus::Queued);
        assert_eq!(after.last_request_result, LastResult::None);
        assert!(
            (now..=server_now).contains(&after.last_request_epoch),
            "lastRequestEpoch {} is the server's now",
            after.last_request_epoch
        );
        assert!(after.date_modified > read.date_modified);
        assert!(after.date_modified >= after.last_request_epoch);
        assert_ne!(after.date_modified, after.date_created, "not fresh");
        assert_eq!(after.properties, FAILED_PROPERTIES);
        assert_eq!(
            (&after.phid, &after.webhook_phid, after.date_created),
            (&read.phid, &read.webhook_phid, read.date_created)
        );
        // A second try at the same read finds the row changed.
        assert_eq!(
            writer.requeue(&read).await.expect("requeue"),
            Requeued::ChangedMeanwhile
        );
        writer.disconnect().await.expect("close pool");
    })
    .await;
}

#[tokio::test]
async fn a_row_that_changed_since_it_was_read_is_left_alone() {
    with_db(|db| async move {
        let now = db.now().await;
        let writer = requeue(&db);
        for change in [
            "dateModified = dateModified + 1",
            "lastRequestEpoch = lastRequestEpoch + 1",
            "lastRequestResult = 'none'",
            "status = 'sent', lastRequestResult = 'okay'",
        ] {
            let id = insert_failed(&db, now - 100).await;
            let read = db.row(id).await;
            db.exec(&format!(
                "UPDATE herald_webhookrequest SET {change} WHERE id = {id}"
            ))
            .await;
            let changed = db.row(id).await;
            assert_eq!(
                writer.requeue(&read).await.expect("requeue"),
                Requeued::ChangedMeanwhile,
                "{change}"
            );
            assert_eq!(db.row(id).await, changed, "{change}: left alone");
        }
        let gone = insert_failed(&db, now - 100).await;
        let read = db.row(gone).await;
        db.delete_request(gone).await;
        assert_eq!(
            writer.requeue(&read).await.expect("requeue"),
            Requeued::ChangedMeanwhile
        );
        writer.disconnect().await.expect("close pool");
    })
    .await;
}
