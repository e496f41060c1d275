//! A receiver's `Retry-After` (a 429 or 503 asking to slow down) pauses
//! its hook on the manual clock: that hook's rows wait, others go on, the
//! bounds hold, and nothing claimed is sent twice or dropped.

use std::time::Duration;

use serde_json::Value;
use webhook_core::memory_store::NewRequest;
use webhook_core::memory_store::StoreOp;
use webhook_core::windows::Settings;
use webhook_core::{EventKind, LastResult, RequestStatus};

use crate::support::{hook, Harness, Reply, START};

const HOOK_A: &str = "PHID-HWBH-aaaaaaaaaaaaaaaaaaaa";
const HOOK_B: &str = "PHID-HWBH-bbbbbbbbbbbbbbbbbbbb";
const URI_A: &str = "http://receiver-a.test/hook";
const URI_B: &str = "http://receiver-b.test/hook";
const NEVER: &str = r#"{"retry":"never"}"#;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// When each POST to `uri` started, in order.
fn starts(h: &Harness, uri: &str) -> Vec<Duration> {
    h.transport
        .posts()
        .iter()
        .filter(|p| p.uri == uri)
        .map(|p| p.started)
        .collect()
}

/// A's first call answers `first`, later ones 200; A and B get three rows
/// each. Returns the harness, started, and A's row ids.
fn three_rows_each(settings: Settings, first: Reply) -> (Harness, Vec<u64>) {
    let mut h = Harness::new(settings);
    h.store.put_hook(hook(HOOK_A, URI_A));
    h.store.put_hook(hook(HOOK_B, URI_B));
    h.transport.script(URI_A, [first]);
    let a: Vec<u64> = (0..3)
        .map(|_| h.store.insert_request(NewRequest::queued(HOOK_A, NEVER)))
        .collect();
    for _ in 0..3 {
        h.store.insert_request(NewRequest::queued(HOOK_B, NEVER));
    }
    h.start();
    (h, a)
}

#[test]
fn a_429_with_retry_after_pauses_its_hook_and_not_the_others() {
    let (mut h, a) = three_rows_each(Settings::default(), Reply::throttled(429, secs(5)));
    assert_eq!(starts(&h, URI_B).len(), 3, "B is not held up");
    assert_eq!(starts(&h, URI_A), vec![Duration::ZERO]);
    // The 429 row is written as Phorge's worker writes any 429.
    let first = h.store.row(a[0]).expect("row");
    assert_eq!(
        (first.status, first.last_request_result),
        (RequestStatus::Failed, LastResult::Fail)
    );
    let props: Value = serde_json::from_str(&first.properties).expect("json");
    assert_eq!(
        (&props["errorType"], &props["errorCode"]),
        (&"http".into(), &429.into())
    );
    let paused = h
        .events
        .events()
        .into_iter()
        .find(|e| matches!(e.kind, EventKind::HookPaused { .. }))
        .expect("a hook_paused event");
    assert_eq!(
        paused.kind,
        EventKind::HookPaused {
            status: 429,
            seconds: 5,
            until: START + 5
        }
    );
    assert_eq!(paused.hook.as_deref(), Some(HOOK_A));
    let metrics = h.dispatcher.metrics().snapshot();
    assert_eq!((metrics.retry_after_pauses, metrics.paused_hooks), (1, 1));
    assert_eq!(h.dispatcher.pauses().until(HOOK_A), Some(START + 5));

    h.run_for(Duration::from_millis(4_900));
    assert_eq!(starts(&h, URI_A).len(), 1, "paused for 5 s");
    for id in &a[1..] {
        assert!(
            h.store.row(*id).expect("row").is_fresh(),
            "not claimed while paused"
        );
    }
    h.run_for(secs(3));
    let a_starts = starts(&h, URI_A);
    assert_eq!(a_starts.len(), 3, "sent once the pause is over");
    assert!(a_starts[1] >= secs(5), "{a_starts:?}");
    for id in &a[1..] {
        assert_eq!(h.store.row(*id).expect("row").status, RequestStatus::Sent);
    }
    assert_eq!(h.dispatcher.metrics().snapshot().paused_hooks, 0);
    assert!(h.dispatcher.pauses().is_empty());
}

