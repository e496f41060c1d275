//! Scenario 2 (issue 19): the idle poll on Phorge's stock schema. A fresh
//! bench database with `--retained` `sent` rows and no queued ones; the
//! daemon's own poll (`MysqlStore::candidates`, above its scan floor) and
//! the bare candidate statement, timed with the fork's `key_status
//! (status, id)` index, then again after the bench drops that index from
//! its own database (upstream Phorge has none). The target compares the
//! daemon's polls. Nothing outside that database is touched.

use std::time::Instant;

use mysql_async::prelude::Queryable;
use serde_json::{json, Value};
use webhook_core::{CandidateQuery, Store};
use webhook_store_mysql::MysqlStore;
use webhook_test_support::mariadb::{config, server_conn};
use webhook_test_support::TestDb;

use crate::args::DaemonSettings;
use crate::candidates::{time_candidates, CandidateTiming};
use crate::report::round;
use crate::sampling::{delta, percentile, show_status};
use crate::seed::{hook_phid, insert_retained};

/// Runs of the bare statement with the index; without it each can take a
/// second with 1,000,000 rows, so it runs fewer.
const REPS_INDEXED: usize = 2_000;
const REPS_STOCK: usize = 10;
/// Idle polls through the store, after its first.
const REPS_STORE: usize = 1_000;

/// The daemon's polls through a fresh store: its first (which builds the
/// scan floor: on the stock schema, the one full scan, repeated every
/// rescan period) and the idle ones after it.
pub(crate) struct StorePolls {
    pub(crate) first_ms: f64,
    pub(crate) reps: usize,
    pub(crate) mean_us: f64,
    pub(crate) p50_us: f64,
    pub(crate) p99_us: f64,
    /// `Handler_read_*` per idle poll, from the server's global counters
    /// (other clients' reads included).
    pub(crate) reads_per_poll: f64,
}

impl StorePolls {
    fn describe(&self) -> String {
        format!(
            "mean {:.1} µs, p50 {:.1}, p99 {:.1} ({} idle polls); index reads per poll {:.1} \
             (global counters); first poll (builds the floor) {:.1} ms",
            self.mean_us, self.p50_us, self.p99_us, self.reps, self.reads_per_poll, self.first_ms
        )
    }

    fn json(&self) -> Value {
        json!({
            "first_poll_ms": round(self.first_ms, 1),
            "runs": self.reps,
            "mean_us": round(self.mean_us, 1),
            "p50_us": round(self.p50_us, 1),
            "p99_us": round(self.p99_us, 1),
            "index_reads_per_poll": round(self.reads_per_poll, 1),
        })
    }
}

/// The four timings.
pub(crate) struct IdlePoll {
    pub(crate) retained: u64,
    pub(crate) indexed: CandidateTiming,
    pub(crate) stock: CandidateTiming,
    pub(crate) daemon_indexed: StorePolls,
    pub(crate) daemon_stock: StorePolls,
}

impl IdlePoll {
    /// The daemon's stock-schema idle poll over its indexed one (means).
    pub(crate) fn ratio(&self) -> f64 {
        self.daemon_stock.mean_us / self.daemon_indexed.mean_us.max(f64::MIN_POSITIVE)
    }

    /// The same for the bare statement (what every poll cost before the
    /// scan floor).
    fn statement_ratio(&self) -> f64 {
        self.stock.mean_us / self.indexed.mean_us.max(f64::MIN_POSITIVE)
    }

    pub(crate) fn lines(&self) -> String {
        format!(
            "idle poll, {r} retained rows, daemon's poll with key_status: {}\n\
             idle poll, {r} retained rows, daemon's poll on the stock schema: {}\n\
             idle poll ratio stock / indexed, daemon's poll (mean): {:.2}\n\
             bare candidate statement, with key_status: {}\n  plan: {}\n\
             bare candidate statement, stock schema: {}\n  plan: {}\n\
             bare statement ratio stock / indexed (mean): {:.1}\n",
            self.daemon_indexed.describe(),
            self.daemon_stock.describe(),
            self.ratio(),
            self.indexed.describe(),
            self.indexed.explain,
            self.stock.describe(),
            self.stock.explain,
            self.statement_ratio(),
            r = self.retained,
        )
    }

