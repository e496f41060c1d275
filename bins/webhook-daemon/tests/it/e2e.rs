//! End to end: the real daemon process against the real MariaDB holding
//! Phorge's tables and the recording receiver, with short windows
//! (effective lease 4 s, effective retry spacing 4 s). Covers delivery of
//! protocol §7's test vector byte for byte, retry spacing, SIGTERM during a
//! delivery, readiness before Phorge created the database, and the
//! process's exit codes and `--help` / `--version`.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use serde_json::Value;
use webhook_core::memory_store::NewRequest;
use webhook_core::{sign, verify, Hook, LastResult, RequestRow, RequestStatus};
use webhook_test_support::mariadb::{
    create_database, dropping_after, server_conn, unique_namespace, HOOK_TABLE_DDL,
    REQUEST_TABLE_DDL,
};
use webhook_test_support::{with_db, Receiver, Reply, TestDb};

use crate::daemon::{database_env, free_port, Daemon};

/// A condition expected to hold "soon" must hold within this.
pub(crate) const DEADLINE: Duration = Duration::from_secs(60);

/// GORGE_WEBHOOK_DELIVERY_TIMEOUT=2 raises GORGE_WEBHOOK_CLAIM_LEASE_SEC=1
/// to 2 + 2.
const EFFECTIVE_LEASE_SECS: u64 = 4;
/// max(effective lease, GORGE_WEBHOOK_RETRY_BACKOFF_SEC=1).
const EFFECTIVE_SPACING_SECS: u64 = 4;

use webhook_core::vectors::{
    BODY as VECTOR_BODY, KEY as VECTOR_KEY, OBJECT_PHID as VECTOR_OBJECT,
    SIGNATURE as VECTOR_SIGNATURE,
};

/// The vector's properties as PHP stores them, plus a key Phorge does not
/// know (with PHP's `\/` and `\u00e9`, and a nested order) in the middle.
pub(crate) const VECTOR_PROPERTIES: &str = r#"{"retry":"forever","transactionPHIDs":{"PHID-XACT-TASK-aaaaaaaaaaaaaaa":"PHID-XACT-TASK-aaaaaaaaaaaaaaa","PHID-XACT-TASK-bbbbbbbbbbbbbbb":"PHID-XACT-TASK-bbbbbbbbbbbbbbb"},"gorgeTestUnknown":{"z":[1,2.5,null],"a":"https:\/\/x\/\u00e9"},"triggerPHIDs":["PHID-HRUL-abcdefghijklmnopqrst"],"silent":false,"secure":false}"#;

/// `retry=forever`, PHP's map-shaped transaction PHIDs.
const RETRY_PROPERTIES: &str = r#"{"retry":"forever","triggerPHIDs":["PHID-HRUL-aaaaaaaaaaaaaaaaaaaa"],"transactionPHIDs":{"PHID-XACT-TASK-ccccccccccccccc":"PHID-XACT-TASK-ccccccccccccccc"}}"#;

pub(crate) fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// A delivering daemon's settings on `namespace`, with short windows.
pub(crate) fn delivery_env(namespace: &str) -> Vec<(String, String)> {
    let mut env = database_env(namespace);
    env.extend(pairs(&[
        ("GORGE_WEBHOOK_OUTBOUND_ALLOW", "127.0.0.1/32"),
        ("GORGE_WEBHOOK_POLL_INTERVAL_MS", "100"),
        ("GORGE_WEBHOOK_DELIVERY_TIMEOUT", "2"),
        ("GORGE_WEBHOOK_CLAIM_LEASE_SEC", "1"),
        ("GORGE_WEBHOOK_RETRY_BACKOFF_SEC", "1"),
        ("GORGE_LOG_LEVEL", "webhook_core=debug,info"),
    ]));
    env
}

pub(crate) fn with_setting(
    mut env: Vec<(String, String)>,
    name: &str,
    value: &str,
) -> Vec<(String, String)> {
    env.retain(|(k, _)| k != name);
    env.push((name.to_owned(), value.to_owned()));
    env
}

pub(crate) async fn add_hook(db: &TestDb, phid: &str, uri: String, key: &str) {
    db.insert_hook(&Hook {
        phid: phid.to_owned(),
        name: phid.to_owned(),
        uri,
        status: "enabled".to_owned(),
        hmac_key: key.to_owned(),
    })
    .await;
}

