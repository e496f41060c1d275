//! The startup schema check against real tables: complete schema passes,
//! a missing column is an error naming it, a missing or different
//! `key_status` is a warning — and the check never changes the schema.

use webhook_store_mysql::{MysqlError, SchemaWarning};

use crate::fixture::{with_db, TestDb};

async fn index_count(db: &TestDb, index: &str) -> u64 {
    use mysql_async::prelude::Queryable;
    db.conn()
        .await
        .exec_first(
            "SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? \
             AND TABLE_NAME = 'herald_webhookrequest' AND INDEX_NAME = ?",
            (db.database.as_str(), index),
        )
        .await
        .expect("statistics")
        .expect("row")
}

#[tokio::test]
async fn phorge_schema_passes_without_warnings() {
    with_db(|db| async move {
        assert_eq!(db.store().check_schema().await.expect("schema"), vec![]);
    })
    .await;
}

#[tokio::test]
async fn missing_key_status_is_a_warning_and_is_not_created() {
    with_db(|db| async move {
        db.exec("ALTER TABLE herald_webhookrequest DROP INDEX key_status")
            .await;
        let warnings = db.store().check_schema().await.expect("schema");
        assert_eq!(warnings, vec![SchemaWarning::MissingStatusIndex]);
        assert!(warnings[0].to_string().contains("key_status"));
        assert_eq!(
            index_count(&db, "key_status").await,
            0,
            "no DDL from the check"
        );
    })
    .await;
}

#[tokio::test]
async fn key_status_on_other_columns_is_a_warning() {
    with_db(|db| async move {
        db.exec(
            "ALTER TABLE herald_webhookrequest DROP INDEX key_status, ADD KEY key_status (status)",
        )
        .await;
        assert_eq!(
            db.store().check_schema().await.expect("schema"),
            vec![SchemaWarning::UnexpectedStatusIndex {
                columns: vec!["status".to_owned()]
            }]
        );
    })
    .await;
}

#[tokio::test]
async fn missing_columns_are_named() {
    with_db(|db| async move {
        db.exec("ALTER TABLE herald_webhook DROP COLUMN hmacKey").await;
        db.exec("ALTER TABLE herald_webhookrequest DROP COLUMN lastRequestEpoch, DROP COLUMN objectPHID")
            .await;
        match db.store().check_schema().await {
            Err(err @ MysqlError::MissingColumns { .. }) => {
                let text = err.to_string();
                let MysqlError::MissingColumns { table, columns, .. } = err else {
                    unreachable!()
                };
                assert_eq!(table, "herald_webhookrequest");
                assert_eq!(columns, vec!["objectPHID", "lastRequestEpoch"]);
                assert!(text.contains("objectPHID, lastRequestEpoch"), "{text}");
            }
            other => panic!("expected MissingColumns, got {other:?}"),
        }
        db.exec("ALTER TABLE herald_webhookrequest ADD COLUMN lastRequestEpoch INT UNSIGNED NOT NULL, \
                 ADD COLUMN objectPHID VARBINARY(64) NOT NULL")
            .await;
        match db.store().check_schema().await {
            Err(MysqlError::MissingColumns { table, columns, .. }) => {
                assert_eq!(table, "herald_webhook");
                assert_eq!(columns, vec!["hmacKey"]);
            }
            other => panic!("expected MissingColumns, got {other:?}"),
        }
    })
    .await;
}

#[tokio::test]
async fn missing_hook_table_is_named() {
    with_db(|db| async move {
        db.exec("DROP TABLE herald_webhook").await;
        match db.store().check_schema().await {
            Err(MysqlError::MissingTable { table, .. }) => assert_eq!(table, "herald_webhook"),
            other => panic!("expected MissingTable, got {other:?}"),
        }
    })
    .await;
}
