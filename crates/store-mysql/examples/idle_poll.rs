//! The idle poll on Phorge's stock schema (no `key_status`), before and
//! after the scan floor, on one fresh database of the local MariaDB:
//! `--retained N` `sent` rows a day old (default 1,000,000), no queued
//! one. It times
//!
//! * the spec's candidate statement alone, on one session, as the store
//!   ran it before the floor (the bench's `idle_poll` scenario measures
//!   the same statement);
//! * the store's own `candidates()` now: the first poll (which rebuilds
//!   the floor, the one full scan), idle polls after it, and a poll whose
//!   clock is a rescan period later (a rebuild);
//! * the statements of an idle poll above the floor (the walk's page and
//!   the floored candidate query) on one session, with the session's
//!   `Handler_read_*` counters: what an idle poll reads.
//!
//! Run: `cargo run --release -p webhook-store-mysql --example idle_poll --
//! [--retained N]`. Only its own database is touched, and dropped after.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::print_stdout)]

use std::time::Instant;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row, Value};
use webhook_core::{CandidateQuery, Cutoffs, Store, UnixTime};
use webhook_store_mysql::{sql, RESCAN_EVERY};
use webhook_test_support::{with_db, TestDb};

const CHUNK: u64 = 100_000;

fn query(now: UnixTime) -> CandidateQuery {
    CandidateQuery {
        cutoffs: Cutoffs {
            now,
            lease_cutoff: now - 30,
            retry_cutoff: now - 60,
        },
        limit: 64,
        exclude_hooks: Vec::new(),
    }
}

async fn retain(db: &TestDb, retained: u64, created: UnixTime) {
    let mut done = 0;
    while done < retained {
        let count = CHUNK.min(retained - done);
        db.exec(&format!(
            "INSERT INTO herald_webhookrequest (phid, webhookPHID, objectPHID, status, \
             properties, lastRequestResult, lastRequestEpoch, dateCreated, dateModified) \
             SELECT CONCAT('PHID-HWBR-idle', {done} + seq), \
                    CONCAT('PHID-HWBH-idle', seq % 100), 'PHID-TASK-idle', 'sent', \
                    '{{\"retry\":\"never\",\"errorType\":\"http\",\"errorCode\":200}}', \
                    'okay', {created}, {created}, {created} \
               FROM seq_1_to_{count}"
        ))
        .await;
        done += count;
    }
}

async fn handler_reads(conn: &mut Conn) -> u64 {
    let rows: Vec<(String, u64)> = conn
        .query("SHOW SESSION STATUS LIKE 'Handler_read%'")
        .await
        .expect("SHOW STATUS");
    rows.into_iter().map(|(_, v)| v).sum()
}

struct Timing {
    mean_ms: f64,
    p50_ms: f64,
    max_ms: f64,
}

fn timing(mut ms: Vec<f64>) -> Timing {
    let mean_ms = ms.iter().sum::<f64>() / ms.len().max(1) as f64;
    ms.sort_by(f64::total_cmp);
    Timing {
        mean_ms,
        p50_ms: ms[ms.len() / 2],
        max_ms: ms[ms.len() - 1],
    }
}

impl std::fmt::Display for Timing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "mean {:.3} ms, p50 {:.3} ms, max {:.3} ms",
            self.mean_ms, self.p50_ms, self.max_ms
        )
    }
}

/// Runs `statement` `reps` times on `conn`: its timing and the
/// `Handler_read_*` total per run.
async fn on_session(
    conn: &mut Conn,
    statement: &str,
    params: Vec<Value>,
    reps: usize,
) -> (Timing, f64) {
    let prepared = conn.prep(statement).await.expect("prepare");
    let _: Vec<Row> = conn.exec(&prepared, params.clone()).await.expect("warm");
    let c0 = handler_reads(conn).await;
    let c1 = handler_reads(conn).await;
    let before = handler_reads(conn).await;
    let mut ms = Vec::with_capacity(reps);
    for _ in 0..reps {
        let started = Instant::now();
        let _: Vec<Row> = conn.exec(&prepared, params.clone()).await.expect("run");
        ms.push(started.elapsed().as_secs_f64() * 1e3);
    }
    let after = handler_reads(conn).await;
    let reads = (after - before).saturating_sub(c1 - c0) as f64 / reps as f64;
    (timing(ms), reads)
}

