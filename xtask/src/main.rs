//! `cargo xtask`: project chores that would otherwise be shell scripts.
//!
//! - `ci`: everything a submission must pass (fmt, clippy, the whole test
//!   suite with MariaDB started when it is not running).
//! - `layers`: the crate layering rules of docs/ARCHITECTURE.md, checked on
//!   the real dependency graph.
//! - `contract-test`: the diagnostics API's fixtures (`contracts/`) against
//!   the real daemon binary; `cargo test --workspace` (and so `ci`) runs
//!   them as well.

mod layers;
mod mariadb;
#[cfg(test)]
mod tidy;

use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("layers") => layers::check().map(|()| println!("layering rules hold")),
        Some("mariadb") => mariadb::ensure_running(),
        Some("contract-test") => contract_test(&args[1..]),
        _ => {
            eprintln!(
                "usage: cargo xtask <command>\n\n\
                 commands:\n  \
                 ci       fmt, clippy and the whole test suite (starts MariaDB if needed)\n  \
                 layers   check the crate layering rules\n  \
                 mariadb  start the local MariaDB if it is not running\n  \
                 contract-test  run contracts/api/*.json against the real daemon and check\n           \
                 contracts/openapi.json (needs MariaDB; extra args go to the test binary)"
            );
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The whole check, in the order that fails fastest.
fn ci() -> Result<(), String> {
    run("cargo", &["fmt", "--all", "--", "--check"])?;
    layers::check()?;
    run(
        "cargo",
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
    )?;
    mariadb::ensure_running()?;
    run("cargo", &["test", "--workspace"])?;
    Ok(())
}

/// The API contract (bins/webhook-daemon/tests/it/contracts.rs): every
/// fixture against the real binary, started per database setup.
fn contract_test(extra: &[String]) -> Result<(), String> {
    mariadb::ensure_running()?;
    let mut args = vec!["test", "-p", "webhook-daemon", "--test", "it", "contracts"];
    args.extend(extra.iter().map(String::as_str));
    run("cargo", &args)
}

/// Runs a command inheriting stdio; an error names the command.
pub(crate) fn run(program: &str, args: &[&str]) -> Result<(), String> {
    eprintln!("xtask: running {program} {}", args.join(" "));
    let status = Command::new(program)
        .args(args)
        .status()
        .map_err(|e| format!("could not start {program}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{program} {} failed ({status})", args.join(" ")))
    }
}
