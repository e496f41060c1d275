//! A receiver's `Retry-After` end to end: the real daemon, the real
//! MariaDB and the recording receiver. Hook A answers its first call 429
//! with `Retry-After: 5`; its other rows reach it no sooner than 5 s
//! later, while hook B's rows are not held up.

use std::time::Duration;

use serde_json::Value;
use webhook_core::memory_store::NewRequest;
use webhook_core::vectors::KEY;
use webhook_core::{LastResult, RequestStatus};
use webhook_test_support::{with_db, Receiver, Recorded, Reply};

use crate::daemon::Daemon;
use crate::e2e::{add_hook, delivery_env, wait_log, wait_row};
use crate::support::{metrics, until};

const HOOK_A: &str = "PHID-HWBH-e2eretryafteraaaaaaa";
const HOOK_B: &str = "PHID-HWBH-e2eretryafterbbbbbbb";
const FOREVER: &str = r#"{"retry":"forever","triggerPHIDs":["PHID-HRUL-aaaaaaaaaaaaaaaaaaaa"]}"#;

fn to(receiver: &Receiver, path: &str) -> Vec<Recorded> {
    receiver
        .requests()
        .into_iter()
        .filter(|r| r.path == path)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_429_with_retry_after_5_that_hook_waits_5_s_and_others_do_not() {
    with_db(|db| async move {
        let receiver = Receiver::start().await;
        receiver.script("/a", [Reply::status(429).with_retry_after("5")]);
        add_hook(&db, HOOK_A, receiver.url("/a"), KEY).await;
        add_hook(&db, HOOK_B, receiver.url("/b"), KEY).await;
        let mut a_rows = Vec::new();
        for _ in 0..3 {
            a_rows.push(
                db.insert_request(&NewRequest::queued(HOOK_A, FOREVER))
                    .await,
            );
        }
        for _ in 0..3 {
            db.insert_request(&NewRequest::queued(HOOK_B, FOREVER))
                .await;
        }
        let daemon = Daemon::start("retry-after", &delivery_env(&db.namespace)).await;

        wait_log(&daemon, "event=\"hook_paused\"").await;
        let hooks = daemon.get("/api/webhook/hooks/state", &[]).await;
        let hooks: Value = serde_json::from_str(&hooks.text()).expect("JSON");
        let paused = &hooks["data"]["paused"];
        assert_eq!(paused[0]["hookPHID"], HOOK_A, "{hooks}");
        assert_eq!(paused[0]["reason"], "retry-after", "{hooks}");
        let first = wait_row(&db, &daemon, a_rows[0], "a failed attempt", |r| {
            r.last_request_result == LastResult::Fail
        })
        .await;
        assert_eq!(first.status, RequestStatus::Queued, "written as any 429");

        // A: three rows, the first tried again after its pause and spacing.
        until(&daemon, "every row received", async || {
            to(&receiver, "/a").len() >= 4 && to(&receiver, "/b").len() >= 3
        })
        .await;
        let (a, b) = (to(&receiver, "/a"), to(&receiver, "/b"));
        let throttled = a[0].at;
        assert_eq!(a[0].replied.map(|r| r.status), Some(429));
        for later in &a[1..] {
            assert!(
                later.at >= throttled + Duration::from_secs(5),
                "A called {:?} after its 429\n{}",
                later.at - throttled,
                daemon.log()
            );
        }
        // Not held up: all of B's rows arrive before A's pause ends (the
        // same run, so the bound does not depend on the machine's speed).
        let resumed = a[1].at;
        for row in &b {
            assert!(
                row.at < resumed,
                "B held up: {:?} after A's 429\n{}",
                row.at.saturating_sub(throttled),
                daemon.log()
            );
        }
        for id in &a_rows {
            wait_row(&db, &daemon, *id, "sent", |r| {
                r.status == RequestStatus::Sent
            })
            .await;
        }
        let text = metrics(&daemon).await;
        assert!(
            text.contains("gorge_webhook_retry_after_pauses_total 1\n"),
            "{text}"
        );
        until(&daemon, "the pause gauge back at 0", async || {
            metrics(&daemon)
                .await
                .contains("gorge_webhook_paused_hooks 0\n")
        })
        .await;
    })
    .await;
}
