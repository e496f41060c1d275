//! The webhook receiver on loopback, in one of two modes over the same
//! accept loop and answer: *recording* ([`Receiver::start`], the tests')
//! keeps every request's raw bytes and headers and when and how it was
//! answered; *counting* ([`Receiver::counting`], the bench's) keeps only
//! the per-object receipts ([`crate::receipts`]), which both modes count.
//! Either way each path answers as scripted (a queue of replies, a fixed
//! reply, or a reply computed from the request), and the receiver tracks
//! how many requests per path were in flight at once.
//!
//! Test code: it panics with a clear message when it cannot listen.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{LOCATION, RETRY_AFTER};
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::Notify;

use crate::receipts::{Receipt, Receipts};

/// How a path answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Wait this long before answering.
    pub delay: Duration,
    /// A `Retry-After` header to send with it.
    pub retry_after: Option<&'static str>,
    /// A `Location` header to send with it (a redirect).
    pub location: Option<&'static str>,
}

impl Reply {
    /// An immediate answer with `status`.
    pub fn status(status: u16) -> Self {
        Self {
            status,
            delay: Duration::ZERO,
            retry_after: None,
            location: None,
        }
    }

    /// A redirect: `status` with `Location: location`.
    pub fn redirect(status: u16, location: &'static str) -> Self {
        Self {
            location: Some(location),
            ..Self::status(status)
        }
    }

    /// The same answer after `delay`.
    pub fn after(self, delay: Duration) -> Self {
        Self { delay, ..self }
    }

    /// The same answer with a `Retry-After: value` header.
    pub fn with_retry_after(self, value: &'static str) -> Self {
        Self {
            retry_after: Some(value),
            ..self
        }
    }
}

/// One request as received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Method.
    pub method: String,
    /// Path (without query).
    pub path: String,
    /// Headers, lower-case names, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The raw body.
    pub body: Bytes,
    /// When the request head arrived, on the receiver's clock
    /// ([`Receiver::now`]).
    pub at: Duration,
    /// The answer, once the receiver handed it to the connection. `None`
    /// while the request is still being answered, and for good when the
    /// client went away first.
    pub replied: Option<Replied>,
}

/// How and when a request was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replied {
    /// The status sent.
    pub status: u16,
    /// When, on the receiver's clock.
    pub at: Duration,
}

impl Recorded {
    /// The first header with this (lower-case) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A reply computed from the request as received (its `replied` is still
/// `None`).
type ReplyFn = Arc<dyn Fn(&Recorded) -> Reply + Send + Sync>;

/// What a path answers once its scripted replies are used up.
#[derive(Clone)]
enum Rule {
    Fixed(Reply),
    Computed(ReplyFn),
}

#[derive(Default)]
struct State {
    requests: Vec<Recorded>,
    scripts: HashMap<String, VecDeque<Reply>>,
    rules: HashMap<String, Rule>,
    active: HashMap<String, usize>,
    max_active: HashMap<String, usize>,
}

type Shared = Arc<Mutex<State>>;

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the accept loop and every answer share.
#[derive(Clone)]
struct Serving {
    state: Shared,
    receipts: Arc<Receipts>,
    arrived: Arc<Notify>,
    started: Instant,
    /// Keep every request (recording mode), or only count receipts.
    record: bool,
}

/// A running receiver; stops when dropped.
#[derive(Clone)]
pub struct Receiver {
    addr: SocketAddr,
    state: Shared,
    receipts: Arc<Receipts>,
    arrived: Arc<Notify>,
    started: Instant,
    task: Arc<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for Receiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver")
            .field("addr", &self.addr)
            .finish()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if Arc::strong_count(&self.task) == 1 {
            self.task.abort();
        }
    }
}

impl Receiver {
    /// A recording receiver on 127.0.0.1 on a free port.
    pub async fn start() -> Self {
        Self::listen(true).await
    }

    /// A counting receiver on 127.0.0.1 on a free port: requests are
    /// answered as scripted and counted as [`receipts`](Self::receipts),
    /// never kept ([`requests`](Self::requests) stays empty).
    pub async fn counting() -> Self {
        Self::listen(false).await
    }

    /// A recording receiver behind TLS on `ip` (a loopback address) on a
    /// free port, its certificate for that address signed by a test CA;
    /// with the CA's PEM, for `GORGE_WEBHOOK_CA_FILE`.
    pub async fn start_https(ip: std::net::IpAddr) -> (Self, String) {
        let pki = crate::tls::test_pki_for_ip(ip);
        let tls = tokio_rustls::TlsAcceptor::from(pki.server);
        let receiver = Self::listen_on(ip, true, Some(tls)).await;
        (receiver, pki.ca_pem)
    }

    async fn listen(record: bool) -> Self {
        Self::listen_on(std::net::Ipv4Addr::LOCALHOST.into(), record, None).await
    }

