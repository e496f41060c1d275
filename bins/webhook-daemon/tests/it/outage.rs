//! Database outages end to end: the daemon reaches MariaDB through
//! test-support's [`FaultProxy`], which can cut every connection (and
//! refuse new ones), freeze the open ones (half-open sockets: open, silent,
//! while new connections work), blackhole everything, and forward again,
//! while the real server keeps running for everyone else.
//!
//! Checked: the daemon keeps running and says why it is not ready, delivery
//! resumes by itself, and a result whose write-back met the outage is
//! retried until it is stored, so its row is neither lost nor sent twice; a
//! freeze mid-backlog costs one statement timeout, is logged at warn, and
//! every row still goes exactly once; `/readyz` and `/metrics` answer in
//! bounded time during a blackhole, and SIGTERM then still exits within the
//! grace period plus a few seconds.

use std::time::Duration;

use serde_json::Value;
use webhook_core::memory_store::NewRequest;
use webhook_test_support::{with_db, FaultProxy, Receiver, Reply, TestDb};

use crate::daemon::Daemon;
use crate::e2e::{add_hook, delivery_env, wait_log, with_setting, DEADLINE};
use crate::support::{
    all_rows, all_sent, assert_alive_without_panic, assert_value_domain, by_request, count,
    insert_rows, metrics, wait_readyz, wait_table, NewRow, REQUEST_ID_HEADER,
};

fn through(proxy: &FaultProxy, env: Vec<(String, String)>) -> Vec<(String, String)> {
    with_setting(env, "GORGE_WEBHOOK_MYSQL_PORT", &proxy.port().to_string())
}

