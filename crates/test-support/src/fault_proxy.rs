//! A fault-injecting TCP proxy on loopback, for database outages in tests:
//! the code under test reaches a server (the local MariaDB, usually)
//! through [`FaultProxy`], and the test switches the path between modes
//! while the real server keeps running for everyone else.
//!
//! * [`FaultProxy::forward`]: bytes pass both ways (the start state).
//! * [`FaultProxy::cut`]: every proxied connection is closed, and new ones
//!   are closed as soon as they are accepted (a server that is gone).
//! * [`FaultProxy::blackhole`]: existing and new connections stay open but
//!   nothing is forwarded either way (a frozen host, a dead route whose
//!   TCP handshake a middlebox still completes).
//! * [`FaultProxy::freeze`]: the connections open now stop forwarding in
//!   both directions but stay open, for ever; new connections work normally
//!   (a NAT table flush or a failed-over load balancer: half-open sockets
//!   that no error ever reports).
//! * [`FaultProxy::latency`]: every chunk waits this long before it is
//!   passed on (in both directions).
//! * [`FaultProxy::full`]: every proxied connection is closed, and new ones
//!   are answered as a MySQL server whose `max_connections` is reached
//!   answers them: error 1040, "Too many connections", in place of the
//!   handshake.
//!
//! A frozen connection is never thawed: like a real half-open socket, it
//! only ends when the proxy is cut or dropped. Test code: it panics when it
//! cannot bind.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

use crate::mariadb::{HOST, PORT};

/// What happens to connections now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Forward,
    Cut,
    Blackhole,
    Full,
}

/// What a MySQL server whose connections are all taken sends a new one
/// instead of its handshake: an error packet (sequence 0) with error 1040
/// and no SQL state, as the client's capabilities are not known yet.
const TOO_MANY_CONNECTIONS: &[u8] = b"\x17\x00\x00\x00\xff\x10\x04Too many connections";

/// One accepted connection: its tasks, and whether it is frozen.
struct Link {
    tasks: Vec<AbortHandle>,
    frozen: Arc<AtomicBool>,
}

struct State {
    mode: Mode,
    latency: Duration,
    links: Vec<Link>,
}

#[derive(Default)]
struct Counts {
    proxied: AtomicU64,
    turned_away: AtomicU64,
    held: AtomicU64,
}

struct Shared {
    /// One lock for the mode and the links, so a connection is either
    /// registered before a cut or freeze (and so affected by it) or
    /// accepted after it (and treated by the new mode).
    state: Mutex<State>,
    counts: Counts,
}

impl Shared {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A TCP proxy from a loopback port to a server, with faults on demand.
pub struct FaultProxy {
    port: u16,
    shared: Arc<Shared>,
    accept: AbortHandle,
}

impl FaultProxy {
    /// A proxy to the local MariaDB ([`HOST`]:[`PORT`]), forwarding.
    pub async fn to_mariadb() -> Self {
        Self::start(HOST, PORT).await
    }

    /// A proxy to `host:port` on a free loopback port, forwarding.
    pub async fn start(host: &'static str, port: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("proxy: bind 127.0.0.1:0");
        let own_port = listener.local_addr().expect("proxy address").port();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                mode: Mode::Forward,
                latency: Duration::ZERO,
                links: Vec::new(),
            }),
            counts: Counts::default(),
        });
        let accepting = Arc::clone(&shared);
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                accepting.admit(client, host, port);
            }
        })
        .abort_handle();
        Self {
            port: own_port,
            shared,
            accept,
        }
    }

    /// The loopback port to connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Forwards new connections again (frozen ones stay frozen).
    pub fn forward(&self) {
        self.shared.state().mode = Mode::Forward;
    }

    /// Closes every connection and turns new ones away.
    pub fn cut(&self) {
        let mut state = self.shared.state();
        state.mode = Mode::Cut;
        for link in state.links.drain(..) {
            for task in link.tasks {
                task.abort();
            }
        }
    }

    /// Closes every connection and answers new ones with error 1040, as a
    /// server whose `max_connections` is reached.
    pub fn full(&self) {
        self.cut();
        self.shared.state().mode = Mode::Full;
    }

    /// Freezes every connection and holds new ones open without
    /// forwarding anything.
    pub fn blackhole(&self) {
        let mut state = self.shared.state();
        state.mode = Mode::Blackhole;
        freeze_all(&state.links);
    }

    /// Freezes the connections open now; new ones are forwarded.
    pub fn freeze(&self) {
        let mut state = self.shared.state();
        state.mode = Mode::Forward;
        freeze_all(&state.links);
    }

    /// Delays every chunk by `delay` from now on (`Duration::ZERO`: none).
    pub fn latency(&self, delay: Duration) {
        self.shared.state().latency = delay;
    }

    /// Connections accepted and forwarded so far.
    pub fn proxied(&self) -> u64 {
        self.shared.counts.proxied.load(Ordering::Relaxed)
    }

    /// Connections closed on arrival while cut, or answered "too many
    /// connections" while full.
    pub fn turned_away(&self) -> u64 {
        self.shared.counts.turned_away.load(Ordering::Relaxed)
    }

    /// Connections accepted and held silent while blackholed.
    pub fn held(&self) -> u64 {
        self.shared.counts.held.load(Ordering::Relaxed)
    }
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

