//! The attempt history end to end: the real daemon with
//! `GORGE_WEBHOOK_HISTORY=on` keeps every attempt (a redirect's hops, a
//! failure) in its own database, answers for them on the API after
//! Phorge deleted the row, goes on delivering exactly once while the
//! history cannot be written (and says so on `/readyz`), prepares it
//! again once it can be, and refuses a schema newer than it knows or
//! an account without the privileges it needs.

use std::collections::HashMap;

use serde_json::Value;
use webhook_core::memory_store::NewRequest;
use webhook_core::RequestStatus;
use webhook_test_support::mariadb::{as_root, drop_database, dropping_after, with_account};
use webhook_test_support::metrics_text::sample;
use webhook_test_support::{with_db, Receiver, Reply, TestDb};

use crate::daemon::Daemon;
use crate::e2e::{add_hook, delivery_env, wait_log, wait_row, with_setting, DEADLINE};
use crate::support::poll;

const KEY: &str = "history-key";
const NEVER: &str = r#"{"retry":"never"}"#;

fn history_database(db: &TestDb) -> String {
    format!("{}_webhook_history", db.namespace)
}

fn history_env(db: &TestDb) -> Vec<(String, String)> {
    with_setting(delivery_env(&db.namespace), "GORGE_WEBHOOK_HISTORY", "on")
}

/// The request's attempts as the API answers them (status, JSON).
async fn attempts(daemon: &Daemon, key: &str) -> (u16, Value) {
    let answer = daemon
        .get(&format!("/api/webhook/requests/{key}/attempts"), &[])
        .await;
    let body = serde_json::from_slice(&answer.body).unwrap_or(Value::Null);
    (answer.status, body)
}

/// Waits until the API lists `n` attempts for `key`; returns them.
async fn wait_attempts(daemon: &Daemon, key: &str, n: usize) -> Vec<Value> {
    poll(
        daemon,
        &format!("{n} attempts on record for {key}"),
        async || {
            let (status, body) = attempts(daemon, key).await;
            match body["attempts"].as_array() {
                Some(listed) if status == 200 && listed.len() >= n => Ok(listed.clone()),
                _ => Err(format!("{status} {body}")),
            }
        },
    )
    .await
}

/// Waits until `/readyz` answers `status` with a body holding `needle`.
async fn wait_ready(daemon: &Daemon, status: u16, needle: &str) {
    poll(
        daemon,
        &format!("/readyz answering {status} with {needle:?}"),
        async || {
            let answer = daemon.get("/readyz", &[]).await;
            let body = String::from_utf8_lossy(&answer.body).into_owned();
            match answer.status == status && body.contains(needle) {
                true => Ok(()),
                false => Err(format!("{} {body}", answer.status)),
            }
        },
    )
    .await;
}

/// Waits until the metrics count at least `n` attempts dropped.
async fn wait_dropped(daemon: &Daemon, n: u64) {
    const DROPPED: &str = "gorge_webhook_history_attempts_total{result=\"dropped\"}";
    poll(daemon, &format!("{n} attempts dropped"), async || {
        let metrics = daemon.try_metrics().await.unwrap_or_default();
        match sample(&metrics, DROPPED).unwrap_or(0.0) >= n as f64 {
            true => Ok(()),
            false => Err(metrics),
        }
    })
    .await;
}

/// `database` created with a schema version newer than this build knows
/// (999) and no attempt table.
async fn newer_schema(database: &str) {
    as_root(&format!("CREATE DATABASE `{database}`")).await;
    as_root(&format!(
        "CREATE TABLE `{database}`.schema_version (version INT UNSIGNED NOT NULL PRIMARY KEY, \
         name VARCHAR(128) NOT NULL, applied_at DATETIME NOT NULL)"
    ))
    .await;
    as_root(&format!(
        "INSERT INTO `{database}`.schema_version VALUES (999, 'from the future', NOW())"
    ))
    .await;
}

