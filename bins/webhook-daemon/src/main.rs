//! `webhook-daemon`: picks what to run from the command line ([`cli`]) and
//! hands over to the library (`webhook_daemon::launch`), which reads the
//! `GORGE_*` settings and owns the exit codes.

mod cli;

use std::process::ExitCode;

use webhook_daemon::{launch, logging};

use crate::cli::Command;

/// jemalloc instead of the C library's malloc: with many calls in flight
/// it keeps the resident set lower (docs/performance.md, "The
/// allocator"). Its settings are built in from `.cargo/config.toml`; the
/// test `allocator` checks the binary runs with them.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = match cli::parse(std::env::args_os()) {
        Ok(cli) => cli,
        Err(err) => {
            // Help and version arrive here too, with exit code 0; a closed
            // output loses the text, never the exit code.
            let _ = err.print();
            return ExitCode::from(u8::try_from(err.exit_code()).unwrap_or(2));
        }
    };
    match cli.command {
        None => launch::run_daemon(),
        Some(Command::Demo { listen }) => launch::run_demo(listen),
        Some(Command::Completions { shell }) => {
            let mut script = Vec::new();
            cli::completions(shell, &mut script);
            logging::print_out(&String::from_utf8_lossy(&script));
            ExitCode::SUCCESS
        }
        Some(Command::Man { dir }) => {
            let mut page = Vec::new();
            match cli::man(dir.as_deref(), &mut page) {
                Ok(()) => {
                    logging::print_out(&String::from_utf8_lossy(&page));
                    ExitCode::SUCCESS
                }
                Err(err) => {
                    logging::print_err(&format!("webhook-daemon man: {err}\n"));
                    ExitCode::FAILURE
                }
            }
        }
    }
}
