//! A privilege taken away and given back. MariaDB applies a database-level
//! grant only to sessions opened after it, so a connection opened while the
//! account lacked `UPDATE` refuses every claim for as long as it lives. The
//! store reports the refusal as `StoreError::Denied`, with the server's
//! words, and retires such a connection: once the grant is back, the *same*
//! store claims again within a few statements. The hook-lock sessions,
//! opened outside the pool, report a refused login the same way and open
//! afresh once it is allowed.
//!
//! Before that, the check of what delivery needs: each privilege the
//! account lacks is named, from the statements themselves under `EXPLAIN`,
//! and nothing is changed.

use mysql_async::prelude::Queryable;
use webhook_core::memory_store::NewRequest;
use webhook_core::{Claim, QueueCounts, Store, StoreError};
use webhook_store_mysql::{MysqlConfig, MysqlReader, MysqlStore};

use crate::fixture::{as_root, config, server_conn, with_account, with_db, TestDb};

const HOOK: &str = "PHID-HWBH-grantsaaaaaaaaaaaaaa";
/// Connections in the store's pool: at most this many can have been opened
/// while the privilege was missing.
const POOL_MAX: usize = 2;

/// `KILL`s every session of `user`, so the store opens new ones (which get
/// the account's privileges as they are now).
async fn kill_sessions_of(user: &str) -> usize {
    let mut conn = server_conn().await;
    let ids: Vec<u64> = conn
        .exec(
            "SELECT ID FROM information_schema.PROCESSLIST WHERE USER = ?",
            (user,),
        )
        .await
        .expect("processlist");
    for id in &ids {
        // Gone already is as good.
        let _ = conn.query_drop(format!("KILL CONNECTION {id}")).await;
    }
    conn.disconnect().await.expect("disconnect");
    ids.len()
}

fn store_as(db: &TestDb, user: &str) -> MysqlStore {
    MysqlStore::new(&MysqlConfig {
        user: user.to_owned(),
        pool_max: POOL_MAX,
        ..config(&db.namespace)
    })
    .expect("valid config")
}

