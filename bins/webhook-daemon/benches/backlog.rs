//! The backlog benchmark behind `cargo xtask bench` (issue 7): seeds a fresh
//! database on the local MariaDB with a queued backlog, measures the floor
//! cost of the claim protocol with a minimal `mysql_async` client (the
//! baseline), resets the rows, then lets the real release `webhook-daemon`
//! binary drain them into a fast loopback receiver built into this file.
//!
//! It reports drain throughput, enqueue→receipt latency (idle and busy),
//! peak RSS, database statements per delivery, idle CPU, and — with
//! `--retained R` — how the candidate query behaves with R retained `sent`
//! rows. The last stdout line is one JSON object; the exit code is non-zero
//! unless every row ended `sent` and was received exactly once.
//!
//! It owns nothing but measurement: it never changes the daemon's settings
//! except as a flag says, and talks to loopback only.

#![allow(clippy::expect_used, clippy::print_stderr)]
// The report is one large `json!` literal.
#![recursion_limit = "256"]

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::fmt::Write as _;
use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Pool, PoolConstraints, PoolOpts, Row};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use webhook_core::{Settings, Windows};
use webhook_store_mysql::{object_tables, sql, MysqlConfig};
use webhook_test_support::mariadb::{server_opts, PhorgeSide};
use webhook_test_support::{with_db, ApplicationTables, TestDb};

#[path = "backlog/soak.rs"]
mod soak;

const USAGE: &str = "usage: cargo xtask bench [options]
  (or: cargo bench -p webhook-daemon --bench backlog -- [options])

  --rows N            queued rows in the backlog (default 10000)
  --hooks H           hooks the rows are spread over (default 100)
  --latency-ms MS     receiver answers after this long (default 0)
  --max-concurrent M  sets GORGE_WEBHOOK_MAX_CONCURRENT (default: the daemon's, 8)
  --retained R        scale check: R retained `sent` rows (default 0 = skip)
  --timed T           timed rows per latency phase (default 50)
  --busy-rate RPS     background inserts/s in the busy phase (default: 1/4 of the drain rate)
  --idle-secs S       idle CPU sampling window (default 5)
  --env NAME=VALUE    an extra GORGE_* setting for the daemon (repeatable; for
                      experiments — the baseline follows its pool size)
  --objects           give every row's task an object row in Maniphest's tables
                      (as on a real install whose account may read them), so
                      each delivery's object check reads them
  --daemon-bin PATH   run this webhook-daemon binary instead of the one cargo
                      built (e.g. an older commit's, for before/after runs)

  soak mode (issue 17; replaces the drain and latency phases):
  --soak-secs S       insert rows at a steady rate for S seconds over --hooks H
  --soak-rate R       rows per second, round-robin over the H hooks (default 300)
  --failing-pct P     P % of the H hooks answer 500 (default 0)
  --timeout-pct Q     Q % of the H hooks answer only after the delivery timeout
                      (default 0)
  --slow-hook-ms MS   one extra hook answering 200 after MS ms, with
  --slow-hook-rows N  N rows queued for it before the daemon starts (default 40)
  Soak rows carry retry=forever (Phorge's default for rule-triggered
  requests), so a failing hook's rows are retried for ever.";

/// Properties as Phorge stores them for a rule-triggered edit.
const PROPERTIES: &str =
    "{\"retry\":\"never\",\"transactionPHIDs\":{\"PHID-XACT-TASK-aaaaaaaaaaaaaaa\":\
\"PHID-XACT-TASK-aaaaaaaaaaaaaaa\"},\"triggerPHIDs\":[\"PHID-HRUL-abcdefghijklmnopqrst\"],\
\"silent\":false,\"test\":false,\"secure\":false}";

/// What the daemon writes back for a 2xx (only errorType/errorCode change).
const PROPERTIES_SENT: &str =
    "{\"retry\":\"never\",\"transactionPHIDs\":{\"PHID-XACT-TASK-aaaaaaaaaaaaaaa\":\
\"PHID-XACT-TASK-aaaaaaaaaaaaaaa\"},\"triggerPHIDs\":[\"PHID-HRUL-abcdefghijklmnopqrst\"],\
\"silent\":false,\"test\":false,\"secure\":false,\"errorType\":\"http\",\"errorCode\":200}";

/// Rows per multi-row INSERT while seeding.
const SEED_CHUNK: usize = 1_000;

// ---------------------------------------------------------------- options

#[derive(Debug, Clone)]
struct Args {
    rows: usize,
    hooks: usize,
    latency_ms: u64,
    max_concurrent: Option<usize>,
    retained: u64,
    timed: usize,
    busy_rate: Option<f64>,
    idle_secs: u64,
    objects: bool,
    extra_env: Vec<(String, String)>,
    daemon_bin: Option<PathBuf>,
    soak: Option<soak::SoakArgs>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        rows: 10_000,
        hooks: 100,
        latency_ms: 0,
        max_concurrent: None,
        retained: 0,
        timed: 50,
        busy_rate: None,
        idle_secs: 5,
        objects: false,
        extra_env: Vec::new(),
        daemon_bin: None,
        soak: None,
    };
    let mut soak = soak::SoakArgs::default();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--bench" {
            continue; // cargo bench passes this to every harness-less bench
        }
        if flag == "--help" || flag == "-h" {
            return Err(USAGE.to_owned());
        }
        let (name, inline) = match flag.split_once('=') {
            Some((n, v)) => (n.to_owned(), Some(v.to_owned())),
            None => (flag.clone(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| format!("{name} needs a value\n\n{USAGE}"))
        };
        let number = |text: String| -> Result<u64, String> {
            text.replace('_', "")
                .parse::<u64>()
                .map_err(|_| format!("{name}: {text:?} is not a whole number"))
        };
        match name.as_str() {
            "--rows" => args.rows = number(value()?)? as usize,
            "--hooks" => args.hooks = number(value()?)? as usize,
            "--latency-ms" => args.latency_ms = number(value()?)?,
            "--max-concurrent" => args.max_concurrent = Some(number(value()?)? as usize),
            "--retained" => args.retained = number(value()?)?,
            "--timed" => args.timed = number(value()?)? as usize,
            "--busy-rate" => args.busy_rate = Some(number(value()?)? as f64),
            "--idle-secs" => args.idle_secs = number(value()?)?,
            "--objects" => args.objects = true,
            "--daemon-bin" => args.daemon_bin = Some(PathBuf::from(value()?)),
            "--soak-secs" => soak.secs = number(value()?)?,
            "--soak-rate" => soak.rate = number(value()?)? as f64,
            "--failing-pct" => soak.failing_pct = number(value()?)?,
            "--timeout-pct" => soak.timeout_pct = number(value()?)?,
            "--slow-hook-ms" => soak.slow_hook_ms = Some(number(value()?)?),
            "--slow-hook-rows" => soak.slow_hook_rows = number(value()?)? as usize,
            "--env" => {
                let pair = value()?;
                match pair.split_once('=') {
                    Some((k, v)) if k.starts_with("GORGE_") => {
                        args.extra_env.push((k.to_owned(), v.to_owned()));
                    }
                    _ => return Err(format!("--env: {pair:?} is not GORGE_NAME=VALUE")),
                }
            }
            other => return Err(format!("unknown option {other:?}\n\n{USAGE}")),
        }
    }
    if args.rows == 0 || args.hooks == 0 || args.max_concurrent == Some(0) {
        return Err("--rows, --hooks and --max-concurrent must be at least 1".to_owned());
    }
    if args.idle_secs == 0 || args.idle_secs > 600 {
        return Err("--idle-secs must be between 1 and 600".to_owned());
    }
    if soak.secs > 0 {
        soak.check()?;
        args.soak = Some(soak);
    }
    Ok(args)
}

// ---------------------------------------------------------------- entry

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
    runtime.block_on(with_db(move |db| async move {
        let outcome = match args.soak.clone() {
            Some(soak) => soak::run_soak(db, args, soak).await,
            None => run(db, args).await,
        };
        *out.lock().expect("outcome slot") = Some(outcome);
    }));
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

struct Outcome {
    table: String,
    json: Value,
    failures: Vec<String>,
}

// ---------------------------------------------------------------- the run

