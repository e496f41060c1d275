//! What the attempt history's tests share: a Phorge database and a
//! history database of the test's own (both dropped afterwards), attempts
//! to record, and waiting for the history's writer.

use std::future::Future;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use webhook_core::history::{Attempt, Exchange, Hop, SentBody, SignedWith};
use webhook_core::memory_store::NewRequest;
use webhook_core::setting::table;
use webhook_core::{Claim, Store};
use webhook_store_mysql::{HistoryConfig, HistoryQueue, MysqlHistory, MysqlStore};

use crate::fixture::{dropping_after, server_conn, with_db, TestDb};

/// Runs `body` with a fresh Phorge database and the name of a history
/// database (`{namespace}_webhook_history`, the default), both dropped
/// afterwards.
pub async fn with_history_db<F, Fut>(body: F)
where
    F: FnOnce(TestDb, String) -> Fut,
    Fut: Future<Output = ()>,
{
    with_db(|db| async move {
        let history = HistoryConfig::database_for(&table(&[]), &db.namespace).expect("name");
        assert_eq!(history, format!("{}_webhook_history", db.namespace));
        dropping_after(&history.clone(), body(db, history)).await;
    })
    .await;
}

/// The history on `database` as root, with the defaults.
pub fn history(db: &TestDb, database: &str, instance: &str) -> MysqlHistory {
    history_with(db, HistoryConfig::with_defaults(database), instance)
}

/// The history with `config`, as root.
pub fn history_with(db: &TestDb, config: HistoryConfig, instance: &str) -> MysqlHistory {
    MysqlHistory::new(&db.config(), config, instance).expect("valid config")
}

/// A sent attempt on `request_phid`.
pub fn attempt(request_id: u64, request_phid: &str, started_ms: u64) -> Attempt {
    Attempt {
        request_id,
        request_phid: request_phid.to_owned(),
        hook_phid: "PHID-HWBH-historyaaaaaaaaaaaa".to_owned(),
        object_phid: "PHID-TASK-aaaaaaaaaaaaaaaaaaaa".to_owned(),
        claim_version: Some(1_700_000_000),
        started_ms,
        duration_ms: 42,
        status: "sent".to_owned(),
        error_type: "http".to_owned(),
        error_code: "200".to_owned(),
        http_status: Some(200),
        sent: Some(SentBody {
            bytes: 123,
            sha256: "ab".repeat(32),
            signed_with: SignedWith::CurrentAndPrevious,
        }),
        exchange: Some(Exchange {
            hops: vec![Hop {
                uri: "https://ci.example/hook?x='1'".to_owned(),
                status: 200,
            }],
            request_headers: vec![("Content-Type".to_owned(), "application/json".to_owned())],
            response_headers: vec![("X-Quote".to_owned(), "it's \"fine\" \\ ✓".to_owned())],
            response_body: "ok ✓".to_owned(),
            response_body_truncated: false,
            ..Exchange::default()
        }),
    }
}

/// A hook error written before any claim: no call, no version.
pub fn hook_error(request_id: u64, request_phid: &str, started_ms: u64) -> Attempt {
    Attempt {
        claim_version: None,
        duration_ms: 0,
        status: "failed".to_owned(),
        error_type: "hook".to_owned(),
        error_code: "not-found".to_owned(),
        http_status: None,
        sent: None,
        exchange: None,
        ..attempt(request_id, request_phid, started_ms)
    }
}

/// A claim through `store` on a fresh row (so a batch runs); it is won.
pub async fn claim_fresh(db: &TestDb, store: &MysqlStore) {
    let id = db
        .insert_request(&NewRequest::queued(
            "PHID-HWBH-historyaaaaaaaaaaaa",
            r#"{"retry":"forever"}"#,
        ))
        .await;
    let claim = store
        .claim(id, db.row(id).await.date_modified)
        .await
        .expect("claim");
    assert!(matches!(claim, Claim::Won(_)), "{claim:?}");
}

/// Waits (bounded) until `queue` wrote `written` attempts, without waking
/// its writer: what wakes it must be the store's batch.
pub async fn written_eventually(queue: &HistoryQueue, written: u64) {
    for _ in 0..500 {
        if queue.totals().written >= written {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("not written in time: {:?}", queue.totals());
}

/// Rows of `database`'s attempt table.
pub async fn attempt_rows(database: &str) -> u64 {
    let mut conn = server_conn().await;
    let count: u64 = conn
        .query_first(format!("SELECT COUNT(*) FROM `{database}`.attempt"))
        .await
        .expect("count")
        .expect("a row");
    conn.disconnect().await.expect("disconnect");
    count
}
