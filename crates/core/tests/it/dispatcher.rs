//! The dispatcher against protocol §5, one behaviour per test, on a manual
//! clock: nothing here sleeps for real.

use std::time::Duration;

use serde_json::Value;
use webhook_core::memory_store::NewRequest;
use webhook_core::memory_store::StoreOp;
use webhook_core::windows::Settings;
use webhook_core::{
    verify, Clock, DeliveryResult, LastResult, Payload, Properties, RequestStatus, Store,
    TransportFailure, WakeHints,
};

use crate::support::{hook, Harness, LineRecorder, Reply, KEY};

const HOOK_A: &str = "PHID-HWBH-aaaaaaaaaaaaaaaaaaaa";
const HOOK_B: &str = "PHID-HWBH-bbbbbbbbbbbbbbbbbbbb";
const URI_A: &str = "http://receiver-a.test/hook";
const URI_B: &str = "http://receiver-b.test/hook";
const FOREVER: &str = r#"{"retry":"forever","triggerPHIDs":["PHID-HRUL-x"]}"#;
const NEVER: &str = r#"{"retry":"never"}"#;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn props_of(h: &Harness, id: u64) -> Value {
    let row = h.store.row(id).expect("row");
    serde_json::from_str(&row.properties).expect("properties stay JSON")
}

/// The requests POSTed to `uri`, in the order the POSTs started.
fn posted_to(h: &Harness, uri: &str) -> Vec<String> {
    h.transport
        .posts()
        .iter()
        .filter(|p| p.uri == uri)
        .map(|p| p.request_phid.clone())
        .collect()
}

/// The request PHIDs of these rows, in the same order.
fn phids(h: &Harness, ids: &[u64]) -> Vec<String> {
    ids.iter()
        .map(|id| h.store.row(*id).expect("row").phid)
        .collect()
}

fn posts_for(h: &Harness, id: u64) -> usize {
    let phid = h.store.row(id).expect("row").phid;
    h.transport
        .posts()
        .iter()
        .filter(|p| p.request_phid == phid)
        .count()
}

#[test]
fn a_fresh_row_is_delivered_once_with_signed_exact_bytes() {
    let mut h = Harness::with_defaults();
    h.store.put_hook(hook(HOOK_A, URI_A));
    let stored = r#"{"retry":"never","triggerPHIDs":{"3":"PHID-HRUL-x"},"custom":[1,{"k":"\/"}],"errorCode":"old"}"#;
    let id = h.store.insert_request(NewRequest::queued(HOOK_A, stored));
    h.start();

    let posts = h.transport.posts();
    assert_eq!(posts.len(), 1, "delivered at once, without waiting a tick");
    let row = h.store.row(id).expect("row");
    let expected = Payload::build(&row, &Properties::parse(stored).expect("parses"));
    assert_eq!(posts[0].body, expected.as_bytes());
    assert!(verify(
        KEY.as_bytes(),
        &posts[0].body,
        &posts[0].signatures.phorge
    ));

    assert_eq!(row.status, RequestStatus::Sent);
    assert_eq!(row.last_request_result, LastResult::Okay);
    assert_eq!(row.last_request_epoch, h.clock.now());
    assert_eq!(
        row.properties,
        r#"{"retry":"never","triggerPHIDs":{"3":"PHID-HRUL-x"},"custom":[1,{"k":"\/"}],"errorCode":200,"errorType":"http"}"#
    );

    h.run_for(secs(120));
    assert_eq!(h.transport.posts().len(), 1, "never sent twice");
    let metrics = h.dispatcher.metrics().snapshot();
    assert_eq!((metrics.claims_won, metrics.delivered_ok), (1, 1));
}

#[test]
fn a_failed_forever_row_waits_the_effective_spacing() {
    for (backoff, spacing) in [(60, 60), (10, 30)] {
        let mut h = Harness::new(Settings {
            retry_backoff_secs: backoff,
            ..Settings::default()
        });
        h.store.put_hook(hook(HOOK_A, URI_A));
        h.transport
            .script(URI_A, [Reply::status(500), Reply::status(503)]);
        let id = h.store.insert_request(NewRequest::queued(HOOK_A, FOREVER));
        h.start();

        let row = h.store.row(id).expect("row");
        assert_eq!(
            (row.status, row.last_request_result),
            (RequestStatus::Queued, LastResult::Fail)
        );
        assert_eq!(props_of(&h, id)["errorCode"], 500);
        assert_eq!(props_of(&h, id)["errorType"], "http");

        h.run_for(secs(spacing - 1));
        assert_eq!(posts_for(&h, id), 1, "backoff {backoff}: too early");
        // Writes in the claim's second advance the version by one more
        // second each (claim, then write-back), so a lease-governed retry
        // comes up to two seconds after the lease, plus up to one poll
        // interval (1 s) until the next poll sees it.
        h.run_for(secs(4));
        assert_eq!(
            posts_for(&h, id),
            2,
            "backoff {backoff}: retried after {spacing}s"
        );
        let posts = h.transport.posts();
        let gap = posts[1].started - posts[0].started;
        assert!(gap >= secs(spacing) && gap <= secs(spacing + 3), "{gap:?}");
        assert_eq!(props_of(&h, id)["errorCode"], 503);
        h.run_for(secs(spacing + 1));
        assert_eq!(h.store.row(id).expect("row").status, RequestStatus::Sent);
    }
}

#[test]
fn a_failed_attempt_without_forever_ends_the_row() {
    let mut h = Harness::with_defaults();
    h.store.put_hook(hook(HOOK_A, URI_A));
    h.transport.always(URI_A, Reply::status(404));
    let never = h.store.insert_request(NewRequest::queued(HOOK_A, NEVER));
    let missing = h.store.insert_request(NewRequest::queued(HOOK_A, "{}"));
    h.start();
    h.run_for(secs(300));
    for id in [never, missing] {
        let row = h.store.row(id).expect("row");
        assert_eq!(
            (row.status, row.last_request_result),
            (RequestStatus::Failed, LastResult::Fail)
        );
        assert_eq!(props_of(&h, id)["errorCode"], 404);
        assert_eq!(posts_for(&h, id), 1);
    }
}

#[test]
fn timeouts_and_transport_errors_use_curl_numbers() {
    let mut h = Harness::with_defaults();
    h.store.put_hook(hook(HOOK_A, URI_A));
    h.transport.script(
        URI_A,
        [
            Reply::status(200).after(secs(20)),
            Reply {
                latency: Duration::ZERO,
                result: DeliveryResult::Failed(TransportFailure::Connect),
            },
        ],
    );
    let slow = h.store.insert_request(NewRequest::queued(HOOK_A, NEVER));
    let refused = h.store.insert_request(NewRequest::queued(HOOK_A, NEVER));
    h.start();
    h.run_for(secs(16));
    assert_eq!(props_of(&h, slow)["errorType"], "timeout");
    assert_eq!(props_of(&h, slow)["errorCode"], 28);
    assert_eq!(props_of(&h, refused)["errorType"], "http");
    assert_eq!(props_of(&h, refused)["errorCode"], 7);
}

