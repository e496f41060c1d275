//! A history that cannot be written never touches delivery: with its
//! database dropped, the store's writes succeed as before, the attempts
//! are dropped and counted, `failing` reports after a streak, and all
//! recovers once the database is prepared again; a statement that times
//! out in the middle of a round drops its own chunk only.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use webhook_core::history::AttemptLog;
use webhook_core::memory_store::NewRequest;
use webhook_core::{attempt_write, Claim, DeliveryResult, Properties, Store, Written};
use webhook_store_mysql::{HistoryConfig, HistoryTotals, MysqlConfig, MysqlHistory, CHUNK_ROWS};

use crate::fixture::{drop_database, server_conn};
use crate::history_fixture::{attempt, attempt_rows, claim_fresh, history, with_history_db};

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

/// A round of two chunks whose first statement outlives the statement
/// timeout (the table locked by another session): that chunk's attempts
/// are dropped, its session is given up, and the next chunk is written on
/// a new session once the lock is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_that_times_out_mid_round_drops_its_chunk_only() {
    with_history_db(|db, database| async move {
        // Prepared under the default timeouts (its DDL may be slow on a
        // busy disk); written under a short one. The short one is still
        // the time the test has to release the lock once the first chunk
        // failed, before the second chunk's statement gives up too.
        let preparing = history(&db, &database, "host:7");
        preparing.prepare().await.expect("prepared");
        let _ = preparing.disconnect().await;
        let config = MysqlConfig {
            statement_timeout: Duration::from_secs(5),
            ..db.config()
        };
        let history = MysqlHistory::new(&config, HistoryConfig::with_defaults(&database), "host:7")
            .expect("valid settings");
        let queue = history.queue();
        let store = db.store().with_history(queue.clone());
        let second_chunk = 10;
        let queued = CHUNK_ROWS + second_chunk;
        for n in 0..queued {
            let n = u64::try_from(n).expect("a small count");
            queue.record(attempt(n, &format!("PHID-HWBR-timeout{n:012}"), n));
        }
        let mut locker = server_conn().await;
        locker
            .query_drop(format!("LOCK TABLES `{database}`.attempt WRITE"))
            .await
            .expect("the attempt table locked");
        // The batch wakes the writer; it writes after the quiet span.
        claim_fresh(&db, &store).await;
        let first_dropped = async {
            while queue.totals().dropped < CHUNK_ROWS as u64 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(60), first_dropped)
            .await
            .unwrap_or_else(|_| panic!("the first chunk never timed out: {:?}", queue.totals()));
        locker.query_drop("UNLOCK TABLES").await.expect("unlocked");
        locker.disconnect().await.expect("disconnect");
        assert!(
            queue.settled(Duration::from_secs(30)).await,
            "the round never ended: {:?}",
            queue.totals()
        );
        let queued = u64::try_from(queued).expect("a small count");
        assert_eq!(
            queue.totals(),
            HistoryTotals {
                recorded: queued,
                written: second_chunk as u64,
                dropped: CHUNK_ROWS as u64,
            },
            "with none written, the second chunk failed too: on the abandoned session, or \
             (on a very slow machine) because the lock was released more than the statement \
             timeout after its statement began"
        );
        assert_eq!(attempt_rows(&database).await, second_chunk as u64);
    })
    .await;
}
