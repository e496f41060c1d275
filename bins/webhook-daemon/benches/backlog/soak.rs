//! Soak mode of the backlog bench (issue 17): rows arrive at a steady rate
//! over many hooks, some of which answer 500, some of which answer only
//! after the delivery timeout, and (optionally) one extra hook answers
//! slowly with rows queued for it before the daemon starts. It reports, for
//! the healthy hooks (2xx at once) and for the whole run, rows inserted and
//! received, enqueue→receipt latency, the daemon's `hook_slow` lines, and
//! whether every healthy row was received exactly once.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use serde_json::{json, Value};
use webhook_test_support::mariadb::PhorgeSide;
use webhook_test_support::{DaemonProcess, Receipt, Receiver, Reply, TestDb};

use crate::args::{daemon_settings, Args};
use crate::daemon;
use crate::report::{round, source_version};
use crate::sampling::{percentile, scrape_metrics};
use crate::seed::{hook_phid, insert_hooks};
use crate::{free_listen_addr, Outcome};

/// Phorge's properties for a rule-triggered request: `retry` is `forever`
/// (the backlog's `PROPERTIES` say `never`, which fails a row at its first
/// non-2xx).
const PROPERTIES_FOREVER: &str =
    "{\"retry\":\"forever\",\"transactionPHIDs\":{\"PHID-XACT-TASK-aaaaaaaaaaaaaaa\":\
\"PHID-XACT-TASK-aaaaaaaaaaaaaaa\"},\"triggerPHIDs\":[\"PHID-HRUL-abcdefghijklmnopqrst\"],\
\"silent\":false,\"test\":false,\"secure\":false}";

/// How long after the last insert the healthy rows may still arrive.
const DRAIN_GRACE: Duration = Duration::from_secs(30);

/// The soak's own options (see `USAGE`).
#[derive(Debug, Clone)]
pub(super) struct SoakArgs {
    pub(super) secs: u64,
    pub(super) rate: f64,
    pub(super) failing_pct: u64,
    pub(super) timeout_pct: u64,
    pub(super) slow_hook_ms: Option<u64>,
    pub(super) slow_hook_rows: usize,
}

impl Default for SoakArgs {
    fn default() -> Self {
        Self {
            secs: 0,
            rate: 300.0,
            failing_pct: 0,
            timeout_pct: 0,
            slow_hook_ms: None,
            slow_hook_rows: 40,
        }
    }
}

impl SoakArgs {
    pub(super) fn check(&self) -> Result<(), String> {
        if self.secs > 3_600 {
            return Err("--soak-secs must be between 1 and 3600".to_owned());
        }
        if !(1.0..=5_000.0).contains(&self.rate) {
            return Err("--soak-rate must be between 1 and 5000".to_owned());
        }
        if self.failing_pct + self.timeout_pct > 100 {
            return Err("--failing-pct plus --timeout-pct must be at most 100".to_owned());
        }
        Ok(())
    }
}

/// What a hook's receiver does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Behaviour {
    /// 200 at once.
    Healthy,
    /// 500 at once.
    Failing,
    /// 200 only after the delivery timeout (the daemon gives up first).
    Timeout,
    /// 200 after `--slow-hook-ms`.
    Slow,
}

impl Behaviour {
    fn name(self) -> &'static str {
        match self {
            Self::Healthy => "healthy",
            Self::Failing => "failing",
            Self::Timeout => "timeout",
            Self::Slow => "slow",
        }
    }
}

/// Hook `i` of the `hooks` rate hooks: the first `failing_pct` % fail, the
/// next `timeout_pct` % time out, the rest are healthy; the slow hook, if
/// any, comes last.
fn behaviours(hooks: usize, soak: &SoakArgs) -> Vec<Behaviour> {
    let mut all: Vec<Behaviour> = (0..hooks)
        .map(|i| {
            let bucket = (i * 100 / hooks) as u64;
            match bucket {
                b if b < soak.failing_pct => Behaviour::Failing,
                b if b < soak.failing_pct + soak.timeout_pct => Behaviour::Timeout,
                _ => Behaviour::Healthy,
            }
        })
        .collect();
    if soak.slow_hook_ms.is_some() {
        all.push(Behaviour::Slow);
    }
    all
}

