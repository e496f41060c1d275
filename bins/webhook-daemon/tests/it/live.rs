//! The live event stream (`GET /api/webhook/events`) of the real daemon:
//! a delivery against MariaDB and the recording receiver shows up as
//! `claim_won` then `delivered`, with no key, URI, signature or body in
//! the stream; the stream ends cleanly on SIGTERM; the cap on open streams
//! answers 503 `ERR_TOO_MANY_STREAMS` and frees its slots.
//!
//! Also the streaming HTTP/1.1 reader the contract harness uses for the
//! stream's fixtures (a stream never ends by itself, so it is read only
//! until what is expected has arrived).

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;
use webhook_core::memory_store::NewRequest;
use webhook_core::Hook;
use webhook_test_support::{with_db, Receiver, Reply};

use crate::daemon::{database_env, free_port, http, Daemon, HttpResponse};

/// A condition expected to hold "soon" must hold within this.
const DEADLINE: Duration = Duration::from_secs(60);

/// The event stream's path.
pub const EVENTS: &str = "/api/webhook/events";

fn malformed(what: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.into())
}

/// An open response whose body is read as it arrives.
pub struct Stream {
    tcp: TcpStream,
    /// The response head.
    pub status: u16,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    chunked: bool,
    /// Body bytes received, still chunk-encoded when `chunked`.
    raw: Vec<u8>,
    /// The body decoded so far.
    body: Vec<u8>,
    /// The end was seen: the last chunk, or the connection's end.
    ended: bool,
    /// The end was the last chunk: the server finished the response.
    last_chunk: bool,
}

impl Stream {
    /// Sends `GET target` and reads the response head.
    pub async fn open(
        addr: SocketAddr,
        target: &str,
        headers: &[(String, String)],
    ) -> std::io::Result<Self> {
        let mut tcp = TcpStream::connect(addr).await?;
        let mut head = format!("GET {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        tcp.write_all(head.as_bytes()).await?;
        let mut raw = Vec::new();
        let split = loop {
            if let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                break split;
            }
            let mut chunk = [0u8; 4096];
            let n = tokio::time::timeout(DEADLINE, tcp.read(&mut chunk))
                .await
                .map_err(|_| malformed("no response head in time"))??;
            if n == 0 {
                return Err(malformed("connection closed before the response head"));
            }
            raw.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&raw[..split]).into_owned();
        let mut lines = head.split("\r\n");
        let status = lines
            .next()
            .and_then(|line| line.split(' ').nth(1))
            .and_then(|code| code.parse().ok())
            .ok_or_else(|| malformed(format!("bad status line in {head:?}")))?;
        let headers: Vec<(String, String)> = lines
            .filter_map(|line| line.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let chunked = headers
            .iter()
            .any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
        let mut stream = Self {
            tcp,
            status,
            headers,
            chunked,
            raw: raw[split + 4..].to_vec(),
            body: Vec::new(),
            ended: false,
            last_chunk: false,
        };
        stream.decode()?;
        Ok(stream)
    }

    /// The first header with this (lower-case) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        webhook_test_support::raw_http::header(&self.headers, name)
    }

    /// The body so far, as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// Whether the server finished the response with its last chunk (a
    /// clean end, not a dropped connection).
    pub fn finished(&self) -> bool {
        self.last_chunk
    }

    /// Moves complete chunks from `raw` to `body`.
    fn decode(&mut self) -> std::io::Result<()> {
        if !self.chunked {
            self.body.append(&mut self.raw);
            return Ok(());
        }
        loop {
            let Some(end) = self.raw.windows(2).position(|w| w == b"\r\n") else {
                return Ok(());
            };
            let size_text = String::from_utf8_lossy(&self.raw[..end]).into_owned();
            let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| malformed(format!("chunk size {size_text:?}")))?;
            if size == 0 {
                self.ended = true;
                self.last_chunk = true;
                self.raw.clear();
                return Ok(());
            }
            if self.raw.len() < end + 2 + size + 2 {
                return Ok(());
            }
            self.body
                .extend_from_slice(&self.raw[end + 2..end + 2 + size]);
            self.raw.drain(..end + 2 + size + 2);
        }
    }

    /// Reads until `done` holds for the body text, the response ends, or
    /// `deadline` passes; returns whether `done` holds.
    pub async fn read_until(
        &mut self,
        deadline: Duration,
        done: impl Fn(&str) -> bool,
    ) -> std::io::Result<bool> {
        let until = Instant::now() + deadline;
        loop {
            if done(&self.text()) {
                return Ok(true);
            }
            if self.ended {
                return Ok(false);
            }
            let mut chunk = [0u8; 4096];
            let n = match tokio::time::timeout_at(until, self.tcp.read(&mut chunk)).await {
                Ok(read) => read?,
                Err(_) => return Ok(false),
            };
            if n == 0 {
                self.ended = true;
            }
            self.raw.extend_from_slice(&chunk[..n]);
            self.decode()?;
        }
    }

    /// What was read, as the plain client's response.
    pub fn response(&self) -> HttpResponse {
        HttpResponse {
            status: self.status,
            headers: self.headers.clone(),
            body: self.body.clone(),
        }
    }
}

