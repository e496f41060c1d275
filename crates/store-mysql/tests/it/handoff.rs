//! The hand-off checks on real tables created from Phorge's definitions:
//! silent mode from `{ns}_config.config_entry`, PHP delivery tasks from
//! `{ns}_worker.worker_activetask`, and a clear error when they are absent.

use webhook_core::hold::PhorgeConfig;
use webhook_store_mysql::PhpDeliveryTasks;
use webhook_test_support::mariadb::with_phorge_side;

use crate::fixture::with_db;

#[tokio::test]
async fn silent_mode_follows_phorges_config_entry() {
    with_db(|db| async move {
        let store = db.store();
        assert!(
            store.silent_mode().await.is_err(),
            "no config database: an error, for the caller to report once"
        );
        let namespace = db.namespace.clone();
        let (db, store) = (&db, &store);
        with_phorge_side(&db.namespace, |side| async move {
            assert!(!store.silent_mode().await.expect("readable"), "no row: off");
            side.set_silent(Some("true")).await;
            assert!(store.silent_mode().await.expect("readable"));
            side.set_silent(Some("false")).await;
            assert!(!store.silent_mode().await.expect("readable"));
            // Read as PHP's `if (json_decode($value, true))`.
            for (value, silent) in [
                ("1", true),
                ("\"yes\"", true),
                ("0", false),
                ("\"\"", false),
            ] {
                side.set_silent(Some(value)).await;
                assert_eq!(
                    store.silent_mode().await.expect("readable"),
                    silent,
                    "{value}"
                );
            }
            side.set_silent(Some("true")).await;
            db.exec(&format!(
                "UPDATE `{namespace}_config`.config_entry SET isDeleted = 1"
            ))
            .await;
            assert!(
                !store.silent_mode().await.expect("readable"),
                "deleted: off"
            );
        })
        .await;
    })
    .await;
}

#[tokio::test]
async fn php_delivery_tasks_are_counted_queued_and_leased() {
    with_db(|db| async move {
        let store = db.store();
        assert!(
            store.php_delivery_tasks().await.is_err(),
            "no worker database"
        );
        let db = &db;
        with_phorge_side(&db.namespace, |side| async move {
            assert_eq!(
                store.php_delivery_tasks().await.expect("readable"),
                PhpDeliveryTasks::default()
            );
            side.queue_php_task(false).await;
            side.queue_php_task(false).await;
            side.queue_php_task(true).await;
            let lapsed = side.queue_task("HeraldWebhookWorker", None).await;
            side.set_lease(lapsed, Some("12345:1700000000:php-host:2"), Some(-5))
                .await;
            let yielded = side.queue_task("HeraldWebhookWorker", None).await;
            side.set_lease(yielded, Some("(yield)"), Some(60)).await;
            let adopted = side.queue_task("HeraldWebhookWorker", None).await;
            side.set_lease(adopted, Some("gorge-webhook:host:1:2:3"), Some(300))
                .await;
            side.queue_task("PhabricatorSearchWorker", None).await;
            let tasks = store.php_delivery_tasks().await.expect("readable");
            assert_eq!(
                tasks,
                PhpDeliveryTasks {
                    queued: 3,
                    leased: 2,
                    adopted: 1,
                }
            );
            assert!(tasks.any());
        })
        .await;
    })
    .await;
}
