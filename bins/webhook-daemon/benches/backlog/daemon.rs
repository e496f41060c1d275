//! The daemon as the bench runs it: test-support's [`DaemonProcess`]
//! started with the bench's settings (the binary cargo built for the
//! bench, or `--daemon-bin`), its log copied to a temporary file for a
//! human to read; whether it is still up, SIGTERM with a grace period, and
//! the tail of its log when a check failed. Also the receiver's per-hook
//! answers, since the daemon's hooks are the bench's `/hook/<i>` paths.

use std::path::{Path, PathBuf};
use std::time::Duration;

use webhook_test_support::{DaemonProcess, Receiver, Reply};

/// Where the daemon's log is copied.
fn log_path() -> PathBuf {
    std::env::temp_dir().join(format!("webhook-bench-{}.log", std::process::id()))
}

/// Starts `bin`, or the daemon cargo built for this bench, with exactly
/// `env`; does not wait for it (the drain is timed from the start).
pub(crate) fn spawn(env: &[(String, String)], bin: Option<&Path>) -> DaemonProcess {
    let log = log_path();
    let bin = bin.unwrap_or(Path::new(env!("CARGO_BIN_EXE_webhook-daemon")));
    let daemon = DaemonProcess::command(bin, "webhook-daemon")
        .envs(env)
        .copy_stderr_to(&log)
        .spawn();
    eprintln!(
        "bench: daemon {} pid {}, log {}",
        bin.display(),
        daemon.pid(),
        log.display()
    );
    daemon
}

/// `Ok` while the daemon runs; why not once it has exited.
pub(crate) fn alive(daemon: &mut DaemonProcess) -> Result<(), String> {
    match daemon.exit_status() {
        None => Ok(()),
        Some(status) => Err(format!("webhook-daemon exited early ({status})")),
    }
}

/// SIGTERM, then up to `grace` for a clean exit; true if it exited 0.
pub(crate) async fn stop(daemon: &mut DaemonProcess, grace: Duration) -> bool {
    if daemon.is_running() {
        daemon.terminate();
    }
    daemon
        .try_wait_exit(grace)
        .await
        .is_some_and(|status| status.success())
}

/// The last `lines` of the daemon's log, on stderr.
pub(crate) fn print_log_tail(daemon: &DaemonProcess, lines: usize) {
    let text = daemon.stderr();
    let all: Vec<&str> = text.lines().collect();
    eprintln!("bench: last lines of {}:", log_path().display());
    for line in &all[all.len().saturating_sub(lines)..] {
        eprintln!("  {line}");
    }
}

/// Hooks `0..hooks` (`/hook/<i>`) answer `reply`; the others 200 at once.
pub(crate) fn answer_hooks(receiver: &Receiver, hooks: usize, reply: Reply) {
    for i in 0..hooks {
        receiver.always(&format!("/hook/{i}"), reply);
    }
}
