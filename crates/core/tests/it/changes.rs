//! The world changing under a long hook run, on a manual clock: Phorge
//! disables, deletes, re-points or re-keys a hook while its queue is being
//! delivered, and a result is stored before the hook's next call.

use std::time::Duration;

use serde_json::Value;
use webhook_core::memory_store::NewRequest;
use webhook_core::{verify, LastResult, RequestStatus};

use crate::support::{hook, Harness, Reply, KEY};

const HOOK: &str = "PHID-HWBH-editededitededited00";
const URI: &str = "http://edited.test/hook";
const NEW_URI: &str = "http://moved.test/hook";
const NEW_KEY: &str = "zyxwvutsrqponmlkjihgfedcba765432";
const NEVER: &str = r#"{"retry":"never"}"#;
/// How long the dispatcher may keep using a hook row it read: the bound
/// its cache promises.
const BOUND: Duration = Duration::from_secs(5);
/// When the test edits the hook, into the run.
const EDIT_AT: Duration = Duration::from_secs(3);

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// One hook with 30 queued rows and a receiver answering after 1 s: one
/// run holds them all, for half a minute. `edit` changes the hook 3 s in;
/// returns the harness after the run and the row ids.
fn edited_mid_run(edit: impl FnOnce(&Harness)) -> (Harness, Vec<u64>) {
    let mut h = Harness::with_defaults();
    h.store.put_hook(hook(HOOK, URI));
    for uri in [URI, NEW_URI] {
        h.transport.always(uri, Reply::status(200).after(secs(1)));
    }
    let ids: Vec<u64> = (0..30)
        .map(|_| h.store.insert_request(NewRequest::queued(HOOK, NEVER)))
        .collect();
    h.start();
    h.run_for(EDIT_AT);
    assert!(
        !h.transport.posts().is_empty(),
        "the run started before the edit"
    );
    edit(&h);
    h.run_for(secs(60));
    (h, ids)
}

fn error_code(h: &Harness, id: u64) -> Value {
    let row = h.store.row(id).expect("row");
    let properties: Value = serde_json::from_str(&row.properties).expect("JSON");
    properties["errorCode"].clone()
}

/// Asserts that no call went to the hook as it was after the bound, and
/// that the rows not called before then failed with `code`.
fn assert_stopped_within_bound(h: &Harness, ids: &[u64], code: &str) {
    let posts = h.transport.posts();
    let late: Vec<Duration> = posts
        .iter()
        .map(|p| p.started)
        .filter(|started| *started > EDIT_AT + BOUND)
        .collect();
    assert!(late.is_empty(), "calls after the bound: {late:?}");
    let called = posts.len();
    assert!(called < ids.len(), "every row was called: {called}");
    for id in ids {
        let row = h.store.row(*id).expect("row");
        match row.status {
            RequestStatus::Sent => {}
            RequestStatus::Failed => {
                assert_eq!(row.last_request_result, LastResult::None, "{row:?}");
                assert_eq!(error_code(h, *id), code, "{row:?}");
            }
            RequestStatus::Queued => panic!("left queued: {row:?}"),
        }
    }
    let failed = ids
        .iter()
        .filter(|id| h.store.row(**id).expect("row").status == RequestStatus::Failed)
        .count();
    assert_eq!(failed + called, ids.len(), "each row called or failed once");
}

#[test]
fn a_hook_disabled_mid_run_gets_no_call_after_the_bound() {
    let (h, ids) = edited_mid_run(|h| {
        let mut disabled = hook(HOOK, URI);
        disabled.status = "disabled".into();
        h.store.put_hook(disabled);
    });
    assert_stopped_within_bound(&h, &ids, "disabled");
}

#[test]
fn a_hook_deleted_mid_run_gets_no_call_after_the_bound() {
    let (h, ids) = edited_mid_run(|h| h.store.remove_hook(HOOK));
    assert_stopped_within_bound(&h, &ids, "not-found");
}

#[test]
fn a_new_uri_is_called_from_within_the_bound() {
    let (h, ids) = edited_mid_run(|h| h.store.put_hook(hook(HOOK, NEW_URI)));
    let posts = h.transport.posts();
    assert_eq!(posts.len(), ids.len(), "every row called once");
    let old_late: Vec<Duration> = posts
        .iter()
        .filter(|p| p.uri == URI && p.started > EDIT_AT + BOUND)
        .map(|p| p.started)
        .collect();
    assert!(
        old_late.is_empty(),
        "old URI called after the bound: {old_late:?}"
    );
    assert!(
        posts.iter().any(|p| p.uri == NEW_URI),
        "the new URI was never called"
    );
    for id in ids {
        assert_eq!(h.store.row(id).expect("row").status, RequestStatus::Sent);
    }
}

#[test]
fn a_new_key_signs_every_call_from_within_the_bound() {
    let (h, ids) = edited_mid_run(|h| {
        let mut rekeyed = hook(HOOK, URI);
        rekeyed.hmac_key = NEW_KEY.into();
        h.store.put_hook(rekeyed);
    });
    let posts = h.transport.posts();
    assert_eq!(posts.len(), ids.len(), "every row called once");
    for post in posts.iter().filter(|p| p.started > EDIT_AT + BOUND) {
        assert!(
            verify(NEW_KEY.as_bytes(), &post.body, &post.signatures.phorge),
            "signed with the old key at {:?}",
            post.started
        );
        // The key grace adds the old key's signature beside the new one.
        let previous = post.signatures.phorge_previous.as_deref();
        assert!(
            previous.is_some_and(|sig| verify(KEY.as_bytes(), &post.body, sig)),
            "no previous-key signature at {:?}",
            post.started
        );
    }
    assert!(
        posts.iter().any(|p| p.started > EDIT_AT + BOUND),
        "no call after the bound to check"
    );
}

#[test]
fn a_result_is_stored_before_the_hooks_next_call() {
    let mut h = Harness::with_defaults();
    h.store.put_hook(hook(HOOK, URI));
    // The receiver answers at once; every write waits a second before it
    // lands, as behind a slow group commit.
    h.store.delay_writes(u32::MAX, secs(1));
    let ids: Vec<u64> = (0..6)
        .map(|_| h.store.insert_request(NewRequest::queued(HOOK, NEVER)))
        .collect();
    h.start();
    h.run_for(secs(30));
    let posts = h.transport.posts();
    assert_eq!(posts.len(), ids.len());
    for pair in posts.windows(2) {
        let stored_at = pair[0].finished.expect("answered") + secs(1);
        assert!(
            pair[1].started >= stored_at,
            "{} called at {:?}, before {}'s result was stored at {stored_at:?}",
            pair[1].request_phid,
            pair[1].started,
            pair[0].request_phid
        );
    }
    for id in ids {
        assert_eq!(h.store.row(id).expect("row").status, RequestStatus::Sent);
    }
}
