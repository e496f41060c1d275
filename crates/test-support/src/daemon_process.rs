//! Running a `webhook-daemon` binary as a child process, for the e2e tests
//! and the bench alike: the caller names the binary (cargo builds it; this
//! crate never does), exactly the `GORGE_*` settings it gets (inherited
//! ones are removed) and any other variables (libfaketime's, to shift its
//! clock), a free loopback diagnostics port unless one is given,
//! stdout and stderr captured by reader threads (stderr optionally copied
//! to a file as it arrives) — or given one pipe nobody reads, or a pipe whose
//! reader is gone ([`Output`]) —, readiness by polling `/healthz`,
//! `/metrics` scraped over raw HTTP, signals through `kill`, waiting for
//! the exit, and a kill (and reap) in `Drop`.
//!
//! Everything waits on conditions with deadlines; nothing sleeps to
//! synchronise. Test code: failures panic with the daemon's log.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::raw_http::{http, HttpResponse};

/// How long a daemon may take to answer `/healthz` after its start. Very
/// generous: the machine may be busy compiling.
pub const START_DEADLINE: Duration = Duration::from_secs(60);

/// A port on 127.0.0.1 that was free a moment ago (bound, read, released).
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0 to find a free port");
    listener
        .local_addr()
        .expect("local address of the probe listener")
        .port()
}

/// The environment's proxy variables, which the daemon reads unless told
/// otherwise: removed from what a child inherits, so a proxy set where the
/// tests run does not change what they test.
pub const PROXY_VARIABLES: [&str; 7] = [
    "http_proxy",
    "HTTP_PROXY",
    "https_proxy",
    "HTTPS_PROXY",
    "no_proxy",
    "NO_PROXY",
    "REQUEST_METHOD",
];

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
    /// Reads `stream` to its end on a thread, keeping every byte and
    /// copying it to `copy` as it arrives.
    fn spawn_reader(
        &self,
        mut stream: impl Read + Send + 'static,
        mut copy: Option<File>,
    ) -> JoinHandle<()> {
        let sink = Arc::clone(&self.0);
        std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            loop {
                match stream.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if let Some(file) = copy.as_mut() {
                            let _ = file.write_all(&chunk[..n]);
                        }
                        sink.lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .extend_from_slice(&chunk[..n]);
                    }
                }
            }
        })
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }
}

/// Where the daemon's stdout and stderr go.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Output {
    /// Pipes the harness reads to their end as the bytes arrive.
    #[default]
    Captured,
    /// One pipe for both, as systemd gives a service its journal stream,
    /// that nobody reads until [`DaemonProcess::read_output`] (then read
    /// as stderr): once its buffer (64 KiB on Linux) is full, every write
    /// to either stream blocks, as with a stalled journald or log shipper.
    Unread,
    /// Pipes whose reading end was closed before the daemon started: every
    /// write to them fails (EPIPE), as when the log's reader has died.
    ReaderClosed,
}

/// The writing end of a pipe whose reading end is already closed: given to
/// `true` as its stdin, which it exits without reading.
fn pipe_without_reader() -> OwnedFd {
    let mut child = Command::new("true")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("run true: {e}"));
    let writer = child.stdin.take().expect("the piped stdin of true");
    let status = child
        .wait()
        .unwrap_or_else(|e| panic!("wait for true: {e}"));
    assert!(status.success(), "true failed: {status}");
    writer.into()
}

/// How to start a daemon process: [`DaemonProcess::command`], then the
/// options, then [`spawn`](Self::spawn).
#[derive(Debug, Clone)]
pub struct DaemonCommand {
    bin: PathBuf,
    label: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
    nofile: Option<u32>,
    stderr_copy: Option<PathBuf>,
    output: Output,
}

impl DaemonCommand {
    /// Command-line arguments.
    pub fn args(mut self, args: &[&str]) -> Self {
        self.args.extend(args.iter().map(|a| (*a).to_owned()));
        self
    }

    /// Exactly these `GORGE_*` settings (inherited `GORGE_*` variables are
    /// removed; later entries win), and any other variable given, such as
    /// [`crate::faketime::shifted_clock`]'s. Without `GORGE_LISTEN_ADDR`, a
    /// free loopback port is chosen.
    pub fn envs(mut self, env: &[(String, String)]) -> Self {
        self.env.extend(env.iter().cloned());
        self
    }