    async fn listen_on(
        ip: std::net::IpAddr,
        record: bool,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> Self {
        let listener = TcpListener::bind((ip, 0))
            .await
            .unwrap_or_else(|e| panic!("receiver: bind {ip}:0: {e}"));
        let addr = listener.local_addr().expect("receiver: local address");
        let serving = Serving {
            state: Arc::default(),
            receipts: Arc::default(),
            arrived: Arc::new(Notify::new()),
            started: Instant::now(),
            record,
        };
        let task = tokio::spawn(accept_loop(listener, serving.clone(), tls));
        Self {
            addr,
            state: serving.state,
            receipts: serving.receipts,
            arrived: serving.arrived,
            started: serving.started,
            task: Arc::new(task),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// `https://<ip>:<port><path>`, for a receiver started with
    /// [`Self::start_https`].
    pub fn https_url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr)
    }

    /// The receiver's clock: time since it started, the scale of
    /// [`Recorded::at`] and [`Replied::at`].
    pub fn now(&self) -> Duration {
        self.started.elapsed()
    }

    /// Every later request to `path` gets `reply` (after scripted ones).
    /// Replaces a [`reply_with`](Self::reply_with) function for that path.
    pub fn always(&self, path: &str, reply: Reply) {
        self.lock()
            .rules
            .insert(path.to_owned(), Rule::Fixed(reply));
    }

    /// Every later request to `path` (after scripted ones) gets what `reply`
    /// computes from it: per-request statuses and delays, e.g. seeded random
    /// failures and latency. Replaces an [`always`](Self::always) reply for
    /// that path. `reply` runs outside the receiver's lock, once per request.
    pub fn reply_with(
        &self,
        path: &str,
        reply: impl Fn(&Recorded) -> Reply + Send + Sync + 'static,
    ) {
        self.lock()
            .rules
            .insert(path.to_owned(), Rule::Computed(Arc::new(reply)));
    }

    /// The next requests to `path` get these replies, in order.
    pub fn script(&self, path: &str, replies: impl IntoIterator<Item = Reply>) {
        self.lock()
            .scripts
            .entry(path.to_owned())
            .or_default()
            .extend(replies);
    }

    /// Everything received so far, in arrival order, with the answers given
    /// so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.lock().requests.clone()
    }

    /// Receipts per object PHID so far.
    pub fn receipts(&self) -> HashMap<String, Receipt> {
        self.receipts.snapshot()
    }

    /// First receipts of the objects `keep` selects, in time order.
    pub fn first_receipts(&self, keep: impl Fn(&str) -> bool) -> Vec<Instant> {
        self.receipts.first_receipts(keep)
    }

    /// How many distinct objects arrived so far.
    pub fn distinct_objects(&self) -> u64 {
        self.receipts.distinct()
    }

    /// How many requests carried no object PHID.
    pub fn without_object(&self) -> u64 {
        self.receipts.unparsed()
    }

    /// Most requests to `path` in flight at once.
    pub fn max_concurrent(&self, path: &str) -> usize {
        self.lock().max_active.get(path).copied().unwrap_or(0)
    }

