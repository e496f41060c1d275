//! `--scenarios` (issue 19), run instead of the default drain: the real
//! case of a backlog over many slow receivers — 10,000 rows over 1,000
//! hooks answering after 100 ms, once per `--scenario-m` value — and then
//! the stock-schema idle poll ([`crate::idle_poll`]). Each part gets its own
//! fresh database. A drain that hits the server's connection limit, stalls
//! or loses its daemon is recorded (what arrived by the deadline, the
//! daemon's warnings and errors by event name) and the run goes on; only a
//! row received twice fails the run. Server settings are only read.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use webhook_test_support::mariadb::{server_conn, PhorgeSide, PORT};
use webhook_test_support::{with_db, DaemonProcess, Receiver, Reply, TestDb};

use crate::args::{daemon_settings, Args};
use crate::report::{round, source_version};
use crate::sampling::vm_kib;
use crate::{daemon, free_listen_addr, idle_poll, seed, Outcome};
use webhook_test_support::process_sessions::session_ids;

const ROWS: usize = 10_000;
const HOOKS: usize = 1_000;
const LATENCY_MS: u64 = 100;

/// One drain scenario's figures.
struct DrainScenario {
    max_concurrent: usize,
    pool_max: usize,
    delivered: usize,
    complete: bool,
    secs: f64,
    per_sec: f64,
    peak_sessions: usize,
    rss_peak_kib: Option<u64>,
    duplicates: usize,
    missing: usize,
    unsent: u64,
    clean_exit: bool,
    log_events: BTreeMap<String, usize>,
}

impl DrainScenario {
    /// min(M, hooks) / latency: what per-hook serialisation and M allow.
    fn ceiling(&self) -> f64 {
        self.max_concurrent.min(HOOKS) as f64 / (LATENCY_MS as f64 / 1000.0)
    }

    fn line(&self) -> String {
        format!(
            "scenario {ROWS} rows / {HOOKS} hooks / {LATENCY_MS} ms, max_concurrent {} (pool {}): \
             {}/{ROWS} received{} in {:.1} s, {:.1} deliveries/s = {:.1} % of {:.0}/s; \
             peak sessions {}, peak RSS {}; exactly once: {} ({} duplicated, {} missing, \
             {} not sent); clean exit: {}; log warnings/errors: {:?}\n",
            self.max_concurrent,
            self.pool_max,
            self.delivered,
            if self.complete { "" } else { " (deadline)" },
            self.secs,
            self.per_sec,
            100.0 * self.per_sec / self.ceiling(),
            self.ceiling(),
            self.peak_sessions,
            self.rss_peak_kib
                .map_or("?".to_owned(), |k| format!("{:.1} MiB", k as f64 / 1024.0)),
            self.duplicates == 0 && self.missing == 0,
            self.duplicates,
            self.missing,
            self.unsent,
            self.clean_exit,
            self.log_events
        )
    }

    fn json(&self) -> Value {
        json!({
            "rows": ROWS, "hooks": HOOKS, "latency_ms": LATENCY_MS,
            "max_concurrent": self.max_concurrent,
            "pool_max": self.pool_max,
            "delivered": self.delivered,
            "complete": self.complete,
            "drain_secs": round(self.secs, 2),
            "deliveries_per_sec": round(self.per_sec, 1),
            "ceiling_per_sec": round(self.ceiling(), 1),
            "share_of_ceiling": round(self.per_sec / self.ceiling(), 3),
            "peak_db_sessions": self.peak_sessions,
            "rss_peak_kib": self.rss_peak_kib,
            "duplicates": self.duplicates,
            "missing": self.missing,
            "not_sent": self.unsent,
            "exactly_once": self.duplicates == 0 && self.missing == 0,
            "clean_exit": self.clean_exit,
            "log_events": self.log_events,
        })
    }
}

/// Runs `body` on a fresh database and hands back what it returns.
async fn on_fresh_db<T, F, Fut>(body: F) -> T
where
    T: Send + 'static,
    F: FnOnce(TestDb) -> Fut,
    Fut: Future<Output = T>,
{
    let slot: Arc<Mutex<Option<T>>> = Arc::new(Mutex::new(None));
    let out = Arc::clone(&slot);
    with_db(move |db| async move {
        let value = body(db).await;
        *out.lock().expect("scenario slot") = Some(value);
    })
    .await;
    let value = slot.lock().expect("scenario slot").take();
    value.expect("bench: the scenario produced no result")
}

/// Every scenario in turn; one line each, then one JSON line.
pub(crate) async fn run(args: Args, list: Vec<Option<usize>>) -> Outcome {
    let mut table = String::from("\nwebhook-daemon scenarios (issue 19)\n");
    let mut drains = Vec::new();
    let mut failures = Vec::new();
    for m in list {
        let args = Args {
            max_concurrent: m,
            ..args.clone()
        };
        let scenario = on_fresh_db(|db| drain_scenario(db, args)).await;
        if scenario.duplicates > 0 {
            failures.push(format!(
                "max_concurrent {}: {} rows received more than once",
                scenario.max_concurrent, scenario.duplicates
            ));
        }
        eprint!("bench: {}", scenario.line());
        table.push_str(&scenario.line());
        drains.push(scenario);
    }
    let retained = args.retained;
    let idle = on_fresh_db(|db| async move {
        let settings = daemon_settings(&args, &db.namespace, free_listen_addr());
        idle_poll::measure(&db, &settings, retained).await
    })
    .await;
    table.push_str(&idle.lines());
    let json = json!({
        "mode": "scenarios",
        "source": source_version(),
        "drains": drains.iter().map(DrainScenario::json).collect::<Vec<_>>(),
        "idle_poll": idle.json(),
        "failures": failures,
    });
    Outcome {
        table,
        json,
        failures,
    }
}

