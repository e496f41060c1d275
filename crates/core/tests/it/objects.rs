//! The object check Phorge's worker makes before a call: a request's
//! transactions go out as the object's transaction table has them (newest
//! first, only those that still exist), a destroyed object is failed with
//! hook error `object` and never called about, and where the tables cannot
//! be seen the stored list goes out in the order its shape implies.

use std::time::Duration;

use serde_json::Value;
use webhook_core::memory_store::NewRequest;
use webhook_core::memory_store::StoreOp;
use webhook_core::{LastResult, Payload, Properties, RequestStatus};

use crate::support::{hook, Harness, Reply};

const HOOK_A: &str = "PHID-HWBH-aaaaaaaaaaaaaaaaaaaa";
const URI_A: &str = "http://receiver-a.test/hook";
const TASK: &str = "PHID-TASK-objectsaaaaaaaaaaaa";

/// A live edit's `properties`: PHID-keyed, in the order the edit applied
/// the transactions (oldest first).
fn live_edit(transactions: &[&str]) -> String {
    let keyed: Vec<String> = transactions
        .iter()
        .map(|t| format!("\"{t}\":\"{t}\""))
        .collect();
    format!(
        r#"{{"retry":"forever","transactionPHIDs":{{{}}},"triggerPHIDs":["PHID-HRUL-x"]}}"#,
        keyed.join(",")
    )
}

fn request_about(object: &str, properties: &str) -> NewRequest {
    NewRequest {
        object_phid: object.to_owned(),
        ..NewRequest::queued(HOOK_A, properties)
    }
}

/// `n` rows of hook A, each about a task of its own; the task of row
/// `gone` is destroyed. Returns the rows' ids.
fn rows_about_their_own_tasks(h: &Harness, n: usize, gone: usize) -> Vec<u64> {
    let objects: Vec<String> = (0..n)
        .map(|i| format!("PHID-TASK-objects{i:011}"))
        .collect();
    let ids = objects
        .iter()
        .map(|object| {
            h.store.add_object(object, &[]);
            h.store.insert_request(request_about(object, "{}"))
        })
        .collect();
    h.store.destroy_object(&objects[gone]);
    ids
}

/// Row `id` was failed with hook error `object` and never POSTed; returns
/// the request PHIDs that were.
fn assert_failed_as_gone_unsent(h: &Harness, id: u64) -> Vec<String> {
    let gone = h.store.row(id).expect("row");
    assert_eq!(
        (gone.status, gone.last_request_result),
        (RequestStatus::Failed, LastResult::None)
    );
    let properties: Value = serde_json::from_str(&gone.properties).expect("JSON");
    assert_eq!(properties["errorCode"], Value::from("object"));
    let posted: Vec<String> = h
        .transport
        .posts()
        .into_iter()
        .map(|p| p.request_phid)
        .collect();
    assert!(!posted.contains(&gone.phid));
    posted
}

fn body_text(h: &Harness) -> String {
    let posts = h.transport.posts();
    assert_eq!(posts.len(), 1);
    String::from_utf8(posts[0].body.clone()).expect("ASCII body")
}

#[test]
fn a_live_edit_goes_newest_first_with_only_the_transactions_that_still_exist() {
    let mut h = Harness::with_defaults();
    h.store.put_hook(hook(HOOK_A, URI_A));
    let applied = ["PHID-XACT-TASK-1", "PHID-XACT-TASK-2", "PHID-XACT-TASK-3"];
    h.store.add_object(TASK, &applied);
    // The edit also listed a transaction that has since been removed.
    let stored = live_edit(&[applied[0], applied[1], "PHID-XACT-TASK-removed", applied[2]]);
    let id = h.store.insert_request(request_about(TASK, &stored));
    h.start();

    let row = h.store.row(id).expect("row");
    let expected = Payload::with_transactions(
        &row,
        &Properties::parse(&stored).expect("parses"),
        &[applied[2], applied[1], applied[0]].map(str::to_owned),
    );
    assert_eq!(h.transport.posts()[0].body, expected.as_bytes());
    let text = body_text(&h);
    assert!(!text.contains("removed"), "{text}");
    let at = |phid: &str| text.find(&format!("\"{phid}\"")).expect("listed");
    assert!(at(applied[2]) < at(applied[1]) && at(applied[1]) < at(applied[0]));
    assert_eq!(row.status, RequestStatus::Sent);
    let metrics = h.dispatcher.metrics().snapshot();
    assert_eq!((metrics.objects_found, metrics.objects_unseen), (1, 0));
}

#[test]
fn without_the_objects_tables_a_live_edit_goes_in_reverse_of_its_stored_order() {
    let mut h = Harness::with_defaults();
    h.store.put_hook(hook(HOOK_A, URI_A));
    let applied = ["PHID-XACT-TASK-1", "PHID-XACT-TASK-2", "PHID-XACT-TASK-3"];
    // No task was ever added: the store cannot see Maniphest's tables.
    h.store
        .insert_request(request_about(TASK, &live_edit(&applied)));
    h.start();

    let text = body_text(&h);
    let at = |phid: &str| text.find(&format!("\"{phid}\"")).expect("listed");
    assert!(at(applied[2]) < at(applied[1]) && at(applied[1]) < at(applied[0]));
    assert_eq!(h.dispatcher.metrics().snapshot().objects_unseen, 1);
    assert_eq!(
        h.store.calls(StoreOp::ObjectLookup),
        1,
        "the object was looked up"
    );
}

