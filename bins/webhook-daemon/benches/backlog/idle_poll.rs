//! Scenario 2 (issue 19): the idle poll on Phorge's stock schema. A fresh
//! bench database with `--retained` `sent` rows and no queued ones; the
//! candidate query timed with the fork's `key_status (status, id)` index,
//! then again after the bench drops that index from its own database
//! (upstream Phorge has none). Nothing outside that database is touched.

use mysql_async::prelude::Queryable;
use serde_json::{json, Value};
use webhook_test_support::TestDb;

use crate::args::DaemonSettings;
use crate::candidates::{time_candidates, CandidateTiming};
use crate::report::round;
use crate::seed::{hook_phid, insert_retained};

/// Runs with the index; the stock schema's polls can take a third of a
/// second each with 1,000,000 rows, so it runs fewer.
const REPS_INDEXED: usize = 2_000;
const REPS_STOCK: usize = 50;

/// The two timings.
pub(crate) struct IdlePoll {
    pub(crate) retained: u64,
    pub(crate) indexed: CandidateTiming,
    pub(crate) stock: CandidateTiming,
}

impl IdlePoll {
    /// Stock-schema mean over indexed mean.
    pub(crate) fn ratio(&self) -> f64 {
        self.stock.mean_us / self.indexed.mean_us.max(f64::MIN_POSITIVE)
    }

    pub(crate) fn lines(&self) -> String {
        format!(
            "idle poll, {} retained rows, with key_status: {}\n  plan: {}\n\
             idle poll, {} retained rows, stock schema: {}\n  plan: {}\n\
             idle poll ratio stock / indexed (mean): {:.1}\n",
            self.retained,
            self.indexed.describe(),
            self.indexed.explain,
            self.retained,
            self.stock.describe(),
            self.stock.explain,
            self.ratio()
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
            "indexed": timing(&self.indexed),
            "stock": timing(&self.stock),
            "ratio_stock_to_indexed": round(self.ratio(), 2),
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
    conn.query_drop("ALTER TABLE herald_webhookrequest DROP INDEX key_status")
        .await
        .expect("bench: drop key_status in the bench's own database");
    let stock = time_candidates(&mut conn, windows, batch, REPS_STOCK, "idle, stock schema").await;
    IdlePoll {
        retained,
        indexed,
        stock,
    }
}
