//! The read-only lookups the admin tool uses, on real tables: rows by id
//! and PHID map exactly as candidates do (defects included), hook
//! summaries count per hook, the breaker's epochs agree with the breaker's
//! count, the lock holder is seen without taking the lock — and none of
//! them changes a row.

use webhook_core::memory_store::NewRequest;
use webhook_core::{Hook, HookLock, LastResult, RequestStatus, Store};

use crate::fixture::with_db;

const HOOK_A: &str = "PHID-HWBH-readsaaaaaaaaaaaaaaa";
const HOOK_B: &str = "PHID-HWBH-readsbbbbbbbbbbbbbbb";
const KEY: &str = "abcdefghijklmnopqrstuvwxyz234567";

fn hook(phid: &str, name: &str, status: &str) -> Hook {
    Hook {
        phid: phid.to_owned(),
        name: name.to_owned(),
        uri: format!("https://user:secret@example.invalid/{name}"),
        status: status.to_owned(),
        hmac_key: KEY.to_owned(),
    }
}

fn failed_attempt(hook: &str, status: RequestStatus, epoch: u64) -> NewRequest {
    NewRequest {
        status,
        last_request_result: LastResult::Fail,
        last_request_epoch: epoch,
        date_created: Some(epoch - 5),
        date_modified: Some(epoch),
        ..NewRequest::queued(hook, r#"{"retry":"forever"}"#)
    }
}

#[tokio::test]
async fn rows_are_found_by_id_and_phid_exactly_as_stored() {
    with_db(|db| async move {
        let store = db.store();
        let id = db
            .insert_request(&NewRequest {
                phid: "PHID-HWBR-readsbyphidaaaaaaaa".to_owned(),
                date_created: Some(1_700_000_000),
                date_modified: Some(1_700_000_031),
                ..NewRequest::queued(HOOK_A, r#"{"retry":"forever","x":[1]}"#)
            })
            .await;
        let expected = db.row(id).await;
        let by_id = store.reader().request_by_id(id).await.expect("lookup");
        assert_eq!(by_id.as_ref(), Some(&expected));
        let by_phid = store
            .reader()
            .request_by_phid("PHID-HWBR-readsbyphidaaaaaaaa")
            .await
            .expect("lookup");
        assert_eq!(by_phid, Some(expected));
        assert_eq!(
            store
                .reader()
                .request_by_id(id + 1000)
                .await
                .expect("lookup"),
            None
        );
        assert_eq!(
            store
                .reader()
                .request_by_phid("PHID-HWBR-nosuchrowaaaaaaaaaa")
                .await
                .expect("lookup"),
            None
        );
    })
    .await;
}

#[tokio::test]
async fn a_row_outside_phorges_domain_comes_back_with_its_defect() {
    with_db(|db| async move {
        let store = db.store();
        let id = db.insert_request(&NewRequest::queued(HOOK_A, "{}")).await;
        db.exec(&format!(
            "UPDATE herald_webhookrequest SET lastRequestResult = 'maybe' WHERE id = {id}"
        ))
        .await;
        let row = store
            .reader()
            .request_by_id(id)
            .await
            .expect("lookup")
            .expect("found");
        let defect = row.defect.expect("defect noted");
        assert!(defect.contains("lastRequestResult"), "{defect}");
    })
    .await;
}

#[tokio::test]
async fn hook_summaries_count_per_hook_without_keys() {
    with_db(|db| async move {
        let store = db.store();
        let now = db.now().await;
        db.insert_hook(&hook(HOOK_A, "alpha", "enabled")).await;
        db.insert_hook(&hook(HOOK_B, "beta", "disabled")).await;
        for _ in 0..3 {
            db.insert_request(&NewRequest::queued(HOOK_A, "{}")).await;
        }
        // Two recent failures of A (one still queued, one failed), one old.
        db.insert_request(&failed_attempt(HOOK_A, RequestStatus::Queued, now - 10))
            .await;
        db.insert_request(&failed_attempt(HOOK_A, RequestStatus::Failed, now - 20))
            .await;
        db.insert_request(&failed_attempt(HOOK_A, RequestStatus::Failed, now - 1000))
            .await;
        // B: one failed as a hook error (none / 0), which the breaker ignores.
        db.insert_request(&NewRequest {
            status: RequestStatus::Failed,
            ..NewRequest::queued(HOOK_B, "{}")
        })
        .await;

        let summaries = store
            .reader()
            .hook_summaries(now - 300)
            .await
            .expect("summaries");
        assert_eq!(summaries.len(), 2);
        let (a, b) = (&summaries[0], &summaries[1]);
        assert_eq!(
            (a.phid.as_str(), a.name.as_str(), a.status.as_str()),
            (HOOK_A, "alpha", "enabled")
        );
        assert_eq!(a.uri, "https://user:secret@example.invalid/alpha");
        assert_eq!((a.queued, a.failed, a.breaker_failures), (4, 2, 2));
        assert_eq!(
            a.breaker_failures,
            store
                .breaker_failures(HOOK_A, now - 300)
                .await
                .expect("count")
        );
        assert_eq!((b.phid.as_str(), b.status.as_str()), (HOOK_B, "disabled"));
        assert_eq!((b.queued, b.failed, b.breaker_failures), (0, 1, 0));
        assert!(a.id < b.id, "lowest id first");
        let debug = format!("{summaries:?}");
        assert!(!debug.contains("secret"), "{debug}");
    })
    .await;
}

#[tokio::test]
async fn breaker_epochs_are_the_counted_rows_oldest_first() {
    with_db(|db| async move {
        let store = db.store();
        let now = db.now().await;
        for age in [30, 250, 5, 299, 301] {
            db.insert_request(&failed_attempt(HOOK_A, RequestStatus::Queued, now - age))
                .await;
        }
        db.insert_request(&failed_attempt(HOOK_B, RequestStatus::Queued, now - 7))
            .await;
        let since = now - 300;
        let epochs = store
            .reader()
            .breaker_failure_epochs(HOOK_A, since)
            .await
            .expect("epochs");
        assert_eq!(epochs, vec![now - 299, now - 250, now - 30, now - 5]);
        assert_eq!(
            epochs.len() as u64,
            store.breaker_failures(HOOK_A, since).await.expect("count")
        );
        assert!(store
            .reader()
            .breaker_failure_epochs("PHID-HWBH-none", since)
            .await
            .expect("epochs")
            .is_empty());
    })
    .await;
}

#[tokio::test]
async fn the_lock_holder_is_seen_without_taking_the_lock() {
    with_db(|db| async move {
        let (looker, holder) = (db.store().reader().clone(), db.store());
        assert_eq!(looker.hook_lock_holder(HOOK_A).await.expect("look"), None);
        let lock = holder
            .try_lock_hook(HOOK_A)
            .await
            .expect("lock")
            .expect("free");
        assert_eq!(
            looker.hook_lock_holder(HOOK_A).await.expect("look"),
            Some(u64::from(lock.connection_id()))
        );
        assert_eq!(looker.hook_lock_holder(HOOK_B).await.expect("look"), None);
        Box::new(lock).release().await.expect("release");
        assert_eq!(looker.hook_lock_holder(HOOK_A).await.expect("look"), None);
        // Looking took nothing: the lock is free for anyone.
        let again = holder.try_lock_hook(HOOK_A).await.expect("lock");
        assert!(again.is_some());
        if let Some(lock) = again {
            Box::new(lock).release().await.expect("release");
        }
    })
    .await;
}

#[tokio::test]
async fn lookups_change_no_row() {
    with_db(|db| async move {
        let store = db.store();
        let now = db.now().await;
        db.insert_hook(&hook(HOOK_A, "alpha", "enabled")).await;
        let ids = [
            db.insert_request(&NewRequest::queued(HOOK_A, "{}")).await,
            db.insert_request(&failed_attempt(HOOK_A, RequestStatus::Queued, now - 3))
                .await,
        ];
        let before = [db.row(ids[0]).await, db.row(ids[1]).await];
        for &id in &ids {
            let row = store
                .reader()
                .request_by_id(id)
                .await
                .expect("lookup")
                .expect("row");
            store
                .reader()
                .request_by_phid(&row.phid)
                .await
                .expect("lookup");
        }
        store
            .reader()
            .hook_summaries(now - 300)
            .await
            .expect("summaries");
        store
            .reader()
            .breaker_failure_epochs(HOOK_A, now - 300)
            .await
            .expect("epochs");
        store
            .reader()
            .hook_lock_holder(HOOK_A)
            .await
            .expect("holder");
        let after = [db.row(ids[0]).await, db.row(ids[1]).await];
        assert_eq!(before, after);
        assert_eq!(db.lock_holder(&store.hook_lock_name(HOOK_A)).await, None);
    })
    .await;
}
