//! Hand-off safety end to end, on tables created from Phorge's definitions
//! next to the herald database: global silent mode in Phorge's
//! `conf/local/local.json` or in `{ns}_config.config_entry` holds every
//! claim until it ends, leftover PHP
//! delivery tasks in `{ns}_worker.worker_activetask` are reported loudly,
//! and absent tables give one clear message each without stopping
//! delivery.

use std::time::Duration;

use webhook_core::memory_store::NewRequest;
use webhook_core::{Hook, RequestStatus};
use webhook_test_support::mariadb::with_phorge_side;
use webhook_test_support::{with_db, LocalJson, Receiver, TestDb};

use crate::daemon::{database_env, Daemon};
use crate::support::until;

const DEADLINE: Duration = Duration::from_secs(60);
const HOOK: &str = "PHID-HWBH-handoffaaaaaaaaaaaaa";
const NEVER: &str = r#"{"retry":"never","triggerPHIDs":["PHID-HRUL-handoff"]}"#;

/// A daemon on the test's database, polling every 100 ms, calling
/// loopback receivers, logging at info.
pub(crate) fn env(namespace: &str) -> Vec<(String, String)> {
    let mut env = database_env(namespace);
    env.extend(
        [
            ("GORGE_WEBHOOK_POLL_INTERVAL_MS", "100"),
            ("GORGE_WEBHOOK_OUTBOUND_ALLOW", "127.0.0.1/32"),
            ("GORGE_LOG_LEVEL", "info"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned())),
    );
    env
}

async fn hook_to(db: &TestDb, receiver: &Receiver) {
    db.insert_hook(&Hook {
        phid: HOOK.to_owned(),
        name: "hand-off".to_owned(),
        uri: receiver.url("/handoff"),
        status: "enabled".to_owned(),
        hmac_key: "abcdefghijklmnopqrstuvwxyz234567".to_owned(),
    })
    .await;
}

async fn metrics(daemon: &Daemon) -> String {
    daemon.get("/metrics", &[]).await.text()
}

/// The value of one series (`name` or `name{labels}`) in a scrape: the
/// whole line, so `# HELP name 1 while …` is not taken for a value.
fn sample(text: &str, series: &str) -> Option<String> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map(str::to_owned)
}

