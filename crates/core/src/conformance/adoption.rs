//! Conformance cases for task adoption on Phorge's task queue
//! (`TaskQueue`): which tasks are leased and which are left to a
//! taskmaster, leases extended and taken again, the candidate gate, and
//! the archive with Phorge's results. The core's `TaskAdoption` drives
//! each store's queue, so the cases hold the queue's semantics, not the
//! policy's.

use std::sync::Arc;

use crate::adoption::{
    TaskAdoption, DAEMON_LEASE_PREFIX, LEFT_TO_PHP_SECS, TASK_GRACE_SECS, WEBHOOK_TASK_CLASS,
};
use crate::memory_store::NewRequest;
use crate::model::{RequestStatus, UnixTime};
use crate::store::{CandidateQuery, Store};
use crate::windows::{Settings, Windows};

use super::{TestBed, HOOK};

const TASKMASTER: &str = "4242:1700000000:php-host:1";
const ELSEWHERE: &str = "gorge-webhook:elsewhere:9:9:1";
const OTHER_CLASS: &str = "PhabricatorSearchWorker";

/// A queued request and its webhook task, as Phorge queues both: the
/// request's id and the task's.
async fn request_with_task(
    bed: &dyn TestBed,
    status: RequestStatus,
    properties: &str,
) -> (u64, u64) {
    let id = bed
        .insert_request(&NewRequest {
            status,
            ..NewRequest::queued(HOOK, properties)
        })
        .await;
    let phid = bed.row(id).await.phid;
    let task = bed.queue_task(WEBHOOK_TASK_CLASS, Some(&phid)).await;
    (id, task)
}

async fn queued_with_task(bed: &dyn TestBed) -> (u64, u64) {
    request_with_task(bed, RequestStatus::Queued, "{}").await
}

/// A queued row whose task `owner` leases for `secs` more (negative: the
/// lease lapsed that long ago): its id and its task's.
async fn queued_leased_by(bed: &dyn TestBed, owner: &str, secs: i64) -> (u64, u64) {
    let (row, task) = queued_with_task(bed).await;
    bed.set_task_lease(task, Some(owner), Some(secs)).await;
    (row, task)
}

fn instance(pid: u32) -> Arc<TaskAdoption> {
    Arc::new(TaskAdoption::new("test-host", pid))
}

/// The owner of an active task's lease.
async fn owner(bed: &dyn TestBed, task: u64) -> Option<String> {
    bed.task_lease(task).await.and_then(|lease| lease.owner)
}

/// The ids of the candidates `store` returns at `at` with the default
/// windows.
async fn candidate_ids(store: &dyn Store, at: UnixTime) -> Vec<u64> {
    let query = CandidateQuery {
        cutoffs: Windows::try_new(Settings::default())
            .expect("defaults")
            .cutoffs(at),
        limit: 100,
        exclude_hooks: Vec::new(),
    };
    let rows = store.candidates(&query).await.expect("candidates");
    rows.into_iter().map(|row| row.id).collect()
}

fn ours(owner: Option<&str>, pid: u32) -> bool {
    owner.is_some_and(|o| o.starts_with(&format!("{DAEMON_LEASE_PREFIX}test-host:{pid}:")))
}

pub(super) async fn every_task_no_taskmaster_runs_is_leased(bed: &dyn TestBed) {
    let (_, unleased) = queued_with_task(bed).await;
    let (_, yielded) = queued_leased_by(bed, "(yield)", 15).await;
    let (_, lapsed) = queued_leased_by(bed, "1:1:gone-host:9", -1).await;
    let (_, running) = queued_leased_by(bed, TASKMASTER, 7_000).await;
    let other_class = bed.queue_task(OTHER_CLASS, None).await;

    let adoption = instance(1);
    let round = adoption.round(bed.tasks()).await.expect("round");
    assert_eq!((round.adopted, round.renewed), (3, 0), "{round:?}");
    // The yield is a task a taskmaster leased first, won back.
    assert_eq!(adoption.totals().lost.yielded, 1);
    for task in [unleased, yielded, lapsed] {
        let lease = bed.task_lease(task).await.expect("still active");
        assert!(ours(lease.owner.as_deref(), 1), "{lease:?}");
        let left = lease.secs_left.expect("an expiry");
        assert!((295..=300).contains(&left), "lease left {left}");
    }
    assert_eq!(owner(bed, running).await.as_deref(), Some(TASKMASTER));
    // A taskmaster now finds only the other class's task.
    assert_eq!(bed.taskmaster_lease("7:7:php:1").await, Some(other_class));
    assert_eq!(bed.taskmaster_lease("7:7:php:2").await, None);
}

