//! The per-hook lock is Phorge's own `GET_LOCK` name, server-wide: seen
//! from an unrelated session while held, refused to a second store (and
//! taken from under a PHP worker never), and freed on release, on drop
//! inside a runtime, and on drop with no runtime at all. Many locks share
//! a few lock sessions outside the pool; a lock session that breaks loses
//! every lock on it at once.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use webhook_core::{hook_lock_name, HookLock, QueueCounts, Store};
use webhook_store_mysql::{MysqlConfig, MysqlHookLock, MysqlStore};

use crate::fixture::{config, with_db, TestDb};

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

/// A store of `db` with `lock_sessions` lock sessions.
fn store_with_lock_sessions(db: &TestDb, lock_sessions: usize) -> MysqlStore {
    MysqlStore::new(&MysqlConfig {
        lock_sessions,
        ..config(&db.namespace)
    })
    .expect("valid config")
}

fn hook(n: usize) -> String {
    format!("PHID-HWBH-many{n:016}")
}

/// Takes `phid`'s lock, which must be free.
async fn take(store: &MysqlStore, phid: &str) -> MysqlHookLock {
    store
        .try_lock_hook(phid)
        .await
        .expect("lock")
        .expect("free")
}

async fn take_all(store: &MysqlStore, hooks: &[String]) -> Vec<MysqlHookLock> {
    let mut locks = Vec::new();
    for phid in hooks {
        locks.push(take(store, phid).await);
    }
    locks
}
#[tokio::test]
async fn hundreds_of_locks_are_held_by_the_few_lock_sessions_and_each_by_its_name() {
    with_db(|db| async move {
        let store = store_with_lock_sessions(&db, 4);
        let hooks: Vec<String> = (0..300).map(hook).collect();
        // Taken concurrently, as hundreds of hook runs would.
        let taken = futures::future::join_all(hooks.iter().map(|h| store.try_lock_hook(h))).await;
        let locks: Vec<MysqlHookLock> = taken
            .into_iter()
            .map(|t| t.expect("lock").expect("free"))
            .collect();
        let sessions: HashSet<u32> = locks.iter().map(MysqlHookLock::connection_id).collect();
        assert!(
            (1..=4).contains(&sessions.len()),
            "300 locks on {} sessions",
            sessions.len()
        );
        assert_eq!(store.hook_locks_held(), 300);
        for lock in locks.iter().step_by(37) {
            assert_eq!(
                db.lock_holder(lock.name()).await,
                Some(lock.connection_id())
            );
        }
        // Another store (another daemon) is refused every one of them.
        let other = db.store();
        for phid in hooks.iter().step_by(29) {
            assert!(
                other.try_lock_hook(phid).await.expect("lock").is_none(),
                "{phid}"
            );
        }
        for lock in locks {
            Box::new(lock).release().await.expect("release");
        }
        assert_eq!(store.hook_locks_held(), 0);
        for phid in hooks.iter().step_by(29) {
            let name = hook_lock_name(&db.namespace, phid);
            assert_eq!(db.lock_holder(&name).await, None, "{phid}");
        }
        store.disconnect().await.expect("close");
    })
    .await;
}

#[tokio::test]
async fn a_name_held_on_a_lock_session_is_refused_to_a_second_take_there() {
    with_db(|db| async move {
        // One lock session: the server would grant the same name again to
        // the same session (a nested lock), so the refusal must be ours.
        let store = store_with_lock_sessions(&db, 1);
        let first = take(&store, HOOK).await;
        assert!(store.try_lock_hook(HOOK).await.expect("lock").is_none());
        Box::new(first).release().await.expect("release");
        // Released once, freed on the server: not still held by a nested
        // count.
        let name = hook_lock_name(&db.namespace, HOOK);
        assert_eq!(db.lock_holder(&name).await, None);
        store.disconnect().await.expect("close");
    })
    .await;
}

