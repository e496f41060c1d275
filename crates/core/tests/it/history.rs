//! The attempt history as the dispatcher feeds it: one attempt per call or
//! hook error, in Phorge's value domain, with what was sent and seen, and
//! none for a call this host could not make.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use webhook_core::history::{Attempt, SignedWith, WITHHELD};
use webhook_core::memory_store::{MemoryAttemptLog, NewRequest};
use webhook_core::windows::Settings;
use webhook_core::{DeliveryResult, LocalFailure, ProxyFailure, TransportFailure, UriRefusal};

use crate::support::{hook, Harness, Reply, START};

const NEVER: &str = r#"{"retry":"never"}"#;
const FOREVER: &str = r#"{"retry":"forever"}"#;
const BODY_KEPT: usize = 12;

fn with_history() -> (Harness, MemoryAttemptLog) {
    let log = MemoryAttemptLog::default();
    let handed = log.clone();
    let h = Harness::configured(Settings::default(), move |dispatcher| {
        dispatcher.with_history(Arc::new(handed), BODY_KEPT)
    });
    (h, log)
}

fn hook_phid(name: &str) -> String {
    format!("PHID-HWBH-{name:a<20}")
}

/// A hook named `name` at `uri`, and one request for it.
fn request_for(h: &Harness, name: &str, uri: &str, properties: &str) -> u64 {
    let phid = hook_phid(name);
    h.store.put_hook(hook(&phid, uri));
    h.store
        .insert_request(NewRequest::queued(&phid, properties))
}

/// The attempts of each request, by row id.
fn by_request(log: &MemoryAttemptLog) -> HashMap<u64, Vec<Attempt>> {
    let mut grouped: HashMap<u64, Vec<Attempt>> = HashMap::new();
    for attempt in log.attempts() {
        grouped.entry(attempt.request_id).or_default().push(attempt);
    }
    grouped
}

fn only(grouped: &HashMap<u64, Vec<Attempt>>, id: u64) -> &Attempt {
    let attempts = grouped.get(&id).map(Vec::as_slice).unwrap_or_default();
    assert_eq!(attempts.len(), 1, "request {id}: {attempts:#?}");
    &attempts[0]
}

fn outcome(attempt: &Attempt) -> (&str, &str, &str, Option<u16>) {
    (
        attempt.status.as_str(),
        attempt.error_type.as_str(),
        attempt.error_code.as_str(),
        attempt.http_status,
    )
}

#[test]
fn every_call_is_one_attempt_in_phorges_value_domain() {
    let (mut h, log) = with_history();
    let ok = request_for(&h, "ok", "http://ok.test/hook", NEVER);
    let error = request_for(&h, "error", "http://error.test/hook", NEVER);
    let retried = request_for(&h, "retried", "http://retried.test/hook", FOREVER);
    let slow = request_for(&h, "slow", "http://slow.test/hook", NEVER);
    let refused = request_for(&h, "refused", "http://refused.test/hook", NEVER);
    let redirected = request_for(&h, "redirected", "http://redirected.test/hook", NEVER);
    let unresolved = request_for(&h, "dns", "http://dnsfail.test/hook", NEVER);
    h.transport
        .always("http://ok.test/hook", Reply::status(200));
    h.transport
        .always("http://error.test/hook", Reply::status(500));
    h.transport
        .always("http://retried.test/hook", Reply::status(503));
    h.transport.always(
        "http://slow.test/hook",
        Reply::status(200).after(Duration::from_secs(60)),
    );
    h.transport.always(
        "http://refused.test/hook",
        Reply {
            latency: Duration::from_millis(30),
            result: DeliveryResult::Failed(TransportFailure::Connect),
        },
    );
    h.transport.always(
        "http://redirected.test/hook",
        Reply {
            latency: Duration::ZERO,
            result: DeliveryResult::Refused(UriRefusal::DeniedAddress([10, 0, 0, 1].into())),
        },
    );
    h.start();
    h.run_for(Duration::from_secs(30));

    let attempts = by_request(&log);
    assert_eq!(
        outcome(only(&attempts, ok)),
        ("sent", "http", "200", Some(200))
    );
    assert_eq!(
        outcome(only(&attempts, error)),
        ("failed", "http", "500", Some(500))
    );
    assert_eq!(
        outcome(only(&attempts, retried)),
        ("queued", "http", "503", Some(503))
    );
    assert_eq!(
        outcome(only(&attempts, slow)),
        ("failed", "timeout", "28", None)
    );
    assert_eq!(
        outcome(only(&attempts, refused)),
        ("failed", "http", "7", None)
    );
    assert_eq!(
        outcome(only(&attempts, redirected)),
        ("failed", "hook", "uri", None)
    );
    assert_eq!(
        outcome(only(&attempts, unresolved)),
        ("failed", "http", "6", None)
    );

    let sent = only(&attempts, ok);
    let row = h.store.row(ok).expect("row");
    assert_eq!(sent.request_phid, row.phid);
    assert_eq!(sent.hook_phid, hook_phid("ok"));
    assert_eq!(sent.object_phid, row.object_phid);
    assert!(sent.claim_version.is_some(), "a call is made under a claim");
    assert_eq!(sent.started_ms, START * 1000);
    let posted = &h.transport.posts()[0];
    let body = sent.sent.as_ref().expect("a call sends a body");
    assert_eq!(body.bytes, posted.body.len() as u64);
    assert_eq!(body.sha256, sha256_hex(&posted.body));
    assert_eq!(body.signed_with, SignedWith::Current);
    let exchange = sent.exchange.as_ref().expect("a call has an exchange");
    assert_eq!(exchange.hops.len(), 1);
    assert_eq!(exchange.hops[0].status, 200);
    assert_eq!(exchange.response_body, "answer 200 f", "cut at the bound");
    assert!(exchange.response_body_truncated);
    assert_eq!(exchange.request_headers[0].1, WITHHELD);

    let timed_out = only(&attempts, slow);
    assert_eq!(
        timed_out.duration_ms,
        Settings::default().delivery_timeout.as_millis() as u64,
        "a timeout's attempt lasts the delivery timeout"
    );
    assert_eq!(only(&attempts, refused).duration_ms, 30);
    let unresolved = only(&attempts, unresolved);
    assert!(unresolved.exchange.is_none() && unresolved.sent.is_none());
}

