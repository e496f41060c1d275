//! Phorge edits a hook while the daemon is in the middle of delivering its
//! queue: the real daemon against MariaDB, the hook row changed with the
//! `UPDATE`s Phorge's edit form writes. Within the hook cache's bound
//! (5 s) no call goes to the hook as it was.

use std::time::Duration;

use webhook_core::memory_store::NewRequest;
use webhook_core::sign;
use webhook_test_support::{with_db, Receiver, Recorded, Reply, TestDb};

use crate::daemon::Daemon;
use crate::e2e::{add_hook, delivery_env, DEADLINE};
use crate::support::{wait_table, Stored};

const HOOK: &str = "PHID-HWBH-editsaaaaaaaaaaaaaaa";
const KEY: &str = "hookeditskeyaaaaaaaaaaaaaaaaaaaa";
const NEW_KEY: &str = "hookeditskeybbbbbbbbbbbbbbbbbbbb";
const ROWS: usize = 200;
/// The longest a call may follow Phorge's edit and still use the hook as
/// it was: the hook cache's bound, and a moment for the request to cross
/// loopback and the test's clock readings.
const BOUND: Duration = Duration::from_millis(5_500);

/// One hook with [`ROWS`] queued rows and a receiver answering after
/// 50 ms (a run of ten seconds), a daemon delivering them; returns once
/// 20 have been received.
async fn long_run(db: &TestDb, receiver: &Receiver) -> Daemon {
    add_hook(db, HOOK, receiver.url("/before"), KEY).await;
    for path in ["/before", "/after"] {
        receiver.always(path, Reply::status(200).after(Duration::from_millis(50)));
    }
    for n in 0..ROWS {
        db.insert_request(&NewRequest {
            object_phid: format!("PHID-TASK-edits{n:015}"),
            ..NewRequest::queued(HOOK, r#"{"retry":"never"}"#)
        })
        .await;
    }
    let daemon = Daemon::start("hook-edits", &delivery_env(&db.namespace)).await;
    receiver.wait_for(20, DEADLINE).await;
    daemon
}

fn no_row_queued(rows: &[Stored]) -> bool {
    rows.iter().all(|r| r.status != "queued")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_disabled_mid_run_gets_no_call_past_the_bound() {
    with_db(|db| async move {
        let receiver = Receiver::start().await;
        let daemon = long_run(&db, &receiver).await;
        db.exec(&format!(
            "UPDATE herald_webhook SET status = 'disabled' WHERE phid = '{HOOK}'"
        ))
        .await;
        let edited_at = receiver.now();
        let rows = wait_table(&db, &[&daemon], "no row queued", DEADLINE, no_row_queued).await;
        let receipts = receiver.requests();
        let last = receipts.iter().map(|r| r.at).max().unwrap_or_default();
        let after: Vec<Duration> = receipts
            .iter()
            .map(|r| r.at.saturating_sub(edited_at))
            .filter(|since| !since.is_zero())
            .collect();
        eprintln!(
            "hook edits: disabled after {} receipts; {} more, the last {:?} after the edit; {} rows failed",
            receipts.len() - after.len(),
            after.len(),
            last.saturating_sub(edited_at),
            rows.iter().filter(|r| r.status == "failed").count()
        );
        assert!(
            last <= edited_at + BOUND,
            "called {:?} after the hook was disabled\n{}",
            last - edited_at,
            daemon.log()
        );
        let failed: Vec<&Stored> = rows.iter().filter(|r| r.status == "failed").collect();
        assert!(!failed.is_empty(), "every row was sent before the edit took");
        for row in &failed {
            assert_eq!(
                (row.last_result.as_str(), row.last_epoch),
                ("none", 0),
                "{row:?}"
            );
            assert_eq!(row.outcome().3, "disabled", "{row:?}");
        }
        assert_eq!(failed.len() + receipts.len(), ROWS, "each row sent or failed once");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_moved_and_rekeyed_mid_run_is_called_only_as_it_is_now_past_the_bound() {
    with_db(|db| async move {
        let receiver = Receiver::start().await;
        let daemon = long_run(&db, &receiver).await;
        db.exec(&format!(
            "UPDATE herald_webhook SET webhookURI = '{}', hmacKey = '{NEW_KEY}' WHERE phid = '{HOOK}'",
            receiver.url("/after")
        ))
        .await;
        let edited_at = receiver.now();
        let rows = wait_table(&db, &[&daemon], "no row queued", DEADLINE, no_row_queued).await;
        assert!(rows.iter().all(|r| r.status == "sent"), "every row sent");
        let receipts = receiver.requests();
        assert_eq!(receipts.len(), ROWS, "each row once");
        let late: Vec<&Recorded> = receipts
            .iter()
            .filter(|r| r.at > edited_at + BOUND)
            .collect();
        assert!(!late.is_empty(), "the run ended before the bound");
        for receipt in &late {
            assert_eq!(receipt.path, "/after", "the old URI called {:?} after the edit", receipt.at - edited_at);
            assert_eq!(
                receipt.header("x-phabricator-webhook-signature"),
                Some(sign(NEW_KEY.as_bytes(), &receipt.body).as_str()),
                "not signed with the new key {:?} after the edit",
                receipt.at - edited_at
            );
            // The key grace: the old key's signature beside the new one.
            assert_eq!(
                receipt.header("x-phabricator-webhook-signature-previous"),
                Some(sign(KEY.as_bytes(), &receipt.body).as_str())
            );
        }
        let first_after = receipts
            .iter()
            .filter(|r| r.path == "/after")
            .map(|r| r.at)
            .min()
            .unwrap_or_default();
        eprintln!(
            "hook edits: moved and re-keyed; first call to the new URI {:?} after the edit, \
             {} calls after the bound, all to the new URI and signed with the new key",
            first_after.saturating_sub(edited_at),
            late.len()
        );
    })
    .await;
}
