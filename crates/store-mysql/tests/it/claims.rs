//! The claim protocol across real sessions: two stores (two pools, as two
//! daemon instances would have) racing for one version, and the three
//! windows as the SQL sees them after real write-backs.

use webhook_core::attempt_write;
use webhook_core::memory_store::NewRequest;
use webhook_core::windows::{Settings, Windows};
use webhook_core::{
    CandidateQuery, Claim, DeliveryResult, LastResult, Properties, QueueCounts, RequestStatus,
    Store, Written,
};

use crate::fixture::{with_db, TestDb};
use mysql_async::prelude::Queryable;

const HOOK: &str = "PHID-HWBH-claimsaaaaaaaaaaaaaa";

fn windows() -> Windows {
    // Defaults: lease 30 s (raised to the 15 s timeout: still 30), backoff 60 s.
    Windows::try_new(Settings::default()).expect("default settings")
}

fn query(now: u64) -> CandidateQuery {
    CandidateQuery {
        cutoffs: windows().cutoffs(now),
        limit: 100,
        exclude_hooks: Vec::new(),
    }
}

async fn candidate_ids(store: &dyn Store, now: u64) -> Vec<u64> {
    store
        .candidates(&query(now))
        .await
        .expect("candidates")
        .into_iter()
        .map(|row| row.id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_racing_for_one_version_have_exactly_one_winner() {
    with_db(|db| async move {
        let (a, b) = (db.store(), db.store());
        // Warm both pools so the race is two bare round trips.
        a.hook_count().await.expect("warm a");
        b.hook_count().await.expect("warm b");
        for round in 0..50 {
            // Inserted with the server's clock and claimed at once: the claim
            // happens in the row's creation second more often than not.
            let id = db
                .insert_request(&NewRequest::queued(HOOK, r#"{"retry":"forever"}"#))
                .await;
            let seen = db.row(id).await;
            assert!(seen.is_fresh());
            let (ra, rb) = (a.clone(), b.clone());
            let version = seen.date_modified;
            let first = tokio::spawn(async move { ra.claim(id, version).await });
            let second = tokio::spawn(async move { rb.claim(id, version).await });
            let outcomes = [
                first.await.expect("task a").expect("claim a"),
                second.await.expect("task b").expect("claim b"),
            ];
            let winners = outcomes
                .iter()
                .filter(|c| matches!(c, Claim::Won(_)))
                .count();
            assert_eq!(winners, 1, "round {round}: {outcomes:?}");

            let claimed = db.row(id).await;
            assert!(
                claimed.date_modified > version,
                "round {round}: the claim must move the version"
            );
            assert!(
                !claimed.is_fresh(),
                "round {round}: claimed rows never look fresh"
            );
            assert_eq!(a.claim(id, version).await.expect("late a"), Claim::Lost);
            assert_eq!(b.claim(id, version).await.expect("late b"), Claim::Lost);
            // Clean up so the next round's row is the only candidate.
            db.exec(&format!(
                "UPDATE herald_webhookrequest SET status = 'sent' WHERE id = {id}"
            ))
            .await;
        }
        a.disconnect().await.expect("close a");
        b.disconnect().await.expect("close b");
    })
    .await;
}

#[tokio::test]
async fn an_abandoned_claim_is_taken_over_after_the_lease() {
    with_db(|db| async move {
        let (crashed, survivor) = (db.store(), db.store());
        let now = db.now().await;
        let id = db
            .insert_request(&NewRequest {
                date_created: Some(now - 100),
                date_modified: Some(now - 100),
                ..NewRequest::queued(HOOK, "{}")
            })
            .await;
        let claimed = crashed.claim(id, now - 100).await.expect("claim");
        let version = db.row(id).await.date_modified;
        assert_eq!(claimed, Claim::Won(version));
        assert!(version >= now);
        // The claimer dies without writing anything back.
        drop(crashed);
        let lease = windows().lease_secs();
        assert!(candidate_ids(&survivor, version + lease - 1)
            .await
            .is_empty());
        assert_eq!(candidate_ids(&survivor, version + lease).await, vec![id]);
        let taken = survivor.claim(id, version).await.expect("take over");
        let newer = db.row(id).await.date_modified;
        assert!(newer > version);
        assert_eq!(taken, Claim::Won(newer));
    })
    .await;
}

#[tokio::test]
async fn a_failed_attempt_waits_out_lease_and_backoff_after_a_real_write_back() {
    with_db(|db| async move {
        let store = db.store();
        let id = db
            .insert_request(&NewRequest::queued(HOOK, r#"{"retry":"forever"}"#))
            .await;
        let row = db.row(id).await;
        let Claim::Won(version) = store.claim(id, row.date_modified).await.expect("claim") else {
            panic!("claim won");
        };
        // The daemon's clock may lag the server's: write at the row's
        // creation second, the worst case for the version.
        let at = row.date_created;
        let properties = Properties::parse(&row.properties).expect("properties");
        let (write, _) = attempt_write(
            id,
            version,
            &properties,
            &DeliveryResult::Response { status: 503 },
            at,
        )
        .expect("a response is written");
        assert_eq!(
            store.write_result(&write).await.expect("write"),
            Written::Yes
        );

        let failed = db.row(id).await;
        assert_eq!(failed.status, RequestStatus::Queued);
        assert_eq!(failed.last_request_result, LastResult::Fail);
        // Stamped like its version (the claim's second + 1 here), so the
        // row reads as answered, not as a claim in flight.
        assert_eq!(failed.last_request_epoch, failed.date_modified);
        assert!(failed.last_request_epoch > at);
        assert!(
            failed.date_modified > failed.date_created,
            "must not look fresh"
        );

        let w = windows();
        let earliest = (failed.date_modified + w.lease_secs())
            .max(failed.last_request_epoch + w.settings().retry_backoff_secs);
        assert!(earliest >= at + w.effective_retry_spacing_secs());
        assert!(candidate_ids(&store, earliest - 1).await.is_empty());
        assert_eq!(candidate_ids(&store, earliest).await, vec![id]);
    })
    .await;
}

#[tokio::test]
async fn the_breaker_counts_rows_not_attempts() {
    with_db(|db| async move {
        let store = db.store();
        let now = db.now().await;
        let fail_once = |id, version| {
            attempt_write(
                id,
                version,
                &Properties::parse(r#"{"retry":"forever"}"#).expect("properties"),
                &DeliveryResult::Timeout,
                now,
            )
            .expect("a timeout is written")
            .0
        };
        // One row failing three times…
        let stubborn = db.insert_request(&NewRequest::queued(HOOK, "{}")).await;
        for _ in 0..3 {
            let version = db.row(stubborn).await.date_modified;
            let written = store
                .write_result(&fail_once(stubborn, version))
                .await
                .expect("write");
            assert_eq!(written, Written::Yes);
        }
        assert_eq!(
            store
                .breaker_failures(HOOK, now - 300)
                .await
                .expect("count"),
            1
        );
        // …then two more rows failing once each.
        for _ in 0..2 {
            let id = db.insert_request(&NewRequest::queued(HOOK, "{}")).await;
            let version = db.row(id).await.date_modified;
            store
                .write_result(&fail_once(id, version))
                .await
                .expect("write");
        }
        assert_eq!(
            store
                .breaker_failures(HOOK, now - 300)
                .await
                .expect("count"),
            3
        );
        // The window start is inclusive; rows slide out after it.
        let latest = all_epochs(&db).await.into_iter().max().unwrap_or(0);
        let earliest = all_epochs(&db).await.into_iter().min().unwrap_or(0);
        assert_eq!(
            store.breaker_failures(HOOK, earliest).await.expect("count"),
            3
        );
        assert_eq!(
            store
                .breaker_failures(HOOK, latest + 1)
                .await
                .expect("count"),
            0
        );
        assert_eq!(
            store
                .breaker_failures("PHID-HWBH-someoneelseaaaaaaaa", now - 300)
                .await
                .expect("count"),
            0
        );
    })
    .await;
}

#[tokio::test]
async fn several_excluded_hooks_are_left_out() {
    with_db(|db| async move {
        let store = db.store();
        let now = db.now().await;
        let hooks = [
            "PHID-HWBH-excludeaaaaaaaaaaaa",
            "PHID-HWBH-excludebbbbbbbbbbbb",
            "PHID-HWBH-excludecccccccccccc",
        ];
        let mut ids = Vec::new();
        for hook in hooks {
            ids.push(db.insert_request(&NewRequest::queued(hook, "{}")).await);
        }
        let mut q = query(now);
        q.exclude_hooks = vec![hooks[0].to_owned(), hooks[2].to_owned()];
        let found: Vec<u64> = store
            .candidates(&q)
            .await
            .expect("candidates")
            .into_iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(found, vec![ids[1]]);
        q.exclude_hooks = hooks.iter().map(|h| (*h).to_owned()).collect();
        assert!(store.candidates(&q).await.expect("candidates").is_empty());
    })
    .await;
}

/// Every row's `lastRequestEpoch`.
async fn all_epochs(db: &TestDb) -> Vec<u64> {
    let mut conn = db.conn().await;
    conn.query("SELECT lastRequestEpoch FROM herald_webhookrequest")
        .await
        .expect("epochs")
}
