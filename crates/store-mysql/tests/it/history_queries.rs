//! Reading the history: every filter narrows, newest first, the limit
//! holds; a request Phorge deleted is still listed; a history database
//! that does not exist is said to be missing.

use std::time::Duration;

use webhook_core::history::{AttemptLog, AttemptQuery, RequestKey};
use webhook_core::memory_store::NewRequest;
use webhook_core::StoreError;

use crate::history_fixture::{attempt, claim_fresh, history, hook_error, with_history_db};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_filter_narrows_newest_first() {
    with_history_db(|db, database| async move {
        let history = history(&db, &database, "host:1");
        history.prepare().await.expect("prepared");
        let queue = history.queue();
        let store = db.store().with_history(queue.clone());
        let mut requests = Vec::new();
        for (hook, object) in [
            (
                "PHID-HWBH-queryhookaaaaaaaaaa",
                "PHID-TASK-objectaaaaaaaaaaaa",
            ),
            (
                "PHID-HWBH-queryhookbbbbbbbbbb",
                "PHID-TASK-objectbbbbbbbbbbbb",
            ),
        ] {
            let id = db
                .insert_request(&NewRequest {
                    object_phid: object.to_owned(),
                    ..NewRequest::queued(hook, r#"{"retry":"forever"}"#)
                })
                .await;
            requests.push((id, db.row(id).await.phid, hook, object));
        }
        // Request a: sent at 100, timeout at 300; request b: hook error
        // at 200, sent at 400.
        let at = |index: usize, started: u64| {
            let (id, phid, hook, object) = &requests[index];
            let mut recorded = attempt(*id, phid, started);
            recorded.hook_phid = (*hook).to_owned();
            recorded.object_phid = (*object).to_owned();
            recorded
        };
        queue.record(at(0, 100));
        let mut b_error = hook_error(requests[1].0, &requests[1].1, 200);
        b_error.hook_phid = requests[1].2.to_owned();
        b_error.object_phid = requests[1].3.to_owned();
        queue.record(b_error);
        let mut timeout = at(0, 300);
        timeout.status = "queued".to_owned();
        timeout.error_type = "timeout".to_owned();
        timeout.error_code = "28".to_owned();
        queue.record(timeout);
        queue.record(at(1, 400));
        claim_fresh(&db, &store).await;
        assert!(queue.settled(Duration::from_secs(10)).await);

        let reader = db.reader_for_history(&database);
        let started = |query: AttemptQuery| {
            let reader = reader.clone();
            async move {
                reader
                    .attempts(&query)
                    .await
                    .expect("read")
                    .iter()
                    .map(|a| a.attempt.started_ms)
                    .collect::<Vec<_>>()
            }
        };
        let (a_id, a_phid, a_hook, a_object) = requests[0].clone();
        assert_eq!(started(AttemptQuery::default()).await, [400, 300, 200, 100]);
        assert_eq!(
            started(AttemptQuery {
                request: Some(RequestKey::Id(a_id)),
                ..AttemptQuery::default()
            })
            .await,
            [300, 100]
        );
        assert_eq!(
            started(AttemptQuery {
                request: Some(RequestKey::Phid(requests[1].1.clone())),
                ..AttemptQuery::default()
            })
            .await,
            [400, 200]
        );
        assert_eq!(
            started(AttemptQuery {
                hook_phid: Some(a_hook.to_owned()),
                ..AttemptQuery::default()
            })
            .await,
            [300, 100]
        );
        assert_eq!(
            started(AttemptQuery {
                object_phid: Some(requests[1].3.to_owned()),
                ..AttemptQuery::default()
            })
            .await,
            [400, 200]
        );
        for (outcome, expected) in [
            ("sent", &[400, 100][..]),
            ("timeout", &[300][..]),
            ("not-found", &[200][..]),
            ("failed", &[200][..]),
            ("200", &[400, 100][..]),
            ("nothing", &[][..]),
        ] {
            assert_eq!(
                started(AttemptQuery {
                    outcome: Some(outcome.to_owned()),
                    ..AttemptQuery::default()
                })
                .await,
                expected,
                "{outcome}"
            );
        }
        assert_eq!(
            started(AttemptQuery {
                since_ms: Some(200),
                until_ms: Some(400),
                ..AttemptQuery::default()
            })
            .await,
            [300, 200]
        );
        assert_eq!(
            started(AttemptQuery {
                limit: 3,
                ..AttemptQuery::default()
            })
            .await,
            [400, 300, 200]
        );
        assert_eq!(
            started(AttemptQuery {
                request: Some(RequestKey::Phid(a_phid.clone())),
                hook_phid: Some(a_hook.to_owned()),
                object_phid: Some(a_object.to_owned()),
                outcome: Some("sent".to_owned()),
                since_ms: Some(100),
                until_ms: Some(101),
                limit: 5,
            })
            .await,
            [100]
        );

        // Phorge's collector deleted the row: its attempts stay.
        db.delete_request(a_id).await;
        assert!(db
            .store()
            .reader()
            .request_by_id(a_id)
            .await
            .expect("read")
            .is_none());
        assert_eq!(
            started(AttemptQuery {
                request: Some(RequestKey::Id(a_id)),
                ..AttemptQuery::default()
            })
            .await,
            [300, 100]
        );
    })
    .await;
}

#[tokio::test]
async fn a_missing_history_is_said_to_be() {
    with_history_db(|db, database| async move {
        let reader = db.reader_for_history(&database);
        let err = reader
            .attempts(&AttemptQuery::default())
            .await
            .expect_err("no database");
        assert!(
            matches!(&err, StoreError::MissingDatabase(name) if name == &database),
            "{err:?}"
        );
        // The database without its table.
        crate::fixture::create_database(&database).await;
        let err = reader
            .attempts(&AttemptQuery::default())
            .await
            .expect_err("no table");
        assert!(matches!(err, StoreError::Query(_)), "{err:?}");
        assert!(
            err.to_string().contains(&format!("{database}.attempt")),
            "{err}"
        );
    })
    .await;
}

/// A reader of the history through a store's reader.
trait ReaderForHistory {
    fn reader_for_history(&self, database: &str) -> webhook_store_mysql::HistoryReader;
}

impl ReaderForHistory for crate::fixture::TestDb {
    fn reader_for_history(&self, database: &str) -> webhook_store_mysql::HistoryReader {
        self.store().reader().history(database)
    }
}
