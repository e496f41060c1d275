//! Reliability end to end (issue 8): several daemon processes on one
//! database, a process killed with deliveries in flight, a graceful stop
//! in the middle of slow deliveries, and the request-id header receivers
//! use to drop repeats. Receivers answer from a seed ([`support::seed`]):
//! latency and failures are a function of (row, attempt), so a failing run
//! replays with `RELIABILITY_SEED=<n>`.
//!
//! What "nothing lost, nothing sent twice" means here is checked from the
//! receiver's side (every receipt, when it arrived and how it was answered)
//! against the table (every row's final state), never from the daemon's
//! own account.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use webhook_core::memory_store::NewRequest;
use webhook_core::sign;
use webhook_test_support::{with_db, Receiver, Recorded, Reply, TestDb};

use crate::daemon::Daemon;
use crate::e2e::{add_hook, delivery_env, pairs, with_setting, DEADLINE};
use crate::support::{
    all_rows, all_sent, assert_alive_without_panic, assert_value_domain, by_request, count, draw,
    each_sent_once, insert_rows, metrics, seed, wait_table, NewRow, Stored, REQUEST_ID_HEADER,
    REQUEST_ID_RECEIVED,
};

/// Each hook's HMAC key: 32 ASCII characters, as long as Phorge's.
pub(crate) fn hook_key(n: usize) -> String {
    format!("reliabilitykey{n:04}aaaaaaaaaaaaaa")
}

pub(crate) fn hook_phid(tag: &str, n: usize) -> String {
    format!("PHID-HWBH-{tag}{n:0width$}", width = 20 - tag.len())
}

/// `retry=forever` properties with one transaction, as PHP writes them.
fn forever(n: usize) -> String {
    format!(
        r#"{{"retry":"forever","triggerPHIDs":["PHID-HRUL-reliabilityaaaaaaaaa"],"transactionPHIDs":["PHID-XACT-TASK-{n:015}"]}}"#
    )
}

/// Rows `0..rows` spread round-robin over `hooks` hooks, with unique request
/// and object PHIDs.
pub(crate) fn spread(tag: &str, rows: usize, hooks: usize) -> Vec<NewRow> {
    (0..rows)
        .map(|n| NewRow {
            phid: format!("PHID-HWBR-{tag}{n:0width$}", width = 20 - tag.len()),
            hook: hook_phid(tag, n % hooks),
            object: format!("PHID-TASK-{tag}{n:0width$}", width = 20 - tag.len()),
            properties: forever(n),
        })
        .collect()
}

/// Settings for one instance of a fleet: short windows, the request-id
/// header, its own User-Agent (so receipts name the instance), info logs.
pub(crate) fn instance_env(db: &TestDb, instance: &str) -> Vec<(String, String)> {
    let mut env = delivery_env(&db.namespace);
    for (name, value) in pairs(&[
        ("GORGE_WEBHOOK_REQUEST_ID_HEADER", REQUEST_ID_HEADER),
        ("GORGE_LOG_LEVEL", "info"),
    ]) {
        env = with_setting(env, &name, &value);
    }
    with_setting(
        env,
        "GORGE_WEBHOOK_USER_AGENT",
        &format!("gorge-webhook/{instance}"),
    )
}

pub(crate) fn user_agent(receipt: &Recorded) -> &str {
    receipt
        .header("user-agent")
        .unwrap_or_default()
        .trim_start_matches("gorge-webhook/")
}

fn is_2xx(status: u16) -> bool {
    (200..300).contains(&status)
}

/// Counts the attempts per request PHID as they arrive, for replies that
/// depend on (row, attempt).
#[derive(Clone, Default)]
struct Attempts(Arc<Mutex<HashMap<String, u32>>>);

impl Attempts {
    fn next(&self, receipt: &Recorded) -> (String, u32) {
        let id = receipt
            .header(REQUEST_ID_RECEIVED)
            .unwrap_or_default()
            .to_owned();
        let mut seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let attempt = seen.entry(id.clone()).or_default();
        *attempt += 1;
        (id, *attempt)
    }
}

