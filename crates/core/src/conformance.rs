//! The shared `Store` conformance suite: the same cases run against
//! `MemoryStore` (here) and against the MySQL store on a real MariaDB, which
//! is how the in-memory semantics are proven equal to the SQL's.
//!
//! A case gets a fresh, empty [`TestBed`]; it seeds rows relative to the
//! store's own "now" so it holds whichever clock the store uses.

use async_trait::async_trait;
use futures::future::BoxFuture;

use crate::memory_store::NewRequest;
use crate::model::{Hook, LastResult, RequestRow, RequestStatus, UnixTime};
use crate::objects::{ObjectLookup, PhorgeObjects, Unseen};
use crate::outcome::ResultWrite;
use crate::store::{CandidateQuery, Claim, QueueStats, Store, Written};
use crate::windows::Cutoffs;

/// What a case needs besides the `Store` under test: seeding and reading
/// rows as Phorge would, and the store's own clock.
#[async_trait]
pub trait TestBed: Send + Sync {
    /// The store under test.
    fn store(&self) -> &dyn Store;
    /// The store's notion of now (the server's `UNIX_TIMESTAMP()`).
    async fn now(&self) -> UnixTime;
    /// Inserts a hook row.
    async fn insert_hook(&self, hook: &Hook);
    /// Inserts a request row as Phorge would; returns its id.
    async fn insert_request(&self, request: &NewRequest) -> u64;
    /// Reads a row back.
    async fn row(&self, id: u64) -> RequestRow;
    /// The application tables as the store under test reads them.
    fn objects(&self) -> &dyn PhorgeObjects;
    /// Creates a Maniphest task (`PHID-TASK-…`) with these transactions,
    /// applied in this order (so with rising ids), as Phorge would.
    async fn insert_task(&self, object_phid: &str, transactions: &[&str]);
    /// Destroys an object and its transactions, as `bin/remove destroy`.
    async fn destroy_task(&self, object_phid: &str);
    /// Breaks the database session holding this hook's lock behind its
    /// holder's back (as a cut connection or a `KILL` does): the server
    /// frees the lock.
    async fn lose_lock_session(&self, hook_phid: &str);
}

/// One named conformance case.
#[derive(Debug, Clone, Copy)]
pub struct Case {
    /// Name, for the failure report.
    pub name: &'static str,
    /// The case body; panics on failure.
    pub run: for<'a> fn(&'a dyn TestBed) -> BoxFuture<'a, ()>,
}

macro_rules! cases {
    ($($name:ident),* $(,)?) => {
        /// Every case, in a stable order.
        pub fn cases() -> Vec<Case> {
            vec![$(Case { name: stringify!($name), run: |bed| Box::pin($name(bed)) }),*]
        }
    };
}

cases!(
    fresh_row_is_a_candidate_at_once,
    candidates_come_in_id_order_up_to_the_limit,
    only_queued_rows_are_candidates,
    claimed_row_waits_out_its_lease,
    failed_attempt_waits_out_the_retry_backoff,
    excluded_hooks_are_left_out,
    same_second_claim_still_changes_the_version,
    claim_moves_the_version_to_server_time,
    two_claimers_of_one_version_one_wins,
    claim_needs_a_queued_row,
    write_result_sets_every_column,
    write_in_the_claim_second_still_advances_the_version,
    guarded_write_lands_only_on_an_untouched_row,
    breaker_counts_failed_rows_in_the_window,
    hook_lookup_returns_the_row_or_nothing,
    hook_lock_is_exclusive_until_released,
    a_lock_whose_session_broke_is_no_longer_held,
    a_result_lands_only_while_its_claim_owns_the_row,
    claims_in_flight_are_the_unanswered_claims_within_their_lease,
    stats_count_rows_and_active_hooks,
    properties_text_is_stored_verbatim,
    object_lookup_lists_the_objects_existing_transactions_newest_first,
    object_lookup_finds_a_destroyed_object_gone,
    object_of_a_type_without_known_tables_is_unseen,
);

const HOOK: &str = "PHID-HWBH-conformanceaaaaaaaaa";
const OTHER_HOOK: &str = "PHID-HWBH-conformancebbbbbbbbb";

fn hook(phid: &str, status: &str) -> Hook {
    Hook {
        phid: phid.to_owned(),
        name: format!("hook {phid}"),
        uri: "http://127.0.0.1:9/hook".to_owned(),
        status: status.to_owned(),
        hmac_key: "abcdefghijklmnopqrstuvwxyz234567".to_owned(),
    }
}

