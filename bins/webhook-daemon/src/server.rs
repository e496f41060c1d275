//! The diagnostics listener: accepts connections, hands each request to
//! [`Api`], and drains open connections on shutdown. Whole replies and the
//! event stream share one boxed body type; the stream's body is polled only
//! as fast as the client reads, which is what makes a slow client lose
//! events instead of slowing anything down.
//!
//! The listener must not let its clients take the process's file
//! descriptors (deliveries need them) nor stop `/healthz` from answering:
//! at most [`MAX_CONNECTIONS`] are open at once, a connection that is not
//! answering a request is closed after [`IDLE_TIMEOUT`] (this bounds a
//! request head sent slowly, a client that sends nothing, and keep-alive),
//! and at the cap a new connection displaces the connection idle the
//! longest: half-open connections cannot keep a health check out.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http::header::{ALLOW, CACHE_CONTROL, CONTENT_TYPE};
use http::{HeaderValue, Method, Request, Response};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::api::{Answer, Api, Reply, EVENT_STREAM};
use crate::live::Subscription;

/// Every response's body: whole, or streamed.
type Body = UnsyncBoxBody<Bytes, Infallible>;

/// How long open diagnostics connections may take to finish on shutdown.
const DRAIN: Duration = Duration::from_secs(5);

/// At most this many diagnostics connections are open at once. Monitoring
/// needs a handful (health checks, a scraper, a few event streams); the
/// bound keeps a flood of connections from using up the descriptors that
/// deliveries and the database pool need (a quarter of the common soft
/// limit of 1,024).
pub const MAX_CONNECTIONS: usize = 256;

/// A connection that is not answering a request is closed after this long:
/// from its accept until a complete request head (hyper's header-read
/// timeout, and our own bound for the bytes before hyper sees any, where
/// HTTP/1 and HTTP/2 are told apart), and between requests on a kept-alive
/// connection. Checked again at most this long later while a request is
/// answered, so an idle connection closes after 5 to 10 s.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves `api` on `listener` until `shutdown` completes.
pub async fn serve(listener: TcpListener, api: Arc<Api>, shutdown: impl Future<Output = ()>) {
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(IDLE_TIMEOUT);
    builder.http2().timer(TokioTimer::new());
    let connections = Arc::new(Connections::default());
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let Some(admitted) = connections.admit() else {
                        // Every open connection is answering a request.
                        debug!(event = "api_connection_refused", open = MAX_CONNECTIONS);
                        drop(stream);
                        continue;
                    };
                    let api = Arc::clone(&api);
                    let slot = Arc::clone(&admitted.slot);
                    let service = service_fn(move |request| {
                        let api = Arc::clone(&api);
                        // Taken when hyper has the request head, so the
                        // connection counts as busy from then on.
                        let busy = slot.begin();
                        async move { Ok::<_, Infallible>(answer(&api, request, busy).await) }
                    });
                    let connection = builder
                        .serve_connection(TokioIo::new(stream), service)
                        .into_owned();
                    let connection = graceful.watch(connection);
                    tokio::spawn(run_connection(connection, admitted));
                }
                Err(err) => {
                    // Usually descriptor exhaustion: back off instead of spinning.
                    warn!(event = "api_accept_failed", error = %err);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, graceful.shutdown())
        .await
        .is_err()
    {
        debug!(event = "api_drain_timeout");
    }
}

/// Drives one connection until it ends, is displaced at the cap, or has
/// been idle for [`IDLE_TIMEOUT`]; then gives its place back.
async fn run_connection<C, E>(connection: C, admitted: Admitted)
where
    C: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let mut connection = std::pin::pin!(connection);
    loop {
        let deadline = admitted.slot.idle_deadline();
        tokio::select! {
            result = &mut connection => {
                if let Err(err) = result {
                    debug!(event = "api_connection_error", error = %err);
                }
                break;
            }
            () = admitted.slot.close.notified() => {
                debug!(event = "api_connection_displaced", open = MAX_CONNECTIONS);
                break;
            }
            () = tokio::time::sleep_until(deadline) => {
                if admitted.slot.idle_for() >= Some(IDLE_TIMEOUT) {
                    debug!(event = "api_connection_idle_closed");
                    break;
                }
            }
        }
    }
    // Dropping the connection closes its socket; `admitted` then frees the
    // place.
}

