//! Operations the database refuses for a missing privilege: they fail
//! every hook alike, every poll, until the grant is given back, so the
//! dispatcher says so at error level at most once a minute (with the
//! server's words and how many it held back), reports the refusal
//! (`Dispatcher::refusal`, the `delivery_refused` gauge) until the refused
//! operation succeeds again, and delivers once the refusals stop.

use std::sync::Arc;
use std::time::Duration;

use tracing::Level;
use webhook_core::memory_store::NewRequest;
use webhook_core::memory_store::StoreOp;
use webhook_core::RequestStatus;

use crate::support::{hook, Harness, LineRecorder, Reply};

const HOOKS: usize = 5;
const NEVER: &str = r#"{"retry":"never"}"#;

/// [`HOOKS`] hooks with three rows each, every claim failing as `fault`
/// says for `refused` on the manual clock; then the claims succeed again.
/// Returns the harness (stopped) and what was logged.
fn claims_refused_for(refused: Duration, fault: impl Fn(&Harness)) -> (Harness, Arc<LineRecorder>) {
    let recorder = Arc::new(LineRecorder::default());
    let subscriber = Arc::clone(&recorder);
    let h = tracing::subscriber::with_default(subscriber, || {
        let mut h = Harness::with_defaults();
        for n in 0..HOOKS {
            let phid = format!("PHID-HWBH-denied{n:015}");
            let uri = format!("http://refused-claims-{n}.test/");
            h.store.put_hook(hook(&phid, &uri));
            h.transport.always(&uri, Reply::status(200));
            for _ in 0..3 {
                h.store.insert_request(NewRequest::queued(&phid, NEVER));
            }
        }
        fault(&h);
        h.start();
        h.run_for(refused);
        // No more faults: the grant is back.
        h.store.fail_next(StoreOp::Claim, 0);
        h.run_for(Duration::from_secs(10));
        h.stop();
        h
    });
    (h, recorder)
}

fn all_sent(h: &Harness) -> bool {
    (1..=(HOOKS as u64 * 3)).all(|id| {
        h.store
            .row(id)
            .is_some_and(|row| row.status == RequestStatus::Sent)
    })
}

#[test]
fn a_missing_privilege_is_warned_once_a_minute_not_once_per_operation() {
    let (h, log) = claims_refused_for(Duration::from_secs(150), |h| {
        h.store.deny_next(StoreOp::Claim, u32::MAX);
    });
    let metrics = h.dispatcher.metrics().snapshot();
    let warned = log.lines("store_denied", Level::ERROR);
    let quiet = log.lines("store_denied", Level::DEBUG);
    // Every hook, every poll, for two and a half minutes.
    assert!(metrics.store_denied > 100, "{metrics:?}");
    assert_eq!(metrics.store_errors, metrics.store_denied);
    let store_warnings = warned.len() + log.lines("store_error", Level::WARN).len();
    assert_eq!(
        store_warnings, 3,
        "at 0 s, 60 s and 120 s, not once per refusal: {warned:#?}"
    );
    assert_eq!(
        (warned.len() + quiet.len()) as u64,
        metrics.store_denied,
        "each refusal is logged once, at warn or debug"
    );
    // Each warning says how many refusals went without one since the one
    // before, names the operation and carries the server's words.
    let mut held_back = 0;
    let mut first = true;
    for line in log.in_order("store_denied") {
        if line.level == Level::DEBUG {
            held_back += 1;
            continue;
        }
        let expected = if first { 0 } else { held_back };
        assert_eq!(line.field("suppressed"), expected.to_string(), "{line:?}");
        first = false;
        held_back = 0;
    }
    for line in &warned {
        assert_eq!(line.field("operation"), "claim");
        assert!(
            line.field("error").contains("Claim command denied"),
            "{line:?}"
        );
    }
    assert!(all_sent(&h), "delivered once the privilege is back");
}

#[test]
fn other_store_errors_still_warn_each_time() {
    let (h, log) = claims_refused_for(Duration::from_secs(5), |h| {
        h.store.fail_next(StoreOp::Claim, 4);
    });
    assert_eq!(log.lines("store_error", Level::WARN).len(), 4);
    assert!(log.lines("store_denied", Level::ERROR).is_empty());
    assert_eq!(h.dispatcher.metrics().snapshot().store_denied, 0);
    assert!(all_sent(&h));
}

/// The reporting side: while an operation is refused the dispatcher says
/// why (what `/readyz` shows) and the gauge is up; once that operation
/// succeeds again, both clear and the log says so.
fn refusal_reported_until_accepted(op: StoreOp, operation: &str, reason: &str) {
    let recorder = Arc::new(LineRecorder::default());
    let subscriber = Arc::clone(&recorder);
    tracing::subscriber::with_default(subscriber, || {
        let mut h = Harness::with_defaults();
        let phid = "PHID-HWBH-deniedreport00000000";
        let uri = "http://refused-report.test/";
        h.store.put_hook(hook(phid, uri));
        h.transport.always(uri, Reply::status(200));
        h.store.insert_request(NewRequest::queued(phid, NEVER));
        assert_eq!(h.dispatcher.refusal(), None);
        h.store.deny_next(op, u32::MAX);
        h.start();
        h.run_for(Duration::from_secs(20));
        let refusal = h.dispatcher.refusal().expect("a refusal is reported");
        assert!(
            refusal.contains(&format!("delivery's {operation}")) && refusal.contains(reason),
            "{refusal}"
        );
        assert_eq!(h.dispatcher.metrics().snapshot().delivery_refused, 1);
        assert!(recorder.lines("store_denied_over", Level::INFO).is_empty());

        h.store.fail_next(op, 0);
        h.run_for(Duration::from_secs(70));
        assert_eq!(h.dispatcher.refusal(), None);
        assert_eq!(h.dispatcher.metrics().snapshot().delivery_refused, 0);
        let over = recorder.lines("store_denied_over", Level::INFO);
        assert_eq!(over.len(), 1, "{over:#?}");
        assert_eq!(over[0].field("operation"), operation);
        assert_eq!(
            h.store.row(1).map(|row| row.status),
            Some(RequestStatus::Sent)
        );
        h.stop();
    });
}

#[test]
fn a_refused_claim_is_reported_until_a_claim_succeeds() {
    refusal_reported_until_accepted(StoreOp::Claim, "claim", "Claim command denied");
}

#[test]
fn a_refused_write_back_is_reported_until_a_write_back_succeeds() {
    refusal_reported_until_accepted(
        StoreOp::WriteResult,
        "write-back",
        "WriteResult command denied",
    );
}

#[test]
fn a_refused_poll_is_reported_until_a_poll_succeeds() {
    refusal_reported_until_accepted(StoreOp::Candidates, "poll", "Candidates command denied");
}
