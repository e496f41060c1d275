//! `history` and `explain`'s last attempts on a history database prepared
//! and written by the daemon's own history code: filters, newest first,
//! `--json`, a request Phorge already deleted, and what is said when the
//! history database does not exist.

use std::time::Duration;

use webhook_core::history::{Attempt, AttemptLog};
use webhook_core::memory_store::NewRequest;
use webhook_core::setting::table;
use webhook_core::{Claim, Store};
use webhook_store_mysql::{HistoryConfig, MysqlHistory};
use webhook_test_support::attempts;
use webhook_test_support::mariadb::dropping_after;
use webhook_test_support::{with_db, TestDb};

use crate::support::{on_db, run};

const HOOK_A: &str = "PHID-HWBH-historyadminaaaaaaa";
const HOOK_B: &str = "PHID-HWBH-historyadminbbbbbbb";
/// 2023-11-14 22:13:20 UTC, in milliseconds.
const T0: u64 = 1_700_000_000_000;

/// A sent attempt on `hook`, without its exchange.
fn attempt(id: u64, phid: &str, hook: &str, started_ms: u64) -> Attempt {
    Attempt {
        hook_phid: hook.to_owned(),
        object_phid: "PHID-TASK-historyadminaaaaaaa".to_owned(),
        sent: None,
        exchange: None,
        ..attempts::sent(id, phid, started_ms)
    }
}

