//! Group commit: claims and write-backs that arrive together share a
//! transaction, and each still gets exactly the result it would get alone
//! — including a write that fails, which fails alone.

use futures::future::join_all;
use webhook_core::attempt_write;
use webhook_core::memory_store::NewRequest;
use webhook_core::{Claim, DeliveryResult, Properties, RequestStatus, Store, StoreError, Written};

use crate::fixture::with_db;

const HOOK: &str = "PHID-HWBH-batchaaaaaaaaaaaaaaa";
const ROWS: usize = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_claims_and_writes_share_transactions_with_their_own_results() {
    with_db(|db| async move {
        let store = db.store();
        let mut rows = Vec::new();
        for _ in 0..ROWS {
            let id = db
                .insert_request(&NewRequest::queued(HOOK, r#"{"retry":"never"}"#))
                .await;
            rows.push(db.row(id).await);
        }

        // Each row claimed twice at once: with the version read (wins) and
        // with an older one (loses), whatever batch either lands in.
        let claims = join_all(rows.iter().flat_map(|row| {
            let (id, seen) = (row.id, row.date_modified);
            [seen, seen - 1].map(|version| {
                let store = store.clone();
                async move { store.claim(id, version).await }
            })
        }))
        .await;
        for (pair, row) in claims.chunks(2).zip(&rows) {
            let outcomes: Vec<Claim> = pair
                .iter()
                .map(|c| *c.as_ref().expect("claim ran"))
                .collect();
            assert!(
                matches!(outcomes[..], [Claim::Won(v), Claim::Lost] if v > row.date_modified),
                "row {}: {outcomes:?}",
                row.id
            );
        }
        // Each claim reported the version it wrote, grouped or not.
        let mut claimed_versions = Vec::new();
        for (pair, row) in claims.chunks(2).zip(&rows) {
            let Ok(Claim::Won(version)) = pair[0] else {
                unreachable!("checked above");
            };
            assert_eq!(
                db.row(row.id).await.date_modified,
                version,
                "row {}",
                row.id
            );
            claimed_versions.push(version);
        }

        // Every result written at once; one of them cannot be stored (an
        // epoch beyond the column's range), and it alone fails.
        let now = db.now().await;
        let mut writes: Vec<_> = rows
            .iter()
            .zip(&claimed_versions)
            .map(|(row, version)| {
                let properties = Properties::parse(&row.properties).expect("properties");
                attempt_write(
                    row.id,
                    *version,
                    &properties,
                    &DeliveryResult::Response { status: 200 },
                    now,
                )
                .expect("a response is written")
                .0
            })
            .collect();
        let bad = rows[ROWS / 2].id;
        writes[ROWS / 2].last_request_epoch = u64::MAX;
        let written = join_all(writes.iter().map(|w| store.write_result(w))).await;
        for (result, row) in written.iter().zip(&rows) {
            if row.id == bad {
                assert!(
                    matches!(result, Err(StoreError::Query(_))),
                    "the impossible write fails: {result:?}"
                );
            } else {
                assert!(
                    matches!(result, Ok(Written::Yes)),
                    "row {}: {result:?}",
                    row.id
                );
            }
        }
        for row in &rows {
            let stored = db.row(row.id).await;
            let expected = if row.id == bad {
                RequestStatus::Queued
            } else {
                RequestStatus::Sent
            };
            assert_eq!(stored.status, expected, "row {}", row.id);
        }

        let (transactions, grouped) = store.grouped_write_counts();
        assert!(
            transactions > 0 && grouped >= 2 * transactions,
            "nothing was grouped: {transactions} transactions, {grouped} writes"
        );
    })
    .await;
}