/// Whether the daemon's `/metrics` shows `series` at `value` now.
async fn shows(daemon: &Daemon, series: &str, value: &str) -> bool {
    sample(&metrics(daemon).await, series).as_deref() == Some(value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_mode_holds_delivery_until_phorge_leaves_it() {
    with_db(|db| async move {
        let db = &db;
        with_phorge_side(&db.namespace, |side| async move {
            let receiver = Receiver::start().await;
            hook_to(db, &receiver).await;
            side.set_silent(Some("true")).await;
            let id = db.insert_request(&NewRequest::queued(HOOK, NEVER)).await;
            let mut daemon = Daemon::start("silent", &env(&db.namespace)).await;

            until(&daemon, "the silent_mode_on log line", async || {
                daemon.stderr().contains("silent_mode_on")
            })
            .await;
            let ready = daemon.get("/readyz", &[]).await;
            assert_eq!(ready.status, 200, "holding is not unreadiness");
            // Exactly the documented body; `/metrics` says it holds.
            assert_eq!(ready.text().trim(), r#"{"status":"ok"}"#);
            assert!(shows(&daemon, "gorge_webhook_silent_mode", "1").await);
            // Many poll intervals later the row is still untouched.
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            let row = db.row(id).await;
            assert!(
                row.is_fresh() && row.status == RequestStatus::Queued,
                "{row:?}"
            );
            assert!(receiver.requests().is_empty());
            assert_eq!(
                daemon.stderr().matches("silent_mode_on").count(),
                1,
                "one line per change, not per poll"
            );

            side.set_silent(Some("false")).await;
            until(&daemon, "delivery after silent mode", async || {
                db.row(id).await.status == RequestStatus::Sent
            })
            .await;
            assert_eq!(receiver.requests().len(), 1);
            assert!(daemon.stderr().contains("silent_mode_off"));
            assert_eq!(
                daemon.get("/readyz", &[]).await.text().trim(),
                r#"{"status":"ok"}"#
            );
            daemon.terminate();
            daemon.wait_exit(DEADLINE).await;
        })
        .await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leftover_php_delivery_is_reported_loudly_and_counted() {
    with_db(|db| async move {
        let db = &db;
        with_phorge_side(&db.namespace, |side| async move {
            side.queue_php_task(false).await;
            side.queue_php_task(true).await;
            let mut daemon = Daemon::start("php-tasks", &env(&db.namespace)).await;
            until(&daemon, "the php_delivery_detected warning", async || {
                daemon.stderr().contains("php_delivery_detected")
            })
            .await;
            let text = metrics(&daemon).await;
            assert!(
                text.contains("gorge_webhook_php_delivery_tasks{state=\"queued\"} 1"),
                "{text}"
            );
            assert!(text.contains("gorge_webhook_php_delivery_tasks{state=\"leased\"} 1"));
            assert!(daemon.stderr().contains("receivers get requests twice"));
            daemon.terminate();
            daemon.wait_exit(DEADLINE).await;
        })
        .await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absent_phorge_tables_are_said_once_and_delivery_goes_on() {
    with_db(|db| async move {
        let receiver = Receiver::start().await;
        hook_to(&db, &receiver).await;
        let mut daemon = Daemon::start("no-side-tables", &env(&db.namespace)).await;
        let first = db.insert_request(&NewRequest::queued(HOOK, NEVER)).await;
        until(
            &daemon,
            "delivery without Phorge's config tables",
            async || db.row(first).await.status == RequestStatus::Sent,
        )
        .await;
        // Later polls do not repeat the message.
        let second = db.insert_request(&NewRequest::queued(HOOK, NEVER)).await;
        until(&daemon, "a second delivery", async || {
            db.row(second).await.status == RequestStatus::Sent
        })
        .await;
        let log = daemon.stderr();
        assert_eq!(log.matches("silent_mode_invisible").count(), 1, "{log}");
        assert_eq!(log.matches("php_delivery_invisible").count(), 1, "{log}");
        let text = metrics(&daemon).await;
        for source in ["local_config", "database"] {
            let series = format!("gorge_webhook_silent_mode_visible{{source=\"{source}\"}}");
            assert_eq!(sample(&text, &series).as_deref(), Some("0"), "{text}");
        }
        assert_eq!(
            log.matches("silent_mode_local_config_unset").count(),
            1,
            "{log}"
        );
        daemon.terminate();
        daemon.wait_exit(DEADLINE).await;
    })
    .await;
}

fn with_local_config(namespace: &str, local: &LocalJson) -> Vec<(String, String)> {
    let mut env = env(namespace);
    env.push(("GORGE_PHORGE_LOCAL_CONFIG".to_owned(), local.setting()));
    env
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_mode_in_phorges_local_json_holds_delivery_until_it_is_off() {
    with_db(|db| async move {
        let db = &db;
        with_phorge_side(&db.namespace, |_side| async move {
            let receiver = Receiver::start().await;
            hook_to(db, &receiver).await;
            // As `bin/config set phabricator.silent true` leaves it; the
            // database entry stays absent (off), as Phorge keeps it.
            let local = LocalJson::silent("true");
            let id = db.insert_request(&NewRequest::queued(HOOK, NEVER)).await;
            let mut daemon =
                Daemon::start("silent-local", &with_local_config(&db.namespace, &local)).await;

            until(&daemon, "delivery held by local.json", async || {
                shows(&daemon, "gorge_webhook_silent_mode", "1").await
            })
            .await;
            let text = metrics(&daemon).await;
            for source in ["local_config", "database"] {
                let series = format!("gorge_webhook_silent_mode_visible{{source=\"{source}\"}}");
                assert_eq!(sample(&text, &series).as_deref(), Some("1"), "{text}");
            }
            until(&daemon, "the silent_mode_on line", async || {
                daemon.stderr().contains("silent_mode_on")
            })
            .await;
            // The first check precedes the first poll, and a held daemon
            // does not poll: the row was never looked at.
            let row = db.row(id).await;
            assert!(
                row.is_fresh() && row.status == RequestStatus::Queued,
                "{row:?}"
            );
            assert!(receiver.requests().is_empty());

            local.write(&LocalJson::text("false"));
            until(&daemon, "delivery after local.json says off", async || {
                db.row(id).await.status == RequestStatus::Sent
            })
            .await;
            assert_eq!(receiver.requests().len(), 1);
            until(&daemon, "the silent_mode_off line", async || {
                daemon.stderr().contains("silent_mode_off")
            })
            .await;
            let log = daemon.stderr();
            assert!(
                !log.contains("silent_mode_invisible"),
                "an in-place rewrite is never taken for an unreadable file: {log}"
            );
            assert!(shows(&daemon, "gorge_webhook_silent_mode", "0").await);
            daemon.terminate();
            daemon.wait_exit(DEADLINE).await;
        })
        .await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_local_json_is_said_and_counts_as_not_seen() {
    with_db(|db| async move {
        let receiver = Receiver::start().await;
        hook_to(&db, &receiver).await;
        // Neither source can be seen: no file yet, no config tables.
        let local = LocalJson::absent();
        let mut daemon =
            Daemon::start("local-absent", &with_local_config(&db.namespace, &local)).await;
        let first = db.insert_request(&NewRequest::queued(HOOK, NEVER)).await;
        until(&daemon, "delivery while nothing is seen", async || {
            db.row(first).await.status == RequestStatus::Sent
        })
        .await;
        let log = daemon.stderr();
        let unreadable: Vec<&str> = log
            .lines()
            .filter(|line| line.contains("silent_mode_invisible"))
            .collect();
        assert_eq!(unreadable.len(), 2, "one per source: {log}");
        assert!(
            unreadable
                .iter()
                .any(|l| l.contains("local_config") && l.contains("does not exist")),
            "{log}"
        );
        let text = metrics(&daemon).await;
        assert_eq!(
            sample(
                &text,
                "gorge_webhook_silent_mode_visible{source=\"local_config\"}"
            )
            .as_deref(),
            Some("0"),
            "{text}"
        );

        local.write(&LocalJson::text("true"));
        until(&daemon, "the file read and saying silent", async || {
            shows(&daemon, "gorge_webhook_silent_mode", "1").await
        })
        .await;
        // Logged just after the verdict changes.
        until(&daemon, "the silent_mode_visible line", async || {
            daemon.stderr().contains("silent_mode_visible")
        })
        .await;
        let later = db.insert_request(&NewRequest::queued(HOOK, NEVER)).await;
        local.write("{\"phabricator.silent\": tru");
        until(&daemon, "a malformed file said once", async || {
            daemon.stderr().matches("silent_mode_invisible").count() == 3
        })
        .await;
        // Malformed is "cannot see", so delivery goes on, loudly.
        until(
            &daemon,
            "delivery while the file is malformed",
            async || db.row(later).await.status == RequestStatus::Sent,
        )
        .await;
        assert!(daemon.stderr().contains("is not Phorge's local config"));
        daemon.terminate();
        daemon.wait_exit(DEADLINE).await;
    })
    .await;
}