pub(super) async fn the_sweep_leases_only_tasks_without_an_owner(bed: &dyn TestBed) {
    let (_, fresh) = queued_with_task(bed).await;
    let (_, yielded) = queued_leased_by(bed, "(yield)", 15).await;
    let other_class = bed.queue_task(OTHER_CLASS, None).await;
    assert_eq!(instance(1).sweep(bed.tasks()).await.expect("sweep"), 1);
    assert!(ours(owner(bed, fresh).await.as_deref(), 1));
    assert_eq!(owner(bed, yielded).await.as_deref(), Some("(yield)"));
    assert_eq!(owner(bed, other_class).await, None);
}

pub(super) async fn due_leases_are_extended_and_lapsed_ones_taken_again(bed: &dyn TestBed) {
    let (_, due) = queued_with_task(bed).await;
    let (_, lapsed) = queued_with_task(bed).await;
    let (_, early) = queued_with_task(bed).await;
    instance(1).round(bed.tasks()).await.expect("round");
    let first = |task| async move { owner(bed, task).await.expect("leased") };
    let (due_owner, lapsed_owner) = (first(due).await, first(lapsed).await);
    bed.set_task_lease(due, Some(&due_owner), Some(30)).await;
    bed.set_task_lease(lapsed, Some(&lapsed_owner), Some(-1))
        .await;
    bed.set_task_lease(early, Some(&due_owner), Some(250)).await;

    // Another instance extends the first one's due lease (rows on a
    // stopped instance's leases are delivered by the others).
    let round = instance(2).round(bed.tasks()).await.expect("round");
    assert_eq!((round.renewed, round.adopted), (1, 1), "{round:?}");
    let renewed = bed.task_lease(due).await.expect("active");
    assert_eq!(renewed.owner.as_deref(), Some(due_owner.as_str()));
    assert!(renewed.secs_left.expect("expiry") >= 295, "{renewed:?}");
    let not_due = bed.task_lease(early).await.expect("active");
    assert!(not_due.secs_left.expect("expiry") <= 250, "{not_due:?}");
    // Taken again under a new owner: a taskmaster that saw the lapsed
    // lease re-checks an owner that changed.
    let retaken = owner(bed, lapsed).await;
    assert!(ours(retaken.as_deref(), 2), "{retaken:?}");
    assert_ne!(retaken.as_deref(), Some(lapsed_owner.as_str()));
}

pub(super) async fn only_rows_whose_task_a_daemon_leases_are_candidates(bed: &dyn TestBed) {
    let adoption = instance(1);
    let store = bed.adopting(Arc::clone(&adoption));
    let (free, free_task) = queued_with_task(bed).await;
    let (php, php_task) = queued_leased_by(bed, TASKMASTER, 7_000).await;
    let (elsewhere, _) = queued_leased_by(bed, ELSEWHERE, 300).await;
    let (ending, _) = queued_leased_by(bed, ELSEWHERE, 5).await;
    let now = bed.now().await;
    // Rows without a task: one just made (Phorge inserts the task next),
    // one older than the grace by the store's clock.
    let fresh_taskless = bed.insert_request(&NewRequest::queued(HOOK, "{}")).await;
    let old_taskless = bed
        .insert_request(&NewRequest {
            date_created: Some(now - TASK_GRACE_SECS),
            ..NewRequest::queued(HOOK, "{}")
        })
        .await;
    let candidates = |at: UnixTime| candidate_ids(store.as_ref(), at);

    // The free task is leased on the spot; another instance's lease
    // counts; the taskmaster's task, a daemon lease about to lapse and a
    // fresh row with no task yet wait, judged by the store's clock
    // whatever the poll's says.
    let later = now + 3_600;
    assert_eq!(candidates(later).await, vec![free, elsewhere, old_taskless]);
    assert_eq!(candidates(now).await, vec![free, elsewhere, old_taskless]);
    assert!(ours(owner(bed, free_task).await.as_deref(), 1));
    // Once the taskmaster's lease lapses, its task is adopted and its row
    // goes: at the next look, as a row left to PHP stays out of polls for
    // a few seconds.
    bed.set_task_lease(php_task, Some(TASKMASTER), Some(-1))
        .await;
    assert!(!candidates(later).await.contains(&php));
    let ids = candidates(later + 5).await;
    assert!(ids.contains(&php), "{ids:?}");
    assert!(!ids.contains(&ending), "{ids:?}");
    assert!(!ids.contains(&fresh_taskless), "{ids:?}");
    assert!(ours(owner(bed, php_task).await.as_deref(), 1));
    assert!(adoption.totals().rows_waiting_for_php >= 2);
}

