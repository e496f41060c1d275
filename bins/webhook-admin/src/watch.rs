//! `watch`: follows the daemon's live event stream
//! (`GET /api/webhook/events`, Server-Sent Events) and prints one line per
//! event — time, type, request, hook, status or error, latency — or, with
//! `--json`, each event's JSON as received; with a running summary per hook
//! (delivered, failed, breaker open) every N events and at the end.
//!
//! The rendering ([`View`]) is pure and tested on recorded streams; the
//! network side is a plain HTTP/1.1 GET with hyper. It only reads: the
//! stream changes nothing in the daemon.

use std::collections::BTreeMap;
use std::io::{ErrorKind, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpStream;

use webhook_core::TransportFailure;
use webhook_daemon::config::LISTEN;

use crate::clock;
use crate::error::AdminError;
use crate::sse::{Message, Parser};

/// The stream's path under the daemon's address.
const EVENTS_PATH: &str = "/api/webhook/events";

/// Bound on connecting and on getting the response head.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The daemon sends a keep-alive comment every 15 s; this long without a
/// byte means the stream is dead.
const IDLE_TIMEOUT: Duration = Duration::from_secs(45);

/// Error bodies are read up to this many bytes.
const ERROR_BODY_LIMIT: usize = 4096;

/// Where the events come from.
#[derive(Debug, Clone)]
pub enum Source {
    /// The daemon's diagnostics address.
    Url(StreamUrl),
    /// A recorded stream (the hidden `--from-file`, for tests).
    File(PathBuf),
}

/// What `watch` was asked to do.
#[derive(Debug, Clone)]
pub struct WatchOptions {
    /// Where to read.
    pub source: Source,
    /// `GORGE_SERVICE_TOKEN`, sent as `X-Service-Token`.
    pub token: Option<String>,
    /// Which events, and how to print them.
    pub view: ViewOptions,
}

/// The daemon's diagnostics address, as `watch` connects to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamUrl {
    /// `host:port` as given (also the `Host` header).
    pub(crate) authority: String,
    pub(crate) host: String,
    pub(crate) port: u16,
    /// A path prefix (a proxy's), without the trailing slash.
    pub(crate) prefix: String,
}

impl StreamUrl {
    /// Parses `http://host[:port][/prefix]`.
    pub fn parse(text: &str) -> Result<Self, AdminError> {
        let bad = |why: &str| AdminError::Usage(format!("--url {text:?}: {why}"));
        let uri: Uri = text
            .parse()
            .map_err(|_| bad("not a URL such as http://127.0.0.1:8160"))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some(_) => {
                return Err(bad(
                    "only http:// (the diagnostics API has no TLS; watch from the daemon's host or through a tunnel)",
                ))
            }
            None => return Err(bad("must start with http://")),
        }
        if uri.query().is_some() {
            return Err(bad(
                "no query, please: the token is read from GORGE_SERVICE_TOKEN",
            ));
        }
        let authority = uri.authority().ok_or_else(|| bad("no host"))?;
        let host = authority.host();
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        Ok(Self {
            authority: authority.as_str().to_owned(),
            host: host.to_owned(),
            port: authority.port_u16().unwrap_or(80),
            prefix: uri.path().trim_end_matches('/').to_owned(),
        })
    }

    /// `http://127.0.0.1:<port>` for the daemon's `GORGE_LISTEN_ADDR` (read
    /// as the daemon reads it, `webhook_daemon::config::LISTEN`, default
    /// included); an address that names a host keeps it.
    pub fn from_listen_addr(listen: Option<&str>) -> Result<Self, AdminError> {
        let addr =
            LISTEN
                .read(&|_| listen.map(str::to_owned))
                .map_err(|err| AdminError::Setting {
                    variable: err.variable.to_owned(),
                    reason: format!("{}; pass --url instead", err.reason),
                })?;
        let ip = if addr.ip().is_unspecified() {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        } else {
            addr.ip()
        };
        Self::parse(&format!("http://{}", SocketAddr::new(ip, addr.port())))
    }

    /// The URL of the stream itself, for messages.
    pub fn events_url(&self) -> String {
        format!("http://{}{}{EVENTS_PATH}", self.authority, self.prefix)
    }
}

