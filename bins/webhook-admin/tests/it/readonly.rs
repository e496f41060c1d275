//! No command changes a row: both tables are read in full before and after
//! running every database-backed command over every seeded case (`requeue`
//! as a dry run: without `--apply` it writes nothing), and must be
//! identical; no hook lock is left held.

use mysql_async::prelude::Queryable;
use mysql_async::{Row, Value};
use webhook_core::hook_lock_name;
use webhook_test_support::{with_db, TestDb};

use crate::explain::{seed_every_case, HOOK_GONE, HOOK_OFF, HOOK_OK, HOOK_TRIPPED};
use crate::support::{on_db, KEY};

/// Both tables, every column, in id order.
pub async fn snapshot(db: &TestDb) -> Vec<Vec<Value>> {
    let mut conn = db.conn().await;
    let mut all = Vec::new();
    for table in ["herald_webhookrequest", "herald_webhook"] {
        let rows: Vec<Row> = conn
            .query(format!("SELECT * FROM {table} ORDER BY id"))
            .await
            .expect("snapshot");
        all.extend(rows.into_iter().map(Row::unwrap));
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_command_changes_a_row() {
    with_db(|db| async move {
        let cases = seed_every_case(&db).await;
        let before = snapshot(&db).await;
        assert!(before.len() > 20, "seeded");

        let mut outputs = Vec::new();
        for args in [
            &["config"][..],
            &["config", "--json"],
            &["stats"],
            &["stats", "--json"],
            &["hooks"],
            &["hooks", "--json", "--show-uri"],
            &["requeue", "--hook", HOOK_OK],
            &["requeue", "--error", "http", "--json"],
            &["requeue", "--since", "0"],
        ] {
            let out = on_db(&db, args).await;
            assert_eq!(out.status, 0, "{args:?}: {out:?}");
            outputs.push(out);
        }
        for case in &cases {
            let id = case.id.to_string();
            for args in [
                &["explain", &id][..],
                &["explain", &id, "--json"],
                &["payload", &id],
                &["requeue", &id],
            ] {
                let out = on_db(&db, args).await;
                assert!(
                    out.status == 0 || (args[0] == "payload" && out.status == 1),
                    "{out:?}"
                );
                outputs.push(out);
            }
        }

        assert_eq!(snapshot(&db).await, before, "no row may change");
        for hook in [HOOK_OK, HOOK_TRIPPED, HOOK_OFF, HOOK_GONE] {
            assert_eq!(
                db.lock_holder(&hook_lock_name(&db.namespace, hook)).await,
                None
            );
        }
        for out in outputs {
            assert!(
                !out.all_output().contains(KEY),
                "a key was printed: {out:?}"
            );
        }
    })
    .await;
}
