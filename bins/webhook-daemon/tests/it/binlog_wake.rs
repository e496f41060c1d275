//! The binary-log wake-up end to end. On a private server that keeps a
//! binary log, a daemon whose polls are an hour apart and whose probe is
//! off still sends a new row at once: only the log can have told it. On
//! the shared server (no binary log) the daemon says why it cannot follow
//! one and shows `gorge_webhook_binlog_following 0`.

use webhook_core::memory_store::NewRequest;
use webhook_test_support::mariadb::with_db_on;
use webhook_test_support::{with_db, BinlogServer, Receiver};

use crate::daemon::Daemon;
use crate::e2e::{add_hook, delivery_env, wait_log, with_setting, DEADLINE};
use crate::support::{count, metrics, poll};

const HOOK: &str = "PHID-HWBH-binlogwakeaaaaaaaaa";
const NEVER: &str = r#"{"retry":"never"}"#;

/// Waits until the daemon's `/metrics` shows `series` at `value` or more.
async fn wait_metric(daemon: &Daemon, series: &str, value: u64) {
    poll(daemon, &format!("{series} reaching {value}"), async || {
        let metrics = metrics(daemon).await;
        match count(&metrics, series) >= value {
            true => Ok(()),
            false => Err(metrics),
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_logged_by_the_server_is_sent_without_waiting_for_a_poll() {
    let server = &BinlogServer::start().await;
    with_db_on(server.port(), |db| async move {
        let receiver = Receiver::start().await;
        add_hook(&db, HOOK, receiver.url("/binlog"), "k").await;
        let mut env = delivery_env(&db.namespace);
        for (name, value) in [
            ("GORGE_WEBHOOK_MYSQL_PORT", server.port().to_string()),
            ("GORGE_WEBHOOK_POLL_INTERVAL_MS", "3600000".to_owned()),
            ("GORGE_WEBHOOK_WAKE_PROBE_MS", "0".to_owned()),
        ] {
            env = with_setting(env, name, &value);
        }
        let daemon = Daemon::start("binlog-wake", &env).await;
        wait_metric(&daemon, "gorge_webhook_binlog_following", 1).await;
        wait_metric(&daemon, "gorge_webhook_polls_total", 1).await;

        // The first row may be found by the poll the daemon runs when it
        // starts following; the second only by its own hint.
        for n in 1..=2 {
            db.insert_request(&NewRequest::queued(HOOK, NEVER)).await;
            let got = receiver.wait_for(n, DEADLINE).await;
            assert_eq!(
                got.len(),
                n,
                "sent long before the next poll\n{}",
                daemon.log()
            );
        }
        let scrape = metrics(&daemon).await;
        assert!(
            count(&scrape, "gorge_webhook_binlog_hints_total") >= 1,
            "{scrape}"
        );
        assert_eq!(
            count(&scrape, "gorge_webhook_wake_probes_total"),
            0,
            "{scrape}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_binary_log_the_daemon_says_why_and_the_probe_does_the_work() {
    with_db(|db| async move {
        let daemon = Daemon::start("binlog-off", &delivery_env(&db.namespace)).await;
        wait_log(&daemon, "binlog_wake_unavailable").await;
        assert!(
            daemon.stderr().contains("the server's binary log is off"),
            "{}",
            daemon.log()
        );
        wait_metric(&daemon, "gorge_webhook_wake_probes_total", 1).await;
        let scrape = metrics(&daemon).await;
        assert_eq!(
            count(&scrape, "gorge_webhook_binlog_following"),
            0,
            "{scrape}"
        );
    })
    .await;
}