/// Which events are shown, and how.
#[derive(Debug, Clone, Default)]
pub struct ViewOptions {
    /// Only events of this hook (and those about no hook in particular).
    pub hook: Option<String>,
    /// Hide claims and deliveries.
    pub failures_only: bool,
    /// Print each event's JSON line as received.
    pub json: bool,
    /// ANSI colours (a terminal).
    pub colour: bool,
    /// Stop after this many events shown.
    pub count: Option<u64>,
    /// A summary after every this many events shown; 0 = only at the end.
    pub summary_every: u64,
}

/// Whether to go on reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Read on.
    More,
    /// `--count` is reached.
    Done,
}

#[derive(Debug, Default, Clone)]
struct HookTally {
    delivered: u64,
    failed: u64,
    breaker_open: bool,
}

/// Renders events and keeps the running summary.
#[derive(Debug)]
pub struct View {
    options: ViewOptions,
    shown: u64,
    events: u64,
    dropped: u64,
    hooks: BTreeMap<String, HookTally>,
}

/// Event types `--failures-only` hides; anything else (a new type too) is
/// shown.
const ROUTINE: [&str; 3] = ["claim_won", "claim_lost", "delivered"];

impl View {
    /// A view with nothing seen yet.
    pub fn new(options: ViewOptions) -> Self {
        Self {
            options,
            shown: 0,
            events: 0,
            dropped: 0,
            hooks: BTreeMap::new(),
        }
    }

    /// Takes one message; appends what to print to `out`.
    pub fn on_message(&mut self, message: &Message, out: &mut Vec<String>) -> Step {
        let value: Value = serde_json::from_str(&message.data).unwrap_or(Value::Null);
        if message.event == "dropped" {
            let missed = value["dropped"].as_u64().unwrap_or(0);
            self.dropped += missed;
            out.push(if self.options.json {
                message.data.clone()
            } else {
                self.paint(
                    "1;33",
                    format!("!! {missed} events dropped: this watcher fell behind the daemon"),
                )
            });
            return Step::More;
        }
        let kind = match message.event.as_str() {
            "message" => value["type"].as_str().unwrap_or("message").to_owned(),
            other => other.to_owned(),
        };
        let hook = value["hook"].as_str();
        if let (Some(wanted), Some(hook)) = (&self.options.hook, hook) {
            if wanted != hook {
                return Step::More;
            }
        }
        self.events += 1;
        if let Some(hook) = hook {
            let tally = self.hooks.entry(hook.to_owned()).or_default();
            match kind.as_str() {
                "delivered" => tally.delivered += 1,
                "attempt_failed" | "hook_error" => tally.failed += 1,
                "breaker_opened" => tally.breaker_open = true,
                "breaker_closed" => tally.breaker_open = false,
                _ => {}
            }
        }
        if self.options.failures_only && ROUTINE.contains(&kind.as_str()) {
            return Step::More;
        }
        self.shown += 1;
        out.push(if self.options.json {
            message.data.clone()
        } else {
            self.line(&kind, &value, &message.data)
        });
        let every = self.options.summary_every;
        let done = self.options.count.is_some_and(|count| self.shown >= count);
        if every > 0 && self.shown % every == 0 && !done {
            out.push(self.summary(false));
        }
        if done {
            Step::Done
        } else {
            Step::More
        }
    }

