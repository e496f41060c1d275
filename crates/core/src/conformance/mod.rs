//! The shared conformance suite of the database ports (`Store`,
//! `QueueCounts`, `TaskQueue`): the same cases run against `MemoryStore`
//! (`memory`) and against the MySQL store on a real MariaDB (with Phorge's
//! task queue beside it), which is how the in-memory semantics are proven
//! equal to the SQL's.
//!
//! A case gets a fresh, empty [`TestBed`]; it seeds rows relative to the
//! store's own "now" so it holds whichever clock the store uses. The cases
//! are grouped by topic (`candidates`, `claims`, `write_back`, `lookups`,
//! `locks`, `objects`, `adoption`); [`cases`] lists them all, in a stable order, and
//! `memory` runs them against `MemoryStore`.

use std::sync::Arc;

use async_trait::async_trait;
use futures::future::BoxFuture;

mod adoption;
mod candidates;
mod claims;
mod locks;
mod lookups;
#[cfg(test)]
mod memory;
mod objects;
mod write_back;

use crate::adoption::{TaskAdoption, TaskLease, TaskQueue};
use crate::memory_store::NewRequest;
use crate::model::{Hook, LastResult, RequestRow, RequestStatus, UnixTime};
use crate::objects::PhorgeObjects;
use crate::outcome::ResultWrite;
use crate::store::{CandidateQuery, Claim, QueueCounts, Store};
use crate::windows::Cutoffs;

/// What a case needs besides the `Store` under test: seeding and reading
/// rows as Phorge would, and the store's own clock.
#[async_trait]
pub trait TestBed: Send + Sync {
    /// The store under test, as the dispatcher sees it.
    fn store(&self) -> &dyn Store;
    /// The same store's counts, as the diagnostics API reads them.
    fn counts(&self) -> &dyn QueueCounts;
    /// The store's notion of now (the server's `UNIX_TIMESTAMP()`).
    async fn now(&self) -> UnixTime;
    /// Inserts a hook row.
    async fn insert_hook(&self, hook: &Hook);
    /// Inserts a request row as Phorge would; returns its id.
    async fn insert_request(&self, request: &NewRequest) -> u64;
    /// Inserts `count` such rows (where it is a database, in one
    /// transaction, for speed); their ids, rising.
    async fn insert_requests(&self, request: &NewRequest, count: usize) -> Vec<u64>;
    /// Begins inserting a request in a transaction left open: its id is
    /// handed out now (rows inserted later get higher ids), the row is
    /// seen only after [`commit_insert`](Self::commit_insert). Returns
    /// the id.
    async fn begin_insert(&self, request: &NewRequest) -> u64;
    /// Commits an insert [`begin_insert`](Self::begin_insert) began.
    async fn commit_insert(&self, id: u64);
    /// Deletes a request row, as Phorge's garbage collector does.
    async fn delete_request(&self, id: u64);
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
    /// Phorge's task queue, as the store under test speaks it.
    fn tasks(&self) -> &dyn TaskQueue;
    /// The store under test as a daemon instance adopting Phorge's tasks
    /// through `adoption` (its candidates gated).
    fn adopting(&self, adoption: Arc<TaskAdoption>) -> Box<dyn Store>;
    /// Queues an unleased task of `class` whose `objectPHID` is
    /// `object_phid`, as Phorge's `queueCall` does; returns its id.
    async fn queue_task(&self, class: &str, object_phid: Option<&str>) -> u64;
    /// Sets a task's lease: `owner`, and `leaseExpires` this many seconds
    /// from the store's now (negative: lapsed).
    async fn set_task_lease(&self, id: u64, owner: Option<&str>, expires_in: Option<i64>);
    /// The lease of a task in the active queue; `None` when it is not
    /// there.
    async fn task_lease(&self, id: u64) -> Option<TaskLease>;
    /// The `result` of a task in the archive; `None` when it is not there.
    async fn archived_result(&self, id: u64) -> Option<u64>;
    /// Leases one task as a Phorge taskmaster does (any class: first one
    /// with no owner, then one whose lease lapsed); `None` when its lease
    /// query finds nothing it may run.
    async fn taskmaster_lease(&self, owner: &str) -> Option<u64>;
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
    ($($topic:ident :: $name:ident),* $(,)?) => {
        /// Every case, in a stable order.
        pub fn cases() -> Vec<Case> {
            vec![$(Case { name: stringify!($name), run: |bed| Box::pin($topic::$name(bed)) }),*]
        }
    };
}

