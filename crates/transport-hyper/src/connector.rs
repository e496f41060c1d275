//! The connection layer under hyper's pooled client, which is where the
//! outbound check is enforced: every new connection, on every hop, goes
//! only to addresses [`OutboundPolicy`] permitted, looked up once.
//!
//! Layers, outermost first: [`GuardedConnector`] bounds the whole setup
//! (lookup, TCP, TLS) by the connect timeout (twice that through a proxy:
//! one for the proxy, one for the receiver's handshake); hyper-rustls adds
//! TLS; [`TcpConnector`] checks IP-literal hosts, tags TCP failures and
//! wraps the stream in [`TaggedIo`]; hyper-util's `HttpConnector` connects,
//! asking [`CheckedResolver`] for names. Where [`Proxies::route`] sends a
//! hop through the egress proxy, [`TcpConnector`] checks the target's
//! addresses first, then connects to the proxy ([`crate::tunnel`]): a
//! tunnel goes to the first checked address the proxy could reach; a
//! forwarded `http` request is marked proxied so hyper writes it in
//! absolute form (and asks the proxy to close it after the answer, so no
//! pooled connection carries a later request past a new check). The
//! proxy's steps end within the connect timeout as a proxy failure; the
//! outer bound is twice that, so the receiver's handshake through a tunnel
//! keeps a connect timeout of its own. The tags and [`HopError`] exist so that
//! [`crate::classify`] can tell a refused address from a DNS failure, a TCP
//! failure from a TLS one, and a send failure from a receive failure;
//! [`ConnectionUsage`] lets the transport recognise a pooled connection the
//! receiver closed. Nothing here decides an outcome or speaks HTTP.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tower_service::Service;
use webhook_core::{ProxyFailure, UriRefusal};

use crate::lookup::{LookupError, NameLookup};
use crate::policy::OutboundPolicy;
use crate::proxy::{Proxies, ProxyServer, Route};
use crate::tunnel::{ProxyDialer, Stream};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

/// Why a connection could not be set up, in the terms the classifier needs.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HopError {
    /// The outbound check refused the host (denied address, unknown name).
    #[error("{0}")]
    Refused(UriRefusal),
    /// The resolver could not answer this time.
    #[error("name lookup failed: {0}")]
    Lookup(String),
    /// TCP connect failed (refused, unreachable, timed out).
    #[error("tcp connect failed")]
    Tcp(#[source] BoxError),
    /// Setting up the connection took longer than the connect timeout.
    #[error("connection setup exceeded the connect timeout")]
    SetupTimeout,
    /// The egress proxy failed the connection.
    #[error("{}", webhook_core::LocalFailure::Proxy(*.0))]
    Proxy(ProxyFailure),
}

/// Looks `host` up and applies the outbound check to every address: one
/// denied address refuses the host (protocol §5 step 5).
pub(crate) async fn resolve_checked(
    lookup: &dyn NameLookup,
    policy: &OutboundPolicy,
    host: &str,
) -> Result<Vec<IpAddr>, HopError> {
    let ips = match lookup.lookup(host).await {
        Ok(ips) if ips.is_empty() => return Err(HopError::Refused(UriRefusal::UnknownHost)),
        Ok(ips) => ips,
        Err(LookupError::NoSuchHost) => return Err(HopError::Refused(UriRefusal::UnknownHost)),
        Err(LookupError::Temporary(why)) => return Err(HopError::Lookup(why)),
    };
    match policy.first_denied(ips.iter().copied()) {
        Some(ip) => Err(HopError::Refused(UriRefusal::DeniedAddress(ip))),
        None => Ok(ips),
    }
}

/// hyper-util's resolver hook: yields only checked addresses.
#[derive(Debug, Clone)]
pub(crate) struct CheckedResolver {
    lookup: Arc<dyn NameLookup>,
    policy: Arc<OutboundPolicy>,
}

impl Service<Name> for CheckedResolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = HopError;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let lookup = Arc::clone(&self.lookup);
        let policy = Arc::clone(&self.policy);
        Box::pin(async move {
            let ips = resolve_checked(lookup.as_ref(), &policy, name.as_str()).await?;
            // Port 0: HttpConnector fills in the URI's port.
            let addrs: Vec<SocketAddr> = ips.into_iter().map(|ip| SocketAddr::new(ip, 0)).collect();
            Ok(addrs.into_iter())
        })
    }
}

/// TCP connections to checked addresses only, straight or through the
/// egress proxy.
#[derive(Debug, Clone)]
pub(crate) struct TcpConnector {
    http: HttpConnector<CheckedResolver>,
    lookup: Arc<dyn NameLookup>,
    policy: Arc<OutboundPolicy>,
    proxies: Arc<Proxies>,
    dialer: ProxyDialer,
}