// ---------------------------------------------------------------- receiver

impl Behaviour {
    /// How a hook with this behaviour answers; `slow` and `timeout` are the
    /// slow hook's latency and how long a timing-out hook takes.
    fn reply(self, slow: Duration, timeout: Duration) -> Reply {
        match self {
            Self::Healthy => Reply::status(200),
            Self::Failing => Reply::status(500),
            Self::Timeout => Reply::status(200).after(timeout),
            Self::Slow => Reply::status(200).after(slow),
        }
    }
}

/// A counting receiver answering by hook (`/hook/<i>`, as `kinds` says),
/// recording every object's first receipt and how many times it came.
async fn soak_receiver(kinds: &[Behaviour], slow: Duration, timeout: Duration) -> Receiver {
    let receiver = Receiver::counting().await;
    for (i, kind) in kinds.iter().enumerate() {
        receiver.always(&format!("/hook/{i}"), kind.reply(slow, timeout));
    }
    receiver
}

// ---------------------------------------------------------------- rows

/// A row the soak inserted: its object, its hook's index, when it was sent.
struct Inserted {
    object: String,
    hook: usize,
    at: Instant,
}

/// Multi-row INSERT of `rows` (object, hook PHID), as Phorge writes them.
async fn insert_rows(conn: &mut Conn, rows: &[(String, &str)]) {
    let mut sql = String::from(
        "INSERT INTO herald_webhookrequest (phid, webhookPHID, objectPHID, status, \
         properties, lastRequestResult, lastRequestEpoch, dateCreated, dateModified) VALUES ",
    );
    for (k, (object, hook)) in rows.iter().enumerate() {
        if k > 0 {
            sql.push(',');
        }
        let _ = write!(
            sql,
            "('PHID-HWBR-{}', '{hook}', '{object}', 'queued', '{PROPERTIES_FOREVER}', 'none', 0, \
             UNIX_TIMESTAMP(), UNIX_TIMESTAMP())",
            &object["PHID-TASK-".len()..],
        );
    }
    conn.query_drop(sql).await.expect("bench: soak insert");
}

/// The slow hook's rows, queued before the daemon starts.
async fn seed_slow(conn: &mut Conn, n: usize, hook: usize) -> Vec<Inserted> {
    let phid = hook_phid(hook);
    let rows: Vec<(String, &str)> = (0..n)
        .map(|i| (format!("PHID-TASK-sl{i:018}"), phid.as_str()))
        .collect();
    let at = Instant::now();
    if !rows.is_empty() {
        insert_rows(conn, &rows).await;
    }
    rows.into_iter()
        .map(|(object, _)| Inserted { object, hook, at })
        .collect()
}

