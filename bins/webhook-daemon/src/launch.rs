//! The process around the daemon: the environment as the settings' lookup,
//! logging (its output is [`crate::logging`]'s), the runtime, and exit
//! codes — 0 after a clean shutdown, 1 when it could not run (e.g. the
//! listen address is taken), 2 for a bad setting. `main.rs` only picks one
//! of these from the command line.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use tracing_subscriber::EnvFilter;

use crate::config::{env_lookup, DaemonConfig, LogFormat};
use crate::logging::{print_err, LogOutput, Stream};
use crate::{app, demo};

/// The target the start-up failure lines had when they were written from the binary's
/// `main.rs`; operators' filters and log searches may name it.
const LOG_TARGET: &str = "webhook_daemon";

/// How long the runtime may take to drop its remaining tasks at exit.
const RUNTIME_SHUTDOWN_BOUND: Duration = Duration::from_secs(1);

/// Reads the settings from the environment and runs the daemon until it
/// is shut down.
pub fn run_daemon() -> ExitCode {
    // Still the only thread: the driver's bounds are environment variables.
    webhook_store_mysql::bound_driver_buffers();
    let config = match DaemonConfig::from_lookup(&env_lookup) {
        Ok(config) => config,
        Err(err) => {
            print_err(&format!("webhook-daemon: bad setting {err}\n"));
            return ExitCode::from(2);
        }
    };
    let log = init_logging(&config);
    let exit = run_until_stopped(config, &log);
    log.flush_at_exit();
    exit
}

/// The daemon once its log is set up.
fn run_until_stopped(config: DaemonConfig, log: &LogOutput) -> ExitCode {
    // One thread: the daemon mostly waits on sockets, and on a
    // multi-thread runtime the wake-ups between workers cost about a
    // quarter of its CPU per delivery (docs/performance.md).
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            tracing::error!(target: LOG_TARGET, event = "runtime_failed", error = %err);
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(app::run(config, log.dropped()));
    // Whatever is still running (a delivery abandoned after the grace, a
    // name lookup on the blocking pool) is dropped, not waited for: the
    // process exits in bounded time whatever the database or a receiver
    // does.
    runtime.shutdown_timeout(RUNTIME_SHUTDOWN_BOUND);
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!(target: LOG_TARGET, event = "startup_failed", error = %err);
            ExitCode::FAILURE
        }
    }
}

/// `webhook-daemon demo [--listen ADDR]`: the self-contained demo, logging
/// the dispatcher's events as it goes and serving them on `listen` (or a
/// free loopback port).
pub fn run_demo(listen: Option<SocketAddr>) -> ExitCode {
    let log = LogOutput::to(Stream::Stdout);
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::new("webhook_core=info,webhook_daemon=info"))
        .with_ansi(ansi(std::io::stdout().is_terminal()))
        .with_target(false)
        .with_timer(tracing_subscriber::fmt::time::uptime())
        .with_writer(log.writer())
        .init();
    let exit = run_demo_to_end(listen);
    log.flush_at_exit();
    exit
}

/// The demo once its log is set up.
fn run_demo_to_end(listen: Option<SocketAddr>) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            print_err(&format!(
                "webhook-daemon demo: cannot start the runtime: {err}\n"
            ));
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(demo::run(listen)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            print_err(&format!("webhook-daemon demo: {err}\n"));
            ExitCode::FAILURE
        }
    }
}

fn init_logging(config: &DaemonConfig) -> LogOutput {
    let log = LogOutput::to(Stream::Stderr);
    // Validated in `DaemonConfig`; `info` is only a fallback.
    let filter = EnvFilter::try_new(&config.log_filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi(std::io::stderr().is_terminal()))
        .with_writer(log.writer());
    match config.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
    log
}

/// Whether a log on a stream that `is_terminal` (or not) is coloured, by
/// `NO_COLOR` from this process's environment.
fn ansi(is_terminal: bool) -> bool {
    crate::config::colour(is_terminal, env_lookup("NO_COLOR").as_deref())
}
