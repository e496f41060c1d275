//! Lost database sessions and paused instances, end to end (issue 17):
//! several daemons on one database whose sessions are `KILL`ed every 2 s,
//! and an instance frozen with SIGSTOP past its lease while its sessions
//! are cut. Checked from the receiver's side: never two calls to one hook
//! at once, and a success once stored is never undone.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use webhook_test_support::process_sessions::session_ids;
use webhook_test_support::{with_db, FaultProxy, Receiver, Recorded, Reply, TestDb};

use crate::daemon::Daemon;
use crate::e2e::{add_hook, with_setting};
use crate::reliability::{hook_phid, instance_env, spread, user_agent};
use crate::support::{
    all_rows, all_sent, assert_alive_without_panic, assert_value_domain, by_request, count,
    insert_rows, metrics, wait_table, REQUEST_ID_RECEIVED,
};

const KEY: &str = "sessionskeyaaaaaaaaaaaaaaaaaaaaa";

/// `KILL`s the database sessions of one process, found by their client
/// ports: the server frees their named locks, as when a cut connection or
/// a failover ends them.
pub(crate) async fn kill_sessions_of(db: &TestDb, pid: u32) -> usize {
    let mut conn = db.conn().await;
    let ids = session_ids(&mut conn, pid, 3306)
        .await
        .expect("processlist");
    let mut killed = 0;
    for id in ids {
        if conn
            .query_drop(format!("KILL CONNECTION {id}"))
            .await
            .is_ok()
        {
            killed += 1;
        }
    }
    killed
}