    /// One readable line for an event.
    fn line(&self, kind: &str, value: &Value, data: &str) -> String {
        if !value.is_object() {
            return format!("?? unreadable {kind} event: {data}");
        }
        let time = value["at"]
            .as_u64()
            .and_then(|at| clock::utc(at).get(11..19).map(str::to_owned))
            .unwrap_or_else(|| "--:--:--".to_owned());
        let request = value["request"].as_str().unwrap_or("-");
        let hook = value["hook"].as_str().unwrap_or("-");
        let number = |name: &str| value[name].as_u64().unwrap_or(0);
        let code = match &value["errorCode"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let (colour, detail) = match kind {
            "claim_won" => ("2", "claimed".to_owned()),
            "claim_lost" => ("2", "claimed elsewhere first; not sent".to_owned()),
            "delivered" => (
                "32",
                format!("{} in {} ms", number("status"), number("latencyMs")),
            ),
            "attempt_failed" => {
                let retry = value["willRetry"].as_bool().unwrap_or(false);
                // Phorge stores a failure below HTTP as type `http` with
                // cURL's number, which a reader cannot tell from a status.
                let code = match value["errorType"].as_str() {
                    Some("http") => curl_words(value["errorCode"].as_i64()).unwrap_or(code.clone()),
                    _ => code.clone(),
                };
                (
                    if retry { "33" } else { "31" },
                    format!(
                        "{} {code} after {} ms; {}",
                        value["errorType"].as_str().unwrap_or("?"),
                        number("latencyMs"),
                        if retry {
                            "stays queued for a retry"
                        } else {
                            "row failed"
                        }
                    ),
                )
            }
            "hook_error" => ("31", format!("hook error {code}; row failed unsent")),
            "breaker_opened" => (
                "1;31",
                format!(
                    "breaker open: {} failed rows, threshold {}",
                    number("failures"),
                    number("threshold")
                ),
            ),
            "breaker_closed" => (
                "32",
                format!(
                    "breaker closed: {} failed rows, threshold {}",
                    number("failures"),
                    number("threshold")
                ),
            ),
            "hook_paused" => (
                "1;33",
                format!(
                    "paused: answered {} with Retry-After; not called for {} s, until {}",
                    number("status"),
                    number("seconds"),
                    clock::utc(number("until"))
                ),
            ),
            "silent_hold" => (
                "35",
                if value["held"].as_bool().unwrap_or(false) {
                    "Phorge is in silent mode: delivery held".to_owned()
                } else {
                    "silent mode over: delivery resumed".to_owned()
                },
            ),
            _ => ("0", data.to_owned()),
        };
        let line = format!("{time}  {kind:<14} {request:<30} {hook:<30} {detail}");
        self.paint(colour, line)
    }

    fn paint(&self, colour: &str, line: String) -> String {
        if self.options.colour {
            format!("\x1b[{colour}m{line}\x1b[0m")
        } else {
            line
        }
    }

    /// The running summary; `last` for the one printed at the end.
    pub fn summary(&self, last: bool) -> String {
        let delivered: u64 = self.hooks.values().map(|t| t.delivered).sum();
        let failed: u64 = self.hooks.values().map(|t| t.failed).sum();
        let backoff: Vec<&str> = self
            .hooks
            .iter()
            .filter(|(_, t)| t.breaker_open)
            .map(|(phid, _)| phid.as_str())
            .collect();
        if self.options.json {
            let hooks: serde_json::Map<String, Value> = self
                .hooks
                .iter()
                .map(|(phid, t)| {
                    (
                        phid.clone(),
                        json!({"delivered": t.delivered, "failed": t.failed,
                               "breakerOpen": t.breaker_open}),
                    )
                })
                .collect();
            return json!({"type": "summary", "final": last, "events": self.events,
                          "dropped": self.dropped, "delivered": delivered, "failed": failed,
                          "hooks": hooks, "inBackoff": backoff})
            .to_string();
        }
        let mut text =
            format!(
            "-- {} {} events: delivered {delivered}, failed {failed}, dropped {}; in backoff: {}",
            if last { "final summary," } else { "summary after" },
            self.events,
            self.dropped,
            if backoff.is_empty() {
                "none".to_owned()
            } else {
                backoff.join(", ")
            }
        );
        for (phid, tally) in &self.hooks {
            text.push_str(&format!(
                "\n   {phid:<30}  delivered {:>4}  failed {:>4}{}",
                tally.delivered,
                tally.failed,
                if tally.breaker_open {
                    "  breaker open"
                } else {
                    ""
                }
            ));
        }
        text
    }
}

/// Where the output goes; a reader that went away ends the watch.
struct Output;

impl Output {
    /// Writes the lines; `Ok(false)` once stdout is closed.
    fn write(lines: &[String]) -> Result<bool, AdminError> {
        if lines.is_empty() {
            return Ok(true);
        }
        let mut text = lines.join("\n");
        text.push('\n');
        let mut out = std::io::stdout().lock();
        match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
            Ok(()) => Ok(true),
            Err(err) if err.kind() == ErrorKind::BrokenPipe => Ok(false),
            Err(err) => Err(AdminError::Output(err)),
        }
    }
}

