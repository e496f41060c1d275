//! `--history`: the run with the attempt history on. After each daemon
//! stops, the attempts its history kept are counted against the requests
//! the receiver got (each delivered once is one attempt), and the
//! history's database, which the daemon created, is dropped.

use mysql_async::prelude::Queryable;
use webhook_test_support::mariadb::{drop_database, server_conn};
use webhook_test_support::Receiver;

/// Counts the attempts kept in `namespace`'s history and drops its
/// database; `None` when it holds no attempt table.
pub(crate) async fn count_and_drop(namespace: &str) -> Option<u64> {
    let database = format!("{namespace}_webhook_history");
    let mut conn = server_conn().await;
    let kept: Option<u64> = conn
        .query_first(format!("SELECT COUNT(*) FROM `{database}`.attempt"))
        .await
        .ok()
        .flatten();
    drop(conn);
    drop_database(&database).await;
    kept
}

/// The attempts kept, said beside the run's report; a failure when they
/// are fewer than the deliveries the receiver got.
pub(crate) async fn check(namespace: &str, receiver: &Receiver) -> Option<String> {
    let delivered: u64 = receiver
        .receipts()
        .values()
        .map(|receipt| u64::from(receipt.count))
        .sum();
    let kept = count_and_drop(namespace).await;
    eprintln!(
        "bench: attempt history kept {} attempts for {delivered} deliveries",
        kept.map_or_else(|| "no".to_owned(), |n| n.to_string())
    );
    (kept.unwrap_or(0) < delivered)
        .then(|| format!("the attempt history kept {kept:?} attempts for {delivered} deliveries"))
}
