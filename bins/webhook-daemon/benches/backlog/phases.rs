//! The bench's timed phases against the running daemon: the drain of the
//! seeded backlog (its rate between first and last receipt, the longest
//! gap, the statements and CPU of the window), enqueue→receipt latency
//! while idle and under a steady background load, and the end: the daemon
//! stopped and every row checked `sent` and received exactly once.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use webhook_test_support::{DaemonProcess, Receiver, TestDb};

use crate::args::{Args, DaemonSettings};
use crate::daemon;
use crate::sampling::{
    find_mariadbd, global_status, percentile, scrape_metrics, vm_kib, Counters, CpuSample,
    StatementWindow,
};
use crate::seed::{count, insert_one, PROPERTIES};

/// A tiny deterministic generator for the spacing of timed inserts.
pub(crate) struct Lcg(pub(crate) u64);

impl Lcg {
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n.max(1)
    }
}

/// Latencies of the timed phases.
#[derive(Debug, Default)]
pub(crate) struct Phases {
    pub(crate) idle: Latency,
    pub(crate) busy: Latency,
    pub(crate) load: Latency,
    pub(crate) timed: Latency,
    pub(crate) busy_rate: f64,
}

/// `args.timed` rows inserted one at a time at spaced moments while the
/// daemon is idle, then as many again under a steady background load.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn latency_phases(
    db: &TestDb,
    args: &Args,
    receiver: &Receiver,
    hooks: &[String],
    expected: &mut HashMap<String, Enqueued>,
    daemon: &mut DaemonProcess,
    failures: &mut Vec<String>,
    deliveries_per_sec: f64,
) -> Phases {
    // Skipped when the drain already failed: the daemon is not in a state
    // worth timing.
    if !failures.is_empty() {
        eprintln!("bench: the drain failed; skipping the latency phases");
        return Phases {
            busy_rate: f64::NAN,
            ..Phases::default()
        };
    }
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
    if let Err(why) = wait_for_receipts(
        receiver,
        want,
        Duration::from_secs(60),
        std::slice::from_mut(daemon),
    )
    .await
    {
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
    if let Err(why) = wait_for_receipts(
        receiver,
        want,
        Duration::from_secs(60),
        std::slice::from_mut(daemon),
    )
    .await
    {
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

/// Waits (polling every 10 ms, bounded by `deadline`) until `n` distinct
/// objects arrived; fails early if a daemon exits.
pub(crate) async fn wait_for_receipts(
    receiver: &Receiver,
    n: u64,
    deadline: Duration,
    daemons: &mut [DaemonProcess],
) -> Result<(), String> {
    let started = Instant::now();
    let mut reported = Instant::now();
    loop {
        let got = receiver.distinct_objects();
        if got >= n {
            return Ok(());
        }
        for daemon in daemons.iter_mut() {
            daemon::alive(daemon)?;
        }
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

/// Inserts rows at `rate` per second (multi-row INSERTs every ~10 ms)
/// until `stop`; returns each object with when its INSERT was sent.
pub(crate) async fn background_load(
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
pub(crate) enum Enqueued {
    /// Part of the seeded backlog (throughput, not latency).
    Backlog,
    /// Inserted by the bench at this moment.
    Timed(Instant),
}

/// Enqueue→receipt latencies in milliseconds.
#[derive(Debug)]
pub(crate) struct Latency {
    pub(crate) n: usize,
    pub(crate) p50: f64,
    pub(crate) p99: f64,
    pub(crate) max: f64,
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

pub(crate) fn latencies(
    receiver: &Receiver,
    expected: &HashMap<String, Enqueued>,
    objects: &[String],
) -> Latency {
    let receipts = receiver.receipts();
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

/// What the drain of the backlog measured.
pub(crate) struct Drain {
    /// Every backlog row arrived before the deadline.
    pub(crate) complete: bool,
    /// Backlog objects received.
    pub(crate) delivered: usize,
    /// `delivered`, at least 1: what per-delivery figures divide by.
    pub(crate) deliveries: f64,
    /// First to last receipt (to the deadline when incomplete).
    pub(crate) secs: f64,
    pub(crate) per_sec: f64,
    /// The longest silence between two receipts: a stall shows here.
    pub(crate) max_gap_ms: f64,
    pub(crate) last_receipt_at: Duration,
    pub(crate) all_sent_at: Duration,
    pub(crate) rss_after: Option<u64>,
    /// The daemon's own counters, read after the window closed (the
    /// endpoint runs a stats query).
    pub(crate) counters: Counters,
    pub(crate) statements: StatementWindow,
    pub(crate) cpu: CpuSample,
}

/// Starts the daemon on the reset backlog and measures its drain; returns
/// the figures and the still running daemon.
pub(crate) async fn drain(
    args: &Args,
    settings: &DaemonSettings,
    receiver: &Receiver,
    probe: &mut Conn,
    status_self_cost: u64,
    failures: &mut Vec<String>,
) -> (Drain, DaemonProcess) {
    let mariadbd = find_mariadbd();
    let before = global_status(probe).await;
    let cpu_before = CpuSample::take(None, mariadbd);
    eprintln!(
        "bench: starting webhook-daemon (listen {})",
        settings.listen
    );
    let mut daemon = daemon::spawn(&settings.env, args.daemon_bin.as_deref());
    let mc = settings.windows.max_concurrent();
    let drain_deadline = Duration::from_secs(120)
        + Duration::from_millis(
            (args.rows as u64 * (args.latency_ms + 3)) / (mc.min(args.hooks) as u64).max(1) * 3,
        );
    let drained = wait_for_receipts(
        receiver,
        args.rows as u64,
        drain_deadline,
        std::slice::from_mut(&mut daemon),
    )
    .await;
    let drain_wait_end = Instant::now();
    let complete = drained.is_ok();
    if let Err(why) = drained {
        failures.push(why);
    }
    let last_receipt_at = daemon.started().elapsed();
    let (probes, all_written) = match complete {
        true => wait_written(probe).await,
        false => (0, false),
    };
    let all_sent_at = daemon.started().elapsed();
    let cpu_after = CpuSample::take(Some(daemon.pid()), mariadbd);
    let after = global_status(probe).await;
    if complete && !all_written {
        failures.push("backlog rows were not all written back as sent within 60 s".to_owned());
    }
    let rss_after = vm_kib(daemon.pid(), "VmHWM:");
    let counters = scrape_metrics(&daemon).await;
    let rate = ReceiptRate::of(receiver, complete, drain_wait_end);
    let deliveries = rate.delivered.max(1) as f64;
    let statements = StatementWindow::new(
        &before,
        &after,
        probes,
        status_self_cost,
        deliveries,
        all_written.then_some(2 * rate.delivered as u64),
    );
    let drain = Drain {
        complete,
        delivered: rate.delivered,
        deliveries,
        secs: rate.secs,
        per_sec: rate.per_sec,
        max_gap_ms: rate.max_gap_ms,
        last_receipt_at,
        all_sent_at,
        rss_after,
        counters,
        statements,
        cpu: cpu_after.minus(&cpu_before),
    };
    (drain, daemon)
}

/// Waits (up to 60 s) for the last write-backs; returns how many probes
/// that took (they are subtracted from the window's statements) and
/// whether every row was written. Only the backlog is queued now, so the
/// status index serves the count.
async fn wait_written(probe: &mut Conn) -> (u64, bool) {
    let mut probes = 0u64;
    let written_deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < written_deadline {
        probes += 1;
        let left = count(
            probe,
            "SELECT COUNT(*) FROM herald_webhookrequest WHERE status = 'queued'",
        )
        .await;
        if left == 0 {
            return (probes, true);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (probes, false)
}

/// The drain's receipts: rate between the first and the last receipt; for
/// a drain that did not finish, what arrived up to the deadline.
struct ReceiptRate {
    delivered: usize,
    secs: f64,
    per_sec: f64,
    max_gap_ms: f64,
}

impl ReceiptRate {
    fn of(receiver: &Receiver, complete: bool, wait_end: Instant) -> Self {
        let receipts = receiver.first_receipts(|object| object.starts_with("PHID-TASK-bl"));
        let delivered = receipts.len();
        let deliveries = delivered.max(1) as f64;
        let secs = match (receipts.first(), receipts.last()) {
            (Some(first), Some(last)) if complete => last.duration_since(*first).as_secs_f64(),
            (Some(first), _) => wait_end.duration_since(*first).as_secs_f64(),
            _ => 0.0,
        };
        let per_sec = match secs > 0.0 {
            true if complete => (deliveries - 1.0) / secs,
            true => deliveries / secs,
            false => 0.0,
        };
        let max_gap_ms = receipts
            .windows(2)
            .map(|w| w[1].duration_since(w[0]).as_secs_f64() * 1000.0)
            .fold(0.0, f64::max);
        Self {
            delivered,
            secs,
            per_sec,
            max_gap_ms,
        }
    }
}

/// The daemon's memory at the end of the run.
pub(crate) struct End {
    pub(crate) rss_peak: Option<u64>,
    pub(crate) rss_now: Option<u64>,
}

/// Reads the daemon's memory, stops it, and checks that every row ended
/// `sent` and each expected object was received exactly once.
pub(crate) async fn stop_and_check(
    mut daemon: DaemonProcess,
    probe: &mut Conn,
    receiver: &Receiver,
    expected: &HashMap<String, Enqueued>,
    retained: u64,
    failures: &mut Vec<String>,
) -> End {
    let rss_peak = vm_kib(daemon.pid(), "VmHWM:");
    let rss_now = vm_kib(daemon.pid(), "VmRSS:");
    if !daemon::stop(&mut daemon, Duration::from_secs(30)).await {
        failures.push("the daemon did not exit cleanly on SIGTERM".to_owned());
    }
    let unsent = count(
        probe,
        "SELECT COUNT(*) FROM herald_webhookrequest WHERE status <> 'sent'",
    )
    .await;
    if unsent != 0 {
        failures.push(format!("{unsent} rows did not end `sent`"));
    }
    let total_rows = count(probe, "SELECT COUNT(*) FROM herald_webhookrequest").await;
    if total_rows != expected.len() as u64 + retained {
        failures.push(format!(
            "table holds {total_rows} rows, expected {}",
            expected.len() as u64 + retained
        ));
    }
    check_receipts(receiver, expected, failures);
    if !failures.is_empty() {
        daemon::print_log_tail(&daemon, 40);
    }
    End { rss_peak, rss_now }
}

/// Each expected object received exactly once, nothing else received.
fn check_receipts(
    receiver: &Receiver,
    expected: &HashMap<String, Enqueued>,
    failures: &mut Vec<String>,
) {
    let received = receiver.receipts();
    let duplicates = received.values().filter(|r| r.count > 1).count();
    let missing = expected
        .keys()
        .filter(|o| !received.contains_key(*o))
        .count();
    let unexpected = received
        .keys()
        .filter(|o| !expected.contains_key(*o))
        .count();
    let unparsed = receiver.without_object();
    if duplicates + missing + unexpected > 0 || unparsed > 0 {
        failures.push(format!(
            "receipts: {duplicates} duplicated, {missing} missing, {unexpected} unexpected, \
             {unparsed} without an object PHID"
        ));
    }
}