cases!(
    candidates::fresh_row_is_a_candidate_at_once,
    candidates::candidates_come_in_id_order_up_to_the_limit,
    candidates::only_queued_rows_are_candidates,
    candidates::claimed_row_waits_out_its_lease,
    candidates::failed_attempt_waits_out_the_retry_backoff,
    candidates::excluded_hooks_are_left_out,
    claims::same_second_claim_still_changes_the_version,
    claims::claim_moves_the_version_to_server_time,
    claims::two_claimers_of_one_version_one_wins,
    claims::claim_needs_a_queued_row,
    write_back::write_result_sets_every_column,
    write_back::write_in_the_claim_second_still_advances_the_version,
    write_back::guarded_write_lands_only_on_an_untouched_row,
    lookups::breaker_counts_failed_rows_in_the_window,
    lookups::hook_lookup_returns_the_row_or_nothing,
    locks::hook_lock_is_exclusive_until_released,
    locks::a_lock_whose_session_broke_is_no_longer_held,
    claims::a_result_lands_only_while_its_claim_owns_the_row,
    locks::claims_in_flight_are_the_unanswered_claims_within_their_lease,
    lookups::stats_count_rows_and_active_hooks,
    write_back::properties_text_is_stored_verbatim,
    objects::object_lookup_lists_the_objects_existing_transactions_newest_first,
    objects::object_lookup_finds_a_destroyed_object_gone,
    objects::object_of_a_type_without_known_tables_is_unseen,
    candidates::a_lower_id_committed_late_is_a_candidate_at_the_next_poll,
    candidates::a_row_waiting_out_its_backoff_below_many_sent_rows_comes_back,
    candidates::a_fresh_row_after_many_retained_rows_is_a_candidate_at_once,
    candidates::a_deleted_row_does_not_hide_the_rows_after_it,
    candidates::newest_id_is_the_highest_committed_id,
    candidates::longest_due_lists_candidates_by_when_they_became_due,
    adoption::every_task_no_taskmaster_runs_is_leased,
    adoption::the_sweep_leases_only_tasks_without_an_owner,
    adoption::due_leases_are_extended_and_lapsed_ones_taken_again,
    adoption::only_rows_whose_task_a_daemon_leases_are_candidates,
    adoption::ended_requests_tasks_are_archived_once_as_phorges_worker_ends_them,
    adoption::a_stopping_instance_hands_back_only_its_own_leases,
    adoption::a_row_a_taskmaster_holds_is_counted_lost_once,
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

/// A row whose version is 1,000 s ahead of the server's clock, claimed:
/// its id and that version (the claim moved it to `ahead + 1`, which only
/// the `+ 1` can do).
async fn claimed_ahead_of_the_clock(bed: &dyn TestBed) -> (u64, UnixTime) {
    let ahead = bed.now().await + 1_000;
    let id = bed.insert_request(&request(HOOK, ahead, ahead)).await;
    assert_eq!(
        bed.store().claim(id, ahead).await.expect("claim"),
        Claim::Won(ahead + 1)
    );
    (id, ahead)
}

/// The write-back of a delivery answered 200 at `now`, onto the row at
/// `expected_version`.
fn sent_write(id: u64, expected_version: UnixTime, now: UnixTime) -> ResultWrite {
    ResultWrite {
        id,
        expected_version,
        status: RequestStatus::Sent,
        last_request_result: LastResult::Okay,
        last_request_epoch: now,
        date_modified: now,
        properties: r#"{"retry":"forever","errorType":"http","errorCode":200}"#.to_owned(),
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
