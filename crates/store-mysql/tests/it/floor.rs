//! The scan floor on Phorge's stock schema (no `key_status`): after the
//! first poll over the retained rows, idle polls read from the end of the
//! table, the walk catches up with rows it has not seen a bounded number
//! at a time, a row set back to `queued` by hand is found by the next
//! rescan, a row `webhook-admin requeue` put back below the frontier by
//! the floor's look within its period, and the conformance suite holds
//! there too. Checked with the
//! store's frontier and `EXPLAIN`, never with wall time.

use mysql_async::prelude::Queryable;
use mysql_async::{Row, Value};
use webhook_core::memory_store::NewRequest;
use webhook_core::windows::Cutoffs;
use webhook_core::{CandidateQuery, RequestStatus, Store, UnixTime};
use webhook_store_mysql::{
    sql, MysqlRequeue, MysqlStore, Requeued, GAP_GRACE, LOOK_EVERY, LOOK_WINDOW, RESCAN_EVERY,
};

use crate::fixture::{config, with_db, TestDb};

const HOOK: &str = "PHID-HWBH-flooraaaaaaaaaaaaaaaa";

async fn drop_key_status(db: &TestDb) {
    db.exec("ALTER TABLE herald_webhookrequest DROP INDEX key_status")
        .await;
}

/// `count` `sent` rows created at `created`, in one statement.
async fn retain(db: &TestDb, count: u64, created: UnixTime) {
    db.exec(&format!(
        "INSERT INTO herald_webhookrequest (phid, webhookPHID, objectPHID, status, properties, \
         lastRequestResult, lastRequestEpoch, dateCreated, dateModified) \
         SELECT CONCAT('PHID-HWBR-floor', {created}, '-', seq), '{HOOK}', 'PHID-TASK-floor', \
                'sent', '{{}}', 'okay', {created}, {created}, {created} \
           FROM seq_1_to_{count}"
    ))
    .await;
}

async fn max_id(db: &TestDb) -> u64 {
    db.conn()
        .await
        .query_first::<u64, _>("SELECT MAX(id) FROM herald_webhookrequest")
        .await
        .expect("max id")
        .expect("a row")
}

/// Rows with ids in `[from, to)`.
async fn rows_between(db: &TestDb, from: u64, to: u64) -> u64 {
    db.conn()
        .await
        .exec_first::<u64, _, _>(
            "SELECT COUNT(*) FROM herald_webhookrequest WHERE id >= ? AND id < ?",
            (from, to),
        )
        .await
        .expect("count")
        .expect("a row")
}

fn query(now: UnixTime) -> CandidateQuery {
    CandidateQuery {
        cutoffs: Cutoffs {
            now,
            lease_cutoff: now - 30,
            retry_cutoff: now - 60,
        },
        limit: 100,
        exclude_hooks: Vec::new(),
    }
}

async fn candidate_ids(store: &MysqlStore, now: UnixTime) -> Vec<u64> {
    ids_found(store, &query(now)).await
}

async fn ids_found(store: &MysqlStore, query: &CandidateQuery) -> Vec<u64> {
    store
        .candidates(query)
        .await
        .expect("candidate query")
        .into_iter()
        .map(|row| row.id)
        .collect()
}

