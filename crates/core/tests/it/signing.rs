//! What the dispatcher signs requests with: Phorge's header always, the
//! Standard Webhooks headers for the hooks asked for, and the previous key
//! too while a changed key's grace lasts — on the manual clock.

use std::time::Duration;

use webhook_core::memory_store::NewRequest;
use webhook_core::signing::{standard_entry, standard_secret};
use webhook_core::signing::{SigningSettings, StandardScope};
use webhook_core::windows::Settings;
use webhook_core::{sign, Clock, EventKind};

use crate::support::{hook, Harness, KEY};

const HOOK_A: &str = "PHID-HWBH-aaaaaaaaaaaaaaaaaaaa";
const HOOK_B: &str = "PHID-HWBH-bbbbbbbbbbbbbbbbbbbb";
const URI_A: &str = "http://receiver-a.test/hook";
const URI_B: &str = "http://receiver-b.test/hook";
const NEW_KEY: &str = "zyxwvutsrqponmlkjihgfedcba765432";
const PROPS: &str = r#"{"retry":"never"}"#;

fn harness(standard: StandardScope, key_grace_secs: u64) -> Harness {
    Harness::configured(Settings::default(), |dispatcher| {
        dispatcher.with_signing(SigningSettings {
            standard,
            key_grace_secs,
        })
    })
}

#[test]
fn standard_headers_go_to_the_hooks_asked_for_with_the_request_phid_and_the_attempts_time() {
    let mut h = harness(StandardScope::Hooks([HOOK_A.to_owned()].into()), 0);
    h.store.put_hook(hook(HOOK_A, URI_A));
    h.store.put_hook(hook(HOOK_B, URI_B));
    let a = h.store.insert_request(NewRequest::queued(HOOK_A, PROPS));
    h.store.insert_request(NewRequest::queued(HOOK_B, PROPS));
    h.start();

    let posts = h.transport.posts();
    assert_eq!(posts.len(), 2);
    let to_a = posts.iter().find(|p| p.uri == URI_A).expect("a post to A");
    let to_b = posts.iter().find(|p| p.uri == URI_B).expect("a post to B");
    let phid = h.store.row(a).expect("row").phid;
    let standard = to_a
        .signatures
        .standard
        .clone()
        .expect("A gets the headers");
    assert_eq!(standard.id, phid);
    assert_eq!(standard.timestamp, h.clock.now());
    let secret = standard_secret(KEY).expect("a Phorge key is base64");
    assert_eq!(
        standard.signature,
        standard_entry(&secret, &phid, h.clock.now(), &to_a.body)
    );
    assert_eq!(to_a.signatures.phorge, sign(KEY.as_bytes(), &to_a.body));
    assert_eq!(to_b.signatures.standard, None, "B is not in the list");
}

#[test]
fn a_changed_key_signs_with_the_previous_key_too_until_the_grace_ends() {
    let mut h = harness(StandardScope::All, 600);
    h.store.put_hook(hook(HOOK_A, URI_A));
    h.store.insert_request(NewRequest::queued(HOOK_A, PROPS));
    h.start();
    assert_eq!(h.transport.posts()[0].signatures.phorge_previous, None);

    let mut rotated = hook(HOOK_A, URI_A);
    rotated.hmac_key = NEW_KEY.to_owned();
    h.store.put_hook(rotated.clone());
    // Past the dispatcher's hook cache, so the new key is read.
    h.run_for(Duration::from_secs(10));
    let changed_at = h.clock.now();
    h.store.insert_request(NewRequest::queued(HOOK_A, PROPS));
    h.run_for(Duration::from_secs(2));

    let posts = h.transport.posts();
    assert_eq!(posts.len(), 2);
    let second = &posts[1];
    assert_eq!(
        second.signatures.phorge,
        sign(NEW_KEY.as_bytes(), &second.body)
    );
    assert_eq!(
        second.signatures.phorge_previous.as_deref(),
        Some(sign(KEY.as_bytes(), &second.body).as_str())
    );
    let standard = second.signatures.standard.clone().expect("headers");
    let entry = |key: &str| {
        standard_entry(
            &standard_secret(key).expect("base64"),
            &standard.id,
            standard.timestamp,
            &second.body,
        )
    };
    assert_eq!(
        standard.signature,
        format!("{} {}", entry(NEW_KEY), entry(KEY))
    );
    let until = h
        .events
        .events()
        .iter()
        .find_map(|e| match e.kind {
            EventKind::KeyChanged { grace_until } => Some(grace_until),
            _ => None,
        })
        .expect("a key_changed event");
    assert!(
        matches!(until, Some(t) if (changed_at..=changed_at + 602).contains(&t)),
        "{until:?}"
    );
    assert_eq!(
        h.dispatcher.keys_in_grace(),
        vec![(HOOK_A.to_owned(), until.unwrap_or(0))]
    );

    h.run_for(Duration::from_secs(601));
    h.store.insert_request(NewRequest::queued(HOOK_A, PROPS));
    h.run_for(Duration::from_secs(2));
    let third = h.transport.posts().last().cloned().expect("a third post");
    assert_eq!(third.signatures.phorge_previous, None, "the grace is over");
    let standard = third.signatures.standard.expect("headers");
    assert!(!standard.signature.contains(' '), "{}", standard.signature);
    assert!(h.dispatcher.keys_in_grace().is_empty());
}

#[test]
fn a_hook_with_steady_traffic_is_read_again_so_a_new_key_is_seen_within_seconds() {
    let mut h = harness(StandardScope::Off, 600);
    h.store.put_hook(hook(HOOK_A, URI_A));
    h.store.insert_request(NewRequest::queued(HOOK_A, PROPS));
    h.start();
    let mut rotated = hook(HOOK_A, URI_A);
    rotated.hmac_key = NEW_KEY.to_owned();
    h.store.put_hook(rotated);
    // A row every 100 ms, so the hook's run never runs dry.
    for _ in 0..100 {
        h.store.insert_request(NewRequest::queued(HOOK_A, PROPS));
        h.run_for(Duration::from_millis(100));
    }
    let posts = h.transport.posts();
    let first_new = posts
        .iter()
        .position(|p| p.signatures.phorge == sign(NEW_KEY.as_bytes(), &p.body))
        .expect("the new key is used within the 10 s");
    assert!(
        posts[first_new].started <= posts[0].started + Duration::from_secs(6),
        "the new key came {:?} after the change",
        posts[first_new].started.saturating_sub(posts[0].started)
    );
}
