//! A receiver on raw sockets, for answers no HTTP library would give:
//! hanging, trickling, resetting, closing silently, bytes that are not
//! HTTP, redirects, and bodies streamed without end. It reads each request
//! (head and `Content-Length` body) before it misbehaves, counts
//! connections, and never buffers what it sends. A listener that only
//! counts connections doubles as a tripwire for addresses the daemon must
//! never reach.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

/// What a raw receiver does once it has read a request.
#[derive(Debug, Clone)]
pub enum Misbehaviour {
    /// Never answers; waits for the client to give up.
    Hang,
    /// Sends a head at once, then one body byte every 200 ms.
    Trickle,
    /// Resets the connection (`SO_LINGER` 0, then close).
    Reset,
    /// Closes the connection without a byte of answer.
    Close,
    /// Sends the n-th text on the n-th connection (the last one on every
    /// later connection), then closes.
    Answers(Vec<String>),
    /// `200` with a body of this many bytes, streamed.
    HugeBody(u64),
}

impl Misbehaviour {
    /// The same bytes on every connection.
    pub fn answer(text: impl Into<String>) -> Self {
        Self::Answers(vec![text.into()])
    }
}

#[derive(Debug, Default)]
struct Stats {
    connections: AtomicU64,
    body_bytes_written: AtomicU64,
}

/// A listening raw receiver; stops accepting when dropped.
#[derive(Debug)]
pub struct RawReceiver {
    addr: SocketAddr,
    stats: Arc<Stats>,
    accept: AbortHandle,
}

impl Drop for RawReceiver {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl RawReceiver {
    /// Listens on `ip` (a loopback address) on a free port.
    pub async fn start(ip: &str, behaviour: Misbehaviour) -> Self {
        let listener = TcpListener::bind((ip, 0))
            .await
            .unwrap_or_else(|e| panic!("raw receiver: bind {ip}: {e}"));
        let addr = listener.local_addr().expect("raw receiver address");
        let stats = Arc::new(Stats::default());
        let counted = Arc::clone(&stats);
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let nth = counted.connections.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(misbehave(
                    stream,
                    behaviour.clone(),
                    nth,
                    Arc::clone(&counted),
                ));
            }
        })
        .abort_handle();
        Self {
            addr,
            stats,
            accept,
        }
    }

    /// A listener that only counts connections: a URI pointing at it must
    /// never reach it.
    pub async fn tripwire(ip: &str) -> Self {
        Self::start(ip, Misbehaviour::Close).await
    }

    /// `http://<addr><path>`, with IPv6 brackets.
    pub fn url(&self, path: &str) -> String {
        match self.addr {
            SocketAddr::V4(a) => format!("http://{a}{path}"),
            SocketAddr::V6(a) => format!("http://[{}]:{}{path}", a.ip(), a.port()),
        }
    }

    /// The listening port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.stats.connections.load(Ordering::Relaxed)
    }

    /// Body bytes a [`Misbehaviour::HugeBody`] got written into the socket
    /// before the client stopped reading.
    pub fn body_bytes_written(&self) -> u64 {
        self.stats.body_bytes_written.load(Ordering::Relaxed)
    }
}

/// Reads one request (head and `Content-Length` body).
async fn read_request(stream: &mut TcpStream) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let mut wanted = None;
    loop {
        if wanted.is_none() {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                wanted = Some(end + 4 + length);
            }
        }
        if wanted.is_some_and(|w| buf.len() >= w) {
            return Ok(());
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn misbehave(mut stream: TcpStream, behaviour: Misbehaviour, nth: u64, stats: Arc<Stats>) {
    if read_request(&mut stream).await.is_err() {
        return;
    }
    match behaviour {
        Misbehaviour::Hang => {
            // Returns when the client closes (or after a minute).
            let mut byte = [0u8; 1];
            let _ = tokio::time::timeout(Duration::from_secs(60), stream.read(&mut byte)).await;
        }
        Misbehaviour::Trickle => {
            let head =
                b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 10000\r\n\r\n";
            if stream.write_all(head).await.is_err() {
                return;
            }
            for _ in 0..10_000 {
                if stream.write_all(b".").await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        Misbehaviour::Reset => {
            let _ = stream.set_zero_linger();
            drop(stream);
        }
        Misbehaviour::Close => drop(stream),
        Misbehaviour::Answers(texts) => {
            let index = usize::try_from(nth).unwrap_or(usize::MAX);
            if let Some(text) = texts.get(index).or(texts.last()) {
                let _ = stream.write_all(text.as_bytes()).await;
            }
            let _ = stream.shutdown().await;
        }
        Misbehaviour::HugeBody(size) => {
            let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {size}\r\n\r\n");
            if stream.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            let chunk = vec![b'x'; 64 * 1024];
            let mut written = 0u64;
            while written < size {
                let n = chunk
                    .len()
                    .min(usize::try_from(size - written).unwrap_or(usize::MAX));
                if stream.write_all(&chunk[..n]).await.is_err() {
                    break;
                }
                written += n as u64;
                stats.body_bytes_written.store(written, Ordering::Relaxed);
            }
        }
    }
}
