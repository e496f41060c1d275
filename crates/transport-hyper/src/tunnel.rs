//! Reaching a receiver through the egress proxy: the connection to the
//! proxy (TCP, then TLS for an `https://` proxy) and, for a tunnel, the
//! `CONNECT` exchange to an address the outbound check passed. Every way
//! this fails is the proxy's failure ([`ProxyFailure`]), never the
//! receiver's; what goes through the tunnel afterwards is the receiver's.
//!
//! The proxy's own address is not held to the outbound check: an egress
//! proxy is usually internal, and it is the operator's choice, not a hook
//! author's.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::client::legacy::connect::{Connected, Connection};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;
use webhook_core::ProxyFailure;

use crate::connector::HopError;
use crate::lookup::NameLookup;
use crate::proxy::ProxyServer;

/// The longest answer head a proxy may give to `CONNECT`.
const ANSWER_HEAD_MAX: usize = 16 * 1024;

/// A connection: straight to a receiver or to a plain-HTTP proxy, or TLS
/// to an `https://` proxy.
#[derive(Debug)]
pub(crate) enum Stream {
    /// A TCP connection.
    Plain(TcpStream),
    /// TLS to the proxy, over TCP.
    ProxyTls(Box<TlsStream<TcpStream>>),
}

impl Stream {
    fn tcp(&self) -> &TcpStream {
        match self {
            Self::Plain(tcp) => tcp,
            Self::ProxyTls(tls) => tls.get_ref().0,
        }
    }
}

/// What the connection to the proxy needs besides the proxy itself.
#[derive(Clone)]
pub(crate) struct ProxyDialer {
    pub(crate) lookup: Arc<dyn NameLookup>,
    /// The receivers' roots (webpki's and the configured ones), without
    /// ALPN: the proxy is spoken to in HTTP/1.1.
    pub(crate) tls: TlsConnector,
    /// Bound on reaching the proxy and on its answers to `CONNECT`, all
    /// addresses tried included.
    pub(crate) timeout: Duration,
}

impl std::fmt::Debug for ProxyDialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyDialer")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl ProxyDialer {
    /// A connection to `proxy`, within the timeout.
    pub(crate) async fn connect(&self, proxy: &ProxyServer) -> Result<Stream, HopError> {
        let reached = AtomicBool::new(false);
        self.bounded(&reached, self.reach(proxy, &reached)).await
    }

    /// A tunnel through `proxy` to the first of `targets` (checked
    /// addresses) the proxy can reach, all within the timeout: a proxy
    /// failure is told as such before any outer bound could make it the
    /// receiver's timeout.
    pub(crate) async fn tunnel(
        &self,
        proxy: &ProxyServer,
        targets: &[SocketAddr],
    ) -> Result<Stream, HopError> {
        let reached = AtomicBool::new(false);
        self.bounded(&reached, async {
            for target in targets {
                let mut stream = self.reach(proxy, &reached).await?;
                match open_tunnel(&mut stream, proxy, *target).await {
                    Ok(()) => return Ok(stream),
                    // The proxy could not reach this address: try the next.
                    Err(HopError::Proxy(ProxyFailure::TunnelFailed)) => {}
                    Err(other) => return Err(other),
                }
            }
            Err(failure(ProxyFailure::TunnelFailed))
        })
        .await
    }

    /// `work` within the timeout; past it, the proxy was `Silent` once a
    /// connection to it was made, else `Unreachable`.
    async fn bounded<T>(
        &self,
        reached: &AtomicBool,
        work: impl std::future::Future<Output = Result<T, HopError>>,
    ) -> Result<T, HopError> {
        match tokio::time::timeout(self.timeout, work).await {
            Ok(result) => result,
            Err(_) if reached.load(Ordering::Relaxed) => Err(failure(ProxyFailure::Silent)),
            Err(_) => Err(failure(ProxyFailure::Unreachable)),
        }
    }

    /// A connection to the proxy: its addresses in turn, each given an
    /// even share of the time left, so one that swallows packets does not
    /// use up the whole bound.
    async fn reach(&self, proxy: &ProxyServer, reached: &AtomicBool) -> Result<Stream, HopError> {
        let ips = match proxy.host().parse::<IpAddr>() {
            Ok(ip) => vec![ip],
            Err(_) => self
                .lookup
                .lookup(proxy.host())
                .await
                .ok()
                .filter(|ips| !ips.is_empty())
                .ok_or(failure(ProxyFailure::Lookup))?,
        };
        let started = tokio::time::Instant::now();
        let mut tcp = None;
        for (tried, ip) in ips.iter().enumerate() {
            let left = self.timeout.saturating_sub(started.elapsed());
            let share = left / u32::try_from(ips.len() - tried).unwrap_or(u32::MAX);
            let connecting = TcpStream::connect(SocketAddr::new(*ip, proxy.port()));
            if let Ok(Ok(stream)) = tokio::time::timeout(share, connecting).await {
                tcp = Some(stream);
                break;
            }
        }
        let tcp = tcp.ok_or(failure(ProxyFailure::Unreachable))?;
        reached.store(true, Ordering::Relaxed);
        let _ = tcp.set_nodelay(true);
        if !proxy.tls() {
            return Ok(Stream::Plain(tcp));
        }
        let name = ServerName::try_from(proxy.host().to_owned())
            .map_err(|_| failure(ProxyFailure::Tls))?;
        let tls = self
            .tls
            .connect(name, tcp)
            .await
            .map_err(|_| failure(ProxyFailure::Tls))?;
        Ok(Stream::ProxyTls(Box::new(tls)))
    }
}