/// One drain: seed, start the daemon, sample its sessions until every row
/// arrived or the deadline passed, stop it, check the receipts.
async fn drain_scenario(db: TestDb, args: Args) -> DrainScenario {
    let side = PhorgeSide::create(&db.namespace).await;
    let receiver = Receiver::counting().await;
    let settings = daemon_settings(&args, &db.namespace, free_listen_addr());
    let mc = settings.windows.max_concurrent();
    let hooks = seed::insert_hooks(&db, HOOKS, receiver.addr()).await;
    let reply = Reply::status(200).after(Duration::from_millis(LATENCY_MS));
    daemon::answer_hooks(&receiver, HOOKS, reply);
    let mut probe = db.conn().await;
    let backlog = seed::Backlog::seed(&mut probe, ROWS, &hooks).await;
    let mut sampler = server_conn().await;
    eprintln!(
        "bench: scenario max_concurrent {mc}, pool {}",
        settings.pool_max
    );
    let mut daemon = daemon::spawn(&settings.env, args.daemon_bin.as_deref());
    let deadline = Duration::from_secs(120)
        + Duration::from_millis(ROWS as u64 * (LATENCY_MS + 3) / mc.min(HOOKS) as u64 * 3);
    let peak_sessions = watch_drain(&receiver, &mut daemon, &mut sampler, deadline).await;
    let wait_end = Instant::now();
    let delivered = receiver.first_receipts(|o| o.starts_with("PHID-TASK-bl"));
    let complete = delivered.len() == ROWS;
    // Give the last write-backs a moment before counting unsent rows.
    let settle = Instant::now() + Duration::from_secs(30);
    while complete && backlog.not_sent(&mut probe).await > 0 && Instant::now() < settle {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let unsent = backlog.not_sent(&mut probe).await;
    let rss_peak_kib = vm_kib(daemon.pid(), "VmHWM:");
    let clean_exit = daemon::stop(&mut daemon, Duration::from_secs(30)).await;
    let (secs, per_sec) = rate(&delivered, complete, wait_end);
    let received = receiver.receipts();
    let expected = backlog.expected();
    let log_events = log_events(&daemon);
    drop(probe);
    drop(sampler);
    side.drop().await;
    if args.history {
        if let Some(failure) = crate::history::check(&db.namespace, &receiver).await {
            eprintln!("bench: FAILED: {failure}");
        }
    }
    DrainScenario {
        max_concurrent: mc,
        pool_max: settings.pool_max,
        delivered: delivered.len(),
        complete,
        secs,
        per_sec,
        peak_sessions,
        rss_peak_kib,
        duplicates: received.values().filter(|r| r.count > 1).count(),
        missing: expected
            .keys()
            .filter(|o| !received.contains_key(*o))
            .count(),
        unsent,
        clean_exit,
        log_events,
    }
}

/// Polls the receiver every 50 ms until every row arrived, the deadline
/// passed or the daemon exited; returns the most daemon sessions seen.
async fn watch_drain(
    receiver: &Receiver,
    daemon: &mut DaemonProcess,
    sampler: &mut mysql_async::Conn,
    deadline: Duration,
) -> usize {
    let started = Instant::now();
    let mut reported = Instant::now();
    let mut peak = 0;
    loop {
        let sessions = session_ids(sampler, daemon.pid(), PORT)
            .await
            .unwrap_or_else(|e| {
                eprintln!("bench: PROCESSLIST: {e}");
                Vec::new()
            });
        peak = peak.max(sessions.len());
        let got = receiver.distinct_objects();
        if got >= ROWS as u64 {
            return peak;
        }
        if let Err(why) = daemon::alive(daemon) {
            eprintln!("bench: {why}");
            return peak;
        }
        if started.elapsed() > deadline {
            eprintln!(
                "bench: only {got} of {ROWS} received within {} s",
                deadline.as_secs()
            );
            return peak;
        }
        if reported.elapsed() > Duration::from_secs(5) {
            eprintln!("bench: {got} of {ROWS} received, peak sessions {peak}");
            reported = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// (first → last receipt in s, (n − 1) / that) for a complete drain; for
/// an incomplete one, first receipt → the end of the wait and n / that.
fn rate(receipts: &[Instant], complete: bool, wait_end: Instant) -> (f64, f64) {
    let n = receipts.len() as f64;
    let secs = match (receipts.first(), receipts.last()) {
        (Some(first), Some(last)) if complete => last.duration_since(*first).as_secs_f64(),
        (Some(first), _) => wait_end.duration_since(*first).as_secs_f64(),
        _ => 0.0,
    };
    match secs > 0.0 {
        true if complete => (secs, (n - 1.0) / secs),
        true => (secs, n / secs),
        false => (secs, 0.0),
    }
}

/// The daemon's WARN and ERROR lines counted by their `event` field.
fn log_events(daemon: &DaemonProcess) -> BTreeMap<String, usize> {
    let mut events = BTreeMap::new();
    for line in daemon.stderr().lines() {
        if !(line.contains("WARN") || line.contains("ERROR")) {
            continue;
        }
        let name = event_name(line).unwrap_or("(no event field)");
        *events.entry(name.to_owned()).or_insert(0) += 1;
    }
    events
}

/// `event=name`, `event="name"` or `"event":"name"` in a log line.
fn event_name(line: &str) -> Option<&str> {
    let (_, rest) = line
        .split_once("event=")
        .or_else(|| line.split_once("\"event\":"))?;
    let rest = rest.trim_start_matches('"');
    let end = rest
        .find(|c: char| c == '"' || c == ',' || c.is_whitespace())
        .unwrap_or(rest.len());
    Some(&rest[..end])
}