    /// Sets the process's soft and hard limits on open files first
    /// (`ulimit -n`, then `exec`, so the pid is the daemon's).
    pub fn nofile(mut self, limit: Option<u32>) -> Self {
        self.nofile = limit;
        self
    }

    /// Also copies stderr (the log) to this file as it arrives, for a
    /// human to read after a long run.
    pub fn copy_stderr_to(mut self, path: &Path) -> Self {
        self.stderr_copy = Some(path.to_owned());
        self
    }

    /// Where stdout and stderr go (both the same way); captured unless
    /// told otherwise.
    pub fn output(mut self, output: Output) -> Self {
        self.output = output;
        self
    }

    /// The listen address as given or chosen, and the settings with it.
    fn listen(&self) -> (SocketAddr, Vec<(String, String)>) {
        let mut env = self.env.clone();
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
        (addr, env)
    }

    /// The binary, or `sh` setting the descriptor limit and, for
    /// [`Output::Unread`], pointing stdout at stderr's pipe before it
    /// `exec`s the binary (so the pid is the daemon's).
    fn command(&self, env: &[(String, String)]) -> Command {
        let one_pipe = self.output == Output::Unread;
        let mut command = if self.nofile.is_none() && !one_pipe {
            Command::new(&self.bin)
        } else {
            let limit = if self.nofile.is_some() {
                "ulimit -n \"$0\" && "
            } else {
                ""
            };
            let redirect = if one_pipe { " >&2" } else { "" };
            let mut sh = Command::new("sh");
            sh.arg("-c")
                .arg(format!("{limit}exec \"$@\"{redirect}"))
                .arg(
                    self.nofile
                        .map_or_else(|| "sh".to_owned(), |n| n.to_string()),
                )
                .arg(&self.bin);
            sh
        };
        command.args(&self.args).stdin(Stdio::null());
        match self.output {
            Output::Captured | Output::Unread => {
                command.stdout(Stdio::piped()).stderr(Stdio::piped());
            }
            Output::ReaderClosed => {
                let stdout = pipe_without_reader();
                let stderr = stdout
                    .try_clone()
                    .unwrap_or_else(|e| panic!("duplicate a pipe's descriptor: {e}"));
                command.stdout(stdout).stderr(stderr);
            }
        }
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("GORGE_") {
                command.env_remove(name);
            }
        }
        for name in PROXY_VARIABLES {
            command.env_remove(name);
        }
        command.env_remove("RUST_LOG");
        command.envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        command
    }

    /// Starts the process; panics when it cannot.
    pub fn spawn(self) -> DaemonProcess {
        let (addr, env) = self.listen();
        let label = self.label.clone();
        let bin = self.bin.display().to_string();
        let stderr_copy = self.stderr_copy.as_ref().map(|path| {
            File::create(path).unwrap_or_else(|e| panic!("{label}: create {}: {e}", path.display()))
        });
        let started = Instant::now();
        let mut child = self
            .command(&env)
            .spawn()
            .unwrap_or_else(|e| panic!("{label}: cannot start {bin}: {e}"));
        let mut daemon = DaemonProcess {
            unread: Some(Unread {
                stdout: child.stdout.take(),
                stderr: child.stderr.take(),
                stderr_copy,
            }),
            child,
            exited: None,
            addr,
            started,
            stdout: Captured::default(),
            stderr: Captured::default(),
            readers: Vec::new(),
            label,
            output: self.output,
        };
        if self.output == Output::Captured {
            daemon.read_output();
        }
        daemon
    }
}

/// The reading ends of the daemon's pipes before anyone reads them.
struct Unread {
    stdout: Option<std::process::ChildStdout>,
    stderr: Option<std::process::ChildStderr>,
    stderr_copy: Option<File>,
}

/// A running daemon process; killed (and reaped) when dropped.
pub struct DaemonProcess {
    child: Child,
    exited: Option<ExitStatus>,
    addr: SocketAddr,
    started: Instant,
    stdout: Captured,
    stderr: Captured,
    /// Held open, unread, until [`DaemonProcess::read_output`].
    unread: Option<Unread>,
    readers: Vec<JoinHandle<()>>,
    label: String,
    output: Output,
}

