//! Running the real `webhook-daemon` binary (built by cargo for this test
//! target, never by the tests) and talking to it: free loopback ports, a
//! child process that is killed in `Drop`, its stderr captured for failure
//! messages, readiness by polling `/healthz`, SIGTERM through `kill`, and a
//! small raw HTTP/1.1 client.
//!
//! Everything waits on conditions with generous deadlines; nothing sleeps
//! to synchronise.

use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_webhook-daemon");

/// [`BIN`], unless `WEBHOOK_DAEMON_BIN` names another build of it (a
/// release build, or a deliberately broken one, to check that the tests
/// notice).
pub fn bin() -> String {
    std::env::var("WEBHOOK_DAEMON_BIN").unwrap_or_else(|_| BIN.to_owned())
}

/// How long a daemon may take to answer `/healthz` after its start. Very
/// generous: the machine may be busy compiling.
pub const START_DEADLINE: Duration = Duration::from_secs(60);

/// How long one HTTP exchange with the daemon may take.
const HTTP_DEADLINE: Duration = Duration::from_secs(30);

/// A port on 127.0.0.1 that was free a moment ago (bound, read, released).
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0 to find a free port");
    listener
        .local_addr()
        .expect("local address of the probe listener")
        .port()
}

/// The settings every daemon on the local MariaDB gets: root, no password,
/// the test's namespace.
pub fn database_env(namespace: &str) -> Vec<(String, String)> {
    vec![
        ("GORGE_WEBHOOK_MYSQL_HOST".into(), "127.0.0.1".into()),
        ("GORGE_WEBHOOK_MYSQL_PORT".into(), "3306".into()),
        ("GORGE_WEBHOOK_MYSQL_USER".into(), "root".into()),
        ("GORGE_WEBHOOK_MYSQL_PASS".into(), String::new()),
        ("GORGE_WEBHOOK_NAMESPACE".into(), namespace.into()),
    ]
}

/// Output of a stream, collected by a reader thread.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    fn spawn_reader(&self, mut stream: impl Read + Send + 'static) -> JoinHandle<()> {
        let sink = Arc::clone(&self.0);
        std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            loop {
                match stream.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => sink
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .extend_from_slice(&chunk[..n]),
                }
            }
        })
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }
}

/// A running `webhook-daemon` process; killed (and reaped) when dropped.
pub struct Daemon {
    child: Child,
    exited: Option<ExitStatus>,
    addr: SocketAddr,
    stdout: Captured,
    stderr: Captured,
    readers: Vec<JoinHandle<()>>,
    label: String,
}

impl Daemon {
    /// Starts the binary with `args` and exactly these `GORGE_*` settings
    /// (inherited `GORGE_*` variables are removed). When `env` has no
    /// `GORGE_LISTEN_ADDR`, a free loopback port is chosen.
    pub fn spawn(label: &str, args: &[&str], env: &[(String, String)]) -> Self {
        Self::spawn_limited(label, args, env, None)
    }

