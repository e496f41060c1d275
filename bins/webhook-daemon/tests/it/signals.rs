//! Signals with calls in flight, against the real daemon: SIGHUP (log
//! rotation, a supervisor's reload) is ignored and costs nothing; SIGQUIT
//! is a graceful stop like SIGTERM and SIGINT (`reliability`'s
//! `stop_amid_slow_deliveries`), so sending it causes no resends.

use std::time::{Duration, Instant};

use webhook_test_support::{with_db, Receiver, Reply};

use crate::daemon::Daemon;
use crate::e2e::{add_hook, with_setting, DEADLINE};
use crate::reliability::{
    hook_key, hook_phid, instance_env, spread, stop_amid_slow_deliveries, wait_in_flight,
};
use crate::support::{assert_alive_without_panic, each_sent_once, insert_rows};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_amid_slow_deliveries_is_ignored_and_nothing_is_sent_twice() {
    const HOOKS: usize = 6;
    const ROWS: usize = 18;
    // GORGE_WEBHOOK_DELIVERY_TIMEOUT=5 raises the lease to 5 + 2.
    const LEASE: Duration = Duration::from_secs(7);
    with_db(|db| async move {
        let receiver = Receiver::start().await;
        for n in 0..HOOKS {
            let path = format!("/hup/{n}");
            add_hook(&db, &hook_phid("hup", n), receiver.url(&path), &hook_key(n)).await;
            receiver.always(&path, Reply::status(200).after(Duration::from_secs(2)));
        }
        let env = with_setting(
            instance_env(&db, "hup"),
            "GORGE_WEBHOOK_DELIVERY_TIMEOUT",
            "5",
        );
        let mut daemon = Daemon::start("hup", &env).await;
        insert_rows(&db, &spread("hup", ROWS, HOOKS), 100).await;
        let in_flight = wait_in_flight(&receiver, "hup", 4, &[&daemon]).await;
        daemon.signal("HUP");
        let until = Instant::now() + DEADLINE;
        while !daemon.stderr().contains(r#"event="sighup_ignored""#) {
            assert!(
                daemon.is_running(),
                "SIGHUP stopped the daemon\n{}",
                daemon.log()
            );
            assert!(Instant::now() < until, "never said\n{}", daemon.log());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // A second one is no different.
        daemon.signal("HUP");

        let (_, all) = each_sent_once(
            &db,
            &[&daemon],
            &receiver,
            ROWS,
            DEADLINE,
            LEASE + Duration::from_secs(2),
        )
        .await;
        assert_alive_without_panic(&mut daemon);
        let log = daemon.stderr();
        assert_eq!(log.matches(r#"event="sighup_ignored""#).count(), 2, "{log}");
        assert!(!log.contains("shutdown_requested"), "{log}");
        daemon.stop_cleanly(DEADLINE).await;
        eprintln!(
            "signals: SIGHUP rows={ROWS} in_flight_at_signal={in_flight} receipts={} duplicates=0",
            all.len()
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigquit_amid_slow_deliveries_stores_every_result_and_resends_nothing() {
    stop_amid_slow_deliveries("QUIT").await;
}