async fn measure(db: TestDb, retained: u64) {
    db.exec("ALTER TABLE herald_webhookrequest DROP INDEX key_status")
        .await;
    let now = db.now().await;
    let started = Instant::now();
    retain(&db, retained, now - 86_400).await;
    db.exec("ANALYZE TABLE herald_webhookrequest").await;
    println!(
        "stock schema (no key_status), {retained} retained sent rows, inserted in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let mut conn = db.conn().await;
    let spec_params = vec![
        Value::from(8192u64),
        Value::from(now - 30),
        Value::from(now - 60),
        Value::from(64u64),
    ];

    // Before: the statement the store ran at every poll.
    let (before, before_reads) =
        on_session(&mut conn, &sql::candidate_sql(0), spec_params, 20).await;
    println!(
        "before (spec statement, every poll): {before}; Handler_read_* per poll {before_reads:.0}"
    );

    // After: the store itself.
    let store = db.store();
    let started = Instant::now();
    let found = store.candidates(&query(now)).await.expect("first poll");
    assert!(found.is_empty());
    println!(
        "after, the store's first poll (rebuilds the floor): {:.1} ms; frontier {}",
        started.elapsed().as_secs_f64() * 1e3,
        store.scan_floor()
    );
    let mut ms = Vec::new();
    for _ in 0..1_000 {
        let started = Instant::now();
        let found = store.candidates(&query(now)).await.expect("idle poll");
        ms.push(started.elapsed().as_secs_f64() * 1e3);
        assert!(found.is_empty());
    }
    println!(
        "after, the store's idle polls (1000, refresh + walk + candidate query): {}",
        timing(ms)
    );
    let mut ms = Vec::new();
    for rebuild in 1..=3 {
        let started = Instant::now();
        let later = now + RESCAN_EVERY * rebuild;
        store.candidates(&query(later)).await.expect("rebuild poll");
        ms.push(started.elapsed().as_secs_f64() * 1e3);
    }
    println!(
        "after, a poll that rebuilds the floor (once per {RESCAN_EVERY} s): {}",
        timing(ms)
    );

    // What an idle poll reads: its statements on one session.
    let frontier = store.scan_floor();
    let (walk, walk_reads) = on_session(
        &mut conn,
        sql::FLOOR_WALK,
        vec![Value::from(frontier), Value::from(128u64)],
        1_000,
    )
    .await;
    let floored_params = vec![
        Value::from(8192u64),
        Value::from(frontier),
        Value::from(now - 30),
        Value::from(now - 60),
        Value::from(64u64),
    ];
    let (floored, floored_reads) = on_session(
        &mut conn,
        &sql::candidate_sql_above_floor(0, 0),
        floored_params,
        1_000,
    )
    .await;
    println!(
        "after, the walk's page at the end of the table: {walk}; Handler_read_* {walk_reads:.1}"
    );
    println!("after, the floored candidate query: {floored}; Handler_read_* {floored_reads:.1}");
    println!(
        "after, Handler_read_* per idle poll: {:.1} (before: {before_reads:.0})",
        walk_reads + floored_reads
    );
    store.disconnect().await.expect("close pool");
}

#[tokio::main]
async fn main() {
    let mut retained = 1_000_000u64;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--retained" => {
                retained = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--retained N");
            }
            other => panic!("unknown argument {other}; usage: idle_poll [--retained N]"),
        }
    }
    with_db(|db| measure(db, retained)).await;
}
