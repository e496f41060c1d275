//! A recording webhook receiver on loopback: keeps every request's raw
//! bytes and headers, answers each path as scripted (status, delay), and
//! tracks how many requests per path were in flight at once.
//!
//! Test code: it panics with a clear message when it cannot listen.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::Notify;

/// How a path answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Wait this long before answering.
    pub delay: Duration,
}

impl Reply {
    /// An immediate answer with `status`.
    pub fn status(status: u16) -> Self {
        Self {
            status,
            delay: Duration::ZERO,
        }
    }

    /// The same answer after `delay`.
    pub fn after(self, delay: Duration) -> Self {
        Self { delay, ..self }
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
    /// When the request head arrived, from the receiver's start.
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

#[derive(Default)]
struct State {
    requests: Vec<Recorded>,
    scripts: HashMap<String, VecDeque<Reply>>,
    defaults: HashMap<String, Reply>,
    active: HashMap<String, usize>,
    max_active: HashMap<String, usize>,
}

/// A running receiver; stops when dropped.
#[derive(Clone)]
pub struct Receiver {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    arrived: Arc<Notify>,
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
    /// Listens on 127.0.0.1 on a free port.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("receiver: bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("receiver: local address");
        let state = Arc::new(Mutex::new(State::default()));
        let arrived = Arc::new(Notify::new());
        let started = Instant::now();
        let task = tokio::spawn(accept_loop(
            listener,
            Arc::clone(&state),
            Arc::clone(&arrived),
            started,
        ));
        Self {
            addr,
            state,
            arrived,
            task: Arc::new(task),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Every later request to `path` gets `reply` (after scripted ones).
    pub fn always(&self, path: &str, reply: Reply) {
        self.lock().defaults.insert(path.to_owned(), reply);
    }

    /// The next requests to `path` get these replies, in order.
    pub fn script(&self, path: &str, replies: impl IntoIterator<Item = Reply>) {
        self.lock()
            .scripts
            .entry(path.to_owned())
            .or_default()
            .extend(replies);
    }

    /// Everything received so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.lock().requests.clone()
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
    state: Arc<Mutex<State>>,
    arrived: Arc<Notify>,
    started: Instant,
) {
    let builder = auto::Builder::new(TokioExecutor::new());
    while let Ok((stream, _)) = listener.accept().await {
        let state = Arc::clone(&state);
        let arrived = Arc::clone(&arrived);
        let service = service_fn(move |request| {
            let state = Arc::clone(&state);
            let arrived = Arc::clone(&arrived);
            async move {
                Ok::<_, std::convert::Infallible>(answer(request, &state, &arrived, started).await)
            }
        });
        let connection = builder
            .serve_connection(TokioIo::new(stream), service)
            .into_owned();
        tokio::spawn(connection);
    }
}

async fn answer(
    request: Request<Incoming>,
    state: &Mutex<State>,
    arrived: &Notify,
    started: Instant,
) -> Response<Full<Bytes>> {
    let at = started.elapsed();
    let method = request.method().to_string();
    let path = request.uri().path().to_owned();
    let headers = request
        .headers()
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let reply = {
        let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
        let active = s.active.entry(path.clone()).or_default();
        *active += 1;
        let now_active = *active;
        let max = s.max_active.entry(path.clone()).or_default();
        *max = (*max).max(now_active);
        s.scripts
            .get_mut(&path)
            .and_then(VecDeque::pop_front)
            .or_else(|| s.defaults.get(&path).copied())
            .unwrap_or(Reply::status(200))
    };
    let body = request
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    {
        let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
        s.requests.push(Recorded {
            method,
            path: path.clone(),
            headers,
            body,
            at,
        });
    }
    arrived.notify_waiters();
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    {
        let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(active) = s.active.get_mut(&path) {
            *active -= 1;
        }
    }
    let mut response = Response::new(Full::new(Bytes::from_static(b"ok\n")));
    *response.status_mut() = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK);
    response
}
