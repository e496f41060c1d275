//! `watch` as a process: it renders recorded streams (the hidden
//! `--from-file`, and a stream recorded from `webhook-daemon demo` in
//! `fixtures/demo-stream.sse`) line by line with a per-hook summary, honours
//! `--failures-only`, `--hook`, `--json` and `--count`, and follows a live
//! stream from a small local SSE server: the token goes in
//! `X-Service-Token`, the default URL comes from `GORGE_LISTEN_ADDR`,
//! messages split anywhere across chunks parse, and a refused or
//! unreachable stream exits 4 with the daemon's reason.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::support::{env, run};

const DEADLINE: Duration = Duration::from_secs(60);

/// Every event type, a keep-alive, a drop, an unknown type and CRLF line
/// ends in places.
const STREAM: &str = ": connected\n\n\
event: claim_won\nid: 1\n\
data: {\"type\":\"claim_won\",\"at\":1700000000,\"request\":\"PHID-HWBR-aaaaaaaaaaaaaaaaaaaa\",\"hook\":\"PHID-HWBH-good0000000000000000\"}\n\n\
event: delivered\r\nid: 2\r\n\
data: {\"type\":\"delivered\",\"at\":1700000000,\"request\":\"PHID-HWBR-aaaaaaaaaaaaaaaaaaaa\",\"hook\":\"PHID-HWBH-good0000000000000000\",\"status\":204,\"latencyMs\":31}\r\n\r\n\
: keep-alive\n\n\
event: claim_lost\nid: 3\n\
data: {\"type\":\"claim_lost\",\"at\":1700000001,\"request\":\"PHID-HWBR-bbbbbbbbbbbbbbbbbbbb\",\"hook\":\"PHID-HWBH-good0000000000000000\"}\n\n\
event: attempt_failed\nid: 4\n\
data: {\"type\":\"attempt_failed\",\"at\":1700000002,\"request\":\"PHID-HWBR-cccccccccccccccccccc\",\"hook\":\"PHID-HWBH-bad00000000000000000\",\"errorType\":\"timeout\",\"errorCode\":28,\"willRetry\":false,\"latencyMs\":15001}\n\n\
event: dropped\n\
data: {\"type\":\"dropped\",\"dropped\":12}\n\n\
event: hook_error\nid: 17\n\
data: {\"type\":\"hook_error\",\"at\":1700000003,\"request\":\"PHID-HWBR-dddddddddddddddddddd\",\"hook\":\"PHID-HWBH-gone0000000000000000\",\"errorType\":\"hook\",\"errorCode\":\"not-found\"}\n\n\
event: breaker_opened\nid: 18\n\
data: {\"type\":\"breaker_opened\",\"at\":1700000004,\"request\":null,\"hook\":\"PHID-HWBH-bad00000000000000000\",\"failures\":10,\"threshold\":10}\n\n\
event: silent_hold\nid: 19\n\
data: {\"type\":\"silent_hold\",\"at\":1700000005,\"request\":null,\"hook\":null,\"held\":true}\n\n\
event: something_new\nid: 20\n\
data: {\"type\":\"something_new\",\"at\":1700000006,\"request\":null,\"hook\":\"PHID-HWBH-good0000000000000000\"}\n\n";

