//! The dispatcher under the faults real deployments met (issue 17): a slow
//! hook beside healthy ones, a deliverer paused past its lease, a lock
//! whose database session broke, and a host out of file descriptors. On a
//! manual clock; a pause is the clock jumping while a POST is in flight.

use std::time::Duration;

use webhook_core::memory_store::NewRequest;
use webhook_core::{
    Claim, DeliveryResult, LastResult, LocalFailure, RequestStatus, ResultWrite, Store,
};

use crate::support::{hook, Harness, Reply};

const SLOW: &str = "PHID-HWBH-slowslowslowslowslow";
const SLOW_URI: &str = "http://slow.test/hook";
const NEVER: &str = r#"{"retry":"never"}"#;
const FOREVER: &str = r#"{"retry":"forever"}"#;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn healthy_hook(n: usize) -> (String, String) {
    (
        format!("PHID-HWBH-healthy{n:013}"),
        format!("http://healthy-{n}.test/hook"),
    )
}

fn posts_for(h: &Harness, id: u64) -> usize {
    let phid = h.store.row(id).expect("row").phid;
    h.transport
        .posts()
        .iter()
        .filter(|p| p.request_phid == phid)
        .count()
}

/// Five healthy hooks get a new row each second for `seconds` seconds,
/// the dispatcher running meanwhile; their row ids.
fn healthy_rows_arriving(h: &mut Harness, seconds: u64) -> Vec<u64> {
    let mut healthy = Vec::new();
    for _second in 0..seconds {
        for n in 0..5 {
            let (phid, uri) = healthy_hook(n);
            h.store.put_hook(hook(&phid, &uri));
            healthy.push(h.store.insert_request(NewRequest::queued(&phid, NEVER)));
        }
        h.run_for(secs(1));
    }
    healthy
}

fn assert_each_sent_once(h: &Harness, ids: &[u64], otherwise: &str) {
    for id in ids {
        assert_eq!(
            h.store.row(*id).expect("row").status,
            RequestStatus::Sent,
            "row {id} of a healthy hook {otherwise}"
        );
        assert_eq!(posts_for(h, *id), 1, "row {id}");
    }
}

fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    futures::executor::block_on(f)
}

#[test]
fn a_slow_hooks_queue_does_not_hold_back_other_hooks() {
    let mut h = Harness::with_defaults();
    h.store.put_hook(hook(SLOW, SLOW_URI));
    h.transport
        .always(SLOW_URI, Reply::status(200).after(secs(2)));
    // More rows than the backlog's low-water mark (half a batch: 32).
    for _ in 0..40 {
        h.store.insert_request(NewRequest::queued(SLOW, NEVER));
    }
    h.start();
    h.run_for(secs(1));
    // Rows for other hooks arrive while the slow hook works through its
    // queue (80 s of it).
    let healthy = healthy_rows_arriving(&mut h, 10);
    // A few poll intervals after the last of them arrived.
    h.run_for(secs(3));
    assert_each_sent_once(&h, &healthy, "waited behind the slow hook");
    let slow_sent = h
        .store
        .rows()
        .iter()
        .filter(|r| r.webhook_phid == SLOW && r.status == RequestStatus::Sent)
        .count();
    assert!(
        (5..=8).contains(&slow_sent),
        "the slow hook goes on at its own pace: {slow_sent}"
    );
    assert_eq!(h.transport.max_concurrent_to(SLOW_URI), 1);
}

#[test]
fn a_result_from_a_paused_deliverer_never_overwrites_a_later_claims() {
    let mut h = Harness::with_defaults();
    h.store.put_hook(hook(SLOW, SLOW_URI));
    // It answers 500 after 1 s; the deliverer is paused in between.
    h.transport
        .always(SLOW_URI, Reply::status(500).after(secs(1)));
    let id = h.store.insert_request(NewRequest::queued(SLOW, FOREVER));
    h.start();
    assert_eq!(posts_for(&h, id), 1, "in flight");
    let claimed = h.store.row(id).expect("row").date_modified;

    // Paused for 40 s (longer than the 30 s lease): meanwhile another
    // deliverer claims the row after the lease and stores its success.
    h.clock.advance(secs(40));
    let Claim::Won(theirs) = block_on(h.store.claim(id, claimed)).expect("claim") else {
        panic!("the lease is over: another deliverer wins the claim");
    };
    let success = ResultWrite {
        id,
        expected_version: theirs,
        status: RequestStatus::Sent,
        last_request_result: LastResult::Okay,
        last_request_epoch: theirs,
        date_modified: theirs,
        properties: r#"{"retry":"forever","errorType":"http","errorCode":200}"#.to_owned(),
    };
    assert_eq!(
        block_on(h.store.write_result(&success)).expect("write"),
        webhook_core::Written::Yes
    );

    // Resumed: the paused deliverer's 500 comes back.
    h.run_for(secs(5));
    let row = h.store.row(id).expect("row");
    assert_eq!(row.status, RequestStatus::Sent, "the success stands");
    assert_eq!(row.last_request_result, LastResult::Okay);
    assert_eq!(row.properties, success.properties);
    let snap = h.dispatcher.metrics().snapshot();
    assert_eq!(snap.writeback_stale, 1, "the stale result is counted");
    h.run_for(secs(120));
    assert_eq!(posts_for(&h, id), 1, "and never sent again");
}