#[test]
fn hook_configuration_errors_never_claim_or_post() {
    let mut h = Harness::with_defaults();
    let mut disabled = hook(HOOK_A, URI_A);
    disabled.status = "disabled".into();
    h.store.put_hook(disabled);
    let denied = "PHID-HWBH-denieddddddddddddddd";
    h.store.put_hook(hook(denied, "http://denied.test/"));
    let unknown = "PHID-HWBH-nxdomainnnnnnnnnnnnn";
    h.store.put_hook(hook(unknown, "http://nxdomain.test/"));
    let malformed = "PHID-HWBH-malformedddddddddddd";
    h.store.put_hook(hook(malformed, "ftp://x/"));
    h.store.put_hook(hook(HOOK_B, URI_B));

    let cases = [
        (
            h.store.insert_request(NewRequest::queued(HOOK_A, FOREVER)),
            "disabled",
        ),
        (
            h.store.insert_request(NewRequest::queued(
                "PHID-HWBH-gonegonegonegonegone",
                FOREVER,
            )),
            "not-found",
        ),
        (
            h.store.insert_request(NewRequest::queued(denied, FOREVER)),
            "uri",
        ),
        (
            h.store.insert_request(NewRequest::queued(unknown, FOREVER)),
            "uri",
        ),
        (
            h.store
                .insert_request(NewRequest::queued(malformed, FOREVER)),
            "uri",
        ),
        (
            h.store
                .insert_request(NewRequest::queued(HOOK_B, "{not json")),
            "invalid-properties",
        ),
        (
            h.store
                .insert_request(NewRequest::queued(HOOK_B, r#"{"triggerPHIDs":7}"#)),
            "invalid-properties",
        ),
    ];
    h.start();
    h.run_for(secs(5));

    assert!(h.transport.posts().is_empty());
    assert_eq!(h.dispatcher.metrics().snapshot().claims_won, 0);
    for (id, code) in cases {
        let row = h.store.row(id).expect("row");
        assert_eq!(row.status, RequestStatus::Failed, "{code}");
        assert_eq!(row.last_request_result, LastResult::None, "{code}");
        assert_eq!(row.last_request_epoch, 0, "{code}");
        let props = props_of(&h, id);
        assert_eq!(props["errorType"], "hook");
        assert_eq!(props["errorCode"], code);
    }
    // Unparseable text is kept, verbatim.
    let kept = props_of(&h, cases[5].0);
    assert_eq!(kept["gorgeOriginalProperties"], "{not json");
    // Configuration failures never feed the breaker.
    let failures = futures::executor::block_on(h.store.breaker_failures(HOOK_A, 0));
    assert_eq!(failures.expect("count"), 0);
}

#[test]
fn a_defective_row_fails_alone_and_the_queue_flows_on() {
    let mut h = Harness::with_defaults();
    h.store.put_hook(hook(HOOK_A, URI_A));
    let bad = h.store.insert_request(NewRequest::queued(HOOK_A, FOREVER));
    h.store
        .mark_defective(bad, "column objectPHID is not valid UTF-8 (at byte 4)");
    let good = h.store.insert_request(NewRequest::queued(HOOK_A, NEVER));
    h.start();
    let row = h.store.row(bad).expect("row");
    assert_eq!(
        (row.status, row.last_request_result, row.last_request_epoch),
        (RequestStatus::Failed, LastResult::None, 0)
    );
    assert_eq!(props_of(&h, bad)["errorCode"], "invalid-row");
    assert_eq!(props_of(&h, bad)["retry"], "forever", "properties kept");
    assert_eq!(posts_for(&h, bad), 0);
    assert_eq!(h.store.row(good).expect("row").status, RequestStatus::Sent);
}

#[test]
fn a_resolver_failure_is_a_failed_attempt_not_a_permanent_error() {
    let mut h = Harness::with_defaults();
    let flaky = "PHID-HWBH-dnsfailllllllllllll";
    h.store.put_hook(hook(flaky, "http://dnsfail.test/"));
    let id = h.store.insert_request(NewRequest::queued(flaky, FOREVER));
    h.start();
    let row = h.store.row(id).expect("row");
    assert_eq!(
        (row.status, row.last_request_result),
        (RequestStatus::Queued, LastResult::Fail)
    );
    assert_eq!(props_of(&h, id)["errorType"], "http");
    assert_eq!(props_of(&h, id)["errorCode"], 6);
    assert!(h.transport.posts().is_empty());
    assert_eq!(h.dispatcher.metrics().snapshot().claims_won, 1);
}

#[test]
fn the_breaker_trips_at_the_threshold_and_recovers_as_the_window_slides() {
    let mut h = Harness::new(Settings {
        breaker_threshold: 3,
        breaker_window_secs: 100,
        ..Settings::default()
    });
    h.store.put_hook(hook(HOOK_A, URI_A));
    h.store.put_hook(hook(HOOK_B, URI_B));
    h.transport.always(URI_A, Reply::status(500));
    let a_rows: Vec<u64> = (0..6)
        .map(|_| h.store.insert_request(NewRequest::queued(HOOK_A, NEVER)))
        .collect();
    h.start();
    h.run_for(secs(30));

    // Three failed rows open the breaker; the rest are never claimed.
    assert_eq!(h.transport.posts().len(), 3);
    for id in &a_rows[3..] {
        let row = h.store.row(*id).expect("row");
        assert_eq!(row.status, RequestStatus::Queued);
        assert!(row.is_fresh(), "skipped rows are not claimed");
    }
    // Other hooks keep flowing while A is open.
    let b = h.store.insert_request(NewRequest::queued(HOOK_B, NEVER));
    h.run_for(secs(2));
    assert_eq!(h.store.row(b).expect("row").status, RequestStatus::Sent);
    let snap = h.dispatcher.metrics().snapshot();
    assert_eq!(snap.breaker_open_hooks, 1);
    assert!(snap.breaker_skips >= 1);

    // Once the failures slide out of the window, A is called again.
    h.transport.always(URI_A, Reply::status(200));
    h.run_for(secs(75));
    for id in &a_rows[3..] {
        assert_eq!(h.store.row(*id).expect("row").status, RequestStatus::Sent);
    }
    assert_eq!(h.dispatcher.metrics().snapshot().breaker_open_hooks, 0);
}

#[test]
fn one_hook_gets_one_delivery_at_a_time_in_id_order() {
    let mut h = Harness::new(Settings {
        max_concurrent: 4,
        ..Settings::default()
    });
    h.store.put_hook(hook(HOOK_A, URI_A));
    h.store.put_hook(hook(HOOK_B, URI_B));
    h.transport
        .always(URI_A, Reply::status(200).after(Duration::from_millis(700)));
    h.transport
        .always(URI_B, Reply::status(200).after(Duration::from_millis(300)));
    let mut a_ids = Vec::new();
    for i in 0..10 {
        let hook = if i % 2 == 0 { HOOK_A } else { HOOK_B };
        let id = h.store.insert_request(NewRequest::queued(hook, NEVER));
        if hook == HOOK_A {
            a_ids.push(id);
        }
    }
    h.start();
    h.run_for(secs(10));

    assert_eq!(h.transport.posts().len(), 10);
    assert_eq!(h.transport.max_concurrent_to(URI_A), 1);
    assert_eq!(h.transport.max_concurrent_to(URI_B), 1);
    assert_eq!(
        h.transport.max_concurrent_total(),
        2,
        "hooks run side by side"
    );
    assert_eq!(posted_to(&h, URI_A), phids(&h, &a_ids));
}

#[test]
fn the_global_limit_caps_deliveries_across_hooks() {
    let mut h = Harness::new(Settings {
        max_concurrent: 3,
        ..Settings::default()
    });
    for i in 0..10 {
        let phid = format!("PHID-HWBH-limit{i:015}");
        let uri = format!("http://limit-{i}.test/");
        h.store.put_hook(hook(&phid, &uri));
        h.transport.always(&uri, Reply::status(200).after(secs(1)));
        h.store.insert_request(NewRequest::queued(&phid, NEVER));
    }
    h.start();
    h.run_for(secs(10));
    assert_eq!(h.transport.posts().len(), 10);
    assert_eq!(h.transport.max_concurrent_total(), 3);
}

#[test]
fn a_full_poll_is_followed_at_once_so_the_interval_caps_nothing() {
    let mut h = Harness::new(Settings {
        batch_size: 16,
        ..Settings::default()
    });
    for i in 0..40 {
        let phid = format!("PHID-HWBH-drain{i:015}");
        h.store
            .put_hook(hook(&phid, &format!("http://drain-{i}.test/")));
        for _ in 0..10 {
            h.store.insert_request(NewRequest::queued(&phid, NEVER));
        }
    }
    h.start();
    // Not one tick of the clock has passed: the backlog drained on polls
    // that followed full ones immediately.
    assert_eq!(h.transport.posts().len(), 400);
    assert!(h
        .store
        .rows()
        .iter()
        .all(|r| r.status == RequestStatus::Sent));
}

#[test]
fn a_lost_claim_sends_nothing() {
    let mut h = Harness::with_defaults();
    h.store.put_hook(hook(HOOK_A, URI_A));
    // Another deliverer holds the hook while it claims the row itself.
    let lock = futures::executor::block_on(h.store.lock_hook(HOOK_A))
        .expect("lock")
        .expect("free");
    let id = h.store.insert_request(NewRequest::queued(HOOK_A, NEVER));
    h.start();
    assert!(h.transport.posts().is_empty(), "lock busy: skipped");
    assert_eq!(h.dispatcher.metrics().snapshot().lock_busy, 1);
    let version = h.store.row(id).expect("row").date_modified;
    let won = futures::executor::block_on(h.store.claim(id, version)).expect("claim");
    assert!(matches!(won, webhook_core::Claim::Won(v) if v > version));
    futures::executor::block_on(lock.release()).expect("release");

    h.run_for(secs(5));
    assert!(
        h.transport.posts().is_empty(),
        "claimed elsewhere: not sent"
    );
    h.run_for(secs(30));
    assert_eq!(posts_for(&h, id), 1, "taken over once the lease expired");
}

#[test]
fn a_stale_version_loses_the_claim() {
    let mut h = Harness::with_defaults();
    h.store.put_hook(hook(HOOK_A, URI_A));
    h.transport.always(URI_A, Reply::status(200).after(secs(2)));
    let first = h.store.insert_request(NewRequest::queued(HOOK_A, NEVER));
    let second = h.store.insert_request(NewRequest::queued(HOOK_A, NEVER));
    h.start();
    // While `first` is in flight, another deliverer claims `second`.
    let version = h.store.row(second).expect("row").date_modified;
    let claim = futures::executor::block_on(h.store.claim(second, version)).expect("claim");
    assert!(matches!(claim, webhook_core::Claim::Won(_)));
    h.run_for(secs(5));
    assert_eq!(posts_for(&h, first), 1);
    assert_eq!(posts_for(&h, second), 0);
    assert_eq!(h.dispatcher.metrics().snapshot().claims_lost, 1);
}

#[test]
fn a_failed_hook_lookup_writes_nothing_and_retries_next_poll() {
    let mut h = Harness::with_defaults();
    h.store.put_hook(hook(HOOK_A, URI_A));
    h.store.fail_next(StoreOp::Hook, 1);
    let id = h.store.insert_request(NewRequest::queued(HOOK_A, NEVER));
    h.start();
    let row = h.store.row(id).expect("row");
    assert!(row.is_fresh() && row.status == RequestStatus::Queued);
    h.run_for(secs(2));
    assert_eq!(h.store.row(id).expect("row").status, RequestStatus::Sent);
}

#[test]
fn a_failed_write_back_is_retried_until_stored() {
    let mut h = Harness::with_defaults();
    h.store.put_hook(hook(HOOK_A, URI_A));
    h.store.fail_next(StoreOp::WriteResult, 3);
    let id = h.store.insert_request(NewRequest::queued(HOOK_A, NEVER));
    h.start();
    h.run_for(secs(10));
    assert_eq!(h.store.row(id).expect("row").status, RequestStatus::Sent);
    assert_eq!(posts_for(&h, id), 1);
    let snap = h.dispatcher.metrics().snapshot();
    assert_eq!((snap.writeback_retries, snap.writeback_failures), (3, 0));
}

#[test]
fn a_write_back_is_not_retried_past_the_claims_lease() {
    // Lease 30 s; the POST times out at 15 s; write-back tries at 15, 15.5,
    // 16.5, 18.5 and 22.5 s fail. The sixth would come at 30.5 s, past the
    // lease, when another deliverer may own the row: it is not made.
    let mut h = Harness::with_defaults();
    h.store.put_hook(hook(HOOK_A, URI_A));
    h.transport
        .always(URI_A, Reply::status(500).after(secs(20)));
    h.store.fail_next(StoreOp::WriteResult, 10);
    let id = h.store.insert_request(NewRequest::queued(HOOK_A, FOREVER));
    h.start();
    h.run_for(secs(40));
    assert_eq!(h.store.calls(StoreOp::WriteResult), 5);
    let snap = h.dispatcher.metrics().snapshot();
    assert_eq!((snap.writeback_retries, snap.writeback_failures), (5, 1));
    // Never written: still the claimed, queued row.
    assert_eq!(h.store.row(id).expect("row").status, RequestStatus::Queued);
}

#[test]
fn a_failed_poll_is_retried_on_the_next_tick() {
    let mut h = Harness::with_defaults();
    h.store.put_hook(hook(HOOK_A, URI_A));
    h.store.fail_next(StoreOp::Candidates, 2);
    let id = h.store.insert_request(NewRequest::queued(HOOK_A, NEVER));
    h.start();
    assert_eq!(h.store.row(id).expect("row").status, RequestStatus::Queued);
    h.run_for(secs(3));
    assert_eq!(h.store.row(id).expect("row").status, RequestStatus::Sent);
    assert_eq!(h.dispatcher.metrics().snapshot().poll_errors, 2);
}

#[test]
fn stopping_finishes_in_flight_deliveries_and_claims_nothing_new() {
    let mut h = Harness::new(Settings {
        max_concurrent: 1,
        ..Settings::default()
    });
    h.store.put_hook(hook(HOOK_A, URI_A));
    h.transport.always(URI_A, Reply::status(200).after(secs(5)));
    let in_flight = h.store.insert_request(NewRequest::queued(HOOK_A, NEVER));
    let waiting = h.store.insert_request(NewRequest::queued(HOOK_A, NEVER));
    h.start();
    h.run_for(secs(1));
    assert_eq!(h.transport.posts().len(), 1);
    h.stop();
    assert_eq!(
        h.store.row(in_flight).expect("row").status,
        RequestStatus::Sent,
        "in-flight result written before returning"
    );
    let untouched = h.store.row(waiting).expect("row");
    assert!(untouched.is_fresh() && untouched.status == RequestStatus::Queued);
    assert_eq!(h.transport.posts().len(), 1);
    assert!(!h.store.is_hook_locked(HOOK_A), "lock released on stop");
}

#[test]
fn a_busy_hook_is_locked_and_counted_once_not_per_batch() {
    let mut h = Harness::new(Settings {
        batch_size: 4,
        max_concurrent: 1,
        ..Settings::default()
    });
    h.store.put_hook(hook(HOOK_A, URI_A));
    for _ in 0..20 {
        h.store.insert_request(NewRequest::queued(HOOK_A, NEVER));
    }
    h.start();
    assert_eq!(h.transport.posts().len(), 20);
    // Several batches (4, 8, then up to 16 rows), one lock, one breaker
    // count, one hook lookup.
    assert!(h.store.calls(StoreOp::Candidates) >= 3);
    assert_eq!(h.store.calls(StoreOp::LockHook), 1);
    assert_eq!(h.store.calls(StoreOp::BreakerFailures), 1);
    assert_eq!(h.store.calls(StoreOp::Hook), 1);
    assert!(
        h.store.is_hook_locked(HOOK_A),
        "kept while the hook may get more rows"
    );
    h.run_for(secs(2));
    assert!(
        !h.store.is_hook_locked(HOOK_A),
        "released after a poll interval idle"
    );
}

#[test]
fn a_backlog_is_fetched_in_growing_batches_and_a_trickle_in_small_ones() {
    let mut h = Harness::new(Settings {
        batch_size: 4,
        max_concurrent: 1,
        ..Settings::default()
    });
    let hooks: Vec<String> = (0..16).map(|i| format!("PHID-HWBH-grow{i:016}")).collect();
    for (i, phid) in hooks.iter().enumerate() {
        h.store
            .put_hook(hook(phid, &format!("http://grow-{i}.test/")));
    }
    // Round-robin, as a backlog over many hooks looks: a batch of 4 holds
    // one row of each of 4 hooks.
    for n in 0..256 {
        h.store
            .insert_request(NewRequest::queued(&hooks[n % hooks.len()], NEVER));
    }
    h.start();
    assert_eq!(h.transport.posts().len(), 256);
    let limits = h.store.candidate_limits();
    assert_eq!(&limits[..5], &[4, 8, 16, 32, 64], "{limits:?}");
    assert!(
        limits.iter().all(|&l| l <= 64),
        "at most 16 batches: {limits:?}"
    );
    // Longer runs: with fixed batches of 4 every delivery would be a run
    // of its own, with its own lock.
    assert!(
        h.store.calls(StoreOp::LockHook) <= 128,
        "{} locks for 256 deliveries",
        h.store.calls(StoreOp::LockHook)
    );
    // Once the backlog is gone, the next poll asks for one batch again.
    h.run_for(secs(3));
    assert_eq!(h.store.candidate_limits().last(), Some(&4));
}

#[test]
fn a_poll_that_found_rows_is_followed_soon_and_an_empty_one_after_the_interval() {
    let mut h = Harness::with_defaults();
    h.store.put_hook(hook(HOOK_A, URI_A));
    h.start();
    h.run_for(secs(3));
    let idle_polls = h.store.calls(StoreOp::Candidates);
    // Idle: one poll per interval.
    h.run_for(secs(2));
    assert_eq!(h.store.calls(StoreOp::Candidates) - idle_polls, 2);
    // A row arrives: the poll that finds it is followed by one a tenth of
    // the interval later, so rows arriving meanwhile wait 100 ms, not 1 s.
    let first = h.store.insert_request(NewRequest::queued(HOOK_A, NEVER));
    h.run_for(secs(1));
    let second = h.store.insert_request(NewRequest::queued(HOOK_A, NEVER));
    h.run_for(Duration::from_millis(150));
    let posts = h.transport.posts();
    assert_eq!(posts.len(), 2, "the second row waited for the next tick");
    assert!(props_of(&h, first)["errorCode"] == 200 && props_of(&h, second)["errorCode"] == 200);
}

#[test]
fn a_kept_lock_is_taken_afresh_once_per_lease() {
    let mut h = Harness::new(Settings {
        batch_size: 4,
        max_concurrent: 1,
        ..Settings::default()
    });
    h.store.put_hook(hook(HOOK_A, URI_A));
    h.transport.always(URI_A, Reply::status(200).after(secs(1)));
    for _ in 0..40 {
        h.store.insert_request(NewRequest::queued(HOOK_A, NEVER));
    }
    h.start();
    h.run_for(secs(45));
    assert_eq!(h.transport.posts().len(), 40);
    // 40 s of continuous delivery with a 30 s lease: taken twice, not ten
    // times (once per batch) and not once.
    assert_eq!(h.store.calls(StoreOp::LockHook), 2);
    assert_eq!(h.transport.max_concurrent_to(URI_A), 1);
}

#[test]
fn a_failure_makes_the_next_claim_count_the_breaker_again() {
    let mut h = Harness::with_defaults();
    h.store.put_hook(hook(HOOK_A, URI_A));
    h.transport.script(URI_A, [Reply::status(500)]);
    for _ in 0..3 {
        h.store.insert_request(NewRequest::queued(HOOK_A, NEVER));
    }
    h.start();
    assert_eq!(h.transport.posts().len(), 3);
    assert_eq!(h.store.calls(StoreOp::BreakerFailures), 2);
}

#[test]
fn a_hook_edit_is_seen_within_the_cache_time() {
    let mut h = Harness::with_defaults();
    h.store.put_hook(hook(HOOK_A, URI_A));
    h.store.insert_request(NewRequest::queued(HOOK_A, NEVER));
    h.start();
    assert_eq!(h.transport.posts().len(), 1);
    let mut disabled = hook(HOOK_A, URI_A);
    disabled.status = "disabled".into();
    h.store.put_hook(disabled);
    h.run_for(secs(6));
    let late = h.store.insert_request(NewRequest::queued(HOOK_A, NEVER));
    h.run_for(secs(2));
    assert_eq!(h.transport.posts().len(), 1);
    assert_eq!(props_of(&h, late)["errorCode"], "disabled");
}

#[test]
fn silent_mode_holds_every_claim_and_write_until_it_ends() {
    let mut h = Harness::new(Settings {
        max_concurrent: 1,
        ..Settings::default()
    });
    h.store.put_hook(hook(HOOK_A, URI_A));
    let mut disabled = hook(HOOK_B, URI_B);
    disabled.status = "disabled".into();
    h.store.put_hook(disabled);
    h.transport.always(URI_A, Reply::status(200).after(secs(1)));
    let a_rows: Vec<u64> = (0..6)
        .map(|_| h.store.insert_request(NewRequest::queued(HOOK_A, NEVER)))
        .collect();
    let for_disabled = h.store.insert_request(NewRequest::queued(HOOK_B, NEVER));
    h.start();
    assert_eq!(h.transport.posts().len(), 1, "first in flight");
    h.store.set_silent_mode(Some(true));
    // Seen within the check interval; the delivery in flight finishes.
    h.run_for(webhook_core::hold::CHECK_INTERVAL + secs(1));
    assert!(h.silent_mode.is_held());
    let sent_before_hold = h.transport.posts().len();
    assert!(sent_before_hold < a_rows.len(), "{sent_before_hold}");
    h.run_for(secs(60));
    assert_eq!(
        h.transport.posts().len(),
        sent_before_hold,
        "nothing claimed"
    );
    let untouched: Vec<u64> = a_rows[sent_before_hold..]
        .iter()
        .copied()
        .chain([for_disabled])
        .collect();
    for id in &untouched {
        let row = h.store.row(*id).expect("row");
        assert!(
            row.is_fresh() && row.status == RequestStatus::Queued,
            "{row:?}"
        );
    }
    h.store.set_silent_mode(Some(false));
    h.run_for(secs(15));
    for id in &a_rows {
        assert_eq!(h.store.row(*id).expect("row").status, RequestStatus::Sent);
    }
    assert_eq!(
        h.store.row(for_disabled).expect("row").status,
        RequestStatus::Failed
    );
}

#[test]
fn silent_mode_under_task_adoption_fails_rows_as_phorges_worker_does() {
    let mut h = Harness::configured(
        Settings::default(),
        webhook_core::Dispatcher::failing_when_silent,
    );
    h.store.put_hook(hook(HOOK_A, URI_A));
    let mut disabled = hook(HOOK_B, URI_B);
    disabled.status = "disabled".into();
    h.store.put_hook(disabled);
    h.transport.always(URI_A, Reply::status(200));
    h.store.set_silent_mode(Some(true));
    let queued: Vec<u64> = (0..3)
        .map(|_| h.store.insert_request(NewRequest::queued(HOOK_A, NEVER)))
        .chain([h.store.insert_request(NewRequest::queued(HOOK_B, NEVER))])
        .collect();
    h.start();
    h.run_for(secs(5));
    assert!(
        h.transport.posts().is_empty(),
        "nothing is sent while silent"
    );
    for id in &queued {
        let row = h.store.row(*id).expect("row");
        assert_eq!(row.status, RequestStatus::Failed, "{row:?}");
        assert_eq!(row.last_request_result, LastResult::None);
        assert_eq!(row.last_request_epoch, 0);
        // Phorge checks silent mode before the hook: the disabled hook's
        // row fails as silent too.
        assert_eq!(props_of(&h, *id)["errorType"], "hook");
        assert_eq!(props_of(&h, *id)["errorCode"], "silent");
    }
    h.store.set_silent_mode(Some(false));
    h.run_for(webhook_core::hold::CHECK_INTERVAL + secs(1));
    let after = h.store.insert_request(NewRequest::queued(HOOK_A, NEVER));
    h.run_for(secs(5));
    assert_eq!(h.store.row(after).expect("row").status, RequestStatus::Sent);
}

#[test]
fn unreadable_configuration_does_not_stop_delivery() {
    let mut h = Harness::with_defaults();
    h.store.set_silent_mode(None);
    h.store.put_hook(hook(HOOK_A, URI_A));
    let id = h.store.insert_request(NewRequest::queued(HOOK_A, NEVER));
    h.start();
    assert_eq!(h.store.row(id).expect("row").status, RequestStatus::Sent);
    assert_eq!(
        h.silent_mode.visibility(),
        webhook_core::hold::Visibility::Invisible
    );
}

#[test]
fn events_tell_the_story_in_order_without_secrets() {
    let mut h = Harness::new(Settings {
        breaker_threshold: 2,
        max_concurrent: 1,
        ..Settings::default()
    });
    h.store.put_hook(hook(HOOK_A, URI_A));
    let mut disabled = hook(HOOK_B, URI_B);
    disabled.status = "disabled".into();
    h.store.put_hook(disabled);
    h.transport.always(URI_A, Reply::status(500));
    for _ in 0..3 {
        h.store.insert_request(NewRequest::queued(HOOK_A, NEVER));
    }
    let hook_error = h.store.insert_request(NewRequest::queued(HOOK_B, NEVER));
    h.start();
    h.store.set_silent_mode(Some(true));
    h.run_for(secs(3));
    assert_eq!(
        h.events.names(),
        [
            "claim_won",
            "attempt_failed",
            "claim_won",
            "attempt_failed",
            "breaker_opened",
            "hook_error",
            "silent_hold"
        ]
    );
    let events = h.events.events();
    assert_eq!(
        events[1].to_json()["errorCode"],
        500,
        "the integer PHP would write"
    );
    assert_eq!(events[1].to_json()["willRetry"], false);
    assert_eq!(events[4].to_json()["failures"], 2);
    let phid = h.store.row(hook_error).expect("row").phid;
    assert_eq!(events[5].request.as_deref(), Some(phid.as_str()));
    assert_eq!(events[5].to_json()["errorCode"], "disabled");
    assert_eq!(events[6].to_json()["held"], true);
    for event in &events {
        let text = event.to_json().to_string();
        assert!(
            !text.contains(KEY) && !text.contains("receiver-a.test"),
            "{text}"
        );
    }
}

#[test]
fn an_idle_dispatcher_polls_once_per_interval() {
    let mut h = Harness::with_defaults();
    h.start();
    h.run_for(secs(10));
    let polls = h.dispatcher.metrics().snapshot().polls;
    assert!((10..=11).contains(&polls), "{polls}");
}

/// An idle dispatcher with hook A, run past its start; the poll and probe
/// counts so far.
fn idle_with_hook_a(settings: Settings) -> (Harness, u64, u64) {
    let mut h = Harness::new(settings);
    h.store.put_hook(hook(HOOK_A, URI_A));
    h.start();
    h.run_for(secs(3));
    let polls = h.store.calls(StoreOp::Candidates);
    let probes = h.store.calls(StoreOp::NewestId);
    (h, polls, probes)
}

/// Inserts a row 330 ms into a poll interval (well before the next poll),
/// runs `then`, and returns how long after the insert its POST started.
fn post_delay_of_a_row_inserted_between_polls(h: &mut Harness, then: Duration) -> Option<Duration> {
    h.run_for(Duration::from_millis(330));
    let inserted = h.clock.monotonic();
    h.store.insert_request(NewRequest::queued(HOOK_A, NEVER));
    h.run_for(then);
    h.transport.posts().first().map(|p| p.started - inserted)
}

#[test]
fn an_idle_dispatcher_probes_between_polls_and_polls_only_on_a_change() {
    let (mut h, polls, probes) = idle_with_hook_a(Settings::default());
    h.run_for(secs(2));
    assert_eq!(
        h.store.calls(StoreOp::Candidates) - polls,
        2,
        "one poll per interval"
    );
    // A spacing apart, restarted by each poll.
    let settings = Settings::default();
    let per_interval =
        (settings.poll_interval.as_millis() / settings.wake_probe.as_millis()) as u64;
    let probed = h.store.calls(StoreOp::NewestId) - probes;
    assert!(
        (2 * per_interval - 2..=2 * per_interval).contains(&probed),
        "{probed} probes in 2 s, {per_interval} fit in an interval"
    );
    let snap = h.dispatcher.metrics().snapshot();
    assert_eq!(snap.wake_probes, h.store.calls(StoreOp::NewestId));
    assert_eq!(snap.wakeups, 1, "only the first reading counts as a change");
}

#[test]
fn a_row_arriving_at_idle_goes_out_at_the_next_probe_not_the_next_poll() {
    let (mut h, _, _) = idle_with_hook_a(Settings::default());
    let delay = post_delay_of_a_row_inserted_between_polls(&mut h, Duration::from_millis(60));
    let delay = delay.expect("posted within 60 ms of the insert");
    assert!(delay <= Settings::default().wake_probe, "{delay:?}");
    assert_eq!(h.dispatcher.metrics().snapshot().wakeups, 2);
}

/// A wake-up whose poll finds nothing to take (here a row that is not
/// queued; with task adoption, a row whose task Phorge has not queued
/// yet) is followed by another poll a tenth of the interval later, not a
/// whole one: the highest id will not change again for that row.
#[test]
fn a_wake_up_that_found_nothing_looks_again_soon() {
    let (mut h, _, _) = idle_with_hook_a(Settings::default());
    h.run_for(Duration::from_millis(330));
    let polls = h.store.calls(StoreOp::Candidates);
    h.store.insert_request(NewRequest {
        status: RequestStatus::Sent,
        ..NewRequest::queued(HOOK_A, NEVER)
    });
    h.run_for(Duration::from_millis(160));
    assert_eq!(
        h.store.calls(StoreOp::Candidates) - polls,
        2,
        "the woken poll and one 100 ms after it"
    );
    h.run_for(Duration::from_millis(500));
    assert_eq!(
        h.store.calls(StoreOp::Candidates) - polls,
        2,
        "then the interval"
    );
}

#[test]
fn with_the_probe_off_a_row_at_idle_waits_for_the_poll() {
    let settings = Settings {
        wake_probe: Duration::ZERO,
        ..Settings::default()
    };
    let (mut h, _, probes) = idle_with_hook_a(settings);
    assert_eq!(probes, 0);
    let early = post_delay_of_a_row_inserted_between_polls(&mut h, Duration::from_millis(60));
    assert_eq!(early, None, "nothing before the poll");
    h.run_for(secs(1));
    assert_eq!(h.transport.posts().len(), 1, "the poll found it");
    assert_eq!(h.store.calls(StoreOp::NewestId), 0);
}

#[test]
fn a_failing_probe_leaves_the_row_to_the_next_poll() {
    let (mut h, _, _) = idle_with_hook_a(Settings::default());
    h.store.fail_next(StoreOp::NewestId, 1_000);
    let early = post_delay_of_a_row_inserted_between_polls(&mut h, Duration::from_millis(60));
    assert_eq!(early, None, "the probe saw nothing");
    h.run_for(secs(1));
    assert_eq!(h.transport.posts().len(), 1, "the poll found it");
    let snap = h.dispatcher.metrics().snapshot();
    assert_eq!(snap.poll_errors, 0, "a failed probe is no failed poll");
}

/// While a wake-hint source follows the table, the probe rests (polls
/// stay at the interval), a hinted row goes out without the clock moving,
/// and once the source stops following the probe is back.
#[test]
fn while_hints_follow_the_probe_rests_and_a_hint_polls_at_once() {
    let hints = WakeHints::new();
    let mut h = Harness::configured(Settings::default(), |d| d.with_wake_hints(hints.clone()));
    h.store.put_hook(hook(HOOK_A, URI_A));
    hints.set_following(true);
    h.start();
    h.run_for(secs(3));
    let (polls, probes) = (
        h.store.calls(StoreOp::Candidates),
        h.store.calls(StoreOp::NewestId),
    );
    assert_eq!(probes, 0, "following from the start");
    h.run_for(secs(2));
    assert_eq!(h.store.calls(StoreOp::NewestId), probes, "the probe rests");
    assert_eq!(
        h.store.calls(StoreOp::Candidates) - polls,
        2,
        "one poll per interval"
    );

    h.run_for(Duration::from_millis(330));
    let inserted = h.clock.monotonic();
    h.store.insert_request(NewRequest::queued(HOOK_A, NEVER));
    hints.notify();
    h.run_for(Duration::ZERO);
    let posted = h.transport.posts().first().map(|p| p.started - inserted);
    assert_eq!(posted, Some(Duration::ZERO), "sent at the hint");

    hints.set_following(false);
    h.run_for(Duration::from_millis(330));
    assert!(
        h.store.calls(StoreOp::NewestId) > probes,
        "the probe is back"
    );
}

/// A hint can come before its row is visible (the log is written before
/// the engine commits): a hinted poll that found nothing looks again a few
/// milliseconds later, not a tenth of the interval later. While rows keep
/// coming, hinted polls keep the probe's spacing.
#[test]
fn a_hint_that_found_nothing_looks_again_at_once_and_a_stream_keeps_the_spacing() {
    let hints = WakeHints::new();
    let mut h = Harness::configured(Settings::default(), |d| d.with_wake_hints(hints.clone()));
    h.store.put_hook(hook(HOOK_A, URI_A));
    hints.set_following(true);
    h.start();
    h.run_for(Duration::from_millis(1330));
    let polls = h.store.calls(StoreOp::Candidates);
    hints.notify();
    h.run_for(Duration::ZERO);
    assert_eq!(
        h.store.calls(StoreOp::Candidates) - polls,
        1,
        "the hinted poll"
    );
    let committed = h.clock.monotonic();
    h.store.insert_request(NewRequest::queued(HOOK_A, NEVER));
    h.run_for(Duration::from_millis(10));
    let posted = h.transport.posts().first().map(|p| p.started - committed);
    assert!(
        posted.is_some_and(|d| d <= Duration::from_millis(5)),
        "{posted:?}"
    );

    // The poll that found it is recent: a hint now waits for the spacing.
    let polls = h.store.calls(StoreOp::Candidates);
    h.store.insert_request(NewRequest::queued(HOOK_A, NEVER));
    hints.notify();
    h.run_for(Duration::from_millis(20));
    assert_eq!(
        h.store.calls(StoreOp::Candidates),
        polls,
        "not before the spacing"
    );
    h.run_for(Duration::from_millis(40));
    assert_eq!(h.transport.posts().len(), 2, "within the probe's spacing");
}

/// The lag: a row nothing delivers (its hook held by another deliverer
/// that never lets go) shows a wait that grows with the clock, read from
/// the store; a hook whose breaker is open waits on purpose and is left
/// out; silent mode holds everything, so nothing counts as due.
#[test]
fn the_longest_due_row_grows_while_stalled_and_leaves_held_back_hooks_out() {
    let mut h = Harness::new(Settings {
        breaker_threshold: 1,
        ..Settings::default()
    });
    h.store.put_hook(hook(HOOK_A, URI_A));
    h.store.put_hook(hook(HOOK_B, URI_B));
    h.transport.always(URI_B, Reply::status(500));
    let _theirs = futures::executor::block_on(h.store.lock_hook(HOOK_A))
        .expect("lock")
        .expect("free");
    let stalled = h.store.insert_request(NewRequest::queued(HOOK_A, NEVER));
    let failing = h.store.insert_request(NewRequest::queued(HOOK_B, FOREVER));
    let longest = |h: &Harness| {
        futures::executor::block_on(h.dispatcher.longest_due(&h.store)).expect("longest due")
    };
    let created = h.store.row(stalled).expect("row").date_created;
    assert_eq!(
        longest(&h).map(|r| (r.id, r.due_since)),
        Some((stalled, created))
    );
    h.start();
    h.run_for(secs(200));
    let due = longest(&h).expect("still due");
    assert_eq!((due.id, due.due_since), (stalled, created), "{due:?}");
    assert_eq!(h.clock.now() - due.due_since, 200);
    assert!(h.transport.posts().iter().all(|p| p.uri == URI_B));
    // Hook B's row is due again after its spacing, but its breaker is
    // open: were it counted, it would come first only after HOOK_A's row,
    // so look at it alone.
    assert_eq!(posts_for(&h, failing), 1, "the breaker stops the retries");
    drop(_theirs);
    h.run_for(secs(2));
    assert_eq!(posts_for(&h, stalled), 1, "delivered once the lock is free");
    assert_eq!(longest(&h), None, "the failing hook's row waits on purpose");
}

/// Hook A answering 200 after `latency` (unless scripted otherwise), with
/// `n` queued rows; returns their ids.
fn hook_a_with_rows(h: &Harness, latency: Duration, n: usize) -> Vec<u64> {
    h.store.put_hook(hook(HOOK_A, URI_A));
    h.transport.always(URI_A, Reply::status(200).after(latency));
    (0..n)
        .map(|_| h.store.insert_request(NewRequest::queued(HOOK_A, NEVER)))
        .collect()
}

/// Runs until `n` POSTs have started.
fn run_until_posts(h: &mut Harness, n: usize) {
    while h.transport.posts().len() < n {
        h.run_for(Duration::from_millis(1));
    }
}

/// Hook A answering in 10 ms with 10 rows, run until its first two claim
/// groups (1 and 2 rows) went out and the third POST started; the third
/// group (rows 4–7) is claimed when that POST ends.
fn two_claim_groups_out() -> (Harness, Vec<u64>) {
    let mut h = Harness::with_defaults();
    let ids = hook_a_with_rows(&h, Duration::from_millis(10), 10);
    h.start();
    run_until_posts(&mut h, 3);
    (h, ids)
}

/// Every row was POSTed exactly once and is `sent`.
fn assert_each_sent_once(h: &Harness, ids: &[u64]) {
    for id in ids {
        assert_eq!(posts_for(h, *id), 1, "row {id}");
        assert_eq!(h.store.row(*id).expect("row").status, RequestStatus::Sent);
    }
}

/// The most rows claimed and not yet answered at any moment, from the
/// events (each claimed row ends in one `delivered`/`attempt_failed`).
fn most_claimed_unanswered(h: &Harness) -> usize {
    most_claimed_unanswered_since(h, 0)
}

/// [`most_claimed_unanswered`] over the events from the `from`th on.
fn most_claimed_unanswered_since(h: &Harness, from: usize) -> usize {
    let (mut open, mut most) = (0usize, 0usize);
    for name in h.events.names().into_iter().skip(from) {
        match name {
            "claim_won" => open += 1,
            "delivered" | "attempt_failed" => open = open.saturating_sub(1),
            _ => {}
        }
        most = most.max(open);
    }
    most
}

#[test]
fn a_fast_hook_has_its_next_rows_claimed_with_the_row_before_them() {
    let mut h = Harness::with_defaults();
    let ids = hook_a_with_rows(&h, Duration::from_millis(50), 40);
    h.start();
    h.run_for(secs(5));

    // Claims run ahead of the POSTs, up to a group's worth…
    let most = most_claimed_unanswered(&h);
    assert!((3..=16).contains(&most), "{most} rows claimed at once");
    // …yet the POSTs are one at a time, in id order, each row once.
    assert_eq!(posted_to(&h, URI_A), phids(&h, &ids));
    assert_eq!(h.transport.max_concurrent_to(URI_A), 1);
    let metrics = h.dispatcher.metrics().snapshot();
    assert_eq!((metrics.claims_won, metrics.claims_unused), (40, 0));
}

#[test]
fn without_lease_to_spare_no_row_is_claimed_ahead() {
    // The lease is raised to the timeout plus its margin, no more: no
    // budget is left for rows waiting their turn.
    let mut h = Harness::new(Settings {
        claim_lease_secs: 15,
        delivery_timeout: secs(15),
        ..Settings::default()
    });
    hook_a_with_rows(&h, Duration::from_millis(50), 20);
    h.start();
    h.run_for(secs(5));
    assert_eq!(h.transport.posts().len(), 20);
    assert_eq!(most_claimed_unanswered(&h), 1);
}

#[test]
fn a_row_claimed_ahead_is_not_sent_late_but_after_its_lease() {
    let mut h = Harness::with_defaults();
    let ids = hook_a_with_rows(&h, Duration::from_millis(10), 10);
    // Quick answers grow the claim groups (1, 2, 4 rows); then the first
    // row of the third group takes longer than the 6.5 s budget.
    let fast = Reply::status(200).after(Duration::from_millis(10));
    h.transport.script(
        URI_A,
        [
            fast.clone(),
            fast.clone(),
            fast,
            Reply::status(200).after(secs(10)),
        ],
    );
    h.start();
    h.run_for(secs(12));
    let metrics = h.dispatcher.metrics().snapshot();
    assert_eq!(metrics.claims_unused, 3, "the slow row's group mates");
    let late: Vec<u64> = ids[4..7].to_vec();
    for id in &late {
        assert_eq!(posts_for(&h, *id), 0, "row {id} sent past the budget");
    }
    // The rest of the run went on; the three go once their lease is over.
    for id in &ids[7..] {
        assert_eq!(posts_for(&h, *id), 1);
    }
    h.run_for(secs(40));
    assert_each_sent_once(&h, &ids);
    let slow_start = h.transport.posts()[3].started;
    for post in h.transport.posts().iter().skip(7) {
        assert!(post.started >= slow_start + secs(30), "{post:?}");
    }
}

#[test]
fn a_failure_in_a_claim_group_is_counted_before_the_next_row_is_sent() {
    let mut h = Harness::new(Settings {
        breaker_threshold: 1,
        ..Settings::default()
    });
    hook_a_with_rows(&h, Duration::from_millis(10), 10);
    let fast = Reply::status(200).after(Duration::from_millis(10));
    h.transport.script(
        URI_A,
        [fast.clone(), fast.clone(), fast, Reply::status(500)],
    );
    h.start();
    h.run_for(secs(5));
    // The fourth row (first of a group of four) failed and opened the
    // breaker: its three group mates are not sent.
    assert_eq!(h.transport.posts().len(), 4);
    let metrics = h.dispatcher.metrics().snapshot();
    assert_eq!(metrics.claims_unused, 3);
    assert!(metrics.breaker_skips >= 1);
}

#[test]
fn stopping_sends_the_rows_already_claimed_and_claims_no_more() {
    let mut h = Harness::with_defaults();
    let ids = hook_a_with_rows(&h, Duration::from_millis(300), 30);
    h.start();
    h.run_for(secs(2));
    assert!(most_claimed_unanswered(&h) > 1, "no group was claimed");
    h.stop();
    let mut sent = 0;
    for id in &ids {
        let row = h.store.row(*id).expect("row");
        match row.status {
            RequestStatus::Sent => sent += 1,
            _ => assert!(row.is_fresh(), "claimed and left unsent: {row:?}"),
        }
    }
    assert!(sent > 4 && sent < ids.len(), "{sent}");
    assert_eq!(h.dispatcher.metrics().snapshot().claims_unused, 0);
}

#[test]
fn a_failed_claim_stops_the_run_and_its_group_mates_wait_out_their_lease() {
    let (mut h, ids) = two_claim_groups_out();
    // The third group's first claim fails.
    h.store.fail_next(StoreOp::Claim, 1);
    h.run_for(secs(1));
    let metrics = h.dispatcher.metrics().snapshot();
    assert_eq!(h.transport.posts().len(), 3, "the run stopped");
    assert_eq!(metrics.store_errors, 1);
    assert_eq!(metrics.claims_unused, 3, "rows 5–7 were claimed with row 4");
    h.run_for(secs(40));
    assert_each_sent_once(&h, &ids);
    let rows_5_to_7 = phids(&h, &ids[4..7]);
    let failed_at = h.transport.posts()[2].finished.expect("answered");
    for post in h.transport.posts() {
        if rows_5_to_7.contains(&post.request_phid) {
            assert!(post.started >= failed_at + secs(30), "{post:?}");
        }
    }
}

#[test]
fn a_groups_first_row_is_not_sent_when_its_claims_answered_past_the_budget() {
    let (mut h, ids) = two_claim_groups_out();
    // The third group (rows 4–7) is claimed at once, but the answer to
    // row 4's claim comes 10 s later (> the 6.5 s budget): its lease has
    // been running all along, so none of the four is sent now.
    h.store.delay_claim_replies(1, secs(10));
    h.run_for(secs(12));
    assert_eq!(h.dispatcher.metrics().snapshot().claims_unused, 4);
    for id in &ids[3..7] {
        assert_eq!(posts_for(&h, *id), 0, "row {id} sent late");
    }
    h.run_for(secs(40));
    assert_each_sent_once(&h, &ids);
}

#[test]
fn a_hooks_pace_carries_over_to_its_next_run() {
    let mut h = Harness::with_defaults();
    hook_a_with_rows(&h, Duration::from_millis(10), 10);
    h.start();
    h.run_for(secs(2));
    assert_eq!(h.transport.posts().len(), 10, "groups of 1, 2, 4 and 3");
    // A later run of the same hook starts at the pace the last one
    // reached: its four rows are claimed at once.
    let from = h.events.names().len();
    let later = hook_a_with_rows(&h, Duration::from_millis(10), 4);
    h.run_for(secs(3));
    assert_each_sent_once(&h, &later);
    assert_eq!(most_claimed_unanswered_since(&h, from), 4);
}

/// Operators filter the dispatcher's log lines by their target
/// (`GORGE_LOG_LEVEL=webhook_core::dispatcher=debug`) and the docs quote
/// it: however the dispatcher's code is split into modules, every line it
/// writes keeps that one target.
#[test]
fn every_dispatcher_log_line_keeps_the_dispatchers_target() {
    let recorder = std::sync::Arc::new(LineRecorder::default());
    let subscriber = std::sync::Arc::clone(&recorder);
    tracing::subscriber::with_default(subscriber, || {
        let mut h = Harness::with_defaults();
        h.store.put_hook(hook(HOOK_A, URI_A));
        h.store.put_hook(hook(HOOK_B, URI_B));
        h.transport.always(URI_B, Reply::status(500));
        h.store.insert_request(NewRequest::queued(HOOK_A, NEVER));
        h.store.insert_request(NewRequest::queued(HOOK_B, FOREVER));
        h.store
            .insert_request(NewRequest::queued(HOOK_A, "{not json"));
        h.start();
        h.run_for(secs(5));
        h.stop();
    });
    let seen = recorder.all();
    let from_dispatcher: Vec<_> = seen
        .iter()
        .filter(|line| line.module.starts_with("webhook_core::dispatch"))
        .collect();
    assert!(from_dispatcher.len() >= 4, "{seen:?}");
    for line in from_dispatcher {
        assert_eq!(
            line.target, "webhook_core::dispatcher",
            "written from {}",
            line.module
        );
    }
}

#[test]
fn a_hook_whose_run_outlasted_the_poll_gets_its_next_rows_soon_not_an_interval_later() {
    // Fewer hooks than slots: every hook runs, so the poll after the first
    // leaves them all out and finds nothing. Their remaining rows must not
    // wait a whole poll interval once their runs end.
    let mut h = Harness::new(Settings {
        max_concurrent: 8,
        batch_size: 32,
        ..Settings::default()
    });
    let hooks: Vec<String> = (0..4)
        .map(|i| format!("PHID-HWBH-outlast{i:013}"))
        .collect();
    for (i, phid) in hooks.iter().enumerate() {
        let uri = format!("http://outlast-{i}.test/");
        h.store.put_hook(hook(phid, &uri));
        h.transport
            .always(&uri, Reply::status(200).after(Duration::from_millis(10)));
    }
    // Interleaved, as rows of many hooks arrive: each poll holds a few
    // rows of every hook.
    for _ in 0..40 {
        for phid in &hooks {
            h.store.insert_request(NewRequest::queued(phid, NEVER));
        }
    }
    h.start();
    h.run_for(Duration::from_millis(950));
    let early = h.transport.posts().len();
    assert!(
        early >= 96,
        "{early} of 160 sent within one poll interval: the hooks sat idle after their first rows"
    );
    h.run_for(secs(5));
    assert_eq!(h.transport.posts().len(), 160);
}

/// A row hinted while its hook's previous run is still in flight is left
/// out of that poll (the hook is running); the run's end brings the next
/// poll within the probe's default spacing, not a tenth of the interval,
/// also with the probe off.
#[test]
fn a_row_hinted_while_its_hook_runs_goes_out_when_the_run_ends() {
    let hints = WakeHints::new();
    let settings = Settings {
        poll_interval: secs(3600),
        wake_probe: Duration::ZERO,
        ..Settings::default()
    };
    let mut h = Harness::configured(settings, |d| d.with_wake_hints(hints.clone()));
    h.store.put_hook(hook(HOOK_A, URI_A));
    h.transport
        .always(URI_A, Reply::status(200).after(Duration::from_millis(20)));
    hints.set_following(true);
    h.start();
    h.run_for(secs(1));
    h.store.insert_request(NewRequest::queued(HOOK_A, NEVER));
    hints.notify();
    h.run_for(Duration::from_millis(5));
    assert_eq!(
        h.transport.posts().len(),
        1,
        "the first row's call is in flight"
    );
    h.store.insert_request(NewRequest::queued(HOOK_A, NEVER));
    hints.notify();
    h.run_for(Duration::from_millis(200));
    assert_eq!(
        h.transport.posts().len(),
        2,
        "the second row after the first run"
    );
}
