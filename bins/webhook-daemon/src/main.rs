//! `webhook-daemon`: picks what to run from the command line and hands
//! over to the library (`webhook_daemon::launch`), which reads the
//! `GORGE_*` settings and owns the exit codes.

use std::process::ExitCode;

use webhook_daemon::{config, launch};

/// jemalloc instead of the C library's malloc: with many calls in flight
/// it keeps the resident set lower (docs/performance.md, "The
/// allocator"). Its settings are built in from `.cargo/config.toml`; the
/// test `allocator` checks the binary runs with them.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    match std::env::args().nth(1).as_deref() {
        Some("--help" | "-h" | "help") => {
            print!("{}", config::help());
            ExitCode::SUCCESS
        }
        Some("demo") => launch::run_demo(std::env::args().skip(2)),
        Some("--version" | "-V") => {
            println!("webhook-daemon {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Some(other) => {
            eprintln!("webhook-daemon: unknown argument {other:?}; see --help");
            ExitCode::from(2)
        }
        None => launch::run_daemon(),
    }
}
