//! A host whose clock is an hour off (libfaketime shifts the daemon's wall
//! clock; its monotonic clock, and the database server's clock, run true):
//! leases and spacing still follow the server's clock. Ahead, a row in
//! flight at `kill -9` is not re-sent before its lease; behind, a row
//! Phorge dated a second late and a killed instance's row both go out
//! about a lease later instead of an hour. The skew is exported and
//! warned about.
//!
//! Needs Debian's `libfaketime` (`cargo xtask ci` installs it); without it
//! these tests fail saying so.

use std::time::Duration;

use webhook_core::memory_store::NewRequest;
use webhook_core::RequestStatus;
use webhook_test_support::faketime::shifted_clock;
use webhook_test_support::{with_db, Receiver, Recorded, Reply, TestDb};

use crate::daemon::Daemon;
use crate::e2e::{add_hook, delivery_env, wait_log, wait_row, with_setting, DEADLINE};
use crate::support::metrics;

/// GORGE_WEBHOOK_DELIVERY_TIMEOUT=10 raises the lease to 10 + 2: long
/// enough that a re-send inside it stands out from a daemon's start-up.
const LEASE: Duration = Duration::from_secs(12);

/// What the resend may come early by against the lease measured from the
/// first POST: `dateModified` keeps whole seconds, and the claim comes a
/// moment before its POST.
const LEASE_SLACK: Duration = Duration::from_secs(2);

/// How late after it is due a row may go out, for a busy machine.
const DUE_SLACK: Duration = Duration::from_secs(10);

const HOOK: &str = "PHID-HWBH-clockskewaaaaaaaaaaa";
const KEY: &str = "clockskewkeyaaaaaaaaaaaaaaaaaaaa";
const PROPERTIES: &str = r#"{"retry":"forever","triggerPHIDs":["PHID-HRUL-clockskewaaaaaaaaaa"],"transactionPHIDs":["PHID-XACT-TASK-clockskewaaaaaa"]}"#;
const HOUR_SECS: f64 = 3_600.0;

/// A daemon's settings with its clock shifted by `offset` and its
/// User-Agent naming `instance`.
fn shifted_env(db: &TestDb, offset: &str, instance: &str) -> Vec<(String, String)> {
    let mut env = delivery_env(&db.namespace);
    env = with_setting(env, "GORGE_WEBHOOK_DELIVERY_TIMEOUT", "10");
    env = with_setting(env, "GORGE_LOG_LEVEL", "info");
    env = with_setting(
        env,
        "GORGE_WEBHOOK_USER_AGENT",
        &format!("gorge-webhook/{instance}"),
    );
    env.extend(shifted_clock(offset));
    env
}

fn user_agent(receipt: &Recorded) -> &str {
    receipt.header("user-agent").unwrap_or_default()
}

/// `gorge_webhook_clock_skew_seconds` as `daemon` exports it.
async fn skew(daemon: &Daemon) -> f64 {
    let text = metrics(daemon).await;
    text.lines()
        .find_map(|line| line.strip_prefix("gorge_webhook_clock_skew_seconds "))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no clock skew in /metrics:\n{text}\n{}", daemon.log()))
}

/// Checks that `daemon` measured its clock `expected` seconds off the
/// server's (within a few seconds) and warned about it.
async fn assert_skew_reported(daemon: &Daemon, expected: f64) {
    let measured = skew(daemon).await;
    assert!(
        (measured - expected).abs() < 5.0,
        "skew {measured} s, expected about {expected} s\n{}",
        daemon.log()
    );
    wait_log(daemon, "event=\"clock_skew\"").await;
}

/// What happened to a row in flight at `kill -9` when both instances'
/// clocks are shifted by `offset`.
struct Resend {
    first: Recorded,
    second: Recorded,
    killed_at: Duration,
    /// When the second instance answered `/healthz` (receiver's clock).
    second_ready: Duration,
}

impl Resend {
    fn gap(&self) -> Duration {
        self.second.at - self.first.at
    }
}