/// Claims a fresh queued row.
async fn claim_fresh(db: &TestDb, store: &MysqlStore) -> Result<Claim, StoreError> {
    let id = db
        .insert_request(&NewRequest::queued(HOOK, r#"{"retry":"forever"}"#))
        .await;
    store.claim(id, db.row(id).await.date_modified).await
}

/// Claims until one is refused for the missing privilege (a claim on a
/// session just killed fails as unavailable first); the refusal.
async fn first_refusal(db: &TestDb, store: &MysqlStore) -> StoreError {
    let mut seen = Vec::new();
    for _ in 0..10 {
        match claim_fresh(db, store).await {
            Err(err @ StoreError::Denied(_)) => return err,
            other => seen.push(format!("{other:?}")),
        }
    }
    panic!("no claim was refused for the missing privilege: {seen:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_delivery_needs_is_named_one_by_one_and_nothing_is_changed() {
    with_db(|db| async move {
        let ns = &db.namespace;
        let id = db
            .insert_request(&NewRequest::queued(HOOK, r#"{"retry":"forever"}"#))
            .await;
        let before = db.row(id).await;
        let root = db.store();
        assert_eq!(
            root.delivery_needs_missing().await.expect("checked"),
            Vec::<String>::new()
        );
        let user = format!("{ns}_select");
        with_account(&user, "SELECT", &db.database, async {
            let store = store_as(&db, &user);
            assert_eq!(
                store.delivery_needs_missing().await.expect("checked"),
                [format!("UPDATE on {ns}_herald.herald_webhookrequest")]
            );
            let reader = MysqlReader::new(&MysqlConfig {
                user: user.clone(),
                ..config(ns)
            })
            .expect("valid config");
            assert_eq!(
                reader.delivery_grants_missing().await.expect("checked"),
                [format!("UPDATE on {ns}_herald.herald_webhookrequest")]
            );
            // The claim's one column, not the write-back's others.
            as_root(&format!(
                "GRANT UPDATE (dateModified) ON `{}`.herald_webhookrequest TO '{user}'@'%'",
                db.database
            ))
            .await;
            as_root(&format!(
                "REVOKE SELECT ON `{}`.* FROM '{user}'@'%'",
                db.database
            ))
            .await;
            as_root(&format!(
                "GRANT SELECT ON `{}`.herald_webhookrequest TO '{user}'@'%'",
                db.database
            ))
            .await;
            let fresh = store_as(&db, &user);
            assert_eq!(
                fresh.delivery_needs_missing().await.expect("checked"),
                [
                    format!("UPDATE on {ns}_herald.herald_webhookrequest"),
                    format!("SELECT on {ns}_herald.herald_webhook"),
                ]
            );
            store.disconnect().await.expect("close");
            fresh.disconnect().await.expect("close");
            reader.disconnect().await.expect("close");
        })
        .await;
        assert_eq!(db.row(id).await, before, "the check changed the row");
        root.disconnect().await.expect("close");
    })
    .await;
}

#[tokio::test]
async fn what_delivery_needs_cannot_be_told_before_phorges_tables_exist() {
    with_db(|db| async move {
        db.exec("DROP TABLE herald_webhook").await;
        let err = db
            .store()
            .delivery_needs_missing()
            .await
            .expect_err("no table, no verdict");
        assert!(matches!(err, StoreError::Query(_)), "{err:?}");
        assert!(err.to_string().contains("herald_webhook"), "{err}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_given_back_is_used_by_the_same_store_within_a_few_statements() {
    with_db(|db| async move {
        let user = format!("{}_grants", db.namespace);
        with_account(&user, "SELECT, UPDATE", &db.database, async {
            let store = store_as(&db, &user);
            assert!(matches!(claim_fresh(&db, &store).await, Ok(Claim::Won(_))));

            as_root(&format!(
                "REVOKE UPDATE ON `{}`.* FROM '{user}'@'%'",
                db.database
            ))
            .await;
            // The sessions it has keep the privileges they started with: cut
            // them, so new ones open without it (a reconnect, a failover).
            assert!(kill_sessions_of(&user).await > 0);
            let refused = first_refusal(&db, &store).await;
            let text = refused.to_string();
            assert!(
                text.starts_with("database access denied: ERROR 1142")
                    && text.contains("UPDATE command denied"),
                "{text}"
            );
            // Fill the pool with sessions opened while the privilege is
            // missing: reads still work on them.
            let (a, b) = tokio::join!(store.hook_count(), store.hook_count());
            a.expect("reads need no UPDATE");
            b.expect("reads need no UPDATE");

            as_root(&format!(
                "GRANT UPDATE ON `{}`.* TO '{user}'@'%'",
                db.database
            ))
            .await;
            // Each session from before the grant refuses once and is
            // retired; a new one claims.
            let mut outcomes = Vec::new();
            for _ in 0..=POOL_MAX + 1 {
                let outcome = claim_fresh(&db, &store).await;
                let won = matches!(outcome, Ok(Claim::Won(_)));
                outcomes.push(format!("{outcome:?}"));
                if won {
                    break;
                }
            }
            assert!(
                outcomes
                    .last()
                    .is_some_and(|last| last.starts_with("Ok(Won(")),
                "the restored grant was not used: {outcomes:#?}"
            );
            for _ in 0..5 {
                assert!(matches!(claim_fresh(&db, &store).await, Ok(Claim::Won(_))));
            }
            eprintln!(
                "grant restored: won after {} refused claim(s)",
                outcomes.len() - 1
            );
            store.disconnect().await.expect("close");
        })
        .await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_session_refused_its_login_reports_it_and_opens_once_allowed() {
    with_db(|db| async move {
        let user = format!("{}_locks", db.namespace);
        with_account(&user, "SELECT, UPDATE", &db.database, async {
            let store = store_as(&db, &user);
            let lock = store.lock_hook(HOOK).await.expect("lock").expect("free");
            lock.release().await.expect("release");

            // No privilege at all on the database: a new session may not
            // even select it.
            as_root(&format!(
                "REVOKE SELECT, UPDATE ON `{}`.* FROM '{user}'@'%'",
                db.database
            ))
            .await;
            kill_sessions_of(&user).await;
            let mut seen = Vec::new();
            let refused = loop {
                match store.lock_hook(HOOK).await {
                    Err(err @ StoreError::Denied(_)) => break err,
                    other => seen.push(format!("{other:?}")),
                }
                assert!(seen.len() < 5, "never refused: {seen:#?}");
            };
            let text = refused.to_string();
            assert!(text.contains("ERROR 1044"), "{text}");

            as_root(&format!(
                "GRANT SELECT, UPDATE ON `{}`.* TO '{user}'@'%'",
                db.database
            ))
            .await;
            let lock = store
                .lock_hook(HOOK)
                .await
                .expect("a new lock session once the login is allowed")
                .expect("free");
            assert!(db.lock_holder(&store.hook_lock_name(HOOK)).await.is_some());
            lock.release().await.expect("release");
            store.disconnect().await.expect("close");
        })
        .await;
    })
    .await;
}