/// Parses bytes as they come and prints what they complete.
struct Session {
    parser: Parser,
    view: View,
    /// Whether a stream was opened: a refusal gets no summary.
    opened: bool,
}

impl Session {
    /// `Ok(Step::Done)` when the watch should stop (count reached or
    /// stdout closed).
    fn feed(&mut self, bytes: &[u8]) -> Result<Step, AdminError> {
        let mut lines = Vec::new();
        let mut step = Step::More;
        for message in self.parser.feed(bytes) {
            if self.view.on_message(&message, &mut lines) == Step::Done {
                step = Step::Done;
                break;
            }
        }
        if !Output::write(&lines)? {
            return Ok(Step::Done);
        }
        Ok(step)
    }

    fn finish(&self) -> Result<(), AdminError> {
        if !self.opened {
            return Ok(());
        }
        Output::write(&[self.view.summary(true)]).map(|_| ())
    }
}

/// Runs until the stream ends, `--count` is reached, stdout closes or
/// Ctrl-C; prints the final summary then.
pub async fn run(options: WatchOptions) -> Result<u8, AdminError> {
    let mut session = Session {
        parser: Parser::new(),
        view: View::new(options.view.clone()),
        opened: false,
    };
    let outcome = match &options.source {
        Source::File(path) => {
            let bytes = std::fs::read(path)
                .map_err(|e| AdminError::Usage(format!("cannot read {}: {e}", path.display())))?;
            session.opened = true;
            session.feed(&bytes).map(|_| ())
        }
        Source::Url(url) => {
            let interrupted = tokio::signal::ctrl_c();
            tokio::select! {
                outcome = follow(url, options.token.as_deref(), &mut session) => outcome,
                _ = interrupted => Ok(()),
            }
        }
    };
    // The summary also when an opened stream broke: it is what was seen.
    session.finish()?;
    outcome.map(|()| crate::error::exit::OK)
}

/// Connects and feeds the stream to `session` until it ends.
async fn follow(
    url: &StreamUrl,
    token: Option<&str>,
    session: &mut Session,
) -> Result<(), AdminError> {
    let events_url = url.events_url();
    let fail = |reason: String| AdminError::Stream {
        url: events_url.clone(),
        reason,
    };
    let response = match get_from_daemon(url, EVENTS_PATH, Some("text/event-stream"), token).await {
        Ok(response) => response,
        Err(DaemonGetError::Request(why)) => return Err(AdminError::Usage(why)),
        Err(DaemonGetError::Failed(why)) => return Err(fail(why)),
    };
    let status = response.status();
    let mut body = response.into_body();
    if status != StatusCode::OK {
        let mut text = Vec::new();
        while text.len() < ERROR_BODY_LIMIT {
            match tokio::time::timeout(CONNECT_TIMEOUT, body.frame()).await {
                Ok(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        text.extend_from_slice(&data);
                    }
                }
                _ => break,
            }
        }
        return Err(fail(refusal(status, &text)));
    }
    session.opened = true;
    loop {
        let frame = tokio::time::timeout(IDLE_TIMEOUT, body.frame())
            .await
            .map_err(|_| {
                fail(format!(
                    "nothing received for {IDLE_TIMEOUT:?} (the daemon sends a keep-alive every 15 s)"
                ))
            })?;
        match frame {
            None => return Ok(()),
            Some(Err(e)) => return Err(fail(format!("the stream broke off: {e}"))),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    if session.feed(&data)? == Step::Done {
                        return Ok(());
                    }
                }
            }
        }
    }
}