    /// Waits until at least `n` requests arrived, or `deadline` passed;
    /// returns what arrived either way.
    pub async fn wait_for(&self, n: usize, deadline: Duration) -> Vec<Recorded> {
        let until = tokio::time::Instant::now() + deadline;
        loop {
            let notified = self.arrived.notified();
            let seen = self.requests();
            if seen.len() >= n {
                return seen;
            }
            if tokio::time::timeout_at(until, notified).await.is_err() {
                return self.requests();
            }
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    serving: Serving,
    tls: Option<tokio_rustls::TlsAcceptor>,
) {
    let builder = auto::Builder::new(TokioExecutor::new());
    loop {
        // An accept error (out of descriptors) passes; the listener stays.
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let serving = serving.clone();
        let service = service_fn(move |request| {
            let serving = serving.clone();
            async move { Ok::<_, std::convert::Infallible>(answer(request, serving).await) }
        });
        match &tls {
            None => {
                let connection = builder
                    .serve_connection(TokioIo::new(stream), service)
                    .into_owned();
                tokio::spawn(connection);
            }
            Some(acceptor) => {
                let accepting = acceptor.accept(stream);
                let builder = builder.clone();
                tokio::spawn(async move {
                    if let Ok(stream) = accepting.await {
                        let _ = builder
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    }
                });
            }
        }
    }
}

/// Counts a request to a path as in flight until dropped, so a request
/// whose client went away (and whose handler hyper dropped) is counted out
/// too.
struct Active {
    state: Shared,
    path: String,
}

impl Active {
    fn enter(state: &Shared, path: String) -> Self {
        let mut s = lock(state);
        let now_active = match s.active.get_mut(&path) {
            Some(active) => {
                *active += 1;
                *active
            }
            None => {
                s.active.insert(path.clone(), 1);
                1
            }
        };
        match s.max_active.get_mut(&path) {
            Some(max) => *max = (*max).max(now_active),
            None => {
                s.max_active.insert(path.clone(), now_active);
            }
        }
        Self {
            state: Arc::clone(state),
            path,
        }
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        if let Some(active) = lock(&self.state).active.get_mut(&self.path) {
            *active = active.saturating_sub(1);
        }
    }
}

/// The request as recorded: method, path, headers (names lower-case, in
/// arrival order), body, arrival on the receiver's clock.
fn recorded(head: &http::request::Parts, path: &str, body: &Bytes, at: Duration) -> Recorded {
    let headers = head
        .headers
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    Recorded {
        method: head.method.to_string(),
        path: path.to_owned(),
        headers,
        body: body.clone(),
        at,
        replied: None,
    }
}

/// The path's next scripted reply, else its rule's (a computed one from
/// the request as `recorded` gives it), else 200 at once.
fn reply_for(state: &Shared, path: &str, recorded: impl FnOnce() -> Recorded) -> Reply {
    let (scripted, rule) = {
        let mut s = lock(state);
        let scripted = s.scripts.get_mut(path).and_then(VecDeque::pop_front);
        (scripted, s.rules.get(path).cloned())
    };
    match (scripted, rule) {
        (Some(reply), _) | (None, Some(Rule::Fixed(reply))) => reply,
        (None, Some(Rule::Computed(compute))) => compute(&recorded()),
        (None, None) => Reply::status(200),
    }
}

async fn answer(request: Request<Incoming>, serving: Serving) -> Response<Full<Bytes>> {
    let arrived_at = Instant::now();
    let Serving {
        state,
        receipts,
        arrived,
        started,
        record,
    } = serving;
    let at = arrived_at.duration_since(started);
    let (head, body) = request.into_parts();
    let active = Active::enter(&state, head.uri.path().to_owned());
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    receipts.count(&body, arrived_at);
    // Counting mode copies the request only for a reply computed from it.
    let path = active.path.as_str();
    let reply = reply_for(&state, path, || recorded(&head, path, &body, at));
    let index = record.then(|| {
        let mut s = lock(&state);
        s.requests.push(recorded(&head, path, &body, at));
        s.requests.len() - 1
    });
    arrived.notify_waiters();
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    if let Some(index) = index {
        if let Some(recorded) = lock(&state).requests.get_mut(index) {
            recorded.replied = Some(Replied {
                status: reply.status,
                at: started.elapsed(),
            });
        }
    }
    let mut response = Response::new(Full::new(Bytes::from_static(b"ok\n")));
    *response.status_mut() = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK);
    if let Some(value) = reply.retry_after {
        response
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from_static(value));
    }
    if let Some(value) = reply.location {
        response
            .headers_mut()
            .insert(LOCATION, HeaderValue::from_static(value));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    /// Sends one POST on a fresh connection and returns the status line.
    async fn post(receiver: &Receiver, path: &str, body: &str) -> String {
        let mut stream = TcpStream::connect(receiver.addr()).await.expect("connect");
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.expect("write");
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.expect("read");
        String::from_utf8_lossy(&raw)
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned()
    }

    #[tokio::test]
    async fn computed_replies_are_recorded_with_their_answer() {
        let receiver = Receiver::start().await;
        receiver.reply_with("/p", |request| {
            let status = if request.body.as_ref() == b"fail" {
                503
            } else {
                201
            };
            Reply::status(status).after(Duration::from_millis(30))
        });
        receiver.script("/p", [Reply::status(418)]);
        assert!(post(&receiver, "/p", "ok").await.contains(" 418 "));
        assert!(post(&receiver, "/p", "fail").await.contains(" 503 "));
        assert!(post(&receiver, "/p", "ok").await.contains(" 201 "));
        let got = receiver.requests();
        let statuses: Vec<u16> = got
            .iter()
            .map(|r| r.replied.expect("answered").status)
            .collect();
        assert_eq!(statuses, vec![418, 503, 201]);
        let computed = got[1].replied.expect("answered");
        assert!(computed.at >= got[1].at + Duration::from_millis(30));
        assert!(receiver.now() >= computed.at);
        // `always` replaces the function.
        receiver.always("/p", Reply::status(204));
        assert!(post(&receiver, "/p", "fail").await.contains(" 204 "));
    }

    #[tokio::test]
    async fn a_client_that_goes_away_is_counted_out_and_stays_unanswered() {
        let receiver = Receiver::start().await;
        receiver.script("/slow", [Reply::status(200).after(Duration::from_secs(30))]);
        let mut stream = TcpStream::connect(receiver.addr()).await.expect("connect");
        stream
            .write_all(b"POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
            .await
            .expect("write");
        let arrived = receiver.wait_for(1, Duration::from_secs(10)).await;
        assert_eq!(arrived.len(), 1);
        drop(stream);
        // The next request finds nothing else in flight on the path.
        let until = Instant::now() + Duration::from_secs(10);
        while lock(&receiver.state).active.get("/slow").copied() != Some(0) {
            assert!(
                Instant::now() < until,
                "the abandoned request is still counted"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(post(&receiver, "/slow", "").await.contains(" 200 "));
        assert_eq!(receiver.max_concurrent("/slow"), 1);
        assert_eq!(receiver.requests()[0].replied, None);
    }
}
