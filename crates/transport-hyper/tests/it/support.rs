//! Loopback receivers and helpers shared by the integration tests: a
//! recording hyper server (plain or TLS), raw TCP servers that misbehave on
//! purpose or keep requests' bytes as sent, a fixed-table name lookup, and request builders;
//! the test CA is the shared fixtures'.
//! Every server binds 127.0.0.1 on an ephemeral port and stops when its
//! handle is dropped.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode, Version};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use webhook_core::signing::Signatures;
use webhook_core::{sign, DeliveryResult, OutboundRequest, Target, Transport};
pub use webhook_test_support::tls::{test_pki, TestPki};
use webhook_transport_hyper::{
    parse_cidr_list, HyperTransport, LookupError, NameLookup, TransportConfig,
};

/// The hook's HMAC key (32 characters of a-z2-7, as Phorge makes them).
pub const KEY: &[u8] = b"abcdefghijklmnopqrstuvwxyz234567";

/// A payload with non-ASCII escapes and the trailing newline that is part
/// of the signed bytes.
pub const PAYLOAD: &[u8] = b"{\n  \"object\": {\n    \"type\": \"TASK\",\n    \"phid\": \"PHID-TASK-a/b\\u00e9\"\n  }\n}\n";

/// A generous guard around calls that must end on their own.
pub const GUARD: Duration = Duration::from_secs(20);

/// A short delivery deadline for tests that expect a timeout.
pub const SHORT: Duration = Duration::from_millis(300);

/// What a receiver saw.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: Method,
    pub path: String,
    pub version: Version,
    pub headers: HeaderMap,
    pub body: Bytes,
}

pub type ResponseBody = BoxBody<Bytes, Infallible>;

/// A response with a fixed body.
pub fn respond(status: u16, body: &'static str) -> Response<ResponseBody> {
    let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())).boxed());
    *response.status_mut() = StatusCode::from_u16(status).expect("status");
    response
}

/// A redirect to `location`.
pub fn redirect(status: u16, location: &str) -> Response<ResponseBody> {
    let mut response = respond(status, "moved");
    response
        .headers_mut()
        .insert(http::header::LOCATION, location.parse().expect("location"));
    response
}

/// A running receiver. Dropping it stops accepting.
#[derive(Debug)]
pub struct Server {
    pub addr: SocketAddr,
    accepts: Arc<AtomicUsize>,
    requests: Arc<Mutex<Vec<Recorded>>>,
    task: JoinHandle<()>,
}

impl Server {
    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// TCP connections accepted so far.
    pub fn accepts(&self) -> usize {
        self.accepts.load(Ordering::SeqCst)
    }

