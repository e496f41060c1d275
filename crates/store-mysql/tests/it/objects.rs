//! Phorge's application tables, created as Phorge creates them: for every
//! PHID type the store knows, the object is found with its listed
//! transactions newest first, and a destroyed one is gone; tables that are
//! missing are `Unseen`, never an error.

use webhook_core::{Hook, ObjectLookup, PhorgeObjects, Unseen};
use webhook_store_mysql::{object_tables, OBJECT_TABLES};
use webhook_test_support::with_application_tables;

use crate::fixture::with_db;

fn found(transactions: &[&str]) -> ObjectLookup {
    ObjectLookup::Found {
        transactions: transactions.iter().map(|t| (*t).to_owned()).collect(),
    }
}

#[tokio::test]
async fn every_known_type_is_read_from_its_own_tables() {
    with_db(|db| async move {
        let store = db.store();
        for tables in OBJECT_TABLES {
            let kind = tables.phid_type;
            let object = format!("PHID-{kind}-objectsaaaaaaaaaaaa");
            let xacts: Vec<String> = (1..=3).map(|n| format!("PHID-XACT-{kind}-x{n}")).collect();
            let [x1, x2, x3] = [&xacts[0], &xacts[1], &xacts[2]].map(String::as_str);
            let (db, store) = (&db, &store);
            with_application_tables(&db.namespace, tables, |apps| async move {
                if kind == "HWBH" {
                    // A test call's default object is the hook itself.
                    db.insert_hook(&Hook {
                        phid: object.clone(),
                        name: "hook".into(),
                        uri: "https://example.invalid/".into(),
                        status: "enabled".into(),
                        hmac_key: "abcdefghijklmnopqrstuvwxyz234567".into(),
                    })
                    .await;
                    apps.apply(&object, &[x1, x2, x3]).await;
                } else {
                    apps.insert_object(&object, &[x1, x2, x3]).await;
                }
                let stored_order = [x1, x2, x3, "PHID-XACT-gone"];
                let lookup = store.lookup(&object, &stored_order).await;
                assert_eq!(lookup.expect("lookup"), found(&[x3, x2, x1]), "{kind}");

                apps.delete_transaction(x2).await;
                let lookup = store.lookup(&object, &stored_order).await;
                assert_eq!(
                    lookup.expect("lookup"),
                    found(&[x3, x1]),
                    "{kind}: x2 deleted"
                );

                apps.destroy_object(&object).await;
                if kind == "HWBH" {
                    db.exec(&format!(
                        "DELETE FROM herald_webhook WHERE phid = '{object}'"
                    ))
                    .await;
                }
                let lookup = store.lookup(&object, &stored_order).await;
                assert_eq!(
                    lookup.expect("lookup"),
                    ObjectLookup::Gone,
                    "{kind}: destroyed"
                );
                assert_eq!(
                    store
                        .reader()
                        .object_tables_readable(tables)
                        .await
                        .expect("probe"),
                    Ok(()),
                    "{kind}"
                );
            })
            .await;
        }
        store.disconnect().await.expect("close pool");
    })
    .await;
}

#[tokio::test]
async fn missing_application_tables_are_unseen_not_errors() {
    with_db(|db| async move {
        let store = db.store();
        let maniphest = object_tables("TASK").expect("mapped");
        let lookup = store
            .lookup("PHID-TASK-objectsaaaaaaaaaaaa", &["PHID-XACT-TASK-x1"])
            .await
            .expect("no maniphest database is not a store failure");
        let expected_table = format!(
            "{ns}_maniphest.maniphest_task / {ns}_maniphest.maniphest_transaction",
            ns = db.namespace
        );
        assert_eq!(
            lookup,
            ObjectLookup::Unseen(Unseen::NoAccess {
                phid_type: "TASK".into(),
                table: expected_table,
            })
        );
        assert_eq!(
            store
                .reader()
                .object_tables_readable(maniphest)
                .await
                .expect("probe"),
            Err(format!("{}_maniphest.maniphest_task", db.namespace))
        );
        let unknown = store
            .lookup("PHID-ZZZZ-objectsaaaaaaaaaaaa", &[])
            .await
            .expect("lookup");
        assert_eq!(
            unknown,
            ObjectLookup::Unseen(Unseen::UnknownType("ZZZZ".into()))
        );
        store.disconnect().await.expect("close pool");
    })
    .await;
}

/// The Compose fragment's account script grants `SELECT` on exactly the
/// application databases the object check reads (besides herald's).
#[test]
fn the_account_script_grants_every_objects_database() {
    let script = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/mariadb-init/10-accounts.sh"
    ))
    .expect("deploy/mariadb-init/10-accounts.sh");
    let listed = script
        .lines()
        .find_map(|line| line.strip_prefix("object_applications=\""))
        .and_then(|rest| rest.strip_suffix('"'))
        .expect("an object_applications=\"…\" line");
    let mut granted: Vec<&str> = listed.split_whitespace().collect();
    granted.sort_unstable();
    let mut read: Vec<&str> = OBJECT_TABLES
        .iter()
        .flat_map(|t| [t.object_application, t.transaction_application])
        .filter(|application| *application != "herald")
        .collect();
    read.sort_unstable();
    read.dedup();
    assert_eq!(granted, read);
}

/// More listed transactions than a statement takes placeholders for
/// (65,535): the server refuses that lookup for good, so it is `Unseen`
/// (the stored list is sent), not a failure retried forever.
#[tokio::test]
async fn a_lookup_the_server_refuses_is_unseen_not_an_error() {
    with_db(|db| async move {
        let store = db.store();
        let maniphest = object_tables("TASK").expect("mapped");
        let (db, store) = (&db, &store);
        with_application_tables(&db.namespace, maniphest, |tasks| async move {
            tasks
                .insert_object("PHID-TASK-objectsrefusedaaaa", &[])
                .await;
            let listed: Vec<String> = (0..70_000).map(|n| format!("PHID-XACT-TASK-{n}")).collect();
            let listed: Vec<&str> = listed.iter().map(String::as_str).collect();
            let lookup = store
                .lookup("PHID-TASK-objectsrefusedaaaa", &listed)
                .await
                .expect("a refused statement is not a store failure");
            assert!(
                matches!(
                    &lookup,
                    ObjectLookup::Unseen(Unseen::Refused { phid_type, .. }) if phid_type == "TASK"
                ),
                "{lookup:?}"
            );
        })
        .await;
        store.disconnect().await.expect("close pool");
    })
    .await;
}
