//! The backlog benchmark behind `cargo xtask bench` (issue 7): seeds a fresh
//! database on the local MariaDB with a queued backlog, measures the floor
//! cost of the claim protocol with a minimal `mysql_async` client (the
//! baseline), resets the rows, waits for the server to catch up on that
//! work (`quiesce.rs`), then lets the real release `webhook-daemon`
//! binary drain them into test-support's counting receiver on loopback.
//!
//! It reports drain throughput, enqueue→receipt latency (idle and busy),
//! peak RSS, database statements per delivery, idle CPU, and — with
//! `--retained R` — how the candidate query behaves with R retained `sent`
//! rows; `--scenarios` runs issue 19's scenarios instead (`scenarios.rs`),
//! `--idle-wake` issue 36's idle latency and cost (`idle_wake.rs`).
//! The last stdout line is one JSON object; the exit code is non-zero
//! unless every row ended `sent` and was received exactly once.
//!
//! It owns nothing but measurement: it never changes the daemon's settings
//! except as a flag says, and talks to loopback only. This file holds the
//! entry point and the run as its sequence of phases; the modules under
//! `backlog/` hold the phases' parts.

#![allow(clippy::expect_used, clippy::print_stderr)]
// The report is one large `json!` literal.
#![recursion_limit = "256"]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use webhook_test_support::daemon_process::free_port;
use webhook_test_support::mariadb::{with_db_on, PhorgeSide};
use webhook_test_support::{with_db, BinlogServer, Receiver, Reply, TestDb};

mod args;
mod baseline;
mod candidates;
mod daemon;
mod history;
mod idle_poll;
mod idle_wake;
mod phases;
mod quiesce;
mod report;
mod sampling;
mod scenarios;
mod seed;
mod soak;

use args::{daemon_settings, parse_args, Args};

fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
    // Two workers, like the daemon's runtime on this machine: the baseline
    // client gets as many threads as the daemon does.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("bench: tokio runtime");
    let slot: Arc<Mutex<Option<Outcome>>> = Arc::new(Mutex::new(None));
    let out = Arc::clone(&slot);
    match args.scenarios.clone() {
        Some(list) => {
            let outcome = runtime.block_on(scenarios::run(args, list));
            *out.lock().expect("outcome slot") = Some(outcome);
        }
        None if args.binlog => runtime.block_on(async move {
            let server = BinlogServer::start().await;
            let instances = args.idle_wake.unwrap_or(1);
            with_db_on(server.port(), move |db| async move {
                let outcome = idle_wake::run(db, args, instances).await;
                *out.lock().expect("outcome slot") = Some(outcome);
            })
            .await;
        }),
        None => runtime.block_on(with_db(move |db| async move {
            let outcome = match (args.soak.clone(), args.idle_wake) {
                (Some(soak), _) => soak::run_soak(db, args, soak).await,
                (None, Some(instances)) => idle_wake::run(db, args, instances).await,
                (None, None) => run(db, args).await,
            };
            *out.lock().expect("outcome slot") = Some(outcome);
        })),
    }
    let outcome = slot.lock().expect("outcome slot").take();
    match outcome {
        Some(outcome) => {
            print!("{}", outcome.table);
            println!("{}", outcome.json);
            if !outcome.failures.is_empty() {
                for failure in &outcome.failures {
                    eprintln!("bench: FAILED: {failure}");
                }
                std::process::exit(1);
            }
        }
        None => {
            eprintln!("bench: the run produced no result");
            std::process::exit(1);
        }
    }
}

/// A run's report: the text table, the JSON line, what failed.
struct Outcome {
    table: String,
    json: Value,
    failures: Vec<String>,
}

/// A free diagnostics address on loopback.
fn free_listen_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port()))
}

async fn run(db: TestDb, args: Args) -> Outcome {
    let load_start = sampling::load_average();
    let mut failures = Vec::new();
    // Phorge's config and worker databases, as on a real install: the
    // daemon's silent-mode and PHP-task checks read them.
    let side = PhorgeSide::create(&db.namespace).await;
    let objects = match args.objects {
        true => Some(seed::mirror_objects(&db).await),
        false => None,
    };
    let receiver = Receiver::counting().await;
    let settings = daemon_settings(&args, &db.namespace, free_listen_addr());
    let hooks = seed::insert_hooks(&db, args.hooks, receiver.addr()).await;
    let latency = Duration::from_millis(args.latency_ms);
    daemon::answer_hooks(&receiver, args.hooks, Reply::status(200).after(latency));
    let mut probe = db.conn().await;
    let status_self_cost = sampling::status_self_cost(&mut probe).await;
    // Scale check first, on the empty table: the retained rows then stay
    // for the rest of the run, below the backlog's ids, as in production.
    let scale = match args.retained {
        0 => None,
        retained => {
            Some(candidates::scale_check(&mut probe, &settings.windows, retained, &hooks).await)
        }
    };
    let backlog = seed::Backlog::seed(&mut probe, args.rows, &hooks).await;
    let batch = settings.windows.batch_size();
    let candidate_backlog =
        candidates::time_candidates(&mut probe, &settings.windows, batch, 200, "backlog").await;
    let base =
        baseline::measure(&db.database, &backlog, &settings, &mut probe, &mut failures).await;
    backlog.reset(&mut probe).await;
    let quiesced = quiesce::quiesce(&mut probe).await;
    let mut expected = backlog.expected();
    let (drain, mut daemon) = phases::drain(
        &args,
        &settings,
        &receiver,
        &mut probe,
        status_self_cost,
        &mut failures,
    )
    .await;
    let phases = phases::latency_phases(
        &db,
        &args,
        &receiver,
        &hooks,
        &mut expected,
        &mut daemon,
        &mut failures,
        drain.per_sec,
    )
    .await;
    let idle =
        sampling::idle_window(daemon.pid(), &mut probe, args.idle_secs, status_self_cost).await;
    let end = phases::stop_and_check(
        daemon,
        &mut probe,
        &receiver,
        &expected,
        args.retained,
        &mut failures,
    )
    .await;
    drop(probe);
    side.drop().await;
    if let Some(objects) = objects {
        objects.drop().await;
    }
    if args.history {
        failures.extend(history::check(&db.namespace, &receiver).await);
    }
    let load_end = sampling::load_average();
    report::Report {
        args: &args,
        settings: &settings,
        seed_secs: backlog.seed_secs,
        quiesced: &quiesced,
        candidate_backlog: &candidate_backlog,
        scale: scale.as_ref(),
        base: &base,
        drain: &drain,
        phases: &phases,
        idle: &idle,
        end: &end,
        load_start: &load_start,
        load_end: &load_end,
        failures: &failures,
    }
    .outcome()
}
