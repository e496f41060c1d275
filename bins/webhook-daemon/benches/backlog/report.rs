//! The backlog run's report: the text table and the one-line JSON object
//! (the last stdout line), from what the phases measured; the `source`
//! stamp and the rounding both the backlog and the soak reports use.

use std::fmt::Write as _;
use std::process::Command;

use serde_json::{json, Value};

use crate::args::{Args, DaemonSettings};
use crate::baseline::Baseline;
use crate::candidates::{CandidateTiming, ScaleReport};
use crate::phases::{Drain, End, Phases};
use crate::quiesce::Quiesced;
use crate::sampling::Idle;
use crate::Outcome;

/// The commit the daemon was built from, `+dirty` with local changes to
/// its sources (`git` output; `unknown` outside a checkout).
pub(crate) fn source_version() -> String {
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

pub(crate) fn round(x: f64, digits: i32) -> Value {
    if !x.is_finite() {
        return Value::Null;
    }
    let f = 10f64.powi(digits);
    json!((x * f).round() / f)
}

/// Everything the backlog run measured, for its report.
pub(crate) struct Report<'a> {
    pub(crate) args: &'a Args,
    pub(crate) settings: &'a DaemonSettings,
    pub(crate) seed_secs: f64,
    pub(crate) quiesced: &'a Quiesced,
    pub(crate) candidate_backlog: &'a CandidateTiming,
    pub(crate) scale: Option<&'a ScaleReport>,
    pub(crate) base: &'a Baseline,
    pub(crate) drain: &'a Drain,
    pub(crate) phases: &'a Phases,
    pub(crate) idle: &'a Idle,
    pub(crate) end: &'a End,
    pub(crate) load_start: &'a str,
    pub(crate) load_end: &'a str,
    pub(crate) failures: &'a [String],
}

/// KiB as MiB; not measured is NaN (reported as `null`).
fn mib(kib: Option<u64>) -> f64 {
    kib.map(|k| k as f64 / 1024.0).unwrap_or(f64::NAN)
}

/// One `name value` line of the text table.
fn line(t: &mut String, k: &str, v: String) {
    let _ = writeln!(t, "  {k:<44} {v}");
}

