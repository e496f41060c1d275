//! A history that cannot be written never touches delivery: with its
//! database dropped, the store's writes succeed as before, the attempts
//! are dropped and counted, `failing` reports after a streak, and all
//! recovers once the database is prepared again.

use webhook_core::history::AttemptLog;
use webhook_core::memory_store::NewRequest;
use webhook_core::{attempt_write, Claim, DeliveryResult, Properties, Store, Written};
use webhook_store_mysql::HistoryTotals;

use crate::fixture::drop_database;
use crate::history_fixture::{attempt, attempt_rows, claim_fresh, history, with_history_db};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_history_drops_attempts_and_never_a_write() {
    with_history_db(|db, database| async move {
        let history = history(&db, &database, "host:7");
        history.prepare().await.expect("prepared");
        let queue = history.queue();
        let store = db.store().with_history(queue.clone());
        let settle = Duration::from_secs(10);

        queue.record(attempt(1, "PHID-HWBR-failing0000000001", 1));
        claim_fresh(&db, &store).await;
        assert!(queue.settled(settle).await);
        assert_eq!(queue.totals().written, 1);

        drop_database(&database).await;
        for streak in 1..=3_u64 {
            // A whole delivery: claim, then write-back, both through the
            // store's batches, with an attempt recorded before each write.
            let id = db
                .insert_request(&NewRequest::queued(
                    "PHID-HWBH-historyaaaaaaaaaaaa",
                    r#"{"retry":"never"}"#,
                ))
                .await;
            let row = db.row(id).await;
            let Claim::Won(version) = store.claim(id, row.date_modified).await.expect("claim")
            else {
                panic!("claim lost");
            };
            queue.record(attempt(id, &row.phid, streak));
            let properties = Properties::parse(&row.properties).expect("properties");
            let (write, _) = attempt_write(
                id,
                version,
                &properties,
                &DeliveryResult::Response { status: 200 },
                db.now().await,
            )
            .expect("a response is written");
            assert!(matches!(store.write_result(&write).await, Ok(Written::Yes)));
            assert!(queue.settled(settle).await);
            assert_eq!(
                queue.totals(),
                HistoryTotals {
                    recorded: 1 + streak,
                    written: 1,
                    dropped: streak
                }
            );
            if streak < 3 {
                assert_eq!(queue.failing(), None, "not yet a streak");
            }
        }
        let failing = queue.failing().expect("a streak of failures is reported");
        assert!(failing.contains(&database), "{failing}");

        history.prepare().await.expect("prepared again");
        queue.record(attempt(1, "PHID-HWBR-failing0000000001", 9));
        claim_fresh(&db, &store).await;
        assert!(queue.settled(settle).await);
        assert_eq!(queue.totals().written, 2);
        assert_eq!(queue.failing(), None);
        assert_eq!(attempt_rows(&database).await, 1);
    })
    .await;
}
