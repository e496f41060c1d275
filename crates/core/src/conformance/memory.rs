//! The suite against `MemoryStore`, on a `ManualClock`: the in-memory
//! half of the proof that its semantics equal the SQL's.

use std::sync::Arc;

use async_trait::async_trait;

use super::{cases, TestBed};
use crate::adoption::{TaskAdoption, TaskLease, TaskQueue};
use crate::clock::{Clock, ManualClock};
use crate::memory_store::{MemoryStore, NewRequest};
use crate::model::{Hook, RequestRow, UnixTime};
use crate::objects::PhorgeObjects;
use crate::store::{QueueCounts, Store};

/// How long a taskmaster's lease lasts (Phorge's default lease).
const TASKMASTER_LEASE_SECS: u64 = 7_200;

struct MemoryBed {
    clock: ManualClock,
    store: MemoryStore,
}

#[async_trait]
impl TestBed for MemoryBed {
    fn store(&self) -> &dyn Store {
        &self.store
    }
    fn counts(&self) -> &dyn QueueCounts {
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
    async fn insert_requests(&self, request: &NewRequest, count: usize) -> Vec<u64> {
        (0..count)
            .map(|_| self.store.insert_request(request.clone()))
            .collect()
    }
    async fn begin_insert(&self, request: &NewRequest) -> u64 {
        self.store.begin_insert(request.clone())
    }
    async fn commit_insert(&self, id: u64) {
        self.store.commit_insert(id);
    }
    async fn delete_request(&self, id: u64) {
        self.store.delete_request(id);
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
    fn tasks(&self) -> &dyn TaskQueue {
        &self.store
    }
    fn adopting(&self, adoption: Arc<TaskAdoption>) -> Box<dyn Store> {
        Box::new(self.store.clone().with_task_adoption(adoption))
    }
    async fn queue_task(&self, class: &str, object_phid: Option<&str>) -> u64 {
        self.store.queue_task(class, object_phid)
    }
    async fn set_task_lease(&self, id: u64, owner: Option<&str>, expires_in: Option<i64>) {
        self.store.set_task_lease(id, owner, expires_in);
    }
    async fn task_lease(&self, id: u64) -> Option<TaskLease> {
        self.store.task_lease(id)
    }
    async fn archived_result(&self, id: u64) -> Option<u64> {
        self.store.archived_task(id).map(|task| task.result.code())
    }
    async fn taskmaster_lease(&self, owner: &str) -> Option<u64> {
        self.store.taskmaster_lease(owner, TASKMASTER_LEASE_SECS)
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
