//! The protocol's floor: the backlog claimed and written back by a minimal
//! `mysql_async` client, `CLAIM` then `WRITE_RESULT` per row, with as many
//! workers and connections as the daemon gets; its rate, statements and
//! CPU are what the daemon's drain is compared with. Its pool never asks
//! the server for more sessions than `max_connections` leaves free (issue
//! 19: a large `MAX_CONCURRENT` made it panic with error 1040).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Pool, PoolConstraints, PoolOpts};
use webhook_store_mysql::sql;
use webhook_test_support::mariadb::server_opts;

use crate::args::DaemonSettings;
use crate::sampling::{
    find_mariadbd, global_status, show_status, status_self_cost, CpuSample, StatementWindow,
};
use crate::seed::{now_unix, Backlog, PROPERTIES_SENT};

/// The baseline's figures.
pub(crate) struct Baseline {
    pub(crate) secs: f64,
    pub(crate) pairs_per_sec: f64,
    pub(crate) lost: u64,
    pub(crate) statements: StatementWindow,
    pub(crate) cpu: CpuSample,
    /// The pool it ran with (the daemon's, or less if the server is short).
    pub(crate) pool: PoolSize,
}

/// What the baseline's pool was sized to, and why.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PoolSize {
    pub(crate) sized: usize,
    pub(crate) daemon: usize,
    pub(crate) max_connections: u64,
    pub(crate) connected: u64,
}

impl PoolSize {
    /// Sessions left free for other clients (and the bench's own probes).
    const HEADROOM: u64 = 10;

    /// The daemon's `pool_max`, capped at what `@@max_connections` leaves
    /// after the sessions connected now and [`Self::HEADROOM`].
    pub(crate) async fn for_server(probe: &mut Conn, daemon: usize) -> Self {
        let max_connections: u64 = probe
            .query_first("SELECT @@max_connections")
            .await
            .expect("bench: read @@max_connections")
            .unwrap_or(151);
        let connected = show_status(probe, "SHOW GLOBAL STATUS LIKE 'Threads_connected'")
            .await
            .get("Threads_connected")
            .copied()
            .unwrap_or(0);
        let free = max_connections.saturating_sub(connected + Self::HEADROOM);
        let sized = (daemon as u64).min(free).max(1) as usize;
        Self {
            sized,
            daemon,
            max_connections,
            connected,
        }
    }

    pub(crate) fn describe(&self) -> String {
        format!(
            "pool {} (daemon's {}; server max_connections {}, {} connected, headroom {})",
            self.sized,
            self.daemon,
            self.max_connections,
            self.connected,
            Self::HEADROOM
        )
    }
}

/// The protocol's floor: `workers` tasks on a pool of `pool.sized`
/// connections (the daemon's options: found-rows, no reset on return), each
/// taking the next row and running `CLAIM` then `WRITE_RESULT` on it. A
/// statement that fails (another client took the last session) counts the
/// row as lost instead of panicking.
pub(crate) async fn baseline(
    database: &str,
    rows: &[(u64, u64)],
    workers: usize,
    pool: PoolSize,
    probe: &mut Conn,
) -> Baseline {
    let constraints = PoolConstraints::new(0, pool.sized).expect("bench: pool constraints");
    let opts = server_opts(Some(database))
        .client_found_rows(true)
        .pool_opts(
            // As `MysqlConfig::opts`: without an inactive TTL a pool with
            // `min = 0` closes every connection it gets back.
            PoolOpts::default()
                .with_constraints(constraints)
                .with_inactive_connection_ttl(Duration::from_secs(60))
                .with_reset_connection(false),
        );
    let sizes = pool;
    let pool = Pool::new(opts);
    let rows: Arc<Vec<(u64, u64)>> = Arc::new(rows.to_vec());
    let next = Arc::new(AtomicU64::new(0));
    let lost = Arc::new(AtomicU64::new(0));
    let mariadbd = find_mariadbd();
    let self_cost = status_self_cost(probe).await;
    let before = global_status(probe).await;
    let cpu_before = CpuSample::take(None, mariadbd);
    let started = Instant::now();
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            let (pool, rows, next, lost) = (
                pool.clone(),
                Arc::clone(&rows),
                Arc::clone(&next),
                Arc::clone(&lost),
            );
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                    let Some(&(id, seen)) = rows.get(i) else {
                        break;
                    };
                    if !claim_and_write(&pool, id, seen).await {
                        lost.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("baseline worker");
    }
    let secs = started.elapsed().as_secs_f64();
    let cpu_after = CpuSample::take(None, mariadbd);
    let after = global_status(probe).await;
    let _ = pool.disconnect().await;
    let n = rows.len() as f64;
    Baseline {
        secs,
        pairs_per_sec: n / secs,
        lost: lost.load(Ordering::Relaxed),
        statements: StatementWindow::new(
            &before,
            &after,
            0,
            self_cost,
            n,
            Some(2 * rows.len() as u64),
        ),
        cpu: cpu_after.minus(&cpu_before),
        pool: sizes,
    }
}

/// One row's `CLAIM` and `WRITE_RESULT`; false if the claim was lost or
/// a statement failed (printed once per failure).
async fn claim_and_write(pool: &Pool, id: u64, seen: u64) -> bool {
    let result: Result<bool, mysql_async::Error> = async {
        let mut conn = pool.get_conn().await?;
        conn.exec_drop(sql::CLAIM, (id, seen)).await?;
        if conn.affected_rows() != 1 {
            return Ok(false);
        }
        // The write is guarded by the version the claim wrote.
        let claimed = conn.last_insert_id().unwrap_or(0);
        let now = now_unix();
        conn.exec_drop(
            sql::WRITE_RESULT,
            ("sent", "okay", now, now, PROPERTIES_SENT, id, claimed),
        )
        .await?;
        Ok(true)
    }
    .await;
    result.unwrap_or_else(|e| {
        eprintln!("bench: baseline row {id}: {e}");
        false
    })
}

/// Runs the baseline over `backlog` with the daemon's worker and pool
/// sizes, and notes lost claims and unsent rows in `failures`.
pub(crate) async fn measure(
    database: &str,
    backlog: &Backlog,
    settings: &DaemonSettings,
    probe: &mut Conn,
    failures: &mut Vec<String>,
) -> Baseline {
    let mc = settings.windows.max_concurrent();
    let pool = PoolSize::for_server(probe, settings.pool_max).await;
    eprintln!(
        "bench: baseline ({mc} workers, {}) over {} rows",
        pool.describe(),
        backlog.rows
    );
    let base = baseline(database, &backlog.ids, mc, pool, probe).await;
    if base.lost > 0 {
        failures.push(format!("baseline lost {} claims", base.lost));
    }
    let not_sent = backlog.not_sent(probe).await;
    if not_sent != 0 {
        failures.push(format!("baseline left {not_sent} rows unsent"));
    }
    base
}
