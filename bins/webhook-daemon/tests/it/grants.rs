//! The database account's privileges, end to end.
//!
//! At start: an account that may only read (`SELECT`) stops the daemon
//! (exit 1) naming what delivery lacks; a refused login keeps it waiting,
//! with the server's words in `/readyz` and the log, and no host.
//!
//! A privilege taken away and given back: the daemon's account (granted
//! `SELECT, UPDATE` on the herald database, as `deploy/mariadb-init` does)
//! loses `UPDATE` while rows keep arriving, and its sessions are cut so
//! they reconnect without it; then it gets `UPDATE` back. MariaDB applies a
//! database-level grant only to sessions opened after it, so the daemon
//! must replace the sessions that were refused: every row is delivered
//! within a minute of the grant, by the same process. While the privilege
//! is missing `/readyz` answers 503 with the server's words, the
//! `delivery_refused` gauge is up, and the log says so at error level about
//! once a minute, not once per hook per poll; after the grant `/readyz` is
//! 200 again.

use std::time::{Duration, Instant};

use webhook_test_support::mariadb::{as_root, with_account};
use webhook_test_support::{with_db, Receiver, Reply, TestDb};

use crate::daemon::Daemon;
use crate::e2e::{add_hook, delivery_env, with_setting};
use crate::reliability::hook_phid;
use crate::sessions::kill_sessions_of;
use crate::support::{
    all_rows, all_sent, assert_alive_without_panic, count, insert_rows, metrics, wait_readyz,
    wait_table, NewRow,
};

const HOOKS: usize = 12;
const KEY: &str = "grantskeyaaaaaaaaaaaaaaaaaaaaaaa";
/// How long the privilege stays away at least.
const REVOKED_FOR: Duration = Duration::from_secs(15);
/// Rows delivered by the time a restored grant has been in force this long.
const GRANT_USED_WITHIN: Duration = Duration::from_secs(60);

/// Rows `from..from + n`, round-robin over the hooks.
fn rows(from: usize, n: usize) -> Vec<NewRow> {
    (from..from + n)
        .map(|i| NewRow {
            phid: format!("PHID-HWBR-grants{i:014}"),
            hook: hook_phid("grants", i % HOOKS),
            object: format!("PHID-TASK-grants{i:014}"),
            properties: r#"{"retry":"forever","triggerPHIDs":["PHID-HRUL-grantsaaaaaaaaaaaaa"]}"#
                .to_owned(),
        })
        .collect()
}

/// The lines above debug about refused store operations in `log`:
/// `store_denied` (at error), and `store_error` naming a refusal (which
/// each refused operation used to be). Cutting the sessions adds
/// `store_error`s of its own (`database unavailable`), which are not the
/// refusal's.
fn refusal_warnings(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|line| line.contains(" WARN ") || line.contains(" ERROR "))
        .filter(|line| {
            line.contains("event=\"store_denied\"")
                || (line.contains("event=\"store_error\"") && line.contains("denied"))
        })
        .collect()
}