fn freeze_all(links: &[Link]) {
    for link in links {
        link.frozen.store(true, Ordering::SeqCst);
    }
}

impl Shared {
    fn admit(self: &Arc<Self>, client: TcpStream, host: &'static str, port: u16) {
        let mut state = self.state();
        state
            .links
            .retain(|link| link.tasks.iter().any(|task| !task.is_finished()));
        match state.mode {
            Mode::Cut => {
                self.counts.turned_away.fetch_add(1, Ordering::Relaxed);
                drop(client);
            }
            Mode::Full => {
                self.counts.turned_away.fetch_add(1, Ordering::Relaxed);
                let task = tokio::spawn(async move {
                    let mut client = client;
                    let _ = client.write_all(TOO_MANY_CONNECTIONS).await;
                    let _ = client.shutdown().await;
                });
                state.links.push(Link {
                    tasks: vec![task.abort_handle()],
                    frozen: Arc::new(AtomicBool::new(false)),
                });
            }
            Mode::Blackhole => {
                self.counts.held.fetch_add(1, Ordering::Relaxed);
                let task = tokio::spawn(async move {
                    let _held = client;
                    std::future::pending::<()>().await;
                });
                state.links.push(Link {
                    tasks: vec![task.abort_handle()],
                    frozen: Arc::new(AtomicBool::new(true)),
                });
            }
            Mode::Forward => {
                self.counts.proxied.fetch_add(1, Ordering::Relaxed);
                let frozen = Arc::new(AtomicBool::new(false));
                let shared = Arc::clone(self);
                let link_frozen = Arc::clone(&frozen);
                let task = tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect((host, port)).await else {
                        return;
                    };
                    let _ = server.set_nodelay(true);
                    let _ = client.set_nodelay(true);
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    let up = pump(
                        client_read,
                        server_write,
                        Arc::clone(&link_frozen),
                        Arc::clone(&shared),
                    );
                    let down = pump(server_read, client_write, link_frozen, shared);
                    // Either side closing ends the link; a frozen side never
                    // does.
                    tokio::select! {
                        () = up => {},
                        () = down => {},
                    }
                });
                state.links.push(Link {
                    tasks: vec![task.abort_handle()],
                    frozen,
                });
            }
        }
    }
}

/// Copies `from` to `to` chunk by chunk until either side closes; once
/// `frozen`, holds both halves open and passes nothing on.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    frozen: Arc<AtomicBool>,
    shared: Arc<Shared>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if frozen.load(Ordering::SeqCst) {
            return hold(from, to).await;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let delay = shared.state().latency;
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        // Checked after the read too: a chunk read just before the freeze
        // is swallowed, as a frozen path loses what was in flight.
        if frozen.load(Ordering::SeqCst) {
            return hold(from, to).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// Keeps both halves of a frozen direction open for ever.
async fn hold(from: OwnedReadHalf, to: OwnedWriteHalf) {
    let _held = (from, to);
    std::future::pending::<()>().await;
}