/// Inserts rows at `rate` per second, round-robin over hooks `0..hooks`,
/// every ~10 ms, for `secs`.
async fn steady_load(mut conn: Conn, hooks: usize, rate: f64, secs: u64) -> Vec<Inserted> {
    let phids: Vec<String> = (0..hooks).map(hook_phid).collect();
    let started = Instant::now();
    let until = Duration::from_secs(secs);
    let mut inserted: Vec<Inserted> = Vec::new();
    while started.elapsed() < until {
        let target = (rate * started.elapsed().as_secs_f64()) as usize;
        let first = inserted.len();
        let n = target.saturating_sub(first).min(1_000);
        if n > 0 {
            let rows: Vec<(String, &str)> = (first..first + n)
                .map(|i| (format!("PHID-TASK-sk{i:018}"), phids[i % hooks].as_str()))
                .collect();
            let at = Instant::now();
            insert_rows(&mut conn, &rows).await;
            inserted.extend(
                rows.into_iter()
                    .enumerate()
                    .map(|(k, (object, _))| Inserted {
                        object,
                        hook: (first + k) % hooks,
                        at,
                    }),
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    inserted
}

// ---------------------------------------------------------------- report

/// Inserted, received, exactly-once and latency figures of some rows;
/// rows never received count as waiting until `end` in `p99_with_missing`.
fn summarise<'a>(
    rows: impl Iterator<Item = &'a Inserted>,
    receipts: &HashMap<String, Receipt>,
    end: Instant,
) -> Value {
    let (mut inserted, mut once, mut repeated) = (0usize, 0usize, 0usize);
    let mut ms: Vec<f64> = Vec::new();
    let mut censored: Vec<f64> = Vec::new();
    for row in rows {
        inserted += 1;
        let wait = match receipts.get(&row.object) {
            Some(r) => {
                match r.count {
                    1 => once += 1,
                    _ => repeated += 1,
                }
                let wait = r.first.saturating_duration_since(row.at).as_secs_f64() * 1000.0;
                ms.push(wait);
                wait
            }
            None => end.saturating_duration_since(row.at).as_secs_f64() * 1000.0,
        };
        censored.push(wait);
    }
    ms.sort_by(f64::total_cmp);
    censored.sort_by(f64::total_cmp);
    json!({
        "inserted": inserted,
        "received": ms.len(),
        "received_once": once,
        "received_more_than_once": repeated,
        "missing": inserted - ms.len(),
        "latency_ms": {
            "p50": round(percentile(&ms, 50.0), 1),
            "p95": round(percentile(&ms, 95.0), 1),
            "p99": round(percentile(&ms, 99.0), 1),
            "max": round(ms.last().copied().unwrap_or(f64::NAN), 1),
            "p99_with_missing": round(percentile(&censored, 99.0), 1),
        },
    })
}

fn describe(name: &str, v: &Value) -> String {
    let l = &v["latency_ms"];
    format!(
        "{name:>8}: inserted {} received {} (once {}, more {}) missing {}; \
         latency ms p50 {} p95 {} p99 {} max {} (p99 counting missing {})\n",
        v["inserted"],
        v["received"],
        v["received_once"],
        v["received_more_than_once"],
        v["missing"],
        l["p50"],
        l["p95"],
        l["p99"],
        l["max"],
        l["p99_with_missing"]
    )
}

fn count_log(daemon: &DaemonProcess, needle: &str) -> usize {
    daemon
        .stderr()
        .lines()
        .filter(|l| l.contains(needle))
        .count()
}

async fn status_counts(conn: &mut Conn) -> Value {
    let rows: Vec<(String, u64)> = conn
        .query("SELECT status, COUNT(*) FROM herald_webhookrequest GROUP BY status")
        .await
        .expect("bench: status counts");
    Value::Object(rows.into_iter().map(|(s, n)| (s, json!(n))).collect())
}

/// Waits until every healthy row arrived or `DRAIN_GRACE` passed.
async fn drain_healthy(receiver: &Receiver, healthy: &[&Inserted]) {
    let until = Instant::now() + DRAIN_GRACE;
    while Instant::now() < until {
        let receipts = receiver.receipts();
        if healthy.iter().all(|r| receipts.contains_key(&r.object)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Prints progress every 10 s while the load runs; fails if the daemon
/// exits.
async fn watch(
    load: &tokio::task::JoinHandle<Vec<Inserted>>,
    daemon: &mut DaemonProcess,
    receiver: &Receiver,
) -> Result<(), String> {
    let started = Instant::now();
    let mut reported = Instant::now();
    while !load.is_finished() {
        daemon::alive(daemon)?;
        if reported.elapsed() >= Duration::from_secs(10) {
            eprintln!(
                "bench: soak {:.0} s, {} objects received",
                started.elapsed().as_secs_f64(),
                receiver.receipts().len()
            );
            reported = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Says on stderr what the soak will do.
fn announce(args: &Args, soak: &SoakArgs) {
    eprintln!(
        "bench: soak {} s at {} rows/s over {} hooks ({} % failing, {} % timing out{})",
        soak.secs,
        soak.rate,
        args.hooks,
        soak.failing_pct,
        soak.timeout_pct,
        match soak.slow_hook_ms {
            Some(ms) => format!(", one slow hook: {ms} ms, {} rows", soak.slow_hook_rows),
            None => String::new(),
        }
    );
}

/// [`summarise`] per behaviour that had rows, each also described in
/// `table`.
fn summarise_by_kind(
    rows: &[Inserted],
    kinds: &[Behaviour],
    receipts: &HashMap<String, Receipt>,
    end: Instant,
    table: &mut String,
) -> serde_json::Map<String, Value> {
    let mut by_kind = serde_json::Map::new();
    for kind in [
        Behaviour::Healthy,
        Behaviour::Failing,
        Behaviour::Timeout,
        Behaviour::Slow,
    ] {
        let v = summarise(rows.iter().filter(|r| kinds[r.hook] == kind), receipts, end);
        if v["inserted"] != json!(0) {
            table.push_str(&describe(kind.name(), &v));
            by_kind.insert(kind.name().to_owned(), v);
        }
    }
    by_kind
}

pub(super) async fn run_soak(db: TestDb, args: Args, soak: SoakArgs) -> Outcome {
    let mut failures = Vec::new();
    let _side = PhorgeSide::create(&db.namespace).await;
    let settings = daemon_settings(&args, &db.namespace, free_listen_addr());
    let timeout = settings.windows.delivery_timeout();
    let kinds = behaviours(args.hooks, &soak);
    let receiver = soak_receiver(
        &kinds,
        Duration::from_millis(soak.slow_hook_ms.unwrap_or(0)),
        timeout + Duration::from_secs(5),
    )
    .await;
    insert_hooks(&db, kinds.len(), receiver.addr()).await;
    let mut probe = db.conn().await;
    let mut rows = match soak.slow_hook_ms {
        Some(_) => seed_slow(&mut probe, soak.slow_hook_rows, args.hooks).await,
        None => Vec::new(),
    };
    announce(&args, &soak);
    let mut daemon = daemon::spawn(&settings.env, args.daemon_bin.as_deref());
    let load = tokio::spawn(steady_load(
        db.conn().await,
        args.hooks,
        soak.rate,
        soak.secs,
    ));
    if let Err(why) = watch(&load, &mut daemon, &receiver).await {
        failures.push(why);
    }
    rows.extend(load.await.expect("bench: the soak's insert task"));
    let healthy: Vec<&Inserted> = rows
        .iter()
        .filter(|r| kinds[r.hook] == Behaviour::Healthy)
        .collect();
    drain_healthy(&receiver, &healthy).await;
    let end = Instant::now();
    let receipts = receiver.receipts();
    let counters = scrape_metrics(&daemon).await;
    let stopped = daemon::stop(&mut daemon, timeout + Duration::from_secs(15)).await;
    if !stopped {
        failures.push("webhook-daemon did not exit cleanly on SIGTERM".to_owned());
    }
    let hook_slow = count_log(&daemon, "hook_slow");
    let statuses = status_counts(&mut probe).await;
    let mut table = String::new();
    let by_kind = summarise_by_kind(&rows, &kinds, &receipts, end, &mut table);
    let all = summarise(rows.iter(), &receipts, end);
    table.push_str(&describe("all", &all));
    let healthy_once = by_kind
        .get("healthy")
        .is_none_or(|v| v["received_once"] == v["inserted"]);
    if !healthy_once {
        failures.push("not every healthy row was received exactly once".to_owned());
    }
    let _ = writeln!(
        table,
        "hook_slow log lines {hook_slow}; statuses {statuses}; healthy exactly once: {healthy_once}"
    );
    let json = json!({
        "mode": "soak",
        "source": source_version(),
        "daemon_bin": args.daemon_bin.as_ref().map(|p| p.display().to_string()),
        "soak_secs": soak.secs,
        "rate": soak.rate,
        "hooks": args.hooks,
        "failing_pct": soak.failing_pct,
        "timeout_pct": soak.timeout_pct,
        "slow_hook_ms": soak.slow_hook_ms,
        "slow_hook_rows": soak.slow_hook_ms.map(|_| soak.slow_hook_rows),
        "delivery_timeout_s": timeout.as_secs(),
        "poll_interval_ms": settings.windows.poll_interval().as_millis() as u64,
        "by_kind": by_kind,
        "all": all,
        "healthy_exactly_once": healthy_once,
        "hook_slow_log_lines": hook_slow,
        "statuses": statuses,
        "polls": counters.get("gorge_webhook_polls_total"),
        "breaker_skips": counters.get("gorge_webhook_breaker_skips_total"),
        "daemon_clean_exit": stopped,
    });
    Outcome {
        table,
        json,
        failures,
    }
}