/// Kills server session `id` from a connection of the test's own.
async fn kill(db: &TestDb, id: u32) {
    db.conn()
        .await
        .query_drop(format!("KILL CONNECTION {id}"))
        .await
        .expect("KILL");
}

#[tokio::test]
async fn a_broken_lock_session_loses_every_lock_on_it_at_once() {
    with_db(|db| async move {
        let store = store_with_lock_sessions(&db, 1);
        let hooks: Vec<String> = (0..3).map(hook).collect();
        let mut locks = take_all(&store, &hooks).await;
        let id = locks[0].connection_id();
        assert!(locks
            .iter()
            .all(|l| l.connection_id() == id && l.epoch_is_live()));

        kill(&db, id).await;
        // The first holder to ask finds out, and with it every other
        // holder, before any of them asks the server.
        assert!(!locks[0]
            .still_held()
            .await
            .expect("a lost lock is a certain no"));
        assert!(locks.iter().all(|l| !l.epoch_is_live()), "{locks:?}");
        for lock in &mut locks[1..] {
            assert!(!lock.still_held().await.expect("check"));
        }
        assert_eq!(store.hook_locks_held(), 0);

        // The next take opens a new session; an old holder's release must
        // not free the new holder's lock of the same name.
        let mut again = take(&store, &hooks[0]).await;
        assert_ne!(again.connection_id(), id);
        let old = locks.remove(0);
        assert!(Box::new(old).release().await.is_err(), "not held any more");
        assert!(again.still_held().await.expect("check"));
        assert_eq!(
            db.lock_holder(again.name()).await,
            Some(again.connection_id())
        );
        Box::new(again).release().await.expect("release");
        store.disconnect().await.expect("close");
    })
    .await;
}

#[tokio::test]
async fn a_lock_session_broken_while_nobody_asks_is_found_out_by_its_own_check() {
    with_db(|db| async move {
        let store = store_with_lock_sessions(&db, 1);
        let locks = take_all(&store, &[hook(0), hook(1)]).await;
        kill(&db, locks[0].connection_id()).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        while locks.iter().any(MysqlHookLock::epoch_is_live) {
            assert!(
                Instant::now() < deadline,
                "the session's own check never ran"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        store.disconnect().await.expect("close");
    })
    .await;
}

#[tokio::test]
async fn lock_sessions_take_no_pooled_connection() {
    with_db(|db| async move {
        // One pooled connection: with a lock held, statements still run.
        let store = MysqlStore::new(&MysqlConfig {
            pool_max: 1,
            lock_sessions: 1,
            ..config(&db.namespace)
        })
        .expect("valid config");
        let lock = take(&store, HOOK).await;
        tokio::time::timeout(Duration::from_secs(30), store.stats())
            .await
            .expect("a statement waited for the lock session's connection")
            .expect("stats");
        Box::new(lock).release().await.expect("release");
        store.disconnect().await.expect("close");
    })
    .await;
}

#[tokio::test]
async fn a_take_whose_asker_went_away_after_the_grant_is_released() {
    with_db(|db| async move {
        let store = store_with_lock_sessions(&db, 1);
        let name = hook_lock_name(&db.namespace, HOOK);
        let mut asking = Box::pin(store.try_lock_hook(HOOK));
        assert!(futures::poll!(&mut asking).is_pending(), "asked");
        // The lock session takes it on the server and answers; the asker
        // never reads the answer.
        let deadline = Instant::now() + Duration::from_secs(30);
        while db.lock_holder(&name).await.is_none() {
            assert!(Instant::now() < deadline, "never taken");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        drop(asking);
        assert!(
            db.lock_freed_eventually(&name).await,
            "a grant nobody claimed must not stay held"
        );
        let other = db.store();
        let again = take(&other, HOOK).await;
        Box::new(again).release().await.expect("release");
        store.disconnect().await.expect("close");
    })
    .await;
}
