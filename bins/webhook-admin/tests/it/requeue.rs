//! `requeue` on a seeded database: each selector and filter (ids, PHIDs,
//! hook, since/until, error type, code and class), the refusal without a
//! selector, a dry run that writes nothing, and `--apply`, which writes
//! exactly Phorge's values and nothing else. (The compare-and-set that
//! leaves a row changed meanwhile alone is checked in store-mysql's
//! tests; the delivery of a requeued row by the daemon in the daemon's.)

use serde_json::Value;
use webhook_core::memory_store::NewRequest;
use webhook_core::{LastResult, RequestStatus};
use webhook_test_support::{with_db, TestDb};

use crate::readonly::snapshot;
use crate::support::{env, hook, on_db, run};

const HOOK_A: &str = "PHID-HWBH-requeueaaaaaaaaaaaaa";
const HOOK_B: &str = "PHID-HWBH-requeuebbbbbbbbbbbbb";

/// `2023-11-14T09:00:00Z`, a morning before [`NOW`].
const MORNING: u64 = 1_699_952_400;

/// The seeded rows, by what they are.
struct Seeded {
    a_500: u64,
    a_503_text: u64,
    a_404: u64,
    a_timeout: u64,
    a_disabled: u64,
    a_500_early: u64,
    b_500: u64,
    a_queued: u64,
    a_sent: u64,
}

async fn failed(db: &TestDb, hook: &str, properties: &str, epoch: u64) -> u64 {
    db.insert_request(&NewRequest {
        status: RequestStatus::Failed,
        last_request_result: if epoch == 0 {
            LastResult::None
        } else {
            LastResult::Fail
        },
        last_request_epoch: epoch,
        date_created: Some(MORNING - 7_200),
        date_modified: Some(epoch.max(MORNING - 7_200)),
        ..NewRequest::queued(hook, properties)
    })
    .await
}

