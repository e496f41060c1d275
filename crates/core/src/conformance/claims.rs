//! Conformance cases for the claim: the compare-and-set on the version,
//! which moves to the server's time (and always moves), one winner per
//! version, queued rows only, and a result landing only while its claim
//! owns the row.

use crate::memory_store::NewRequest;
use crate::model::{LastResult, RequestStatus};
use crate::outcome::ResultWrite;
use crate::store::{Claim, Written};

use super::{candidate_ids, claimed_ahead_of_the_clock, query, request, TestBed, HOOK};

pub(super) async fn same_second_claim_still_changes_the_version(bed: &dyn TestBed) {
    let (id, ahead) = claimed_ahead_of_the_clock(bed).await;
    let row = bed.row(id).await;
    assert_eq!(row.date_modified, ahead + 1);
    assert!(!row.is_fresh(), "a claimed row must not look fresh again");
    assert_eq!(
        bed.store().claim(id, ahead).await.expect("claim"),
        Claim::Lost
    );
    let now = bed.now().await;
    assert!(candidate_ids(bed, &query(now, 30, 60)).await.is_empty());
}

pub(super) async fn claim_moves_the_version_to_server_time(bed: &dyn TestBed) {
    let now = bed.now().await;
    let id = bed
        .insert_request(&request(HOOK, now - 500, now - 500))
        .await;
    let Claim::Won(claimed) = bed.store().claim(id, now - 500).await.expect("claim") else {
        panic!("a fresh row's claim is won");
    };
    let after = bed.now().await;
    let version = bed.row(id).await.date_modified;
    assert!(
        (now..=after).contains(&version),
        "{version} not in {now}..={after}"
    );
    assert_eq!(claimed, version, "the claim reports the version it wrote");
}

pub(super) async fn a_result_lands_only_while_its_claim_owns_the_row(bed: &dyn TestBed) {
    // A deliverer paused past its lease: another claims the row (from the
    // version the first claim wrote) and stores its success; the paused
    // one's late result must not be stored over it.
    let now = bed.now().await;
    let id = bed
        .insert_request(&request(HOOK, now - 500, now - 500))
        .await;
    let Claim::Won(first) = bed.store().claim(id, now - 500).await.expect("claim") else {
        panic!("first claim won");
    };
    let Claim::Won(second) = bed.store().claim(id, first).await.expect("claim") else {
        panic!("a claim after the lease wins");
    };
    assert!(second > first, "{second} > {first}");
    let result = |expected_version, status, last_request_result| ResultWrite {
        id,
        expected_version,
        status,
        last_request_result,
        last_request_epoch: now,
        date_modified: now,
        properties: r#"{"errorType":"timeout","errorCode":28}"#.to_owned(),
    };
    assert_eq!(
        bed.store()
            .write_result(&result(second, RequestStatus::Sent, LastResult::Okay))
            .await
            .expect("write"),
        Written::Yes
    );
    let stored = bed.row(id).await;
    assert_eq!(
        bed.store()
            .write_result(&result(first, RequestStatus::Queued, LastResult::Fail))
            .await
            .expect("write"),
        Written::Skipped,
        "the stale claim's result"
    );
    let after = bed.row(id).await;
    assert_eq!(after.status, RequestStatus::Sent);
    assert_eq!(after.last_request_result, LastResult::Okay);
    assert_eq!(after.date_modified, stored.date_modified);
}

pub(super) async fn two_claimers_of_one_version_one_wins(bed: &dyn TestBed) {
    let now = bed.now().await;
    let id = bed.insert_request(&request(HOOK, now, now)).await;
    let (a, b) = futures::join!(bed.store().claim(id, now), bed.store().claim(id, now));
    let mut outcomes = [a.expect("claim a"), b.expect("claim b")];
    outcomes.sort_by_key(|c| matches!(c, Claim::Won(_)));
    assert!(
        matches!(outcomes, [Claim::Lost, Claim::Won(v)] if v > now),
        "{outcomes:?}"
    );
}

pub(super) async fn claim_needs_a_queued_row(bed: &dyn TestBed) {
    let now = bed.now().await;
    let sent = bed
        .insert_request(&NewRequest {
            status: RequestStatus::Sent,
            ..request(HOOK, now, now)
        })
        .await;
    assert_eq!(
        bed.store().claim(sent, now).await.expect("claim"),
        Claim::Lost
    );
    assert_eq!(
        bed.store().claim(987_654, now).await.expect("claim"),
        Claim::Lost
    );
    assert_eq!(bed.row(sent).await.date_modified, now);
}
