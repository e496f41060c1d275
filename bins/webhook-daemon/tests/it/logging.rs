//! The log can never stop delivery: the real daemon with its stdout and
//! stderr given a pipe nobody reads (a stalled journald or log shipper)
//! drains a backlog and keeps answering `/healthz`, counts the lines it
//! dropped and says so once the pipe is read again, and still exits
//! promptly; given a pipe whose reader is gone it starts, serves and
//! delivers; and no exit code turns into a panic on a closed stream.

use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use webhook_test_support::{with_db, Receiver, Reply, TestDb};

use crate::daemon::{http, Daemon, Output};
use crate::e2e::{add_hook, delivery_env, with_setting, DEADLINE};
use crate::reliability::{hook_key, hook_phid, spread};
use crate::support::{count, insert_rows, metrics};

/// `/healthz` must answer within this whatever the log does.
const HEALTHZ_BOUND: Duration = Duration::from_secs(5);

/// The dropped-lines counter as `/metrics` names it.
const DROPPED: &str = "gorge_webhook_log_lines_dropped_total";

/// Hooks answering 200 at once, and a daemon logging everything at debug
/// (so its log fills a pipe fast) with its output going to `output`.
async fn debug_daemon(
    db: &TestDb,
    receiver: &Receiver,
    tag: &str,
    hooks: usize,
    output: Output,
) -> Daemon {
    for n in 0..hooks {
        let path = format!("/{tag}/{n}");
        add_hook(db, &hook_phid(tag, n), receiver.url(&path), &hook_key(n)).await;
        receiver.always(&path, Reply::status(200));
    }
    let env = with_setting(delivery_env(&db.namespace), "GORGE_LOG_LEVEL", "debug");
    let mut daemon = Daemon::spawn_to(tag, &[], &env, output);
    daemon.wait_healthy().await;
    daemon
}

/// Rows of the table that are `sent`.
async fn sent(db: &TestDb) -> usize {
    db.conn()
        .await
        .query_first("SELECT COUNT(*) FROM herald_webhookrequest WHERE status = 'sent'")
        .await
        .expect("count sent rows")
        .unwrap_or(0)
}

/// How long `/healthz` took to answer 200; fails the test when it did not
/// within [`HEALTHZ_BOUND`].
async fn healthz(daemon: &Daemon) -> Duration {
    let asked = Instant::now();
    match tokio::time::timeout(
        HEALTHZ_BOUND,
        http(daemon.addr(), "GET", "/healthz", &[], b""),
    )
    .await
    {
        Ok(Ok(response)) if response.status == 200 => asked.elapsed(),
        Ok(Ok(response)) => panic!("/healthz answered {}", response.status),
        Ok(Err(err)) => panic!("/healthz failed: {err}"),
        Err(_) => panic!("/healthz did not answer within {HEALTHZ_BOUND:?}"),
    }
}

