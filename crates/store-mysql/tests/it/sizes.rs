//! Hostile sizes on the real server: a poll's rows are bounded in bytes
//! (large rows fetched alone, a prefix of the candidate order), a row wider
//! than the connection's `max_allowed_packet` is skipped and counted while
//! the rows behind it are returned, preserved unparseable properties fit the
//! packet on write-back, and a failing statement's error names the server's
//! code and message (never the password).

use webhook_core::memory_store::NewRequest;
use webhook_core::windows::Cutoffs;
use webhook_core::ORIGINAL_PROPERTIES_KEY;
use webhook_core::{hook_error_write, HookError};
use webhook_core::{
    CandidateQuery, Properties, QueueCounts, RequestRow, Store, StoreError, Written,
};
use webhook_store_mysql::{MysqlStore, POLL_BYTES_MAX};

use crate::fixture::{config, with_db, TestDb};

const HOOK: &str = "PHID-HWBH-sizesaaaaaaaaaaaaaaaa";

fn query(now: u64, limit: usize) -> CandidateQuery {
    CandidateQuery {
        cutoffs: Cutoffs {
            now,
            lease_cutoff: now - 30,
            retry_cutoff: now - 60,
        },
        limit,
        exclude_hooks: Vec::new(),
    }
}

/// A queued row whose properties are `{"pad":"xxx…"}`, `bytes` long, built
/// on the server.
async fn padded(db: &TestDb, bytes: u64) -> u64 {
    let id = db.insert_request(&NewRequest::queued(HOOK, "{}")).await;
    let pad = bytes - r#"{"pad":""}"#.len() as u64;
    db.exec(&format!(
        "UPDATE herald_webhookrequest SET properties = CONCAT('{{\"pad\":\"', REPEAT('x', {pad}), \
         '\"}}'), dateModified = dateCreated WHERE id = {id}"
    ))
    .await;
    id
}

fn ids(rows: &[RequestRow]) -> Vec<u64> {
    rows.iter().map(|r| r.id).collect()
}

