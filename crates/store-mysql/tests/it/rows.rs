//! Row mapping on real columns: hooks map every column (non-ASCII names,
//! long URIs), and request rows holding values outside Phorge's domain come
//! back with a `defect` naming the column (never the value itself), next to
//! healthy rows, so one bad row cannot stall every poll.

use webhook_core::memory_store::NewRequest;
use webhook_core::windows::Cutoffs;
use webhook_core::{CandidateQuery, LastResult, Store};

use crate::fixture::with_db;

const HOOK: &str = "PHID-HWBH-rowsaaaaaaaaaaaaaaaa";

fn query(now: u64) -> CandidateQuery {
    CandidateQuery {
        cutoffs: Cutoffs {
            now,
            lease_cutoff: now - 30,
            retry_cutoff: now - 60,
        },
        limit: 10,
        exclude_hooks: Vec::new(),
    }
}

#[tokio::test]
async fn unknown_last_request_result_is_a_defect_not_a_failed_poll() {
    with_db(|db| async move {
        let store = db.store();
        let now = db.now().await;
        let id = db.insert_request(&NewRequest::queued(HOOK, "{}")).await;
        let healthy = db.insert_request(&NewRequest::queued(HOOK, "{}")).await;
        db.exec(&format!(
            "UPDATE herald_webhookrequest SET lastRequestResult = 'maybe' WHERE id = {id}"
        ))
        .await;
        let rows = store
            .candidates(&query(now))
            .await
            .expect("poll still works");
        assert_eq!(rows.len(), 2);
        let reason = rows[0].defect.as_deref().expect("defect noted");
        assert!(reason.contains("lastRequestResult"), "{reason}");
        assert!(!reason.contains("maybe"), "the value stays out: {reason}");
        assert_eq!(rows[0].last_request_result, LastResult::None);
        assert_eq!((rows[1].id, &rows[1].defect), (healthy, &None));
    })
    .await;
}

#[tokio::test]
async fn non_utf8_phid_bytes_are_a_defect_read_lossily() {
    with_db(|db| async move {
        let store = db.store();
        let now = db.now().await;
        let id = db.insert_request(&NewRequest::queued(HOOK, "{}")).await;
        db.exec(&format!(
            "UPDATE herald_webhookrequest SET objectPHID = X'50484944FF' WHERE id = {id}"
        ))
        .await;
        let rows = store
            .candidates(&query(now))
            .await
            .expect("poll still works");
        assert_eq!(rows[0].id, id);
        let reason = rows[0].defect.as_deref().expect("defect noted");
        assert!(reason.contains("objectPHID"), "{reason}");
        assert!(reason.contains("UTF-8"), "{reason}");
        assert_eq!(rows[0].object_phid, "PHID\u{fffd}");
    })
    .await;
}

#[tokio::test]
async fn hook_rows_map_every_column() {
    with_db(|db| async move {
        let store = db.store();
        let hook = webhook_core::Hook {
            phid: HOOK.to_owned(),
            name: "Caf\u{e9} hook \u{1F600}".to_owned(),
            uri: format!("https://example.invalid/{}", "x".repeat(300)),
            status: "firehose".to_owned(),
            hmac_key: "abcdefghijklmnopqrstuvwxyz234567".to_owned(),
        };
        db.insert_hook(&hook).await;
        assert_eq!(store.hook(HOOK).await.expect("lookup"), Some(hook));
    })
    .await;
}
