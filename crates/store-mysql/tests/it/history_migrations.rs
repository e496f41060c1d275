//! The history's schema: `prepare` creates the database and its tables,
//! applies each migration once however many instances start together,
//! refuses a schema newer than it knows, and names each privilege the
//! account lacks.

use mysql_async::prelude::Queryable;
use webhook_store_mysql::{HistoryError, HISTORY_SCHEMA_VERSION};

use crate::fixture::{as_root, dropping_after, server_conn, with_account};
use crate::history_fixture::{history, with_history_db};

async fn versions(database: &str) -> Vec<(u32, String)> {
    let mut conn = server_conn().await;
    let rows: Vec<(u32, String)> = conn
        .query(format!(
            "SELECT version, name FROM `{database}`.schema_version ORDER BY version"
        ))
        .await
        .expect("versions");
    conn.disconnect().await.expect("disconnect");
    rows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn prepare_creates_the_schema_once_however_often_and_concurrently_it_runs() {
    with_history_db(|db, database| async move {
        let instances: Vec<_> = (0..4)
            .map(|i| history(&db, &database, &format!("host:{i}")))
            .collect();
        let prepared =
            futures::future::join_all(instances.iter().map(|history| history.prepare())).await;
        for outcome in prepared {
            outcome.expect("prepared");
        }
        assert_eq!(versions(&database).await, [(1, "attempt table".to_owned())]);
        instances[0].prepare().await.expect("again");
        assert_eq!(versions(&database).await.len(), 1);
        let mut conn = server_conn().await;
        let tables: Vec<String> = conn
            .exec(
                "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? \
                 ORDER BY TABLE_NAME",
                (database.as_str(),),
            )
            .await
            .expect("tables");
        assert_eq!(tables, ["attempt", "schema_version"]);
        conn.disconnect().await.expect("disconnect");
        for history in instances {
            history.disconnect().await.expect("close");
        }
        // The Phorge database got nothing.
        let mut conn = db.conn().await;
        let phorge: Vec<String> = conn
            .exec(
                "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? \
                 ORDER BY TABLE_NAME",
                (db.database.as_str(),),
            )
            .await
            .expect("tables");
        assert_eq!(phorge, ["herald_webhook", "herald_webhookrequest"]);
    })
    .await;
}

#[tokio::test]
async fn a_schema_newer_than_known_is_refused() {
    with_history_db(|db, database| async move {
        let history = history(&db, &database, "host:1");
        history.prepare().await.expect("prepared");
        as_root(&format!(
            "INSERT INTO `{database}`.schema_version VALUES ({}, 'from the future', NOW())",
            HISTORY_SCHEMA_VERSION + 1
        ))
        .await;
        let err = history.prepare().await.expect_err("too new");
        match &err {
            HistoryError::TooNew {
                database: named,
                found,
                known,
            } => {
                assert_eq!(named, &database);
                assert_eq!((*found, *known), (2, 1));
            }
            other => panic!("{other:?}"),
        }
        let text = err.to_string();
        assert!(text.contains("version 2") && text.contains("(1)"), "{text}");
    })
    .await;
}

#[tokio::test]
async fn each_missing_privilege_is_named() {
    with_history_db(|db, database| async move {
        history(&db, &database, "root")
            .prepare()
            .await
            .expect("prepared as root");
        let user = format!("{}_hw", db.namespace);
        with_account(&user, "SELECT, DELETE", &database, async {
            let history = webhook_store_mysql::MysqlHistory::new(
                &webhook_store_mysql::MysqlConfig {
                    user: user.clone(),
                    ..db.config()
                },
                webhook_store_mysql::HistoryConfig::with_defaults(&database),
                "host:1",
            )
            .expect("valid");
            match history.prepare().await {
                Err(HistoryError::Privileges(missing)) => {
                    assert_eq!(missing, [format!("INSERT on {database}.attempt")]);
                }
                other => panic!("{other:?}"),
            }
            history.disconnect().await.expect("close");
        })
        .await;
        // A database the account may not create.
        let fresh = format!("{database}_b");
        let user = format!("{}_hc", db.namespace);
        dropping_after(&fresh.clone(), async {
            with_account(&user, "SELECT, INSERT, DELETE", &fresh, async {
                let history = webhook_store_mysql::MysqlHistory::new(
                    &webhook_store_mysql::MysqlConfig {
                        user: user.clone(),
                        ..db.config()
                    },
                    webhook_store_mysql::HistoryConfig::with_defaults(&fresh),
                    "host:1",
                )
                .expect("valid");
                match history.prepare().await {
                    Err(err @ HistoryError::Privileges(_)) => {
                        let HistoryError::Privileges(missing) = &err else {
                            unreachable!()
                        };
                        assert_eq!(missing, &[format!("CREATE on {fresh}")]);
                        assert!(err.to_string().contains("GORGE_WEBHOOK_HISTORY"), "{err}");
                    }
                    other => panic!("{other:?}"),
                }
                history.disconnect().await.expect("close");
            })
            .await;
        })
        .await;
    })
    .await;
}
