//! The shared `Store` conformance suite of `webhook-core`, each case on a
//! fresh database, so the MySQL store is held to exactly the semantics the
//! in-memory reference store is.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use webhook_core::adoption::{TaskAdoption, TaskLease, TaskQueue};
use webhook_core::conformance::{cases, TestBed};
use webhook_core::memory_store::NewRequest;
use webhook_core::{Hook, PhorgeObjects, QueueCounts, RequestRow, Store, UnixTime};
use webhook_store_mysql::{object_tables, MysqlStore};
use webhook_test_support::mariadb::{with_phorge_side, PendingInsert, PhorgeSide};
use webhook_test_support::{with_application_tables, ApplicationTables};

use crate::fixture::{with_db, TestDb};

struct MysqlBed {
    db: TestDb,
    store: MysqlStore,
    tasks: ApplicationTables,
    side: PhorgeSide,
    pending: Mutex<HashMap<u64, PendingInsert>>,
}

#[async_trait]
impl TestBed for MysqlBed {
    fn store(&self) -> &dyn Store {
        &self.store
    }
    fn counts(&self) -> &dyn QueueCounts {
        &self.store
    }
    async fn now(&self) -> UnixTime {
        self.db.now().await
    }
    async fn insert_hook(&self, hook: &Hook) {
        self.db.insert_hook(hook).await;
    }
    async fn insert_request(&self, request: &NewRequest) -> u64 {
        self.db.insert_request(request).await
    }
    async fn insert_requests(&self, request: &NewRequest, count: usize) -> Vec<u64> {
        self.db.insert_requests(request, count).await
    }
    async fn begin_insert(&self, request: &NewRequest) -> u64 {
        let pending = self.db.begin_insert(request).await;
        let id = pending.id();
        self.pending
            .lock()
            .expect("pending inserts")
            .insert(id, pending);
        id
    }
    async fn commit_insert(&self, id: u64) {
        let pending = self.pending.lock().expect("pending inserts").remove(&id);
        pending.expect("an insert begun").commit().await;
    }
    async fn delete_request(&self, id: u64) {
        self.db.delete_request(id).await;
    }
    async fn row(&self, id: u64) -> RequestRow {
        self.db.row(id).await
    }
    fn objects(&self) -> &dyn PhorgeObjects {
        &self.store
    }
    async fn insert_task(&self, object_phid: &str, transactions: &[&str]) {
        self.tasks.insert_object(object_phid, transactions).await;
    }
    async fn destroy_task(&self, object_phid: &str) {
        self.tasks.destroy_object(object_phid).await;
    }
    async fn lose_lock_session(&self, hook_phid: &str) {
        let name = self.store.hook_lock_name(hook_phid);
        let holder = self.db.lock_holder(&name).await.expect("the lock is held");
        self.db.exec(&format!("KILL CONNECTION {holder}")).await;
        assert!(self.db.lock_freed_eventually(&name).await, "KILL frees it");
    }
    fn tasks(&self) -> &dyn TaskQueue {
        &self.store
    }
    fn adopting(&self, adoption: Arc<TaskAdoption>) -> Box<dyn Store> {
        Box::new(self.store.clone().with_task_adoption(adoption))
    }
    async fn queue_task(&self, class: &str, object_phid: Option<&str>) -> u64 {
        self.side.queue_task(class, object_phid).await
    }
    async fn set_task_lease(&self, id: u64, owner: Option<&str>, expires_in: Option<i64>) {
        self.side.set_lease(id, owner, expires_in).await;
    }
    async fn task_lease(&self, id: u64) -> Option<TaskLease> {
        self.side.active_task(id).await.map(|task| TaskLease {
            owner: task.lease_owner,
            secs_left: task.lease_left_secs,
        })
    }
    async fn archived_result(&self, id: u64) -> Option<u64> {
        self.side
            .archived_task(id)
            .await
            .map(|task| u64::from(task.result))
    }
    async fn taskmaster_lease(&self, owner: &str) -> Option<u64> {
        self.side.taskmaster_lease(owner).await
    }
}

/// Every case on a fresh database with Phorge's task queue beside it, with
/// Phorge's stock schema when `stock` (no `key_status`: the store's scan
/// floor carries the polls).
async fn run_the_suite(stock: bool) {
    let all = cases();
    assert!(all.len() >= 17, "the suite lost cases: {}", all.len());
    for case in all {
        eprintln!("conformance case: {} (stock schema: {stock})", case.name);
        with_db(|db| async move {
            if stock {
                db.exec("ALTER TABLE herald_webhookrequest DROP INDEX key_status")
                    .await;
            }
            let namespace = db.namespace.clone();
            let maniphest = object_tables("TASK").expect("tasks are mapped");
            let side_namespace = namespace.clone();
            with_phorge_side(&side_namespace, |side| async move {
                with_application_tables(&namespace, maniphest, |tasks| async move {
                    let bed = MysqlBed {
                        store: db.store(),
                        db,
                        tasks,
                        side,
                        pending: Mutex::new(HashMap::new()),
                    };
                    (case.run)(&bed).await;
                    bed.store.disconnect().await.expect("close pool");
                })
                .await;
            })
            .await;
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_store_passes_the_conformance_suite() {
    run_the_suite(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_store_passes_the_conformance_suite_on_the_stock_schema() {
    run_the_suite(true).await;
}
