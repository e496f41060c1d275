//! The per-hook lock is Phorge's own `GET_LOCK` name, server-wide: seen
//! from an unrelated session while held, refused to a second store (and
//! taken from under a PHP worker never), and freed on release, on drop
//! inside a runtime, and on drop with no runtime at all.

use mysql_async::prelude::Queryable;
use webhook_core::{hook_lock_name, HookLock, Store};
use webhook_store_mysql::MysqlStore;

use crate::fixture::{config, with_db};

const HOOK: &str = "PHID-HWBH-zzzzzzzzzzzzzzzzzzzz";
const SPEC_NAME: &str = "ph:phorge-.nBW.TjxAch.:webhook-kwbJC8g3FvRx";

#[test]
fn the_store_names_locks_as_phorge_does() {
    let store = MysqlStore::new(&config("phorge")).expect("valid config");
    assert_eq!(store.hook_lock_name(HOOK), SPEC_NAME);
}

#[tokio::test]
async fn the_server_side_lock_is_phorges_name_held_by_the_lock_session() {
    with_db(|db| async move {
        let (a, b) = (db.store(), db.store());
        let expected = hook_lock_name(&db.namespace, HOOK);
        assert_eq!(db.lock_holder(&expected).await, None);

        let lock = a.try_lock_hook(HOOK).await.expect("lock").expect("free");
        assert_eq!(lock.name(), expected);
        assert_eq!(
            db.lock_holder(&expected).await,
            Some(lock.connection_id()),
            "IS_USED_LOCK(Phorge's name) is the lock's session"
        );
        assert!(
            b.lock_hook(HOOK).await.expect("lock").is_none(),
            "second store"
        );
        assert!(
            a.lock_hook(HOOK).await.expect("lock").is_none(),
            "same store, other session"
        );

        Box::new(lock).release().await.expect("release");
        assert_eq!(db.lock_holder(&expected).await, None);
        let again = b
            .lock_hook(HOOK)
            .await
            .expect("lock")
            .expect("free after release");
        again.release().await.expect("release");
        assert_eq!(db.lock_holder(&expected).await, None);
    })
    .await;
}

#[tokio::test]
async fn a_php_worker_holding_the_lock_keeps_the_daemon_out() {
    with_db(|db| async move {
        let store = db.store();
        let name = hook_lock_name(&db.namespace, HOOK);
        // A PHP worker's session, as PhabricatorGlobalLock takes it.
        let mut php = db.conn().await;
        let taken: Option<i64> = php
            .exec_first("SELECT GET_LOCK(?, 0)", (name.as_str(),))
            .await
            .expect("GET_LOCK");
        assert_eq!(taken, Some(1));
        assert!(store.lock_hook(HOOK).await.expect("lock").is_none());
        let released: Option<i64> = php
            .exec_first("SELECT RELEASE_LOCK(?)", (name.as_str(),))
            .await
            .expect("RELEASE_LOCK");
        assert_eq!(released, Some(1));
        let lock = store
            .lock_hook(HOOK)
            .await
            .expect("lock")
            .expect("free now");
        lock.release().await.expect("release");
    })
    .await;
}

#[tokio::test]
async fn a_lock_dropped_inside_the_runtime_is_freed() {
    with_db(|db| async move {
        let store = db.store();
        let name = hook_lock_name(&db.namespace, HOOK);
        let lock = store.lock_hook(HOOK).await.expect("lock").expect("free");
        assert!(db.lock_holder(&name).await.is_some());
        drop(lock);
        assert!(
            db.lock_freed_eventually(&name).await,
            "drop must free the lock"
        );
        let again = store.lock_hook(HOOK).await.expect("lock").expect("free");
        again.release().await.expect("release");
    })
    .await;
}

#[tokio::test]
async fn a_lock_dropped_without_a_runtime_is_freed() {
    with_db(|db| async move {
        let store = db.store();
        let name = hook_lock_name(&db.namespace, HOOK);
        let lock = store
            .try_lock_hook(HOOK)
            .await
            .expect("lock")
            .expect("free");
        let holder = lock.connection_id();
        assert_eq!(db.lock_holder(&name).await, Some(holder));
        // A plain thread has no Tokio handle: no task can run RELEASE_LOCK,
        // so the connection's reset (or close) must free the lock.
        std::thread::spawn(move || drop(lock))
            .join()
            .expect("drop on a plain thread");
        assert!(
            db.lock_freed_eventually(&name).await,
            "the reset must free the lock"
        );
        // The store keeps working and can take the lock again.
        let again = store
            .try_lock_hook(HOOK)
            .await
            .expect("lock")
            .expect("free");
        assert_eq!(db.lock_holder(&name).await, Some(again.connection_id()));
        Box::new(again).release().await.expect("release");
    })
    .await;
}
