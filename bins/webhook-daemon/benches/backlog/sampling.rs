//! What the bench samples around its phases: the server's global and
//! session status counters (statement windows, the bench's own probes
//! taken out), CPU ticks and memory from `/proc` (the daemon, MariaDB,
//! this process, the machine), the idle window, percentiles, and the
//! daemon's own counters from `/metrics`.

use std::collections::{BTreeMap, HashMap};
use std::process::Command;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use webhook_test_support::metrics_text::samples;
use webhook_test_support::DaemonProcess;

/// `SHOW … STATUS` as numbers.
pub(crate) type Status = HashMap<String, u64>;

/// The numeric rows of a `SHOW … STATUS` statement.
pub(crate) async fn show_status(conn: &mut Conn, statement: &str) -> Status {
    let rows: Vec<(String, String)> = conn
        .query(statement)
        .await
        .unwrap_or_else(|e| panic!("bench: {statement}: {e}"));
    rows.into_iter()
        .filter_map(|(k, v)| v.parse().ok().map(|v| (k, v)))
        .collect()
}

pub(crate) async fn global_status(conn: &mut Conn) -> Status {
    show_status(conn, "SHOW GLOBAL STATUS").await
}

pub(crate) fn delta(before: &Status, after: &Status, key: &str) -> u64 {
    let get = |s: &Status| s.get(key).copied().unwrap_or(0);
    get(after).saturating_sub(get(before))
}

/// How many `Questions` one `SHOW GLOBAL STATUS` adds.
pub(crate) async fn status_self_cost(conn: &mut Conn) -> u64 {
    self_cost(conn, |status| status.get("Questions").copied().unwrap_or(0)).await
}

/// How much one `SHOW GLOBAL STATUS` adds to what `measure` reads off the
/// status (the least of three back-to-back pairs, so another client's
/// work does not count).
pub(crate) async fn self_cost(conn: &mut Conn, measure: impl Fn(&Status) -> u64) -> u64 {
    let mut least = u64::MAX;
    for _ in 0..3 {
        let a = measure(&global_status(conn).await);
        let b = measure(&global_status(conn).await);
        least = least.min(b.saturating_sub(a));
    }
    least
}

/// Server counter deltas over a window, the bench's own statements taken
/// out, per delivery.
pub(crate) struct StatementWindow {
    pub(crate) deltas: HashMap<String, f64>,
    pub(crate) per: f64,
    /// Statements nobody in this bench issues (INSERT, DDL, DELETE) ran in
    /// the window: another client's work is in the counters.
    pub(crate) contaminated: bool,
}

impl StatementWindow {
    /// `expected_updates`: the UPDATEs this window must show (two per
    /// delivery); any other number means another client updated too.
    pub(crate) fn new(
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

    pub(crate) fn per_delivery(&self, key: &str) -> f64 {
        self.deltas.get(key).copied().unwrap_or(0.0) / self.per.max(1.0)
    }
}

// ---------------------------------------------------------------- /proc

/// utime + stime of a process (all its threads), in clock ticks.
pub(crate) fn process_ticks(pid: &str) -> Option<u64> {
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
pub(crate) fn vm_kib(pid: u32, key: &str) -> Option<u64> {
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
pub(crate) fn machine_ticks() -> Option<(u64, u64)> {
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

pub(crate) fn find_mariadbd() -> Option<u32> {
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(entry.path().join("comm")).ok()?;
            matches!(comm.trim(), "mariadbd" | "mysqld").then_some(pid)
        })
}

pub(crate) fn clock_ticks_per_sec() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100)
}

pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// CPU ticks of the daemon, MariaDB, this process and the whole machine.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CpuSample {
    pub(crate) daemon: u64,
    pub(crate) mariadb: u64,
    pub(crate) bench: u64,
    pub(crate) machine_busy: u64,
    pub(crate) machine_total: u64,
}

impl CpuSample {
    pub(crate) fn take(daemon: Option<u32>, mariadbd: Option<u32>) -> Self {
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

    pub(crate) fn minus(&self, earlier: &Self) -> Self {
        Self {
            daemon: self.daemon.saturating_sub(earlier.daemon),
            mariadb: self.mariadb.saturating_sub(earlier.mariadb),
            bench: self.bench.saturating_sub(earlier.bench),
            machine_busy: self.machine_busy.saturating_sub(earlier.machine_busy),
            machine_total: self.machine_total.saturating_sub(earlier.machine_total),
        }
    }

    pub(crate) fn daemon_ms(&self, hz: f64) -> f64 {
        self.daemon as f64 / hz * 1000.0
    }

    pub(crate) fn mariadb_ms(&self, hz: f64) -> f64 {
        self.mariadb as f64 / hz * 1000.0
    }

    pub(crate) fn bench_ms(&self, hz: f64) -> f64 {
        self.bench as f64 / hz * 1000.0
    }

    /// Share of all CPUs busy (100 = every core), anyone's work.
    pub(crate) fn machine_busy_percent(&self) -> f64 {
        if self.machine_total == 0 {
            return f64::NAN;
        }
        self.machine_busy as f64 / self.machine_total as f64 * 100.0
    }
}

/// Nearest-rank percentile of sorted values.
pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The daemon's `/metrics` counters (name with labels → value).
#[derive(Debug, Default)]
pub(crate) struct Counters(BTreeMap<String, f64>);

impl Counters {
    pub(crate) fn get(&self, name: &str) -> f64 {
        self.0.get(name).copied().unwrap_or(0.0)
    }

    pub(crate) fn describe(&self, deliveries: f64) -> String {
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

/// The daemon's `/metrics` counters; empty (and said) when they cannot be
/// read.
pub(crate) async fn scrape_metrics(daemon: &DaemonProcess) -> Counters {
    match daemon.try_metrics().await {
        Ok(text) => Counters(
            samples(&text)
                .filter(|(series, _)| series.starts_with("gorge_webhook_"))
                .map(|(series, value)| (series.to_owned(), value))
                .collect(),
        ),
        Err(_) => {
            eprintln!("bench: could not read the daemon's /metrics");
            Counters::default()
        }
    }
}

/// The daemon's idle cost, sampled once everything has settled.
pub(crate) struct Idle {
    /// CPU, in % of one core.
    pub(crate) cpu_percent: f64,
    /// The window, in seconds.
    pub(crate) elapsed: f64,
    /// Statements per second from all clients, the bench's probes out.
    pub(crate) statements_per_sec: f64,
    /// Clock ticks per second (`getconf CLK_TCK`).
    pub(crate) hz: f64,
}

/// Waits for the last deliveries to settle, then samples the daemon's CPU
/// and the server's statements for `secs`.
pub(crate) async fn idle_window(pid: u32, probe: &mut Conn, secs: u64, self_cost: u64) -> Idle {
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    eprintln!("bench: sampling idle CPU for {secs} s");
    let idle_before = global_status(probe).await;
    let t0 = process_ticks(&pid.to_string());
    let idle_started = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let t1 = process_ticks(&pid.to_string());
    let elapsed = idle_started.elapsed().as_secs_f64();
    let idle_after = global_status(probe).await;
    let hz = clock_ticks_per_sec() as f64;
    let cpu_percent = match (t0, t1) {
        (Some(a), Some(b)) => (b.saturating_sub(a)) as f64 / hz / elapsed * 100.0,
        _ => f64::NAN,
    };
    let statements_per_sec =
        (delta(&idle_before, &idle_after, "Questions") as f64 - self_cost as f64).max(0.0)
            / elapsed;
    Idle {
        cpu_percent,
        elapsed,
        statements_per_sec,
        hz,
    }
}