#[tokio::test]
async fn a_poll_holds_a_bounded_number_of_bytes() {
    with_db(|db| async move {
        let store = db.store();
        let now = db.now().await;
        let small = db.insert_request(&NewRequest::queued(HOOK, "{}")).await;
        let mut big = Vec::new();
        for _ in 0..5 {
            big.push(padded(&db, 3 << 20).await);
        }
        let tail = db.insert_request(&NewRequest::queued(HOOK, "{}")).await;

        let rows = store.candidates(&query(now, 100)).await.expect("poll");
        // 6 MiB of the 8 MiB budget fit; the third 3 MiB row would not.
        assert_eq!(ids(&rows), vec![small, big[0], big[1]]);
        let total: usize = rows.iter().map(|r| r.properties.len()).sum();
        assert!(total as u64 <= POLL_BYTES_MAX, "{total}");
        assert_eq!(rows[1].properties.len(), 3 << 20);
        assert!(rows[1].properties.starts_with(r#"{"pad":"xxx"#));
        assert!(Properties::parse(&rows[2].properties).is_ok());
        assert!(!ids(&rows).contains(&tail));
    })
    .await;
}

#[tokio::test]
async fn a_first_row_over_the_budget_comes_alone() {
    with_db(|db| async move {
        let store = db.store();
        let now = db.now().await;
        let huge = padded(&db, 10 << 20).await;
        let _after = db.insert_request(&NewRequest::queued(HOOK, "{}")).await;
        let rows = store.candidates(&query(now, 100)).await.expect("poll");
        assert_eq!(ids(&rows), vec![huge]);
        assert_eq!(rows[0].properties.len(), 10 << 20);
    })
    .await;
}

/// Built with `REPEAT` up to the server's own `max_allowed_packet`: the
/// column alone is as large as a packet may be, so the row (and even the
/// column alone, with its length prefix) is larger, and the driver, which
/// takes the server's limit as its own, refuses it. Before, every poll
/// failed on it for ever ("database unavailable").
#[tokio::test]
async fn an_unreadable_row_is_skipped_and_counted_and_the_queue_moves() {
    with_db(|db| async move {
        let store = db.store();
        let now = db.now().await;
        let wide = db.insert_request(&NewRequest::queued(HOOK, "{}")).await;
        db.exec(&format!(
            "UPDATE herald_webhookrequest SET properties = REPEAT('x', @@max_allowed_packet), \
             dateModified = dateCreated WHERE id = {wide}"
        ))
        .await;
        let behind = db.insert_request(&NewRequest::queued(HOOK, "{}")).await;

        for poll in 1..=3u64 {
            let rows = store
                .candidates(&query(now, 10))
                .await
                .unwrap_or_else(|err| panic!("poll {poll}: {err}"));
            assert_eq!(ids(&rows), vec![behind], "poll {poll}");
            assert_eq!(store.rows_unreadable(), poll, "counted on every poll");
        }
        // The pool still works after the refused fetch.
        assert!(store.stats().await.is_ok());
    })
    .await;
}

#[tokio::test]
async fn a_row_changed_before_its_own_fetch_is_left_out() {
    with_db(|db| async move {
        let store = db.store();
        let now = db.now().await;
        let id = padded(&db, 1 << 20).await;
        let rows = store.candidates(&query(now, 10)).await.expect("poll");
        assert_eq!(ids(&rows), vec![id]);
        assert_eq!(rows[0].properties.len(), 1 << 20);
        // The version the fetch is guarded by is the one the query saw.
        let seen = rows[0].date_modified;
        db.exec(&format!(
            "UPDATE herald_webhookrequest SET dateModified = {} WHERE id = {id}",
            seen + 1
        ))
        .await;
        let after = store
            .candidates(&query(now + 1000, 10))
            .await
            .expect("poll");
        assert_eq!(after[0].date_modified, seen + 1);
    })
    .await;
}

/// 3 MB of control characters were kept as 18 MB of `\u0001` escapes, more
/// than the server accepts in one packet: the write-back failed six times
/// and the row was retried for ever.
#[tokio::test]
async fn preserved_unparseable_properties_fit_the_packet() {
    with_db(|db| async move {
        let store = db.store();
        let id = db.insert_request(&NewRequest::queued(HOOK, "{}")).await;
        let row = db.row(id).await;
        let original = "\u{1}".repeat(3_000_000);
        let kept = Properties::preserving_unparseable(&original);
        let write = hook_error_write(
            id,
            row.date_modified,
            &kept,
            HookError::InvalidProperties,
            row.date_modified,
        );
        assert_eq!(
            store.write_result(&write).await.expect("stored"),
            Written::Yes
        );
        let stored: serde_json::Value =
            serde_json::from_str(&db.row(id).await.properties).expect("JSON object");
        let text = stored[ORIGINAL_PROPERTIES_KEY].as_str().expect("kept");
        assert!(original.starts_with(text) && !text.is_empty());
        assert_eq!(stored["gorgeOriginalPropertiesTruncated"], 3_000_000);
        assert_eq!(stored["errorCode"], "invalid-properties");
    })
    .await;
}

/// The write-back's log line shows `error = %err`: it must say why the
/// server refused the statement, as its code and message.
#[tokio::test]
async fn a_failed_write_names_the_servers_code_and_message() {
    with_db(|db| async move {
        let store = db.store();
        let id = db.insert_request(&NewRequest::queued(HOOK, "{}")).await;
        let row = db.row(id).await;
        db.exec("RENAME TABLE herald_webhookrequest TO herald_webhookrequest_gone")
            .await;
        let props = Properties::parse("{}").expect("parses");
        let write = hook_error_write(
            id,
            row.date_modified,
            &props,
            HookError::InvalidProperties,
            row.date_modified,
        );
        let err = store.write_result(&write).await.expect_err("no table");
        let text = err.to_string();
        assert!(matches!(err, StoreError::Query(_)), "{text}");
        assert!(text.starts_with("database query failed: "), "{text}");
        assert!(
            text.contains("1146") && text.contains("doesn't exist"),
            "{text}"
        );
        db.exec("RENAME TABLE herald_webhookrequest_gone TO herald_webhookrequest")
            .await;
    })
    .await;
}

#[tokio::test]
async fn errors_never_show_the_password() {
    with_db(|db| async move {
        let mut bad = config(&db.namespace);
        bad.user = "nobody_sizes".into();
        bad.password = "hunter2-sizes-secret".into();
        let store = MysqlStore::new(&bad).expect("config");
        let err = store
            .candidates(&query(db.now().await, 1))
            .await
            .expect_err("access denied");
        let mut chain = format!("{err} {err:?}");
        let mut source = std::error::Error::source(&err);
        while let Some(cause) = source {
            chain.push_str(&format!(" {cause} {cause:?}"));
            source = cause.source();
        }
        assert!(!chain.contains("hunter2"), "{chain}");
    })
    .await;
}