/// Whether any two receipts of one path overlapped in time.
fn overlapping(receipts: &[Recorded]) -> Vec<String> {
    let mut by_path: BTreeMap<&str, Vec<&Recorded>> = BTreeMap::new();
    for receipt in receipts {
        by_path
            .entry(receipt.path.as_str())
            .or_default()
            .push(receipt);
    }
    let mut found = Vec::new();
    for (path, mut calls) in by_path {
        calls.sort_by_key(|r| r.at);
        for pair in calls.windows(2) {
            let ended = pair[0].replied.as_ref().map(|r| r.at);
            if ended.is_none_or(|end| pair[1].at < end) {
                found.push(format!("{path}: {:?} then {:?}", pair[0].at, pair[1].at));
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_cut_every_two_seconds_never_let_two_calls_reach_one_hook() {
    const HOOKS: usize = 20;
    const ROWS: usize = 1_200;
    with_db(|db| async move {
        let receiver = Receiver::start().await;
        for n in 0..HOOKS {
            let path = format!("/cut/{n}");
            add_hook(&db, &hook_phid("cut", n), receiver.url(&path), KEY).await;
            // Long enough that a cut often lands while a call is in flight.
            receiver.always(&path, Reply::status(200).after(Duration::from_millis(50)));
        }
        let env = |name: &str| {
            let env = instance_env(&db, name);
            with_setting(env, "GORGE_WEBHOOK_MAX_CONCURRENT", "8")
        };
        let daemons = [
            Daemon::start("cut-a", &env("cut-a")).await,
            Daemon::start("cut-b", &env("cut-b")).await,
            Daemon::start("cut-c", &env("cut-c")).await,
        ];
        insert_rows(&db, &spread("cut", ROWS, HOOKS), 100).await;

        let stop = Arc::new(AtomicBool::new(false));
        let (cuts, killed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let pids: Vec<u32> = daemons.iter().map(Daemon::pid).collect();
        let cutter = {
            let (db, stop) = (db.clone(), Arc::clone(&stop));
            let (cuts, killed) = (Arc::clone(&cuts), Arc::clone(&killed));
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    // Every session of every daemon (not the test's own).
                    let mut n = 0;
                    for pid in &pids {
                        n += kill_sessions_of(&db, *pid).await;
                    }
                    cuts.fetch_add(1, Ordering::Relaxed);
                    killed.fetch_add(n as u64, Ordering::Relaxed);
                }
            })
        };
        let refs: Vec<&Daemon> = daemons.iter().collect();
        let table = wait_table(&db, &refs, "all sent", Duration::from_secs(180), all_sent).await;
        stop.store(true, Ordering::Relaxed);
        cutter.await.expect("cutter");
        assert_value_domain(&table);

        let receipts = receiver.requests();
        let overlaps = overlapping(&receipts);
        let mut lock_lost = 0;
        for daemon in &daemons {
            lock_lost += count(&metrics(daemon).await, "gorge_webhook_lock_lost_total");
        }
        let groups = by_request(&receipts);
        let repeats = groups.values().filter(|r| r.len() > 1).count();
        eprintln!(
            "sessions: rows={ROWS} hooks={HOOKS} cuts={} sessions_killed={} receipts={} \
             rows_sent_again={repeats} lock_lost={lock_lost} overlapping_calls={}",
            cuts.load(Ordering::Relaxed),
            killed.load(Ordering::Relaxed),
            receipts.len(),
            overlaps.len()
        );
        assert!(cuts.load(Ordering::Relaxed) >= 2, "the cuts happened");
        assert!(
            overlaps.is_empty(),
            "two calls reached one hook at once: {overlaps:#?}"
        );
        for n in 0..HOOKS {
            assert_eq!(receiver.max_concurrent(&format!("/cut/{n}")), 1, "hook {n}");
        }
        for mut daemon in daemons {
            assert_alive_without_panic(&mut daemon);
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_instance_never_undoes_a_success() {
    const HOOKS: usize = 4;
    const ROWS: usize = 8;
    with_db(|db| async move {
        let receiver = Receiver::start().await;
        for n in 0..HOOKS {
            let path = format!("/pause/{n}");
            add_hook(&db, &hook_phid("pause", n), receiver.url(&path), KEY).await;
            receiver.always(
                &path,
                Reply::status(200).after(Duration::from_millis(1_500)),
            );
        }
        // A lease of 4 + 2 s: the pause (12 s) outlasts it.
        let env = |name: &str| {
            let env = instance_env(&db, name);
            with_setting(env, "GORGE_WEBHOOK_DELIVERY_TIMEOUT", "4")
        };
        let mut paused = Daemon::start("pause-a", &env("pause-a")).await;
        insert_rows(&db, &spread("pause", ROWS, HOOKS), 100).await;
        // Wait until the first instance has calls in flight, then start the
        // others: they find those rows claimed.
        let until = tokio::time::Instant::now() + Duration::from_secs(60);
        while receiver
            .requests()
            .iter()
            .filter(|r| r.replied.is_none())
            .count()
            < 2
        {
            assert!(tokio::time::Instant::now() < until, "{}", paused.log());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        paused.signal("STOP");
        let in_flight: Vec<String> = receiver
            .requests()
            .iter()
            .filter(|r| user_agent(r) == "pause-a")
            .filter_map(|r| r.header(REQUEST_ID_RECEIVED).map(str::to_owned))
            .collect();
        let killed = kill_sessions_of(&db, paused.pid()).await;
        let others = [
            Daemon::start("pause-b", &env("pause-b")).await,
            Daemon::start("pause-c", &env("pause-c")).await,
        ];
        let refs: Vec<&Daemon> = others.iter().collect();
        let sent = wait_table(&db, &refs, "all sent", Duration::from_secs(90), all_sent).await;
        // Frozen for at least the lease plus the others' deliveries.
        tokio::time::sleep(Duration::from_secs(1)).await;
        paused.signal("CONT");
        // It wakes to its answers (or its deadline) and tries to store them.
        let woke = tokio::time::Instant::now();
        while !paused.log().contains("result_dropped_stale")
            && tokio::time::Instant::now() < woke + Duration::from_secs(30)
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Give any further delivery a lease to happen, then look again.
        tokio::time::sleep(Duration::from_secs(8)).await;
        let after = all_rows(&db).await;
        assert!(
            all_sent(&after),
            "a success was undone: {after:#?}\n{}",
            paused.log()
        );
        assert_value_domain(&after);
        for (before, now) in sent.iter().zip(&after) {
            assert_eq!(before.outcome(), now.outcome(), "{}", before.phid);
        }
        let receipts = receiver.requests();
        let groups = by_request(&receipts);
        let most = groups.values().map(Vec::len).max().unwrap_or(0);
        let stale = count(
            &metrics(&paused).await,
            "gorge_webhook_writeback_stale_total",
        );
        eprintln!(
            "pause: rows={ROWS} in_flight_at_pause={} sessions_killed={killed} receipts={} \
             most_receipts_of_one_row={most} stale_results_dropped={stale}",
            in_flight.len(),
            receipts.len()
        );
        assert!(killed > 0, "the paused instance's sessions were cut");
        assert!(!in_flight.is_empty());
        assert!(most <= 2, "a row was sent a third time: {groups:#?}");
        assert!(
            stale >= 1,
            "the paused instance's results were dropped\n{}",
            paused.log()
        );
        assert_alive_without_panic(&mut paused);
    })
    .await;
}

/// How long the pause test freezes its instance: `RELIABILITY_PAUSE_SECS`,
/// else past its lease (6 s) and long enough for the others to take its
/// rows over.
fn pause_length() -> Duration {
    let secs = std::env::var("RELIABILITY_PAUSE_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    Duration::from_secs(secs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_instance_causes_at_most_one_repeat_per_hook_in_flight() {
    const HOOKS: usize = 50;
    const ROWS: usize = 3_000;
    with_db(|db| async move {
        let receiver = Receiver::start().await;
        // Receivers that answer at once: a hook's calls follow each other
        // as fast as the daemon lets them, so results not yet stored pile
        // up wherever a call may run ahead of the last one's write-back.
        for n in 0..HOOKS {
            let path = format!("/repeat/{n:02}");
            add_hook(&db, &hook_phid("repeat", n), receiver.url(&path), KEY).await;
            receiver.always(&path, Reply::status(200).after(Duration::from_millis(5)));
        }
        // A lease of 6 s with a 2 s timeout leaves a claim-ahead budget of
        // 1 s: a fast hook's claims take its next rows along, whose calls
        // follow each other within it.
        let env = |name: &str| {
            let env = with_setting(instance_env(&db, name), "GORGE_WEBHOOK_CLAIM_LEASE_SEC", "6");
            with_setting(env, "GORGE_LOG_LEVEL", "info")
        };
        // The first instance delivers alone, holding every hook, through a
        // proxy the test can cut. The others start once it is paused and
        // take its rows over.
        let proxy = FaultProxy::to_mariadb().await;
        let slow_path = with_setting(
            env("repeat-a"),
            "GORGE_WEBHOOK_MYSQL_PORT",
            &proxy.port().to_string(),
        );
        let mut daemons = vec![Daemon::start("repeat-a", &slow_path).await];
        insert_rows(&db, &spread("repeat", ROWS, HOOKS), 100).await;
        let until = tokio::time::Instant::now() + Duration::from_secs(60);
        let received = |n: usize| {
            let receiver = &receiver;
            async move {
                while receiver.requests().len() < n {
                    assert!(tokio::time::Instant::now() < until, "{n} receipts never came");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        };
        received(ROWS / 10).await;
        for name in ["repeat-b", "repeat-c"] {
            daemons.push(Daemon::start(name, &env(name)).await);
        }
        received(ROWS / 5).await;
        daemons[0].signal("STOP");
        // Its sessions end: their locks are freed and whatever they had not
        // committed is rolled back.
        proxy.cut();
        let paused_at = receiver.now();
        // The others deliver the rest meanwhile, the paused one's claims
        // included once their lease is over.
        tokio::time::sleep(pause_length()).await;
        proxy.forward();
        daemons[0].signal("CONT");
        let refs: Vec<&Daemon> = daemons.iter().collect();
        wait_table(&db, &refs, "all sent", Duration::from_secs(180), all_sent).await;
        // A lease and more for anything still to come.
        let settled = receiver.requests().len();
        let receipts = receiver
            .wait_for(settled + 1, Duration::from_secs(8))
            .await;
        assert_eq!(receipts.len(), settled, "a receipt after every row was sent");
        let groups = by_request(&receipts);
        assert_eq!(groups.len(), ROWS, "every row received");
        // A row received twice is one the paused instance had POSTed and
        // not stored when it froze (its request may reach the receiver only
        // once it wakes, after another instance's): at most one per hook.
        let mut repeats: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (phid, got) in &groups {
            assert!(got.len() <= 2, "{phid} received {} times", got.len());
            if got.len() == 2 {
                let seen: Vec<(&str, Duration)> =
                    got.iter().map(|r| (user_agent(r), r.at)).collect();
                let by_paused = got.iter().filter(|r| user_agent(r) == "repeat-a").count();
                assert_eq!(
                    by_paused, 1,
                    "{phid}: (instance, received) {seen:?}, paused at {paused_at:?}"
                );
                repeats.entry(got[0].path.as_str()).or_default().push(phid);
            }
        }
        let most = repeats.values().map(Vec::len).max().unwrap_or(0);
        eprintln!(
            "pause: rows={ROWS} hooks={HOOKS} instances=3 pause={:?} \
             receipts={} rows_received_twice={} hooks_with_a_repeat={} most_repeats_of_one_hook={most}",
            pause_length(),
            receipts.len(),
            repeats.values().map(Vec::len).sum::<usize>(),
            repeats.len()
        );
        assert!(most <= 1, "more than one repeat for a hook: {repeats:#?}");
        for daemon in &mut daemons {
            assert_alive_without_panic(daemon);
        }
    })
    .await;
}