/// The open diagnostics connections, by accept order.
#[derive(Debug, Default)]
struct Connections {
    open: Mutex<BTreeMap<u64, Arc<Slot>>>,
    next_id: std::sync::atomic::AtomicU64,
}

impl Connections {
    /// A place for a new connection: free, or taken from the connection
    /// idle the longest (which is told to close), or none when every open
    /// connection is answering a request.
    fn admit(self: &Arc<Self>) -> Option<Admitted> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if open.len() >= MAX_CONNECTIONS {
            let victim = open
                .iter()
                .filter_map(|(id, slot)| slot.idle_for().map(|idle| (idle, *id)))
                .max()
                .map(|(_, id)| id)?;
            if let Some(slot) = open.remove(&victim) {
                slot.close.notify_one();
            }
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let slot = Arc::new(Slot::new());
        open.insert(id, Arc::clone(&slot));
        Some(Admitted {
            id,
            slot,
            connections: Arc::clone(self),
        })
    }
}

/// A connection's place among [`Connections`]; given back when dropped.
#[derive(Debug)]
struct Admitted {
    id: u64,
    slot: Arc<Slot>,
    connections: Arc<Connections>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.connections
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.id);
    }
}

/// What the listener knows of one connection.
#[derive(Debug)]
struct Slot {
    /// Requests being answered (an event stream until its body is dropped).
    busy: AtomicUsize,
    /// When the last request ended, or the accept.
    idle_since: Mutex<Instant>,
    /// Told when the connection is displaced at the cap.
    close: Notify,
}

impl Slot {
    fn new() -> Self {
        Self {
            busy: AtomicUsize::new(0),
            idle_since: Mutex::new(Instant::now()),
            close: Notify::new(),
        }
    }

    fn begin(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, Ordering::SeqCst);
        Busy(Arc::clone(self))
    }

    /// How long the connection has answered nothing; `None` while it is.
    fn idle_for(&self) -> Option<Duration> {
        if self.busy.load(Ordering::SeqCst) > 0 {
            return None;
        }
        let since = *self
            .idle_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Some(since.elapsed())
    }

    /// When to look at the connection's idleness again.
    fn idle_deadline(&self) -> Instant {
        if self.busy.load(Ordering::SeqCst) > 0 {
            return Instant::now() + IDLE_TIMEOUT;
        }
        *self
            .idle_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            + IDLE_TIMEOUT
    }
}

/// A request being answered on a connection; the connection is idle again
/// when the last one is dropped.
#[derive(Debug)]
struct Busy(Arc<Slot>);

impl Drop for Busy {
    fn drop(&mut self) {
        // The time is set before the count drops, so a connection never
        // looks idle since before its last request.
        *self
            .0
            .idle_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Instant::now();
        self.0.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn answer(api: &Api, request: Request<Incoming>, busy: Busy) -> Response<Body> {
    let head = request.method() == Method::HEAD;
    let uri = request.uri();
    match api
        .answer(request.method(), uri.path(), uri.query(), request.headers())
        .await
    {
        Answer::Whole(reply) => to_response(reply, head),
        Answer::Events(subscription) => event_stream(subscription, busy),
    }
}

/// `200 text/event-stream`, never cached, its body the subscription's
/// chunks until the hub closes or the client goes away. The connection
/// counts as busy for as long as the body lives.
fn event_stream(subscription: Subscription, busy: Busy) -> Response<Body> {
    let frames = subscription.into_stream().map(move |chunk| {
        let _busy = &busy;
        Ok::<_, Infallible>(Frame::data(chunk))
    });
    let mut response = Response::new(StreamBody::new(frames).boxed_unsync());
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(EVENT_STREAM));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Asks buffering reverse proxies (nginx) to pass events on at once.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

fn to_response(reply: Reply, head: bool) -> Response<Body> {
    let body = if head { Bytes::new() } else { reply.body };
    let mut response = Response::new(Full::new(body).boxed_unsync());
    *response.status_mut() = reply.status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        http::HeaderValue::from_static(reply.content_type),
    );
    if reply.content_type == EVENT_STREAM {
        // HEAD of the stream: the same head as GET's.
        response
            .headers_mut()
            .insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    }
    if let Some(allow) = reply.allow {
        response
            .headers_mut()
            .insert(ALLOW, http::HeaderValue::from_static(allow));
    }
    response
}