/// A row whose task a taskmaster holds is lost to PHP once, however many
/// polls meet it; one whose daemon lease is ending is not.
pub(super) async fn a_row_a_taskmaster_holds_is_counted_lost_once(bed: &dyn TestBed) {
    let adoption = instance(1);
    let store = bed.adopting(Arc::clone(&adoption));
    queued_leased_by(bed, TASKMASTER, 7_000).await;
    queued_leased_by(bed, ELSEWHERE, 5).await;
    let now = bed.now().await;
    for at in [now, now + LEFT_TO_PHP_SECS] {
        let ids = candidate_ids(store.as_ref(), at).await;
        assert!(ids.is_empty(), "{ids:?}");
    }
    assert_eq!(adoption.totals().lost.left_to_php, 1);
}

pub(super) async fn ended_requests_tasks_are_archived_once_as_phorges_worker_ends_them(
    bed: &dyn TestBed,
) {
    let silent = r#"{"errorType":"hook","errorCode":"silent"}"#;
    let http = r#"{"errorType":"http","errorCode":500}"#;
    let (_, sent) = request_with_task(bed, RequestStatus::Sent, "{}").await;
    let (_, silenced) = request_with_task(bed, RequestStatus::Failed, silent).await;
    let (_, failed) = request_with_task(bed, RequestStatus::Failed, http).await;
    let (_, queued) = queued_with_task(bed).await;
    let gone = bed
        .queue_task(WEBHOOK_TASK_CLASS, Some("PHID-HWBR-gonegonegonegonegone"))
        .await;
    let (_, php_held) = request_with_task(bed, RequestStatus::Sent, "{}").await;
    let adoption = instance(1);
    adoption.round(bed.tasks()).await.expect("round");
    bed.set_task_lease(php_held, Some(TASKMASTER), Some(7_000))
        .await;

    let round = adoption.archive_ended(bed.tasks()).await.expect("archive");
    assert_eq!(
        (round.archived_success, round.archived_failure),
        (2, 2),
        "{round:?}"
    );
    for (task, result) in [(sent, 0), (silenced, 0), (failed, 1), (gone, 1)] {
        assert_eq!(
            bed.task_lease(task).await,
            None,
            "task {task} left the queue"
        );
        assert_eq!(bed.archived_result(task).await, Some(result), "task {task}");
    }
    assert!(
        bed.task_lease(queued).await.is_some(),
        "a queued request's task stays"
    );
    assert_eq!(owner(bed, php_held).await.as_deref(), Some(TASKMASTER));
    assert_eq!(bed.archived_result(php_held).await, None);
    // Nothing is archived twice.
    let again = instance(2)
        .archive_ended(bed.tasks())
        .await
        .expect("archive");
    assert_eq!((again.archived_success, again.archived_failure), (0, 0));
}

pub(super) async fn a_stopping_instance_hands_back_only_its_own_leases(bed: &dyn TestBed) {
    let stopping = instance(1);
    let (_, first) = queued_with_task(bed).await;
    let (_, second) = queued_with_task(bed).await;
    let round = stopping.round(bed.tasks()).await.expect("round");
    assert_eq!(round.adopted, 2, "{round:?}");
    let (_, other) = queued_leased_by(bed, ELSEWHERE, 300).await;
    let (_, php) = queued_leased_by(bed, TASKMASTER, 3_000).await;

    let handed = stopping.hand_back(bed.tasks()).await.expect("hand back");
    assert_eq!(handed, 2);
    for task in [first, second] {
        assert_eq!(owner(bed, task).await, None, "task {task}");
    }
    assert_eq!(owner(bed, other).await.as_deref(), Some(ELSEWHERE));
    assert_eq!(owner(bed, php).await.as_deref(), Some(TASKMASTER));
    // A taskmaster's lease query takes a handed-back task at once.
    assert_eq!(bed.taskmaster_lease("7:7:php:1").await, Some(first));
    assert_eq!(bed.taskmaster_lease("7:7:php:2").await, Some(second));
    assert_eq!(stopping.hand_back(bed.tasks()).await.expect("again"), 0);
}