/// Polls row `id` until `done` holds; panics with the last row and the
/// daemon's log after [`DEADLINE`].
pub(crate) async fn wait_row(
    db: &TestDb,
    daemon: &Daemon,
    id: u64,
    what: &str,
    done: impl Fn(&RequestRow) -> bool,
) -> RequestRow {
    let until = tokio::time::Instant::now() + DEADLINE;
    loop {
        let row = db.row(id).await;
        if done(&row) {
            return row;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "row {id} never became {what} within {DEADLINE:?}; last: {row:?}\n{}",
            daemon.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the daemon's log contains `needle`.
pub(crate) async fn wait_log(daemon: &Daemon, needle: &str) {
    let until = tokio::time::Instant::now() + DEADLINE;
    while !daemon.stderr().contains(needle) {
        assert!(
            tokio::time::Instant::now() < until,
            "the log never said {needle:?}\n{}",
            daemon.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub(crate) fn properties(row: &RequestRow) -> Value {
    serde_json::from_str(&row.properties).unwrap_or_else(|e| {
        panic!(
            "row {} properties are not JSON ({e}): {}",
            row.id, row.properties
        )
    })
}

/// `errorType` and `errorCode` as stored, the code required to be a JSON
/// integer.
fn error_of(row: &RequestRow) -> (String, u64) {
    let props = properties(row);
    let code = &props["errorCode"];
    assert!(
        code.is_u64(),
        "errorCode must be a JSON integer, got {code} in {}",
        row.properties
    );
    (
        props["errorType"].as_str().unwrap_or_default().to_owned(),
        code.as_u64().unwrap_or_default(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_row_is_delivered_once_byte_for_byte() {
    // The vector itself, so a wrong constant cannot pass unnoticed.
    assert_eq!(VECTOR_BODY.len(), 415);
    assert_eq!(
        sign(VECTOR_KEY.as_bytes(), VECTOR_BODY.as_bytes()),
        VECTOR_SIGNATURE
    );
    with_db(|db| async move {
        let receiver = Receiver::start().await;
        let hook = "PHID-HWBH-e2evectoraaaaaaaaaaa";
        add_hook(&db, hook, receiver.url("/vector"), VECTOR_KEY).await;
        let id = db
            .insert_request(&NewRequest {
                object_phid: VECTOR_OBJECT.to_owned(),
                date_created: Some(1_700_000_000),
                ..NewRequest::queued(hook, VECTOR_PROPERTIES)
            })
            .await;
        let started = db.now().await;
        let daemon = Daemon::start("vector", &delivery_env(&db.namespace)).await;

        let got = receiver.wait_for(1, DEADLINE).await;
        assert_eq!(got.len(), 1, "one delivery expected\n{}", daemon.log());
        let request = &got[0];
        assert_eq!(
            (request.method.as_str(), request.path.as_str()),
            ("POST", "/vector")
        );
        assert!(
            request.body.as_ref() == VECTOR_BODY.as_bytes(),
            "body differs from protocol §7's vector\nexpected ({} bytes):\n{VECTOR_BODY}\nactual ({} bytes):\n{}",
            VECTOR_BODY.len(),
            request.body.len(),
            String::from_utf8_lossy(&request.body)
        );
        let signature = request
            .header("x-phabricator-webhook-signature")
            .unwrap_or_else(|| panic!("no signature header in {:?}", request.headers));
        assert_eq!(signature, VECTOR_SIGNATURE);
        assert!(verify(VECTOR_KEY.as_bytes(), &request.body, signature));
        assert_eq!(request.header("content-type"), Some("application/json"));

        let row = wait_row(&db, &daemon, id, "written back", |r| {
            r.status != RequestStatus::Queued
        })
        .await;
        assert_eq!(row.status, RequestStatus::Sent, "{row:?}");
        assert_eq!(row.last_request_result, LastResult::Okay, "{row:?}");
        assert!(
            row.last_request_epoch >= started,
            "lastRequestEpoch {} is before the daemon started ({started})",
            row.last_request_epoch
        );
        assert_eq!(row.date_created, 1_700_000_000);
        assert_eq!(error_of(&row), ("http".to_owned(), 200));
        // Everything else, unknown key and key order included, is exactly as
        // Phorge wrote it; errorType/errorCode are appended.
        let expected = format!(
            "{},\"errorType\":\"http\",\"errorCode\":200}}",
            &VECTOR_PROPERTIES[..VECTOR_PROPERTIES.len() - 1]
        );
        assert_eq!(row.properties, expected);

        // Longer than the effective lease and several polls: nothing more.
        let later = receiver
            .wait_for(2, Duration::from_secs(EFFECTIVE_LEASE_SECS + 4))
            .await;
        assert_eq!(later.len(), 1, "delivered twice\n{}", daemon.log());
        let after = db.row(id).await;
        assert_eq!(after.date_modified, row.date_modified, "{after:?}");
        assert_eq!(after.status, RequestStatus::Sent);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_receiver_is_retried_after_the_effective_spacing() {
    with_db(|db| async move {
        let receiver = Receiver::start().await;
        receiver.always("/flaky", Reply::status(500));
        let hook = "PHID-HWBH-e2eflakyaaaaaaaaaaaa";
        add_hook(&db, hook, receiver.url("/flaky"), VECTOR_KEY).await;
        let id = db
            .insert_request(&NewRequest::queued(hook, RETRY_PROPERTIES))
            .await;
        let daemon = Daemon::start("retry", &delivery_env(&db.namespace)).await;
        // The spacing asserted below is the one the daemon says it uses.
        wait_log(
            &daemon,
            &format!("retry_spacing_secs={EFFECTIVE_SPACING_SECS}"),
        )
        .await;

        let first = receiver.wait_for(1, DEADLINE).await;
        assert_eq!(first.len(), 1, "first attempt\n{}", daemon.log());
        let failed = wait_row(&db, &daemon, id, "a failed attempt", |r| {
            r.last_request_result == LastResult::Fail
        })
        .await;
        assert_eq!(
            failed.status,
            RequestStatus::Queued,
            "retry=forever stays queued"
        );
        assert_eq!(error_of(&failed), ("http".to_owned(), 500));

        let two = receiver.wait_for(2, DEADLINE).await;
        assert_eq!(two.len(), 2, "second attempt\n{}", daemon.log());
        // The second attempt has already been answered 500; the next gets 200.
        receiver.always("/flaky", Reply::status(200));
        let gap = two[1].at - two[0].at;
        assert!(
            gap >= Duration::from_secs(EFFECTIVE_SPACING_SECS - 1),
            "attempts {gap:?} apart; the effective spacing is {EFFECTIVE_SPACING_SECS}s\n{}",
            daemon.log()
        );
        assert_eq!(two[0].body, two[1].body, "a retry sends the same bytes");

        let three = receiver.wait_for(3, DEADLINE).await;
        assert_eq!(three.len(), 3, "third attempt\n{}", daemon.log());
        let sent = wait_row(&db, &daemon, id, "sent", |r| {
            r.status == RequestStatus::Sent
        })
        .await;
        assert_eq!(sent.last_request_result, LastResult::Okay);
        assert_eq!(error_of(&sent), ("http".to_owned(), 200));
        for attempt in &three {
            let signature = attempt
                .header("x-phabricator-webhook-signature")
                .unwrap_or_default();
            assert!(verify(VECTOR_KEY.as_bytes(), &attempt.body, signature));
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_the_delivery_in_flight_finish_and_nothing_is_sent_twice() {
    with_db(|db| async move {
        let receiver = Receiver::start().await;
        receiver.always("/slow", Reply::status(200).after(Duration::from_secs(3)));
        let hook = "PHID-HWBH-e2eslowaaaaaaaaaaaaa";
        add_hook(&db, hook, receiver.url("/slow"), VECTOR_KEY).await;
        // The receiver takes 3 s, so the delivery timeout must be longer;
        // the effective lease becomes 8 + 2.
        let lease_secs = 10;
        let env = with_setting(
            delivery_env(&db.namespace),
            "GORGE_WEBHOOK_DELIVERY_TIMEOUT",
            "8",
        );
        let object = |n: u32| format!("PHID-TASK-sigterm{n:013}");
        let first = db
            .insert_request(&NewRequest {
                object_phid: object(1),
                ..NewRequest::queued(hook, r#"{"retry":"never"}"#)
            })
            .await;
        let mut daemon = Daemon::start("sigterm", &env).await;
        let arrived = receiver.wait_for(1, DEADLINE).await;
        assert_eq!(arrived.len(), 1, "delivery started\n{}", daemon.log());
        // The receiver is now holding the request for 3 s.
        daemon.stop_cleanly(DEADLINE).await;
        // Written before the process ended: no waiting here.
        let row = db.row(first).await;
        assert_eq!(
            (row.status, row.last_request_result),
            (RequestStatus::Sent, LastResult::Okay),
            "the in-flight delivery's result was written before exit\n{}",
            daemon.log()
        );
        assert!(
            daemon.stderr().contains("deliveries_drained"),
            "{}",
            daemon.log()
        );
        drop(daemon);

        let second = db
            .insert_request(&NewRequest {
                object_phid: object(2),
                ..NewRequest::queued(hook, r#"{"retry":"never"}"#)
            })
            .await;
        let restarted = Daemon::start("sigterm restarted", &env).await;
        wait_row(&db, &restarted, second, "sent", |r| {
            r.status == RequestStatus::Sent
        })
        .await;
        // Wait out the lease (and more): the first row must not come again.
        let all = receiver
            .wait_for(3, Duration::from_secs(lease_secs + 3))
            .await;
        let objects: Vec<String> = all
            .iter()
            .map(|r| {
                serde_json::from_slice::<Value>(&r.body).expect("JSON body")["object"]["phid"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect();
        assert_eq!(objects, vec![object(1), object(2)], "{}", restarted.log());
    })
    .await;
}

#[tokio::test]
async fn sigterm_sigint_or_sigquit_right_after_startup_is_a_clean_exit() {
    for signal in ["TERM", "INT", "QUIT"] {
        let mut env = database_env(&unique_namespace());
        env.push(("GORGE_WEBHOOK_MYSQL_PORT".into(), free_port().to_string()));
        // Once /healthz answers, the handlers are in place.
        let mut daemon = Daemon::start(&format!("SIG{signal} at startup"), &env).await;
        daemon.signal(signal);
        let status = daemon.wait_exit(DEADLINE).await;
        assert_eq!(status.code(), Some(0), "SIG{signal}\n{}", daemon.log());
        assert!(
            daemon.stderr().contains(r#"event="stopped""#),
            "{}",
            daemon.log()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_waits_for_phorge_to_create_the_database() {
    let namespace = unique_namespace();
    let database = format!("{namespace}_herald");
    dropping_after(&database, async {
        let receiver = Receiver::start().await;
        let daemon = Daemon::start("readyz", &delivery_env(&namespace)).await;
        let before = daemon.get("/readyz", &[]).await;
        assert_eq!(before.status, 503, "{}", before.text());
        let body: Value = serde_json::from_slice(&before.body).expect("JSON body");
        assert_eq!(body["status"], "unavailable");
        let reason = body["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains(&database) && reason.contains("does not exist"),
            "reason {reason:?} should say {database} does not exist"
        );

        // Phorge's storage upgrade, while the daemon runs: the database
        // first. Without its tables the account's privileges cannot be
        // checked, and nothing could be delivered: still not ready.
        create_database(&database).await;
        let until = tokio::time::Instant::now() + DEADLINE;
        loop {
            let waiting = daemon.get("/readyz", &[]).await;
            assert_eq!(waiting.status, 503, "ready without tables: {}", waiting.text());
            let body: Value = serde_json::from_slice(&waiting.body).expect("JSON body");
            let reason = body["reason"].as_str().unwrap_or_default();
            if reason.contains("privileges for delivery cannot be checked yet") {
                assert!(reason.contains("doesn't exist"), "{reason}");
                break;
            }
            assert!(
                tokio::time::Instant::now() < until,
                "/readyz still says {reason:?} after the database was created\n{}",
                daemon.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }

        // And delivery starts once the tables are there, without a restart.
        let mut conn = server_conn().await;
        let hook_uri = receiver.url("/ready");
        let statements = [
            format!("USE `{database}`"),
            REQUEST_TABLE_DDL.to_owned(),
            HOOK_TABLE_DDL.to_owned(),
            format!(
                "INSERT INTO herald_webhook (phid, name, webhookURI, viewPolicy, editPolicy, \
                 status, hmacKey, dateCreated, dateModified) VALUES ('PHID-HWBH-e2ereadyaaaaaaaaaaaa', \
                 'ready', '{hook_uri}', 'users', 'admin', 'enabled', '{VECTOR_KEY}', \
                 UNIX_TIMESTAMP(), UNIX_TIMESTAMP())"
            ),
            "INSERT INTO herald_webhookrequest (phid, webhookPHID, objectPHID, status, properties, \
             lastRequestResult, lastRequestEpoch, dateCreated, dateModified) VALUES \
             ('PHID-HWBR-e2eready000000000000', 'PHID-HWBH-e2ereadyaaaaaaaaaaaa', \
             'PHID-TASK-e2eready00000000000', 'queued', '{}', 'none', 0, UNIX_TIMESTAMP(), \
             UNIX_TIMESTAMP())"
                .to_owned(),
        ];
        for sql in &statements {
            conn.query_drop(sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
        conn.disconnect().await.expect("disconnect");
        let until = tokio::time::Instant::now() + DEADLINE;
        loop {
            let ready = daemon.get("/readyz", &[]).await;
            if ready.status == 200 {
                assert_eq!(ready.text().trim(), r#"{"status":"ok"}"#);
                break;
            }
            assert!(
                tokio::time::Instant::now() < until,
                "/readyz still {} after the tables were created: {}\n{}",
                ready.status,
                ready.text(),
                daemon.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let got = receiver.wait_for(1, DEADLINE).await;
        assert_eq!(
            got.len(),
            1,
            "delivery once the tables appeared\n{}",
            daemon.log()
        );
    })
    .await;
}

#[tokio::test]
async fn a_taken_listen_address_exits_non_zero() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a port to take");
    let addr = taken.local_addr().expect("taken address");
    let mut env = database_env(&unique_namespace());
    env.push(("GORGE_WEBHOOK_MYSQL_PORT".into(), free_port().to_string()));
    env.push(("GORGE_LISTEN_ADDR".into(), addr.to_string()));
    let mut daemon = Daemon::spawn("taken port", &[], &env);
    let status = daemon.wait_exit(DEADLINE).await;
    assert!(!status.success(), "must fail: {status}\n{}", daemon.log());
    assert_eq!(status.code(), Some(1), "{}", daemon.log());
    assert!(
        daemon.stderr().contains("cannot listen") && daemon.stderr().contains(&addr.to_string()),
        "{}",
        daemon.log()
    );
    // The line's target is the one it had when `main.rs` wrote it.
    assert!(
        daemon
            .stderr()
            .contains(r#"webhook_daemon: event="startup_failed""#),
        "{}",
        daemon.log()
    );
    drop(taken);
}

#[tokio::test]
async fn a_bad_setting_exits_2_naming_the_variable() {
    let cases = [
        ("GORGE_WEBHOOK_MAX_CONCURRENT", "eight"),
        ("GORGE_WEBHOOK_MYSQL_PORT", "0"),
        ("GORGE_WEBHOOK_CLAIM_LEASE_SEC", "-1"),
        ("GORGE_WEBHOOK_POLL_INTERVAL_MS", "soon"),
        ("GORGE_LISTEN_ADDR", "nowhere"),
        ("GORGE_LOG_FORMAT", "xml"),
        ("GORGE_WEBHOOK_OUTBOUND_ALLOW", "127.0.0.1/99"),
    ];
    for (name, value) in cases {
        let env = pairs(&[(name, value)]);
        let mut daemon = Daemon::spawn(&format!("{name}={value}"), &[], &env);
        let status = daemon.wait_exit(DEADLINE).await;
        assert_eq!(status.code(), Some(2), "{name}={value}\n{}", daemon.log());
        assert!(
            daemon.stderr().contains(name),
            "{name}={value}: stderr must name the variable\n{}",
            daemon.log()
        );
    }
}

/// A log level outside the stated set used to start a daemon that wrote
/// nothing at all, errors included: tracing took `warning` for a target.
/// Now it exits 2 naming the variable and showing what it was given.
#[tokio::test]
async fn a_log_level_outside_the_stated_set_exits_2_naming_it() {
    for value in ["warning", "loud", "verbose", "webhook_core=warning"] {
        let env = pairs(&[("GORGE_LOG_LEVEL", value)]);
        let mut daemon = Daemon::spawn(&format!("GORGE_LOG_LEVEL={value}"), &[], &env);
        let status = daemon.wait_exit(DEADLINE).await;
        assert_eq!(status.code(), Some(2), "{value}\n{}", daemon.log());
        let expected = "webhook-daemon: bad setting GORGE_LOG_LEVEL: is not a log level";
        assert!(
            daemon.stderr().contains(expected)
                && daemon.stderr().contains(&format!("(set to {value:?})")),
            "{value}\n{}",
            daemon.log()
        );
    }
}

#[tokio::test]
async fn a_value_out_of_its_bounds_exits_2_naming_the_variable_and_the_bound() {
    // One variable declared by each crate.
    let cases = [
        (
            "GORGE_WEBHOOK_CLAIM_LEASE_SEC",
            "0",
            "GORGE_WEBHOOK_CLAIM_LEASE_SEC: must be between 1 and 86400 s",
        ),
        (
            "GORGE_WEBHOOK_MYSQL_LOCK_SESSIONS",
            "65",
            "GORGE_WEBHOOK_MYSQL_LOCK_SESSIONS: must be between 1 and 64",
        ),
        (
            "GORGE_WEBHOOK_RESPONSE_HEAD_MAX",
            "1023",
            "GORGE_WEBHOOK_RESPONSE_HEAD_MAX: must be 0 or between 1024 and 102400 bytes",
        ),
        (
            "GORGE_WEBHOOK_EVENT_STREAMS",
            "2000",
            "GORGE_WEBHOOK_EVENT_STREAMS: must be between 1 and 1024",
        ),
    ];
    for (name, value, message) in cases {
        let env = pairs(&[(name, value)]);
        let mut daemon = Daemon::spawn(&format!("{name}={value}"), &[], &env);
        let status = daemon.wait_exit(DEADLINE).await;
        assert_eq!(status.code(), Some(2), "{name}={value}\n{}", daemon.log());
        assert!(
            daemon.stderr().contains(message),
            "{name}={value}: stderr must say {message:?}\n{}",
            daemon.log()
        );
    }
}

/// Every `GORGE_*` name the daemon's crates read (string literals and docs
/// in their sources), so a new variable cannot be left out of `--help`.
fn variables_in_sources() -> Vec<String> {
    let root = crate::support::workspace();
    let mut names = std::collections::BTreeSet::new();
    for dir in [
        "crates/core/src",
        "crates/store-mysql/src",
        "crates/transport-hyper/src",
        "bins/webhook-daemon/src",
    ] {
        let dir = root.join(dir);
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("directory entry").path();
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("source file");
            for (at, _) in text.match_indices("GORGE_") {
                let name: String = text[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                if !name.ends_with('_') {
                    names.insert(name);
                }
            }
        }
    }
    names.into_iter().collect()
}

#[tokio::test]
async fn help_lists_every_variable_and_version_prints_the_version() {
    let mut help = Daemon::spawn("--help", &["--help"], &[]);
    assert!(help.wait_exit(DEADLINE).await.success(), "{}", help.log());
    let text = help.stdout();
    let names = variables_in_sources();
    // protocol §9's names, so a broken scan cannot pass vacuously.
    for spec in [
        "GORGE_LISTEN_ADDR",
        "GORGE_SERVICE_TOKEN",
        "GORGE_WEBHOOK_MYSQL_HOST",
        "GORGE_WEBHOOK_MYSQL_PORT",
        "GORGE_WEBHOOK_MYSQL_USER",
        "GORGE_WEBHOOK_MYSQL_PASS",
        "GORGE_WEBHOOK_NAMESPACE",
        "GORGE_WEBHOOK_POLL_INTERVAL_MS",
        "GORGE_WEBHOOK_DELIVERY_TIMEOUT",
        "GORGE_WEBHOOK_MAX_CONCURRENT",
        "GORGE_WEBHOOK_ERROR_BACKOFF_SEC",
        "GORGE_WEBHOOK_ERROR_THRESHOLD",
        "GORGE_WEBHOOK_RETRY_BACKOFF_SEC",
        "GORGE_WEBHOOK_CLAIM_LEASE_SEC",
    ] {
        assert!(names.iter().any(|n| n == spec), "source scan missed {spec}");
    }
    let missing: Vec<&String> = names
        .iter()
        .filter(|name| !text.split_whitespace().any(|word| word == name.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "--help does not list {missing:?}\n{text}"
    );
    // The exit codes other tests hold the daemon to: 2 for a bad setting,
    // 1 for a missing privilege, 0 for a stop by signal.
    for code in ["  0  stopped by", "  1  cannot deliver", "  2  a setting"] {
        assert!(text.contains(code), "--help lacks {code:?}\n{text}");
    }
    assert!(text.contains("NO_COLOR"), "{text}");

    let mut version = Daemon::spawn("--version", &["--version"], &[]);
    assert!(
        version.wait_exit(DEADLINE).await.success(),
        "{}",
        version.log()
    );
    assert_eq!(
        version.stdout(),
        format!("webhook-daemon {}\n", env!("CARGO_PKG_VERSION"))
    );
}