fn sha256_hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    digest
        .as_ref()
        .iter()
        .fold(String::new(), |mut text, byte| {
            let _ = write!(text, "{byte:02x}");
            text
        })
}

#[test]
fn hook_errors_are_attempts_without_an_exchange() {
    let (mut h, log) = with_history();
    let disabled = request_for(&h, "disabled", "http://disabled.test/hook", NEVER);
    let mut off = hook(&hook_phid("disabled"), "http://disabled.test/hook");
    off.status = "disabled".into();
    h.store.put_hook(off);
    let missing = h
        .store
        .insert_request(NewRequest::queued(&hook_phid("missing"), NEVER));
    let denied = request_for(&h, "denied", "http://denied.test/hook", NEVER);
    let gone = {
        let phid = hook_phid("gone");
        h.store.put_hook(hook(&phid, "http://gone.test/hook"));
        h.store.add_object("PHID-TASK-goneaaaaaaaaaaaaaaa", &[]);
        h.store.destroy_object("PHID-TASK-goneaaaaaaaaaaaaaaa");
        h.store.insert_request(NewRequest {
            object_phid: "PHID-TASK-goneaaaaaaaaaaaaaaa".to_owned(),
            ..NewRequest::queued(&phid, NEVER)
        })
    };
    let unparsable = request_for(&h, "props", "http://props.test/hook", "{not json");
    h.start();
    h.run_for(Duration::from_secs(5));

    let attempts = by_request(&log);
    for (id, code) in [
        (disabled, "disabled"),
        (missing, "not-found"),
        (denied, "uri"),
        (gone, "object"),
        (unparsable, "invalid-properties"),
    ] {
        let attempt = only(&attempts, id);
        assert_eq!(
            outcome(attempt),
            ("failed", "hook", code, None),
            "{attempt:#?}"
        );
        assert!(attempt.exchange.is_none() && attempt.sent.is_none());
        assert_eq!(attempt.duration_ms, 0);
    }
    assert!(h.transport.posts().is_empty());
}

#[test]
fn silent_mode_failing_rows_records_each_as_a_hook_error() {
    let log = MemoryAttemptLog::default();
    let handed = log.clone();
    let mut h = Harness::configured(Settings::default(), move |dispatcher| {
        dispatcher
            .failing_when_silent()
            .with_history(Arc::new(handed), BODY_KEPT)
    });
    let id = request_for(&h, "silent", "http://silent.test/hook", NEVER);
    h.store.set_silent_mode(Some(true));
    h.start();
    h.run_for(Duration::from_secs(5));
    let attempts = by_request(&log);
    assert_eq!(
        outcome(only(&attempts, id)),
        ("failed", "hook", "silent", None)
    );
}

#[test]
fn a_call_this_host_could_not_make_is_no_attempt() {
    let (mut h, log) = with_history();
    let id = request_for(&h, "local", "http://local.test/hook", NEVER);
    h.transport.always(
        "http://local.test/hook",
        Reply {
            latency: Duration::ZERO,
            result: DeliveryResult::Local(LocalFailure::Proxy(ProxyFailure::Unreachable)),
        },
    );
    h.start();
    h.run_for(Duration::from_secs(5));
    assert!(!h.transport.posts().is_empty(), "the call was tried");
    assert!(
        log.attempts()
            .iter()
            .all(|attempt| attempt.request_id != id),
        "nothing reached a receiver and nothing was written: {:#?}",
        log.attempts()
    );
}

#[test]
fn without_the_history_the_transport_is_asked_to_record_nothing() {
    let mut h = Harness::with_defaults();
    request_for(&h, "plain", "http://plain.test/hook", NEVER);
    h.start();
    h.run_for(Duration::from_secs(5));
    assert_eq!(h.transport.posts().len(), 1);
    assert_eq!(h.transport.recorded_exchanges(), 0);
}
