//! The shared `Store` conformance suite of `webhook-core`, each case on a
//! fresh database, so the MySQL store is held to exactly the semantics the
//! in-memory reference store is.

use async_trait::async_trait;
use webhook_core::conformance::{cases, TestBed};
use webhook_core::{Hook, NewRequest, RequestRow, Store, UnixTime};
use webhook_store_mysql::MysqlStore;

use crate::fixture::{with_db, TestDb};

struct MysqlBed {
    db: TestDb,
    store: MysqlStore,
}

#[async_trait]
impl TestBed for MysqlBed {
    fn store(&self) -> &dyn Store {
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
    async fn row(&self, id: u64) -> RequestRow {
        self.db.row(id).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_store_passes_the_conformance_suite() {
    let all = cases();
    assert!(all.len() >= 17, "the suite lost cases: {}", all.len());
    for case in all {
        eprintln!("conformance case: {}", case.name);
        with_db(|db| async move {
            let bed = MysqlBed {
                store: db.store(),
                db,
            };
            (case.run)(&bed).await;
            bed.store.disconnect().await.expect("close pool");
        })
        .await;
    }
}
