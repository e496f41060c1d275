//! What the attempt history's tests share: a Phorge database and a
//! history database of the test's own (both dropped afterwards), attempts
//! to record (test-support's), and waiting for the history's writer.

use std::future::Future;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use webhook_core::memory_store::NewRequest;
use webhook_core::setting::table;
use webhook_core::{Claim, Store};
use webhook_store_mysql::{HistoryConfig, HistoryQueue, MysqlHistory, MysqlStore};

pub use webhook_test_support::attempts::{hook_error, sent as attempt};

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