/// One row, its first POST held by a slow receiver; the instance that
/// sent it is killed, a second one started; returns both POSTs once the
/// second arrived (or panics after the lease and [`DEADLINE`]).
async fn killed_in_flight(db: &TestDb, offset: &str) -> (Resend, Daemon) {
    let receiver = Receiver::start().await;
    receiver.script("/skew", [Reply::status(200).after(Duration::from_secs(60))]);
    receiver.always("/skew", Reply::status(200));
    add_hook(db, HOOK, receiver.url("/skew"), KEY).await;
    let mut victim = Daemon::start("victim", &shifted_env(db, offset, "victim")).await;
    let id = db
        .insert_request(&NewRequest::queued(HOOK, PROPERTIES))
        .await;
    let sent = receiver.wait_for(1, DEADLINE).await;
    assert_eq!(sent.len(), 1, "the row was not sent\n{}", victim.log());
    victim.kill_hard().await;
    let killed_at = receiver.now();
    assert_eq!(db.row(id).await.status, RequestStatus::Queued);

    let survivor = Daemon::start("survivor", &shifted_env(db, offset, "survivor")).await;
    let second_ready = receiver.now();
    let both = receiver.wait_for(2, LEASE + DEADLINE).await;
    assert_eq!(
        both.len(),
        2,
        "the killed instance's row was not sent again within {:?} of the kill\n{}",
        LEASE + DEADLINE,
        survivor.log()
    );
    wait_row(db, &survivor, id, "sent", |row| {
        row.status == RequestStatus::Sent
    })
    .await;
    let resend = Resend {
        first: both[0].clone(),
        second: both[1].clone(),
        killed_at,
        second_ready,
    };
    assert_eq!(user_agent(&resend.first), "gorge-webhook/victim");
    assert_eq!(user_agent(&resend.second), "gorge-webhook/survivor");
    (resend, survivor)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hour_ahead_a_killed_instances_row_is_not_resent_before_its_lease() {
    with_db(|db| async move {
        let (resend, survivor) = killed_in_flight(&db, "+1h").await;
        let gap = resend.gap();
        assert!(
            gap >= LEASE - LEASE_SLACK,
            "re-sent {gap:?} after its first POST ({:?} after the kill), inside its {LEASE:?} \
             lease\n{}",
            resend.second.at.saturating_sub(resend.killed_at),
            survivor.log()
        );
        assert_skew_reported(&survivor, -HOUR_SECS).await;
        eprintln!(
            "clock: an hour ahead, resent {gap:?} after the first POST, {:?} after the kill \
             (lease {LEASE:?}; skew {} s)",
            resend.second.at - resend.killed_at,
            skew(&survivor).await
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hour_behind_a_killed_instances_row_is_resent_after_about_a_lease() {
    with_db(|db| async move {
        let (resend, survivor) = killed_in_flight(&db, "-1h").await;
        let gap = resend.gap();
        let due = (resend.first.at + LEASE).max(resend.second_ready);
        assert!(
            gap >= LEASE - LEASE_SLACK && resend.second.at <= due + DUE_SLACK,
            "re-sent {gap:?} after its first POST; due {:?} after it (lease {LEASE:?})\n{}",
            due - resend.first.at,
            survivor.log()
        );
        assert_skew_reported(&survivor, HOUR_SECS).await;
        eprintln!(
            "clock: an hour behind, resent {gap:?} after the first POST, {:?} after the kill \
             (lease {LEASE:?}; skew {} s)",
            resend.second.at - resend.killed_at,
            skew(&survivor).await
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hour_behind_a_row_phorge_dated_a_second_late_goes_out_after_about_a_lease() {
    with_db(|db| async move {
        let receiver = Receiver::start().await;
        receiver.always("/skew", Reply::status(200));
        add_hook(&db, HOOK, receiver.url("/skew"), KEY).await;
        let daemon = Daemon::start("behind", &shifted_env(&db, "-1h", "behind")).await;
        // Phorge read its clock twice: the row is not fresh, so it waits
        // out one lease like a row someone claimed.
        let created = db.now().await;
        let inserted_at = receiver.now();
        let id = db
            .insert_request(&NewRequest {
                date_created: Some(created),
                date_modified: Some(created + 1),
                ..NewRequest::queued(HOOK, PROPERTIES)
            })
            .await;
        let sent = receiver.wait_for(1, LEASE + DUE_SLACK).await;
        assert_eq!(
            sent.len(),
            1,
            "not sent within {:?} of its insert\n{}",
            LEASE + DUE_SLACK,
            daemon.log()
        );
        let after = sent[0].at - inserted_at;
        assert!(
            after >= LEASE - Duration::from_secs(1),
            "sent {after:?} after its insert, before its {LEASE:?} lease\n{}",
            daemon.log()
        );
        wait_row(&db, &daemon, id, "sent", |row| {
            row.status == RequestStatus::Sent
        })
        .await;
        assert_skew_reported(&daemon, HOUR_SECS).await;
        eprintln!(
            "clock: an hour behind, a row dated dateCreated + 1 went out {after:?} after its \
             insert (lease {LEASE:?})"
        );
    })
    .await;
}