/// `GET target`, read until every string of `expect` arrived in the body
/// (at most 10 s) or the response ended, then hung up. For the contract's
/// stream fixtures.
pub async fn stream_prefix(
    addr: SocketAddr,
    target: &str,
    headers: &[(String, String)],
    expect: &[String],
) -> std::io::Result<HttpResponse> {
    let mut stream = Stream::open(addr, target, headers).await?;
    stream
        .read_until(Duration::from_secs(10), |text| {
            expect.iter().all(|needle| text.contains(needle.as_str()))
        })
        .await?;
    Ok(stream.response())
}

/// One parsed SSE message of the daemon's (single-line data).
#[derive(Debug)]
struct Message {
    event: String,
    id: Option<u64>,
    data: Value,
}

/// The messages in `text` (comments skipped).
fn messages(text: &str) -> Vec<Message> {
    text.split("\n\n")
        .filter_map(|block| {
            let mut event = None;
            let mut id = None;
            let mut data = None;
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event: ") {
                    event = Some(v.to_owned());
                } else if let Some(v) = line.strip_prefix("id: ") {
                    id = v.parse().ok();
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(v).ok();
                }
            }
            Some(Message {
                event: event?,
                id,
                data: data?,
            })
        })
        .collect()
}

const TOKEN: &str = "live-token";
const KEY: &str = "livesecretkeylivesecretkeylive23";
const HOOK: &str = "PHID-HWBH-livestreamhook00000";
const OBJECT: &str = "PHID-TASK-livestreamobject0000";
const SECRET_PATH: &str = "/live-secret-path";

fn token_header() -> Vec<(String, String)> {
    vec![("X-Service-Token".to_owned(), TOKEN.to_owned())]
}

#[tokio::test]
async fn a_real_delivery_streams_claim_and_delivery_without_secrets() {
    with_db(|db| async move {
        let receiver = Receiver::start().await;
        receiver.always(SECRET_PATH, Reply::status(200));
        db.insert_hook(&Hook {
            phid: HOOK.to_owned(),
            name: "live".to_owned(),
            uri: receiver.url(SECRET_PATH),
            status: "enabled".to_owned(),
            hmac_key: KEY.to_owned(),
        })
        .await;
        let mut env = database_env(&db.namespace);
        env.extend(
            [
                ("GORGE_SERVICE_TOKEN", TOKEN),
                ("GORGE_WEBHOOK_OUTBOUND_ALLOW", "127.0.0.1/32"),
                ("GORGE_WEBHOOK_POLL_INTERVAL_MS", "100"),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned())),
        );
        let mut daemon = Daemon::start("live stream", &env).await;
        let mut stream = Stream::open(daemon.addr(), EVENTS, &token_header())
            .await
            .expect("open the stream");
        assert_eq!(stream.status, 200, "{}", daemon.log());
        assert_eq!(stream.header("content-type"), Some("text/event-stream"));
        assert_eq!(stream.header("cache-control"), Some("no-cache"));
        assert!(stream
            .read_until(DEADLINE, |t| t.starts_with(": connected\n\n"))
            .await
            .expect("read"));

        let id = db
            .insert_request(&NewRequest {
                object_phid: OBJECT.to_owned(),
                ..NewRequest::queued(
                    HOOK,
                    r#"{"retry":"never","triggerPHIDs":["PHID-HRUL-livestreamrule000000"],"transactionPHIDs":[]}"#,
                )
            })
            .await;
        let request = db.row(id).await.phid;
        let delivered = stream
            .read_until(DEADLINE, |t| t.contains("event: delivered\n"))
            .await
            .expect("read the stream");
        let text = stream.text();
        assert!(delivered, "no delivered event in {text:?}\n{}", daemon.log());
        let recorded = receiver.requests();
        assert_eq!(recorded.len(), 1, "one POST");

        let events = messages(&text);
        let kinds: Vec<&str> = events.iter().map(|m| m.event.as_str()).collect();
        assert_eq!(kinds, ["claim_won", "delivered"], "{text}");
        for message in &events {
            assert_eq!(message.data["type"], message.event.as_str());
            assert_eq!(message.data["request"], request.as_str());
            assert_eq!(message.data["hook"], HOOK);
        }
        assert_eq!(events[1].data["status"], 200);
        assert!(events[1].data["latencyMs"].is_u64());
        let (first, second) = (events[0].id.expect("id"), events[1].id.expect("id"));
        assert!(first < second, "running ids: {first}, {second}");

        let signature = recorded[0]
            .header("x-phabricator-webhook-signature")
            .expect("signed")
            .to_owned();
        let receiver_addr = receiver.addr().to_string();
        for secret in [
            KEY,
            SECRET_PATH,
            receiver_addr.as_str(),
            signature.as_str(),
            OBJECT,
            "PHID-HRUL-livestreamrule",
            "herald_webhook",
        ] {
            assert!(!text.contains(secret), "{secret:?} in the stream:\n{text}");
        }

        // SIGTERM: the stream ends with its last chunk, the daemon with 0.
        daemon.terminate();
        let ended = stream
            .read_until(DEADLINE, |_| false)
            .await
            .expect("read to the end");
        assert!(!ended);
        assert!(
            stream.finished(),
            "the stream did not end with its last chunk: {:?}\n{}",
            stream.text(),
            daemon.log()
        );
        let status = daemon.wait_exit(DEADLINE).await;
        assert!(status.success(), "{status}\n{}", daemon.log());
    })
    .await;
}