#[test]
fn a_paused_deliverers_result_is_still_stored_when_nobody_took_the_row() {
    let mut h = Harness::with_defaults();
    h.store.put_hook(hook(SLOW, SLOW_URI));
    h.transport
        .always(SLOW_URI, Reply::status(200).after(secs(1)));
    let id = h.store.insert_request(NewRequest::queued(SLOW, NEVER));
    h.start();
    h.clock.advance(secs(40));
    h.run_for(secs(2));
    let row = h.store.row(id).expect("row");
    assert_eq!(row.status, RequestStatus::Sent, "guarded, not dropped");
    h.run_for(secs(120));
    assert_eq!(posts_for(&h, id), 1, "so it is not sent twice");
    assert_eq!(h.dispatcher.metrics().snapshot().writeback_stale, 0);
}

#[test]
fn a_lost_lock_session_stops_calls_before_anyone_else_can_overlap() {
    let mut h = Harness::with_defaults();
    h.store.put_hook(hook(SLOW, SLOW_URI));
    h.transport
        .always(SLOW_URI, Reply::status(200).after(secs(1)));
    let ids: Vec<u64> = (0..5)
        .map(|_| h.store.insert_request(NewRequest::queued(SLOW, NEVER)))
        .collect();
    h.start();
    h.run_for(Duration::from_millis(500));
    assert_eq!(h.transport.posts().len(), 1, "the first row is in flight");

    // Its session breaks; another deliverer takes the lock the server
    // freed, and holds it for 20 s.
    h.store.lose_lock_sessions();
    let theirs = block_on(h.store.lock_hook(SLOW))
        .expect("lock")
        .expect("freed with the session");
    h.run_for(secs(20));
    assert_eq!(
        h.transport.posts().len(),
        1,
        "no call while someone else holds the hook"
    );
    assert_eq!(h.dispatcher.metrics().snapshot().lock_lost, 1);
    block_on(theirs.release()).expect("release");

    // Everything is delivered in the end, once each (the row claimed when
    // the loss was found after its lease).
    h.run_for(secs(60));
    for id in &ids {
        assert_eq!(posts_for(&h, *id), 1, "row {id}");
        assert_eq!(h.store.row(*id).expect("row").status, RequestStatus::Sent);
    }
    assert_eq!(h.transport.max_concurrent_to(SLOW_URI), 1);
}

#[test]
fn a_failed_lock_check_is_treated_as_a_lost_lock() {
    let mut h = Harness::with_defaults();
    h.store.put_hook(hook(SLOW, SLOW_URI));
    let id = h.store.insert_request(NewRequest::queued(SLOW, NEVER));
    h.store
        .fail_next(webhook_core::memory_store::StoreOp::LockCheck, 1);
    h.start();
    h.run_for(secs(5));
    assert_eq!(posts_for(&h, id), 0, "not called unchecked");
    assert_eq!(h.dispatcher.metrics().snapshot().lock_lost, 1);
    h.run_for(secs(40));
    assert_eq!(posts_for(&h, id), 1);
    assert_eq!(h.store.row(id).expect("row").status, RequestStatus::Sent);
}

#[test]
fn out_of_file_descriptors_writes_nothing_and_retries() {
    let mut h = Harness::with_defaults();
    h.store.put_hook(hook(SLOW, SLOW_URI));
    h.transport.script(
        SLOW_URI,
        [Reply {
            latency: Duration::ZERO,
            result: DeliveryResult::Local(LocalFailure::Descriptors),
        }],
    );
    // `retry=never`: a receiver's refusal would fail it for good.
    let id = h.store.insert_request(NewRequest::queued(SLOW, NEVER));
    let before = h.store.row(id).expect("row");
    h.start();
    h.run_for(secs(5));
    let row = h.store.row(id).expect("row");
    assert_eq!(
        row.status,
        RequestStatus::Queued,
        "not the receiver's fault"
    );
    assert_eq!(row.last_request_result, LastResult::None);
    assert_eq!(row.properties, before.properties, "nothing written");
    let snap = h.dispatcher.metrics().snapshot();
    assert_eq!(snap.local_failures, 1);
    assert_eq!(snap.attempts(), 0, "no attempt is counted");
    h.run_for(secs(40));
    assert_eq!(h.store.row(id).expect("row").status, RequestStatus::Sent);
}

#[test]
fn hooks_that_time_out_take_at_most_half_the_slots() {
    let mut h = Harness::new(webhook_core::windows::Settings {
        max_concurrent: 4,
        ..webhook_core::windows::Settings::default()
    });
    // As many hooks as slots never answer within the 15 s timeout, each
    // with a queue of retry-forever rows.
    for n in 0..4 {
        let (phid, _) = healthy_hook(100 + n);
        let uri = format!("http://hanging-{n}.test/hook");
        h.store.put_hook(hook(&phid, &uri));
        h.transport.always(&uri, Reply::status(200).after(secs(60)));
        for _ in 0..10 {
            h.store.insert_request(NewRequest::queued(&phid, FOREVER));
        }
    }
    h.start();
    // Their first calls take every slot; they time out after 15 s, and
    // from then on they share half the slots.
    h.run_for(secs(16));
    let healthy = healthy_rows_arriving(&mut h, 20);
    h.run_for(secs(3));
    assert_each_sent_once(&h, &healthy, "waited behind hooks that time out");
    assert!(h.transport.max_concurrent_total() <= 4);
}