async fn seed(db: &TestDb) -> Seeded {
    db.insert_hook(&hook(HOOK_A, "a", "enabled")).await;
    db.insert_hook(&hook(HOOK_B, "b", "enabled")).await;
    let http = |code: &str| format!(r#"{{"retry":"never","errorType":"http","errorCode":{code}}}"#);
    Seeded {
        a_500: failed(db, HOOK_A, &http("500"), MORNING + 600).await,
        a_503_text: failed(db, HOOK_A, &http("\"503\""), MORNING + 1_200).await,
        a_404: failed(db, HOOK_A, &http("404"), MORNING + 1_800).await,
        a_timeout: failed(
            db,
            HOOK_A,
            r#"{"errorType":"timeout","errorCode":28}"#,
            MORNING + 2_400,
        )
        .await,
        a_disabled: failed(
            db,
            HOOK_A,
            r#"{"errorType":"hook","errorCode":"disabled"}"#,
            0,
        )
        .await,
        a_500_early: failed(db, HOOK_A, &http("500"), MORNING - 60).await,
        b_500: failed(db, HOOK_B, &http("500"), MORNING + 600).await,
        a_queued: db
            .insert_request(&NewRequest::queued(
                HOOK_A,
                r#"{"errorType":"http","errorCode":500}"#,
            ))
            .await,
        a_sent: db
            .insert_request(&NewRequest {
                status: RequestStatus::Sent,
                last_request_result: LastResult::Okay,
                last_request_epoch: MORNING + 600,
                ..NewRequest::queued(HOOK_A, &http("200"))
            })
            .await,
    }
}

/// The ids a dry run with `args` would requeue.
async fn selected(db: &TestDb, args: &[&str]) -> Vec<u64> {
    let mut all = vec!["requeue", "--json"];
    all.extend_from_slice(args);
    let out = on_db(db, &all).await;
    assert_eq!(out.status, 0, "{args:?}: {out:?}");
    let doc = out.json();
    assert_eq!(doc["apply"], false);
    let ids: Vec<u64> = doc["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|row| {
            assert_eq!(row["result"], "would-requeue");
            row["id"].as_u64().expect("id")
        })
        .collect();
    assert_eq!(doc["selected"].as_u64(), Some(ids.len() as u64));
    assert_eq!(doc["requeued"], 0);
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selectors_and_filters_and_together_over_final_failures() {
    with_db(|db| async move {
        let s = seed(&db).await;
        let before = snapshot(&db).await;
        let a_failed = vec![
            s.a_500,
            s.a_503_text,
            s.a_404,
            s.a_timeout,
            s.a_disabled,
            s.a_500_early,
        ];
        assert_eq!(selected(&db, &["--hook", HOOK_A]).await, a_failed);
        assert_eq!(
            selected(&db, &["--hook", HOOK_A, "--error", "http/5xx"]).await,
            vec![s.a_500, s.a_503_text, s.a_500_early]
        );
        assert_eq!(
            selected(&db, &["--error", "http/500"]).await,
            vec![s.a_500, s.a_500_early, s.b_500]
        );
        assert_eq!(
            selected(&db, &["--error", "http/503"]).await,
            vec![s.a_503_text],
            "a code stored as a JSON string"
        );
        assert_eq!(selected(&db, &["--error", "http/4xx"]).await, vec![s.a_404]);
        assert_eq!(
            selected(&db, &["--error", "http"]).await,
            vec![s.a_500, s.a_503_text, s.a_404, s.a_500_early, s.b_500]
        );
        assert_eq!(
            selected(&db, &["--error", "timeout/28"]).await,
            vec![s.a_timeout]
        );
        assert_eq!(
            selected(&db, &["--error", "hook/disabled"]).await,
            vec![s.a_disabled]
        );
        // "every http/5xx failure of hook A since 09:00", three spellings.
        let since = MORNING.to_string();
        for time in [since.as_str(), "2023-11-14T09:00:00Z"] {
            assert_eq!(
                selected(
                    &db,
                    &["--hook", HOOK_A, "--error", "http/5xx", "--since", time]
                )
                .await,
                vec![s.a_500, s.a_503_text]
            );
        }
        // Time filters never match a row that was never attempted.
        let until = (MORNING + 1_200).to_string();
        assert_eq!(
            selected(&db, &["--hook", HOOK_A, "--until", &until]).await,
            vec![s.a_500, s.a_503_text, s.a_500_early]
        );
        assert_eq!(
            selected(
                &db,
                &[
                    "--since",
                    "2023-11-14T09:10:00Z",
                    "--until",
                    "2023-11-14T09:10:00Z"
                ]
            )
            .await,
            vec![s.a_500, s.b_500]
        );
        // Named rows: ids and PHIDs, with the filters; rows not failed are
        // left out and said so.
        let phid = db.row(s.b_500).await.phid;
        let (a_500, queued, sent) = (
            s.a_500.to_string(),
            s.a_queued.to_string(),
            s.a_sent.to_string(),
        );
        assert_eq!(
            selected(&db, &[&a_500, &phid, &queued, &sent]).await,
            vec![s.a_500, s.b_500]
        );
        assert_eq!(
            selected(&db, &[&a_500, &phid, "--hook", HOOK_B]).await,
            vec![s.b_500]
        );
        let out = on_db(&db, &["requeue", &a_500, &queued]).await;
        assert_eq!(out.status, 0, "{out:?}");
        assert!(
            out.stdout.contains("left out: not failed (status queued)"),
            "{}",
            out.stdout
        );
        assert_eq!(snapshot(&db).await, before, "dry runs write nothing");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_selector_or_with_a_bad_one_nothing_is_read_or_written() {
    with_db(|db| async move {
        let s = seed(&db).await;
        let before = snapshot(&db).await;
        for (args, status) in [
            (&["requeue"][..], 2),
            (&["requeue", "--apply"], 2),
            (&["requeue", "--since", "yesterday", "--apply"], 2),
            (&["requeue", "--error", "http/", "--apply"], 2),
            (&["requeue", "nonsense", "--apply"], 2),
            (&["requeue", "999999", "--apply"], 1),
        ] {
            let out = on_db(&db, args).await;
            assert_eq!(out.status, status, "{args:?}: {out:?}");
            assert!(!out.stderr.is_empty(), "{args:?}");
        }
        // A missing named row fails the whole run before any write.
        let a_500 = s.a_500.to_string();
        let out = on_db(&db, &["requeue", &a_500, "999999", "--apply"]).await;
        assert_eq!(out.status, 1, "{out:?}");
        assert!(out.stderr.contains("nothing was changed"), "{out:?}");
        assert_eq!(snapshot(&db).await, before);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_requeues_in_phorge_values_and_changes_nothing_else() {
    with_db(|db| async move {
        let s = seed(&db).await;
        let before = snapshot(&db).await;
        let dry = on_db(&db, &["requeue", "--hook", HOOK_A, "--error", "http/5xx"]).await;
        assert_eq!(dry.status, 0, "{dry:?}");
        assert!(
            dry.stdout
                .ends_with("3 rows would be requeued; run again with --apply to write\n"),
            "{}",
            dry.stdout
        );
        assert!(dry.stdout.contains("http/500"), "{}", dry.stdout);
        assert!(
            dry.stdout.contains("last attempt 2023-11-14 09:10:00 UTC"),
            "{}",
            dry.stdout
        );
        assert_eq!(snapshot(&db).await, before);

        let requeued = [s.a_500, s.a_503_text, s.a_500_early];
        let mut was = Vec::new();
        for id in requeued {
            was.push(db.row(id).await);
        }
        let started = db.now().await;
        let out = on_db(
            &db,
            &[
                "requeue", "--hook", HOOK_A, "--error", "http/5xx", "--apply",
            ],
        )
        .await;
        assert_eq!(out.status, 0, "{out:?}");
        assert!(
            out.stdout.contains(
                "requeued 3 of 3 rows (0 changed meanwhile and were left alone)\n\
                 they go out once one claim lease has passed: in 30 s with these settings"
            ),
            "{}",
            out.stdout
        );
        let finished = db.now().await;
        for was in &was {
            let row = db.row(was.id).await;
            assert_eq!(row.status, RequestStatus::Queued);
            assert_eq!(row.last_request_result, LastResult::None);
            assert!(
                (started..=finished).contains(&row.last_request_epoch),
                "{row:?}"
            );
            assert!(row.date_modified >= row.last_request_epoch, "{row:?}");
            assert_eq!(row.properties, was.properties, "properties untouched");
            assert_eq!(
                (
                    &row.phid,
                    &row.webhook_phid,
                    &row.object_phid,
                    row.date_created
                ),
                (
                    &was.phid,
                    &was.webhook_phid,
                    &was.object_phid,
                    was.date_created
                )
            );
        }
        // Every other row is as it was.
        let after = snapshot(&db).await;
        let phids: Vec<mysql_async::Value> = was
            .iter()
            .map(|row| mysql_async::Value::from(row.phid.as_str()))
            .collect();
        let untouched = |rows: &[Vec<mysql_async::Value>]| -> Vec<Vec<mysql_async::Value>> {
            rows.iter()
                .filter(|row| !phids.contains(&row[1]))
                .cloned()
                .collect()
        };
        assert_eq!(untouched(&before).len(), before.len() - 3);
        assert_eq!(untouched(&after), untouched(&before));

        // Requeued rows are queued now: a second run selects none of them.
        let again = on_db(
            &db,
            &[
                "requeue", "--hook", HOOK_A, "--error", "http/5xx", "--apply", "--json",
            ],
        )
        .await;
        assert_eq!(again.status, 0, "{again:?}");
        let doc: Value = again.json();
        assert_eq!(doc["apply"], true);
        assert_eq!(doc["selected"], 0);
        assert_eq!(doc["requeued"], 0);
    })
    .await;
}

#[tokio::test]
async fn help_says_requeue_is_the_only_command_that_writes() {
    let top = run(&env(&[]), &["--help"]).await;
    assert!(
        top.stdout
            .contains("except `requeue --apply`, the one command that writes"),
        "{}",
        top.stdout
    );
    let own = run(&env(&[]), &["requeue", "--help"]).await;
    assert!(
        own.stdout
            .contains("This is the only webhook-admin command that writes, and only with --apply."),
        "{}",
        own.stdout
    );
    for command in ["stats", "hooks", "explain", "payload", "doctor"] {
        let help = run(&env(&[]), &[command, "--help"]).await;
        assert!(
            help.stdout.contains("This command only ever SELECTs"),
            "{command}: {}",
            help.stdout
        );
    }
}
