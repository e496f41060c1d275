//! `doctor`: the hand-off checks against tables created from Phorge's
//! definitions — silent mode and leftover PHP delivery tasks — and what it
//! says when those tables cannot be read.

use webhook_test_support::mariadb::with_phorge_side;
use webhook_test_support::with_db;

use crate::support::on_db;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_reports_silent_mode_and_php_delivery() {
    with_db(|db| async move {
        let db = &db;
        with_phorge_side(&db.namespace, |side| async move {
            let healthy = on_db(db, &["doctor"]).await;
            assert_eq!(healthy.status, 0, "{}", healthy.all_output());
            assert!(
                healthy.stdout.contains("ok    silent-mode"),
                "{}",
                healthy.stdout
            );
            assert!(healthy.stdout.contains("ok    php-delivery"));

            side.set_silent(Some("true")).await;
            side.queue_php_task(true).await;
            let worried = on_db(db, &["doctor", "--json"]).await;
            assert_eq!(worried.status, 1, "PHP delivering is a failed check");
            let checks = worried.json()["checks"].clone();
            let verdict = |name: &str| {
                checks
                    .as_array()
                    .and_then(|all| all.iter().find(|c| c["check"] == name))
                    .map(|c| c["verdict"].as_str().unwrap_or_default().to_owned())
            };
            assert_eq!(verdict("silent-mode").as_deref(), Some("warn"));
            assert_eq!(verdict("php-delivery").as_deref(), Some("fail"));
            assert_eq!(verdict("schema").as_deref(), Some("ok"));
            assert!(worried.stdout.contains("1 leased"), "{}", worried.stdout);
        })
        .await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_says_what_it_cannot_see() {
    with_db(|db| async move {
        let run = on_db(&db, &["doctor"]).await;
        assert_eq!(run.status, 0, "unreadable checks warn, they do not fail");
        assert!(
            run.stdout
                .contains("cannot read {namespace}_config.config_entry"),
            "{}",
            run.stdout
        );
        assert!(run
            .stdout
            .contains("cannot read {namespace}_worker.worker_activetask"));
    })
    .await;
}