#[tokio::test]
async fn idle_polls_on_the_stock_schema_read_from_the_end_of_the_table() {
    with_db(|db| async move {
        drop_key_status(&db).await;
        let now = db.now().await;
        retain(&db, 20_000, now - 86_400).await;
        let store = db.store();
        assert_eq!(store.scan_floor(), 0, "nothing known before the first poll");
        assert!(candidate_ids(&store, now).await.is_empty());
        let end = max_id(&db).await + 1;
        assert_eq!(store.scan_floor(), end, "the first poll's rescan");
        assert!(candidate_ids(&store, now).await.is_empty());
        assert_eq!(store.scan_floor(), end);

        // 20,000 more, created since the rescan: the walk passes them, at
        // most a few thousand a poll, until it reaches the end again. (An
        // INSERT … SELECT leaves an id gap before its rows; created a grace
        // ago, the walk may step over it.)
        retain(&db, 20_000, now - GAP_GRACE).await;
        let end = max_id(&db).await + 1;
        let mut polls = 0;
        while store.scan_floor() < end {
            let before = store.scan_floor();
            assert!(candidate_ids(&store, now).await.is_empty());
            let passed = rows_between(&db, before, store.scan_floor()).await;
            assert!(passed > 0 && passed <= 4_096, "passed {passed} rows");
            polls += 1;
            assert!(polls <= 10, "the walk stalled at {}", store.scan_floor());
        }
        assert_eq!(store.scan_floor(), end);

        let fresh = db.insert_request(&NewRequest::queued(HOOK, "{}")).await;
        assert_eq!(candidate_ids(&store, now).await, vec![fresh]);
        store.disconnect().await.expect("close pool");
    })
    .await;
}

#[tokio::test]
async fn the_floored_statement_is_a_short_primary_key_range_without_key_status() {
    with_db(|db| async move {
        drop_key_status(&db).await;
        let now = db.now().await;
        retain(&db, 20_000, now - 86_400).await;
        db.exec("ANALYZE TABLE herald_webhookrequest").await;
        let end = max_id(&db).await + 1;
        let mut conn = db.conn().await;
        for below in [vec![], vec![5u64, 17]] {
            let mut params = vec![Value::from(4096u64), Value::from(end)];
            params.extend(below.iter().map(|id| Value::from(*id)));
            params.extend([now - 30, now - 60, 100].map(Value::from));
            let statement = sql::candidate_sql_above_floor(0, below.len(), 0);
            let mut plan: Vec<Row> = conn
                .exec(format!("EXPLAIN {statement}"), params)
                .await
                .expect("EXPLAIN");
            let row = &mut plan[0];
            let key: Option<String> = row.take("key").expect("key");
            let rows: Option<u64> = row.take("rows").expect("rows");
            let extra: Option<String> = row.take("Extra").expect("Extra");
            assert_eq!(key.as_deref(), Some("PRIMARY"), "{extra:?}");
            assert!(rows.unwrap_or(0) < 100, "estimate {rows:?} rows");
            assert!(!extra.unwrap_or_default().contains("filesort"));
        }
        // The rebuild's safe point: one entry read backwards on key_collect.
        let mut plan: Vec<Row> = conn
            .exec(
                format!("EXPLAIN {}", sql::FLOOR_SAFE_POINT),
                (now - GAP_GRACE,),
            )
            .await
            .expect("EXPLAIN");
        let row = &mut plan[0];
        let key: Option<String> = row.take("key").expect("key");
        let extra: Option<String> = row.take("Extra").expect("Extra");
        assert_eq!(key.as_deref(), Some("key_collect"), "{extra:?}");
        assert!(!extra.unwrap_or_default().contains("filesort"));
    })
    .await;
}

#[tokio::test]
async fn a_row_queued_again_by_hand_below_the_floor_is_found_by_the_next_rescan() {
    with_db(|db| async move {
        drop_key_status(&db).await;
        let now = db.now().await;
        retain(&db, 2_000, now - 86_400).await;
        let store = db.store();
        assert!(candidate_ids(&store, now).await.is_empty());
        db.exec("UPDATE herald_webhookrequest SET status = 'queued' WHERE id = 10")
            .await;
        // Below the frontier and not remembered: unseen until the rescan
        // (documented: within one rescan period).
        assert!(candidate_ids(&store, now).await.is_empty());
        assert_eq!(
            candidate_ids(&store, now + RESCAN_EVERY).await,
            vec![10],
            "the rescan finds it"
        );
        store.disconnect().await.expect("close pool");
    })
    .await;
}

