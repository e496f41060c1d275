//! `--idle-wake` (issue 36), run instead of the default drain: how soon an
//! idle daemon sends a fresh row, and what its idleness costs the
//! database. `--instances N` daemons on their own settings (plus any
//! `--env`) share one hook that answers at once; after they have settled,
//! the server's counters over `--idle-secs` of nothing to do give the
//! statements each instance sends and the index reads per statement; then
//! `--timed` rows are inserted one at a time, 0.4–1.2 s apart (moments a
//! person's edits come at, never in step with a poll), each timed from its
//! INSERT's return to the receiver's first byte. Every row must arrive
//! exactly once. With `--binlog` it runs on a private server that keeps a
//! binary log (which the daemons then follow) instead of the local one.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use mysql_async::Conn;
use serde_json::{json, Value};
use webhook_test_support::mariadb::PhorgeSide;
use webhook_test_support::{DaemonProcess, Receiver, Reply, TestDb};

use crate::args::{daemon_settings, Args};
use crate::phases::{latencies, wait_for_receipts, Enqueued, Latency, Lcg};
use crate::report::{round, source_version};
use crate::sampling::{
    clock_ticks_per_sec, delta, global_status, process_ticks, self_cost, status_self_cost, Status,
};
use crate::seed::{insert_hooks, insert_one};
use crate::{daemon, free_listen_addr, Outcome};

/// The shortest gap between two timed inserts, and how much longer one may
/// be (uniform).
const GAP_MIN_MS: u64 = 400;
const GAP_SPREAD_MS: u64 = 800;

/// How long the daemons get after the warm-up row before the idle window.
const SETTLE: Duration = Duration::from_secs(3);

/// The idle window's figures.
struct IdleCost {
    secs: f64,
    /// `Questions` per second per instance, the bench's own taken out.
    statements_per_sec: f64,
    /// `Handler_read_*` per statement (every client's but the bench's own
    /// status reads).
    index_reads_per_statement: f64,
    /// CPU per instance, percent of one core.
    cpu_percent: f64,
}

/// Runs the idle-wake measurement on `db`.
pub(crate) async fn run(db: TestDb, args: Args, instances: usize) -> Outcome {
    let mut failures = Vec::new();
    let side = PhorgeSide::create_on(db.port, &db.namespace).await;
    let receiver = Receiver::counting().await;
    let hooks = insert_hooks(&db, 1, receiver.addr()).await;
    daemon::answer_hooks(&receiver, 1, Reply::status(200));
    let mut conn = db.conn().await;
    let self_cost = SelfCost {
        statements: status_self_cost(&mut conn).await,
        reads: self_cost(&mut conn, index_reads).await,
    };
    let mut daemons: Vec<DaemonProcess> = (0..instances)
        .map(|_| {
            let mut settings = daemon_settings(&args, &db.namespace, free_listen_addr());
            // The private server's, with `--binlog`.
            let port = ("GORGE_WEBHOOK_MYSQL_PORT".to_owned(), db.port.to_string());
            settings.env.push(port);
            daemon::spawn(&settings.env, args.daemon_bin.as_deref())
        })
        .collect();
    let mut expected = HashMap::new();
    let warm = "PHID-TASK-warmup000000000000000".to_owned();
    expected.insert(
        warm.clone(),
        Enqueued::Timed(insert_one(&mut conn, &warm, &hooks[0]).await),
    );
    if let Err(why) = wait_for_receipts(&receiver, 1, Duration::from_secs(60), &mut daemons).await {
        failures.push(format!("warm-up row: {why}"));
    }
    tokio::time::sleep(SETTLE).await;
    let cost = idle_cost(&mut conn, &daemons, args.idle_secs, self_cost).await;
    eprintln!(
        "bench: idle: {:.1} statements/s per instance, {:.1} index reads per statement",
        cost.statements_per_sec, cost.index_reads_per_statement
    );
    let mut rng = Lcg(0x2545_f491_4f6c_dd1d);
    let mut timed = Vec::with_capacity(args.timed);
    for i in 0..args.timed {
        tokio::time::sleep(Duration::from_millis(GAP_MIN_MS + rng.below(GAP_SPREAD_MS))).await;
        let object = format!("PHID-TASK-iw{i:018}");
        expected.insert(
            object.clone(),
            Enqueued::Timed(insert_one(&mut conn, &object, &hooks[0]).await),
        );
        timed.push(object);
    }
    let want = expected.len() as u64;
    if let Err(why) =
        wait_for_receipts(&receiver, want, Duration::from_secs(60), &mut daemons).await
    {
        failures.push(format!("timed rows: {why}"));
    }
    let latency = latencies(&receiver, &expected, &timed);
    let duplicates = receiver.receipts().values().filter(|r| r.count > 1).count();
    if duplicates > 0 {
        failures.push(format!("{duplicates} rows received more than once"));
    }
    for daemon in &mut daemons {
        if !daemon::stop(daemon, Duration::from_secs(20)).await {
            failures.push("a daemon did not exit cleanly".to_owned());
        }
    }
    drop(conn);
    side.drop().await;
    report(&args, instances, &cost, &latency, failures)
}

