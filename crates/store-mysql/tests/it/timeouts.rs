//! Every statement is bounded in time: through a [`FaultProxy`] whose
//! connections are frozen (open, silent: a half-open socket), a statement
//! fails as `Unavailable` within the statement timeout instead of hanging,
//! the connection is abandoned and the pool replaced, so the next statement
//! runs on a fresh connection; a hook lock held on a frozen session is
//! freed on the server (its session killed) for the next taker.

use std::time::{Duration, Instant};

use webhook_core::{HookLock, QueueCounts, StoreError};
use webhook_store_mysql::{MysqlConfig, MysqlHookLock, MysqlStore};
use webhook_test_support::FaultProxy;

use crate::fixture::{config, with_db, TestDb};

const STATEMENT_TIMEOUT: Duration = Duration::from_secs(1);
/// What a bounded call may take beyond its bound on a loaded machine.
const SLACK: Duration = Duration::from_secs(3);
/// A call that has not answered by then hangs.
const HANG: Duration = Duration::from_secs(30);

/// One connection at most, so the statement after the freeze is handed the
/// connection the one before it used.
fn through(proxy: &FaultProxy, namespace: &str) -> MysqlStore {
    MysqlStore::new(&MysqlConfig {
        port: proxy.port(),
        pool_max: 1,
        statement_timeout: STATEMENT_TIMEOUT,
        connect_timeout: Duration::from_secs(2),
        ..config(namespace)
    })
    .expect("valid config")
}

/// Takes `hook`'s lock through `store`: the lock and its name.
async fn lock_through(store: &MysqlStore, hook: &str) -> (MysqlHookLock, String) {
    let lock = store
        .try_lock_hook(hook)
        .await
        .expect("lock")
        .expect("free");
    let name = lock.name().to_owned();
    (lock, name)
}

/// Waits until no session holds the lock `name`, failing after `within`.
async fn wait_until_freed(db: &TestDb, name: &str, within: Duration, holder: &str) {
    let until = Instant::now() + within;
    while db.lock_holder(name).await.is_some() {
        assert!(Instant::now() < until, "{holder} still holds {name}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_statement_on_a_frozen_connection_fails_within_the_timeout_and_the_next_one_runs() {
    with_db(|db| async move {
        let proxy = FaultProxy::to_mariadb().await;
        let store = through(&proxy, &db.namespace);
        store.stats().await.expect("stats before the freeze");
        let before = proxy.proxied();

        proxy.freeze();
        let started = Instant::now();
        let outcome = tokio::time::timeout(HANG, store.stats())
            .await
            .expect("a statement on a frozen connection hung");
        let took = started.elapsed();
        let err = outcome.expect_err("a frozen connection cannot answer");
        assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
        let text = webhook_core::error_chain(&err);
        assert!(text.contains("did not finish within"), "{text}");
        assert!(took >= STATEMENT_TIMEOUT, "{took:?}");
        assert!(took < STATEMENT_TIMEOUT + SLACK, "{took:?}");
        assert_eq!(store.pool_replacements(), 1);

        // New connections still work: the next statement must not be
        // handed the frozen one again.
        let started = Instant::now();
        tokio::time::timeout(HANG, store.stats())
            .await
            .expect("the statement after the freeze hung")
            .expect("a fresh connection answers");
        assert!(started.elapsed() < SLACK, "{:?}", started.elapsed());
        assert!(proxy.proxied() > before, "no new connection was opened");
        eprintln!(
            "reliability: frozen statement failed after {took:?} (timeout {STATEMENT_TIMEOUT:?})"
        );
        store.disconnect().await.expect("close");
    })
    .await;
}

#[tokio::test]
async fn a_hook_lock_on_a_frozen_session_is_released_in_time_and_freed_on_the_server() {
    const HOOK: &str = "PHID-HWBH-frozenlockaaaaaaaaaa";
    with_db(|db| async move {
        let proxy = FaultProxy::to_mariadb().await;
        let store = through(&proxy, &db.namespace);
        let (lock, name) = lock_through(&store, HOOK).await;
        assert_eq!(db.lock_holder(&name).await, Some(lock.connection_id()));

        proxy.freeze();
        let started = Instant::now();
        let released = tokio::time::timeout(HANG, Box::new(lock).release())
            .await
            .expect("RELEASE_LOCK on a frozen session hung");
        assert!(
            matches!(released, Err(StoreError::Unavailable(_))),
            "{released:?}"
        );
        assert!(
            started.elapsed() < STATEMENT_TIMEOUT + SLACK,
            "{:?}",
            started.elapsed()
        );
        // The server still sees the frozen session holding the lock until
        // it is killed; without that the hook stays locked for the
        // server's wait_timeout (8 hours by default).
        wait_until_freed(&db, &name, Duration::from_secs(10), "the frozen session").await;
        let again = store
            .try_lock_hook(HOOK)
            .await
            .expect("lock")
            .expect("free again");
        Box::new(again).release().await.expect("release");
        store.disconnect().await.expect("close");
    })
    .await;
}

#[tokio::test]
async fn a_hook_lock_abandoned_during_a_blackhole_is_freed_once_the_server_is_back() {
    const HOOK: &str = "PHID-HWBH-blackholelockaaaaaaa";
    with_db(|db| async move {
        let proxy = FaultProxy::to_mariadb().await;
        let store = through(&proxy, &db.namespace);
        let (lock, name) = lock_through(&store, HOOK).await;

        // Nothing gets through: the release times out and the first try to
        // kill its session finds no connection.
        proxy.blackhole();
        let released = tokio::time::timeout(HANG, Box::new(lock).release())
            .await
            .expect("RELEASE_LOCK during a blackhole hung");
        assert!(
            matches!(released, Err(StoreError::Unavailable(_))),
            "{released:?}"
        );
        assert!(db.lock_holder(&name).await.is_some(), "freed already?");

        // New connections work again (the frozen one stays frozen, and the
        // server never hears that its client is gone).
        proxy.forward();
        wait_until_freed(&db, &name, Duration::from_secs(40), "the abandoned session").await;
        store.disconnect().await.expect("close");
    })
    .await;
}