/// Records `attempts` in `db`'s default history database through the
/// daemon's writer (woken by a claim's batch) and waits until written.
async fn record(db: &TestDb, database: &str, attempts: Vec<Attempt>) {
    let history = MysqlHistory::new(
        &db.config(),
        HistoryConfig::with_defaults(database),
        "host:7",
    )
    .expect("history config");
    history.prepare().await.expect("history prepared");
    let queue = history.queue();
    let store = db.store().with_history(queue.clone());
    for a in attempts {
        queue.record(a);
    }
    let id = db
        .insert_request(&NewRequest::queued(HOOK_B, r#"{"retry":"forever"}"#))
        .await;
    let claim = store
        .claim(id, db.row(id).await.date_modified)
        .await
        .expect("claim");
    assert!(matches!(claim, Claim::Won(_)), "{claim:?}");
    assert!(
        queue.settled(Duration::from_secs(10)).await,
        "history written"
    );
    let _ = history.disconnect().await;
}

/// `history --json ARGS`' start times, in the order printed.
async fn started_of(db: &TestDb, args: &[&str]) -> Vec<u64> {
    let mut full = vec!["history", "--json"];
    full.extend_from_slice(args);
    let out = on_db(db, &full).await;
    assert_eq!(out.status, 0, "{out:?}");
    out.json()
        .as_array()
        .expect("an array")
        .iter()
        .filter_map(|a| a["started_ms"].as_u64())
        .collect()
}

fn history_db(db: &TestDb) -> String {
    HistoryConfig::database_for(&table(&[]), &db.namespace).expect("history database")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_lists_filters_and_outlives_phorges_rows() {
    with_db(|db| async move {
        let database = history_db(&db);
        dropping_after(&database.clone(), async {
            let props = r#"{"retry":"forever"}"#;
            let a = db.insert_request(&NewRequest::queued(HOOK_A, props)).await;
            let b = db.insert_request(&NewRequest::queued(HOOK_B, props)).await;
            let (pa, pb) = (db.row(a).await.phid, db.row(b).await.phid);
            let mut failed = attempt(a, &pa, HOOK_A, T0 + 2_000);
            failed.status = "queued".to_owned();
            failed.error_code = "503".to_owned();
            failed.http_status = Some(503);
            record(
                &db,
                &database,
                vec![
                    attempt(a, &pa, HOOK_A, T0 + 1_000),
                    failed,
                    attempt(b, &pb, HOOK_B, T0 + 3_000),
                ],
            )
            .await;
            // Phorge's garbage collector deleted request a.
            db.delete_request(a).await;

            let out = on_db(&db, &["history", "--json"]).await;
            assert_eq!(out.status, 0, "{out:?}");
            let all = out.json();
            let started: Vec<u64> = all
                .as_array()
                .expect("an array")
                .iter()
                .filter_map(|a| a["started_ms"].as_u64())
                .collect();
            assert_eq!(started, [T0 + 3_000, T0 + 2_000, T0 + 1_000], "{all}");
            assert_eq!(all[1]["request_id"], a);
            assert_eq!(all[1]["request_phid"], pa.as_str());
            assert_eq!(all[1]["number"], 2);
            assert_eq!(all[1]["instance"], "host:7");
            assert_eq!(all[1]["error_code"], "503");

            let id_a = a.to_string();
            assert_eq!(started_of(&db, &["--request", &id_a]).await, [T0 + 2_000, T0 + 1_000]);
            assert_eq!(started_of(&db, &["--request", &pb]).await, [T0 + 3_000]);
            assert_eq!(started_of(&db, &["--hook", HOOK_A]).await, [T0 + 2_000, T0 + 1_000]);
            assert_eq!(started_of(&db, &["--outcome", "503"]).await, [T0 + 2_000]);
            assert_eq!(started_of(&db, &["--outcome", "queued"]).await, [T0 + 2_000]);
            assert_eq!(
                started_of(&db, &["--since", "1700000002", "--until", "1700000003"]).await,
                [T0 + 2_000]
            );
            assert_eq!(started_of(&db, &["--since", "1h"]).await, Vec::<u64>::new());
            assert_eq!(started_of(&db, &["--limit", "1"]).await, [T0 + 3_000]);
            assert_eq!(
                started_of(&db, &["--object", "PHID-TASK-historyadminaaaaaaa", "--limit", "2"]).await,
                [T0 + 3_000, T0 + 2_000]
            );

            let out = on_db(&db, &["history", "--request", &id_a]).await;
            assert_eq!(out.status, 0, "{out:?}");
            let first = out.stdout.find("2023-11-14 22:13:22.000 UTC").expect(&out.stdout);
            let second = out.stdout.find("2023-11-14 22:13:21.000 UTC").expect(&out.stdout);
            assert!(first < second, "newest first: {}", out.stdout);
            assert!(out.stdout.contains(&format!("request {a} {pa}  #2  host:7")), "{}", out.stdout);
            assert!(out.stdout.contains("queued  http/503  HTTP 503  42 ms"), "{}", out.stdout);

            // explain of the deleted request says where the history keeps
            // it, by id and by PHID.
            for key in [id_a.as_str(), pa.as_str()] {
                let out = on_db(&db, &["explain", key]).await;
                assert_ne!(out.status, 0, "{out:?}");
                assert!(
                    out.stderr.contains("no request with")
                        && out.stderr.contains(&format!("webhook-admin history --request {key}"))
                        && out.stderr.contains("the last: 2023-11-14 22:13:22.000 UTC  #2  queued"),
                    "{out:?}"
                );
            }

            // explain reads Phorge's row, then the history's last attempts.
            let out = on_db(&db, &["explain", &b.to_string(), "--at", "1700000000"]).await;
            assert_eq!(out.status, 0, "{out:?}");
            assert!(out.stdout.contains("Last attempts (history):\n  2023-11-14 22:13:23.000 UTC  #1  sent  http/200  HTTP 200  42 ms  host:7\n"), "{}", out.stdout);
            let out = on_db(&db, &["explain", &b.to_string(), "--at", "1700000000", "--json"]).await;
            assert_eq!(out.json()["history"]["state"], "on", "{}", out.stdout);
            assert_eq!(out.json()["history"]["attempts"][0]["request_id"], b);
        })
        .await;
    })
    .await;
}

#[tokio::test]
async fn without_a_history_database_history_says_why_and_explain_goes_on() {
    with_db(|db| async move {
        let out = on_db(&db, &["history"]).await;
        assert_eq!(out.status, 3, "{out:?}");
        let database = history_db(&db);
        assert!(out.stderr.contains(&database), "{}", out.stderr);
        assert!(
            out.stderr.contains("GORGE_WEBHOOK_HISTORY"),
            "{}",
            out.stderr
        );
        assert!(out.stderr.contains("history is off"), "{}", out.stderr);

        let id = db
            .insert_request(&NewRequest::queued(HOOK_A, r#"{"retry":"forever"}"#))
            .await;
        let out = on_db(&db, &["explain", &id.to_string(), "--at", "1700000000"]).await;
        assert_eq!(out.status, 0, "{out:?}");
        assert!(out.stdout.contains("\nhistory: off\n"), "{}", out.stdout);
        let out = on_db(
            &db,
            &["explain", &id.to_string(), "--at", "1700000000", "--json"],
        )
        .await;
        assert_eq!(out.json()["history"]["state"], "off", "{}", out.stdout);
    })
    .await;
}

#[tokio::test]
async fn bad_filters_name_their_flag() {
    let env = [("GORGE_WEBHOOK_MYSQL_USER".to_owned(), "root".to_owned())];
    let out = run(&env, &["history", "--request", "HWBR-1"]).await;
    assert_eq!(out.status, 2, "{out:?}");
    assert!(out.stderr.contains("--request"), "{}", out.stderr);
    let out = run(&env, &["history", "--since", "soon"]).await;
    assert_eq!(out.status, 2, "{out:?}");
    assert!(out.stderr.contains("--since"), "{}", out.stderr);
}
