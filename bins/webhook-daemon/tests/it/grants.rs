//! A privilege taken away and given back, end to end. The daemon's account
//! (granted `SELECT, UPDATE` on the herald database, as
//! `deploy/mariadb-init` does) loses `UPDATE` while rows keep arriving, and
//! its sessions are cut so they reconnect without it; then it gets `UPDATE`
//! back. MariaDB applies a database-level grant only to sessions opened
//! after it, so the daemon must replace the sessions that were refused:
//! every row is delivered within a minute of the grant, by the same
//! process, and while the privilege is missing the log says so about once
//! a minute, not once per hook per poll.

use std::time::{Duration, Instant};

use webhook_test_support::mariadb::{as_root, with_account};
use webhook_test_support::{with_db, Receiver, Reply, TestDb};

use crate::daemon::Daemon;
use crate::e2e::{add_hook, delivery_env, with_setting};
use crate::reliability::hook_phid;
use crate::sessions::kill_sessions_of;
use crate::support::{
    all_rows, all_sent, assert_alive_without_panic, count, insert_rows, metrics, wait_table, NewRow,
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

/// The warnings about refused store operations in `log`: `store_denied`,
/// and `store_error` naming a refusal (which each refused operation used to
/// be). Cutting the sessions adds `store_error`s of its own (`database
/// unavailable`), which are not the refusal's.
fn refusal_warnings(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|line| line.contains(" WARN "))
        .filter(|line| {
            line.contains("event=\"store_denied\"")
                || (line.contains("event=\"store_error\"") && line.contains("denied"))
        })
        .collect()
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
            eprintln!(
                "grants: hooks={HOOKS} pool_max=4 rows={inserted} sessions_killed={killed} \
                 revoked_secs={revoke_secs:.1} refused_operations={refused} \
                 refusal_warnings_during_revoke={} queued_at_grant={queued_at_grant} \
                 first_call_after_grant_ms={} all_delivered_after_grant_ms={}",
                warnings.len(),
                first_call_after.as_millis(),
                all_delivered_after.as_millis()
            );
            assert!(killed > 0, "the daemon's sessions were cut");
            assert!(queued_at_grant > 0, "rows waited for the grant");
            assert!(
                warnings
                    .iter()
                    .any(|line| line.contains("store_denied")
                        && line.contains("UPDATE command denied")),
                "the refusal is named with the server's words: {warnings:#?}"
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