impl Report<'_> {
    /// The text table and the JSON line.
    pub(crate) fn outcome(&self) -> Outcome {
        let mut json = self.json();
        self.insert_scale(&mut json);
        Outcome {
            table: self.table(),
            json,
            failures: self.failures.to_vec(),
        }
    }

    /// Drain rate over the baseline's.
    fn ratio(&self) -> f64 {
        if self.base.pairs_per_sec > 0.0 {
            self.drain.per_sec / self.base.pairs_per_sec
        } else {
            0.0
        }
    }

    fn poll_ms(&self) -> f64 {
        self.settings.windows.poll_interval().as_millis() as f64
    }

    fn json(&self) -> Value {
        json!({
            "rows": self.args.rows,
            "hooks": self.args.hooks,
            "latency_ms": self.args.latency_ms,
            "max_concurrent": self.settings.windows.max_concurrent(),
            "extra_env": self.args.extra_env.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
            "pool_max": self.settings.pool_max,
            "batch_size": self.settings.windows.batch_size(),
            "poll_interval_ms": self.poll_ms(),
            "deliveries_per_sec": round(self.drain.per_sec, 1),
            "baseline_pairs_per_sec": round(self.base.pairs_per_sec, 1),
            "baseline_pool": self.base.pool.sized,
            "ratio": round(self.ratio(), 3),
            "drain_complete": self.drain.complete,
            "delivered": self.drain.delivered,
            "drain_secs": round(self.drain.secs, 3),
            "max_receipt_gap_ms": round(self.drain.max_gap_ms, 1),
            "start_to_last_receipt_secs": round(self.drain.last_receipt_at.as_secs_f64(), 3),
            "start_to_all_sent_secs": round(self.drain.all_sent_at.as_secs_f64(), 3),
            "p50_ms": round(self.phases.timed.p50, 1),
            "p99_ms": round(self.phases.timed.p99, 1),
            "idle_p50_ms": round(self.phases.idle.p50, 1),
            "idle_p99_ms": round(self.phases.idle.p99, 1),
            "idle_max_ms": round(self.phases.idle.max, 1),
            "busy_p50_ms": round(self.phases.busy.p50, 1),
            "busy_p99_ms": round(self.phases.busy.p99, 1),
            "busy_max_ms": round(self.phases.busy.max, 1),
            "busy_rate_per_sec": round(self.phases.busy_rate, 1),
            "busy_load_p50_ms": round(self.phases.load.p50, 1),
            "busy_load_p99_ms": round(self.phases.load.p99, 1),
            "busy_load_rows": self.phases.load.n,
            "rss_mib": round(mib(self.end.rss_peak), 1),
            "rss_after_drain_mib": round(mib(self.drain.rss_after), 1),
            "rss_end_mib": round(mib(self.end.rss_now), 1),
            "statements_per_delivery": round(self.drain.statements.per_delivery("Questions"), 3),
            "selects_per_delivery": round(self.drain.statements.per_delivery("Com_select"), 3),
            "updates_per_delivery": round(self.drain.statements.per_delivery("Com_update"), 3),
            "prepares_per_delivery": round(self.drain.statements.per_delivery("Com_stmt_prepare"), 3),
            "fsyncs_per_delivery": round(self.drain.statements.per_delivery("Innodb_data_fsyncs"), 3),
            "index_reads_per_delivery": round(
                self.drain.statements.per_delivery("Handler_read_next") + self.drain.statements.per_delivery("Handler_read_key"),
                2
            ),
            "index_scans_from_start_per_delivery": round(self.drain.statements.per_delivery("Handler_read_first"), 4),
            "baseline_statements_per_pair": round(self.base.statements.per_delivery("Questions"), 3),
            "baseline_fsyncs_per_pair": round(self.base.statements.per_delivery("Innodb_data_fsyncs"), 3),
            "status_contaminated": self.drain.statements.contaminated || self.base.statements.contaminated,
            "daemon_cpu_ms_per_delivery": round(self.drain.cpu.daemon_ms(self.idle.hz) / self.drain.deliveries, 3),
            "mariadb_cpu_ms_per_delivery": round(self.drain.cpu.mariadb_ms(self.idle.hz) / self.drain.deliveries, 3),
            "bench_cpu_ms_per_delivery": round(self.drain.cpu.bench_ms(self.idle.hz) / self.drain.deliveries, 3),
            "machine_busy_percent_drain": round(self.drain.cpu.machine_busy_percent(), 1),
            "baseline_client_cpu_ms_per_pair": round(self.base.cpu.bench_ms(self.idle.hz) / self.args.rows as f64, 3),
            "baseline_mariadb_cpu_ms_per_pair": round(self.base.cpu.mariadb_ms(self.idle.hz) / self.args.rows as f64, 3),
            "machine_busy_percent_baseline": round(self.base.cpu.machine_busy_percent(), 1),
            "polls_per_delivery": round(self.drain.counters.get("gorge_webhook_polls_total") / self.drain.deliveries, 4),
            "claims_lost": self.drain.counters.get("gorge_webhook_claims_total{result=\"lost\"}"),
            "idle_cpu_percent": round(self.idle.cpu_percent, 3),
            "idle_statements_per_sec": round(self.idle.statements_per_sec, 2),
            "candidate_backlog_us": round(self.candidate_backlog.mean_us, 1),
            "seed_secs": round(self.seed_secs, 2),
            "quiesce_secs": round(self.quiesced.secs, 2),
            "quiesce_settled": self.quiesced.settled,
            "load_start": self.load_start,
            "load_end": self.load_end,
            "nproc": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            "objects": self.args.objects,
            "source": source_version(),
            "ok": self.failures.is_empty(),
        })
    }

    /// The scale check's fields, when it ran.
    fn insert_scale(&self, json: &mut Value) {
        let (Some(scale), Value::Object(map)) = (self.scale, json) else {
            return;
        };
        let fields = [
            ("retained", json!(self.args.retained)),
            ("retained_insert_secs", round(scale.insert_secs, 1)),
            ("candidate_idle_us_without", round(scale.without.mean_us, 1)),
            ("candidate_idle_us_with", round(scale.with.mean_us, 1)),
            (
                "candidate_idle_p99_us_without",
                round(scale.without.p99_us, 1),
            ),
            ("candidate_idle_p99_us_with", round(scale.with.p99_us, 1)),
            (
                "candidate_handler_reads_without",
                json!(scale.without.handler_total()),
            ),
            (
                "candidate_handler_reads_with",
                json!(scale.with.handler_total()),
            ),
        ];
        for (key, value) in fields {
            map.insert(key.to_owned(), value);
        }
    }

    fn table(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "\nwebhook-daemon backlog bench: {} rows, {} hooks, max_concurrent {} (pool {}, batch {}), \
             receiver latency {} ms, poll {} ms",
            self.args.rows,
            self.args.hooks,
            self.settings.windows.max_concurrent(),
            self.settings.pool_max,
            self.settings.windows.batch_size(),
            self.args.latency_ms,
            self.poll_ms()
        );
        let _ = writeln!(
            t,
            "load average: start {}, end {}; waited {:.1} s for the server before the drain{}",
            self.load_start,
            self.load_end,
            self.quiesced.secs,
            if self.quiesced.settled {
                " (settled)"
            } else {
                " (not settled: measured as it was)"
            }
        );
        self.throughput(&mut t);
        self.resources(&mut t);
        self.database_work(&mut t);
        self.queries(&mut t);
        let _ = writeln!(
            t,
            "checks: {}",
            if self.failures.is_empty() {
                "every row sent, each received exactly once".to_owned()
            } else {
                self.failures.join("; ")
            }
        );
        t
    }

    fn throughput(&self, t: &mut String) {
        let _ = writeln!(t, "throughput");
        line(
            t,
            "daemon deliveries/s (first→last receipt)",
            format!(
                "{:.0}  ({} rows in {:.2} s{})",
                self.drain.per_sec,
                self.drain.delivered,
                self.drain.secs,
                if self.drain.complete {
                    ""
                } else {
                    ", DID NOT FINISH"
                }
            ),
        );
        line(
            t,
            "longest gap between receipts",
            format!("{:.1} ms", self.drain.max_gap_ms),
        );
        line(
            t,
            "baseline claim+result pairs/s",
            format!("{:.0}  ({:.2} s)", self.base.pairs_per_sec, self.base.secs),
        );
        line(t, "baseline pool", self.base.pool.describe());
        line(t, "ratio", format!("{:.3}", self.ratio()));
        line(
            t,
            "daemon start → last receipt / all sent",
            format!(
                "{:.2} s / {:.2} s",
                self.drain.last_receipt_at.as_secs_f64(),
                self.drain.all_sent_at.as_secs_f64()
            ),
        );
        let _ = writeln!(t, "enqueue → receipt latency (ms)");
        for (name, l) in [
            ("all timed rows", &self.phases.timed),
            ("idle", &self.phases.idle),
            ("busy (timed rows)", &self.phases.busy),
            ("busy (background rows)", &self.phases.load),
        ] {
            line(
                t,
                name,
                format!(
                    "p50 {:.1}  p99 {:.1}  max {:.1}  (n = {})",
                    l.p50, l.p99, l.max, l.n
                ),
            );
        }
        line(
            t,
            "background load",
            format!("{:.0} rows/s", self.phases.busy_rate),
        );
    }

    fn resources(&self, t: &mut String) {
        let _ = writeln!(t, "resources");
        line(
            t,
            "daemon peak RSS (VmHWM)",
            format!(
                "{:.1} MiB (after drain {:.1}, at end VmRSS {:.1})",
                mib(self.end.rss_peak),
                mib(self.drain.rss_after),
                mib(self.end.rss_now)
            ),
        );
        line(
            t,
            "idle daemon CPU",
            format!(
                "{:.3} % of one core over {:.1} s",
                self.idle.cpu_percent, self.idle.elapsed
            ),
        );
        line(
            t,
            "idle statements/s (global, all clients)",
            format!("{:.2}", self.idle.statements_per_sec),
        );
        line(
            t,
            "CPU ms per delivery: daemon / mariadbd / bench",
            format!(
                "{:.3} / {:.3} / {:.3}  (machine busy {:.0} %)",
                self.drain.cpu.daemon_ms(self.idle.hz) / self.drain.deliveries,
                self.drain.cpu.mariadb_ms(self.idle.hz) / self.drain.deliveries,
                self.drain.cpu.bench_ms(self.idle.hz) / self.drain.deliveries,
                self.drain.cpu.machine_busy_percent()
            ),
        );
        line(
            t,
            "baseline CPU ms per pair: client / mariadbd",
            format!(
                "{:.3} / {:.3}  (machine busy {:.0} %)",
                self.base.cpu.bench_ms(self.idle.hz) / self.args.rows as f64,
                self.base.cpu.mariadb_ms(self.idle.hz) / self.args.rows as f64,
                self.base.cpu.machine_busy_percent()
            ),
        );
    }

    fn database_work(&self, t: &mut String) {
        let _ = writeln!(
            t,
            "database work per delivery (drain window; baseline per pair){}",
            if self.drain.statements.contaminated || self.base.statements.contaminated {
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
                t,
                key,
                format!(
                    "{:>10.3}   baseline {:>10.3}",
                    self.drain.statements.per_delivery(key),
                    self.base.statements.per_delivery(key)
                ),
            );
        }
        line(
            t,
            "daemon counters over the drain",
            self.drain.counters.describe(self.drain.deliveries),
        );
    }

    fn queries(&self, t: &mut String) {
        line(
            t,
            "candidate query with the backlog",
            self.candidate_backlog.describe(),
        );
        line(
            t,
            "EXPLAIN with the backlog",
            self.candidate_backlog.explain.clone(),
        );
        if let Some(scale) = self.scale {
            let _ = writeln!(
                t,
                "scale check: {} retained `sent` rows",
                self.args.retained
            );
            line(t, "bulk insert", format!("{:.1} s", scale.insert_secs));
            line(t, "idle candidate query without", scale.without.describe());
            line(t, "idle candidate query with", scale.with.describe());
            line(t, "EXPLAIN without", scale.without.explain.clone());
            line(t, "EXPLAIN with", scale.with.explain.clone());
        }
    }
}
