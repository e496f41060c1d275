//! Hostile input end to end: rows whose `properties` are not what Phorge
//! writes, hooks with odd keys and URIs that must never be called, and
//! receivers that hang, trickle, reset, redirect into denied addresses,
//! answer with something that is not HTTP or stream a body without end.
//! One daemon gets all of them at once next to a healthy hook.
//!
//! Every row must end inside Phorge's value domain with the right
//! `errorType`/`errorCode`, with a log line naming the row and the event,
//! while the healthy hook's rows are delivered, the daemon stays up and
//! nothing panics. Denied addresses are loopback addresses with a listener
//! that counts connections (a "tripwire"), so "refused before connecting"
//! is observed, not assumed; the one non-loopback address (`10.0.0.1`) is
//! an IP literal the outbound check refuses before any socket exists.
//!
//! Not covered: a host name that does not exist. This machine's resolver
//! (`/etc/resolv.conf`) asks a non-loopback server, and these tests send
//! nothing off the machine; `webhook-transport-hyper`'s unit tests cover
//! how resolver answers are classified.

use std::time::Duration;

use serde_json::Value;
use webhook_core::sign;
use webhook_test_support::{with_db, Receiver, Recorded};

use crate::daemon::Daemon;
use crate::e2e::{add_hook, delivery_env, DEADLINE};
use crate::raw::{Misbehaviour, RawReceiver};
use crate::support::{
    assert_alive_without_panic, assert_value_domain, insert_rows, wait_table, NewRow, Stored,
};

/// How a case's row must end.
#[derive(Debug, Clone, PartialEq)]
enum Expect {
    /// `sent` / `okay`, `http` / 200.
    Sent,
    /// `failed` / `none` / epoch 0, `hook` / this code; no HTTP attempt.
    Hook(&'static str),
    /// A failed attempt: `fail`, this errorType and integer code; `queued`
    /// when the row retries forever, else `failed`.
    Attempt(&'static str, u64),
}

/// One hostile row on its own hook.
struct Case {
    name: &'static str,
    uri: String,
    key: String,
    properties: String,
    expect: Expect,
    /// The log event naming the row, and a fragment the same line must hold.
    log: (&'static str, &'static str),
}

const KEY: &str = "hostilekeyaaaaaaaaaaaaaaaaaaaaaa";
const NEVER: &str = r#"{"retry":"never"}"#;

fn case(name: &'static str, uri: String, properties: &str, expect: Expect) -> Case {
    let log = match &expect {
        Expect::Sent => ("", ""),
        Expect::Hook("uri") => ("hook_uri_refused", ""),
        Expect::Hook(_) => ("properties_invalid", ""),
        Expect::Attempt(_, _) => ("attempt_failed", ""),
    };
    Case {
        name,
        uri,
        key: KEY.to_owned(),
        properties: properties.to_owned(),
        expect,
        log,
    }
}

fn request_phid(n: usize) -> String {
    format!("PHID-HWBR-hostile{n:013}")
}

fn hook_phid(n: usize) -> String {
    format!("PHID-HWBH-hostile{n:013}")
}

/// Many transactions and a long unknown key: several MB, compact as PHP
/// writes it, so the write-back must reproduce it byte for byte.
fn several_megabytes() -> (String, usize) {
    const TRANSACTIONS: usize = 50_000;
    let phids: Vec<String> = (0..TRANSACTIONS)
        .map(|n| format!("\"PHID-XACT-TASK-{n:015}\""))
        .collect();
    let text = format!(
        r#"{{"retry":"never","transactionPHIDs":[{}],"triggerPHIDs":["PHID-HRUL-hostileaaaaaaaaaaaa"],"gorgeTestBlob":"{}"}}"#,
        phids.join(","),
        "x".repeat(3_000_000)
    );
    (text, TRANSACTIONS)
}

fn find_receipt<'a>(receipts: &'a [Recorded], path: &str) -> &'a Recorded {
    receipts
        .iter()
        .find(|r| r.path == path)
        .unwrap_or_else(|| panic!("nothing received on {path}"))
}

