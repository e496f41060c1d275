//! A private MariaDB server with its binary log on, for what the shared
//! server (binary log off, and its global settings not ours to change)
//! cannot show: following the log for new rows. Each one gets a fresh data
//! directory under the system's temporary directory and a free loopback
//! port, runs as a child process, and is killed and its directory removed
//! when dropped.
//!
//! Test code: it panics with a clear message when the server cannot be
//! set up.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use crate::daemon_process::free_port;
use crate::mariadb::server_opts_on;

const INSTALL_DB: &str = "mariadb-install-db";
const SERVER: &str = "mariadbd";
const START_DEADLINE: Duration = Duration::from_secs(90);
const START_TRIES: usize = 3;

static STARTED: AtomicU64 = AtomicU64::new(0);

/// A running private server; killed and removed when dropped.
#[derive(Debug)]
pub struct BinlogServer {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl BinlogServer {
    /// Installs a data directory and starts the server on it, binary log
    /// on (`binlog_format` the server's default, `MIXED`), as root with no
    /// password on a free loopback port; returns once it answers.
    pub async fn start() -> Self {
        let mut dir = Scratch(std::env::temp_dir().join(format!(
            "wh_binlog_{}_{}",
            std::process::id(),
            STARTED.fetch_add(1, Ordering::Relaxed)
        )));
        let _ = std::fs::remove_dir_all(&dir.0);
        std::fs::create_dir_all(dir.0.join("tmp")).expect("create the private server's directory");
        install(&dir.0);
        // A port free a moment ago may be taken before the server binds
        // it: then the server exits, and another port is tried.
        for _ in 0..START_TRIES {
            let port = free_port();
            let mut child = spawn_server(&dir.0, port);
            let answered = answers(&mut child, &dir.0, port).await;
            if answered == Ok(true) {
                let dir = std::mem::take(&mut dir.0);
                return Self { child, dir, port };
            }
            let _ = child.kill();
            let _ = child.wait();
            if let Err(why) = answered {
                panic!("{why}");
            }
        }
        panic!("the private server did not start on any of {START_TRIES} ports");
    }

    /// Its loopback port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A root session without a default database.
    pub async fn conn(&self) -> Conn {
        Conn::new(server_opts_on(self.port, None))
            .await
            .expect("connect to the private server as root")
    }

    /// One statement as root.
    pub async fn exec(&self, statement: &str) {
        let mut conn = self.conn().await;
        conn.query_drop(statement)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
        let _ = conn.disconnect().await;
    }
}

/// Whether the server started on `dir` answers on `port` before
/// [`START_DEADLINE`] (`false` when it exited first: the port was taken);
/// an error says why it cannot be used.
async fn answers(child: &mut Child, dir: &Path, port: u16) -> Result<bool, String> {
    let started = Instant::now();
    let ours = format!("{}/", dir.join("data").display());
    loop {
        if let Ok(Some(_exited)) = child.try_wait() {
            return Ok(false);
        }
        if let Ok(mut conn) = Conn::new(server_opts_on(port, None)).await {
            let datadir: Option<String> = conn.query_first("SELECT @@datadir").await.ok().flatten();
            let _ = conn.disconnect().await;
            return match datadir {
                Some(datadir) if datadir == ours => Ok(true),
                other => Err(format!("another server answers on port {port}: {other:?}")),
            };
        }
        if started.elapsed() >= START_DEADLINE {
            let log = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
            return Err(format!(
                "the private server did not answer within {START_DEADLINE:?}; its log:\n{log}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The data directory until a server owns it: removed if setting up
/// fails (an empty path: taken by the server).
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        if !self.0.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Starts the server on `dir` and `port`.
fn spawn_server(dir: &Path, port: u16) -> Child {
    Command::new(SERVER)
        .arg("--no-defaults")
        .arg(format!("--datadir={}", dir.join("data").display()))
        .arg("--user=root")
        .arg(format!("--port={port}"))
        .arg("--bind-address=127.0.0.1")
        .arg(format!("--socket={}", dir.join("sock").display()))
        .arg(format!("--tmpdir={}", dir.join("tmp").display()))
        .arg(format!("--pid-file={}", dir.join("pid").display()))
        .arg(format!("--log-error={}", dir.join("error.log").display()))
        .arg(format!("--log-bin={}", dir.join("data/binlog").display()))
        .arg("--server-id=1")
        .arg("--innodb-buffer-pool-size=32M")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start {SERVER}: {e}"))
}

impl Drop for BinlogServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A fresh data directory: system tables, root without a password.
fn install(dir: &std::path::Path) {
    let output = Command::new(INSTALL_DB)
        .arg("--no-defaults")
        .arg(format!("--datadir={}", dir.join("data").display()))
        .arg("--user=root")
        .arg("--auth-root-authentication-method=normal")
        .arg("--skip-test-db")
        .arg(format!("--tmpdir={}", dir.join("tmp").display()))
        .output()
        .unwrap_or_else(|e| panic!("run {INSTALL_DB}: {e}"));
    assert!(
        output.status.success(),
        "{INSTALL_DB} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}
