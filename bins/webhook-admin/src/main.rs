//! `webhook-admin`, the operator's tool for the webhook daemon: shows the
//! effective settings and their pitfalls, the queue's numbers, why one
//! request is or is not being delivered (by the dispatcher's own rules),
//! the exact bytes and signature it would send, a local receiver to try
//! hooks against, a live view of the daemon's events, and `requeue` for
//! failed requests, and `history`, the attempts the daemon recorded in its
//! attempt history.
//!
//! It composes the workspace's libraries and holds no delivery logic of
//! its own. Every command reads Phorge's tables through the read-only
//! `MysqlReader` (plain `SELECT`s), except `requeue --apply`, the one
//! command that writes (module `requeue`, the only one given the writer).
//! Exit statuses are documented in [`error::EXIT_STATUS_HELP`].

mod cli;
mod clock;
mod daemon_api;
mod doctor;
mod error;
mod explain;
mod history;
mod inspect;
mod listen;
mod out;
mod requeue;
mod settings;
mod signing;
mod sse;
mod watch;

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use webhook_core::UnixTime;
use webhook_daemon::config::{env_lookup, LISTEN, SERVICE_TOKEN};

use crate::cli::{Cli, Command};
use crate::error::{exit, AdminError};
use crate::inspect::{DaemonAsk, Db, RequestRef};
use crate::settings::AdminConfig;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let status = match run(cli) {
        Ok(status) => status,
        Err(err) => {
            eprintln!("webhook-admin: {err}");
            err.exit_status()
        }
    };
    ExitCode::from(status)
}

fn run(cli: Cli) -> Result<u8, AdminError> {
    match cli.command {
        Command::Config(output) => {
            let report = settings::report(&env_lookup)?;
            if output.json {
                out::emit_line(report.to_json())?;
            } else {
                out::emit(&report.to_text())?;
            }
            Ok(exit::OK)
        }
        Command::Sign { key } => signing::run_sign(&signing::key_required(&key)?),
        Command::Verify { key, signature } => {
            signing::run_verify(&signing::key_required(&key)?, &signature)
        }
        Command::Listen {
            addr,
            key,
            status,
            delay_ms,
            count,
        } => {
            let status = http::StatusCode::from_u16(status).map_err(|_| {
                AdminError::Usage(format!("--status {status} is not an HTTP status"))
            })?;
            let key = signing::key_given(&key)?;
            runtime()?.block_on(listen::run(listen::ListenOptions {
                addr,
                key,
                status,
                delay: Duration::from_millis(delay_ms),
                count,
            }))
        }
        Command::Watch {
            url,
            hook,
            failures_only,
            json,
            count,
            summary_every,
            from_file,
        } => {
            let source = match (from_file, url) {
                (Some(path), _) => watch::Source::File(path),
                (None, Some(url)) => watch::Source::Url(watch::StreamUrl::parse(&url)?),
                (None, None) => watch::Source::Url(watch::StreamUrl::from_listen_addr(
                    env_lookup(LISTEN.name).as_deref(),
                )?),
            };
            let colour = webhook_daemon::config::colour(
                std::io::stdout().is_terminal(),
                env_lookup("NO_COLOR").as_deref(),
            );
            runtime()?.block_on(watch::run(watch::WatchOptions {
                source,
                token: env_lookup(SERVICE_TOKEN.name),
                view: watch::ViewOptions {
                    hook,
                    failures_only,
                    json,
                    colour,
                    count,
                    summary_every,
                },
            }))
        }
        Command::Completions { shell } => {
            let mut script = Vec::new();
            cli::completions(shell, &mut script);
            out::emit(&String::from_utf8_lossy(&script))?;
            Ok(exit::OK)
        }
        Command::Man { dir } => {
            let mut page = Vec::new();
            cli::man(dir.as_deref(), &mut page).map_err(AdminError::Output)?;
            out::emit(&String::from_utf8_lossy(&page))?;
            Ok(exit::OK)
        }
        Command::Stats(output) => {
            let (_, db, rt) = open_db()?;
            rt.block_on(closing(&db, inspect::stats(&db, output.json)))
        }
        Command::Hooks {
            output,
            show_uri,
            url,
        } => {
            let daemon = daemon_ask(url)?;
            let (config, db, rt) = open_db()?;
            rt.block_on(closing(&db, async {
                let now = judging_time(&db, None).await?;
                inspect::hooks(&db, &config, now, output.json, show_uri, &daemon).await
            }))
        }
        Command::Explain {
            request,
            output,
            at,
            url,
        } => {
            let which = RequestRef::parse(&request)?;
            let daemon = daemon_ask(url)?;
            let (config, db, rt) = open_db()?;
            rt.block_on(closing(&db, async {
                let now = judging_time(&db, at).await?;
                inspect::explain_request(&db, &config, &which, now, output.json, &daemon).await
            }))
        }
        Command::Doctor(output) => {
            let daemon = daemon_ask(None)?;
            let (config, db, rt) = open_db()?;
            rt.block_on(closing(&db, async {
                let now = judging_time(&db, None).await?;
                doctor::run(&db, &config, now, &daemon, output.json).await
            }))
        }
        Command::Requeue {
            requests,
            hook,
            since,
            until,
            error,
            apply,
            output,
        } => {
            let now = clock::now();
            let time = |text: Option<String>, flag: &str| {
                text.map(|t| clock::parse_time(&t, now))
                    .transpose()
                    .map_err(|reason| AdminError::Usage(format!("{flag}: {reason}")))
            };
            let selection = requeue::Selection {
                named: requests
                    .iter()
                    .map(|r| RequestRef::parse(r))
                    .collect::<Result<_, _>>()?,
                hook,
                since: time(since, "--since")?,
                until: time(until, "--until")?,
                error: error
                    .as_deref()
                    .map(requeue::ErrorFilter::parse)
                    .transpose()?,
            };
            selection.check()?;
            let config = AdminConfig::from_lookup(&env_lookup)?;
            runtime()?.block_on(requeue::run(&config, &selection, apply, output.json))
        }
        Command::History {
            filters,
            verbose,
            output,
        } => {
            let query = filters.query(clock::now())?;
            let (config, db, rt) = open_db()?;
            let database = history::database(&config)?;
            rt.block_on(closing(
                &db,
                history::run(&db, &database, &query, output.json, verbose),
            ))
        }
        Command::Payload { request } => {
            let which = RequestRef::parse(&request)?;
            let (_, db, rt) = open_db()?;
            rt.block_on(closing(&db, inspect::payload(&db, &which)))
        }
    }
}