async fn insert(db: &TestDb, hook: &str, n: u32) -> u64 {
    db.insert_request(&NewRequest {
        object_phid: format!("PHID-TASK-outage{n:015}"),
        ..NewRequest::queued(hook, r#"{"retry":"forever"}"#)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_outage_pauses_delivery_and_it_resumes_by_itself() {
    with_db(|db| async move {
        let proxy = FaultProxy::to_mariadb().await;
        let receiver = Receiver::start().await;
        let hook = "PHID-HWBH-outageaaaaaaaaaaaaaa";
        add_hook(
            &db,
            hook,
            receiver.url("/outage"),
            "outagekeyaaaaaaaaaaaaaaaaaaaaaaa",
        )
        .await;
        let mut daemon =
            Daemon::start("outage", &through(&proxy, delivery_env(&db.namespace))).await;
        for n in 0..3 {
            insert(&db, hook, n).await;
        }
        wait_table(&db, &[&daemon], "all sent", DEADLINE, all_sent).await;
        wait_readyz(&daemon, 200).await;

        proxy.cut();
        let unready = wait_readyz(&daemon, 503).await;
        let reason = unready["reason"].as_str().unwrap_or_default();
        assert_eq!(unready["status"], "unavailable");
        assert!(!reason.is_empty(), "503 without a reason: {unready}");
        for n in 3..6 {
            insert(&db, hook, n).await;
        }
        wait_log(&daemon, "event=\"poll_failed\"").await;
        let scrape = metrics(&daemon).await;
        assert_eq!(count(&scrape, "gorge_webhook_database_up"), 0, "{scrape}");
        // Nothing can be claimed while the database is away.
        assert_eq!(receiver.requests().len(), 3, "{}", daemon.log());
        assert_alive_without_panic(&mut daemon);
        assert!(
            proxy.turned_away() > 0,
            "the daemon never tried to reconnect"
        );

        proxy.forward();
        wait_readyz(&daemon, 200).await;
        let rows = wait_table(&db, &[&daemon], "all sent", DEADLINE, all_sent).await;
        assert_eq!(rows.len(), 6);
        assert_value_domain(&rows);
        wait_log(&daemon, "event=\"poll_recovered\"").await;
        let got = receiver.requests();
        assert_eq!(got.len(), 6, "each row once\n{}", daemon.log());
        assert_eq!(
            count(&metrics(&daemon).await, "gorge_webhook_database_up"),
            1
        );
        eprintln!(
            "reliability: outage readyz_reason={reason:?} connections_turned_away={} receipts={}",
            proxy.turned_away(),
            got.len()
        );
        assert_alive_without_panic(&mut daemon);
        daemon.stop_cleanly(DEADLINE).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_back_cut_off_by_an_outage_is_retried_until_stored() {
    // GORGE_WEBHOOK_DELIVERY_TIMEOUT=4 raises the lease to 4 + 2.
    const LEASE: Duration = Duration::from_secs(6);
    with_db(|db| async move {
        let proxy = FaultProxy::to_mariadb().await;
        let receiver = Receiver::start().await;
        receiver.always("/slow", Reply::status(200).after(Duration::from_secs(2)));
        let hook = "PHID-HWBH-writebackaaaaaaaaaaa";
        add_hook(
            &db,
            hook,
            receiver.url("/slow"),
            "writebackkeyaaaaaaaaaaaaaaaaaaaa",
        )
        .await;
        let env = with_setting(
            through(&proxy, delivery_env(&db.namespace)),
            "GORGE_WEBHOOK_DELIVERY_TIMEOUT",
            "4",
        );
        let mut daemon = Daemon::start("write-back", &env).await;
        let id = insert(&db, hook, 0).await;
        let arrived = receiver.wait_for(1, DEADLINE).await;
        assert_eq!(arrived.len(), 1, "{}", daemon.log());
        // The receiver holds the request for 2 s; its answer comes back to a
        // daemon whose every database connection is gone.
        assert!(arrived[0].replied.is_none(), "answered before the cut");
        proxy.cut();
        // Two tries failed (the second one's retry waits 1000 ms): the
        // result is being retried, so bring the database back.
        wait_log(&daemon, "retry_in_ms=1000").await;
        proxy.forward();
        let rows = wait_table(&db, &[&daemon], "all sent", DEADLINE, all_sent).await;
        assert_value_domain(&rows);
        assert_eq!(rows[0].id, id);
        assert_eq!(rows[0].outcome().3, 200);
        // Well past the lease: the stored result means no second delivery.
        let later = receiver.wait_for(2, LEASE + Duration::from_secs(2)).await;
        assert_eq!(later.len(), 1, "delivered again\n{}", daemon.log());
        let scrape = metrics(&daemon).await;
        let retries = count(&scrape, "gorge_webhook_writeback_retries_total");
        assert!(retries >= 2, "{scrape}");
        assert_eq!(count(&scrape, "gorge_webhook_writeback_failures_total"), 0);
        assert!(
            !daemon.stderr().contains("writeback_failed"),
            "{}",
            daemon.log()
        );
        eprintln!(
            "reliability: write-back outage retries={retries} receipts={} final={:?}",
            later.len(),
            all_rows(&db).await[0].outcome()
        );
        assert_alive_without_panic(&mut daemon);
    })
    .await;
}

/// Regression test: the write-back after a claimed attempt is unguarded
/// (`UPDATE … WHERE id = ?`, as PHP's save), so it must not be retried
/// past the claim's lease. Before that bound, one instance that lost the
/// database mid-delivery kept retrying while another took the row over
/// after the lease and delivered it with success; the first one's late
/// write of its failed attempt then made the `sent` row `queued` again, and
/// it was delivered once more after a 2xx.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_write_back_from_a_partitioned_instance_does_not_undo_a_success() {
    with_db(|db| async move {
        let proxy = FaultProxy::to_mariadb().await;
        let receiver = Receiver::start().await;
        receiver.script(
            "/partition",
            [Reply::status(500).after(Duration::from_secs(1))],
        );
        let hook = "PHID-HWBH-partitionaaaaaaaaaaa";
        add_hook(
            &db,
            hook,
            receiver.url("/partition"),
            "partitionkeyaaaaaaaaaaaaaaaaaaaa",
        )
        .await;
        let cut_off_env = through(&proxy, delivery_env(&db.namespace));
        let cut_off = Daemon::start("partitioned", &cut_off_env).await;
        let id = insert(&db, hook, 0).await;
        let arrived = receiver.wait_for(1, DEADLINE).await;
        assert_eq!(arrived.len(), 1, "{}", cut_off.log());
        // The partitioned instance is waiting for its 500; it will not be
        // able to store it. Another instance still reaches the database.
        proxy.cut();
        let other = Daemon::start("connected", &delivery_env(&db.namespace)).await;
        wait_table(
            &db,
            &[&cut_off, &other],
            "sent by the other instance",
            DEADLINE,
            all_sent,
        )
        .await;
        // The partition heals while the first instance still retries.
        proxy.forward();
        let settled = receiver.requests().len();
        let later = receiver
            .wait_for(settled + 1, Duration::from_secs(20))
            .await;
        let row = db.row(id).await;
        assert_eq!(
            later.len(),
            settled,
            "delivered again after a 2xx; row now {row:?}\n{}\n{}",
            cut_off.log(),
            other.log()
        );
        assert_eq!(row.status, webhook_core::RequestStatus::Sent, "{row:?}");
    })
    .await;
}

/// The statement timeout the half-open tests run with.
const STATEMENT_TIMEOUT_MS: &str = "2000";

/// `GET path`, failing the test if the daemon takes longer than `bound`
/// to answer; the response and how long it took.
async fn get_within(
    daemon: &Daemon,
    path: &str,
    bound: Duration,
) -> (crate::daemon::HttpResponse, Duration) {
    let started = std::time::Instant::now();
    let response = tokio::time::timeout(bound, daemon.get(path, &[]))
        .await
        .unwrap_or_else(|_| panic!("{path} hung for {bound:?}\n{}", daemon.log()));
    (response, started.elapsed())
}

/// Waits for a log line holding both `level` and `needle`; how long it took.
async fn wait_log_line(daemon: &Daemon, level: &str, needle: &str, deadline: Duration) -> Duration {
    let started = std::time::Instant::now();
    loop {
        if daemon
            .stderr()
            .lines()
            .any(|line| line.contains(level) && line.contains(needle))
        {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < deadline,
            "no {level} line with {needle:?} within {deadline:?}\n{}",
            daemon.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_freeze_of_the_database_sockets_mid_backlog_is_survived_without_restart() {
    const ROWS: usize = 240;
    const HOOKS: usize = 4;
    const LEASE_SECS: u64 = 10;
    with_db(|db| async move {
        let proxy = FaultProxy::to_mariadb().await;
        let receiver = Receiver::start().await;
        receiver.always(
            "/frozen",
            Reply::status(200).after(Duration::from_millis(20)),
        );
        let hooks: Vec<String> = (0..HOOKS)
            .map(|n| format!("PHID-HWBH-frozen{n:014}"))
            .collect();
        for hook in &hooks {
            add_hook(
                &db,
                hook,
                receiver.url("/frozen"),
                "frozenkeyaaaaaaaaaaaaaaaaaaaaaaa",
            )
            .await;
        }
        let mut env = through(&proxy, delivery_env(&db.namespace));
        for (name, value) in [
            (
                "GORGE_WEBHOOK_MYSQL_STATEMENT_TIMEOUT_MS",
                STATEMENT_TIMEOUT_MS,
            ),
            ("GORGE_WEBHOOK_CLAIM_LEASE_SEC", "10"),
            ("GORGE_WEBHOOK_REQUEST_ID_HEADER", REQUEST_ID_HEADER),
        ] {
            env = with_setting(env, name, value);
        }
        let mut daemon = Daemon::start("freeze", &env).await;
        let rows: Vec<NewRow> = (0..ROWS)
            .map(|n| NewRow {
                phid: format!("PHID-HWBR-frozen{n:014}"),
                hook: hooks[n % HOOKS].clone(),
                object: format!("PHID-TASK-frozen{n:014}"),
                properties: r#"{"retry":"forever"}"#.to_owned(),
            })
            .collect();
        insert_rows(&db, &rows, 100).await;
        // Mid-backlog: some rows out, most still queued.
        let before = receiver.wait_for(ROWS / 6, DEADLINE).await.len();
        assert!(before < ROWS, "the backlog drained before the freeze");

        proxy.freeze();
        let frozen_at = std::time::Instant::now();
        let frozen_receipts = receiver.requests().len();
        let warned =
            wait_log_line(&daemon, "WARN", "database_timeout", Duration::from_secs(15)).await;
        // The diagnostics stay responsive (new connections work, so it may
        // well be ready).
        let (ready, ready_took) = get_within(&daemon, "/readyz", Duration::from_secs(10)).await;
        let resumed = loop {
            if receiver.requests().len() > frozen_receipts {
                break frozen_at.elapsed();
            }
            assert!(
                frozen_at.elapsed() < DEADLINE,
                "delivery never resumed after the freeze\n{}",
                daemon.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let stored = wait_table(&db, &[&daemon], "all sent", DEADLINE, all_sent).await;
        assert_eq!(stored.len(), ROWS);
        assert_value_domain(&stored);
        // Past a further lease: a row whose result was stored is not sent
        // again, and one whose claim was lost in the freeze went once.
        let settled = receiver.requests().len();
        let later = receiver
            .wait_for(settled + 1, Duration::from_secs(LEASE_SECS + 2))
            .await;
        let groups = by_request(&later);
        assert_eq!(groups.len(), ROWS, "rows received");
        let twice: Vec<&String> = groups
            .iter()
            .filter(|(_, receipts)| receipts.len() > 1)
            .map(|(phid, _)| phid)
            .collect();
        assert!(twice.is_empty(), "sent twice: {twice:?}\n{}", daemon.log());
        assert_alive_without_panic(&mut daemon);
        eprintln!(
            "reliability: freeze rows={ROWS} receipts_before={before} warn_after={warned:?} \
             resumed_after={resumed:?} readyz={} in {ready_took:?} receipts={} duplicates=0 \
             all_sent_after={:?} new_connections={}",
            ready.status,
            later.len(),
            frozen_at.elapsed(),
            proxy.proxied()
        );
        daemon.stop_cleanly(DEADLINE).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn during_a_blackhole_readyz_says_503_at_once_and_sigterm_still_exits() {
    const GRACE_SECS: u64 = 3;
    /// What the exit may take beyond the grace: the diagnostics drain, the
    /// bounded pool close, the runtime's drop (and a loaded machine).
    const EXIT_SLACK: Duration = Duration::from_secs(8);
    with_db(|db| async move {
        let proxy = FaultProxy::to_mariadb().await;
        let receiver = Receiver::start().await;
        receiver.always(
            "/blackhole",
            Reply::status(200).after(Duration::from_millis(500)),
        );
        let hook = "PHID-HWBH-blackholeaaaaaaaaaaa";
        add_hook(
            &db,
            hook,
            receiver.url("/blackhole"),
            "blackholekeyaaaaaaaaaaaaaaaaaaaa",
        )
        .await;
        // The default statement and connect timeouts: the exit must not
        // depend on them.
        let env = with_setting(
            through(&proxy, delivery_env(&db.namespace)),
            "GORGE_WEBHOOK_SHUTDOWN_GRACE_SEC",
            &GRACE_SECS.to_string(),
        );
        let mut daemon = Daemon::start("blackhole", &env).await;
        for n in 0..20 {
            insert(&db, hook, n).await;
        }
        receiver.wait_for(2, DEADLINE).await;
        wait_readyz(&daemon, 200).await;

        proxy.blackhole();
        let started = std::time::Instant::now();
        let (unready, unready_after) = loop {
            let (response, took) = get_within(&daemon, "/readyz", Duration::from_secs(6)).await;
            assert!(took < Duration::from_secs(5), "/readyz took {took:?}");
            if response.status == 503 {
                break (response, started.elapsed());
            }
            assert!(
                started.elapsed() < DEADLINE,
                "/readyz never said 503\n{}",
                daemon.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let body: Value = serde_json::from_slice(&unready.body).expect("/readyz is JSON");
        assert_eq!(body["status"], "unavailable", "{body}");
        let (scrape, scrape_took) = get_within(&daemon, "/metrics", Duration::from_secs(6)).await;
        assert!(
            scrape_took < Duration::from_secs(5),
            "/metrics took {scrape_took:?}"
        );
        assert_eq!(count(&scrape.text(), "gorge_webhook_database_up"), 0);
        wait_log_line(&daemon, "WARN", "poll_failed", Duration::from_secs(15)).await;

        let signalled = std::time::Instant::now();
        daemon.terminate();
        let status = daemon
            .wait_exit(Duration::from_secs(GRACE_SECS) + EXIT_SLACK)
            .await;
        let exit_took = signalled.elapsed();
        assert_eq!(status.code(), Some(0), "clean exit\n{}", daemon.log());
        eprintln!(
            "reliability: blackhole readyz_503_after={unready_after:?} reason={:?} \
             metrics_in={scrape_took:?} sigterm_exit_after={exit_took:?} grace={GRACE_SECS}s \
             held_connections={}",
            body["reason"],
            proxy.held()
        );
    })
    .await;
}
