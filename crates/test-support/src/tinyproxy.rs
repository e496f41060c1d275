//! A real egress proxy for the proxy tests: Debian's tinyproxy
//! (`tinyproxy-bin`, which `cargo xtask ci` installs), started in the
//! foreground on a free loopback port with a configuration of the test's
//! own, optionally asking for Basic credentials. It forwards absolute-form
//! requests and opens `CONNECT` tunnels to any port; its log counts the
//! requests it read, so a test can show it was never asked.
//! Killed, and its directory removed, when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The binary Debian's `tinyproxy-bin` installs.
pub const TINYPROXY: &str = "/usr/bin/tinyproxy";

/// How long it may take to listen.
const START_DEADLINE: Duration = Duration::from_secs(20);

/// Ports tried before giving up (one may be taken before it binds it).
const START_TRIES: usize = 3;

static STARTED: AtomicU64 = AtomicU64::new(0);

/// A running tinyproxy.
#[derive(Debug)]
pub struct Tinyproxy {
    child: Option<Child>,
    dir: PathBuf,
    port: u16,
}

impl Tinyproxy {
    /// A proxy that asks for no credentials.
    pub async fn start() -> Self {
        Self::start_with(None).await
    }

    /// A proxy that answers 407 unless `Proxy-Authorization` carries
    /// `user`:`password`.
    pub async fn with_credentials(user: &str, password: &str) -> Self {
        Self::start_with(Some((user, password))).await
    }

    async fn start_with(credentials: Option<(&str, &str)>) -> Self {
        assert!(
            Path::new(TINYPROXY).exists(),
            "{TINYPROXY} is missing: install Debian's tinyproxy-bin (cargo xtask ci does)"
        );
        let dir = std::env::temp_dir().join(format!(
            "wh_tinyproxy_{}_{}",
            std::process::id(),
            STARTED.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create tinyproxy's directory");
        for _ in 0..START_TRIES {
            let port = free_port();
            write_config(&dir, port, credentials);
            let mut child = Command::new(TINYPROXY)
                .arg("-d")
                .arg("-c")
                .arg(dir.join("tinyproxy.conf"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("start {TINYPROXY}: {e}"));
            if listening(&mut child, port).await {
                return Self {
                    child: Some(child),
                    dir,
                    port,
                };
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        let log = std::fs::read_to_string(dir.join("tinyproxy.log")).unwrap_or_default();
        let _ = std::fs::remove_dir_all(&dir);
        panic!("tinyproxy did not listen on any of {START_TRIES} ports; its log:\n{log}");
    }

    /// Its loopback port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:port`, or with `user:password@` before the host.
    pub fn url(&self, credentials: Option<(&str, &str)>) -> String {
        match credentials {
            Some((user, password)) => format!("http://{user}:{password}@127.0.0.1:{}", self.port),
            None => format!("http://127.0.0.1:{}", self.port),
        }
    }

    /// Requests it read so far (`CONNECT` or forwarded), by its log; a
    /// connection that sent nothing (its own start-up check) is not one.
    pub fn requests(&self) -> usize {
        self.log().matches("Request (file descriptor").count()
    }

    /// `CONNECT` requests it read so far, by its log.
    pub fn tunnels(&self) -> usize {
        self.log().matches("): CONNECT ").count()
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("tinyproxy.log")).unwrap_or_default()
    }

    /// Stops it: its port refuses connections from now on.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Tinyproxy {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn write_config(dir: &Path, port: u16, credentials: Option<(&str, &str)>) {
    let mut config = format!(
        "Port {port}\nListen 127.0.0.1\nAllow 127.0.0.1\nTimeout 30\nMaxClients 64\n\
         LogLevel Connect\nLogFile \"{}\"\n",
        dir.join("tinyproxy.log").display()
    );
    if let Some((user, password)) = credentials {
        config.push_str(&format!("BasicAuth {user} {password}\n"));
    }
    std::fs::write(dir.join("tinyproxy.conf"), config).expect("write tinyproxy's configuration");
}

/// Whether the proxy started as `child` listens on `port` in time (`false`
/// when it exited first: the port was taken).
async fn listening(child: &mut Child, port: u16) -> bool {
    let started = Instant::now();
    while started.elapsed() < START_DEADLINE {
        if let Ok(Some(_exited)) = child.try_wait() {
            return false;
        }
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free loopback port")
}
