//! Conformance cases for the candidate query: which rows are due (fresh,
//! past their lease, past their retry backoff), in id order, up to the
//! limit, leaving out excluded hooks — also after many polls over many
//! retained rows, with ids committed out of order, rows waiting low down
//! and rows deleted, which a store remembering where queued rows are (the
//! MySQL store's scan floor) must not get wrong.

use crate::memory_store::NewRequest;
use crate::model::{LastResult, RequestStatus, UnixTime};
use crate::store::{Claim, Written};

use super::{candidate_ids, query, request, sent_write, TestBed, HOOK, OTHER_HOOK};

/// A row delivered long ago, created at `created`.
fn sent(created: UnixTime) -> NewRequest {
    NewRequest {
        status: RequestStatus::Sent,
        last_request_result: LastResult::Okay,
        last_request_epoch: created,
        ..request(HOOK, created, created)
    }
}

/// A queued row of [`HOOK`] created at `created` whose last attempt ended
/// `result` at `at` (its write-back stamped `dateModified` alike).
fn attempted(result: LastResult, created: UnixTime, at: UnixTime) -> NewRequest {
    NewRequest {
        last_request_result: result,
        last_request_epoch: at,
        ..request(HOOK, created, at)
    }
}

/// Claims the row and writes it back `sent`, as a delivery does.
async fn deliver(bed: &dyn TestBed, id: u64, now: UnixTime) {
    let seen = bed.row(id).await.date_modified;
    let Claim::Won(version) = bed.store().claim(id, seen).await.expect("claim") else {
        panic!("claim of {id} lost");
    };
    let write = sent_write(id, version, now);
    assert_eq!(
        bed.store().write_result(&write).await.expect("write"),
        Written::Yes
    );
}

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
        .insert_request(&attempted(LastResult::Fail, now - 100, now - 40))
        .await;
    let okay_before = bed
        .insert_request(&attempted(LastResult::Okay, now - 100, now - 40))
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

pub(super) async fn a_lower_id_committed_late_is_a_candidate_at_the_next_poll(bed: &dyn TestBed) {
    let now = bed.now().await;
    bed.insert_requests(&sent(now - 3_600), 300).await;
    // Handed its id first, committed last, as a slow Phorge transaction.
    let late = bed.begin_insert(&request(HOOK, now, now)).await;
    let higher = bed.insert_request(&request(HOOK, now, now)).await;
    assert!(late < higher);
    let q = query(now, 30, 60);
    assert_eq!(candidate_ids(bed, &q).await, vec![higher]);
    deliver(bed, higher, now).await;
    assert!(candidate_ids(bed, &q).await.is_empty());
    assert!(candidate_ids(bed, &q).await.is_empty());
    bed.commit_insert(late).await;
    assert_eq!(candidate_ids(bed, &q).await, vec![late]);
}

pub(super) async fn a_row_waiting_out_its_backoff_below_many_sent_rows_comes_back(
    bed: &dyn TestBed,
) {
    let now = bed.now().await;
    // Last attempts failed just now (retry=forever): one row created an
    // hour ago, one just now above an hour's delivered rows.
    let failed_now = |created| attempted(LastResult::Fail, created, now);
    let long_waiting = bed.insert_request(&failed_now(now - 3_600)).await;
    bed.insert_requests(&sent(now - 3_600), 300).await;
    let waiting = bed.insert_request(&failed_now(now)).await;
    bed.insert_requests(&sent(now), 600).await;
    for _ in 0..3 {
        assert!(candidate_ids(bed, &query(now, 30, 60)).await.is_empty());
    }
    assert_eq!(
        candidate_ids(bed, &query(now + 61, 30, 60)).await,
        vec![long_waiting, waiting]
    );
}

pub(super) async fn a_fresh_row_after_many_retained_rows_is_a_candidate_at_once(bed: &dyn TestBed) {
    let now = bed.now().await;
    bed.insert_requests(&sent(now - 86_400), 2_000).await;
    bed.insert_requests(&sent(now), 500).await;
    let q = query(now, 30, 60);
    for _ in 0..3 {
        assert!(candidate_ids(bed, &q).await.is_empty());
    }
    let fresh = bed.insert_request(&request(HOOK, now, now)).await;
    assert_eq!(candidate_ids(bed, &q).await, vec![fresh]);
    let next = bed.insert_request(&request(HOOK, now, now)).await;
    assert_eq!(candidate_ids(bed, &q).await, vec![fresh, next]);
}