    /// Like [`Daemon::spawn`]; with `nofile`, the process's soft and hard
    /// limits on open files are set to it first (`ulimit -n`, then `exec`,
    /// so the pid is the daemon's).
    pub fn spawn_limited(
        label: &str,
        args: &[&str],
        env: &[(String, String)],
        nofile: Option<u32>,
    ) -> Self {
        let mut env: Vec<(String, String)> = env.to_vec();
        if !env.iter().any(|(k, _)| k == "GORGE_LISTEN_ADDR") {
            env.push((
                "GORGE_LISTEN_ADDR".into(),
                format!("127.0.0.1:{}", free_port()),
            ));
        }
        let listen = env
            .iter()
            .rev()
            .find(|(k, _)| k == "GORGE_LISTEN_ADDR")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        // A listen address that is not a plain socket address (tests of bad
        // settings) is never talked to; any placeholder will do.
        let addr = listen
            .parse()
            .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 9)));
        let bin = bin();
        let mut command = match nofile {
            None => Command::new(&bin),
            Some(limit) => {
                let mut sh = Command::new("sh");
                sh.args(["-c", "ulimit -n \"$0\" && exec \"$@\""])
                    .arg(limit.to_string())
                    .arg(&bin);
                sh
            }
        };
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("GORGE_") {
                command.env_remove(name);
            }
        }
        command.env_remove("RUST_LOG");
        command.envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("{label}: cannot start {bin}: {e}"));
        let stdout = Captured::default();
        let stderr = Captured::default();
        let mut readers = Vec::new();
        if let Some(out) = child.stdout.take() {
            readers.push(stdout.spawn_reader(out));
        }
        if let Some(err) = child.stderr.take() {
            readers.push(stderr.spawn_reader(err));
        }
        Self {
            child,
            exited: None,
            addr,
            stdout,
            stderr,
            readers,
            label: label.to_owned(),
        }
    }

    /// Starts the daemon and waits until `/healthz` answers 200.
    pub async fn start(label: &str, env: &[(String, String)]) -> Self {
        let mut daemon = Self::spawn(label, &[], env);
        daemon.wait_healthy().await;
        daemon
    }

    /// Polls `/healthz` until it answers 200; panics with the daemon's log
    /// when the process exits or the deadline passes.
    pub async fn wait_healthy(&mut self) {
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.reap(status);
                panic!(
                    "{}: the daemon exited ({status}) before answering /healthz\n{}",
                    self.label,
                    self.log()
                );
            }
            if let Ok(response) = http(self.addr, "GET", "/healthz", &[], b"").await {
                if response.status == 200 {
                    return;
                }
            }
            assert!(
                started.elapsed() < START_DEADLINE,
                "{}: /healthz did not answer 200 within {START_DEADLINE:?}\n{}",
                self.label,
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The diagnostics address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `GET target` (path and query) with these headers.
    pub async fn get(&self, target: &str, headers: &[(&str, &str)]) -> HttpResponse {
        let headers: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        http(self.addr, "GET", target, &headers, b"")
            .await
            .unwrap_or_else(|e| panic!("{}: GET {target}: {e}\n{}", self.label, self.log()))
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process is still running (reaps it if it exited).
    pub fn is_running(&mut self) -> bool {
        if self.exited.is_some() {
            return false;
        }
        match self.child.try_wait() {
            Ok(Some(status)) => {
                self.reap(status);
                false
            }
            Ok(None) => true,
            Err(e) => panic!("{}: waiting for the daemon: {e}", self.label),
        }
    }

    /// `kill -9`: the process dies at once, deliveries in flight and all,
    /// as in a crash or an OOM kill. Returns when it is gone.
    pub async fn kill_hard(&mut self) {
        self.signal("KILL");
        let status = self.wait_exit(START_DEADLINE).await;
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9),
            "{}: expected death by SIGKILL, got {status}",
            self.label
        );
    }

    /// Sends SIGTERM, as an init system would.
    pub fn terminate(&self) {
        self.signal("TERM");
    }

    /// SIGTERM, then waits for the exit and asserts it was clean (code 0).
    pub async fn stop_cleanly(&mut self, deadline: Duration) {
        self.terminate();
        let status = self.wait_exit(deadline).await;
        assert_eq!(status.code(), Some(0), "clean exit\n{}", self.log());
    }

    /// Sends the signal `name` (`TERM`, `INT`, …) with `kill`.
    pub fn signal(&self, name: &str) {
        let pid = self.child.id().to_string();
        let flag = format!("-{name}");
        let status = Command::new("kill")
            .args([flag.as_str(), &pid])
            .status()
            .unwrap_or_else(|e| panic!("run kill {flag}: {e}"));
        assert!(status.success(), "kill {flag} {pid} failed: {status}");
    }

    /// Waits for the process to exit by itself; panics (after killing it)
    /// when it has not within `deadline`.
    pub async fn wait_exit(&mut self, deadline: Duration) -> ExitStatus {
        let started = Instant::now();
        loop {
            if let Some(status) = self.exited {
                return status;
            }
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    self.reap(status);
                    return status;
                }
                Ok(None) => {}
                Err(e) => panic!("{}: waiting for the daemon: {e}", self.label),
            }
            if started.elapsed() > deadline {
                let _ = self.child.kill();
                panic!(
                    "{}: the daemon did not exit within {deadline:?}\n{}",
                    self.label,
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Records the exit and collects the rest of the output (the pipes
    /// close with the process).
    fn reap(&mut self, status: ExitStatus) {
        self.exited = Some(status);
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
    }

    /// What the daemon wrote to stderr (its log) so far.
    pub fn stderr(&self) -> String {
        self.stderr.text()
    }

    /// What the daemon wrote to stdout so far.
    pub fn stdout(&self) -> String {
        self.stdout.text()
    }

    /// Both streams, labelled, for failure messages.
    pub fn log(&self) -> String {
        format!(
            "--- {} stderr ---\n{}--- {} stdout ---\n{}---",
            self.label,
            self.stderr(),
            self.label,
            self.stdout()
        )
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.exited.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() {
            eprintln!("{}", self.log());
        }
    }
}

/// One HTTP response as received.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    /// Status code.
    pub status: u16,
    /// Header names lower-cased, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked.
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// The first header with this (lower-case) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as (lossy) text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One HTTP/1.1 exchange on a fresh connection (`Connection: close`).
pub async fn http(
    addr: SocketAddr,
    method: &str,
    target: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> std::io::Result<HttpResponse> {
    tokio::time::timeout(HTTP_DEADLINE, exchange(addr, method, target, headers, body))
        .await
        .map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no complete response within {HTTP_DEADLINE:?}"),
            )
        })?
}