/// Daemon settings shared by the bench and the daemon: the variables the
/// daemon is started with, and the windows/pool they give.
struct DaemonSettings {
    env: Vec<(String, String)>,
    windows: Windows,
    pool_max: usize,
}

fn daemon_settings(args: &Args, namespace: &str, listen: SocketAddr) -> DaemonSettings {
    let mut env = vec![
        (
            "GORGE_WEBHOOK_MYSQL_HOST".to_owned(),
            "127.0.0.1".to_owned(),
        ),
        ("GORGE_WEBHOOK_MYSQL_PORT".to_owned(), "3306".to_owned()),
        ("GORGE_WEBHOOK_MYSQL_USER".to_owned(), "root".to_owned()),
        ("GORGE_WEBHOOK_NAMESPACE".to_owned(), namespace.to_owned()),
        (
            "GORGE_WEBHOOK_OUTBOUND_ALLOW".to_owned(),
            "127.0.0.1/32".to_owned(),
        ),
        ("GORGE_LISTEN_ADDR".to_owned(), listen.to_string()),
    ];
    if let Some(m) = args.max_concurrent {
        env.push(("GORGE_WEBHOOK_MAX_CONCURRENT".to_owned(), m.to_string()));
    }
    // Later entries win, both here and in the child's environment.
    env.extend(args.extra_env.iter().cloned());
    let lookup = |name: &str| {
        env.iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let windows = Settings::from_lookup(&lookup)
        .and_then(Windows::try_new)
        .expect("bench: the daemon settings are valid");
    let pool_max = MysqlConfig::from_lookup(&lookup, windows.max_concurrent())
        .expect("bench: the database settings are valid")
        .pool_max;
    DaemonSettings {
        env,
        windows,
        pool_max,
    }
}

async fn run(db: TestDb, args: Args) -> Outcome {
    let load_start = load_average();
    let mut failures = Vec::new();
    // Phorge's config and worker databases, as on a real install: the
    // daemon's silent-mode and PHP-task checks read them.
    let side = PhorgeSide::create(&db.namespace).await;
    let objects = match args.objects {
        true => Some(mirror_objects(&db).await),
        false => None,
    };
    let receiver = Receiver::start(Duration::from_millis(args.latency_ms)).await;
    let listen = free_port();
    let settings = daemon_settings(&args, &db.namespace, listen);
    let mc = settings.windows.max_concurrent();
    let batch = settings.windows.batch_size();
    let hooks = insert_hooks(&db, args.hooks, receiver.addr).await;
    let mut probe = db.conn().await;
    let status_self_cost = status_self_cost(&mut probe).await;

    // Scale check first, on the empty table: the retained rows then stay
    // for the rest of the run, below the backlog's ids, as in production.
    let scale = if args.retained > 0 {
        Some(scale_check(&mut probe, &settings.windows, args.retained, &hooks).await)
    } else {
        None
    };

    eprintln!(
        "bench: seeding {} rows over {} hooks",
        args.rows, args.hooks
    );
    let seeded_at = Instant::now();
    seed_backlog(&mut probe, args.rows, &hooks).await;
    let seed_secs = seeded_at.elapsed().as_secs_f64();
    let (first_id, last_id) = queued_range(&mut probe).await;
    let backlog_ids: Vec<(u64, u64)> = probe
        .query::<(u64, u64), _>(format!(
            "SELECT id, dateModified FROM herald_webhookrequest \
             WHERE id BETWEEN {first_id} AND {last_id} ORDER BY id"
        ))
        .await
        .expect("bench: read the seeded ids");
    assert_eq!(backlog_ids.len(), args.rows, "bench: seeded row count");
    let candidate_backlog =
        time_candidates(&mut probe, &settings.windows, batch, 200, "backlog").await;

    // ---- baseline: CLAIM + WRITE_RESULT per row, mc workers, same pool size
    eprintln!(
        "bench: baseline ({mc} workers, pool {}) over {} rows",
        settings.pool_max, args.rows
    );
    let base = baseline(
        &db.database,
        &backlog_ids,
        mc,
        settings.pool_max,
        &mut probe,
    )
    .await;
    if base.lost > 0 {
        failures.push(format!("baseline lost {} claims", base.lost));
    }
    let not_sent = count(
        &mut probe,
        &format!(
            "SELECT COUNT(*) FROM herald_webhookrequest WHERE id BETWEEN {first_id} AND {last_id} \
             AND status <> 'sent'"
        ),
    )
    .await;
    if not_sent != 0 {
        failures.push(format!("baseline left {not_sent} rows unsent"));
    }
    // Back to fresh queued rows: exactly what Phorge inserted.
    probe
        .exec_drop(
            "UPDATE herald_webhookrequest SET status = 'queued', lastRequestResult = 'none', \
             lastRequestEpoch = 0, dateModified = dateCreated, properties = ? \
             WHERE id BETWEEN ? AND ?",
            (PROPERTIES, first_id, last_id),
        )
        .await
        .expect("bench: reset the backlog");
    let queued = count(
        &mut probe,
        "SELECT COUNT(*) FROM herald_webhookrequest WHERE status = 'queued'",
    )
    .await;
    assert_eq!(queued as usize, args.rows, "bench: rows queued after reset");

    // ---- the daemon drains the backlog
    let mut expected: HashMap<String, Enqueued> = (0..args.rows)
        .map(|i| (backlog_object(i), Enqueued::Backlog))
        .collect();
    let mariadbd = find_mariadbd();
    let before = global_status(&mut probe).await;
    let cpu_before = CpuSample::take(None, mariadbd);
    eprintln!("bench: starting webhook-daemon (listen {listen})");
    let mut daemon = Daemon::spawn(&settings.env, args.daemon_bin.as_deref());
    let drain_deadline = Duration::from_secs(120)
        + Duration::from_millis(
            (args.rows as u64 * (args.latency_ms + 3)) / (mc.min(args.hooks) as u64).max(1) * 3,
        );
    let drained = wait_for_receipts(&receiver, args.rows as u64, drain_deadline, &mut daemon).await;
    let drain_wait_end = Instant::now();
    let drain_complete = drained.is_ok();
    if let Err(why) = drained {
        failures.push(why);
    }
    let last_receipt_at = daemon.started.elapsed();
    // Wait for the last write-backs; these probes are subtracted below.
    // Only the backlog is queued now, so `key_status` serves the count.
    let mut probes = 0u64;
    let mut all_written = false;
    let written_deadline = Instant::now() + Duration::from_secs(60);
    while drain_complete && Instant::now() < written_deadline {
        probes += 1;
        let left = count(
            &mut probe,
            "SELECT COUNT(*) FROM herald_webhookrequest WHERE status = 'queued'",
        )
        .await;
        if left == 0 {
            all_written = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let all_sent_at = daemon.started.elapsed();
    let cpu_after = CpuSample::take(Some(daemon.pid()), mariadbd);
    let after = global_status(&mut probe).await;
    if drain_complete && !all_written {
        failures.push("backlog rows were not all written back as sent within 60 s".to_owned());
    }
    let rss_after_drain = vm_kib(daemon.pid(), "VmHWM:");
    // The daemon's own counters, read after the window closed (the
    // endpoint runs a stats query).
    let counters = scrape_metrics(listen);
    // Rate between the first and the last receipt; for a drain that did
    // not finish, what arrived up to the deadline.
    let receipts = receiver.first_receipts(|object| object.starts_with("PHID-TASK-bl"));
    let delivered = receipts.len();
    let deliveries = delivered.max(1) as f64;
    let drain_secs = match (receipts.first(), receipts.last()) {
        (Some(first), Some(last)) if drain_complete => last.duration_since(*first).as_secs_f64(),
        (Some(first), _) => drain_wait_end.duration_since(*first).as_secs_f64(),
        _ => 0.0,
    };
    let deliveries_per_sec = match drain_secs > 0.0 {
        true if drain_complete => (deliveries - 1.0) / drain_secs,
        true => deliveries / drain_secs,
        false => 0.0,
    };
    // The longest silence between two receipts: a stall shows here.
    let max_gap_ms = receipts
        .windows(2)
        .map(|w| w[1].duration_since(w[0]).as_secs_f64() * 1000.0)
        .fold(0.0, f64::max);
    let statements = StatementWindow::new(
        &before,
        &after,
        probes,
        status_self_cost,
        deliveries,
        all_written.then_some(2 * delivered as u64),
    );
    let cpu = cpu_after.minus(&cpu_before);

    // ---- enqueue→receipt latency, idle then busy (skipped when the drain
    // already failed: the daemon is not in a state worth timing)
    let drain_ok = failures.is_empty();
    let phases = if drain_ok {
        latency_phases(
            &db,
            &args,
            &receiver,
            &hooks,
            &mut expected,
            &mut daemon,
            &mut failures,
            deliveries_per_sec,
        )
        .await
    } else {
        eprintln!("bench: the drain failed; skipping the latency phases");
        Phases {
            busy_rate: f64::NAN,
            ..Phases::default()
        }
    };
    let Phases {
        idle: idle_lat,
        busy: busy_lat,
        load: load_lat,
        timed: timed_lat,
        busy_rate,
    } = phases;

    // ---- idle CPU (and idle statements) once everything has settled
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    eprintln!("bench: sampling idle CPU for {} s", args.idle_secs);
    let idle_before = global_status(&mut probe).await;
    let t0 = process_ticks(&daemon.pid().to_string());
    let idle_started = Instant::now();
    tokio::time::sleep(Duration::from_secs(args.idle_secs)).await;
    let t1 = process_ticks(&daemon.pid().to_string());
    let idle_elapsed = idle_started.elapsed().as_secs_f64();
    let idle_after = global_status(&mut probe).await;
    let hz = clock_ticks_per_sec() as f64;
    let idle_cpu_percent = match (t0, t1) {
        (Some(a), Some(b)) => (b.saturating_sub(a)) as f64 / hz / idle_elapsed * 100.0,
        _ => f64::NAN,
    };
    let idle_statements_per_sec =
        (delta(&idle_before, &idle_after, "Questions") as f64 - status_self_cost as f64).max(0.0)
            / idle_elapsed;

    let rss_peak = vm_kib(daemon.pid(), "VmHWM:");
    let rss_now = vm_kib(daemon.pid(), "VmRSS:");
    let stopped_cleanly = daemon.stop(Duration::from_secs(30));
    if !stopped_cleanly {
        failures.push("the daemon did not exit cleanly on SIGTERM".to_owned());
    }

    // ---- every row sent, each received exactly once
    let unsent = count(
        &mut probe,
        "SELECT COUNT(*) FROM herald_webhookrequest WHERE status <> 'sent'",
    )
    .await;
    if unsent != 0 {
        failures.push(format!("{unsent} rows did not end `sent`"));
    }
    let total_rows = count(&mut probe, "SELECT COUNT(*) FROM herald_webhookrequest").await;
    if total_rows != expected.len() as u64 + args.retained {
        failures.push(format!(
            "table holds {total_rows} rows, expected {}",
            expected.len() as u64 + args.retained
        ));
    }
    let received = receiver.snapshot();
    let duplicates = received.values().filter(|r| r.count > 1).count();
    let missing = expected
        .keys()
        .filter(|o| !received.contains_key(*o))
        .count();
    let unexpected = received
        .keys()
        .filter(|o| !expected.contains_key(*o))
        .count();
    let unparsed = receiver.state.unparsed.load(Ordering::Relaxed);
    if duplicates + missing + unexpected > 0 || unparsed > 0 {
        failures.push(format!(
            "receipts: {duplicates} duplicated, {missing} missing, {unexpected} unexpected, \
             {unparsed} without an object PHID"
        ));
    }
    if !failures.is_empty() {
        daemon.print_log_tail(40);
    }
    drop(daemon);
    drop(probe);
    side.drop().await;
    if let Some(objects) = objects {
        objects.drop().await;
    }
    let load_end = load_average();

    // ---- report
    let mib = |kib: Option<u64>| kib.map(|k| k as f64 / 1024.0).unwrap_or(f64::NAN);
    let baseline_rate = base.pairs_per_sec;
    let ratio = if baseline_rate > 0.0 {
        deliveries_per_sec / baseline_rate
    } else {
        0.0
    };
    let poll_ms = settings.windows.poll_interval().as_millis() as f64;
    let mut json = json!({
        "rows": args.rows,
        "hooks": args.hooks,
        "latency_ms": args.latency_ms,
        "max_concurrent": mc,
        "extra_env": args.extra_env.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
        "pool_max": settings.pool_max,
        "batch_size": batch,
        "poll_interval_ms": poll_ms,
        "deliveries_per_sec": round(deliveries_per_sec, 1),
        "baseline_pairs_per_sec": round(baseline_rate, 1),
        "ratio": round(ratio, 3),
        "drain_complete": drain_complete,
        "delivered": delivered,
        "drain_secs": round(drain_secs, 3),
        "max_receipt_gap_ms": round(max_gap_ms, 1),
        "start_to_last_receipt_secs": round(last_receipt_at.as_secs_f64(), 3),
        "start_to_all_sent_secs": round(all_sent_at.as_secs_f64(), 3),
        "p50_ms": round(timed_lat.p50, 1),
        "p99_ms": round(timed_lat.p99, 1),
        "idle_p50_ms": round(idle_lat.p50, 1),
        "idle_p99_ms": round(idle_lat.p99, 1),
        "idle_max_ms": round(idle_lat.max, 1),
        "busy_p50_ms": round(busy_lat.p50, 1),
        "busy_p99_ms": round(busy_lat.p99, 1),
        "busy_max_ms": round(busy_lat.max, 1),
        "busy_rate_per_sec": round(busy_rate, 1),
        "busy_load_p50_ms": round(load_lat.p50, 1),
        "busy_load_p99_ms": round(load_lat.p99, 1),
        "busy_load_rows": load_lat.n,
        "rss_mib": round(mib(rss_peak), 1),
        "rss_after_drain_mib": round(mib(rss_after_drain), 1),
        "rss_end_mib": round(mib(rss_now), 1),
        "statements_per_delivery": round(statements.per_delivery("Questions"), 3),
        "selects_per_delivery": round(statements.per_delivery("Com_select"), 3),
        "updates_per_delivery": round(statements.per_delivery("Com_update"), 3),
        "prepares_per_delivery": round(statements.per_delivery("Com_stmt_prepare"), 3),
        "fsyncs_per_delivery": round(statements.per_delivery("Innodb_data_fsyncs"), 3),
        "index_reads_per_delivery": round(
            statements.per_delivery("Handler_read_next") + statements.per_delivery("Handler_read_key"),
            2
        ),
        "index_scans_from_start_per_delivery": round(statements.per_delivery("Handler_read_first"), 4),
        "baseline_statements_per_pair": round(base.statements.per_delivery("Questions"), 3),
        "baseline_fsyncs_per_pair": round(base.statements.per_delivery("Innodb_data_fsyncs"), 3),
        "status_contaminated": statements.contaminated || base.statements.contaminated,
        "daemon_cpu_ms_per_delivery": round(cpu.daemon_ms(hz) / deliveries, 3),
        "mariadb_cpu_ms_per_delivery": round(cpu.mariadb_ms(hz) / deliveries, 3),
        "bench_cpu_ms_per_delivery": round(cpu.bench_ms(hz) / deliveries, 3),
        "machine_busy_percent_drain": round(cpu.machine_busy_percent(), 1),
        "baseline_client_cpu_ms_per_pair": round(base.cpu.bench_ms(hz) / args.rows as f64, 3),
        "baseline_mariadb_cpu_ms_per_pair": round(base.cpu.mariadb_ms(hz) / args.rows as f64, 3),
        "machine_busy_percent_baseline": round(base.cpu.machine_busy_percent(), 1),
        "polls_per_delivery": round(counters.get("gorge_webhook_polls_total") / deliveries, 4),
        "claims_lost": counters.get("gorge_webhook_claims_total{result=\"lost\"}"),
        "idle_cpu_percent": round(idle_cpu_percent, 3),
        "idle_statements_per_sec": round(idle_statements_per_sec, 2),
        "candidate_backlog_us": round(candidate_backlog.mean_us, 1),
        "seed_secs": round(seed_secs, 2),
        "load_start": load_start,
        "load_end": load_end,
        "nproc": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "objects": args.objects,
        "source": source_version(),
        "ok": failures.is_empty(),
    });
    if let (Some(scale), Value::Object(map)) = (&scale, &mut json) {
        map.insert("retained".to_owned(), json!(args.retained));
        map.insert(
            "retained_insert_secs".to_owned(),
            json!(round(scale.insert_secs, 1)),
        );
        map.insert(
            "candidate_idle_us_without".to_owned(),
            json!(round(scale.without.mean_us, 1)),
        );
        map.insert(
            "candidate_idle_us_with".to_owned(),
            json!(round(scale.with.mean_us, 1)),
        );
        map.insert(
            "candidate_idle_p99_us_without".to_owned(),
            json!(round(scale.without.p99_us, 1)),
        );
        map.insert(
            "candidate_idle_p99_us_with".to_owned(),
            json!(round(scale.with.p99_us, 1)),
        );
        map.insert(
            "candidate_handler_reads_without".to_owned(),
            json!(scale.without.handler_total()),
        );
        map.insert(
            "candidate_handler_reads_with".to_owned(),
            json!(scale.with.handler_total()),
        );
    }

    let mut t = String::new();
    let _ = writeln!(
        t,
        "\nwebhook-daemon backlog bench: {} rows, {} hooks, max_concurrent {mc} (pool {}, batch {batch}), \
         receiver latency {} ms, poll {} ms",
        args.rows, args.hooks, settings.pool_max, args.latency_ms, poll_ms
    );
    let _ = writeln!(t, "load average: start {load_start}, end {load_end}");
    let line = |t: &mut String, k: &str, v: String| {
        let _ = writeln!(t, "  {k:<44} {v}");
    };
    let _ = writeln!(t, "throughput");
    line(
        &mut t,
        "daemon deliveries/s (first→last receipt)",
        format!(
            "{deliveries_per_sec:.0}  ({delivered} rows in {drain_secs:.2} s{})",
            if drain_complete {
                ""
            } else {
                ", DID NOT FINISH"
            }
        ),
    );
    line(
        &mut t,
        "longest gap between receipts",
        format!("{max_gap_ms:.1} ms"),
    );
    line(
        &mut t,
        "baseline claim+result pairs/s",
        format!("{baseline_rate:.0}  ({:.2} s)", base.secs),
    );
    line(&mut t, "ratio", format!("{ratio:.3}"));
    line(
        &mut t,
        "daemon start → last receipt / all sent",
        format!(
            "{:.2} s / {:.2} s",
            last_receipt_at.as_secs_f64(),
            all_sent_at.as_secs_f64()
        ),
    );
    let _ = writeln!(t, "enqueue → receipt latency (ms)");
    for (name, l) in [
        ("all timed rows", &timed_lat),
        ("idle", &idle_lat),
        ("busy (timed rows)", &busy_lat),
        ("busy (background rows)", &load_lat),
    ] {
        line(
            &mut t,
            name,
            format!(
                "p50 {:.1}  p99 {:.1}  max {:.1}  (n = {})",
                l.p50, l.p99, l.max, l.n
            ),
        );
    }
    line(&mut t, "background load", format!("{busy_rate:.0} rows/s"));
    let _ = writeln!(t, "resources");
    line(
        &mut t,
        "daemon peak RSS (VmHWM)",
        format!(
            "{:.1} MiB (after drain {:.1}, at end VmRSS {:.1})",
            mib(rss_peak),
            mib(rss_after_drain),
            mib(rss_now)
        ),
    );
    line(
        &mut t,
        "idle daemon CPU",
        format!("{idle_cpu_percent:.3} % of one core over {idle_elapsed:.1} s"),
    );
    line(
        &mut t,
        "idle statements/s (global, all clients)",
        format!("{idle_statements_per_sec:.2}"),
    );
    line(
        &mut t,
        "CPU ms per delivery: daemon / mariadbd / bench",
        format!(
            "{:.3} / {:.3} / {:.3}  (machine busy {:.0} %)",
            cpu.daemon_ms(hz) / deliveries,
            cpu.mariadb_ms(hz) / deliveries,
            cpu.bench_ms(hz) / deliveries,
            cpu.machine_busy_percent()
        ),
    );
    line(
        &mut t,
        "baseline CPU ms per pair: client / mariadbd",
        format!(
            "{:.3} / {:.3}  (machine busy {:.0} %)",
            base.cpu.bench_ms(hz) / args.rows as f64,
            base.cpu.mariadb_ms(hz) / args.rows as f64,
            base.cpu.machine_busy_percent()
        ),
    );
    let _ = writeln!(
        t,
        "database work per delivery (drain window; baseline per pair){}",
        if statements.contaminated || base.statements.contaminated {
            "  [WARNING: other clients were active; counters include their work]"
        } else {
            ""
        }
    );
    for key in [
        "Questions",
        "Com_select",
        "Com_update",
        "Com_stmt_prepare",
        "Com_stmt_close",
        "Com_admin_commands",
        "Handler_read_first",
        "Handler_read_key",
        "Handler_read_next",
        "Handler_read_rnd_next",
        "Handler_update",
        "Innodb_data_fsyncs",
        "Bytes_received",
        "Bytes_sent",
    ] {
        line(
            &mut t,
            key,
            format!(
                "{:>10.3}   baseline {:>10.3}",
                statements.per_delivery(key),
                base.statements.per_delivery(key)
            ),
        );
    }
    line(
        &mut t,
        "daemon counters over the drain",
        counters.describe(deliveries),
    );
    line(
        &mut t,
        "candidate query with the backlog",
        candidate_backlog.describe(),
    );
    line(
        &mut t,
        "EXPLAIN with the backlog",
        candidate_backlog.explain.clone(),
    );
    if let Some(scale) = &scale {
        let _ = writeln!(t, "scale check: {} retained `sent` rows", args.retained);
        line(&mut t, "bulk insert", format!("{:.1} s", scale.insert_secs));
        line(
            &mut t,
            "idle candidate query without",
            scale.without.describe(),
        );
        line(&mut t, "idle candidate query with", scale.with.describe());
        line(&mut t, "EXPLAIN without", scale.without.explain.clone());
        line(&mut t, "EXPLAIN with", scale.with.explain.clone());
    }
    let _ = writeln!(
        t,
        "checks: {}",
        if failures.is_empty() {
            "every row sent, each received exactly once".to_owned()
        } else {
            failures.join("; ")
        }
    );
    Outcome {
        table: t,
        json,
        failures,
    }
}

/// The commit the daemon was built from, `+dirty` with local changes to
/// its sources (`git` output; `unknown` outside a checkout).
fn source_version() -> String {
    let dir = env!("CARGO_MANIFEST_DIR");
    let git = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    match git(&["rev-parse", "--short", "HEAD"]) {
        Some(commit) => {
            let dirty = git(&["status", "--porcelain", "--", "../../crates", "src"])
                .is_some_and(|s| !s.is_empty());
            format!("{commit}{}", if dirty { "+dirty" } else { "" })
        }
        None => "unknown".to_owned(),
    }
}

fn round(x: f64, digits: i32) -> Value {
    if !x.is_finite() {
        return Value::Null;
    }
    let f = 10f64.powi(digits);
    json!((x * f).round() / f)
}

/// A tiny deterministic generator for the spacing of timed inserts.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n.max(1)
    }
}

/// Latencies of the timed phases.
#[derive(Debug, Default)]
struct Phases {
    idle: Latency,
    busy: Latency,
    load: Latency,
    timed: Latency,
    busy_rate: f64,
}

/// `args.timed` rows inserted one at a time at spaced moments while the
/// daemon is idle, then as many again under a steady background load.
#[allow(clippy::too_many_arguments)]
async fn latency_phases(
    db: &TestDb,
    args: &Args,
    receiver: &Receiver,
    hooks: &[String],
    expected: &mut HashMap<String, Enqueued>,
    daemon: &mut Daemon,
    failures: &mut Vec<String>,
    deliveries_per_sec: f64,
) -> Phases {
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    eprintln!("bench: {} timed rows while the daemon is idle", args.timed);
    let mut rng = Lcg(0x9e37_79b9_7f4a_7c15);
    let mut timed_conn = db.conn().await;
    let mut idle_rows = Vec::new();
    for i in 0..args.timed {
        tokio::time::sleep(Duration::from_millis(150 + rng.below(300))).await;
        let object = format!("PHID-TASK-id{i:018}");
        let at = insert_one(&mut timed_conn, &object, &hooks[i % hooks.len()]).await;
        expected.insert(object.clone(), Enqueued::Timed(at));
        idle_rows.push(object);
    }
    let want = expected.len() as u64;
    if let Err(why) = wait_for_receipts(receiver, want, Duration::from_secs(60), daemon).await {
        failures.push(format!("idle phase: {why}"));
    }
    let idle_lat = latencies(receiver, expected, &idle_rows);

    // ---- latency while busy: a steady background load plus timed rows
    let busy_rate = args
        .busy_rate
        .unwrap_or((deliveries_per_sec / 4.0).clamp(20.0, 500.0));
    eprintln!(
        "bench: {} timed rows while the daemon delivers {busy_rate:.0} rows/s",
        args.timed
    );
    let stop = Arc::new(AtomicBool::new(false));
    let background = tokio::spawn(background_load(
        db.conn().await,
        hooks.to_vec(),
        busy_rate,
        Arc::clone(&stop),
    ));
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let mut busy_rows = Vec::new();
    for i in 0..args.timed {
        tokio::time::sleep(Duration::from_millis(150 + rng.below(300))).await;
        let object = format!("PHID-TASK-bt{i:018}");
        let at = insert_one(&mut timed_conn, &object, &hooks[(i * 7) % hooks.len()]).await;
        expected.insert(object.clone(), Enqueued::Timed(at));
        busy_rows.push(object);
    }
    stop.store(true, Ordering::Relaxed);
    let background_rows = background.await.expect("bench: background load task");
    for (object, at) in background_rows {
        expected.insert(object, Enqueued::Timed(at));
    }
    let want = expected.len() as u64;
    if let Err(why) = wait_for_receipts(receiver, want, Duration::from_secs(60), daemon).await {
        failures.push(format!("busy phase: {why}"));
    }
    let busy_lat = latencies(receiver, expected, &busy_rows);
    let load_objects: Vec<String> = expected
        .keys()
        .filter(|o| o.starts_with("PHID-TASK-bg"))
        .cloned()
        .collect();
    let load_lat = latencies(receiver, expected, &load_objects);
    let all_timed: Vec<String> = idle_rows.iter().chain(&busy_rows).cloned().collect();
    let timed_lat = latencies(receiver, expected, &all_timed);

    Phases {
        idle: idle_lat,
        busy: busy_lat,
        load: load_lat,
        timed: timed_lat,
        busy_rate,
    }
}

// ---------------------------------------------------------------- receiver

/// The first receipt of an object PHID and how often it arrived.
#[derive(Debug, Clone, Copy)]
struct Receipt {
    count: u32,
    first: Instant,
}

#[derive(Default)]
struct ReceiverState {
    receipts: Mutex<HashMap<String, Receipt>>,
    distinct: AtomicU64,
    unparsed: AtomicU64,
}

/// A minimal HTTP/1.1 receiver on loopback: answers 200 after the
/// configured latency and records, per object PHID, when it first arrived
/// and how many times. Cheaper than test-support's recording receiver,
/// which keeps (and clones) every request.
struct Receiver {
    addr: SocketAddr,
    state: Arc<ReceiverState>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    async fn start(latency: Duration) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("receiver: bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("receiver: local address");
        let state = Arc::new(ReceiverState::default());
        let task = tokio::spawn(accept_loop(listener, Arc::clone(&state), latency));
        Self { addr, state, task }
    }

    fn distinct(&self) -> u64 {
        self.state.distinct.load(Ordering::Relaxed)
    }

    fn snapshot(&self) -> HashMap<String, Receipt> {
        self.state
            .receipts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// First receipts of the objects `keep` selects, in time order.
    fn first_receipts(&self, keep: impl Fn(&str) -> bool) -> Vec<Instant> {
        let receipts = self
            .state
            .receipts
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut firsts: Vec<Instant> = receipts
            .iter()
            .filter(|(object, _)| keep(object))
            .map(|(_, r)| r.first)
            .collect();
        firsts.sort();
        firsts
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<ReceiverState>, latency: Duration) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let state = Arc::clone(&state);
        tokio::spawn(async move {
            let service = service_fn(move |request| answer(request, Arc::clone(&state), latency));
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn answer(
    request: Request<Incoming>,
    state: Arc<ReceiverState>,
    latency: Duration,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let at = Instant::now();
    let body = request
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    match object_phid(&body) {
        Some(object) => {
            let mut receipts = state.receipts.lock().unwrap_or_else(|e| e.into_inner());
            receipts
                .entry(object)
                .and_modify(|r| r.count += 1)
                .or_insert_with(|| {
                    state.distinct.fetch_add(1, Ordering::Relaxed);
                    Receipt {
                        count: 1,
                        first: at,
                    }
                });
        }
        None => {
            state.unparsed.fetch_add(1, Ordering::Relaxed);
        }
    }
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    Ok(Response::new(Full::new(Bytes::from_static(b"ok\n"))))
}

/// The object's PHID: the payload's first `"phid"` is `object.phid`
/// (SPEC §7 fixes the key order).
fn object_phid(body: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    let start = text.find("\"phid\": \"")? + "\"phid\": \"".len();
    let len = text[start..].find('"')?;
    Some(text[start..start + len].to_owned())
}

// ---------------------------------------------------------------- daemon

/// The running daemon; killed when dropped.
struct Daemon {
    child: Child,
    started: Instant,
    log: PathBuf,
}

impl Daemon {
    /// Starts `bin`, or the daemon cargo built for this bench.
    fn spawn(env: &[(String, String)], bin: Option<&Path>) -> Self {
        let log = std::env::temp_dir().join(format!("webhook-bench-{}.log", std::process::id()));
        let log_file = File::create(&log).expect("bench: create the daemon log file");
        let bin = bin.unwrap_or(Path::new(env!("CARGO_BIN_EXE_webhook-daemon")));
        let mut command = Command::new(bin);
        // Default settings unless a flag says otherwise: nothing inherited.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("GORGE_") {
                command.env_remove(name);
            }
        }
        command
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file);
        let started = Instant::now();
        let child = command.spawn().expect("bench: start webhook-daemon");
        eprintln!(
            "bench: daemon {} pid {}, log {}",
            bin.display(),
            child.id(),
            log.display()
        );
        Self {
            child,
            started,
            log,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn alive(&mut self) -> Result<(), String> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(format!("webhook-daemon exited early ({status})")),
            Err(err) => Err(format!("cannot check on webhook-daemon: {err}")),
        }
    }

    /// SIGTERM, then up to `grace` for a clean exit; true if it exited 0.
    fn stop(&mut self, grace: Duration) -> bool {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
        let until = Instant::now() + grace;
        while Instant::now() < until {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    fn print_log_tail(&self, lines: usize) {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        eprintln!("bench: last lines of {}:", self.log.display());
        for line in &all[all.len().saturating_sub(lines)..] {
            eprintln!("  {line}");
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn free_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bench: bind a free port");
    listener.local_addr().expect("bench: local address")
}

/// Waits (polling every 10 ms, bounded by `deadline`) until `n` distinct
/// objects arrived; fails early if the daemon exits.
async fn wait_for_receipts(
    receiver: &Receiver,
    n: u64,
    deadline: Duration,
    daemon: &mut Daemon,
) -> Result<(), String> {
    let started = Instant::now();
    let mut reported = Instant::now();
    loop {
        let got = receiver.distinct();
        if got >= n {
            return Ok(());
        }
        daemon.alive()?;
        if started.elapsed() > deadline {
            return Err(format!(
                "only {got} of {n} rows received within {} s",
                deadline.as_secs()
            ));
        }
        if reported.elapsed() > Duration::from_secs(5) {
            eprintln!("bench: {got} of {n} received");
            reported = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// ---------------------------------------------------------------- seeding

/// Maniphest's tables beside the bench's herald database, with an object
/// row for every request's task made by a trigger as the request is
/// inserted (by whichever phase inserts it), and the transaction the rows
/// list on one of them.
async fn mirror_objects(db: &TestDb) -> ApplicationTables {
    let tables = object_tables("TASK").expect("bench: tasks are mapped");
    let apps = ApplicationTables::create(&db.namespace, tables).await;
    db.exec(&format!(
        "CREATE TRIGGER bench_objects AFTER INSERT ON herald_webhookrequest FOR EACH ROW \
         INSERT IGNORE INTO {} (phid, dateCreated, dateModified) \
         VALUES (NEW.objectPHID, NEW.dateCreated, NEW.dateCreated)",
        apps.object_table()
    ))
    .await;
    apps.apply(&backlog_object(0), &["PHID-XACT-TASK-aaaaaaaaaaaaaaa"])
        .await;
    apps
}

fn hook_phid(i: usize) -> String {
    format!("PHID-HWBH-{i:020}")
}

fn backlog_object(i: usize) -> String {
    format!("PHID-TASK-bl{i:018}")
}

/// Inserts `n` enabled hooks, `/hook/<i>` on the receiver; returns PHIDs.
async fn insert_hooks(db: &TestDb, n: usize, receiver: SocketAddr) -> Vec<String> {
    let mut conn = db.conn().await;
    let phids: Vec<String> = (0..n).map(hook_phid).collect();
    for chunk in (0..n).collect::<Vec<_>>().chunks(SEED_CHUNK) {
        let mut sql = String::from(
            "INSERT INTO herald_webhook (phid, name, webhookURI, viewPolicy, editPolicy, \
             status, hmacKey, dateCreated, dateModified) VALUES ",
        );
        for (k, i) in chunk.iter().enumerate() {
            if k > 0 {
                sql.push(',');
            }
            let _ = write!(
                sql,
                "('{}', 'bench hook {i}', 'http://{receiver}/hook/{i}', 'users', 'admin', \
                 'enabled', 'abcdefghijklmnopqrstuvwxyz234567', UNIX_TIMESTAMP(), UNIX_TIMESTAMP())",
                phids[*i]
            );
        }
        conn.query_drop(sql).await.expect("bench: insert hooks");
    }
    phids
}

/// `n` fresh queued rows, round-robin over the hooks, as Phorge inserts
/// them (`dateModified = dateCreated`), in multi-row INSERTs.
async fn seed_backlog(conn: &mut Conn, n: usize, hooks: &[String]) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(SEED_CHUNK) {
        let mut sql = String::from(
            "INSERT INTO herald_webhookrequest (phid, webhookPHID, objectPHID, status, \
             properties, lastRequestResult, lastRequestEpoch, dateCreated, dateModified) VALUES ",
        );
        for (k, i) in chunk.iter().enumerate() {
            if k > 0 {
                sql.push(',');
            }
            let _ = write!(
                sql,
                "('PHID-HWBR-bl{i:018}', '{}', '{}', 'queued', '{PROPERTIES}', 'none', 0, \
                 UNIX_TIMESTAMP(), UNIX_TIMESTAMP())",
                hooks[i % hooks.len()],
                backlog_object(*i)
            );
        }
        conn.query_drop(sql).await.expect("bench: seed the backlog");
    }
}

async fn queued_range(conn: &mut Conn) -> (u64, u64) {
    let range: Option<(Option<u64>, Option<u64>)> = conn
        .query_first("SELECT MIN(id), MAX(id) FROM herald_webhookrequest WHERE status = 'queued'")
        .await
        .expect("bench: queued id range");
    match range {
        Some((Some(lo), Some(hi))) => (lo, hi),
        _ => panic!("bench: no queued rows after seeding"),
    }
}

async fn count(conn: &mut Conn, sql: &str) -> u64 {
    conn.query_first::<u64, _>(sql)
        .await
        .unwrap_or_else(|e| panic!("bench: {sql}: {e}"))
        .unwrap_or(0)
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// One row, inserted the way Phorge does; returns when it was sent.
async fn insert_one(conn: &mut Conn, object: &str, hook: &str) -> Instant {
    let phid = format!("PHID-HWBR-{}", &object["PHID-TASK-".len()..]);
    let at = Instant::now();
    conn.exec_drop(
        "INSERT INTO herald_webhookrequest (phid, webhookPHID, objectPHID, status, properties, \
         lastRequestResult, lastRequestEpoch, dateCreated, dateModified) \
         VALUES (?, ?, ?, 'queued', ?, 'none', 0, UNIX_TIMESTAMP(), UNIX_TIMESTAMP())",
        (phid, hook, object, PROPERTIES),
    )
    .await
    .expect("bench: insert a timed row");
    at
}

/// Inserts rows at `rate` per second (multi-row INSERTs every ~10 ms)
/// until `stop`; returns each object with when its INSERT was sent.
async fn background_load(
    mut conn: Conn,
    hooks: Vec<String>,
    rate: f64,
    stop: Arc<AtomicBool>,
) -> Vec<(String, Instant)> {
    let started = Instant::now();
    let mut inserted: Vec<(String, Instant)> = Vec::new();
    while !stop.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(600) {
        let target = (rate * started.elapsed().as_secs_f64()) as usize;
        let n = target.saturating_sub(inserted.len()).min(500);
        if n > 0 {
            let mut sql = String::from(
                "INSERT INTO herald_webhookrequest (phid, webhookPHID, objectPHID, status, \
                 properties, lastRequestResult, lastRequestEpoch, dateCreated, dateModified) VALUES ",
            );
            let first = inserted.len();
            let objects: Vec<String> = (first..first + n)
                .map(|i| format!("PHID-TASK-bg{i:018}"))
                .collect();
            for (k, object) in objects.iter().enumerate() {
                if k > 0 {
                    sql.push(',');
                }
                let _ = write!(
                    sql,
                    "('PHID-HWBR-{}', '{}', '{object}', 'queued', '{PROPERTIES}', 'none', 0, \
                     UNIX_TIMESTAMP(), UNIX_TIMESTAMP())",
                    &object["PHID-TASK-".len()..],
                    hooks[(first + k) % hooks.len()]
                );
            }
            let at = Instant::now();
            conn.query_drop(sql)
                .await
                .expect("bench: background insert");
            inserted.extend(objects.into_iter().map(|o| (o, at)));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    inserted
}

/// Where a row's enqueue time comes from.
enum Enqueued {
    /// Part of the seeded backlog (throughput, not latency).
    Backlog,
    /// Inserted by the bench at this moment.
    Timed(Instant),
}

/// Enqueue→receipt latencies in milliseconds.
#[derive(Debug)]
struct Latency {
    n: usize,
    p50: f64,
    p99: f64,
    max: f64,
}

/// Not measured: reported as `null`, never as 0 ms.
impl Default for Latency {
    fn default() -> Self {
        Self {
            n: 0,
            p50: f64::NAN,
            p99: f64::NAN,
            max: f64::NAN,
        }
    }
}

fn latencies(
    receiver: &Receiver,
    expected: &HashMap<String, Enqueued>,
    objects: &[String],
) -> Latency {
    let receipts = receiver.snapshot();
    let mut ms: Vec<f64> = objects
        .iter()
        .filter_map(|o| match (expected.get(o), receipts.get(o)) {
            (Some(Enqueued::Timed(at)), Some(r)) => {
                Some(r.first.saturating_duration_since(*at).as_secs_f64() * 1000.0)
            }
            _ => None,
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    Latency {
        n: ms.len(),
        p50: percentile(&ms, 50.0),
        p99: percentile(&ms, 99.0),
        max: ms.last().copied().unwrap_or(f64::NAN),
    }
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

// ---------------------------------------------------------------- baseline

struct Baseline {
    secs: f64,
    pairs_per_sec: f64,
    lost: u64,
    statements: StatementWindow,
    cpu: CpuSample,
}

/// The protocol's floor: `workers` tasks on a pool of `pool_max`
/// connections (the daemon's options: found-rows, no reset on return), each
/// taking the next row and running `CLAIM` then `WRITE_RESULT` on it.
async fn baseline(
    database: &str,
    rows: &[(u64, u64)],
    workers: usize,
    pool_max: usize,
    probe: &mut Conn,
) -> Baseline {
    let constraints = PoolConstraints::new(0, pool_max).expect("bench: pool constraints");
    let opts = server_opts(Some(database))
        .client_found_rows(true)
        .pool_opts(
            // As `MysqlConfig::opts`: without an inactive TTL a pool with
            // `min = 0` closes every connection it gets back.
            PoolOpts::default()
                .with_constraints(constraints)
                .with_inactive_connection_ttl(Duration::from_secs(60))
                .with_reset_connection(false),
        );
    let pool = Pool::new(opts);
    let rows: Arc<Vec<(u64, u64)>> = Arc::new(rows.to_vec());
    let next = Arc::new(AtomicU64::new(0));
    let lost = Arc::new(AtomicU64::new(0));
    let mariadbd = find_mariadbd();
    let self_cost = status_self_cost(probe).await;
    let before = global_status(probe).await;
    let cpu_before = CpuSample::take(None, mariadbd);
    let started = Instant::now();
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            let (pool, rows, next, lost) = (
                pool.clone(),
                Arc::clone(&rows),
                Arc::clone(&next),
                Arc::clone(&lost),
            );
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                    let Some(&(id, seen)) = rows.get(i) else {
                        break;
                    };
                    let mut conn = pool.get_conn().await.expect("baseline: connection");
                    conn.exec_drop(sql::CLAIM, (id, seen))
                        .await
                        .expect("baseline: claim");
                    if conn.affected_rows() != 1 {
                        lost.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    // The write is guarded by the version the claim wrote.
                    let claimed = conn.last_insert_id().unwrap_or(0);
                    let now = now_unix();
                    conn.exec_drop(
                        sql::WRITE_RESULT,
                        ("sent", "okay", now, now, PROPERTIES_SENT, id, claimed),
                    )
                    .await
                    .expect("baseline: write result");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("baseline worker");
    }
    let secs = started.elapsed().as_secs_f64();
    let cpu_after = CpuSample::take(None, mariadbd);
    let after = global_status(probe).await;
    let _ = pool.disconnect().await;
    let n = rows.len() as f64;
    Baseline {
        secs,
        pairs_per_sec: n / secs,
        lost: lost.load(Ordering::Relaxed),
        statements: StatementWindow::new(
            &before,
            &after,
            0,
            self_cost,
            n,
            Some(2 * rows.len() as u64),
        ),
        cpu: cpu_after.minus(&cpu_before),
    }
}

// ---------------------------------------------------------------- server counters

type Status = HashMap<String, u64>;

async fn global_status(conn: &mut Conn) -> Status {
    let rows: Vec<(String, String)> = conn
        .query("SHOW GLOBAL STATUS")
        .await
        .expect("bench: SHOW GLOBAL STATUS");
    rows.into_iter()
        .filter_map(|(k, v)| v.parse().ok().map(|v| (k, v)))
        .collect()
}

fn delta(before: &Status, after: &Status, key: &str) -> u64 {
    let get = |s: &Status| s.get(key).copied().unwrap_or(0);
    get(after).saturating_sub(get(before))
}

/// How many `Questions` one `SHOW GLOBAL STATUS` adds (the least of three
/// back-to-back pairs, so another client's statement does not count).
async fn status_self_cost(conn: &mut Conn) -> u64 {
    let mut least = u64::MAX;
    for _ in 0..3 {
        let a = global_status(conn).await;
        let b = global_status(conn).await;
        least = least.min(delta(&a, &b, "Questions"));
    }
    least
}

/// Server counter deltas over a window, the bench's own statements taken
/// out, per delivery.
struct StatementWindow {
    deltas: HashMap<String, f64>,
    per: f64,
    /// Statements nobody in this bench issues (INSERT, DDL, DELETE) ran in
    /// the window: another client's work is in the counters.
    contaminated: bool,
}

impl StatementWindow {
    /// `expected_updates`: the UPDATEs this window must show (two per
    /// delivery); any other number means another client updated too.
    fn new(
        before: &Status,
        after: &Status,
        probes: u64,
        self_cost: u64,
        per: f64,
        expected_updates: Option<u64>,
    ) -> Self {
        let mut deltas: HashMap<String, f64> = after
            .keys()
            .map(|k| (k.clone(), delta(before, after, k) as f64))
            .collect();
        if let Some(q) = deltas.get_mut("Questions") {
            *q = (*q - (probes + self_cost) as f64).max(0.0);
        }
        if let Some(s) = deltas.get_mut("Com_select") {
            *s = (*s - probes as f64).max(0.0);
        }
        let contaminated = [
            "Com_insert",
            "Com_insert_select",
            "Com_delete",
            "Com_create_db",
            "Com_drop_db",
            "Com_create_table",
        ]
        .iter()
        .any(|k| delta(before, after, k) > 0)
            || expected_updates.is_some_and(|n| delta(before, after, "Com_update") != n);
        Self {
            deltas,
            per,
            contaminated,
        }
    }

    fn per_delivery(&self, key: &str) -> f64 {
        self.deltas.get(key).copied().unwrap_or(0.0) / self.per.max(1.0)
    }
}

// ---------------------------------------------------------------- /proc

/// utime + stime of a process (all its threads), in clock ticks.
fn process_ticks(pid: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat
        .get(stat.rfind(')')? + 2..)?
        .split_whitespace()
        .collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// A `/proc/<pid>/status` line in kB (`VmHWM:`, `VmRSS:`).
fn vm_kib(pid: u32, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Busy and total ticks of all CPUs together.
fn machine_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu = stat.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<u64> = cpu
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3)? + v.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

fn find_mariadbd() -> Option<u32> {
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(entry.path().join("comm")).ok()?;
            matches!(comm.trim(), "mariadbd" | "mysqld").then_some(pid)
        })
}

fn clock_ticks_per_sec() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// CPU ticks of the daemon, MariaDB, this process and the whole machine.
#[derive(Debug, Clone, Copy, Default)]
struct CpuSample {
    daemon: u64,
    mariadb: u64,
    bench: u64,
    machine_busy: u64,
    machine_total: u64,
}

impl CpuSample {
    fn take(daemon: Option<u32>, mariadbd: Option<u32>) -> Self {
        let (machine_busy, machine_total) = machine_ticks().unwrap_or((0, 0));
        Self {
            daemon: daemon
                .and_then(|p| process_ticks(&p.to_string()))
                .unwrap_or(0),
            mariadb: mariadbd
                .and_then(|p| process_ticks(&p.to_string()))
                .unwrap_or(0),
            bench: process_ticks("self").unwrap_or(0),
            machine_busy,
            machine_total,
        }
    }

    fn minus(&self, earlier: &Self) -> Self {
        Self {
            daemon: self.daemon.saturating_sub(earlier.daemon),
            mariadb: self.mariadb.saturating_sub(earlier.mariadb),
            bench: self.bench.saturating_sub(earlier.bench),
            machine_busy: self.machine_busy.saturating_sub(earlier.machine_busy),
            machine_total: self.machine_total.saturating_sub(earlier.machine_total),
        }
    }

    fn daemon_ms(&self, hz: f64) -> f64 {
        self.daemon as f64 / hz * 1000.0
    }

    fn mariadb_ms(&self, hz: f64) -> f64 {
        self.mariadb as f64 / hz * 1000.0
    }

    fn bench_ms(&self, hz: f64) -> f64 {
        self.bench as f64 / hz * 1000.0
    }

    /// Share of all CPUs busy (100 = every core), anyone's work.
    fn machine_busy_percent(&self) -> f64 {
        if self.machine_total == 0 {
            return f64::NAN;
        }
        self.machine_busy as f64 / self.machine_total as f64 * 100.0
    }
}

// ---------------------------------------------------------------- candidate query

/// Many executions of `candidate_sql(0)` on one session.
struct CandidateTiming {
    reps: usize,
    mean_us: f64,
    p50_us: f64,
    p99_us: f64,
    rows: usize,
    /// `Handler_read_*` per execution (session counters).
    handler: BTreeMap<String, f64>,
    explain: String,
}

impl CandidateTiming {
    fn handler_total(&self) -> f64 {
        let total: f64 = self.handler.values().sum();
        (total * 100.0).round() / 100.0
    }

    fn describe(&self) -> String {
        let reads: Vec<String> = self
            .handler
            .iter()
            .filter(|(_, v)| **v > 0.004)
            .map(|(k, v)| format!("{}={v:.2}", k.trim_start_matches("Handler_read_")))
            .collect();
        format!(
            "mean {:.1} µs, p50 {:.1}, p99 {:.1} ({} runs, {} rows each); Handler_read_* per run: {}",
            self.mean_us,
            self.p50_us,
            self.p99_us,
            self.reps,
            self.rows,
            if reads.is_empty() {
                "none".to_owned()
            } else {
                reads.join(" ")
            }
        )
    }
}

async fn session_handlers(conn: &mut Conn) -> Status {
    let rows: Vec<(String, String)> = conn
        .query("SHOW SESSION STATUS LIKE 'Handler_read%'")
        .await
        .expect("bench: SHOW SESSION STATUS");
    rows.into_iter()
        .filter_map(|(k, v)| v.parse().ok().map(|v| (k, v)))
        .collect()
}

async fn time_candidates(
    conn: &mut Conn,
    windows: &Windows,
    limit: usize,
    reps: usize,
    label: &str,
) -> CandidateTiming {
    let sql_text = sql::candidate_sql(0);
    let statement = conn
        .prep(&sql_text)
        .await
        .expect("bench: prepare candidates");
    let cutoffs = windows.cutoffs(now_unix());
    let params = (
        4096u64,
        cutoffs.lease_cutoff,
        cutoffs.retry_cutoff,
        limit as u64,
    );
    // Warm the statement and the pages it touches.
    let warm: Vec<Row> = conn
        .exec(&statement, params)
        .await
        .expect("bench: candidates");
    // What SHOW SESSION STATUS itself adds to the handler counters.
    let c0 = session_handlers(conn).await;
    let c1 = session_handlers(conn).await;
    let h0 = session_handlers(conn).await;
    let mut micros = Vec::with_capacity(reps);
    for _ in 0..reps {
        let started = Instant::now();
        let rows: Vec<Row> = conn
            .exec(&statement, params)
            .await
            .expect("bench: candidates");
        micros.push(started.elapsed().as_secs_f64() * 1e6);
        drop(rows);
    }
    let h1 = session_handlers(conn).await;
    let handler = h1
        .keys()
        .map(|k| {
            let raw = delta(&h0, &h1, k) as f64 - delta(&c0, &c1, k) as f64;
            (
                k.clone(),
                (raw.max(0.0) / reps as f64 * 100.0).round() / 100.0,
            )
        })
        .collect();
    let mean_us = micros.iter().sum::<f64>() / reps.max(1) as f64;
    micros.sort_by(f64::total_cmp);
    let literal = sql_text
        .replacen('?', &params.0.to_string(), 1)
        .replacen('?', &cutoffs.lease_cutoff.to_string(), 1)
        .replacen('?', &cutoffs.retry_cutoff.to_string(), 1)
        .replacen('?', &limit.to_string(), 1);
    let plan: Vec<Row> = conn
        .query(format!("EXPLAIN {literal}"))
        .await
        .expect("bench: EXPLAIN candidates");
    let explain = plan
        .into_iter()
        .map(|mut row| {
            let mut col = |name: &str| -> String {
                row.take::<Option<String>, _>(name)
                    .flatten()
                    .unwrap_or_else(|| "NULL".to_owned())
            };
            format!(
                "type={} key={} rows={} extra={}",
                col("type"),
                col("key"),
                col("rows"),
                col("Extra")
            )
        })
        .collect::<Vec<_>>()
        .join(" | ");
    eprintln!("bench: candidate query ({label}): {:.1} µs mean", mean_us);
    CandidateTiming {
        reps,
        mean_us,
        p50_us: percentile(&micros, 50.0),
        p99_us: percentile(&micros, 99.0),
        rows: warm.len(),
        handler,
        explain,
    }
}

struct ScaleReport {
    insert_secs: f64,
    without: CandidateTiming,
    with: CandidateTiming,
}

/// The idle poll's cost on an empty queue, before and after `retained`
/// `sent` rows (a day old, as Phorge keeps them for a week) are added.
async fn scale_check(
    conn: &mut Conn,
    windows: &Windows,
    retained: u64,
    hooks: &[String],
) -> ScaleReport {
    let batch = windows.batch_size();
    let without = time_candidates(conn, windows, batch, 2_000, "idle, empty table").await;
    eprintln!("bench: inserting {retained} retained `sent` rows");
    let started = Instant::now();
    insert_retained(conn, retained, hooks).await;
    let insert_secs = started.elapsed().as_secs_f64();
    let with = time_candidates(conn, windows, batch, 2_000, "idle, retained rows").await;
    ScaleReport {
        insert_secs,
        without,
        with,
    }
}

/// `retained` sent rows: one multi-row INSERT, then INSERT … SELECT
/// doubling until there are enough.
async fn insert_retained(conn: &mut Conn, retained: u64, hooks: &[String]) {
    let day_ago = now_unix().saturating_sub(86_400);
    let first = retained.min(SEED_CHUNK as u64) as usize;
    let mut sql = String::from(
        "INSERT INTO herald_webhookrequest (phid, webhookPHID, objectPHID, status, \
         properties, lastRequestResult, lastRequestEpoch, dateCreated, dateModified) VALUES ",
    );
    for i in 0..first {
        if i > 0 {
            sql.push(',');
        }
        let _ = write!(
            sql,
            "('PHID-HWBR-R{i:019}', '{}', 'PHID-TASK-R{i:019}', 'sent', '{PROPERTIES_SENT}', \
             'okay', {day_ago}, {day_ago}, {})",
            hooks[i % hooks.len()],
            day_ago + 1
        );
    }
    conn.query_drop(sql).await.expect("bench: retained rows");
    for step in 1..=40u32 {
        let have = count(
            conn,
            "SELECT COUNT(*) FROM herald_webhookrequest WHERE status = 'sent'",
        )
        .await;
        if have >= retained {
            break;
        }
        let n = have.min(retained - have);
        eprintln!("bench: retained rows {have}, adding {n}");
        conn.query_drop(format!(
            "INSERT INTO herald_webhookrequest (phid, webhookPHID, objectPHID, status, \
             properties, lastRequestResult, lastRequestEpoch, dateCreated, dateModified) \
             SELECT CONCAT('PHID-HWBR-R', {step}, '-', id), webhookPHID, \
             CONCAT('PHID-TASK-R', {step}, '-', id), status, properties, lastRequestResult, \
             lastRequestEpoch, dateCreated, dateModified \
             FROM herald_webhookrequest WHERE status = 'sent' LIMIT {n}"
        ))
        .await
        .expect("bench: double the retained rows");
    }
}

// ---------------------------------------------------------------- daemon counters

/// The daemon's `/metrics` counters (name with labels → value).
#[derive(Debug, Default)]
struct Counters(BTreeMap<String, f64>);

impl Counters {
    fn get(&self, name: &str) -> f64 {
        self.0.get(name).copied().unwrap_or(0.0)
    }

    fn describe(&self, deliveries: f64) -> String {
        if self.0.is_empty() {
            return "unavailable".to_owned();
        }
        format!(
            "polls {:.0} ({:.3}/delivery), claims won {:.0} lost {:.0}, lock busy {:.0}, \
             breaker skips {:.0}, store errors {:.0}",
            self.get("gorge_webhook_polls_total"),
            self.get("gorge_webhook_polls_total") / deliveries,
            self.get("gorge_webhook_claims_total{result=\"won\"}"),
            self.get("gorge_webhook_claims_total{result=\"lost\"}"),
            self.get("gorge_webhook_lock_busy_total"),
            self.get("gorge_webhook_breaker_skips_total"),
            self.get("gorge_webhook_store_errors_total"),
        )
    }
}

/// `GET /metrics` over plain HTTP/1.1 on loopback; empty on any failure.
fn scrape_metrics(addr: SocketAddr) -> Counters {
    use std::io::{Read, Write};
    let mut text = String::new();
    let fetched = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)).and_then(
        |mut stream| {
            stream.set_read_timeout(Some(Duration::from_secs(5)))?;
            stream.write_all(
                b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
            )?;
            stream.read_to_string(&mut text)
        },
    );
    if fetched.is_err() {
        eprintln!("bench: could not read the daemon's /metrics");
        return Counters::default();
    }
    Counters(
        text.lines()
            .filter(|l| l.starts_with("gorge_webhook_"))
            .filter_map(|l| {
                let (name, value) = l.rsplit_once(' ')?;
                Some((name.to_owned(), value.trim().parse().ok()?))
            })
            .collect(),
    )
}