    /// Requests seen so far (hyper servers only).
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().expect("lock").clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type Handler = Arc<
    dyn Fn(Recorded) -> Pin<Box<dyn Future<Output = Response<ResponseBody>> + Send>> + Send + Sync,
>;

/// Wraps an async closure as a handler.
pub fn handler<F, Fut>(f: F) -> Handler
where
    F: Fn(Recorded) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response<ResponseBody>> + Send + 'static,
{
    Arc::new(move |recorded| Box::pin(f(recorded)))
}

/// A hyper receiver (HTTP/1.1, or HTTP/2 over TLS when ALPN picks it) that
/// records each request, body included, before calling `handle`.
pub async fn http_server(handle: Handler) -> Server {
    serve(handle, None).await
}

/// Like [`http_server`], behind TLS with `tls`.
pub async fn https_server(handle: Handler, tls: Arc<rustls::ServerConfig>) -> Server {
    serve(handle, Some(tokio_rustls::TlsAcceptor::from(tls))).await
}

async fn serve(handle: Handler, tls: Option<tokio_rustls::TlsAcceptor>) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let accepts = Arc::new(AtomicUsize::new(0));
    let requests = Arc::new(Mutex::new(Vec::new()));
    let task = {
        let accepts = Arc::clone(&accepts);
        let requests = Arc::clone(&requests);
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                accepts.fetch_add(1, Ordering::SeqCst);
                let handle = Arc::clone(&handle);
                let requests = Arc::clone(&requests);
                let tls = tls.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request: Request<Incoming>| {
                        let handle = Arc::clone(&handle);
                        let requests = Arc::clone(&requests);
                        async move {
                            let (parts, body) = request.into_parts();
                            let body = body
                                .collect()
                                .await
                                .map(|b| b.to_bytes())
                                .unwrap_or_default();
                            let recorded = Recorded {
                                method: parts.method,
                                path: parts.uri.path().to_owned(),
                                version: parts.version,
                                headers: parts.headers,
                                body,
                            };
                            requests.lock().expect("lock").push(recorded.clone());
                            Ok::<_, Infallible>(handle(recorded).await)
                        }
                    });
                    let builder = auto::Builder::new(TokioExecutor::new());
                    match tls {
                        Some(acceptor) => {
                            // A failed handshake is the point of some tests.
                            if let Ok(stream) = acceptor.accept(stream).await {
                                let _ = builder
                                    .serve_connection(TokioIo::new(stream), service)
                                    .await;
                            }
                        }
                        None => {
                            let _ = builder
                                .serve_connection(TokioIo::new(stream), service)
                                .await;
                        }
                    }
                });
            }
        })
    };
    Server {
        addr,
        accepts,
        requests,
        task,
    }
}

/// A server that hands each accepted socket to `script`.
pub async fn raw_server<F, Fut>(script: F) -> Server
where
    F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let accepts = Arc::new(AtomicUsize::new(0));
    let task = {
        let accepts = Arc::clone(&accepts);
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                accepts.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(script(stream));
            }
        })
    };
    Server {
        addr,
        accepts,
        requests: Arc::new(Mutex::new(Vec::new())),
        task,
    }
}

/// A raw HTTP/1.1 receiver keeping every request exactly as its bytes
/// arrived (hyper servers normalise header names), answering the n-th
/// request on any connection with `answers[n]` (the last one once they run
/// out). Connections are kept alive.
#[derive(Debug)]
pub struct WireServer {
    pub server: Server,
    seen: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl WireServer {
    pub async fn start(answers: Vec<String>) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let answers = Arc::new(answers);
        let server = {
            let seen = Arc::clone(&seen);
            raw_server(move |mut stream| {
                let seen = Arc::clone(&seen);
                let answers = Arc::clone(&answers);
                async move {
                    loop {
                        let request = read_request(&mut stream).await;
                        if request.is_empty() {
                            return;
                        }
                        let n = {
                            let mut seen = seen.lock().expect("lock");
                            seen.push(request);
                            seen.len() - 1
                        };
                        let answer = answers.get(n).or(answers.last()).expect("an answer");
                        write_all(&mut stream, answer.as_bytes()).await;
                    }
                }
            })
            .await
        };
        Self { server, seen }
    }

    /// Every request received so far, as bytes.
    pub fn requests(&self) -> Vec<Vec<u8>> {
        self.seen.lock().expect("lock").clone()
    }

    /// The `n`-th request's head lines (request line first), as sent.
    pub fn head(&self, n: usize) -> Vec<String> {
        let request = &self.requests()[n];
        let end = find(request, b"\r\n\r\n").expect("a complete head");
        String::from_utf8(request[..end].to_vec())
            .expect("ASCII head")
            .split("\r\n")
            .map(str::to_owned)
            .collect()
    }

    /// The `n`-th request's body bytes.
    pub fn body(&self, n: usize) -> Vec<u8> {
        let request = &self.requests()[n];
        let end = find(request, b"\r\n\r\n").expect("a complete head");
        request[end + 4..].to_vec()
    }
}