impl DaemonProcess {
    /// How to start `bin`; `label` names it in failure messages.
    pub fn command(bin: impl AsRef<Path>, label: &str) -> DaemonCommand {
        DaemonCommand {
            bin: bin.as_ref().to_owned(),
            label: label.to_owned(),
            args: Vec::new(),
            env: Vec::new(),
            nofile: None,
            stderr_copy: None,
            output: Output::default(),
        }
    }

    /// Starts reading stdout and stderr, to their end, from where they
    /// are: at once for [`Output::Captured`], when the test says so for
    /// [`Output::Unread`] (what the pipes hold comes first). Once only;
    /// nothing to read for [`Output::ReaderClosed`].
    pub fn read_output(&mut self) {
        let Some(unread) = self.unread.take() else {
            return;
        };
        if let Some(out) = unread.stdout {
            self.readers.push(self.stdout.spawn_reader(out, None));
        }
        if let Some(err) = unread.stderr {
            self.readers
                .push(self.stderr.spawn_reader(err, unread.stderr_copy));
        }
        if self.exited.is_some() {
            // The pipes hold all there will be: read it now.
            for reader in self.readers.drain(..) {
                let _ = reader.join();
            }
        }
    }

    /// Polls `/healthz` until it answers 200; panics with the daemon's log
    /// when the process exits or the deadline passes.
    pub async fn wait_healthy(&mut self) {
        let started = Instant::now();
        loop {
            if let Some(status) = self.exit_status() {
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

    /// When the process was started.
    pub fn started(&self) -> Instant {
        self.started
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

    /// The `/metrics` text (no service token), or why it could not be read.
    pub async fn try_metrics(&self) -> Result<String, String> {
        let response = http(self.addr, "GET", "/metrics", &[], b"")
            .await
            .map_err(|e| format!("GET /metrics: {e}"))?;
        match response.status {
            200 => Ok(response.text()),
            status => Err(format!("/metrics answered {status}: {}", response.text())),
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// How the process exited, if it has (reaps it then).
    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        if self.exited.is_some() {
            return self.exited;
        }
        match self.child.try_wait() {
            Ok(Some(status)) => {
                self.reap(status);
                Some(status)
            }
            Ok(None) => None,
            Err(e) => panic!("{}: waiting for the daemon: {e}", self.label),
        }
    }

    /// Whether the process is still running (reaps it if it exited).
    pub fn is_running(&mut self) -> bool {
        self.exit_status().is_none()
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
        self.stop_cleanly_with("TERM", deadline).await;
    }

    /// Sends the signal `name`, then waits for the exit and asserts it was
    /// clean (code 0).
    pub async fn stop_cleanly_with(&mut self, name: &str, deadline: Duration) {
        self.signal(name);
        let status = self.wait_exit(deadline).await;
        assert_eq!(
            status.code(),
            Some(0),
            "clean exit after SIG{name}\n{}",
            self.log()
        );
    }

    /// Sends the signal `name` (`TERM`, `INT`, `STOP`, `CONT`, …) with
    /// `kill`.
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
        match self.try_wait_exit(deadline).await {
            Some(status) => status,
            None => {
                let _ = self.child.kill();
                panic!(
                    "{}: the daemon did not exit within {deadline:?}\n{}",
                    self.label,
                    self.log()
                );
            }
        }
    }

    /// Waits up to `deadline` for the process to exit by itself; `None`
    /// (and the process left running) when it has not.
    pub async fn try_wait_exit(&mut self, deadline: Duration) -> Option<ExitStatus> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.exit_status() {
                return Some(status);
            }
            if started.elapsed() > deadline {
                return None;
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
        let unread = match (self.output, self.unread.is_some()) {
            (Output::ReaderClosed, _) => " (given a pipe without a reader: nothing to show)",
            (Output::Unread, true) => " (given a pipe nobody reads yet: nothing to show)",
            _ => "",
        };
        format!(
            "--- {} stderr{unread} ---\n{}--- {} stdout ---\n{}---",
            self.label,
            self.stderr(),
            self.label,
            self.stdout()
        )
    }
}

impl std::fmt::Debug for DaemonProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaemonProcess")
            .field("label", &self.label)
            .field("pid", &self.child.id())
            .field("addr", &self.addr)
            .field("exited", &self.exited)
            .finish()
    }
}

impl Drop for DaemonProcess {
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