fn check_row(case: &Case, row: &Stored, stderr: &str) {
    let (status, last, error_type, code) = row.outcome();
    let label = case.name;
    match &case.expect {
        Expect::Sent => {
            assert_eq!(
                (status.as_str(), last.as_str()),
                ("sent", "okay"),
                "{label}: {row:?}"
            );
            assert_eq!(
                (error_type.as_str(), code),
                ("http", Value::from(200)),
                "{label}"
            );
        }
        Expect::Hook(expected) => {
            assert_eq!(
                (status.as_str(), last.as_str()),
                ("failed", "none"),
                "{label}: {row:?}"
            );
            assert_eq!(row.last_epoch, 0, "{label}");
            assert_eq!(
                (error_type.as_str(), code),
                ("hook", Value::from(*expected)),
                "{label}"
            );
        }
        Expect::Attempt(expected_type, expected_code) => {
            let retries = case.properties.contains(r#""retry":"forever""#);
            let expected_status = if retries { "queued" } else { "failed" };
            assert_eq!(
                (status.as_str(), last.as_str()),
                (expected_status, "fail"),
                "{label}: {row:?}"
            );
            assert!(row.last_epoch > 0, "{label}");
            assert_eq!(
                (error_type.as_str(), code),
                (*expected_type, Value::from(*expected_code)),
                "{label}: {row:?}"
            );
        }
    }
    let (event, fragment) = case.log;
    if !event.is_empty() {
        let needle = format!("event=\"{event}\"");
        assert!(
            stderr
                .lines()
                .any(|l| l.contains(&needle) && l.contains(&row.phid) && l.contains(fragment)),
            "{label}: no {event} line for {} holding {fragment:?}\n{stderr}",
            row.phid
        );
    }
}

/// The daemon's peak resident memory, from `/proc`.
fn peak_rss_kib(daemon: &Daemon) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{}/status", daemon.pid())).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_rows_and_receivers_end_in_phorges_domain_while_a_healthy_hook_flows() {
    with_db(|db| async move {
        let receiver = Receiver::start().await;
        let url = |n: usize| receiver.url(&format!("/case/{n}"));
        let trip_v4 = RawReceiver::tripwire("127.0.0.1").await;
        let trip_denied = RawReceiver::tripwire("127.0.0.2").await;
        let trip_v6 = RawReceiver::tripwire("::1").await;
        let raw = |behaviour| RawReceiver::start("127.0.0.1", behaviour);
        let hang = raw(Misbehaviour::Hang).await;
        let trickle = raw(Misbehaviour::Trickle).await;
        let reset = raw(Misbehaviour::Reset).await;
        let close = raw(Misbehaviour::Close).await;
        let not_http = raw(Misbehaviour::answer("SSH-2.0-OpenSSH_9.2\r\n")).await;
        let odd_status = raw(Misbehaviour::answer(
            "HTTP/1.1 999 Odd\r\ncontent-length: 0\r\n\r\n",
        ))
        .await;
        let truncated = raw(Misbehaviour::answer(
            "HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nshort",
        ))
        .await;
        const HUGE: u64 = 100 * 1024 * 1024;
        let huge = raw(Misbehaviour::HugeBody(HUGE)).await;
        let to_denied = raw(Misbehaviour::answer(format!(
            "HTTP/1.1 307 Temporary Redirect\r\nlocation: {}\r\ncontent-length: 0\r\n\r\n",
            trip_denied.url("/redirected")
        )))
        .await;
        let to_file = raw(Misbehaviour::answer(
            "HTTP/1.1 302 Found\r\nlocation: file:///etc/passwd\r\ncontent-length: 0\r\n\r\n",
        ))
        .await;
        let refused_port = crate::daemon::free_port();

        let deep = format!(
            r#"{{"retry":"never","deep":{}{}}}"#,
            "[".repeat(10_000),
            "]".repeat(10_000)
        );
        let (big, big_transactions) = several_megabytes();
        let odd_types = r#"{"retry":["forever"],"silent":"yes","test":{"a":1},"secure":null,"errorType":5,"errorCode":"x","transactionPHIDs":[1,null,{"phid":"nested"}]}"#;
        let forever = r#"{"retry":"forever"}"#;
        let mut cases = vec![
            // properties (on a well-behaved receiver)
            case("not JSON", url(0), r#"{"retry":"never","transactionPHIDs":["#, Expect::Hook("invalid-properties")),
            case("empty text", url(1), "", Expect::Hook("invalid-properties")),
            case("a JSON list", url(2), "[1,2,3]", Expect::Hook("invalid-properties")),
            case("a JSON string", url(3), r#""retry=forever""#, Expect::Hook("invalid-properties")),
            case("a JSON number", url(4), "42", Expect::Hook("invalid-properties")),
            case("JSON null", url(5), "null", Expect::Hook("invalid-properties")),
            case("10,000 levels deep", url(6), &deep, Expect::Hook("invalid-properties")),
            case("a lone surrogate", url(7), r#"{"retry":"never","x":"\ud800"}"#, Expect::Hook("invalid-properties")),
            case("a number out of range", url(8), r#"{"retry":"never","n":1e999}"#, Expect::Hook("invalid-properties")),
            case("transactionPHIDs a string", url(9), r#"{"retry":"never","transactionPHIDs":"PHID-XACT-TASK-aaaaaaaaaaaaaaa"}"#, Expect::Hook("invalid-properties")),
            case("triggerPHIDs a number", url(10), r#"{"triggerPHIDs":7}"#, Expect::Hook("invalid-properties")),
            case("odd types elsewhere", url(11), odd_types, Expect::Sent),
            case("an empty list", url(12), "[]", Expect::Sent),
            case("several MB", url(13), &big, Expect::Sent),
            // keys
            Case { key: String::new(), ..case("empty HMAC key", url(14), NEVER, Expect::Sent) },
            Case { key: "clé \"密钥\" 😀\\".to_owned(), ..case("non-ASCII HMAC key", url(15), NEVER, Expect::Sent) },
            // URIs the outbound check refuses before connecting
            case("empty URI", String::new(), NEVER, Expect::Hook("uri")),
            case("relative URI", "/relative/hook".into(), NEVER, Expect::Hook("uri")),
            case("ftp URI", format!("ftp://127.0.0.1:{}/x", trip_v4.port()), NEVER, Expect::Hook("uri")),
            case("file URI", "file:///etc/passwd".into(), NEVER, Expect::Hook("uri")),
            case("javascript URI", "javascript:alert(1)".into(), NEVER, Expect::Hook("uri")),
            case("space in host", "http://exa mple.com/".into(), NEVER, Expect::Hook("uri")),
            case("private address", "http://10.0.0.1/".into(), NEVER, Expect::Hook("uri")),
            case("denied loopback", trip_denied.url("/direct"), NEVER, Expect::Hook("uri")),
            case("IPv6 loopback", trip_v6.url("/v6"), NEVER, Expect::Hook("uri")),
            case("IPv4-mapped loopback", format!("http://[::ffff:127.0.0.1]:{}/", trip_v4.port()), NEVER, Expect::Hook("uri")),
            // receivers
            case("redirect to a denied address", to_denied.url("/"), NEVER, Expect::Hook("uri")),
            case("redirect to a file URI", to_file.url("/"), NEVER, Expect::Hook("uri")),
            case("hanging receiver", hang.url("/"), NEVER, Expect::Attempt("timeout", 28)),
            case("hanging receiver, retry=forever", hang.url("/forever"), forever, Expect::Attempt("timeout", 28)),
            case("trickling body", trickle.url("/"), NEVER, Expect::Attempt("timeout", 28)),
            case("connection reset", reset.url("/"), NEVER, Expect::Attempt("http", 56)),
            case("closed without a reply", close.url("/"), NEVER, Expect::Attempt("http", 52)),
            case("not HTTP", not_http.url("/"), NEVER, Expect::Attempt("http", 8)),
            case("status 999", odd_status.url("/"), NEVER, Expect::Attempt("http", 999)),
            case("truncated body", truncated.url("/"), NEVER, Expect::Attempt("http", 56)),
            case("connection refused", format!("http://127.0.0.1:{refused_port}/"), NEVER, Expect::Attempt("http", 7)),
            case("100 MB body", huge.url("/"), NEVER, Expect::Sent),
        ];
        for (fragment, name) in [
            ("result=timed out (28)", "hanging receiver"),
            ("result=receiving the reply failed (56)", "connection reset"),
            ("result=connection closed before any reply (52)", "closed without a reply"),
            ("result=reply was not HTTP (8)", "not HTTP"),
            ("result=999", "status 999"),
            ("result=connection refused or unreachable (7)", "connection refused"),
            ("address 127.0.0.2", "redirect to a denied address"),
            ("address 10.0.0.1", "private address"),
            ("address ::1", "IPv6 loopback"),
            ("recursion limit", "10,000 levels deep"),
        ] {
            if let Some(case) = cases.iter_mut().find(|c| c.name == name) {
                case.log.1 = fragment;
            }
        }

        for (n, case) in cases.iter().enumerate() {
            let hook = hook_phid(n);
            add_hook(&db, &hook, case.uri.clone(), &case.key).await;
            insert_rows(
                &db,
                &[NewRow {
                    phid: request_phid(n),
                    hook,
                    object: format!("PHID-TASK-hostile{n:013}"),
                    properties: case.properties.clone(),
                }],
                1,
            )
            .await;
        }
        const HEALTHY: usize = 40;
        let healthy_hook = "PHID-HWBH-healthyaaaaaaaaaaaaa";
        add_hook(&db, healthy_hook, receiver.url("/healthy"), KEY).await;
        let healthy: Vec<NewRow> = (0..HEALTHY)
            .map(|n| NewRow {
                phid: format!("PHID-HWBR-healthy{n:013}"),
                hook: healthy_hook.to_owned(),
                object: format!("PHID-TASK-healthy{n:013}"),
                properties: NEVER.to_owned(),
            })
            .collect();
        insert_rows(&db, &healthy, 20).await;

        let mut daemon = Daemon::start("hostile", &delivery_env(&db.namespace)).await;
        let settled = |rows: &[Stored]| {
            rows.iter().all(|row| {
                let Some(n) = (0..cases.len()).find(|n| request_phid(*n) == row.phid) else {
                    return row.status == "sent";
                };
                match cases[n].expect {
                    Expect::Attempt(..) => row.last_result == "fail",
                    _ => row.status != "queued",
                }
            })
        };
        let rows = wait_table(&db, &[&daemon], "settled", Duration::from_secs(120), settled).await;
        assert_value_domain(&rows);
        assert_alive_without_panic(&mut daemon);
        let health = daemon.get("/healthz", &[]).await;
        assert_eq!(health.status, 200);

        let stderr = daemon.stderr();
        let receipts = receiver.requests();
        for (n, case) in cases.iter().enumerate() {
            let row = rows
                .iter()
                .find(|r| r.phid == request_phid(n))
                .expect("case row");
            check_row(case, row, &stderr);
            if case.expect == Expect::Sent && case.uri.starts_with(&receiver.url("/")) {
                let got = find_receipt(&receipts, &format!("/case/{n}"));
                assert_eq!(
                    got.header("x-phabricator-webhook-signature"),
                    Some(sign(case.key.as_bytes(), &got.body).as_str()),
                    "{}: signature over the received bytes",
                    case.name
                );
            }
        }
        // Rows the dispatcher gave up on keep what Phorge wrote.
        for (n, case) in cases.iter().enumerate() {
            if case.expect == Expect::Hook("invalid-properties") {
                let row = rows.iter().find(|r| r.phid == request_phid(n)).expect("row");
                assert_eq!(
                    row.json()["gorgeOriginalProperties"],
                    case.properties.as_str(),
                    "{}: the original text is kept",
                    case.name
                );
            }
        }
        let stored = |name: &str| {
            let n = cases.iter().position(|c| c.name == name).expect("case");
            rows.iter().find(|r| r.phid == request_phid(n)).expect("row").properties.clone()
        };
        assert_eq!(
            stored("odd types elsewhere"),
            r#"{"retry":["forever"],"silent":"yes","test":{"a":1},"secure":null,"errorType":"http","errorCode":200,"transactionPHIDs":[1,null,{"phid":"nested"}]}"#
        );
        assert_eq!(stored("an empty list"), r#"{"errorType":"http","errorCode":200}"#);
        let big_stored = stored("several MB");
        assert_eq!(
            big_stored,
            format!(r#"{},"errorType":"http","errorCode":200}}"#, &big[..big.len() - 1]),
            "several MB of properties survive the write-back byte for byte"
        );
        let odd: Value = serde_json::from_slice(&find_receipt(&receipts, "/case/11").body).expect("JSON");
        assert_eq!(odd["action"]["silent"], "yes");
        assert_eq!(odd["action"]["test"], serde_json::json!({"a": 1}));
        // The stored list reversed (newest first, as Phorge sends a list
        // whose transactions it cannot read), each value passed through.
        assert_eq!(odd["transactions"][0]["phid"], serde_json::json!({"phid": "nested"}));
        assert_eq!(odd["transactions"][2]["phid"], serde_json::json!(1));
        let big_receipt = find_receipt(&receipts, "/case/13");
        let big_body: Value = serde_json::from_slice(&big_receipt.body).expect("JSON");
        assert_eq!(
            big_body["transactions"].as_array().map(Vec::len),
            Some(big_transactions)
        );
        // The 100 MB answer was read up to the response body limit and
        // dropped: the receiver could not push it all.
        let pushed = huge.body_bytes_written();
        assert!(pushed < HUGE / 4, "{pushed} of {HUGE} bytes were taken");
        // Nothing connected to an address the outbound check refuses.
        for (name, tripwire) in [("127.0.0.1 (ftp, mapped)", &trip_v4), ("127.0.0.2", &trip_denied), ("::1", &trip_v6)] {
            assert_eq!(tripwire.connections(), 0, "a connection reached {name}");
        }
        // The healthy hook flowed next to all of this.
        let healthy_got = receipts.iter().filter(|r| r.path == "/healthy").count();
        assert_eq!(healthy_got, HEALTHY, "{}", daemon.log());
        let peak = peak_rss_kib(&daemon);
        eprintln!(
            "reliability: hostile cases={} healthy_rows={HEALTHY} huge_body_bytes_taken={pushed} \
             peak_rss_kib={peak:?} big_payload_bytes={} hang_connections={}",
            cases.len(),
            big_receipt.body.len(),
            hang.connections()
        );
        assert_alive_without_panic(&mut daemon);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_resolving_to_a_denied_address_is_refused_without_connecting() {
    with_db(|db| async move {
        // `localhost` comes from /etc/hosts, so no packet leaves the
        // machine; without an allow list its 127.0.0.1 is denied.
        let tripwire = RawReceiver::tripwire("127.0.0.1").await;
        let hook = hook_phid(0);
        add_hook(
            &db,
            &hook,
            format!("http://localhost:{}/hook", tripwire.port()),
            KEY,
        )
        .await;
        insert_rows(
            &db,
            &[NewRow {
                phid: request_phid(0),
                hook,
                object: "PHID-TASK-hostile0000000000000".into(),
                properties: NEVER.into(),
            }],
            1,
        )
        .await;
        let mut env = delivery_env(&db.namespace);
        env.retain(|(name, _)| name != "GORGE_WEBHOOK_OUTBOUND_ALLOW");
        let mut daemon = Daemon::start("deny by name", &env).await;
        let rows = wait_table(&db, &[&daemon], "settled", DEADLINE, |rows| {
            rows.iter().all(|r| r.status != "queued")
        })
        .await;
        assert_value_domain(&rows);
        let case = Case {
            log: (
                "hook_uri_refused",
                "address 127.0.0.1 is in the outbound deny list",
            ),
            ..case("localhost", String::new(), NEVER, Expect::Hook("uri"))
        };
        check_row(&case, &rows[0], &daemon.stderr());
        assert_eq!(tripwire.connections(), 0, "localhost was connected to");
        assert_alive_without_panic(&mut daemon);
    })
    .await;
}

/// A row wider than the connection's `max_allowed_packet` (its properties
/// built on the server with `REPEAT` up to the server's own limit) used to
/// fail every poll for ever, with `/readyz` 200 all along. Now it is
/// skipped, said in the log and counted, and the rows behind it are sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_wider_than_the_packet_does_not_stall_the_queue() {
    with_db(|db| async move {
        let receiver = Receiver::start().await;
        let hook = hook_phid(0);
        add_hook(&db, &hook, receiver.url("/wide"), KEY).await;
        let row = |n: usize| NewRow {
            phid: request_phid(n),
            hook: hook.clone(),
            object: format!("PHID-TASK-wide{n:016}"),
            properties: NEVER.into(),
        };
        insert_rows(&db, &[row(0), row(1), row(2)], 3).await;
        let ids: Vec<u64> = crate::support::all_rows(&db)
            .await
            .iter()
            .map(|r| r.id)
            .collect();
        let (wide, behind) = (ids[0], &ids[1..]);
        db.exec(&format!(
            "UPDATE herald_webhookrequest SET properties = REPEAT('x', @@max_allowed_packet), \
             dateModified = dateCreated WHERE id = {wide}"
        ))
        .await;
        let mut daemon = Daemon::start("wide row", &delivery_env(&db.namespace)).await;
        // Rows are read one by one: the fixture's own session cannot read
        // the wide row either.
        for id in behind {
            crate::e2e::wait_row(&db, &daemon, *id, "sent", |r| {
                r.status == webhook_core::RequestStatus::Sent
            })
            .await;
        }
        let status: Option<String> = mysql_async::prelude::Queryable::exec_first(
            &mut db.conn().await,
            "SELECT status FROM herald_webhookrequest WHERE id = ?",
            (wide,),
        )
        .await
        .expect("status");
        assert_eq!(
            status.as_deref(),
            Some("queued"),
            "left alone, not destroyed"
        );
        crate::e2e::wait_log(&daemon, "row_unreadable").await;
        let text = crate::support::metrics(&daemon).await;
        assert!(
            crate::support::count(&text, "gorge_webhook_rows_unreadable_total") >= 1,
            "{text}"
        );
        assert_eq!(
            crate::support::count(&text, "gorge_webhook_poll_errors_total"),
            0
        );
        assert_alive_without_panic(&mut daemon);
    })
    .await;
}