fn failure(why: ProxyFailure) -> HopError {
    HopError::Proxy(why)
}

/// Asks the proxy for a tunnel to `target` and reads its answer: a 2xx
/// opens it; the rest is how the proxy failed.
async fn open_tunnel(
    stream: &mut Stream,
    proxy: &ProxyServer,
    target: SocketAddr,
) -> Result<(), HopError> {
    let mut request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n").into_bytes();
    if let Some(authorization) = proxy.authorization() {
        request.extend_from_slice(b"Proxy-Authorization: ");
        request.extend_from_slice(authorization.as_bytes());
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"\r\n");
    stream
        .write_all(&request)
        .await
        .map_err(|_| failure(ProxyFailure::Unreachable))?;
    let status = read_answer(stream).await?;
    match status {
        200..=299 => Ok(()),
        // 407 is the standard answer; tinyproxy answers wrong credentials
        // with 401. To a CONNECT either can only be the proxy's.
        401 | 407 => Err(failure(ProxyFailure::AuthRequired)),
        400..=499 => Err(failure(ProxyFailure::TunnelRefused)),
        500..=599 => Err(failure(ProxyFailure::TunnelFailed)),
        _ => Err(failure(ProxyFailure::Protocol)),
    }
}

/// The status of the proxy's answer head. Nothing may follow the head of a
/// 2xx: the receiver has not been spoken to yet.
async fn read_answer(stream: &mut Stream) -> Result<u16, HopError> {
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    loop {
        let read = stream
            .read(&mut chunk)
            .await
            .map_err(|_| failure(ProxyFailure::Protocol))?;
        if read == 0 {
            return Err(failure(ProxyFailure::Protocol));
        }
        head.extend_from_slice(&chunk[..read]);
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut answer = httparse::Response::new(&mut headers);
        match answer.parse(&head) {
            // A refusal may come with a page; an opened tunnel carries
            // nothing before the receiver is spoken to.
            Ok(httparse::Status::Complete(end)) => {
                return match answer.code {
                    Some(200..=299) if end != head.len() => Err(failure(ProxyFailure::Protocol)),
                    Some(code) => Ok(code),
                    None => Err(failure(ProxyFailure::Protocol)),
                };
            }
            Ok(httparse::Status::Partial) if head.len() < ANSWER_HEAD_MAX => {}
            _ => return Err(failure(ProxyFailure::Protocol)),
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(tcp) => Pin::new(tcp).poll_read(cx, buf),
            Self::ProxyTls(tls) => Pin::new(tls.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(tcp) => Pin::new(tcp).poll_write(cx, buf),
            Self::ProxyTls(tls) => Pin::new(tls.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(tcp) => Pin::new(tcp).poll_flush(cx),
            Self::ProxyTls(tls) => Pin::new(tls.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(tcp) => Pin::new(tcp).poll_shutdown(cx),
            Self::ProxyTls(tls) => Pin::new(tls.as_mut()).poll_shutdown(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Self::Plain(tcp) => tcp.is_write_vectored(),
            Self::ProxyTls(tls) => tls.is_write_vectored(),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(tcp) => Pin::new(tcp).poll_write_vectored(cx, bufs),
            Self::ProxyTls(tls) => Pin::new(tls.as_mut()).poll_write_vectored(cx, bufs),
        }
    }
}

impl Connection for Stream {
    fn connected(&self) -> Connected {
        self.tcp().connected()
    }
}
