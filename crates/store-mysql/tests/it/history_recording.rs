//! Attempts recorded through the queue reach the history after the
//! store's next batch, every field intact, numbered per request; several
//! instances writing at once number each request's attempts uniquely.

use std::collections::HashMap;
use std::time::Duration;

use futures::future::join_all;
use webhook_core::history::{AttemptLog, AttemptQuery, RequestKey};
use webhook_core::memory_store::NewRequest;
use webhook_core::{Claim, Store};

use crate::history_fixture::{
    attempt, claim_fresh, history, hook_error, with_history_db, written_eventually,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_attempts_round_trip_numbered_per_request() {
    with_history_db(|db, database| async move {
        let history = history(&db, &database, "host:101");
        history.prepare().await.expect("prepared");
        let queue = history.queue();
        let store = db.store().with_history(queue.clone());
        let id = db
            .insert_request(&NewRequest::queued(
                "PHID-HWBH-historyaaaaaaaaaaaa",
                r#"{"retry":"forever"}"#,
            ))
            .await;
        let phid = db.row(id).await.phid;
        let first = hook_error(id, &phid, 1_000);
        let second = attempt(id, &phid, 2_000);
        let mut third = attempt(id, &phid, 3_000);
        third.status = "queued".to_owned();
        third.error_type = "timeout".to_owned();
        third.error_code = "28".to_owned();
        third.http_status = None;
        for recorded in [&first, &second, &third] {
            queue.record(recorded.clone());
        }
        // Nothing is written until a batch runs.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(queue.totals().written, 0);
        let claim = store
            .claim(id, db.row(id).await.date_modified)
            .await
            .expect("claim");
        assert!(matches!(claim, Claim::Won(_)));
        written_eventually(&queue, 3).await;

        let reader = db.store().reader().history(&database);
        let found = reader
            .attempts(&AttemptQuery {
                request: Some(RequestKey::Phid(phid.clone())),
                ..AttemptQuery::default()
            })
            .await
            .expect("read");
        let numbers: Vec<u32> = found.iter().map(|a| a.number).collect();
        assert_eq!(numbers, [3, 2, 1], "newest first");
        assert!(found.iter().all(|a| a.instance == "host:101"));
        assert_eq!(found[2].attempt, first, "claim_version None, no call");
        assert_eq!(found[1].attempt, second, "sent body and exchange");
        assert_eq!(found[0].attempt, third);
        assert!(found[0].id > found[1].id && found[1].id > found[2].id);

        // A later attempt continues the numbering.
        queue.record(attempt(id, &phid, 4_000));
        claim_fresh(&db, &store).await;
        written_eventually(&queue, 4).await;
        let found = reader
            .attempts(&AttemptQuery {
                request: Some(RequestKey::Id(id)),
                limit: 1,
                ..AttemptQuery::default()
            })
            .await
            .expect("read");
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].number, found[0].attempt.started_ms), (4, 4_000));
        assert_eq!(queue.totals().dropped, 0);
        assert_eq!(queue.failing(), None);
    })
    .await;
}

const INSTANCES: usize = 3;
const PER_INSTANCE: usize = 200;
const REQUESTS: usize = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn instances_writing_at_once_number_each_request_uniquely() {
    with_history_db(|db, database| async move {
        let setups: Vec<_> = (0..INSTANCES)
            .map(|i| {
                let history = history(&db, &database, &format!("host:{i}"));
                let store = db.store().with_history(history.queue());
                (history, store)
            })
            .collect();
        setups[0].0.prepare().await.expect("prepared");
        join_all(setups.iter().map(|(history, store)| async move {
            let queue = history.queue();
            // Each attempt recorded, then a write through the store (a
            // claim on no row, which matches none), all at once.
            join_all((0..PER_INSTANCE).map(|k| {
                let queue = queue.clone();
                let store = store.clone();
                async move {
                    let request = k % REQUESTS;
                    queue.record(attempt(
                        request as u64 + 1,
                        &format!("PHID-HWBR-shared{request:015}"),
                        k as u64,
                    ));
                    let claim = store.claim(9_999_999, 1).await.expect("claim");
                    assert!(matches!(claim, Claim::Lost));
                }
            }))
            .await;
            written_eventually(&queue, PER_INSTANCE as u64).await;
            assert_eq!(queue.totals().dropped, 0, "{:?}", queue.failing());
        }))
        .await;

        let reader = db.store().reader().history(&database);
        let all = reader
            .attempts(&AttemptQuery::default())
            .await
            .expect("read");
        assert_eq!(all.len(), INSTANCES * PER_INSTANCE);
        let mut numbers: HashMap<&str, Vec<u32>> = HashMap::new();
        let mut by_instance: HashMap<&str, usize> = HashMap::new();
        for recorded in &all {
            numbers
                .entry(&recorded.attempt.request_phid)
                .or_default()
                .push(recorded.number);
            *by_instance.entry(&recorded.instance).or_default() += 1;
        }
        assert_eq!(numbers.len(), REQUESTS);
        let per_request = INSTANCES * PER_INSTANCE / REQUESTS;
        for (phid, mut seen) in numbers {
            seen.sort_unstable();
            let expected: Vec<u32> = (1..=per_request as u32).collect();
            assert_eq!(seen, expected, "{phid}");
        }
        assert!(
            by_instance.values().all(|&n| n == PER_INSTANCE),
            "{by_instance:?}"
        );
    })
    .await;
}