#[test]
fn a_destroyed_object_is_failed_as_phorge_fails_it_and_never_called_about() {
    let mut h = Harness::with_defaults();
    h.store.put_hook(hook(HOOK_A, URI_A));
    h.store.add_object(TASK, &["PHID-XACT-TASK-1"]);
    h.store.destroy_object(TASK);
    let id = h
        .store
        .insert_request(request_about(TASK, &live_edit(&["PHID-XACT-TASK-1"])));
    h.start();
    h.run_for(Duration::from_secs(120));

    assert!(h.transport.posts().is_empty(), "nothing is sent");
    let row = h.store.row(id).expect("row");
    assert_eq!(
        (row.status, row.last_request_result, row.last_request_epoch),
        (RequestStatus::Failed, LastResult::None, 0)
    );
    let properties: Value = serde_json::from_str(&row.properties).expect("JSON");
    assert_eq!(properties["errorType"], "hook");
    assert_eq!(properties["errorCode"], Value::from("object"), "a string");
    assert_eq!(properties["retry"], "forever", "the rest is kept");
    let metrics = h.dispatcher.metrics().snapshot();
    assert_eq!((metrics.claims_won, metrics.objects_gone), (0, 1));
}

#[test]
fn a_row_claimed_along_whose_object_is_gone_fails_without_a_post() {
    let mut h = Harness::with_defaults();
    h.store.put_hook(hook(HOOK_A, URI_A));
    h.transport
        .always(URI_A, Reply::status(200).after(Duration::from_millis(10)));
    // Groups go 1, 2, 4 rows: the sixth row is claimed along with the
    // fourth, so its object is checked beside its claim.
    let ids = rows_about_their_own_tasks(&h, 10, 5);
    h.start();
    h.run_for(Duration::from_secs(5));

    let posted = assert_failed_as_gone_unsent(&h, ids[5]);
    for (n, id) in ids.iter().enumerate().filter(|(n, _)| *n != 5) {
        let row = h.store.row(*id).expect("row");
        assert_eq!(row.status, RequestStatus::Sent, "row {n}");
    }
    assert_eq!(posted.len(), 9, "every other row once");
    let metrics = h.dispatcher.metrics().snapshot();
    assert_eq!(metrics.claims_won, 10, "the gone row was claimed along");
    assert_eq!(metrics.claims_unused, 0);
}

#[test]
fn a_failed_object_lookup_writes_nothing_and_is_retried() {
    let mut h = Harness::with_defaults();
    h.store.put_hook(hook(HOOK_A, URI_A));
    h.store.add_object(TASK, &["PHID-XACT-TASK-1"]);
    let id = h
        .store
        .insert_request(request_about(TASK, &live_edit(&["PHID-XACT-TASK-1"])));
    let before = h.store.row(id).expect("row");
    h.store.fail_next(StoreOp::ObjectLookup, 1);
    h.start();
    assert_eq!(h.store.row(id).expect("row"), before, "nothing written");
    assert!(h.transport.posts().is_empty());

    h.run_for(Duration::from_secs(2));
    assert_eq!(h.transport.posts().len(), 1);
    assert_eq!(h.store.row(id).expect("row").status, RequestStatus::Sent);
}

#[test]
fn a_row_claimed_along_whose_turn_comes_late_is_left_to_its_lease_even_if_its_object_is_gone() {
    let mut h = Harness::with_defaults();
    h.store.put_hook(hook(HOOK_A, URI_A));
    let quick = || Reply::status(200).after(Duration::from_millis(10));
    // Groups go 1, 2, 4 rows; the third group's first row (the fourth)
    // answers after 7 s, past the 6.5 s claim-ahead budget, so the rows
    // claimed along with it (the fifth, and the sixth, whose object is
    // gone) come up too late to be written as this claim's.
    h.transport.script(
        URI_A,
        [
            quick(),
            quick(),
            quick(),
            Reply::status(200).after(Duration::from_secs(7)),
        ],
    );
    h.transport.always(URI_A, quick());
    let ids = rows_about_their_own_tasks(&h, 8, 5);
    h.start();
    h.run_for(Duration::from_secs(8));

    let metrics = h.dispatcher.metrics().snapshot();
    assert!(metrics.claims_unused >= 2, "{metrics:?}");
    let gone = h.store.row(ids[5]).expect("row");
    assert_eq!(
        gone.status,
        RequestStatus::Queued,
        "left to its lease, unwritten"
    );
    assert_eq!(metrics.objects_gone, 0, "not acted on yet");

    h.run_for(Duration::from_secs(60));
    assert_failed_as_gone_unsent(&h, ids[5]);
    assert_eq!(h.dispatcher.metrics().snapshot().objects_gone, 1);
}
