//! Retention deletes exactly the attempts past the age kept, then the
//! oldest beyond the most rows kept, in batches.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use webhook_store_mysql::{HistoryConfig, RetentionPass};

use crate::fixture::server_conn;
use crate::history_fixture::{history_with, with_history_db};

const DAY_MS: u64 = 86_400_000;
const NOW_MS: u64 = 1_800_000_000_000;

/// Inserts `count` attempts, the i-th (from 0) started at `started(i)`.
async fn insert_attempts(database: &str, count: usize, started: impl Fn(usize) -> u64) {
    let mut conn = server_conn().await;
    for chunk in (0..count).collect::<Vec<_>>().chunks(500) {
        let values: Vec<String> = chunk
            .iter()
            .map(|i| {
                format!(
                    "({i}, 'PHID-HWBR-r{i}', 'PHID-HWBH-h', 'PHID-TASK-o', 1, 'host:1', NULL, \
                     {}, 0, 'sent', 'http', '200', 200, NULL, NULL, NULL, NULL)",
                    started(*i)
                )
            })
            .collect();
        conn.query_drop(format!(
            "INSERT INTO `{database}`.attempt (request_id, request_phid, hook_phid, \
             object_phid, number, instance, claim_version, started_ms, duration_ms, status, \
             error_type, error_code, http_status, body_bytes, body_sha256, signed_with, \
             exchange) VALUES {}",
            values.join(",")
        ))
        .await
        .expect("insert attempts");
    }
    conn.disconnect().await.expect("disconnect");
}

async fn kept(database: &str) -> Vec<(u64, u64)> {
    let mut conn = server_conn().await;
    let rows = conn
        .query(format!(
            "SELECT request_id, started_ms FROM `{database}`.attempt ORDER BY id"
        ))
        .await
        .expect("kept");
    conn.disconnect().await.expect("disconnect");
    rows
}

#[tokio::test]
async fn the_newest_rows_up_to_the_most_kept_stay() {
    with_history_db(|db, database| async move {
        let history = history_with(
            &db,
            HistoryConfig {
                max_rows: 1_000,
                ..HistoryConfig::with_defaults(&database)
            },
            "host:1",
        );
        history.prepare().await.expect("prepared");
        // All young enough: only the count prunes.
        insert_attempts(&database, 2_500, |i| NOW_MS - 2_500 + i as u64).await;
        let pass = history.enforce_retention(NOW_MS).await.expect("retention");
        assert_eq!(
            pass,
            RetentionPass {
                deleted: 1_500,
                rows_kept: 1_000,
                oldest_started_ms: Some(NOW_MS - 1_000),
            }
        );
        let rows = kept(&database).await;
        let expected: Vec<u64> = (1_500..2_500).collect();
        assert_eq!(rows.iter().map(|r| r.0).collect::<Vec<_>>(), expected);
        // Nothing more to do.
        let again = history.enforce_retention(NOW_MS).await.expect("retention");
        assert_eq!(again.deleted, 0);
        assert_eq!(again.rows_kept, 1_000);
    })
    .await;
}

#[tokio::test]
async fn attempts_past_the_age_kept_go() {
    with_history_db(|db, database| async move {
        let history = history_with(
            &db,
            HistoryConfig {
                max_age: Duration::from_secs(86_400),
                ..HistoryConfig::with_defaults(&database)
            },
            "host:1",
        );
        history.prepare().await.expect("prepared");
        let cutoff = NOW_MS - DAY_MS;
        // 2,300 rows, interleaved: even ones older than a day (1,150),
        // odd ones younger, the first younger exactly at the cutoff.
        insert_attempts(&database, 2_300, |i| {
            if i % 2 == 0 {
                cutoff - 1 - i as u64
            } else {
                cutoff + i as u64 - 1
            }
        })
        .await;
        let pass = history.enforce_retention(NOW_MS).await.expect("retention");
        assert_eq!(
            pass,
            RetentionPass {
                deleted: 1_150,
                rows_kept: 1_150,
                oldest_started_ms: Some(cutoff),
            }
        );
        let rows = kept(&database).await;
        assert!(rows
            .iter()
            .all(|(i, started)| i % 2 == 1 && *started >= cutoff));
        let empty = history
            .enforce_retention(NOW_MS + 10 * DAY_MS)
            .await
            .expect("retention");
        assert_eq!(
            empty,
            RetentionPass {
                deleted: 1_150,
                rows_kept: 0,
                oldest_started_ms: None,
            }
        );
    })
    .await;
}