impl TcpConnector {
    pub(crate) fn new(
        lookup: Arc<dyn NameLookup>,
        policy: Arc<OutboundPolicy>,
        proxies: Arc<Proxies>,
        dialer: ProxyDialer,
        connect_timeout: Duration,
    ) -> Self {
        let mut http = HttpConnector::new_with_resolver(CheckedResolver {
            lookup: Arc::clone(&lookup),
            policy: Arc::clone(&policy),
        });
        // https URIs pass through here on their way to TLS.
        http.enforce_http(false);
        http.set_nodelay(true);
        // Split across a host's addresses, so one black-holed address does
        // not use up the whole budget.
        http.set_connect_timeout(Some(connect_timeout));
        Self {
            http,
            lookup,
            policy,
            proxies,
            dialer,
        }
    }

    fn direct(&mut self, uri: Uri) -> BoxFuture<TokioIo<TaggedIo>, HopError> {
        // HttpConnector connects to IP literals without asking the resolver,
        // so they are checked here; names are checked by CheckedResolver.
        if let Ok(ip) = bare_host(&uri).parse::<IpAddr>() {
            if !self.policy.permits(ip) {
                return Box::pin(
                    async move { Err(HopError::Refused(UriRefusal::DeniedAddress(ip))) },
                );
            }
        }
        let connecting = self.http.call(uri);
        Box::pin(async move {
            connecting
                .await
                .map(|io| TokioIo::new(TaggedIo::new(Stream::Plain(io.into_inner()), false)))
                .map_err(|err| HopError::Tcp(err.into()))
        })
    }

    /// Through `proxy`: the target's addresses are checked before the
    /// proxy is asked for anything.
    fn proxied(
        &self,
        uri: &Uri,
        proxy: ProxyServer,
        tunnel: bool,
    ) -> BoxFuture<TokioIo<TaggedIo>, HopError> {
        let host = bare_host(uri).to_owned();
        let port = uri.port_u16().unwrap_or(if tunnel { 443 } else { 80 });
        let lookup = Arc::clone(&self.lookup);
        let policy = Arc::clone(&self.policy);
        let dialer = self.dialer.clone();
        Box::pin(async move {
            let ips = match host.parse::<IpAddr>() {
                Ok(ip) if policy.permits(ip) => vec![ip],
                Ok(ip) => return Err(HopError::Refused(UriRefusal::DeniedAddress(ip))),
                Err(_) => resolve_checked(lookup.as_ref(), &policy, &host).await?,
            };
            if !tunnel {
                let stream = dialer.connect(&proxy).await?;
                return Ok(TokioIo::new(TaggedIo::new(stream, true)));
            }
            let targets: Vec<SocketAddr> = ips
                .into_iter()
                .map(|ip| SocketAddr::new(ip, port))
                .collect();
            let stream = dialer.tunnel(&proxy, &targets).await?;
            Ok(TokioIo::new(TaggedIo::new(stream, false)))
        })
    }
}

