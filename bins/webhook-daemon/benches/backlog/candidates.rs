//! The candidate query on its own: many executions of the daemon's
//! `candidate_sql` on one session, timed, with the session's
//! `Handler_read_*` counters and the `EXPLAIN` plan; and the scale check
//! (the idle poll's cost before and after `--retained` `sent` rows).

use std::collections::BTreeMap;
use std::time::Instant;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row};
use webhook_core::windows::Windows;
use webhook_store_mysql::sql;

use crate::sampling::{delta, percentile, show_status, Status};
use crate::seed::{insert_retained, now_unix};

/// Many executions of `candidate_sql(0)` on one session.
pub(crate) struct CandidateTiming {
    pub(crate) reps: usize,
    pub(crate) mean_us: f64,
    pub(crate) p50_us: f64,
    pub(crate) p99_us: f64,
    pub(crate) rows: usize,
    /// `Handler_read_*` per execution (session counters).
    pub(crate) handler: BTreeMap<String, f64>,
    pub(crate) explain: String,
}

impl CandidateTiming {
    pub(crate) fn handler_total(&self) -> f64 {
        let total: f64 = self.handler.values().sum();
        (total * 100.0).round() / 100.0
    }

    pub(crate) fn describe(&self) -> String {
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
    show_status(conn, "SHOW SESSION STATUS LIKE 'Handler_read%'").await
}

pub(crate) async fn time_candidates(
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

/// The scale check's two timings.
pub(crate) struct ScaleReport {
    pub(crate) insert_secs: f64,
    pub(crate) without: CandidateTiming,
    pub(crate) with: CandidateTiming,
}

/// The idle poll's cost on an empty queue, before and after `retained`
/// `sent` rows (a day old, as Phorge keeps them for a week) are added.
pub(crate) async fn scale_check(
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