/// What the bench's own pair of `SHOW GLOBAL STATUS` adds to the counters.
#[derive(Clone, Copy)]
struct SelfCost {
    statements: u64,
    reads: u64,
}

/// `Handler_read_*` of all kinds.
fn index_reads(status: &Status) -> u64 {
    status
        .iter()
        .filter(|(k, _)| k.starts_with("Handler_read"))
        .map(|(_, v)| *v)
        .sum()
}

/// The server's counters and the daemons' CPU over `secs` of nothing to do.
async fn idle_cost(
    conn: &mut Conn,
    daemons: &[DaemonProcess],
    secs: u64,
    self_cost: SelfCost,
) -> IdleCost {
    let pids: Vec<String> = daemons.iter().map(|d| d.pid().to_string()).collect();
    let ticks = |pids: &[String]| pids.iter().filter_map(|p| process_ticks(p)).sum::<u64>();
    let before: Status = global_status(conn).await;
    let t0 = ticks(&pids);
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let t1 = ticks(&pids);
    let after: Status = global_status(conn).await;
    let elapsed = started.elapsed().as_secs_f64();
    let statements =
        delta(&before, &after, "Questions").saturating_sub(self_cost.statements) as f64;
    let reads = index_reads(&after)
        .saturating_sub(index_reads(&before))
        .saturating_sub(self_cost.reads);
    let instances = daemons.len().max(1) as f64;
    IdleCost {
        secs: elapsed,
        statements_per_sec: statements / elapsed / instances,
        index_reads_per_statement: reads as f64 / statements.max(1.0),
        cpu_percent: t1.saturating_sub(t0) as f64 / clock_ticks_per_sec() as f64 / elapsed * 100.0
            / instances,
    }
}

fn report(
    args: &Args,
    instances: usize,
    cost: &IdleCost,
    latency: &Latency,
    failures: Vec<String>,
) -> Outcome {
    let settings: Vec<String> = args
        .extra_env
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let table = format!(
        "idle wake-up, {instances} instance(s), {}, settings: {}\n\
         idle insert→receipt ({} rows {GAP_MIN_MS}–{} ms apart): p50 {:.1} ms, p99 {:.1} ms, \
         max {:.1} ms\n\
         idle database cost over {:.0} s: {:.1} statements/s per instance, {:.1} index reads \
         per statement; daemon CPU {:.2} % per instance\n",
        if args.binlog {
            "private server, binary log on"
        } else {
            "local server"
        },
        if settings.is_empty() {
            "defaults".to_owned()
        } else {
            settings.join(" ")
        },
        latency.n,
        GAP_MIN_MS + GAP_SPREAD_MS,
        latency.p50,
        latency.p99,
        latency.max,
        cost.secs,
        cost.statements_per_sec,
        cost.index_reads_per_statement,
        cost.cpu_percent,
    );
    let json: Value = json!({
        "mode": "idle-wake",
        "source": source_version(),
        "instances": instances,
        "binlog": args.binlog,
        "settings": settings,
        "timed_rows": latency.n,
        "idle_latency_ms": {
            "p50": round(latency.p50, 1),
            "p99": round(latency.p99, 1),
            "max": round(latency.max, 1),
        },
        "idle_statements_per_sec_per_instance": round(cost.statements_per_sec, 2),
        "idle_index_reads_per_statement": round(cost.index_reads_per_statement, 2),
        "idle_cpu_percent_per_instance": round(cost.cpu_percent, 3),
        "failures": failures,
    });
    Outcome {
        table,
        json,
        failures,
    }
}