/// The time rows are judged at: `at` when given, else the database
/// server's now, as the daemon judges them.
async fn judging_time(db: &Db, at: Option<UnixTime>) -> Result<UnixTime, AdminError> {
    match at {
        Some(at) => Ok(at),
        None => clock::server_now(db.reader())
            .await
            .map_err(|err| db.fail(err)),
    }
}

/// A single-threaded runtime: the tool runs one statement at a time.
/// Where `explain` and `hooks` ask the daemon what lives in its memory:
/// `--url`, else `GORGE_LISTEN_ADDR` on loopback, with
/// `GORGE_SERVICE_TOKEN`.
fn daemon_ask(url: Option<String>) -> Result<DaemonAsk, AdminError> {
    Ok(DaemonAsk {
        url: match url {
            Some(url) => Ok(watch::StreamUrl::parse(&url)?),
            None => watch::StreamUrl::from_listen_addr(env_lookup(LISTEN.name).as_deref())
                .map_err(|err| err.to_string()),
        },
        token: env_lookup(SERVICE_TOKEN.name),
    })
}

fn runtime() -> Result<tokio::runtime::Runtime, AdminError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|err| AdminError::Usage(format!("cannot start the async runtime: {err}")))
}

/// Validates the settings (exit 2 on a bad one, before any connection)
/// and prepares the store (which connects on first use) and a runtime.
fn open_db() -> Result<(AdminConfig, Db, tokio::runtime::Runtime), AdminError> {
    let config = AdminConfig::from_lookup(&env_lookup)?;
    let db = Db::open(&config)?;
    Ok((config, db, runtime()?))
}

/// Runs a database command, then closes the pool whatever the outcome.
async fn closing(
    db: &Db,
    command: impl std::future::Future<Output = Result<u8, AdminError>>,
) -> Result<u8, AdminError> {
    let result = command.await;
    db.close().await;
    result
}
