//! `webhook-daemon`: picks what to run from the command line and hands
//! over to the library (`webhook_daemon::launch`), which reads the
//! `GORGE_*` settings and owns the exit codes.

use std::process::ExitCode;

use webhook_daemon::{config, launch, logging};

/// jemalloc instead of the C library's malloc: with many calls in flight
/// it keeps the resident set lower (docs/performance.md, "The
/// allocator"). Its settings are built in from `.cargo/config.toml`; the
/// test `allocator` checks the binary runs with them.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    match std::env::args().nth(1).as_deref() {
        Some("--help" | "-h" | "help") => {
            logging::print_out(&config::help());
            ExitCode::SUCCESS
        }
        Some("demo") => launch::run_demo(std::env::args().skip(2)),
        Some("--version" | "-V") => {
            logging::print_out(&format!("webhook-daemon {}\n", env!("CARGO_PKG_VERSION")));
            ExitCode::SUCCESS
        }
        Some(other) => {
            logging::print_err(&format!(
                "webhook-daemon: unknown argument {other:?}; see --help\n"
            ));
            ExitCode::from(2)
        }
        None => launch::run_daemon(),
    }
}