/// The URI's host without IPv6 brackets.
fn bare_host(uri: &Uri) -> &str {
    let host = uri.host().unwrap_or_default();
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

fn is_https(uri: &Uri) -> bool {
    uri.scheme() == Some(&http::uri::Scheme::HTTPS)
}

impl Service<Uri> for TcpConnector {
    type Response = TokioIo<TaggedIo>;
    type Error = HopError;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.http
            .poll_ready(cx)
            .map_err(|err| HopError::Tcp(err.into()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        match self.proxies.route(is_https(&uri), bare_host(&uri)) {
            Route::Direct => self.direct(uri),
            Route::Tunnel(proxy) => self.proxied(&uri, proxy.clone(), true),
            Route::Forward(proxy) => self.proxied(&uri, proxy.clone(), false),
        }
    }
}

/// The connector the client uses: TLS over [`TcpConnector`], the whole
/// setup bounded by the connect timeout (twice it through the proxy). The
/// bound also covers a TLS handshake the client finishes in the background
/// for the pool.
#[derive(Debug, Clone)]
pub(crate) struct GuardedConnector {
    inner: HttpsConnector<TcpConnector>,
    proxies: Arc<Proxies>,
    connect_timeout: Duration,
}

impl GuardedConnector {
    pub(crate) fn new(
        inner: HttpsConnector<TcpConnector>,
        proxies: Arc<Proxies>,
        connect_timeout: Duration,
    ) -> Self {
        Self {
            inner,
            proxies,
            connect_timeout,
        }
    }
}

impl Service<Uri> for GuardedConnector {
    type Response = MaybeHttpsStream<TokioIo<TaggedIo>>;
    type Error = BoxError;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let limit = match self.proxies.route(is_https(&uri), bare_host(&uri)) {
            Route::Direct => self.connect_timeout,
            // The proxy's steps are bounded on their own (a proxy
            // failure); the receiver's handshake gets a bound of its own.
            Route::Tunnel(_) | Route::Forward(_) => self.connect_timeout.saturating_mul(2),
        };
        let connecting = self.inner.call(uri);
        Box::pin(async move {
            match tokio::time::timeout(limit, connecting).await {
                Ok(result) => result,
                Err(_) => Err(Box::new(HopError::SetupTimeout) as BoxError),
            }
        })
    }
}

/// Marks an I/O error as raised while sending, so it is reported as a send
/// failure (cURL 55) rather than a receive failure (56).
#[derive(Debug, thiserror::Error)]
#[error("sending on the connection failed: {0}")]
pub(crate) struct WriteFailed(#[source] pub(crate) io::Error);

fn tag_write(err: io::Error) -> io::Error {
    io::Error::new(err.kind(), WriteFailed(err))
}

/// How a connection has been used, shared between the stream and the
/// client through the connection's `Connected` extras.
#[derive(Debug, Default)]
struct UsageCounters {
    /// Response heads received on the connection (counted by the transport).
    responses: AtomicU64,
    /// Bytes received since the current request started to be written.
    received: AtomicU64,
}

/// A shared handle on a connection's usage: enough to tell a connection the
/// receiver closed while it sat in the pool from a receiver that closes
/// fresh connections without answering.
#[derive(Debug, Clone, Default)]
pub(crate) struct ConnectionUsage(Arc<UsageCounters>);

impl ConnectionUsage {
    /// The usage recorded for the connection `connected` describes.
    pub(crate) fn of(connected: &Connected) -> Option<Self> {
        let mut extensions = http::Extensions::new();
        connected.get_extras(&mut extensions);
        extensions.get::<Self>().cloned()
    }

    /// Notes that a response head arrived on the connection.
    pub(crate) fn count_response(&self) {
        self.0.responses.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether an earlier exchange got a response on this connection.
    pub(crate) fn was_reused(&self) -> bool {
        self.0.responses.load(Ordering::Relaxed) > 0
    }

    /// Whether nothing arrived since the current request started.
    pub(crate) fn received_nothing(&self) -> bool {
        self.0.received.load(Ordering::Relaxed) == 0
    }
}

/// A connection that tags send-side errors with [`WriteFailed`] and counts
/// received bytes into [`ConnectionUsage`]; `proxied` when it goes to the
/// proxy for forwarded (absolute-form) requests.
///
/// A peer that resets the connection while a request is still being sent
/// is usually seen first by hyper's read (it watches for an early response
/// while writing), so a read error while a write is still waiting for
/// buffer space counts as a send failure too.
#[derive(Debug)]
pub(crate) struct TaggedIo {
    inner: Stream,
    proxied: bool,
    usage: ConnectionUsage,
    write_waiting: bool,
    next_write_starts_request: bool,
}

impl TaggedIo {
    fn new(inner: Stream, proxied: bool) -> Self {
        Self {
            inner,
            proxied,
            usage: ConnectionUsage::default(),
            write_waiting: false,
            next_write_starts_request: true,
        }
    }

    fn before_write(&mut self) {
        // On HTTP/1 a write after a read starts the next request.
        if self.next_write_starts_request {
            self.next_write_starts_request = false;
            self.usage.0.received.store(0, Ordering::Relaxed);
        }
    }

    fn after_write<R>(&mut self, result: Poll<io::Result<R>>) -> Poll<io::Result<R>> {
        match result {
            Poll::Pending => {
                self.write_waiting = true;
                Poll::Pending
            }
            Poll::Ready(Ok(value)) => {
                self.write_waiting = false;
                Poll::Ready(Ok(value))
            }
            Poll::Ready(Err(err)) => Poll::Ready(Err(tag_write(err))),
        }
    }
}

impl AsyncRead for TaggedIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let got = buf.filled().len().saturating_sub(before);
                if got > 0 {
                    this.next_write_starts_request = true;
                    this.usage
                        .0
                        .received
                        .fetch_add(got as u64, Ordering::Relaxed);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(err)) if this.write_waiting => Poll::Ready(Err(tag_write(err))),
            other => other,
        }
    }
}

impl AsyncWrite for TaggedIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.before_write();
        let result = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.after_write(result)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_flush(cx);
        this.after_write(result)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.before_write();
        let result = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.after_write(result)
    }
}

impl Connection for TaggedIo {
    fn connected(&self) -> Connected {
        self.inner
            .connected()
            .proxy(self.proxied)
            .extra(self.usage.clone())
    }
}
