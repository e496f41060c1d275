//! Conformance cases for the candidate query: which rows are due (fresh,
//! past their lease, past their retry backoff), in id order, up to the
//! limit, leaving out excluded hooks.

use crate::memory_store::NewRequest;
use crate::model::{LastResult, RequestStatus};

use super::{candidate_ids, query, request, TestBed, HOOK, OTHER_HOOK};

pub(super) async fn fresh_row_is_a_candidate_at_once(bed: &dyn TestBed) {
    let now = bed.now().await;
    let id = bed.insert_request(&request(HOOK, now, now)).await;
    assert_eq!(candidate_ids(bed, &query(now, 30, 60)).await, vec![id]);
    let rows = bed
        .store()
        .candidates(&query(now, 30, 60))
        .await
        .expect("query");
    assert_eq!(
        rows[0],
        bed.row(id).await,
        "candidate rows carry every column"
    );
}

pub(super) async fn candidates_come_in_id_order_up_to_the_limit(bed: &dyn TestBed) {
    let now = bed.now().await;
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(
            bed.insert_request(&request(HOOK, now - 100, now - 100))
                .await,
        );
    }
    let mut q = query(now, 30, 60);
    q.limit = 3;
    assert_eq!(candidate_ids(bed, &q).await, ids[..3].to_vec());
}

pub(super) async fn only_queued_rows_are_candidates(bed: &dyn TestBed) {
    let now = bed.now().await;
    let queued = bed.insert_request(&request(HOOK, now, now)).await;
    for status in [RequestStatus::Sent, RequestStatus::Failed] {
        bed.insert_request(&NewRequest {
            status,
            ..request(HOOK, now, now)
        })
        .await;
    }
    assert_eq!(candidate_ids(bed, &query(now, 30, 60)).await, vec![queued]);
}

pub(super) async fn claimed_row_waits_out_its_lease(bed: &dyn TestBed) {
    let now = bed.now().await;
    // Claimed 10 s ago.
    let id = bed
        .insert_request(&request(HOOK, now - 100, now - 10))
        .await;
    assert!(candidate_ids(bed, &query(now, 30, 60)).await.is_empty());
    // Exactly at the lease boundary it may be taken over.
    assert_eq!(candidate_ids(bed, &query(now, 10, 60)).await, vec![id]);
    // Phorge's two clock reads: dateModified = dateCreated + 1 waits one lease.
    let late = bed.insert_request(&request(HOOK, now, now + 1)).await;
    assert!(!candidate_ids(bed, &query(now, 10, 60))
        .await
        .contains(&late));
}

pub(super) async fn failed_attempt_waits_out_the_retry_backoff(bed: &dyn TestBed) {
    let now = bed.now().await;
    let failed = bed
        .insert_request(&NewRequest {
            last_request_result: LastResult::Fail,
            last_request_epoch: now - 40,
            ..request(HOOK, now - 100, now - 40)
        })
        .await;
    let okay_before = bed
        .insert_request(&NewRequest {
            last_request_result: LastResult::Okay,
            last_request_epoch: now - 40,
            ..request(HOOK, now - 100, now - 40)
        })
        .await;
    assert_eq!(
        candidate_ids(bed, &query(now, 30, 60)).await,
        vec![okay_before]
    );
    assert_eq!(
        candidate_ids(bed, &query(now, 30, 40)).await,
        vec![failed, okay_before]
    );
}

pub(super) async fn excluded_hooks_are_left_out(bed: &dyn TestBed) {
    let now = bed.now().await;
    bed.insert_request(&request(HOOK, now, now)).await;
    let other = bed.insert_request(&request(OTHER_HOOK, now, now)).await;
    let mut q = query(now, 30, 60);
    q.exclude_hooks = vec![HOOK.to_owned()];
    assert_eq!(candidate_ids(bed, &q).await, vec![other]);
}