/// What `watch` prints for [`STREAM`] (stdout is a pipe: no colour).
const RENDERED: &str = "\
22:13:20  claim_won      PHID-HWBR-aaaaaaaaaaaaaaaaaaaa PHID-HWBH-good0000000000000000 claimed
22:13:20  delivered      PHID-HWBR-aaaaaaaaaaaaaaaaaaaa PHID-HWBH-good0000000000000000 204 in 31 ms
22:13:21  claim_lost     PHID-HWBR-bbbbbbbbbbbbbbbbbbbb PHID-HWBH-good0000000000000000 claimed elsewhere first; not sent
22:13:22  attempt_failed PHID-HWBR-cccccccccccccccccccc PHID-HWBH-bad00000000000000000 timeout 28 after 15001 ms; row failed
!! 12 events dropped: this watcher fell behind the daemon
22:13:23  hook_error     PHID-HWBR-dddddddddddddddddddd PHID-HWBH-gone0000000000000000 hook error not-found; row failed unsent
22:13:24  breaker_opened -                              PHID-HWBH-bad00000000000000000 breaker open: 10 failed rows, threshold 10
22:13:25  silent_hold    -                              -                              Phorge is in silent mode: delivery held
22:13:26  something_new  -                              PHID-HWBH-good0000000000000000 {\"type\":\"something_new\",\"at\":1700000006,\"request\":null,\"hook\":\"PHID-HWBH-good0000000000000000\"}
";

const FINAL_SUMMARY: &str = "\
-- final summary, 8 events: delivered 1, failed 2, dropped 12; in backoff: PHID-HWBH-bad00000000000000000
   PHID-HWBH-bad00000000000000000  delivered    0  failed    1  breaker open
   PHID-HWBH-gone0000000000000000  delivered    0  failed    1
   PHID-HWBH-good0000000000000000  delivered    1  failed    0
";

/// `text` in a fresh temporary file.
fn recorded(name: &str, text: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "webhook-admin-watch-{}-{name}.sse",
        std::process::id()
    ));
    std::fs::write(&path, text).expect("write the recorded stream");
    path
}

async fn watch_file(path: &Path, args: &[&str]) -> crate::support::Run {
    let path = path.to_string_lossy().into_owned();
    let mut all = vec!["watch", "--from-file", path.as_str()];
    all.extend_from_slice(args);
    run(&env(&[]), &all).await
}

#[tokio::test]
async fn a_recorded_stream_renders_one_line_per_event_and_a_final_summary() {
    let path = recorded("all", STREAM);
    let out = watch_file(&path, &[]).await;
    assert_eq!(out.status, 0, "{}", out.all_output());
    assert_eq!(out.stdout, format!("{RENDERED}{FINAL_SUMMARY}"));
    assert!(!out.stdout.contains('\x1b'), "no colour into a pipe");

    // A summary every 3 events shown, and the final one.
    let out = watch_file(&path, &["--summary-every", "3"]).await;
    let summaries: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("-- "))
        .collect();
    assert_eq!(
        summaries,
        [
            "-- summary after 3 events: delivered 1, failed 0, dropped 0; in backoff: none",
            "-- summary after 6 events: delivered 1, failed 2, dropped 12; in backoff: PHID-HWBH-bad00000000000000000",
            "-- final summary, 8 events: delivered 1, failed 2, dropped 12; in backoff: PHID-HWBH-bad00000000000000000",
        ],
        "{}",
        out.stdout
    );
    let _ = std::fs::remove_file(path);
}

#[tokio::test]
async fn filters_json_and_count() {
    let path = recorded("filters", STREAM);
    let lines = |out: &crate::support::Run| -> Vec<String> {
        out.stdout
            .lines()
            .take_while(|l| !l.starts_with("-- "))
            .map(|l| l.split_whitespace().nth(1).unwrap_or("").to_owned())
            .collect()
    };

    let failures = watch_file(&path, &["--failures-only"]).await;
    assert_eq!(
        lines(&failures),
        [
            "attempt_failed",
            "12",
            "hook_error",
            "breaker_opened",
            "silent_hold",
            "something_new"
        ],
        "{}",
        failures.stdout
    );
    // The summary still counts the deliveries it did not show.
    assert!(
        failures.stdout.ends_with(FINAL_SUMMARY),
        "{}",
        failures.stdout
    );

    let one_hook = watch_file(&path, &["--hook", "PHID-HWBH-bad00000000000000000"]).await;
    assert_eq!(
        lines(&one_hook),
        ["attempt_failed", "12", "breaker_opened", "silent_hold"],
        "{}",
        one_hook.stdout
    );
    assert!(one_hook.stdout.contains(
        "-- final summary, 3 events: delivered 0, failed 1, dropped 12; in backoff: PHID-HWBH-bad00000000000000000\n   \
         PHID-HWBH-bad00000000000000000  delivered    0  failed    1  breaker open\n"
    ), "{}", one_hook.stdout);
    assert!(!one_hook.stdout.contains("good000"), "{}", one_hook.stdout);

    let json = watch_file(&path, &["--json", "--count", "4", "--failures-only"]).await;
    assert_eq!(json.status, 0, "{}", json.all_output());
    let values: Vec<Value> = json
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let types: Vec<&str> = values.iter().filter_map(|v| v["type"].as_str()).collect();
    // Four events shown (the drop notice is not an event), then the summary.
    assert_eq!(
        types,
        [
            "attempt_failed",
            "dropped",
            "hook_error",
            "breaker_opened",
            "silent_hold",
            "summary"
        ]
    );
    // Each event's JSON exactly as received.
    let expected_line = STREAM
        .lines()
        .find(|l| l.contains("\"attempt_failed\""))
        .and_then(|l| l.strip_prefix("data: "))
        .expect("fixture line");
    assert_eq!(json.stdout.lines().next(), Some(expected_line));
    let summary = &values[5];
    assert_eq!(summary["final"], true);
    // The summary counts the claims and deliveries it did not show.
    assert_eq!(summary["events"], 7);
    assert_eq!(
        summary["inBackoff"],
        serde_json::json!(["PHID-HWBH-bad00000000000000000"])
    );
    let _ = std::fs::remove_file(path);
}

