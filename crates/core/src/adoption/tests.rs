//! Task adoption's policy on a `MemoryStore`: the archive results, the
//! owner strings, and the schedule on a `ManualClock`.

use super::*;

#[test]
fn archive_results_follow_phorges_worker() {
    let silent = r#"{"errorType":"hook","errorCode":"silent"}"#;
    let disabled = r#"{"errorType":"hook","errorCode":"disabled"}"#;
    let http = r#"{"errorType":"http","errorCode":500}"#;
    let (success, failure) = (ArchiveResult::Success, ArchiveResult::Failure);
    assert_eq!(archive_result(Some("sent"), Some("{}")), success);
    assert_eq!(archive_result(Some("failed"), Some(silent)), success);
    assert_eq!(archive_result(Some("failed"), Some(disabled)), failure);
    assert_eq!(archive_result(Some("failed"), Some(http)), failure);
    assert_eq!(archive_result(Some("failed"), Some("not json")), failure);
    assert_eq!(archive_result(None, None), failure);
}

#[test]
fn owner_strings_fit_phorges_column_and_hold_no_wildcard() {
    let adoption = TaskAdoption::new("web_01.example.org%with-a-long-name", 4_294_967_295);
    // A trillion leases taken later, the owner still fits.
    adoption
        .next_lease
        .store(999_999_999_999, Ordering::Relaxed);
    let owner = adoption.next_owner();
    assert!(owner.len() <= 64, "{} bytes: {owner}", owner.len());
    assert!(owner.starts_with(DAEMON_LEASE_PREFIX));
    assert!(!adoption.prefix.contains(['%', '_']), "{}", adoption.prefix);
    assert_ne!(
        adoption.next_owner(),
        owner,
        "every lease gets its own owner"
    );
    // Two containers of one deployment: same host prefix, pid 1.
    let (one, two) = (
        TaskAdoption::new("gorge-webhook-7d9f", 1),
        TaskAdoption::new("gorge-webhook-7d9f", 1),
    );
    assert_ne!(one.prefix, two.prefix);
}

mod schedule {
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;
    use std::time::Duration;

    use futures::executor::LocalPool;
    use futures::task::LocalSpawnExt;

    use super::super::*;
    use crate::clock::{Clock, ManualClock};
    use crate::memory_store::{MemoryStore, NewRequest, StoreOp};
    use crate::model::RequestStatus;

    const START: UnixTime = 1_700_000_000;
    const HOOK: &str = "PHID-HWBH-scheduleaaaaaaaaaaaa";

    struct Running {
        pool: LocalPool,
        clock: ManualClock,
        store: MemoryStore,
        failures: Arc<AtomicU64>,
    }

    impl Running {
        fn start() -> Self {
            let clock = ManualClock::new(START);
            let store = MemoryStore::new(Arc::new(clock.clone()));
            let failures = Arc::new(AtomicU64::new(0));
            let pool = LocalPool::new();
            let adoption = TaskAdoption::new("schedule", 1);
            let (queue, on, failed) = (store.clone(), clock.clone(), Arc::clone(&failures));
            pool.spawner()
                .spawn_local(async move {
                    run_rounds(&adoption, &queue, &on, |_| {
                        failed.fetch_add(1, Ordering::Relaxed);
                    })
                    .await;
                })
                .expect("spawn");
            let mut running = Self {
                pool,
                clock,
                store,
                failures,
            };
            running.pool.run_until_stalled();
            running
        }

        /// Lets the schedule run until `at` on the clock's monotonic time.
        fn run_until(&mut self, at: Duration) {
            while self
                .clock
                .next_sleeper_in()
                .is_some_and(|wait| self.clock.monotonic() + wait <= at)
            {
                self.clock.advance_to_next_sleeper();
                self.pool.run_until_stalled();
            }
        }

        fn request_with_task(&self, status: RequestStatus) -> u64 {
            let id = self.store.insert_request(NewRequest {
                status,
                ..NewRequest::queued(HOOK, "{}")
            });
            let phid = self.store.row(id).expect("inserted").phid;
            self.store.queue_webhook_task(&phid)
        }

        fn owner(&self, task: u64) -> Option<String> {
            self.store.task_lease(task).and_then(|lease| lease.owner)
        }
    }

    #[test]
    fn new_tasks_are_swept_up_at_once_yields_wait_for_the_round() {
        let mut run = Running::start();
        let fresh = run.request_with_task(RequestStatus::Queued);
        let yielded = run.request_with_task(RequestStatus::Queued);
        run.store
            .set_task_lease(yielded, Some(YIELD_OWNER), Some(15));
        run.run_until(SWEEP_EVERY);
        assert!(run
            .owner(fresh)
            .is_some_and(|o| o.starts_with(DAEMON_LEASE_PREFIX)));
        assert_eq!(run.owner(yielded).as_deref(), Some(YIELD_OWNER));
        run.run_until(ADOPTION_EVERY - SWEEP_EVERY);
        assert_eq!(run.owner(yielded).as_deref(), Some(YIELD_OWNER));
        run.run_until(ADOPTION_EVERY);
        assert!(run
            .owner(yielded)
            .is_some_and(|o| o.starts_with(DAEMON_LEASE_PREFIX)));
    }

    #[test]
    fn leases_are_kept_up_while_requests_wait_and_tasks_archived_once_they_end() {
        let mut run = Running::start();
        let waiting = run.request_with_task(RequestStatus::Queued);
        let sent = run.request_with_task(RequestStatus::Sent);
        run.run_until(SWEEP_EVERY);
        assert!(run.store.task_lease(sent).is_some(), "archived too early");
        run.run_until(ARCHIVE_EVERY);
        let archived = run.store.archived_task(sent).expect("archived");
        assert_eq!(archived.result, ArchiveResult::Success);
        assert_eq!(archived.archived_at, START + ARCHIVE_EVERY.as_secs());
        // Ten minutes on, the waiting request's lease is still running.
        run.run_until(Duration::from_secs(600));
        let lease = run.store.task_lease(waiting).expect("still queued");
        assert!(lease.secs_left.is_some_and(|left| left > 240), "{lease:?}");
        assert_eq!(run.failures.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_failed_step_is_reported_and_the_schedule_goes_on() {
        let mut run = Running::start();
        run.store.fail_next(StoreOp::Tasks, 3);
        let task = run.request_with_task(RequestStatus::Queued);
        run.run_until(SWEEP_EVERY * 3);
        assert_eq!(run.failures.load(Ordering::Relaxed), 3);
        assert_eq!(run.owner(task), None);
        run.run_until(SWEEP_EVERY * 4);
        assert!(run.owner(task).is_some());
        assert_eq!(run.failures.load(Ordering::Relaxed), 3);
    }
}
