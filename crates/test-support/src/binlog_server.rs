//! A private MariaDB server with its binary log on, for what the shared
//! server (binary log off, and its global settings not ours to change)
//! cannot show: following the log for new rows. Each one gets a fresh data
//! directory under the system's temporary directory and a free loopback
//! port, runs as a child process, and is killed and its directory removed
//! when dropped.
//!
//! Test code: it panics with a clear message when the server cannot be
//! set up.

use std::net::{Ipv4Addr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use crate::mariadb::server_opts_on;

const INSTALL_DB: &str = "mariadb-install-db";
const SERVER: &str = "mariadbd";
const START_DEADLINE: Duration = Duration::from_secs(90);

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
        let dir = std::env::temp_dir().join(format!(
            "wh_binlog_{}_{}",
            std::process::id(),
            STARTED.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the private server's directory");
        std::fs::create_dir_all(dir.join("tmp")).expect("create its temporary directory");
        install(&dir);
        let port = free_port();
        let child = Command::new(SERVER)
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
            .unwrap_or_else(|e| panic!("start {SERVER}: {e}"));
        let server = Self { child, dir, port };
        server.wait_until_answering().await;
        server
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

    async fn wait_until_answering(&self) {
        let started = Instant::now();
        loop {
            if let Ok(conn) = Conn::new(server_opts_on(self.port, None)).await {
                let _ = conn.disconnect().await;
                return;
            }
            let log = std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default();
            assert!(
                started.elapsed() < START_DEADLINE,
                "the private server did not answer within {START_DEADLINE:?}; its log:\n{log}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
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

/// A loopback port nothing listens on just now.
fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind a loopback port");
    listener.local_addr().expect("its address").port()
}