/// Why a GET to the daemon got no response.
#[derive(Debug)]
pub(crate) enum DaemonGetError {
    /// The request could not be built (a token that is not a header value).
    Request(String),
    /// No connection, no HTTP, or no answer within [`CONNECT_TIMEOUT`].
    Failed(String),
}

impl DaemonGetError {
    /// The reason, in words for one line.
    pub(crate) fn into_reason(self) -> String {
        match self {
            Self::Request(why) | Self::Failed(why) => why,
        }
    }
}

/// Connects to `url`'s daemon and sends one `GET path` (with `accept`, and
/// the service token when set): the response head, its body still to
/// read. Connecting and the answer are each bounded by
/// [`CONNECT_TIMEOUT`]. `watch` and [`crate::daemon_api`] both ask this
/// way.
pub(crate) async fn get_from_daemon(
    url: &StreamUrl,
    path: &str,
    accept: Option<&'static str>,
    token: Option<&str>,
) -> Result<http::Response<hyper::body::Incoming>, DaemonGetError> {
    let failed = DaemonGetError::Failed;
    let tcp = tokio::time::timeout(
        CONNECT_TIMEOUT,
        TcpStream::connect((url.host.as_str(), url.port)),
    )
    .await
    .map_err(|_| failed(format!("no connection within {CONNECT_TIMEOUT:?}")))?
    .map_err(|e| failed(format!("cannot connect: {e}")))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(|e| failed(format!("HTTP handshake: {e}")))?;
    // Driven beside the body; it ends with the connection.
    tokio::spawn(connection);
    let mut request = Request::get(format!("{}{path}", url.prefix))
        .header(header::HOST, &url.authority)
        .header(
            header::USER_AGENT,
            concat!("webhook-admin/", env!("CARGO_PKG_VERSION")),
        );
    if let Some(accept) = accept {
        request = request.header(header::ACCEPT, accept);
    }
    if let Some(token) = token.filter(|t| !t.is_empty()) {
        request = request.header("x-service-token", token);
    }
    let request = request.body(Empty::<Bytes>::new()).map_err(|e| {
        DaemonGetError::Request(format!(
            "cannot build the request (is GORGE_SERVICE_TOKEN printable?): {e}"
        ))
    })?;
    tokio::time::timeout(CONNECT_TIMEOUT, sender.send_request(request))
        .await
        .map_err(|_| failed(format!("no answer within {CONNECT_TIMEOUT:?}")))?
        .map_err(|e| failed(format!("request failed: {e}")))
}

/// A cURL number stored as an `http` `errorCode` in words, with the
/// number: `connection refused or unreachable (7)`; `None` for an HTTP
/// status.
fn curl_words(code: Option<i64>) -> Option<String> {
    TransportFailure::from_curl_code(code?).map(|failure| failure.to_string())
}

/// Why the daemon refused, from its error envelope when it sent one.
fn refusal(status: StatusCode, body: &[u8]) -> String {
    let envelope: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let error = &envelope["error"];
    let mut reason = match (error["code"].as_str(), error["message"].as_str()) {
        (Some(code), Some(message)) => format!("answered {} {code}: {message}", status.as_u16()),
        _ => format!("answered {}", status.as_u16()),
    };
    match status {
        StatusCode::UNAUTHORIZED => {
            reason.push_str(" (set GORGE_SERVICE_TOKEN to the daemon's service token)");
        }
        StatusCode::NOT_FOUND => {
            reason.push_str(" (is that a webhook-daemon with the live event stream?)");
        }
        _ => {}
    }
    reason
}

#[cfg(test)]
mod tests {
    use super::*;