fn request(hook_phid: &str, created: UnixTime, modified: UnixTime) -> NewRequest {
    NewRequest {
        date_created: Some(created),
        date_modified: Some(modified),
        ..NewRequest::queued(hook_phid, r#"{"retry":"forever"}"#)
    }
}

fn query(now: UnixTime, lease: u64, backoff: u64) -> CandidateQuery {
    CandidateQuery {
        cutoffs: Cutoffs {
            now,
            lease_cutoff: now - lease,
            retry_cutoff: now - backoff,
        },
        limit: 100,
        exclude_hooks: Vec::new(),
    }
}

async fn candidate_ids(bed: &dyn TestBed, query: &CandidateQuery) -> Vec<u64> {
    bed.store()
        .candidates(query)
        .await
        .expect("candidate query")
        .into_iter()
        .map(|r| r.id)
        .collect()
}

async fn fresh_row_is_a_candidate_at_once(bed: &dyn TestBed) {
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

async fn candidates_come_in_id_order_up_to_the_limit(bed: &dyn TestBed) {
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

async fn only_queued_rows_are_candidates(bed: &dyn TestBed) {
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

async fn claimed_row_waits_out_its_lease(bed: &dyn TestBed) {
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

async fn failed_attempt_waits_out_the_retry_backoff(bed: &dyn TestBed) {
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

async fn excluded_hooks_are_left_out(bed: &dyn TestBed) {
    let now = bed.now().await;
    bed.insert_request(&request(HOOK, now, now)).await;
    let other = bed.insert_request(&request(OTHER_HOOK, now, now)).await;
    let mut q = query(now, 30, 60);
    q.exclude_hooks = vec![HOOK.to_owned()];
    assert_eq!(candidate_ids(bed, &q).await, vec![other]);
}

async fn same_second_claim_still_changes_the_version(bed: &dyn TestBed) {
    // A version ahead of the server clock: only `+ 1` can move it.
    let now = bed.now().await;
    let ahead = now + 1_000;
    let id = bed.insert_request(&request(HOOK, ahead, ahead)).await;
    assert_eq!(
        bed.store().claim(id, ahead).await.expect("claim"),
        Claim::Won(ahead + 1)
    );
    let row = bed.row(id).await;
    assert_eq!(row.date_modified, ahead + 1);
    assert!(!row.is_fresh(), "a claimed row must not look fresh again");
    assert_eq!(
        bed.store().claim(id, ahead).await.expect("claim"),
        Claim::Lost
    );
    assert!(candidate_ids(bed, &query(now, 30, 60)).await.is_empty());
}

async fn claim_moves_the_version_to_server_time(bed: &dyn TestBed) {
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

async fn a_result_lands_only_while_its_claim_owns_the_row(bed: &dyn TestBed) {
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

async fn two_claimers_of_one_version_one_wins(bed: &dyn TestBed) {
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

async fn claim_needs_a_queued_row(bed: &dyn TestBed) {
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

async fn write_result_sets_every_column(bed: &dyn TestBed) {
    let now = bed.now().await;
    let id = bed.insert_request(&request(HOOK, now - 50, now - 50)).await;
    let before = bed.row(id).await;
    let write = ResultWrite {
        id,
        expected_version: now - 50,
        status: RequestStatus::Sent,
        last_request_result: LastResult::Okay,
        last_request_epoch: now,
        date_modified: now,
        properties: r#"{"retry":"forever","errorType":"http","errorCode":200}"#.to_owned(),
    };
    assert_eq!(
        bed.store().write_result(&write).await.expect("write"),
        Written::Yes
    );
    let after = bed.row(id).await;
    assert_eq!(after.status, RequestStatus::Sent);
    assert_eq!(after.last_request_result, LastResult::Okay);
    assert_eq!(after.last_request_epoch, now);
    assert_eq!(after.date_modified, now);
    assert_eq!(after.properties, write.properties);
    assert_eq!(
        (
            after.phid,
            after.webhook_phid,
            after.object_phid,
            after.date_created
        ),
        (
            before.phid,
            before.webhook_phid,
            before.object_phid,
            before.date_created
        )
    );
}

async fn write_in_the_claim_second_still_advances_the_version(bed: &dyn TestBed) {
    let now = bed.now().await;
    let ahead = now + 1_000;
    let id = bed.insert_request(&request(HOOK, ahead, ahead)).await;
    assert_eq!(
        bed.store().claim(id, ahead).await.expect("claim"),
        Claim::Won(ahead + 1)
    );
    let write = ResultWrite {
        id,
        expected_version: ahead + 1,
        status: RequestStatus::Queued,
        last_request_result: LastResult::Fail,
        last_request_epoch: ahead,
        date_modified: ahead,
        properties: r#"{"retry":"forever","errorType":"http","errorCode":500}"#.to_owned(),
    };
    bed.store().write_result(&write).await.expect("write");
    let row = bed.row(id).await;
    assert_eq!(
        row.date_modified,
        ahead + 2,
        "GREATEST(dateModified + 1, now)"
    );
    assert!(!row.is_fresh(), "a failed row must not look fresh");
    assert_eq!(row.last_request_epoch, ahead);
}

async fn guarded_write_lands_only_on_an_untouched_row(bed: &dyn TestBed) {
    let now = bed.now().await;
    let id = bed.insert_request(&request(HOOK, now, now)).await;
    let write = |expected| ResultWrite {
        id,
        expected_version: expected,
        status: RequestStatus::Failed,
        last_request_result: LastResult::None,
        last_request_epoch: 0,
        date_modified: now,
        properties: r#"{"errorType":"hook","errorCode":"disabled"}"#.to_owned(),
    };
    assert_eq!(
        bed.store()
            .write_result(&write(now - 1))
            .await
            .expect("write"),
        Written::Skipped
    );
    assert_eq!(bed.row(id).await.status, RequestStatus::Queued);
    assert_eq!(
        bed.store().write_result(&write(now)).await.expect("write"),
        Written::Yes
    );
    assert_eq!(bed.row(id).await.status, RequestStatus::Failed);
    // No longer queued: a second guarded write is skipped.
    assert_eq!(
        bed.store().write_result(&write(now)).await.expect("write"),
        Written::Skipped
    );
}

async fn breaker_counts_failed_rows_in_the_window(bed: &dyn TestBed) {
    let now = bed.now().await;
    let failed_at = |epoch, result| NewRequest {
        last_request_result: result,
        last_request_epoch: epoch,
        ..request(HOOK, now - 1_000, now - 1_000)
    };
    bed.insert_request(&failed_at(now - 10, LastResult::Fail))
        .await;
    bed.insert_request(&failed_at(now - 300, LastResult::Fail))
        .await;
    bed.insert_request(&failed_at(now - 301, LastResult::Fail))
        .await;
    bed.insert_request(&failed_at(now - 5, LastResult::Okay))
        .await;
    // Hook-configuration failures (none / epoch 0) never count.
    bed.insert_request(&NewRequest {
        status: RequestStatus::Failed,
        ..failed_at(0, LastResult::None)
    })
    .await;
    bed.insert_request(&NewRequest {
        webhook_phid: OTHER_HOOK.to_owned(),
        ..failed_at(now - 1, LastResult::Fail)
    })
    .await;
    let count = bed
        .store()
        .breaker_failures(HOOK, now - 300)
        .await
        .expect("count");
    assert_eq!(count, 2, "window start is inclusive, rows not attempts");
}

async fn hook_lookup_returns_the_row_or_nothing(bed: &dyn TestBed) {
    let stored = hook(HOOK, "firehose");
    bed.insert_hook(&stored).await;
    assert_eq!(bed.store().hook(HOOK).await.expect("lookup"), Some(stored));
    assert_eq!(bed.store().hook(OTHER_HOOK).await.expect("lookup"), None);
}

async fn hook_lock_is_exclusive_until_released(bed: &dyn TestBed) {
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

async fn a_lock_whose_session_broke_is_no_longer_held(bed: &dyn TestBed) {
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

async fn claims_in_flight_are_the_unanswered_claims_within_their_lease(bed: &dyn TestBed) {
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

async fn stats_count_rows_and_active_hooks(bed: &dyn TestBed) {
    let now = bed.now().await;
    for (status, n) in [
        (RequestStatus::Queued, 3),
        (RequestStatus::Sent, 2),
        (RequestStatus::Failed, 1),
    ] {
        for _ in 0..n {
            bed.insert_request(&NewRequest {
                status,
                ..request(HOOK, now, now)
            })
            .await;
        }
    }
    bed.insert_hook(&hook(HOOK, "enabled")).await;
    bed.insert_hook(&hook(OTHER_HOOK, "disabled")).await;
    bed.insert_hook(&hook("PHID-HWBH-conformanceccccccccc", "firehose"))
        .await;
    assert_eq!(
        bed.store().stats().await.expect("stats"),
        QueueStats {
            queued: 3,
            sent: 2,
            failed: 1,
            active_hooks: 2
        }
    );
    assert_eq!(bed.store().hook_count().await.expect("count"), 3);
}

async fn properties_text_is_stored_verbatim(bed: &dyn TestBed) {
    let now = bed.now().await;
    let text = "{\"a\":\"\\u00e9\",\"b\":\"\u{e9}\u{1F600}\",\"c\":{\"0\":1}}";
    let id = bed
        .insert_request(&NewRequest {
            properties: text.to_owned(),
            ..request(HOOK, now, now)
        })
        .await;
    assert_eq!(bed.row(id).await.properties, text);
    let write = ResultWrite {
        id,
        expected_version: now,
        status: RequestStatus::Queued,
        last_request_result: LastResult::Fail,
        last_request_epoch: now,
        date_modified: now,
        properties: text.replace('c', "d"),
    };
    bed.store().write_result(&write).await.expect("write");
    assert_eq!(bed.row(id).await.properties, write.properties);
}

const TASK: &str = "PHID-TASK-conformanceaaaaaaaaa";
const OTHER_TASK: &str = "PHID-TASK-conformancebbbbbbbbb";

async fn object_lookup_lists_the_objects_existing_transactions_newest_first(bed: &dyn TestBed) {
    let [t1, t2, t3] = [
        "PHID-XACT-TASK-conform1",
        "PHID-XACT-TASK-conform2",
        "PHID-XACT-TASK-conform3",
    ];
    bed.insert_task(TASK, &[t1, t2, t3]).await;
    bed.insert_task(OTHER_TASK, &["PHID-XACT-TASK-conformother"])
        .await;
    let listed = [
        t1,
        t3,
        "PHID-XACT-TASK-conformother",
        "PHID-XACT-TASK-conformgone",
    ];
    let found = bed.objects().lookup(TASK, &listed).await.expect("lookup");
    assert_eq!(
        found,
        ObjectLookup::Found {
            transactions: vec![t3.to_owned(), t1.to_owned()]
        },
        "only this object's listed transactions that exist, newest first"
    );
    let none_listed = bed.objects().lookup(TASK, &[]).await.expect("lookup");
    assert_eq!(
        none_listed,
        ObjectLookup::Found {
            transactions: Vec::new()
        }
    );
}

async fn object_lookup_finds_a_destroyed_object_gone(bed: &dyn TestBed) {
    bed.insert_task(TASK, &["PHID-XACT-TASK-conform1"]).await;
    bed.insert_task(OTHER_TASK, &[]).await;
    bed.destroy_task(TASK).await;
    let gone = bed
        .objects()
        .lookup(TASK, &["PHID-XACT-TASK-conform1"])
        .await
        .expect("lookup");
    assert_eq!(gone, ObjectLookup::Gone);
    let never = bed
        .objects()
        .lookup("PHID-TASK-conformanceneverexisted", &[])
        .await
        .expect("lookup");
    assert_eq!(never, ObjectLookup::Gone);
    let other = bed.objects().lookup(OTHER_TASK, &[]).await.expect("lookup");
    assert!(matches!(other, ObjectLookup::Found { .. }), "{other:?}");
}

async fn object_of_a_type_without_known_tables_is_unseen(bed: &dyn TestBed) {
    let unseen = bed
        .objects()
        .lookup("PHID-ZZZZ-conformanceaaaaaaaaa", &["PHID-XACT-ZZZZ-x"])
        .await
        .expect("lookup");
    assert_eq!(
        unseen,
        ObjectLookup::Unseen(Unseen::UnknownType("ZZZZ".to_owned()))
    );
}

#[cfg(test)]
mod memory {
    use super::*;
    use crate::clock::{Clock, ManualClock};
    use crate::memory_store::MemoryStore;
    use std::sync::Arc;

    struct MemoryBed {
        clock: ManualClock,
        store: MemoryStore,
    }

    #[async_trait]
    impl TestBed for MemoryBed {
        fn store(&self) -> &dyn Store {
            &self.store
        }
        async fn now(&self) -> UnixTime {
            self.clock.now()
        }
        async fn insert_hook(&self, hook: &Hook) {
            self.store.put_hook(hook.clone());
        }
        async fn insert_request(&self, request: &NewRequest) -> u64 {
            self.store.insert_request(request.clone())
        }
        async fn row(&self, id: u64) -> RequestRow {
            self.store.row(id).expect("row exists")
        }
        fn objects(&self) -> &dyn PhorgeObjects {
            &self.store
        }
        async fn insert_task(&self, object_phid: &str, transactions: &[&str]) {
            self.store.add_object(object_phid, transactions);
        }
        async fn destroy_task(&self, object_phid: &str) {
            self.store.destroy_object(object_phid);
        }
        async fn lose_lock_session(&self, _hook_phid: &str) {
            self.store.lose_lock_sessions();
        }
    }

    #[test]
    fn memory_store_passes_the_conformance_suite() {
        for case in cases() {
            let clock = ManualClock::new(1_700_000_000);
            let bed = MemoryBed {
                store: MemoryStore::new(Arc::new(clock.clone())),
                clock,
            };
            eprintln!("conformance case: {}", case.name);
            futures::executor::block_on((case.run)(&bed));
        }
    }
}
