//! Conformance cases for the per-hook lock: exclusive until released, no
//! longer held once its session broke, and the claims still in flight
//! that whoever takes a lock afresh must wait for.

use crate::model::RequestStatus;
use crate::store::{Claim, Written};

use super::{request, TestBed, HOOK, OTHER_HOOK};

pub(super) async fn hook_lock_is_exclusive_until_released(bed: &dyn TestBed) {
    let store = bed.store();
    let first = store.lock_hook(HOOK).await.expect("lock").expect("free");
    assert!(store.lock_hook(HOOK).await.expect("lock").is_none());
    let other = store
        .lock_hook(OTHER_HOOK)
        .await
        .expect("lock")
        .expect("free");
    first.release().await.expect("release");
    let again = store
        .lock_hook(HOOK)
        .await
        .expect("lock")
        .expect("free again");
    again.release().await.expect("release");
    other.release().await.expect("release");
}

pub(super) async fn a_lock_whose_session_broke_is_no_longer_held(bed: &dyn TestBed) {
    let store = bed.store();
    let mut lock = store.lock_hook(HOOK).await.expect("lock").expect("free");
    assert!(lock.still_held().await.expect("check"), "just taken");
    assert!(lock.still_held().await.expect("check"), "asking keeps it");
    assert!(store.lock_hook(HOOK).await.expect("lock").is_none());
    bed.lose_lock_session(HOOK).await;
    // The broken session cannot answer, or says the lock is not its own.
    assert!(!matches!(lock.still_held().await, Ok(true)));
    let next = store
        .lock_hook(HOOK)
        .await
        .expect("lock")
        .expect("freed by the server with the session");
    let _ = lock.release().await;
    let mut next = next;
    assert!(
        next.still_held().await.expect("check"),
        "the old holder's release must not free the new holder's lock"
    );
    next.release().await.expect("release");
}

pub(super) async fn claims_in_flight_are_the_unanswered_claims_within_their_lease(
    bed: &dyn TestBed,
) {
    let now = bed.now().await;
    let store = bed.store();
    let in_flight = |cutoff| store.claims_in_flight(HOOK, cutoff);
    let fresh = bed
        .insert_request(&request(HOOK, now - 100, now - 100))
        .await;
    let claimed = bed
        .insert_request(&request(HOOK, now - 100, now - 100))
        .await;
    let elsewhere = bed
        .insert_request(&request(OTHER_HOOK, now - 100, now - 100))
        .await;
    assert_eq!(
        in_flight(now - 30).await.expect("count"),
        0,
        "{fresh} fresh"
    );
    let Claim::Won(version) = store.claim(claimed, now - 100).await.expect("claim") else {
        panic!("claim won");
    };
    store.claim(elsewhere, now - 100).await.expect("claim");
    assert_eq!(in_flight(now - 30).await.expect("count"), 1, "claimed");
    assert_eq!(
        in_flight(version).await.expect("count"),
        0,
        "past its lease it is a dead deliverer's row, retried"
    );
    // A failed attempt written back (it stays queued) is answered.
    let properties =
        crate::properties::Properties::parse(r#"{"retry":"forever"}"#).expect("properties");
    let (write, _) = crate::outcome::attempt_write(
        claimed,
        version,
        &properties,
        &crate::outcome::DeliveryResult::Response { status: 500 },
        now,
    )
    .expect("a response is written");
    assert_eq!(
        store.write_result(&write).await.expect("write"),
        Written::Yes
    );
    let row = bed.row(claimed).await;
    assert_eq!(row.status, RequestStatus::Queued);
    assert_eq!(row.last_request_epoch, row.date_modified, "stamped alike");
    assert_eq!(in_flight(now - 30).await.expect("count"), 0, "answered");
    // Claimed again for its retry: in flight again.
    store
        .claim(claimed, row.date_modified)
        .await
        .expect("claim");
    assert_eq!(
        in_flight(now - 30).await.expect("count"),
        1,
        "retry in flight"
    );
}
