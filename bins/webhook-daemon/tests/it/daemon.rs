//! The e2e tests' handle on the real `webhook-daemon` binary (built by
//! cargo for this test target, never by the tests): test-support's
//! [`DaemonProcess`] started with [`bin`], plus the free ports, database
//! settings and raw HTTP client the tests use beside it.

use std::ops::{Deref, DerefMut};

use webhook_test_support::DaemonProcess;

pub use webhook_test_support::daemon_process::{database_env, free_port, Output};
pub use webhook_test_support::raw_http::http;
pub use webhook_test_support::HttpResponse;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_webhook-daemon");

/// [`BIN`], unless `WEBHOOK_DAEMON_BIN` names another build of it (a
/// release build, or a deliberately broken one, to check that the tests
/// notice).
pub fn bin() -> String {
    std::env::var("WEBHOOK_DAEMON_BIN").unwrap_or_else(|_| BIN.to_owned())
}

/// A running `webhook-daemon` process ([`bin`]); killed (and reaped) when
/// dropped. Everything else is [`DaemonProcess`]'s.
#[derive(Debug)]
pub struct Daemon(DaemonProcess);

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
        Self(
            DaemonProcess::command(bin(), label)
                .args(args)
                .envs(env)
                .nofile(nofile)
                .spawn(),
        )
    }

    /// Like [`Daemon::spawn`], with stdout and stderr going where `output`
    /// says (a pipe nobody reads, one whose reader is gone).
    pub fn spawn_to(label: &str, args: &[&str], env: &[(String, String)], output: Output) -> Self {
        Self(
            DaemonProcess::command(bin(), label)
                .args(args)
                .envs(env)
                .output(output)
                .spawn(),
        )
    }

    /// Starts the daemon and waits until `/healthz` answers 200.
    pub async fn start(label: &str, env: &[(String, String)]) -> Self {
        let mut daemon = Self::spawn(label, &[], env);
        daemon.wait_healthy().await;
        daemon
    }

    /// The process id (also as a path, `Daemon::pid`, for `map`).
    pub fn pid(&self) -> u32 {
        self.0.pid()
    }
}

impl Deref for Daemon {
    type Target = DaemonProcess;

    fn deref(&self) -> &DaemonProcess {
        &self.0
    }
}

impl DerefMut for Daemon {
    fn deref_mut(&mut self) -> &mut DaemonProcess {
        &mut self.0
    }
}