/// A reason `/readyz` may show: no host (the server names the client's in
/// a refusal, `'user'@'127.0.0.1'`).
fn assert_no_host(reason: &str) {
    assert!(
        !reason.contains("127.0.0.1") && !reason.contains("localhost") && !reason.contains("'@'"),
        "a host in {reason:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_that_may_only_read_stops_the_daemon_naming_what_delivery_needs() {
    with_db(|db| async move {
        let user = format!("{}_ro", db.namespace);
        with_account(&user, "SELECT", &db.database, async {
            let receiver = Receiver::start().await;
            add_hook(&db, &hook_phid("grants", 0), receiver.url("/ro"), KEY).await;
            insert_rows(&db, &rows(0, 3), 3).await;
            let env = with_setting(
                delivery_env(&db.namespace),
                "GORGE_WEBHOOK_MYSQL_USER",
                &user,
            );
            let mut daemon = Daemon::spawn("select-only", &[], &env);
            let status = daemon
                .try_wait_exit(Duration::from_secs(60))
                .await
                .unwrap_or_else(|| panic!("still running\n{}", daemon.log()));
            let log = daemon.stderr();
            eprintln!(
                "grants: select-only exit={:?} lines={}",
                status.code(),
                log.lines()
                    .filter(
                        |l| l.contains("delivery_access_refused") || l.contains("startup_failed")
                    )
                    .collect::<Vec<_>>()
                    .join(" | ")
            );
            assert_eq!(status.code(), Some(1), "{log}");
            let missing = format!("UPDATE on {}.herald_webhookrequest", db.database);
            assert!(
                log.lines().any(|line| line.contains(" ERROR ")
                    && line.contains("event=\"delivery_access_refused\"")
                    && line.contains(&missing)),
                "{missing} not named:\n{log}"
            );
            assert!(
                !log.contains("herald_webhook\""),
                "only what is missing: {log}"
            );
            assert!(receiver.requests().is_empty(), "nothing was sent");
            assert!(
                all_rows(&db).await.iter().all(|r| r.status == "queued"),
                "nothing was claimed or written"
            );
        })
        .await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_login_is_said_in_the_servers_words_without_the_host() {
    with_db(|db| async move {
        let user = format!("{}_pw", db.namespace);
        with_account(&user, "SELECT, UPDATE", &db.database, async {
            let env = with_setting(
                delivery_env(&db.namespace),
                "GORGE_WEBHOOK_MYSQL_USER",
                &user,
            );
            let env = with_setting(env, "GORGE_WEBHOOK_MYSQL_PASS", "not-the-password");
            let daemon = Daemon::start("wrong password", &env).await;
            let body = wait_readyz(&daemon, 503).await;
            let reason = body["reason"].as_str().unwrap_or_default().to_owned();
            eprintln!("grants: wrong password readyz_reason={reason:?}");
            assert!(
                reason.starts_with("database server rejected the connection: ERROR 1045")
                    && reason.contains(&format!("Access denied for user '{user}'"))
                    && reason.contains("(using password: YES)"),
                "{reason}"
            );
            assert_no_host(&reason);
            assert!(!reason.contains("not-the-password"), "{reason}");
            // The log's lines about the database say it too.
            crate::e2e::wait_log(&daemon, "database_not_ready").await;
            let log = daemon.stderr();
            let said: Vec<&str> = log
                .lines()
                .filter(|l| {
                    l.contains("event=\"database_not_ready\"")
                        || l.contains("event=\"server_clock_unmeasured\"")
                })
                .collect();
            assert!(!said.is_empty(), "{log}");
            for line in said {
                assert!(
                    line.contains(&format!("Access denied for user '{user}'")),
                    "{line}"
                );
                assert_no_host(line);
            }
            let mut daemon = daemon;
            assert_alive_without_panic(&mut daemon);
            daemon.stop_cleanly(Duration::from_secs(30)).await;
        })
        .await;
    })
    .await;
}

async fn delivered(db: &TestDb) -> bool {
    all_sent(&all_rows(db).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_privilege_taken_away_and_given_back_does_not_stop_delivery() {
    with_db(|db| async move {
        let user = format!("{}_hook", db.namespace);
        with_account(&user, "SELECT, UPDATE", &db.database, async {
            let receiver = Receiver::start().await;
            for n in 0..HOOKS {
                let path = format!("/grants/{n}");
                add_hook(&db, &hook_phid("grants", n), receiver.url(&path), KEY).await;
                receiver.always(&path, Reply::status(200).after(Duration::from_millis(20)));
            }
            let env = with_setting(delivery_env(&db.namespace), "GORGE_LOG_LEVEL", "info");
            let env = with_setting(env, "GORGE_WEBHOOK_MYSQL_USER", &user);
            // A pool the hook runs keep full, as a busy daemon's is: once
            // the privilege is gone, every pooled session is one opened
            // without it, and nothing else makes room for a new one.
            let env = with_setting(env, "GORGE_WEBHOOK_MYSQL_POOL_MAX", "4");
            let mut daemon = Daemon::start("grants", &env).await;
            let mut inserted = 0;
            insert_rows(&db, &rows(inserted, 30), 30).await;
            inserted += 30;
            wait_table(
                &db,
                &[&daemon],
                "all sent",
                Duration::from_secs(60),
                all_sent,
            )
            .await;

            as_root(&format!(
                "REVOKE UPDATE ON `{}`.* FROM '{user}'@'%'",
                db.database
            ))
            .await;
            let revoked = Instant::now();
            let log_at_revoke = daemon.stderr().len();
            assert_eq!(daemon.get("/readyz", &[]).await.status, 200);
            // Its sessions keep the privilege they started with: cut them,
            // so they reconnect without it.
            let killed = kill_sessions_of(&db, daemon.pid()).await;
            // Rows keep arriving while the daemon is refused; the revoke
            // lasts until it has been refused for a while.
            let deadline = revoked + Duration::from_secs(90);
            loop {
                insert_rows(&db, &rows(inserted, 2), 2).await;
                inserted += 2;
                let refused = count(&metrics(&daemon).await, "gorge_webhook_store_denied_total");
                if refused > 0 && revoked.elapsed() >= REVOKED_FOR {
                    break;
                }
                assert!(Instant::now() < deadline, "never refused\n{}", daemon.log());
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            // Delivery cannot go on, and readiness says why, in the
            // server's words.
            let unready = wait_readyz(&daemon, 503).await;
            let reason = unready["reason"].as_str().unwrap_or_default().to_owned();
            assert!(reason.contains("UPDATE command denied"), "{reason}");
            assert_no_host(&reason);
            let refused_gauge = count(&metrics(&daemon).await, "gorge_webhook_delivery_refused");
            assert!(refused_gauge >= 1, "the gauge is up while refused");
            let stderr = daemon.stderr();
            let during = stderr.get(log_at_revoke..).unwrap_or_default();
            let warnings = refusal_warnings(during);
            let revoke_secs = revoked.elapsed().as_secs_f64();
            let refused = count(&metrics(&daemon).await, "gorge_webhook_store_denied_total");
            let queued_at_grant = all_rows(&db)
                .await
                .iter()
                .filter(|r| r.status == "queued")
                .count();

            as_root(&format!(
                "GRANT UPDATE ON `{}`.* TO '{user}'@'%'",
                db.database
            ))
            .await;
            let granted = Instant::now();
            let receipts_at_grant = receiver.requests().len();
            let mut first_call_after = None;
            while !delivered(&db).await {
                if first_call_after.is_none() && receiver.requests().len() > receipts_at_grant {
                    first_call_after = Some(granted.elapsed());
                }
                assert!(
                    granted.elapsed() < GRANT_USED_WITHIN,
                    "rows still queued {GRANT_USED_WITHIN:?} after the grant came back\n{}",
                    daemon.log()
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let all_delivered_after = granted.elapsed();
            let first_call_after = first_call_after.unwrap_or(all_delivered_after);
            wait_readyz(&daemon, 200).await;
            let ready_again_after = granted.elapsed();
            assert_eq!(
                count(&metrics(&daemon).await, "gorge_webhook_delivery_refused"),
                0
            );
            eprintln!(
                "grants: hooks={HOOKS} pool_max=4 rows={inserted} sessions_killed={killed} \
                 revoked_secs={revoke_secs:.1} refused_operations={refused} \
                 refusal_warnings_during_revoke={} queued_at_grant={queued_at_grant} \
                 first_call_after_grant_ms={} all_delivered_after_grant_ms={} \
                 ready_again_after_grant_ms={} readyz_reason={reason:?}",
                warnings.len(),
                first_call_after.as_millis(),
                all_delivered_after.as_millis(),
                ready_again_after.as_millis()
            );
            assert!(killed > 0, "the daemon's sessions were cut");
            assert!(queued_at_grant > 0, "rows waited for the grant");
            assert!(
                warnings.iter().any(|line| line.contains(" ERROR ")
                    && line.contains("store_denied")
                    && line.contains("UPDATE command denied")),
                "the refusal is named with the server's words, at error: {warnings:#?}"
            );
            let minutes = (revoke_secs / 60.0).ceil() as usize;
            assert!(
                warnings.len() <= 2 * minutes,
                "{} warnings in {revoke_secs:.0} s of refusals ({refused} refused operations): \
                 {warnings:#?}",
                warnings.len()
            );
            assert_alive_without_panic(&mut daemon);
            daemon.stop_cleanly(Duration::from_secs(30)).await;
        })
        .await;
    })
    .await;
}