/// Waits until `rows` rows are `sent`, checking `/healthz` all along;
/// returns the slowest `/healthz` answer.
async fn drain_checking_healthz(db: &TestDb, daemon: &Daemon, rows: usize) -> Duration {
    let until = Instant::now() + Duration::from_secs(240);
    let mut slowest = Duration::ZERO;
    loop {
        slowest = slowest.max(healthz(daemon).await);
        let done = sent(db).await;
        if done == rows {
            return slowest;
        }
        assert!(
            Instant::now() < until,
            "only {done} of {rows} rows sent (the daemon's log is the pipe nobody reads)"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_pipe_nobody_reads_holds_back_neither_delivery_nor_healthz() {
    const ROWS: usize = 3_000;
    const HOOKS: usize = 20;
    with_db(|db| async move {
        let receiver = Receiver::counting().await;
        let mut daemon = debug_daemon(&db, &receiver, "logunread", HOOKS, Output::Unread).await;
        let started = Instant::now();
        insert_rows(&db, &spread("logunread", ROWS, HOOKS), 500).await;
        let slowest = drain_checking_healthz(&db, &daemon, ROWS).await;
        let drained = started.elapsed();
        let receipts = receiver.receipts();
        assert_eq!(receipts.len(), ROWS);
        assert!(receipts.values().all(|r| r.count == 1), "a row sent twice");
        let dropped = count(&metrics(&daemon).await, DROPPED);
        assert!(dropped > 0, "no line dropped: the pipe never filled");

        // The exit waits for the log at most a bounded time.
        let stopping = Instant::now();
        daemon.stop_cleanly(DEADLINE).await;
        let stopped_in = stopping.elapsed();
        assert!(stopped_in < Duration::from_secs(10), "{stopped_in:?}");
        eprintln!(
            "logging: unread pipe rows={ROWS} drained_in={drained:.1?} healthz_slowest={slowest:.1?} \
             lines_dropped={dropped} sigterm_exit_in={stopped_in:.1?}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_log_lines_are_reported_once_the_pipe_is_read_again() {
    const BATCH: usize = 500;
    const HOOKS: usize = 10;
    with_db(|db| async move {
        let receiver = Receiver::counting().await;
        let mut daemon = debug_daemon(&db, &receiver, "logdrain", HOOKS, Output::Unread).await;
        // Rows, a batch at a time, until lines are dropped.
        let rows = spread("logdrain", 20 * BATCH, HOOKS);
        let mut inserted = 0;
        let mut dropped = 0;
        for batch in rows.chunks(BATCH) {
            insert_rows(&db, batch, BATCH).await;
            inserted += batch.len();
            drain_checking_healthz(&db, &daemon, inserted).await;
            dropped = count(&metrics(&daemon).await, DROPPED);
            if dropped > 0 {
                break;
            }
        }
        assert!(dropped > 0, "no line dropped after {inserted} rows");

        daemon.read_output();
        let until = Instant::now() + DEADLINE;
        while !daemon.stderr().contains(r#"event="log_lines_dropped""#) {
            assert!(Instant::now() < until, "never reported\n{}", daemon.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let log = daemon.stderr();
        let report = log
            .lines()
            .find(|line| line.contains(r#"event="log_lines_dropped""#))
            .unwrap_or_default()
            .to_owned();
        let reported: u64 = report
            .split_once("dropped_total=")
            .and_then(|(_, rest)| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no dropped_total in {report}"));
        assert!(reported >= dropped, "{report} (the metric said {dropped})");
        assert!(report.contains("WARN"), "{report}");
        daemon.stop_cleanly(DEADLINE).await;
        eprintln!("logging: rows={inserted} before lines were dropped; reported: {report}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_pipe_whose_reader_is_gone_stops_nothing() {
    const ROWS: usize = 100;
    const HOOKS: usize = 5;
    with_db(|db| async move {
        let receiver = Receiver::counting().await;
        let mut daemon =
            debug_daemon(&db, &receiver, "logclosed", HOOKS, Output::ReaderClosed).await;
        insert_rows(&db, &spread("logclosed", ROWS, HOOKS), 100).await;
        drain_checking_healthz(&db, &daemon, ROWS).await;
        assert_eq!(receiver.receipts().len(), ROWS);
        daemon.stop_cleanly(DEADLINE).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_stdout_or_stderr_never_turns_an_exit_code_into_a_panic() {
    let bad_setting = [(
        "GORGE_WEBHOOK_SHUTDOWN_GRACE_SEC".to_owned(),
        "soon".to_owned(),
    )];
    for (args, env, code) in [
        (&[][..], &bad_setting[..], 2),
        (&["--help"][..], &[][..], 0),
        (&["--version"][..], &[][..], 0),
        (&["--no-such-flag"][..], &[][..], 2),
        (&["demo", "--no-such-flag"][..], &[][..], 2),
    ] {
        let mut daemon = Daemon::spawn_to("closed output", args, env, Output::ReaderClosed);
        let status = daemon.wait_exit(DEADLINE).await;
        assert_eq!(status.code(), Some(code), "{args:?} {env:?}: {status}");
    }
}