    pub(crate) fn json(&self) -> Value {
        let timing = |t: &CandidateTiming| {
            json!({
                "runs": t.reps,
                "mean_us": round(t.mean_us, 1),
                "p50_us": round(t.p50_us, 1),
                "p99_us": round(t.p99_us, 1),
                "handler_read_per_run": t.handler,
                "handler_read_total_per_run": t.handler_total(),
                "explain": t.explain,
            })
        };
        json!({
            "retained": self.retained,
            "daemon_indexed": self.daemon_indexed.json(),
            "daemon_stock": self.daemon_stock.json(),
            "ratio_stock_to_indexed": round(self.ratio(), 2),
            "statement_indexed": timing(&self.indexed),
            "statement_stock": timing(&self.stock),
            "statement_ratio_stock_to_indexed": round(self.statement_ratio(), 2),
        })
    }
}

/// Seeds `retained` rows into `db`, times the idle poll with the index,
/// drops the index, times it again.
pub(crate) async fn measure(db: &TestDb, settings: &DaemonSettings, retained: u64) -> IdlePoll {
    let mut conn = db.conn().await;
    let hooks: Vec<String> = (0..100).map(hook_phid).collect();
    eprintln!("bench: idle poll: inserting {retained} retained `sent` rows");
    insert_retained(&mut conn, retained, &hooks).await;
    conn.query_drop("ANALYZE TABLE herald_webhookrequest")
        .await
        .expect("bench: ANALYZE the request table");
    let windows = &settings.windows;
    let batch = windows.batch_size();
    let indexed =
        time_candidates(&mut conn, windows, batch, REPS_INDEXED, "idle, key_status").await;
    let query = || CandidateQuery {
        cutoffs: windows.cutoffs(crate::seed::now_unix()),
        limit: batch,
        exclude_hooks: Vec::new(),
    };
    let daemon_indexed = time_store_polls(db, &query).await;
    conn.query_drop("ALTER TABLE herald_webhookrequest DROP INDEX key_status")
        .await
        .expect("bench: drop key_status in the bench's own database");
    let stock = time_candidates(&mut conn, windows, batch, REPS_STOCK, "idle, stock schema").await;
    let daemon_stock = time_store_polls(db, &query).await;
    eprintln!(
        "bench: daemon's idle poll: {:.1} µs with key_status, {:.1} µs on the stock schema",
        daemon_indexed.mean_us, daemon_stock.mean_us
    );
    IdlePoll {
        retained,
        indexed,
        stock,
        daemon_indexed,
        daemon_stock,
    }
}

/// A fresh store's first poll, then [`REPS_STORE`] idle ones.
async fn time_store_polls(db: &TestDb, query: &dyn Fn() -> CandidateQuery) -> StorePolls {
    let store = MysqlStore::new(&config(&db.namespace)).expect("bench: a store on the bench db");
    let started = Instant::now();
    let first = store.candidates(&query()).await.expect("bench: first poll");
    assert!(first.is_empty(), "bench: the idle database has candidates");
    let first_ms = started.elapsed().as_secs_f64() * 1e3;
    let mut status = server_conn().await;
    let handlers = "SHOW GLOBAL STATUS LIKE 'Handler_read%'";
    let before = show_status(&mut status, handlers).await;
    let mut took = Vec::with_capacity(REPS_STORE);
    for _ in 0..REPS_STORE {
        let started = Instant::now();
        let rows = store.candidates(&query()).await.expect("bench: idle poll");
        took.push(started.elapsed().as_secs_f64() * 1e6);
        assert!(rows.is_empty(), "bench: the idle database has candidates");
    }
    let after = show_status(&mut status, handlers).await;
    let reads: u64 = after
        .keys()
        .filter(|k| k.starts_with("Handler_read"))
        .map(|k| delta(&before, &after, k))
        .sum();
    store.disconnect().await.expect("bench: close the store");
    let mean_us = took.iter().sum::<f64>() / took.len() as f64;
    took.sort_by(f64::total_cmp);
    StorePolls {
        first_ms,
        reps: REPS_STORE,
        mean_us,
        p50_us: percentile(&took, 50.0),
        p99_us: percentile(&took, 99.0),
        reads_per_poll: reads as f64 / REPS_STORE as f64,
    }
}
