//! `stats` and `hooks`: the diagnostics API's numbers straight from the
//! database, and a per-hook view with breaker state — URIs only on request,
//! keys never.

use serde_json::json;
use webhook_core::memory_store::NewRequest;
use webhook_core::{LastResult, QueueCounts, RequestStatus};
use webhook_test_support::{with_db, TestDb};

use crate::explain::stand_in_daemon;
use crate::support::{db_env, hook, on_db, run, KEY};

const ALPHA: &str = "PHID-HWBH-alphaaaaaaaaaaaaaaaa";
const BETA: &str = "PHID-HWBH-betaaaaaaaaaaaaaaaaa";
const GAMMA: &str = "PHID-HWBH-gammaaaaaaaaaaaaaaaa";

/// Alpha: 3 queued, 1 sent. Beta: 10 recent failed rows (breaker open).
/// Gamma: disabled, 1 failed as a hook error.
async fn seed(db: &TestDb) {
    db.insert_hook(&hook(ALPHA, "alpha", "enabled")).await;
    db.insert_hook(&hook(BETA, "beta", "firehose")).await;
    db.insert_hook(&hook(GAMMA, "gamma", "disabled")).await;
    for _ in 0..3 {
        db.insert_request(&NewRequest::queued(ALPHA, "{}")).await;
    }
    db.insert_request(&NewRequest {
        status: RequestStatus::Sent,
        last_request_result: LastResult::Okay,
        ..NewRequest::queued(ALPHA, "{}")
    })
    .await;
    let now = db.now().await;
    for i in 0..10 {
        db.insert_request(&NewRequest {
            status: RequestStatus::Failed,
            last_request_result: LastResult::Fail,
            last_request_epoch: now - 100 + i,
            ..NewRequest::queued(BETA, "{}")
        })
        .await;
    }
    db.insert_request(&NewRequest {
        status: RequestStatus::Failed,
        ..NewRequest::queued(GAMMA, "{}")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_are_the_apis_numbers() {
    with_db(|db| async move {
        seed(&db).await;
        let out = on_db(&db, &["stats", "--json"]).await;
        assert_eq!(out.status, 0, "{out:?}");
        assert_eq!(
            out.json(),
            json!({"data": {"queuedCount": 3, "sentCount": 1, "failedCount": 11, "activeWebhooks": 2}})
        );
        // The same statement the daemon's API runs.
        let stats = db.store().stats().await.expect("stats");
        assert_eq!((stats.queued, stats.sent, stats.failed, stats.active_hooks), (3, 1, 11, 2));
        let text = on_db(&db, &["stats"]).await;
        assert_eq!(
            text.stdout,
            format!(
                "database         {}\nqueued           3\nsent             1\nfailed           11\n\
                 active webhooks  2\n",
                db.database
            )
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_show_counts_and_breakers_without_uris_or_keys() {
    with_db(|db| async move {
        seed(&db).await;
        // A day-long window keeps the seeded failures inside it however
        // slowly the test runs.
        let vars = db_env(&db, &[("GORGE_WEBHOOK_ERROR_BACKOFF_SEC", "86400")]);
        let out = run(&vars, &["hooks", "--json"]).await;
        assert_eq!(out.status, 0, "{out:?}");
        let json = out.json();
        assert_eq!(json["data"]["total"], 3);
        let hooks = json["data"]["hooks"].as_array().expect("hooks");
        let by_name = |name: &str| {
            hooks
                .iter()
                .find(|h| h["name"] == name)
                .unwrap_or_else(|| panic!("{name} listed"))
        };
        let alpha = by_name("alpha");
        assert_eq!(
            (alpha["queuedCount"].as_u64(), alpha["failedCount"].as_u64()),
            (Some(3), Some(0))
        );
        assert_eq!(alpha["breakerOpen"], false);
        assert_eq!(alpha["phid"], ALPHA);
        let beta = by_name("beta");
        assert_eq!(beta["breakerFailures"], 10);
        assert_eq!(beta["breakerThreshold"], 10);
        assert_eq!(beta["breakerOpen"], true);
        let oldest = db.now().await; // closes about oldest failure + window + 1
        let closes = beta["breakerClosesAbout"].as_u64().expect("a time");
        assert!(closes > oldest && closes <= oldest + 86_401, "{closes}");
        let gamma = by_name("gamma");
        assert_eq!(
            (gamma["status"].as_str(), gamma["failedCount"].as_u64()),
            (Some("disabled"), Some(1))
        );
        assert_eq!(gamma["breakerOpen"], false, "hook errors never count");
        assert!(hooks.iter().all(|h| h.get("uri").is_none()));
        assert!(!out.stdout.contains("uri-secret") && !out.stdout.contains(KEY));

        let text = run(&vars, &["hooks"]).await;
        assert!(
            text.stdout.starts_with("3 hooks (2 not disabled)"),
            "{}",
            text.stdout
        );
        assert!(
            text.stdout.contains("OPEN 10/10, closes about"),
            "{}",
            text.stdout
        );
        assert!(text.stdout.contains("closed 0/10"), "{}", text.stdout);
        assert!(!text.stdout.contains("uri-secret") && !text.stdout.contains(KEY));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_show_what_the_daemon_knows_pauses_and_key_graces_or_say_it_could_not_ask() {
    with_db(|db| async move {
        seed(&db).await;
        let until = db.now().await + 3_600;
        let (url, served) = stand_in_daemon(json!({"paused": [
            {"hookPHID": BETA, "until": until, "reason": "retry-after"}
        ], "keyGrace": [{"hookPHID": ALPHA, "until": until}]}))
        .await;
        let out = on_db(&db, &["hooks", "--json", "--url", &url]).await;
        assert_eq!(out.status, 0, "{out:?}");
        served.await.expect("asked once");
        let json = out.json();
        let hooks = json["data"]["hooks"].as_array().expect("hooks").clone();
        let by_phid = |phid: &str| {
            hooks
                .iter()
                .find(|h| h["phid"] == phid)
                .cloned()
                .unwrap_or_else(|| panic!("{phid} listed"))
        };
        assert_eq!(by_phid(ALPHA)["keyGraceUntil"], until);
        assert_eq!(by_phid(ALPHA)["pausedUntil"], json!(null));
        assert_eq!(by_phid(BETA)["pausedUntil"], until);
        assert_eq!(by_phid(GAMMA)["keyGraceUntil"], json!(null));
        assert_eq!(json["data"].get("daemonNote"), None);

        let (url, _served) = stand_in_daemon(json!({"paused": [],
            "keyGrace": [{"hookPHID": ALPHA, "until": until}]}))
        .await;
        let text = on_db(&db, &["hooks", "--url", &url]).await.stdout;
        let alpha = text
            .lines()
            .find(|l| l.contains(ALPHA))
            .unwrap_or_else(|| panic!("{text}"));
        assert!(alpha.contains("previous key signs too until"), "{text}");

        let closed = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let nobody = format!("http://{}", closed.local_addr().expect("addr"));
        drop(closed);
        let text = on_db(&db, &["hooks", "--url", &nobody]).await;
        assert_eq!(text.status, 0, "{text:?}");
        assert!(
            text.stdout.contains(&format!(
                "note: the daemon at {nobody}/api/webhook/hooks/state could not say"
            )),
            "{}",
            text.stdout
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_uri_adds_uris_but_never_keys() {
    with_db(|db| async move {
        seed(&db).await;
        let json = on_db(&db, &["hooks", "--json", "--show-uri"]).await;
        let hooks = json.json()["data"]["hooks"].clone();
        assert_eq!(
            hooks[0]["uri"],
            "https://hookuser:uri-secret@example.invalid/alpha"
        );
        assert!(!json.stdout.contains(KEY));
        let text = on_db(&db, &["hooks", "--show-uri"]).await;
        assert!(text.stdout.contains("URI"), "{}", text.stdout);
        assert!(text
            .stdout
            .contains("https://hookuser:uri-secret@example.invalid/beta"));
        assert!(!text.stdout.contains(KEY));
    })
    .await;
}