/// Checks every row's receipts: each body is the row's (object PHID,
/// signature under the hook's key), and the same bytes on every attempt.
fn check_bodies(
    rows: &[Stored],
    groups: &BTreeMap<String, Vec<Recorded>>,
    key_of: impl Fn(&str) -> String,
) {
    for row in rows {
        let receipts = &groups[&row.phid];
        let first = &receipts[0];
        let body: Value = serde_json::from_slice(&first.body).expect("JSON body");
        assert_eq!(body["object"]["phid"], row.object.as_str(), "{row:?}");
        let key = key_of(&row.hook);
        for receipt in receipts {
            assert_eq!(
                receipt.body, first.body,
                "a retry sends the same bytes: {row:?}"
            );
            assert_eq!(
                receipt.header("x-phabricator-webhook-signature"),
                Some(sign(key.as_bytes(), &receipt.body).as_str()),
                "{row:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_deliver_every_row_once_through_random_failures() {
    const HOOKS: usize = 20;
    const ROWS: usize = 2_000;
    const INSTANCES: usize = 3;
    // The effective lease (and retry spacing) of delivery_env.
    const LEASE: Duration = Duration::from_secs(4);
    let seed = seed();
    with_db(|db| async move {
        let receiver = Receiver::start().await;
        let attempts = Attempts::default();
        // 0–200 ms latency for every request; 10 % of first and second
        // attempts answer 500 (later ones succeed, which bounds the run).
        let reply = Arc::new(move |receipt: &Recorded| {
            let (id, attempt) = attempts.next(receipt);
            let latency = Duration::from_millis(draw(seed, &id, attempt, 1) % 201);
            let fail = attempt <= 2 && draw(seed, &id, attempt, 2) % 100 < 10;
            Reply::status(if fail { 500 } else { 200 }).after(latency)
        });
        let mut keys = HashMap::new();
        for n in 0..HOOKS {
            let path = format!("/multi/{n:02}");
            let phid = hook_phid("multi", n);
            add_hook(&db, &phid, receiver.url(&path), &hook_key(n)).await;
            keys.insert(phid, hook_key(n));
            let reply = Arc::clone(&reply);
            receiver.reply_with(&path, move |receipt| reply(receipt));
        }
        let started = Instant::now();
        let mut daemons = Vec::new();
        for i in 0..INSTANCES {
            let mut env = instance_env(&db, &format!("multi-{i}"));
            // 10 % of ~100 rows per hook fail within the breaker's window:
            // keep it out of the way, this test is about claims.
            env = with_setting(env, "GORGE_WEBHOOK_ERROR_THRESHOLD", "100000");
            env = with_setting(env, "GORGE_WEBHOOK_MYSQL_POOL_MAX", "12");
            daemons.push(Daemon::start(&format!("multi-{i}"), &env).await);
        }
        // Rows arrive while the three instances poll, 100 per statement.
        insert_rows(&db, &spread("multi", ROWS, HOOKS), 100).await;
        let refs: Vec<&Daemon> = daemons.iter().collect();
        let rows = wait_table(&db, &refs, "all sent", Duration::from_secs(240), all_sent).await;
        let drained = started.elapsed();
        assert_eq!(rows.len(), ROWS);
        // Longer than the lease and the retry spacing: anything still to
        // come (a second delivery of a sent row) would arrive now.
        let settled = receiver.requests().len();
        let late = receiver.wait_for(settled + 1, LEASE + Duration::from_secs(2)).await;
        assert_eq!(late.len(), settled, "a receipt after every row was sent");

        assert_value_domain(&rows);
        let groups = by_request(&late);
        let phids: BTreeSet<&str> = rows.iter().map(|r| r.phid.as_str()).collect();
        let received: BTreeSet<&str> = groups.keys().map(String::as_str).collect();
        assert_eq!(phids, received, "every row received, and nothing else");
        let mut failures = 0;
        let mut retried_rows = 0;
        for row in &rows {
            assert_eq!(row.outcome().3, 200, "{row:?}");
            let receipts = &groups[&row.phid];
            let answers: Vec<u16> = receipts
                .iter()
                .map(|r| {
                    r.replied
                        .unwrap_or_else(|| panic!("an unanswered receipt: {r:?}"))
                        .status
                })
                .collect();
            // Every receipt but the last was answered non-2xx, the last 2xx:
            // no (row, attempt) was POSTed twice and nothing came after the
            // success.
            let (last, earlier) = answers.split_last().expect("at least one receipt");
            assert!(is_2xx(*last), "{}: answers {answers:?}", row.phid);
            assert!(
                earlier.iter().all(|s| !is_2xx(*s)),
                "{}: answers {answers:?}",
                row.phid
            );
            // Strictly one after the other: an attempt starts only after
            // the previous one was answered.
            for pair in receipts.windows(2) {
                let answered = pair[0].replied.map(|r| r.at).unwrap_or_default();
                assert!(
                    answered <= pair[1].at,
                    "{}: two receipts overlap: {:?} answered at {answered:?}, next at {:?}",
                    row.phid,
                    pair[0].at,
                    pair[1].at
                );
            }
            failures += earlier.len();
            retried_rows += usize::from(!earlier.is_empty());
        }
        check_bodies(&rows, &groups, |hook| keys[hook].clone());
        for n in 0..HOOKS {
            let path = format!("/multi/{n:02}");
            assert_eq!(
                receiver.max_concurrent(&path),
                1,
                "{path}: two deliveries to one hook at once"
            );
        }
        // The daemons' own account agrees: one won claim per POST, but for
        // rows claimed along with an earlier one and left to their lease.
        let mut won = 0;
        let mut lost = 0;
        let mut unused = 0;
        let mut per_instance = Vec::new();
        for daemon in &daemons {
            let text = metrics(daemon).await;
            won += count(&text, "gorge_webhook_claims_total{result=\"won\"}");
            lost += count(&text, "gorge_webhook_claims_total{result=\"lost\"}");
            unused += count(&text, "gorge_webhook_claims_unused_total");
            per_instance.push(count(&text, "gorge_webhook_deliveries_total{outcome=\"ok\"}"));
        }
        assert_eq!((won - unused) as usize, late.len(), "claims used vs. receipts");
        assert_eq!(per_instance.iter().sum::<u64>() as usize, ROWS);
        let busy = per_instance.iter().filter(|n| **n > 0).count();
        assert!(busy >= 2, "only {busy} instance(s) delivered: {per_instance:?}");
        let mut by_agent: BTreeMap<&str, usize> = BTreeMap::new();
        for receipt in &late {
            *by_agent.entry(user_agent(receipt)).or_default() += 1;
        }
        eprintln!(
            "reliability: multi-instance seed={seed} rows={ROWS} hooks={HOOKS} instances={INSTANCES} \
             receipts={} failed_attempts={failures} retried_rows={retried_rows} duplicates=0 \
             claims_won={won} claims_lost={lost} claims_unused={unused} ok_per_instance={per_instance:?} \
             receipts_per_instance={by_agent:?} drained_in={drained:?}",
            late.len()
        );
        for daemon in &mut daemons {
            assert_alive_without_panic(daemon);
            daemon.terminate();
        }
        for daemon in &mut daemons {
            let status = daemon.wait_exit(DEADLINE).await;
            assert_eq!(status.code(), Some(0), "{}", daemon.log());
        }
    })
    .await;
}

/// Waits until at least `n` receipts sent by `agent` are still unanswered;
/// returns them.
pub(crate) async fn wait_in_flight(
    receiver: &Receiver,
    agent: &str,
    n: usize,
    daemons: &[&Daemon],
) -> usize {
    let until = tokio::time::Instant::now() + DEADLINE;
    loop {
        let in_flight = receiver
            .requests()
            .iter()
            .filter(|r| user_agent(r) == agent && r.replied.is_none())
            .count();
        if in_flight >= n {
            return in_flight;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "{agent} never had {n} deliveries in flight\n{}",
            daemons
                .iter()
                .map(|d| d.log())
                .collect::<Vec<_>>()
                .join("\n")
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_instance_loses_nothing_and_resends_only_what_it_had_in_flight() {
    const HOOKS: usize = 8;
    const ROWS: usize = 48;
    // GORGE_WEBHOOK_DELIVERY_TIMEOUT=4 raises the lease to 4 + 2.
    const LEASE: Duration = Duration::from_secs(6);
    let seed = seed();
    with_db(|db| async move {
        let receiver = Receiver::start().await;
        let attempts = Attempts::default();
        // Slow receivers (1–2 s) so a kill finds deliveries in flight.
        let reply = Arc::new(move |receipt: &Recorded| {
            let (id, attempt) = attempts.next(receipt);
            Reply::status(200).after(Duration::from_millis(
                1_000 + draw(seed, &id, attempt, 3) % 1_001,
            ))
        });
        let mut keys = HashMap::new();
        for n in 0..HOOKS {
            let path = format!("/crash/{n}");
            let phid = hook_phid("crash", n);
            add_hook(&db, &phid, receiver.url(&path), &hook_key(n)).await;
            keys.insert(phid, hook_key(n));
            let reply = Arc::clone(&reply);
            receiver.reply_with(&path, move |receipt| reply(receipt));
        }
        let env = |instance: &str| {
            let mut env = instance_env(&db, instance);
            env = with_setting(env, "GORGE_WEBHOOK_DELIVERY_TIMEOUT", "4");
            // Half the hooks each, so both instances have work in flight.
            env = with_setting(env, "GORGE_WEBHOOK_MAX_CONCURRENT", "4");
            with_setting(env, "GORGE_WEBHOOK_MYSQL_POOL_MAX", "8")
        };
        let mut victim = Daemon::start("crash-a", &env("crash-a")).await;
        let mut survivor = Daemon::start("crash-b", &env("crash-b")).await;
        insert_rows(&db, &spread("crash", ROWS, HOOKS), 100).await;

        wait_in_flight(&receiver, "crash-a", 2, &[&victim, &survivor]).await;
        let killed_at = receiver.now();
        victim.kill_hard().await;
        // What the table says now is what the killed instance left behind:
        // rows it had POSTed whose result it never stored.
        let after_kill = all_rows(&db).await;
        assert!(
            after_kill.iter().any(|row| row.status == "queued"),
            "the kill came after everything was sent\n{}",
            survivor.log()
        );

        let restarted = Daemon::start("crash-a2", &env("crash-a2")).await;
        let rows = wait_table(
            &db,
            &[&survivor, &restarted],
            "all sent",
            Duration::from_secs(120),
            all_sent,
        )
        .await;
        let settled = receiver.requests().len();
        let all = receiver
            .wait_for(settled + 1, LEASE + Duration::from_secs(2))
            .await;
        assert_eq!(all.len(), settled, "a receipt after every row was sent");
        assert_value_domain(&rows);

        // Requests the killed process had sent may be recorded by the
        // receiver a moment after its death: take them from the final list.
        let by_victim: BTreeSet<String> = all
            .iter()
            .filter(|r| user_agent(r) == "crash-a")
            .filter_map(|r| r.header(REQUEST_ID_RECEIVED).map(str::to_owned))
            .collect();
        let in_flight: BTreeSet<String> = after_kill
            .iter()
            .filter(|row| row.status == "queued" && by_victim.contains(&row.phid))
            .map(|row| row.phid.clone())
            .collect();
        assert!(
            !in_flight.is_empty(),
            "the kill found no delivery in flight"
        );
        let groups = by_request(&all);
        let duplicated: BTreeSet<String> = groups
            .iter()
            .filter(|(_, receipts)| receipts.len() > 1)
            .map(|(phid, _)| phid.clone())
            .collect();
        // Exactly the rows in flight in the killed process came twice: each
        // needed a second delivery to be stored, and no other row did.
        assert_eq!(
            duplicated, in_flight,
            "duplicates vs. rows in flight at the kill"
        );
        for phid in &duplicated {
            let receipts = &groups[phid];
            assert_eq!(receipts.len(), 2, "{phid}: {receipts:?}");
            let (first, second) = (&receipts[0], &receipts[1]);
            // The first came from the killed process, so before its death.
            assert_eq!(user_agent(first), "crash-a", "{phid}");
            // Only after the claim's lease: the claim was made at most a
            // second (dateModified's resolution) and a moment before the
            // first receipt.
            let gap = second.at - first.at;
            assert!(
                gap >= LEASE - Duration::from_secs(2),
                "{phid} resent {gap:?} after its first receipt, inside the {LEASE:?} lease"
            );
            assert!(second.at > killed_at, "{phid}");
            assert!(second.replied.is_some_and(|r| is_2xx(r.status)), "{phid}");
        }
        for (phid, receipts) in &groups {
            if !duplicated.contains(phid) {
                assert_eq!(receipts.len(), 1, "{phid}");
            }
        }
        check_bodies(&rows, &groups, |hook| keys[hook].clone());
        for n in 0..HOOKS {
            assert_eq!(
                receiver.max_concurrent(&format!("/crash/{n}")),
                1,
                "hook {n}"
            );
        }
        let gaps: Vec<Duration> = duplicated
            .iter()
            .map(|phid| groups[phid][1].at - groups[phid][0].at)
            .collect();
        eprintln!(
            "reliability: crash seed={seed} rows={ROWS} hooks={HOOKS} receipts={} \
             in_flight_at_kill={} duplicates={} resend_gaps={gaps:?} lease={LEASE:?}",
            all.len(),
            in_flight.len(),
            duplicated.len()
        );
        assert_alive_without_panic(&mut survivor);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_amid_slow_deliveries_stores_every_result_and_resends_nothing() {
    stop_amid_slow_deliveries("TERM").await;
}

/// The signal `name` (`TERM`, `INT`, `QUIT`) with 2 s calls in flight: the
/// daemon exits 0 having stored every call's result and claimed nothing
/// else; after a restart every row is received exactly once.
pub(crate) async fn stop_amid_slow_deliveries(name: &str) {
    const HOOKS: usize = 6;
    const ROWS: usize = 18;
    // GORGE_WEBHOOK_DELIVERY_TIMEOUT=5 raises the lease to 5 + 2.
    const LEASE: Duration = Duration::from_secs(7);
    let tag = format!("sig{}", name.to_lowercase());
    with_db(|db| async move {
        let receiver = Receiver::start().await;
        for n in 0..HOOKS {
            let path = format!("/stop/{n}");
            add_hook(&db, &hook_phid(&tag, n), receiver.url(&path), &hook_key(n)).await;
            receiver.always(&path, Reply::status(200).after(Duration::from_secs(2)));
        }
        let env = with_setting(
            instance_env(&db, &tag),
            "GORGE_WEBHOOK_DELIVERY_TIMEOUT",
            "5",
        );
        let mut daemon = Daemon::start(&tag, &env).await;
        insert_rows(&db, &spread(&tag, ROWS, HOOKS), 100).await;
        let in_flight = wait_in_flight(&receiver, &tag, 4, &[&daemon]).await;
        daemon.stop_cleanly_with(name, DEADLINE).await;
        let log = daemon.stderr();
        assert!(
            log.contains(&format!(r#"event="shutdown_requested" signal="SIG{name}""#)),
            "{}",
            daemon.log()
        );
        assert!(log.contains("deliveries_drained"), "{}", daemon.log());
        assert!(!log.contains("shutdown_grace_exceeded"), "{}", daemon.log());

        // Written before the process ended: every row it POSTed is sent, and
        // every other row was never claimed (no lease to wait out).
        let stopped = all_rows(&db).await;
        let before = by_request(&receiver.requests());
        for row in &stopped {
            if before.contains_key(&row.phid) {
                assert_eq!(
                    (row.status.as_str(), row.last_result.as_str()),
                    ("sent", "okay"),
                    "{row:?}\n{}",
                    daemon.log()
                );
            } else {
                assert_eq!(row.status, "queued", "{row:?}");
                assert_eq!(
                    row.date_modified, row.date_created,
                    "claimed, not sent: {row:?}"
                );
            }
        }
        let sent_before_restart = before.len();
        drop(daemon);

        let restarted = Daemon::start(&format!("{tag}-2"), &env).await;
        let (_, all) = each_sent_once(
            &db,
            &[&restarted],
            &receiver,
            ROWS,
            Duration::from_secs(120),
            LEASE + Duration::from_secs(2),
        )
        .await;
        eprintln!(
            "reliability: SIG{name} rows={ROWS} in_flight_at_signal={in_flight} \
             sent_before_restart={sent_before_restart} receipts={} duplicates=0",
            all.len()
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_id_header_lets_a_receiver_drop_a_retry() {
    with_db(|db| async move {
        let receiver = Receiver::start().await;
        let hook = hook_phid("dedupe", 0);
        add_hook(&db, &hook, receiver.url("/dedupe"), &hook_key(0)).await;
        // The first request gets a 500; everything after it a 200.
        receiver.script("/dedupe", [Reply::status(500)]);
        let first = db
            .insert_request(&NewRequest {
                object_phid: "PHID-TASK-dedupe00000000000001".into(),
                ..NewRequest::queued(&hook, &forever(1))
            })
            .await;
        let second = db
            .insert_request(&NewRequest {
                object_phid: "PHID-TASK-dedupe00000000000002".into(),
                ..NewRequest::queued(&hook, &forever(2))
            })
            .await;
        let daemon = Daemon::start("dedupe", &instance_env(&db, "dedupe")).await;
        let rows = wait_table(&db, &[&daemon], "all sent", DEADLINE, all_sent).await;
        let phid = |id: u64| rows.iter().find(|r| r.id == id).expect("row").phid.clone();
        let got = receiver.requests();
        let ids: Vec<&str> = got
            .iter()
            .map(|r| r.header(REQUEST_ID_RECEIVED).unwrap_or_default())
            .collect();
        // Row 1 failed, row 2 went out, then row 1's retry: the same header
        // value twice, with the same bytes and signature.
        assert_eq!(
            ids,
            vec![
                phid(first).as_str(),
                phid(second).as_str(),
                phid(first).as_str()
            ]
        );
        assert_eq!(got[0].body, got[2].body);
        assert_eq!(
            got[0].header("x-phabricator-webhook-signature"),
            got[2].header("x-phabricator-webhook-signature")
        );
        assert_ne!(got[0].body, got[1].body);
        let answers: Vec<u16> = got
            .iter()
            .filter_map(|r| r.replied.map(|a| a.status))
            .collect();
        assert_eq!(answers, vec![500, 200, 200]);
        // A receiver that remembers ids it answered 2xx would have processed
        // each event exactly once.
        let mut done = BTreeSet::new();
        let processed = got
            .iter()
            .filter(|r| {
                let id = r.header(REQUEST_ID_RECEIVED).unwrap_or_default();
                let ok = r.replied.is_some_and(|a| is_2xx(a.status));
                ok && done.insert(id.to_owned())
            })
            .count();
        assert_eq!(processed, 2);
    })
    .await;
}
