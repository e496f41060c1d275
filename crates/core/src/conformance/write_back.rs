//! Conformance cases for the write-back: every column set, the version
//! advanced even in the claim's second, the guard on the claim's version,
//! and `properties` stored byte for byte.

use crate::memory_store::NewRequest;
use crate::model::{LastResult, RequestStatus};
use crate::outcome::ResultWrite;
use crate::store::Written;

use super::{claimed_ahead_of_the_clock, request, sent_write, TestBed, HOOK};

pub(super) async fn write_result_sets_every_column(bed: &dyn TestBed) {
    let now = bed.now().await;
    let id = bed.insert_request(&request(HOOK, now - 50, now - 50)).await;
    let before = bed.row(id).await;
    let write = sent_write(id, now - 50, now);
    assert_eq!(
        bed.store().write_result(&write).await.expect("write"),
        Written::Yes
    );
    let after = bed.row(id).await;
    assert_eq!(after.status, RequestStatus::Sent);
    assert_eq!(after.last_request_result, LastResult::Okay);
    assert_eq!(after.last_request_epoch, now);
    assert_eq!(after.date_modified, now);
    assert_eq!(after.properties, write.properties);
    assert_eq!(
        (
            after.phid,
            after.webhook_phid,
            after.object_phid,
            after.date_created
        ),
        (
            before.phid,
            before.webhook_phid,
            before.object_phid,
            before.date_created
        )
    );
}

pub(super) async fn write_in_the_claim_second_still_advances_the_version(bed: &dyn TestBed) {
    let (id, ahead) = claimed_ahead_of_the_clock(bed).await;
    let write = ResultWrite {
        id,
        expected_version: ahead + 1,
        status: RequestStatus::Queued,
        last_request_result: LastResult::Fail,
        last_request_epoch: ahead,
        date_modified: ahead,
        properties: r#"{"retry":"forever","errorType":"http","errorCode":500}"#.to_owned(),
    };
    bed.store().write_result(&write).await.expect("write");
    let row = bed.row(id).await;
    assert_eq!(
        row.date_modified,
        ahead + 2,
        "GREATEST(dateModified + 1, now)"
    );
    assert!(!row.is_fresh(), "a failed row must not look fresh");
    assert_eq!(row.last_request_epoch, ahead);
}

pub(super) async fn guarded_write_lands_only_on_an_untouched_row(bed: &dyn TestBed) {
    let now = bed.now().await;
    let id = bed.insert_request(&request(HOOK, now, now)).await;
    let write = |expected| ResultWrite {
        id,
        expected_version: expected,
        status: RequestStatus::Failed,
        last_request_result: LastResult::None,
        last_request_epoch: 0,
        date_modified: now,
        properties: r#"{"errorType":"hook","errorCode":"disabled"}"#.to_owned(),
    };
    assert_eq!(
        bed.store()
            .write_result(&write(now - 1))
            .await
            .expect("write"),
        Written::Skipped
    );
    assert_eq!(bed.row(id).await.status, RequestStatus::Queued);
    assert_eq!(
        bed.store().write_result(&write(now)).await.expect("write"),
        Written::Yes
    );
    assert_eq!(bed.row(id).await.status, RequestStatus::Failed);
    // No longer queued: a second guarded write is skipped.
    assert_eq!(
        bed.store().write_result(&write(now)).await.expect("write"),
        Written::Skipped
    );
}

pub(super) async fn properties_text_is_stored_verbatim(bed: &dyn TestBed) {
    let now = bed.now().await;
    let text = "{\"a\":\"\\u00e9\",\"b\":\"\u{e9}\u{1F600}\",\"c\":{\"0\":1}}";
    let id = bed
        .insert_request(&NewRequest {
            properties: text.to_owned(),
            ..request(HOOK, now, now)
        })
        .await;
    assert_eq!(bed.row(id).await.properties, text);
    let write = ResultWrite {
        id,
        expected_version: now,
        status: RequestStatus::Queued,
        last_request_result: LastResult::Fail,
        last_request_epoch: now,
        date_modified: now,
        properties: text.replace('c', "d"),
    };
    bed.store().write_result(&write).await.expect("write");
    assert_eq!(bed.row(id).await.properties, write.properties);
}
