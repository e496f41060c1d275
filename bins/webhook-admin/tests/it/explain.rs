//! `explain` on a seeded database: one row per verdict, judged at a fixed
//! `--at` so every `until` is an exact number, by id and by PHID, as text
//! and as JSON, with the payload and the signature (never the key); and a
//! hook the daemon paused for `Retry-After`, asked of a stand-in daemon,
//! or a note when no daemon answers. Without `--at`, rows are judged at
//! the database server's time, also with the tool's clock an hour off.

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use webhook_core::memory_store::NewRequest;
use webhook_core::{Hook, LastResult, RequestStatus};
use webhook_test_support::faketime::shifted_clock;
use webhook_test_support::mariadb::with_phorge_side;
use webhook_test_support::{with_db, LocalJson, TestDb};

use crate::support::{self, run, Run, KEY, NOW};

/// Where the seeded hooks point: a documentation range, in Phorge's deny
/// list, let through by [`db_env`] as an operator's allow list lets an
/// internal receiver through. Nothing is ever sent there: `explain`
/// checks a hook's URI as the daemon does, it never calls it.
const RECEIVERS: &str = "192.0.2.0/24";

/// [`support::hook`] at an address of [`RECEIVERS`].
pub fn hook(phid: &str, name: &str, status: &str) -> Hook {
    Hook {
        uri: "https://hookuser:uri-secret@192.0.2.1/hook".to_owned(),
        ..support::hook(phid, name, status)
    }
}

/// [`support::db_env`] with [`RECEIVERS`] allowed (`extra` may set the
/// allow list otherwise).
fn db_env(db: &TestDb, extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut vars = support::db_env(db, &[("GORGE_WEBHOOK_OUTBOUND_ALLOW", RECEIVERS)]);
    vars.extend(support::env(extra));
    vars
}

/// The tool on `db` with [`db_env`].
async fn on_db(db: &TestDb, args: &[&str]) -> Run {
    run(&db_env(db, &[]), args).await
}

pub const HOOK_OK: &str = "PHID-HWBH-okaaaaaaaaaaaaaaaaaa";
pub const HOOK_TRIPPED: &str = "PHID-HWBH-trippedaaaaaaaaaaaa";
pub const HOOK_OFF: &str = "PHID-HWBH-offaaaaaaaaaaaaaaaaa";
pub const HOOK_GONE: &str = "PHID-HWBH-goneaaaaaaaaaaaaaaaa";

/// One seeded row and what `explain --at NOW` must say about it.
#[derive(Debug, Clone)]
pub struct Case {
    pub id: u64,
    pub code: &'static str,
    pub until: Option<u64>,
}

fn at(date: u64) -> Option<u64> {
    Some(date)
}

fn fresh(hook: &str, properties: &str) -> NewRequest {
    NewRequest {
        date_created: at(NOW - 5),
        date_modified: at(NOW - 5),
        ..NewRequest::queued(hook, properties)
    }
}