#[tokio::test]
async fn the_demo_recording_sums_up_its_story() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/fixtures/demo-stream.sse");
    let out = watch_file(&path, &["--summary-every", "0"]).await;
    assert_eq!(out.status, 0, "{}", out.all_output());
    let summary = out
        .stdout
        .split_once("-- final summary")
        .map(|(_, s)| s)
        .unwrap_or_else(|| panic!("no final summary in {}", out.stdout));
    assert!(
        summary.starts_with(", 33 events: delivered 10, failed 6, dropped 0; in backoff: none\n"),
        "{summary}"
    );
    assert_eq!(
        out.stdout.matches("-- ").count(),
        1,
        "only the final summary"
    );
    // The broken hook's story: three failures, the breaker, the repair.
    let broken = watch_file(
        &path,
        &[
            "--hook",
            "PHID-HWBH-brokenccccccccccccccc",
            "--failures-only",
            "--summary-every",
            "0",
        ],
    )
    .await;
    let kinds: Vec<&str> = broken
        .stdout
        .lines()
        .take_while(|l| !l.starts_with("-- "))
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    assert_eq!(
        kinds,
        [
            "attempt_failed",
            "attempt_failed",
            "attempt_failed",
            "breaker_opened",
            "breaker_closed"
        ],
        "{}",
        broken.stdout
    );
}

/// A one-connection SSE server: answers with `head`, then sends `chunks`
/// (chunked encoding, each flushed on its own) and, when `end`, the last
/// chunk; otherwise keeps the connection until the client hangs up.
/// Returns its port and, at the end, the request head it got.
async fn sse_server(head: &str, chunks: Vec<String>, end: bool) -> (u16, JoinHandle<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("address").port();
    let head = head.to_owned();
    let task = tokio::spawn(async move {
        let (mut tcp, _) = tokio::time::timeout(DEADLINE, listener.accept())
            .await
            .expect("watch connected")
            .expect("accept");
        let mut request = Vec::new();
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            let mut buf = [0u8; 1024];
            let n = tcp.read(&mut buf).await.expect("read the request");
            assert!(n > 0, "closed before the request head");
            request.extend_from_slice(&buf[..n]);
        }
        tcp.write_all(head.as_bytes()).await.expect("write head");
        for chunk in chunks {
            let framed = format!("{:x}\r\n{chunk}\r\n", chunk.len());
            tcp.write_all(framed.as_bytes()).await.expect("write chunk");
            tcp.flush().await.expect("flush");
        }
        if end && head.contains("chunked") {
            tcp.write_all(b"0\r\n\r\n").await.expect("last chunk");
        } else if !end {
            let mut rest = Vec::new();
            let _ = tokio::time::timeout(DEADLINE, tcp.read_to_end(&mut rest)).await;
        }
        String::from_utf8_lossy(&request).into_owned()
    });
    (port, task)
}

const STREAM_HEAD: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
    cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n";