    const STREAM: &str = "\
: connected

event: claim_won
id: 1
data: {\"type\":\"claim_won\",\"at\":1700000000,\"request\":\"PHID-HWBR-1\",\"hook\":\"PHID-HWBH-a\"}

event: delivered
id: 2
data: {\"type\":\"delivered\",\"at\":1700000000,\"request\":\"PHID-HWBR-1\",\"hook\":\"PHID-HWBH-a\",\"status\":200,\"latencyMs\":12}

: keep-alive

event: attempt_failed
id: 3
data: {\"type\":\"attempt_failed\",\"at\":1700000001,\"request\":\"PHID-HWBR-2\",\"hook\":\"PHID-HWBH-b\",\"errorType\":\"http\",\"errorCode\":500,\"willRetry\":true,\"latencyMs\":7}

event: dropped
data: {\"type\":\"dropped\",\"dropped\":5}

event: breaker_opened
id: 9
data: {\"type\":\"breaker_opened\",\"at\":1700000002,\"request\":null,\"hook\":\"PHID-HWBH-b\",\"failures\":3,\"threshold\":3}

event: silent_hold
id: 10
data: {\"type\":\"silent_hold\",\"at\":1700000003,\"request\":null,\"hook\":null,\"held\":true}

";

    fn render(options: ViewOptions) -> (Vec<String>, String) {
        let mut view = View::new(options);
        let mut out = Vec::new();
        for message in Parser::new().feed(STREAM.as_bytes()) {
            if view.on_message(&message, &mut out) == Step::Done {
                break;
            }
        }
        (out, view.summary(true))
    }

    #[test]
    fn a_curl_number_is_named_in_words() {
        let view = View::new(ViewOptions::default());
        let event = json!({"type": "attempt_failed", "at": 1_700_000_001, "request": "R",
                           "hook": "H", "errorType": "http", "errorCode": 7,
                           "willRetry": false, "latencyMs": 3});
        let line = view.line("attempt_failed", &event, "");
        assert!(
            line.ends_with("http connection refused or unreachable (7) after 3 ms; row failed"),
            "{line}"
        );
    }

    #[test]
    fn one_line_per_event_and_a_summary() {
        let (lines, summary) = render(ViewOptions::default());
        assert_eq!(
            lines,
            [
                "22:13:20  claim_won      PHID-HWBR-1                    PHID-HWBH-a                    claimed",
                "22:13:20  delivered      PHID-HWBR-1                    PHID-HWBH-a                    200 in 12 ms",
                "22:13:21  attempt_failed PHID-HWBR-2                    PHID-HWBH-b                    http 500 after 7 ms; stays queued for a retry",
                "!! 5 events dropped: this watcher fell behind the daemon",
                "22:13:22  breaker_opened -                              PHID-HWBH-b                    breaker open: 3 failed rows, threshold 3",
                "22:13:23  silent_hold    -                              -                              Phorge is in silent mode: delivery held",
            ]
        );
        assert_eq!(
            summary,
            "-- final summary, 5 events: delivered 1, failed 1, dropped 5; in backoff: PHID-HWBH-b\n   \
             PHID-HWBH-a                     delivered    1  failed    0\n   \
             PHID-HWBH-b                     delivered    0  failed    1  breaker open"
        );
    }

    #[test]
    fn a_hook_paused_by_retry_after_says_until_when() {
        let stream =
            "event: hook_paused\nid: 4\ndata: {\"type\":\"hook_paused\",\"at\":1700000000,\
            \"request\":\"PHID-HWBR-1\",\"hook\":\"PHID-HWBH-a\",\"status\":429,\"seconds\":5,\
            \"until\":1700000005}\n\n";
        let mut view = View::new(ViewOptions::default());
        let mut out = Vec::new();
        for message in Parser::new().feed(stream.as_bytes()) {
            view.on_message(&message, &mut out);
        }
        assert_eq!(
            out,
            ["22:13:20  hook_paused    PHID-HWBR-1                    PHID-HWBH-a                    \
              paused: answered 429 with Retry-After; not called for 5 s, until 2023-11-14 22:13:25 UTC"]
        );
    }

    #[test]
    fn filters_summaries_and_count() {
        let (lines, _) = render(ViewOptions {
            failures_only: true,
            ..ViewOptions::default()
        });
        assert_eq!(lines.len(), 4, "{lines:#?}");
        assert!(lines[0].contains("attempt_failed"));
        let (lines, summary) = render(ViewOptions {
            hook: Some("PHID-HWBH-a".into()),
            ..ViewOptions::default()
        });
        // Hook a's two events, the drop, and the hold (about every hook).
        assert_eq!(lines.len(), 4, "{lines:#?}");
        assert!(!summary.contains("PHID-HWBH-b"), "{summary}");
        let (lines, _) = render(ViewOptions {
            summary_every: 2,
            count: Some(3),
            ..ViewOptions::default()
        });
        assert_eq!(lines.len(), 4, "{lines:#?}");
        assert!(lines[2].starts_with("-- summary after 2 events: delivered 1"));
        assert!(lines[3].contains("attempt_failed"));
    }

    #[test]
    fn json_is_passed_through_with_json_summaries() {
        let (lines, summary) = render(ViewOptions {
            json: true,
            ..ViewOptions::default()
        });
        assert_eq!(lines.len(), 6);
        assert!(lines[1].starts_with("{\"type\":\"delivered\""));
        let summary: Value = serde_json::from_str(&summary).expect("JSON summary");
        assert_eq!(summary["inBackoff"], json!(["PHID-HWBH-b"]));
        assert_eq!(summary["hooks"]["PHID-HWBH-a"]["delivered"], 1);
        assert_eq!(summary["final"], true);
    }

    #[test]
    fn colour_only_when_asked() {
        let (lines, _) = render(ViewOptions {
            colour: true,
            ..ViewOptions::default()
        });
        assert!(lines[1].starts_with("\x1b[32m22:13:20  delivered"));
        assert!(lines[1].ends_with("\x1b[0m"));
        let (plain, _) = render(ViewOptions::default());
        assert!(plain.iter().all(|l| !l.contains('\x1b')));
    }

    #[test]
    fn urls_and_the_default_from_the_listen_address() {
        let url = StreamUrl::parse("http://127.0.0.1:8160/").expect("valid");
        assert_eq!(url.events_url(), "http://127.0.0.1:8160/api/webhook/events");
        let proxied = StreamUrl::parse("http://[::1]:9000/gorge").expect("valid");
        assert_eq!((proxied.host.as_str(), proxied.port), ("::1", 9000));
        assert_eq!(
            proxied.events_url(),
            "http://[::1]:9000/gorge/api/webhook/events"
        );
        for bad in ["https://x:1", "127.0.0.1:8160", "http://x:1/?token=a", "::"] {
            assert!(StreamUrl::parse(bad).is_err(), "{bad}");
        }
        let from = |listen| {
            StreamUrl::from_listen_addr(listen)
                .expect("valid")
                .events_url()
        };
        assert_eq!(from(None), "http://127.0.0.1:8160/api/webhook/events");
        assert_eq!(
            from(Some(":9001")),
            "http://127.0.0.1:9001/api/webhook/events"
        );
        assert_eq!(
            from(Some("0.0.0.0:9002")),
            "http://127.0.0.1:9002/api/webhook/events"
        );
        assert_eq!(
            from(Some("[::]:9003")),
            "http://127.0.0.1:9003/api/webhook/events"
        );
        assert_eq!(
            from(Some("10.0.0.5:9004")),
            "http://10.0.0.5:9004/api/webhook/events"
        );
        let err = StreamUrl::from_listen_addr(Some("nonsense")).expect_err("invalid");
        assert!(err.to_string().starts_with("GORGE_LISTEN_ADDR"), "{err}");
    }

    #[test]
    fn refusals_quote_the_envelope() {
        let body = br#"{"error":{"code":"ERR_UNAUTHORIZED","message":"missing or invalid service token"}}"#;
        assert_eq!(
            refusal(StatusCode::UNAUTHORIZED, body),
            "answered 401 ERR_UNAUTHORIZED: missing or invalid service token \
             (set GORGE_SERVICE_TOKEN to the daemon's service token)"
        );
        assert_eq!(refusal(StatusCode::BAD_GATEWAY, b"<html>"), "answered 502");
    }
}