async fn exchange(
    addr: SocketAddr,
    method: &str,
    target: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> std::io::Result<HttpResponse> {
    let mut stream = TcpStream::connect(addr).await?;
    let mut head = format!("{method} {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !(body.is_empty() && (method == "GET" || method == "HEAD")) {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await?;
    parse_response(&raw, method == "HEAD")
}

fn malformed(what: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.into())
}

fn parse_response(raw: &[u8], head_only: bool) -> std::io::Result<HttpResponse> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| malformed(format!("no end of head in {} bytes", raw.len())))?;
    let head = std::str::from_utf8(&raw[..split]).map_err(|_| malformed("head is not UTF-8"))?;
    let rest = &raw[split + 4..];
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| malformed(format!("bad status line {status_line:?}")))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let find = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let body = if head_only {
        Vec::new()
    } else if find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        dechunk(rest)?
    } else if let Some(length) = find("content-length") {
        let length: usize = length
            .parse()
            .map_err(|_| malformed(format!("bad content-length {length:?}")))?;
        rest.get(..length)
            .ok_or_else(|| malformed(format!("body shorter than {length} bytes")))?
            .to_vec()
    } else {
        rest.to_vec()
    };
    Ok(HttpResponse {
        status,
        headers,
        body,
    })
}

fn dechunk(mut rest: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| malformed("chunk size line"))?;
        let size_text = std::str::from_utf8(&rest[..end]).map_err(|_| malformed("chunk size"))?;
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| malformed(format!("chunk size {size_text:?}")))?;
        rest = &rest[end + 2..];
        if size == 0 {
            return Ok(body);
        }
        body.extend_from_slice(rest.get(..size).ok_or_else(|| malformed("short chunk"))?);
        rest = rest.get(size + 2..).ok_or_else(|| malformed("chunk end"))?;
    }
}

#[test]
fn responses_are_parsed_with_length_or_chunks() {
    let fixed = parse_response(
        b"HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\ncontent-length: 2\r\n\r\n{}",
        false,
    )
    .expect("fixed-length response");
    assert_eq!(fixed.status, 401);
    assert_eq!(fixed.header("content-type"), Some("application/json"));
    assert_eq!(fixed.body, b"{}");
    let chunked = parse_response(
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        false,
    )
    .expect("chunked response");
    assert_eq!(chunked.body, b"abcde");
    assert!(parse_response(b"HTTP/1.1 200 OK\r\n", false).is_err());
}