/// [`STREAM`] cut into pieces at awkward places: mid-field, mid-CRLF, in
/// the middle of a UTF-8-free JSON value.
fn awkward_chunks() -> Vec<String> {
    let bytes = STREAM.as_bytes();
    let cuts = [5, 17, 40, 211, 212, 300, 301, 302, 700, 701, bytes.len()];
    let mut chunks = Vec::new();
    let mut start = 0;
    for cut in cuts {
        let cut = cut.min(bytes.len());
        if cut > start {
            chunks.push(String::from_utf8_lossy(&bytes[start..cut]).into_owned());
            start = cut;
        }
    }
    chunks
}

#[tokio::test]
async fn a_live_stream_is_followed_with_the_token_until_it_ends() {
    let (port, server) = sse_server(STREAM_HEAD, awkward_chunks(), true).await;
    let listen = format!("127.0.0.1:{port}");
    let out = run(
        &env(&[
            ("GORGE_SERVICE_TOKEN", "watch-token"),
            ("GORGE_LISTEN_ADDR", &listen),
        ]),
        &["watch"],
    )
    .await;
    assert_eq!(out.status, 0, "{}", out.all_output());
    assert_eq!(out.stdout, format!("{RENDERED}{FINAL_SUMMARY}"));
    let request = server.await.expect("server task").to_ascii_lowercase();
    assert!(
        request.starts_with("get /api/webhook/events http/1.1\r\n"),
        "{request}"
    );
    assert!(
        request.contains("\r\nx-service-token: watch-token\r\n"),
        "{request}"
    );
    assert!(
        request.contains("\r\naccept: text/event-stream\r\n"),
        "{request}"
    );
}

#[tokio::test]
async fn count_stops_a_stream_that_does_not_end() {
    let (port, server) = sse_server(STREAM_HEAD, awkward_chunks(), false).await;
    let url = format!("http://127.0.0.1:{port}");
    let out = run(&env(&[]), &["watch", "--url", &url, "--count", "2"]).await;
    assert_eq!(out.status, 0, "{}", out.all_output());
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines[..2], RENDERED.lines().take(2).collect::<Vec<_>>()[..]);
    assert!(
        lines[2].starts_with("-- final summary, 2 events: delivered 1"),
        "{}",
        out.stdout
    );
    // Without a token none is sent.
    let request = server.await.expect("server task").to_ascii_lowercase();
    assert!(!request.contains("x-service-token"), "{request}");
}

#[tokio::test]
async fn refused_or_unreachable_streams_exit_4_with_the_reason() {
    let body =
        r#"{"error":{"code":"ERR_UNAUTHORIZED","message":"missing or invalid service token"}}"#;
    let head = format!(
        "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let (port, server) = sse_server(&head, Vec::new(), true).await;
    let url = format!("http://127.0.0.1:{port}");
    let out = run(
        &env(&[("GORGE_SERVICE_TOKEN", "wrong")]),
        &["watch", "--url", &url],
    )
    .await;
    assert_eq!(out.status, 4, "{}", out.all_output());
    assert_eq!(
        out.stderr.trim_end(),
        format!(
            "webhook-admin: event stream {url}/api/webhook/events: answered 401 ERR_UNAUTHORIZED: \
             missing or invalid service token (set GORGE_SERVICE_TOKEN to the daemon's service token)"
        )
    );
    assert_eq!(out.stdout, "", "no summary for a stream never opened");
    let _ = server.await;

    // Nothing listens on a port that was free a moment ago.
    let port = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind")
        .local_addr()
        .expect("address")
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let out = run(&env(&[]), &["watch", "--url", &url]).await;
    assert_eq!(out.status, 4, "{}", out.all_output());
    assert!(out.stderr.contains("cannot connect"), "{}", out.stderr);

    // A bad --url or GORGE_LISTEN_ADDR is a usage error.
    let out = run(&env(&[]), &["watch", "--url", "https://127.0.0.1:1"]).await;
    assert_eq!(out.status, 2, "{}", out.all_output());
    let out = run(&env(&[("GORGE_LISTEN_ADDR", "nonsense")]), &["watch"]).await;
    assert_eq!(out.status, 2, "{}", out.all_output());
    assert!(out.stderr.contains("GORGE_LISTEN_ADDR"), "{}", out.stderr);
}