pub(super) async fn a_deleted_row_does_not_hide_the_rows_after_it(bed: &dyn TestBed) {
    let now = bed.now().await;
    bed.insert_requests(&sent(now - 3_600), 200).await;
    let rows = bed.insert_requests(&request(HOOK, now, now), 6).await;
    bed.delete_request(rows[1]).await;
    bed.delete_request(rows[4]).await;
    let expected = vec![rows[0], rows[2], rows[3], rows[5]];
    // Polled at once, and again once the rows around the gaps are older
    // than any transaction still to commit.
    for later in [0, 0, 400, 400] {
        assert_eq!(
            candidate_ids(bed, &query(now + later, 30, 60)).await,
            expected
        );
    }
    let after = bed.insert_request(&request(HOOK, now, now)).await;
    let mut with_after = expected.clone();
    with_after.push(after);
    assert_eq!(
        candidate_ids(bed, &query(now + 400, 30, 60)).await,
        with_after
    );
}

/// The wake-up probe: 0 on an empty table, then the highest committed id,
/// whatever the rows' status; an insert not committed yet does not raise
/// it, and a deleted highest row lowers it.
pub(super) async fn newest_id_is_the_highest_committed_id(bed: &dyn TestBed) {
    let newest = || async { bed.store().newest_id().await.expect("newest id") };
    assert_eq!(newest().await, 0, "empty table");
    let now = bed.now().await;
    let first = bed.insert_request(&request(HOOK, now, now)).await;
    let second = bed.insert_request(&sent(now - 10)).await;
    assert_eq!(newest().await, second);
    let pending = bed.begin_insert(&request(HOOK, now, now)).await;
    assert_eq!(newest().await, second, "an uncommitted insert is not seen");
    bed.commit_insert(pending).await;
    assert_eq!(newest().await, pending);
    bed.delete_request(pending).await;
    assert_eq!(newest().await, second);
    assert!(first < second);
}

/// The candidates due longest, with when each became due: a failed row
/// when its backoff ended, a row whose claim was abandoned when its lease
/// ended, a fresh row when it was created; oldest first, up to the limit,
/// excluded hooks and rows not due left out — the candidate predicate's
/// rows and no others.
pub(super) async fn longest_due_lists_candidates_by_when_they_became_due(bed: &dyn TestBed) {
    let now = bed.now().await;
    let fresh = bed
        .insert_request(&request(HOOK, now - 100, now - 100))
        .await;
    let abandoned = bed
        .insert_request(&request(HOOK, now - 500, now - 200))
        .await;
    let failed = bed
        .insert_request(&attempted(LastResult::Fail, now - 900, now - 300))
        .await;
    let backing_off = bed
        .insert_request(&attempted(LastResult::Fail, now - 900, now - 40))
        .await;
    let leased = bed
        .insert_request(&request(HOOK, now - 500, now - 10))
        .await;
    bed.insert_request(&sent(now - 1_000)).await;
    let other = bed
        .insert_request(&request(OTHER_HOOK, now - 2_000, now - 2_000))
        .await;
    let mut q = query(now, 30, 60);
    q.exclude_hooks = vec![OTHER_HOOK.to_owned()];
    let due = bed.counts().longest_due(&q).await.expect("longest due");
    let listed: Vec<(u64, UnixTime)> = due.iter().map(|r| (r.id, r.due_since)).collect();
    assert_eq!(
        listed,
        vec![
            (failed, now - 240),
            (abandoned, now - 170),
            (fresh, now - 100)
        ],
        "backing off {backing_off}, leased {leased} and other hook {other} are not due"
    );
    assert_eq!(due[0].webhook_phid, HOOK);
    assert_eq!(due[0].phid, bed.row(failed).await.phid);
    for row in &due {
        assert_eq!(row.due_since, q.cutoffs.due_since(&bed.row(row.id).await));
    }
    q.limit = 1;
    let first = bed.counts().longest_due(&q).await.expect("longest due");
    assert_eq!(first.iter().map(|r| r.id).collect::<Vec<_>>(), vec![failed]);
    let candidates = candidate_ids(bed, &query(now, 30, 60)).await;
    assert!(candidates.contains(&other) && !candidates.contains(&backing_off));
}