/// Seeds hooks and one row per `explain` verdict (plus the failures that
/// open one hook's breaker). Times are relative to [`NOW`].
pub async fn seed_every_case(db: &TestDb) -> Vec<Case> {
    db.insert_hook(&hook(HOOK_OK, "ok hook", "enabled")).await;
    db.insert_hook(&hook(HOOK_TRIPPED, "tripped hook", "firehose"))
        .await;
    db.insert_hook(&hook(HOOK_OFF, "off hook", "disabled"))
        .await;
    const RETRY: &str = r#"{"retry":"forever","triggerPHIDs":["PHID-HRUL-aaaaaaaaaaaaaaaaaaaa"]}"#;

    let mut cases = Vec::new();
    let sent = db
        .insert_request(&NewRequest {
            status: RequestStatus::Sent,
            last_request_result: LastResult::Okay,
            last_request_epoch: NOW - 90,
            date_created: at(NOW - 100),
            date_modified: at(NOW - 90),
            ..NewRequest::queued(
                HOOK_OK,
                r#"{"retry":"never","errorType":"http","errorCode":200}"#,
            )
        })
        .await;
    cases.push(Case {
        id: sent,
        code: "sent",
        until: None,
    });
    let failed = db
        .insert_request(&NewRequest {
            status: RequestStatus::Failed,
            date_created: at(NOW - 100),
            date_modified: at(NOW - 99),
            ..NewRequest::queued(HOOK_OFF, r#"{"errorType":"hook","errorCode":"disabled"}"#)
        })
        .await;
    cases.push(Case {
        id: failed,
        code: "failed",
        until: None,
    });
    let eligible = db.insert_request(&fresh(HOOK_OK, RETRY)).await;
    cases.push(Case {
        id: eligible,
        code: "eligible",
        until: None,
    });
    // Claimed 10 s ago: the default 30 s lease runs until NOW + 20.
    let leased = db
        .insert_request(&NewRequest {
            date_created: at(NOW - 100),
            date_modified: at(NOW - 10),
            ..NewRequest::queued(HOOK_OK, RETRY)
        })
        .await;
    cases.push(Case {
        id: leased,
        code: "in-lease",
        until: at(NOW + 20),
    });
    // Failed 40 s ago: past the lease, inside the 60 s backoff until NOW + 20.
    let backing_off = db
        .insert_request(&NewRequest {
            last_request_result: LastResult::Fail,
            last_request_epoch: NOW - 40,
            date_created: at(NOW - 140),
            date_modified: at(NOW - 40),
            ..NewRequest::queued(
                HOOK_OK,
                r#"{"retry":"forever","errorType":"http","errorCode":500}"#,
            )
        })
        .await;
    cases.push(Case {
        id: backing_off,
        code: "retry-backoff",
        until: at(NOW + 20),
    });
    // Ten failed rows of one hook within the window (epochs NOW-100..NOW-91):
    // the breaker is open until the oldest slides out, NOW - 100 + 301.
    for i in 0..10 {
        db.insert_request(&NewRequest {
            status: RequestStatus::Failed,
            last_request_result: LastResult::Fail,
            last_request_epoch: NOW - 100 + i,
            date_created: at(NOW - 200),
            date_modified: at(NOW - 100 + i),
            ..NewRequest::queued(HOOK_TRIPPED, r#"{"errorType":"http","errorCode":503}"#)
        })
        .await;
    }
    let tripped = db.insert_request(&fresh(HOOK_TRIPPED, RETRY)).await;
    cases.push(Case {
        id: tripped,
        code: "breaker-open",
        until: at(NOW + 201),
    });
    let disabled = db.insert_request(&fresh(HOOK_OFF, RETRY)).await;
    cases.push(Case {
        id: disabled,
        code: "hook-disabled",
        until: None,
    });
    let missing = db.insert_request(&fresh(HOOK_GONE, RETRY)).await;
    cases.push(Case {
        id: missing,
        code: "hook-missing",
        until: None,
    });
    let unparseable = db.insert_request(&fresh(HOOK_OK, "{not json")).await;
    cases.push(Case {
        id: unparseable,
        code: "properties-unparseable",
        until: None,
    });
    let defective = db.insert_request(&fresh(HOOK_OK, RETRY)).await;
    db.exec(&format!(
        "UPDATE herald_webhookrequest SET lastRequestResult = 'maybe' WHERE id = {defective}"
    ))
    .await;
    cases.push(Case {
        id: defective,
        code: "invalid-row",
        until: None,
    });
    cases
}

async fn explain_json(db: &TestDb, request: &str) -> Value {
    let now = NOW.to_string();
    let out = on_db(db, &["explain", request, "--json", "--at", &now]).await;
    assert_eq!(out.status, 0, "{out:?}");
    assert!(!out.all_output().contains(KEY), "the key is never printed");
    out.json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_case_gets_its_verdict_by_the_dispatchers_rules() {
    with_db(|db| async move {
        let cases = seed_every_case(&db).await;
        assert_eq!(cases.len(), 10);
        for case in &cases {
            let json = explain_json(&db, &case.id.to_string()).await;
            let verdict = &json["verdict"];
            assert_eq!(verdict["code"], case.code, "row {}: {json:#}", case.id);
            assert_eq!(verdict["until"], serde_json::json!(case.until), "{case:?}");
            assert_eq!(verdict["deliverableNow"], case.code == "eligible");
            assert_eq!(json["request"]["id"], case.id);
            assert_eq!(json["now"], NOW);
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verdicts_carry_the_numbers() {
    with_db(|db| async move {
        let cases = seed_every_case(&db).await;
        let find = |code: &str| {
            cases
                .iter()
                .find(|c| c.code == code)
                .expect(code)
                .id
                .to_string()
        };

        let sent = explain_json(&db, &find("sent")).await;
        assert_eq!(sent["verdict"]["errorType"], "http");
        assert_eq!(sent["verdict"]["errorCode"], 200);
        let failed = explain_json(&db, &find("failed")).await;
        assert_eq!(failed["verdict"]["errorCode"], "disabled");

        let tripped = explain_json(&db, &find("breaker-open")).await;
        assert_eq!(tripped["verdict"]["failures"], 10);
        assert_eq!(tripped["verdict"]["threshold"], 10);
        assert_eq!(tripped["verdict"]["windowSecs"], 300);

        let leased = explain_json(&db, &find("in-lease")).await;
        assert_eq!(leased["verdict"]["leaseSecs"], 30);
        let backoff = explain_json(&db, &find("retry-backoff")).await;
        assert_eq!(backoff["verdict"]["backoffSecs"], 60);

        for (code, hook_error) in [
            ("hook-disabled", "disabled"),
            ("hook-missing", "not-found"),
            ("properties-unparseable", "invalid-properties"),
            ("invalid-row", "invalid-row"),
        ] {
            let json = explain_json(&db, &find(code)).await;
            assert_eq!(json["verdict"]["hookError"], hook_error, "{code}");
        }
        let defect = explain_json(&db, &find("invalid-row")).await;
        let reason = defect["request"]["defect"].as_str().expect("defect shown");
        assert!(reason.contains("lastRequestResult"), "{reason}");
        assert_eq!(defect["payload"], Value::Null);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_effective_windows_come_from_the_environment() {
    with_db(|db| async move {
        let cases = seed_every_case(&db).await;
        let id = |code: &str| {
            cases
                .iter()
                .find(|c| c.code == code)
                .expect(code)
                .id
                .to_string()
        };
        let now = NOW.to_string();
        // A 5 s lease is raised to the 15 s timeout + 2: the leased row
        // (claimed at NOW - 10) is free at NOW + 7. A 10 s backoff lets the
        // failed row (NOW - 40) through: it is eligible.
        let vars = db_env(
            &db,
            &[
                ("GORGE_WEBHOOK_CLAIM_LEASE_SEC", "5"),
                ("GORGE_WEBHOOK_RETRY_BACKOFF_SEC", "10"),
                ("GORGE_WEBHOOK_ERROR_THRESHOLD", "11"),
            ],
        );
        let leased = run(&vars, &["explain", &id("in-lease"), "--json", "--at", &now]).await;
        assert_eq!(leased.json()["verdict"]["until"], NOW + 7, "{leased:?}");
        let retried = run(
            &vars,
            &["explain", &id("retry-backoff"), "--json", "--at", &now],
        )
        .await;
        assert_eq!(retried.json()["verdict"]["code"], "eligible");
        let tripped = run(
            &vars,
            &["explain", &id("breaker-open"), "--json", "--at", &now],
        )
        .await;
        assert_eq!(
            tripped.json()["verdict"]["code"],
            "eligible",
            "threshold 11"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_row_is_judged_again_at_a_later_time() {
    with_db(|db| async move {
        let cases = seed_every_case(&db).await;
        let leased = cases.iter().find(|c| c.code == "in-lease").expect("case");
        let id = leased.id.to_string();
        let before = (NOW + 19).to_string();
        let after = (NOW + 20).to_string();
        let out = on_db(&db, &["explain", &id, "--json", "--at", &before]).await;
        assert_eq!(out.json()["verdict"]["code"], "in-lease");
        let out = on_db(&db, &["explain", &id, "--json", "--at", &after]).await;
        assert_eq!(out.json()["verdict"]["code"], "eligible");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_output_reads_in_plain_words() {
    with_db(|db| async move {
        let cases = seed_every_case(&db).await;
        let now = NOW.to_string();
        let leased = cases.iter().find(|c| c.code == "in-lease").expect("case");
        let out = on_db(&db, &["explain", &leased.id.to_string(), "--at", &now]).await;
        assert_eq!(out.status, 0, "{out:?}");
        assert!(
            out.stdout
                .contains("verdict: in-lease (not being delivered now)"),
            "{}",
            out.stdout
        );
        assert!(
            out.stdout.contains(
                "inside a claim lease until 2023-11-14 22:13:40 UTC (1700000020, in 20s): \
                 dateModified 1699999990 + effective lease 30 s"
            ),
            "{}",
            out.stdout
        );
        assert!(
            out.stdout.contains("\"ok hook\" (enabled)"),
            "{}",
            out.stdout
        );
        assert!(
            out.stdout.contains("X-Phabricator-Webhook-Signature: "),
            "{}",
            out.stdout
        );
        assert!(!out.stdout.contains(KEY));
        assert!(!out.stdout.contains("uri-secret"), "no URI in explain");

        let tripped = cases
            .iter()
            .find(|c| c.code == "breaker-open")
            .expect("case");
        let out = on_db(&db, &["explain", &tripped.id.to_string(), "--at", &now]).await;
        assert!(
            out.stdout.contains(
                "hook breaker open until about 2023-11-14 22:16:41 UTC (1700000201, in 3m 21s): \
                 10 failed rows in the last 300 s, threshold 10"
            ),
            "{}",
            out.stdout
        );
        let missing = cases
            .iter()
            .find(|c| c.code == "hook-missing")
            .expect("case");
        let out = on_db(&db, &["explain", &missing.id.to_string(), "--at", &now]).await;
        assert!(out.stdout.contains("(no such hook)"), "{}", out.stdout);
        assert!(
            out.stdout.contains("no signature: the hook does not exist"),
            "{}",
            out.stdout
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_are_found_by_phid_and_judged_by_the_clock_without_at() {
    with_db(|db| async move {
        db.insert_hook(&hook(HOOK_OK, "ok hook", "enabled")).await;
        let id = db
            .insert_request(&NewRequest {
                phid: "PHID-HWBR-explainbyphidaaaaa".to_owned(),
                ..NewRequest::queued(HOOK_OK, "{}")
            })
            .await;
        let out = on_db(&db, &["explain", "PHID-HWBR-explainbyphidaaaaa", "--json"]).await;
        assert_eq!(out.status, 0, "{out:?}");
        let json = out.json();
        assert_eq!(json["request"]["id"], id);
        // A fresh row is a candidate whatever the clock says.
        assert_eq!(json["verdict"]["code"], "eligible");
        let now = json["now"].as_u64().expect("now");
        let server_now = db.now().await;
        assert!(now.abs_diff(server_now) < 3_600, "{now} vs {server_now}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_hook_lock_is_noted_and_left_alone() {
    with_db(|db| async move {
        db.insert_hook(&hook(HOOK_OK, "ok hook", "enabled")).await;
        let id = db.insert_request(&fresh(HOOK_OK, "{}")).await;
        // Another deliverer (here: a second store) holds Phorge's lock.
        let holder = db.store();
        let lock = holder
            .try_lock_hook(HOOK_OK)
            .await
            .expect("lock")
            .expect("free");
        let now = NOW.to_string();
        let out = on_db(&db, &["explain", &id.to_string(), "--json", "--at", &now]).await;
        let json = out.json();
        assert_eq!(json["verdict"]["code"], "eligible");
        let note = json["notes"][0].as_str().expect("a note");
        assert!(
            note.contains(&format!("database session {}", lock.connection_id())),
            "{note}"
        );
        // Still held by its owner: explain only looked.
        assert_eq!(
            db.lock_holder(&holder.hook_lock_name(HOOK_OK)).await,
            Some(lock.connection_id())
        );
        webhook_core::HookLock::release(Box::new(lock))
            .await
            .expect("release");
    })
    .await;
}

/// A stand-in daemon answering one request: `GET /api/webhook/hooks/state`
/// with a body holding `data`, any other with the daemon's 404; returns its
/// URL and the request it got.
pub(crate) async fn stand_in_daemon(data: Value) -> (String, tokio::task::JoinHandle<Vec<String>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let body = json!({ "data": data }).to_string();
    let served = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.expect("accept");
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).await.expect("read") == 1 {
            head.push(byte[0]);
        }
        let (status, body) = if head.starts_with(b"GET /api/webhook/hooks/state ") {
            ("200 OK", body)
        } else {
            let missing = json!({"error": {"code": "ERR_NOT_FOUND", "message": "not found"}});
            ("404 Not Found", missing.to_string())
        };
        let answer = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
             connection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(answer.as_bytes()).await.expect("write");
        vec![String::from_utf8_lossy(&head).into_owned()]
    });
    (url, served)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_the_daemon_paused_is_explained_from_the_daemons_answer() {
    with_db(|db| async move {
        db.insert_hook(&hook(HOOK_OK, "ok hook", "enabled")).await;
        let id = db.insert_request(&fresh(HOOK_OK, "{}")).await.to_string();
        let now = NOW.to_string();
        let (url, served) = stand_in_daemon(json!({"paused": [
            {"hookPHID": HOOK_OK, "until": NOW + 5, "reason": "retry-after"}
        ], "keyGrace": []}))
        .await;
        let env = db_env(&db, &[("GORGE_SERVICE_TOKEN", "t0ken")]);
        let out = run(&env, &["explain", &id, "--at", &now, "--url", &url]).await;
        assert_eq!(out.status, 0, "{out:?}");
        assert!(
            out.stdout.contains(
                "verdict: paused (not being delivered now)\n  hook paused until \
                 2023-11-14 22:13:25 UTC (1700000005, in 5s): its receiver answered 429 or 503 \
                 with Retry-After"
            ),
            "{}",
            out.stdout
        );
        let asked = served.await.expect("served");
        assert!(
            asked[0].starts_with("GET /api/webhook/hooks/state "),
            "{asked:?}"
        );
        assert!(
            asked[0]
                .to_ascii_lowercase()
                .contains("x-service-token: t0ken"),
            "{asked:?}"
        );

        // Nobody listening: one note, and the database's verdict.
        let closed = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let nobody = format!("http://{}", closed.local_addr().expect("addr"));
        drop(closed);
        let out = on_db(
            &db,
            &["explain", &id, "--json", "--at", &now, "--url", &nobody],
        )
        .await;
        assert_eq!(out.status, 0, "{out:?}");
        let json = out.json();
        assert_eq!(json["verdict"]["code"], "eligible");
        let notes = json["notes"].as_array().expect("notes");
        let daemon_notes: Vec<&str> = notes
            .iter()
            .filter_map(Value::as_str)
            .filter(|note| note.starts_with("the daemon"))
            .collect();
        assert_eq!(daemon_notes.len(), 1, "{notes:?}");
        let note = daemon_notes[0];
        assert!(
            note.starts_with(&format!(
                "the daemon at {nobody}/api/webhook/hooks/state could not say whether it paused this \
                 hook (Retry-After): cannot connect"
            )),
            "{note}"
        );
        assert!(note.ends_with("judged from the database alone"), "{note}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_is_judged_at_the_database_servers_time_whatever_this_hosts_clock_says() {
    with_db(|db| async move {
        db.insert_hook(&hook(HOOK_OK, "ok hook", "enabled")).await;
        // Phorge read its clock twice: the row waits one lease (30 s).
        let created = db.now().await;
        let id = db
            .insert_request(&NewRequest {
                date_created: Some(created),
                date_modified: Some(created + 1),
                ..NewRequest::queued(HOOK_OK, "{}")
            })
            .await;
        for offset in ["+1h", "-1h"] {
            let mut env = db_env(&db, &[]);
            env.extend(shifted_clock(offset));
            let out = run(&env, &["explain", &id.to_string(), "--json"]).await;
            assert_eq!(out.status, 0, "{out:?}");
            let json = out.json();
            let now = json["now"].as_u64().expect("now");
            let server_now = db.now().await;
            assert!(
                now.abs_diff(server_now) <= 2,
                "{offset}: judged at {now}, the server says {server_now}"
            );
            assert_eq!(json["verdict"]["code"], "in-lease", "{offset}: {json}");
        }
    })
    .await;
}

/// `explain --json --at NOW` of `id` under `env`: the verdict's code and
/// the whole answer.
async fn verdict_under(env: &[(String, String)], id: u64) -> (String, Value) {
    let now = NOW.to_string();
    let out = run(env, &["explain", &id.to_string(), "--json", "--at", &now]).await;
    assert_eq!(out.status, 0, "{out:?}");
    let json = out.json();
    let code = json["verdict"]["code"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    (code, json)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_uri_the_daemon_refuses_is_refused_as_the_daemon_would() {
    with_db(|db| async move {
        const DENIED: &str = "PHID-HWBH-deniedaaaaaaaaaaaaa";
        const LOOPBACK: &str = "PHID-HWBH-loopbackaaaaaaaaaaa";
        for (phid, uri) in [
            (DENIED, "http://10.0.0.1/hook"),
            (LOOPBACK, "http://127.0.0.1:9/hook"),
        ] {
            db.insert_hook(&Hook {
                uri: uri.to_owned(),
                ..support::hook(phid, "internal", "enabled")
            })
            .await;
        }
        let denied = db.insert_request(&fresh(DENIED, "{}")).await;
        let loopback = db.insert_request(&fresh(LOOPBACK, "{}")).await;
        // The daemon's defaults: Phorge's deny list, nothing allowed.
        let defaults = support::db_env(&db, &[]);
        let (code, json) = verdict_under(&defaults, denied).await;
        assert_eq!(code, "refused", "{json:#}");
        assert_eq!(json["verdict"]["hookError"], "uri");
        assert_eq!(
            json["verdict"]["reason"],
            "address 10.0.0.1 is in the outbound deny list"
        );
        assert_eq!(json["verdict"]["deliverableNow"], false);
        let (code, json) = verdict_under(&defaults, loopback).await;
        assert_eq!(code, "refused", "{json:#}");
        assert_eq!(
            json["verdict"]["reason"],
            "address 127.0.0.1 is in the outbound deny list"
        );
        let now = NOW.to_string();
        let text = run(&defaults, &["explain", &denied.to_string(), "--at", &now]).await;
        assert!(
            text.stdout.contains(
                "verdict: refused (not being delivered now)\n  refused: the hook's URI fails the \
                 outbound check (address 10.0.0.1 is in the outbound deny list): when the daemon \
                 next picks this row up it marks it failed"
            ),
            "{}",
            text.stdout
        );
        // The daemon's allow list lets loopback through, and explain with it.
        let allowed = support::db_env(&db, &[("GORGE_WEBHOOK_OUTBOUND_ALLOW", "127.0.0.0/8")]);
        let (code, json) = verdict_under(&allowed, loopback).await;
        assert_eq!(code, "eligible", "{json:#}");
        assert_eq!(json["verdict"]["uriChecked"], true);
        assert_eq!(verdict_under(&allowed, denied).await.0, "refused");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_queued_row_is_held_while_phorge_is_silent_in_either_source() {
    with_db(|db| async move {
        db.insert_hook(&hook(HOOK_OK, "ok hook", "enabled")).await;
        let id = db.insert_request(&fresh(HOOK_OK, "{}")).await;
        let db = &db;
        with_phorge_side(&db.namespace, |side| async move {
            // `bin/config set phabricator.silent true`: Phorge's local.json.
            let local = LocalJson::silent("true");
            let setting = local.setting();
            let silent_file = db_env(db, &[("GORGE_PHORGE_LOCAL_CONFIG", &setting)]);
            let (code, json) = verdict_under(&silent_file, id).await;
            assert_eq!(code, "held", "{json:#}");
            assert_eq!(json["verdict"]["localConfig"], true);
            assert_eq!(json["verdict"]["database"], false);
            assert_eq!(json["verdict"]["deliverableNow"], false);
            let now = NOW.to_string();
            let text = run(&silent_file, &["explain", &id.to_string(), "--at", &now]).await;
            assert!(
                text.stdout.contains(
                    "verdict: held (not being delivered now)\n  held: Phorge is in global \
                     silent mode (phabricator.silent is on in Phorge's local.json)"
                ),
                "{}",
                text.stdout
            );

            // The database entry says so too; the file says no more.
            local.write(&LocalJson::text("false"));
            let (code, _) = verdict_under(&silent_file, id).await;
            assert_eq!(code, "eligible", "silent mode off");
            side.set_silent(Some("true")).await;
            let (code, json) = verdict_under(&silent_file, id).await;
            assert_eq!(code, "held", "{json:#}");
            assert_eq!(json["verdict"]["localConfig"], false);
            assert_eq!(json["verdict"]["database"], true);
            // Not even reading the file: the database entry still holds.
            let (code, json) = verdict_under(&db_env(db, &[]), id).await;
            assert_eq!(code, "held", "{json:#}");
            let notes = json["notes"].to_string();
            assert!(!notes.contains("silent mode set with"), "{notes}");
            side.set_silent(None).await;
            let (code, json) = verdict_under(&db_env(db, &[]), id).await;
            assert_eq!(code, "eligible");
            let notes = json["notes"].to_string();
            assert!(
                notes.contains("GORGE_PHORGE_LOCAL_CONFIG is not set here"),
                "{notes}"
            );
        })
        .await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_behind_one_the_breaker_holds_back_waits_with_it() {
    with_db(|db| async move {
        let cases = seed_every_case(&db).await;
        let tripped = cases
            .iter()
            .find(|c| c.code == "breaker-open")
            .expect("case");
        // Queued after the tripped hook's deliverable row, and failing on
        // its own: the run stops at that row, so this one is not reached.
        let behind = db.insert_request(&fresh(HOOK_TRIPPED, "{not json")).await;
        let (code, json) = verdict_under(&db_env(&db, &[]), behind).await;
        assert_eq!(code, "breaker-open", "{json:#}");
        assert_eq!(json["also"][0]["code"], "properties-unparseable");
        let notes = json["notes"].to_string();
        assert!(
            notes.contains(&format!(
                "request {}, queued before this one for the same hook, comes first",
                tripped.id
            )),
            "{notes}"
        );
    })
    .await;
}

/// With an egress proxy in force, `explain` says whether the row's hook
/// goes through it (and how: a tunnel to the checked address) or directly
/// (its host exempt); without one, it says nothing of proxies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_says_whether_the_hook_goes_through_the_egress_proxy() {
    with_db(|db| async move {
        db.insert_hook(&hook(HOOK_OK, "ok hook", "enabled")).await;
        let id = db
            .insert_request(&NewRequest::queued(HOOK_OK, "{}"))
            .await
            .to_string();
        let proxy_notes = |vars: Vec<(String, String)>| {
            let id = id.clone();
            async move {
                let out = run(&vars, &["explain", &id, "--json"]).await;
                assert_eq!(out.status, 0, "{out:?}");
                out.json()["notes"]
                    .as_array()
                    .map(|notes| {
                        notes
                            .iter()
                            .filter_map(Value::as_str)
                            .filter(|note| note.contains("proxy") || note.contains("directly"))
                            .map(str::to_owned)
                            .collect::<Vec<_>>()
                    })
                    .unwrap_or_default()
            }
        };
        let proxy = ("HTTPS_PROXY", "http://hooks:pw@proxy.corp:3128");
        assert_eq!(
            proxy_notes(db_env(&db, &[proxy])).await,
            vec![
                "the call goes through the proxy http://proxy.corp:3128 (with credentials) \
                 (HTTPS_PROXY): a CONNECT tunnel to the address checked here"
                    .to_owned()
            ]
        );
        assert_eq!(
            proxy_notes(db_env(&db, &[proxy, ("NO_PROXY", "192.0.2.0/24")])).await,
            vec!["the call goes directly: NO_PROXY exempts 192.0.2.1".to_owned()]
        );
        assert!(proxy_notes(db_env(&db, &[])).await.is_empty());
    })
    .await;
}