#[tokio::test]
async fn the_stream_cap_answers_503_and_frees_slots() {
    let mut env = database_env("live_cap_nodb");
    env.extend(
        [
            // Nothing listens there: the stream does not need the database.
            ("GORGE_WEBHOOK_MYSQL_PORT", free_port().to_string().as_str()),
            ("GORGE_SERVICE_TOKEN", TOKEN),
            ("GORGE_WEBHOOK_EVENT_STREAMS", "1"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned())),
    );
    let daemon = Daemon::start("live cap", &env).await;
    let unauthorized = serde_json::json!({"error": {"code": "ERR_UNAUTHORIZED", "message": "missing or invalid service token"}});
    for headers in [vec![], vec![("X-Service-Token", "wrong")]] {
        let response = daemon.get(EVENTS, &headers).await;
        assert_eq!(response.status, 401);
        let body: Value = serde_json::from_slice(&response.body).expect("JSON");
        assert_eq!(body, unauthorized);
    }

    let mut open = Stream::open(daemon.addr(), &format!("{EVENTS}?token={TOKEN}"), &[])
        .await
        .expect("open the stream");
    assert_eq!(open.status, 200);
    assert!(open
        .read_until(DEADLINE, |t| t.contains(": connected"))
        .await
        .expect("read"));
    let refused = daemon.get(EVENTS, &[("X-Service-Token", TOKEN)]).await;
    assert_eq!(refused.status, 503);
    let body: Value = serde_json::from_slice(&refused.body).expect("JSON");
    assert_eq!(
        body,
        serde_json::json!({"error": {"code": "ERR_TOO_MANY_STREAMS", "message": "too many event streams are open; try again later"}})
    );

    // Hanging up frees the slot (once the daemon notices).
    drop(open);
    let until = Instant::now() + DEADLINE;
    loop {
        let mut again = Stream::open(daemon.addr(), EVENTS, &token_header())
            .await
            .expect("open the stream");
        if again.status == 200 {
            assert!(again
                .read_until(DEADLINE, |t| t.contains(": connected"))
                .await
                .expect("read"));
            break;
        }
        assert_eq!(again.status, 503);
        assert!(
            Instant::now() < until,
            "the slot was never freed\n{}",
            daemon.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn the_plain_client_sees_the_stream_refused_the_same_way() {
    // `http` reads to the end: only whole answers, never the stream itself.
    let mut env = database_env("live_plain_nodb");
    env.extend(
        [
            ("GORGE_WEBHOOK_MYSQL_PORT", free_port().to_string().as_str()),
            ("GORGE_SERVICE_TOKEN", TOKEN),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned())),
    );
    let daemon = Daemon::start("live plain", &env).await;
    let post = http(daemon.addr(), "POST", EVENTS, &token_header(), b"")
        .await
        .expect("an answer");
    assert_eq!(post.status, 405);
    assert_eq!(post.header("allow"), Some("GET, HEAD"));
    let head = http(daemon.addr(), "HEAD", EVENTS, &token_header(), b"")
        .await
        .expect("an answer");
    assert_eq!(
        (
            head.status,
            head.header("content-type"),
            head.header("cache-control")
        ),
        (200, Some("text/event-stream"), Some("no-cache"))
    );
}