/// Reads one request (head and `Content-Length` body) from a raw socket.
pub async fn read_request<S: AsyncRead + Unpin>(stream: &mut S) -> Vec<u8> {
    let mut data = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = find(&data, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&data[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if data.len() >= end + 4 + length {
                return data;
            }
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return data,
            Ok(n) => data.extend_from_slice(&chunk[..n]),
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Writes `bytes`, ignoring errors (the peer may be gone on purpose).
pub async fn write_all<S: AsyncWrite + Unpin>(stream: &mut S, bytes: &[u8]) {
    use tokio::io::AsyncWriteExt;
    let _ = stream.write_all(bytes).await;
    let _ = stream.flush().await;
}

/// A response body of `total` bytes produced lazily, counting what was
/// handed to the connection.
#[derive(Debug)]
pub struct LazyBody {
    remaining: usize,
    produced: Arc<AtomicUsize>,
}

impl LazyBody {
    pub fn new(total: usize, produced: Arc<AtomicUsize>) -> Self {
        Self {
            remaining: total,
            produced,
        }
    }
}

impl Body for LazyBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        const CHUNK: usize = 64 * 1024;
        if self.remaining == 0 {
            return Poll::Ready(None);
        }
        let n = self.remaining.min(CHUNK);
        self.remaining -= n;
        self.produced.fetch_add(n, Ordering::SeqCst);
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(vec![b'x'; n])))))
    }
}

/// Name lookups from a fixed table; names not in it do not exist.
#[derive(Debug, Default, Clone)]
pub struct TableLookup {
    entries: HashMap<String, Result<Vec<IpAddr>, LookupError>>,
}

impl TableLookup {
    pub fn with(mut self, name: &str, ips: &[&str]) -> Self {
        let ips = ips.iter().map(|ip| ip.parse().expect("ip")).collect();
        self.entries.insert(name.to_owned(), Ok(ips));
        self
    }

    pub fn failing(mut self, name: &str) -> Self {
        self.entries.insert(
            name.to_owned(),
            Err(LookupError::Temporary("SERVFAIL".into())),
        );
        self
    }
}

#[async_trait]
impl NameLookup for TableLookup {
    async fn lookup(&self, host: &str) -> Result<Vec<IpAddr>, LookupError> {
        self.entries
            .get(host)
            .cloned()
            .unwrap_or(Err(LookupError::NoSuchHost))
    }
}

/// Default settings plus an allow list for the loopback test servers.
pub fn local_config() -> TransportConfig {
    TransportConfig {
        outbound_allow: parse_cidr_list("127.0.0.1/32").expect("allow"),
        ..TransportConfig::default()
    }
}

/// A transport with `config` and the system resolver.
pub fn transport(config: TransportConfig) -> HyperTransport {
    HyperTransport::new(config.check().expect("valid config")).expect("a transport")
}

/// A transport with `config` and a fixed name table.
pub fn transport_with(config: TransportConfig, lookup: TableLookup) -> HyperTransport {
    HyperTransport::with_lookup(config.check().expect("valid config"), Arc::new(lookup))
        .expect("a transport")
}

/// A signed request for `uri` with `body`.
pub fn outbound_with(uri: &str, body: &[u8], timeout: Duration) -> OutboundRequest {
    OutboundRequest {
        target: Target {
            uri: uri.to_owned(),
            addrs: Vec::new(),
        },
        body: body.to_vec(),
        signatures: Signatures {
            phorge: sign(KEY, body),
            phorge_previous: None,
            standard: None,
        },
        request_phid: "PHID-HWBR-abcdefghijklmnopqrst".to_owned(),
        timeout,
    }
}

/// A signed request for `uri` with [`PAYLOAD`].
pub fn outbound(uri: &str, timeout: Duration) -> OutboundRequest {
    outbound_with(uri, PAYLOAD, timeout)
}

/// Delivers under [`GUARD`]; a hang fails the test instead of stalling it.
pub async fn deliver(transport: &HyperTransport, request: OutboundRequest) -> DeliveryResult {
    tokio::time::timeout(GUARD, transport.deliver(request))
        .await
        .expect("deliver returned within the guard")
}
