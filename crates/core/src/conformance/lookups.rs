//! Conformance cases for the reads the dispatcher judges by: the breaker's
//! count within its window, the hook lookup and the queue's counts.

use crate::memory_store::NewRequest;
use crate::model::{LastResult, RequestStatus};
use crate::store::QueueStats;

use super::{hook, request, TestBed, HOOK, OTHER_HOOK};

pub(super) async fn breaker_counts_failed_rows_in_the_window(bed: &dyn TestBed) {
    let now = bed.now().await;
    let failed_at = |epoch, result| NewRequest {
        last_request_result: result,
        last_request_epoch: epoch,
        ..request(HOOK, now - 1_000, now - 1_000)
    };
    bed.insert_request(&failed_at(now - 10, LastResult::Fail))
        .await;
    bed.insert_request(&failed_at(now - 300, LastResult::Fail))
        .await;
    bed.insert_request(&failed_at(now - 301, LastResult::Fail))
        .await;
    bed.insert_request(&failed_at(now - 5, LastResult::Okay))
        .await;
    // Hook-configuration failures (none / epoch 0) never count.
    bed.insert_request(&NewRequest {
        status: RequestStatus::Failed,
        ..failed_at(0, LastResult::None)
    })
    .await;
    bed.insert_request(&NewRequest {
        webhook_phid: OTHER_HOOK.to_owned(),
        ..failed_at(now - 1, LastResult::Fail)
    })
    .await;
    let count = bed
        .store()
        .breaker_failures(HOOK, now - 300)
        .await
        .expect("count");
    assert_eq!(count, 2, "window start is inclusive, rows not attempts");
}

pub(super) async fn hook_lookup_returns_the_row_or_nothing(bed: &dyn TestBed) {
    let stored = hook(HOOK, "firehose");
    bed.insert_hook(&stored).await;
    assert_eq!(bed.store().hook(HOOK).await.expect("lookup"), Some(stored));
    assert_eq!(bed.store().hook(OTHER_HOOK).await.expect("lookup"), None);
}

pub(super) async fn stats_count_rows_and_active_hooks(bed: &dyn TestBed) {
    let now = bed.now().await;
    for (status, n) in [
        (RequestStatus::Queued, 3),
        (RequestStatus::Sent, 2),
        (RequestStatus::Failed, 1),
    ] {
        for _ in 0..n {
            bed.insert_request(&NewRequest {
                status,
                ..request(HOOK, now, now)
            })
            .await;
        }
    }
    bed.insert_hook(&hook(HOOK, "enabled")).await;
    bed.insert_hook(&hook(OTHER_HOOK, "disabled")).await;
    bed.insert_hook(&hook("PHID-HWBH-conformanceccccccccc", "firehose"))
        .await;
    assert_eq!(
        bed.counts().stats().await.expect("stats"),
        QueueStats {
            queued: 3,
            sent: 2,
            failed: 1,
            active_hooks: 2
        }
    );
    assert_eq!(bed.counts().hook_count().await.expect("count"), 3);
}