fn sha256_hex(bytes: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    digest
        .as_ref()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_attempt_is_kept_and_answers_after_phorge_deleted_the_row() {
    with_db(|db| async move {
        let history = history_database(&db);
        dropping_after(&history, async {
            let receiver = Receiver::start().await;
            receiver.always("/moved", Reply::redirect(302, "/final"));
            receiver.always("/final", Reply::status(200));
            receiver.always("/broken", Reply::status(500));
            let moved = receiver
                .url("/moved")
                .replacen("http://", "http://ci:s3cret@", 1);
            add_hook(&db, "PHID-HWBH-historymovedaaaaaaa", moved, KEY).await;
            add_hook(
                &db,
                "PHID-HWBH-historybrokenaaaaaa",
                receiver.url("/broken"),
                KEY,
            )
            .await;
            let sent = db
                .insert_request(&NewRequest::queued("PHID-HWBH-historymovedaaaaaaa", NEVER))
                .await;
            let failed = db
                .insert_request(&NewRequest::queued("PHID-HWBH-historybrokenaaaaaa", NEVER))
                .await;
            let mut daemon = Daemon::start("history", &history_env(&db)).await;
            let row = wait_row(&db, &daemon, sent, "sent", |r| {
                r.status == RequestStatus::Sent
            })
            .await;
            wait_row(&db, &daemon, failed, "failed", |r| {
                r.status == RequestStatus::Failed
            })
            .await;

            let listed = wait_attempts(&daemon, &sent.to_string(), 1).await;
            assert_eq!(listed.len(), 1, "{listed:#?}");
            let attempt = &listed[0];
            assert_eq!(attempt["request_phid"], row.phid.as_str());
            assert_eq!(attempt["number"], 1);
            assert_eq!(
                (
                    &attempt["status"],
                    &attempt["error_type"],
                    &attempt["error_code"]
                ),
                (
                    &Value::from("sent"),
                    &Value::from("http"),
                    &Value::from("200")
                )
            );
            assert_eq!(attempt["http_status"], 200);
            let hops = attempt["exchange"]["hops"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let statuses: Vec<&Value> = hops.iter().map(|hop| &hop["status"]).collect();
            assert_eq!(
                statuses,
                [&Value::from(302), &Value::from(200)],
                "{attempt:#}"
            );
            assert_eq!(hops[0]["uri"], receiver.url("/moved").as_str());
            assert_eq!(hops[1]["uri"], receiver.url("/final").as_str());
            let posted = receiver
                .requests()
                .into_iter()
                .find(|request| request.path == "/moved")
                .expect("the first hop was received");
            assert_eq!(attempt["sent"]["sha256"], sha256_hex(&posted.body).as_str());
            assert_eq!(attempt["sent"]["bytes"], posted.body.len());
            assert_eq!(attempt["sent"]["signed_with"], "current");
            let text = attempt.to_string();
            assert!(
                !text.contains("s3cret"),
                "a credential was recorded: {text}"
            );
            assert!(text.contains("(withheld)"), "{text}");

            let broken = wait_attempts(&daemon, &failed.to_string(), 1).await;
            assert_eq!(
                (&broken[0]["status"], &broken[0]["error_code"]),
                (&Value::from("failed"), &Value::from("500"))
            );

            // Phorge's garbage collector deletes the row: the history
            // still answers, by id and by PHID.
            db.delete_request(sent).await;
            for key in [sent.to_string(), row.phid.clone()] {
                let (status, body) = attempts(&daemon, &key).await;
                assert_eq!(status, 200, "{body}");
                assert_eq!(body["attempts"].as_array().map(Vec::len), Some(1), "{body}");
            }
            daemon.stop_cleanly(DEADLINE).await;
        })
        .await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_that_cannot_be_written_leaves_delivery_untouched() {
    with_db(|db| async move {
        let history = history_database(&db);
        dropping_after(&history, async {
            let receiver = Receiver::start().await;
            let hooks: Vec<String> = (0..6)
                .map(|i| format!("PHID-HWBH-historyfailing{i:06}"))
                .collect();
            for (i, hook) in hooks.iter().enumerate() {
                add_hook(&db, hook, receiver.url(&format!("/h{i}")), KEY).await;
            }
            let mut daemon = Daemon::start("history-failing", &history_env(&db)).await;
            let first = db
                .insert_request(&NewRequest::queued(&hooks[0], NEVER))
                .await;
            wait_row(&db, &daemon, first, "sent", |r| {
                r.status == RequestStatus::Sent
            })
            .await;
            wait_attempts(&daemon, &first.to_string(), 1).await;

            // The history's database dropped and replaced by one whose
            // schema this daemon cannot use: every write fails, and so
            // does preparing it again, until it is put right below. Each
            // row is delivered once the last one's attempt was dropped,
            // so each is a round of writing of its own.
            drop_database(&history).await;
            newer_schema(&history).await;
            for (dropped, hook) in (1..).zip(&hooks[1..5]) {
                let id = db.insert_request(&NewRequest::queued(hook, NEVER)).await;
                wait_row(&db, &daemon, id, "sent", |r| {
                    r.status == RequestStatus::Sent
                })
                .await;
                wait_dropped(&daemon, dropped).await;
            }
            wait_ready(&daemon, 503, "attempt history").await;

            // Put right, the schema is prepared again within seconds,
            // /readyz is itself again and the next attempt is kept.
            as_root(&format!("DELETE FROM `{history}`.schema_version")).await;
            wait_log(&daemon, "history_prepared_again").await;
            wait_ready(&daemon, 200, "").await;
            let last = db
                .insert_request(&NewRequest::queued(&hooks[5], NEVER))
                .await;
            wait_row(&db, &daemon, last, "sent", |r| {
                r.status == RequestStatus::Sent
            })
            .await;
            wait_attempts(&daemon, &last.to_string(), 1).await;

            let mut per_path: HashMap<String, usize> = HashMap::new();
            for request in receiver.requests() {
                *per_path.entry(request.path).or_default() += 1;
            }
            assert!(
                per_path.values().all(|count| *count == 1) && per_path.len() == 6,
                "each row delivered exactly once: {per_path:?}\n{}",
                daemon.log()
            );
            daemon.stop_cleanly(DEADLINE).await;
        })
        .await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_schema_newer_than_this_build_stops_the_daemon() {
    with_db(|db| async move {
        let history = history_database(&db);
        dropping_after(&history, async {
            newer_schema(&history).await;
            let mut daemon = Daemon::spawn("history-newer", &[], &history_env(&db));
            let status = daemon.wait_exit(DEADLINE).await;
            assert_eq!(status.code(), Some(1), "{}", daemon.log());
            let log = daemon.stderr();
            assert!(
                log.contains("GORGE_WEBHOOK_HISTORY") && log.contains("999"),
                "{log}"
            );
        })
        .await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_without_the_historys_privileges_stops_the_daemon_naming_them() {
    with_db(|db| async move {
        let history = history_database(&db);
        let user = format!("{}_hist", db.namespace);
        dropping_after(&history, async {
            // Delivery's privileges, and none on the history's database.
            with_account(&user, "SELECT, UPDATE", &db.database, async {
                let env = with_setting(history_env(&db), "GORGE_WEBHOOK_MYSQL_USER", &user);
                let mut daemon = Daemon::spawn("history-grants", &[], &env);
                let status = daemon.wait_exit(DEADLINE).await;
                assert_eq!(status.code(), Some(1), "{}", daemon.log());
                let log = daemon.stderr();
                assert!(
                    log.contains("history_refused")
                        && log.contains(&format!("CREATE on {history}")),
                    "{log}"
                );
            })
            .await;
        })
        .await;
    })
    .await;
}
