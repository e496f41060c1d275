//! The object check as the admin tool shows it: `payload` lists the
//! transactions Phorge's worker would load (newest first, only those that
//! still exist) and refuses a destroyed object's request; `doctor` names
//! the application tables the account cannot read.

use webhook_core::memory_store::NewRequest;
use webhook_core::{Payload, Properties};
use webhook_store_mysql::object_tables;
use webhook_test_support::{with_application_tables, with_db};

use crate::support::{hook, on_db};

const HOOK: &str = "PHID-HWBH-adminobjectsaaaaaaa";
const TASK: &str = "PHID-TASK-adminobjectsaaaaaaa";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payload_and_doctor_follow_the_objects_tables() {
    with_db(|db| async move {
        db.insert_hook(&hook(HOOK, "objects hook", "enabled")).await;
        let db = &db;
        let namespace = db.namespace.clone();
        let without = on_db(db, &["doctor"]).await;
        let maniphest_line = format!("{namespace}_maniphest.maniphest_task (TASK)");
        assert!(
            without.stdout.contains("warn  objects"),
            "{}",
            without.stdout
        );
        assert!(
            without.stdout.contains(&maniphest_line),
            "{}",
            without.stdout
        );

        let maniphest = object_tables("TASK").expect("mapped");
        with_application_tables(&namespace, maniphest, |tasks| async move {
            let applied = [
                "PHID-XACT-TASK-admin1",
                "PHID-XACT-TASK-admin2",
                "PHID-XACT-TASK-admin3",
            ];
            tasks.insert_object(TASK, &applied).await;
            let stored = format!(
                r#"{{"transactionPHIDs":{{"{0}":"{0}","{1}":"{1}","{2}":"{2}"}}}}"#,
                applied[0], applied[1], applied[2]
            );
            let id = db
                .insert_request(&NewRequest {
                    object_phid: TASK.to_owned(),
                    ..NewRequest::queued(HOOK, &stored)
                })
                .await;
            tasks.delete_transaction(applied[0]).await;
            let row = db.row(id).await;
            let expected = Payload::with_transactions(
                &row,
                &Properties::parse(&stored).expect("parses"),
                &[applied[2].to_owned(), applied[1].to_owned()],
            );
            let out = on_db(db, &["payload", &id.to_string()]).await;
            assert_eq!(out.status, 0, "{out:?}");
            assert_eq!(out.stdout_bytes, expected.as_bytes());

            let with_tasks = on_db(db, &["doctor"]).await;
            assert!(
                !with_tasks.stdout.contains(&maniphest_line),
                "{}",
                with_tasks.stdout
            );

            tasks.destroy_object(TASK).await;
            let gone = on_db(db, &["payload", &id.to_string()]).await;
            assert_eq!(gone.status, 1, "{gone:?}");
            assert_eq!(gone.stdout, "");
            assert!(gone.stderr.contains("no longer exists"), "{}", gone.stderr);
            assert!(gone.stderr.contains("hook error object"), "{}", gone.stderr);
        })
        .await;
    })
    .await;
}