/// Candidates at `now` with every claim lease already over, so what is
/// found depends on the floor alone.
async fn candidate_ids_leases_over(store: &MysqlStore, now: UnixTime) -> Vec<u64> {
    let query = CandidateQuery {
        cutoffs: Cutoffs {
            now,
            lease_cutoff: now + RESCAN_EVERY,
            retry_cutoff: now,
        },
        ..query(now)
    };
    ids_found(store, &query).await
}

#[tokio::test]
async fn a_requeued_row_below_the_floor_is_found_by_the_look_within_its_period() {
    with_db(|db| async move {
        drop_key_status(&db).await;
        let now = db.now().await;
        retain(&db, 2_000, now - 86_400).await;
        db.insert_hook(&webhook_core::Hook {
            phid: HOOK.to_owned(),
            name: "floor".to_owned(),
            uri: "http://127.0.0.1:9/".to_owned(),
            status: "enabled".to_owned(),
            hmac_key: "abcdefghijklmnopqrstuvwxyz234567".to_owned(),
        })
        .await;
        db.exec(&format!(
            "UPDATE herald_webhookrequest SET status = 'failed', lastRequestResult = 'fail', \
             lastRequestEpoch = {} WHERE id = 10",
            now - 3_600
        ))
        .await;
        let store = db.store();
        assert!(candidate_ids_leases_over(&store, now).await.is_empty());
        assert!(store.scan_floor() > 10, "row 10 is below the frontier");

        let writer = MysqlRequeue::new(&config(&db.namespace)).expect("valid config");
        let failed = db.row(10).await;
        assert_eq!(
            writer.requeue(&failed).await.expect("requeue"),
            Requeued::Yes
        );

        // Not at every poll: within the look's period the floor does not
        // know the row yet.
        assert!(candidate_ids_leases_over(&store, now + LOOK_EVERY - 1)
            .await
            .is_empty());
        assert_eq!(
            candidate_ids_leases_over(&store, now + LOOK_EVERY).await,
            vec![10],
            "the look finds it, long before the rescan at {}",
            now + RESCAN_EVERY
        );
        // Remembered in `below` from then on, like any queued row there.
        assert_eq!(
            candidate_ids_leases_over(&store, now + LOOK_EVERY + 1).await,
            vec![10]
        );
        writer.disconnect().await.expect("close pool");
        store.disconnect().await.expect("close pool");
    })
    .await;
}

/// `Handler_icp_attempts + Handler_read_next` of this session: index
/// entries the engine read.
async fn index_reads(conn: &mut mysql_async::Conn) -> u64 {
    let rows: Vec<(String, String)> = conn
        .query(
            "SHOW SESSION STATUS WHERE Variable_name IN \
             ('Handler_icp_attempts', 'Handler_read_next')",
        )
        .await
        .expect("SHOW SESSION STATUS");
    rows.iter()
        .map(|(_, value)| value.parse::<u64>().expect("a counter"))
        .sum()
}

