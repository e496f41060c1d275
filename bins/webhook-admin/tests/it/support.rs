//! Running the binary: a clean `GORGE_*` environment plus what a test sets,
//! optional stdin, and a generous deadline so a hung process fails the
//! test instead of hanging it.

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;
use webhook_core::Hook;
use webhook_test_support::TestDb;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_webhook-admin");

/// The protocol §7 test-vector key.
pub const KEY: &str = "abcdefghijklmnopqrstuvwxyz234567";

/// A fixed "now" for `explain --at`, so verdicts do not depend on the clock.
pub const NOW: u64 = 1_700_000_000;

/// Bound on one run of the binary; only a hang comes near it.
const DEADLINE: Duration = Duration::from_secs(120);

/// One finished run.
#[derive(Debug)]
pub struct Run {
    /// Exit status (-1 if killed by a signal).
    pub status: i32,
    /// Raw stdout.
    pub stdout_bytes: Vec<u8>,
    /// Stdout as text.
    pub stdout: String,
    /// Stderr as text.
    pub stderr: String,
}

impl Run {
    /// Stdout parsed as one JSON document.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", self.stdout))
    }

    /// Everything the run printed.
    pub fn all_output(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// The binary with every inherited `GORGE_*` and proxy variable removed
/// and `env` set.
pub fn command(env: &[(String, String)]) -> Command {
    let mut cmd = Command::new(BIN);
    for (name, _) in std::env::vars_os() {
        let name_text = name.to_string_lossy();
        if name_text.starts_with("GORGE_") || name_text == "WEBHOOK_HMAC_KEY" {
            cmd.env_remove(name);
        }
    }
    for name in webhook_test_support::daemon_process::PROXY_VARIABLES {
        cmd.env_remove(name);
    }
    cmd.envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    cmd.kill_on_drop(true);
    cmd
}

/// `pairs` as an environment.
pub fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// The environment that points the tool at `db` (plus `extra`).
pub fn db_env(db: &TestDb, extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut vars = env(&[
        ("GORGE_WEBHOOK_NAMESPACE", &db.namespace),
        ("GORGE_WEBHOOK_MYSQL_USER", "root"),
    ]);
    vars.extend(env(extra));
    vars
}

/// Runs the binary with `args`, `stdin` as its input.
pub async fn run_with_stdin(env: &[(String, String)], args: &[&str], stdin: &[u8]) -> Run {
    let mut child = command(env)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn webhook-admin");
    let mut input = child.stdin.take().expect("stdin piped");
    input.write_all(stdin).await.expect("write stdin");
    drop(input);
    let output = tokio::time::timeout(DEADLINE, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("webhook-admin {args:?} did not finish"))
        .expect("wait for webhook-admin");
    Run {
        status: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stdout_bytes: output.stdout,
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Runs the binary with `args` and empty stdin.
pub async fn run(env: &[(String, String)], args: &[&str]) -> Run {
    run_with_stdin(env, args, b"").await
}

/// Runs the binary against `db`.
pub async fn on_db(db: &TestDb, args: &[&str]) -> Run {
    run(&db_env(db, &[]), args).await
}

/// A hook with the test key and a URI carrying a credential, so tests can
/// check neither is printed unasked.
pub fn hook(phid: &str, name: &str, status: &str) -> Hook {
    Hook {
        phid: phid.to_owned(),
        name: name.to_owned(),
        uri: format!("https://hookuser:uri-secret@example.invalid/{name}"),
        status: status.to_owned(),
        hmac_key: KEY.to_owned(),
    }
}