#[test]
fn a_pause_is_at_least_a_second_and_at_most_the_setting() {
    for (max, asked, expected) in [(3600, 0, 1), (10, u64::MAX, 10), (10, 7, 7)] {
        let settings = Settings {
            retry_after_max_secs: max,
            ..Settings::default()
        };
        let (mut h, _) = three_rows_each(settings, Reply::throttled(503, secs(asked)));
        h.run_for(secs(expected) - Duration::from_millis(100));
        assert_eq!(starts(&h, URI_A).len(), 1, "max {max}, asked {asked}");
        h.run_for(secs(3));
        let a_starts = starts(&h, URI_A);
        assert_eq!(a_starts.len(), 3, "max {max}, asked {asked}");
        assert!(a_starts[1] >= secs(expected), "{a_starts:?}");
    }
}

#[test]
fn a_zero_maximum_or_a_plain_503_pauses_nothing() {
    let ignoring = Settings {
        retry_after_max_secs: 0,
        ..Settings::default()
    };
    for (settings, first) in [
        (ignoring, Reply::throttled(429, secs(5))),
        (Settings::default(), Reply::status(503)),
    ] {
        let (h, _) = three_rows_each(settings, first.clone());
        assert_eq!(starts(&h, URI_A).len(), 3, "{first:?}: not paused");
        assert_eq!(h.dispatcher.metrics().snapshot().retry_after_pauses, 0);
        assert!(h.events.names().iter().all(|n| *n != "hook_paused"));
    }
}

#[test]
fn rows_claimed_along_when_a_pause_starts_wait_and_are_sent_once() {
    let mut h = Harness::with_defaults();
    h.store.put_hook(hook(HOOK_A, URI_A));
    // Paces 1, 2, 4: the 429 answers the first row of a group of four.
    let replies = (0..3)
        .map(|_| Reply::status(200))
        .chain([Reply::throttled(429, secs(5))]);
    h.transport.script(URI_A, replies);
    let rows: Vec<u64> = (0..14)
        .map(|_| h.store.insert_request(NewRequest::queued(HOOK_A, NEVER)))
        .collect();
    h.start();
    h.run_for(secs(120));
    let posts = h.transport.posts();
    let throttled_at = posts[3].started;
    assert!(
        h.dispatcher.metrics().snapshot().claims_unused > 0,
        "rows were claimed along with the 429's and left to their lease"
    );
    for p in &posts[4..] {
        assert!(p.started >= throttled_at + secs(5), "{:?}", p.started);
    }
    for id in &rows {
        let phid = h.store.row(*id).expect("row").phid;
        let sent = posts.iter().filter(|p| p.request_phid == phid).count();
        assert_eq!(sent, 1, "row {id} sent once");
    }
}

#[test]
fn a_paused_hooks_rows_stay_out_of_the_polls_until_the_pause_ends() {
    let (mut h, a) = three_rows_each(Settings::default(), Reply::throttled(429, secs(600)));
    h.run_for(secs(5));
    let looked_up = h.store.calls(StoreOp::Hook);
    // Five minutes of polls once a second: none of them reads A's rows
    // again only to skip them (the hook is looked up for triage).
    h.run_for(secs(300));
    assert!(
        h.store.calls(StoreOp::Hook) <= looked_up + 1,
        "A's rows were triaged again during its pause: {} hook lookups",
        h.store.calls(StoreOp::Hook) - looked_up
    );
    assert_eq!(starts(&h, URI_A).len(), 1, "still paused");
    h.run_for(secs(600));
    assert!(starts(&h, URI_A).len() >= 3, "sent after the pause");
    assert!(h.store.row(a[2]).expect("row").status != RequestStatus::Queued);
}