#[tokio::test]
async fn the_look_reads_one_key_ratelimit_range_per_hook() {
    with_db(|db| async move {
        drop_key_status(&db).await;
        let now = db.now().await;
        retain(&db, 20_000, now - 86_400).await;
        // A week of hook errors (failed / none / epoch 0) of the same hook:
        // the rows a join's `ref` on (webhookPHID, lastRequestResult) reads.
        db.exec(&format!(
            "INSERT INTO herald_webhookrequest (phid, webhookPHID, objectPHID, status, \
             properties, lastRequestResult, lastRequestEpoch, dateCreated, dateModified) \
             SELECT CONCAT('PHID-HWBR-hookerr', seq), '{HOOK}', 'PHID-TASK-floor', 'failed', \
                    '{{}}', 'none', 0, {created}, {created} FROM seq_1_to_5000",
            created = now - 86_400
        ))
        .await;
        db.exec(&format!(
            "INSERT INTO herald_webhookrequest (phid, webhookPHID, objectPHID, status, \
             properties, lastRequestResult, lastRequestEpoch, dateCreated, dateModified) \
             SELECT CONCAT('PHID-HWBR-requeued', seq), '{HOOK}', 'PHID-TASK-floor', 'queued', \
                    '{{}}', 'none', {now}, {created}, {now} FROM seq_1_to_3",
            created = now - 86_400
        ))
        .await;
        db.exec("ANALYZE TABLE herald_webhookrequest").await;
        let end = max_id(&db).await + 1;
        let statement = sql::floor_requeued_sql(2);
        let params = || {
            vec![
                Value::from(HOOK),
                Value::from("PHID-HWBH-otheraaaaaaaaaaaaaaa"),
                Value::from(now - LOOK_WINDOW),
                Value::from(end),
                Value::from(1_024u64),
            ]
        };
        let mut conn = db.conn().await;
        let mut plan: Vec<Row> = conn
            .exec(format!("EXPLAIN {statement}"), params())
            .await
            .expect("EXPLAIN");
        let row = &mut plan[0];
        let kind: Option<String> = row.take("type").expect("type");
        let key: Option<String> = row.take("key").expect("key");
        let rows: Option<u64> = row.take("rows").expect("rows");
        let extra: Option<String> = row.take("Extra").expect("Extra");
        eprintln!("EXPLAIN: type={kind:?} key={key:?} rows={rows:?} extra={extra:?}");
        assert_eq!(kind.as_deref(), Some("range"));
        assert_eq!(key.as_deref(), Some("key_ratelimit"));
        assert!(rows.unwrap_or(u64::MAX) < 100, "estimate {rows:?} rows");

        let before = index_reads(&mut conn).await;
        let found: Vec<u64> = conn.exec(&statement, params()).await.expect("look");
        let read = index_reads(&mut conn).await - before;
        assert_eq!(found.len(), 3);
        assert!(read <= 10, "the look read {read} index entries for 3 rows");
    })
    .await;
}

/// While the wake-up probe's last reading of the highest id is below the
/// frontier, polls skip the walk (it could read nothing); a reading gone
/// stale misses nothing, as the candidate query covers every id from the
/// frontier up; each reading serves one poll, and one at or above the
/// frontier brings the walk back.
#[tokio::test]
async fn polls_skip_the_walk_while_the_probe_saw_nothing_above_the_frontier() {
    with_db(|db| async move {
        let now = db.now().await;
        for _ in 0..3 {
            db.insert_request(&NewRequest {
                status: RequestStatus::Sent,
                date_created: Some(now - 86_400),
                date_modified: Some(now - 86_400),
                ..NewRequest::queued(HOOK, "{}")
            })
            .await;
        }
        let store = db.store();
        assert!(candidate_ids(&store, now).await.is_empty());
        let end = max_id(&db).await + 1;
        assert_eq!(store.scan_floor(), end, "the first poll's rescan");
        assert_eq!(store.newest_id().await.expect("probe"), end - 1);

        let fresh = db.insert_request(&NewRequest::queued(HOOK, "{}")).await;
        assert_eq!(
            candidate_ids(&store, now).await,
            vec![fresh],
            "nothing missed"
        );
        assert_eq!(store.scan_floor(), end, "no walk on a stale reading");
        // A reading serves one poll: without a new one (the probe rests
        // while the binary log is followed) the next poll walks.
        assert_eq!(candidate_ids(&store, now).await, vec![fresh]);
        assert_eq!(store.scan_floor(), fresh + 1, "the walk passed the new row");

        let second = db.insert_request(&NewRequest::queued(HOOK, "{}")).await;
        assert_eq!(store.newest_id().await.expect("probe"), second);
        assert_eq!(candidate_ids(&store, now).await, vec![fresh, second]);
        assert_eq!(store.scan_floor(), second + 1, "a reading above walks");
        store.disconnect().await.expect("close pool");
    })
    .await;
}
