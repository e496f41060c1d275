//! The candidate query must stay an index range read on `key_status` while
//! Phorge retains a week of delivered rows: checked with `EXPLAIN` on the
//! store's exact statement text and with the server's own row-read
//! counters, never with wall time.

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row, Value};
use webhook_core::memory_store::NewRequest;
use webhook_store_mysql::sql;

use crate::fixture::{with_db, TestDb};

const HOOK: &str = "PHID-HWBH-indexesaaaaaaaaaaaaa";
const RETAINED: u64 = 200_000;

struct Plan {
    key: Option<String>,
    rows: u64,
    extra: String,
}

async fn explain(conn: &mut Conn, statement: &str, params: Vec<Value>) -> Plan {
    let mut found: Vec<Row> = conn
        .exec(format!("EXPLAIN {statement}"), params)
        .await
        .expect("EXPLAIN");
    assert_eq!(found.len(), 1, "one table, one plan row");
    let row = &mut found[0];
    Plan {
        key: row.take::<Option<String>, _>("key").expect("key column"),
        rows: row
            .take::<Option<u64>, _>("rows")
            .expect("rows column")
            .unwrap_or(0),
        extra: row
            .take::<Option<String>, _>("Extra")
            .expect("Extra column")
            .unwrap_or_default(),
    }
}

fn candidate_params(now: u64, excluded: &[&str]) -> Vec<Value> {
    let mut params = vec![
        Value::from(4096u64),
        Value::from(now - 30),
        Value::from(now - 60),
    ];
    params.extend(excluded.iter().map(|h| Value::from(*h)));
    params.push(Value::from(100u64));
    params
}

/// 200k `sent` rows (plus some `failed`) the way a busy week leaves them,
/// in one INSERT … SELECT over a generated sequence.
async fn retain_history(db: &TestDb, now: u64) {
    let digits = "(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 \
                  UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 \
                  UNION ALL SELECT 8 UNION ALL SELECT 9)";
    db.exec(&format!(
        "INSERT INTO herald_webhookrequest (phid, webhookPHID, objectPHID, status, properties, \
         lastRequestResult, lastRequestEpoch, dateCreated, dateModified) \
         SELECT CONCAT('PHID-HWBR-bulk', n), '{HOOK}', 'PHID-TASK-bulk', \
                IF(n % 50 = 0, 'failed', 'sent'), '{{\"retry\":\"never\"}}', \
                IF(n % 50 = 0, 'fail', 'okay'), {epoch}, {epoch}, {epoch} \
           FROM (SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d \
                        + 100000 * g.d AS n \
                   FROM {digits} a, {digits} b, {digits} c, {digits} e, {digits} f, \
                        (SELECT 0 d UNION ALL SELECT 1) g) numbers",
        epoch = now - 3_600,
    ))
    .await;
    let count: u64 = db
        .conn()
        .await
        .query_first("SELECT COUNT(*) FROM herald_webhookrequest")
        .await
        .expect("count")
        .expect("row");
    assert_eq!(count, RETAINED);
}

/// Sum of the session's `Handler_read_*` counters: rows and index entries
/// the storage engine handed to the server.
async fn handler_reads(conn: &mut Conn) -> u64 {
    let rows: Vec<(String, u64)> = conn
        .query("SHOW SESSION STATUS LIKE 'Handler_read%'")
        .await
        .expect("SHOW STATUS");
    assert!(rows.len() >= 5, "{rows:?}");
    rows.into_iter().map(|(_, v)| v).sum()
}

#[tokio::test]
async fn candidate_query_uses_key_status() {
    with_db(|db| async move {
        let now = db.now().await;
        db.insert_request(&NewRequest::queued(HOOK, "{}")).await;
        let mut conn = db.conn().await;
        for excluded in [
            vec![],
            vec![
                "PHID-HWBH-xaaaaaaaaaaaaaaaaaaa",
                "PHID-HWBH-ybbbbbbbbbbbbbbbbbbb",
            ],
        ] {
            let plan = explain(
                &mut conn,
                &sql::candidate_sql(excluded.len()),
                candidate_params(now, &excluded),
            )
            .await;
            assert_eq!(plan.key.as_deref(), Some("key_status"), "{}", plan.extra);
            assert!(
                !plan.extra.contains("filesort"),
                "ORDER BY id must come from the index: {}",
                plan.extra
            );
        }
        let breaker = explain(
            &mut conn,
            sql::BREAKER_FAILURES,
            vec![Value::from(HOOK), Value::from(now - 300)],
        )
        .await;
        assert_eq!(breaker.key.as_deref(), Some("key_ratelimit"));
    })
    .await;
}

#[tokio::test]
async fn candidate_query_reads_few_rows_among_200k_retained() {
    with_db(|db| async move {
        let now = db.now().await;
        retain_history(&db, now).await;
        let mut queued = Vec::new();
        for _ in 0..5 {
            queued.push(db.insert_request(&NewRequest::queued(HOOK, "{}")).await);
        }
        let mut conn = db.conn().await;

        // The estimate alone proves little (a primary-key scan under LIMIT
        // also estimates 100 rows); the key and the counters below do.
        let plan = explain(
            &mut conn,
            &sql::candidate_sql(0),
            candidate_params(now, &[]),
        )
        .await;
        assert_eq!(plan.key.as_deref(), Some("key_status"));
        assert!(plan.rows < 1_000, "estimate {} rows", plan.rows);
        assert!(!plan.extra.contains("filesort"), "{}", plan.extra);

        // What the engine actually reads, on the exact statement the store
        // prepares. SHOW STATUS itself reads a handful of rows; a scan of the
        // retained history would read 200k.
        let statement = conn.prep(sql::candidate_sql(0)).await.expect("prepare");
        let baseline_before = handler_reads(&mut conn).await;
        let baseline_after = handler_reads(&mut conn).await;
        let show_status_cost = baseline_after - baseline_before;
        let before = handler_reads(&mut conn).await;
        let found: Vec<Row> = conn
            .exec(&statement, candidate_params(now, &[]))
            .await
            .expect("candidate query");
        let after = handler_reads(&mut conn).await;
        let ids: Vec<u64> = found
            .into_iter()
            .map(|mut r| r.take::<u64, _>(0).expect("id"))
            .collect();
        assert_eq!(ids, queued);
        let reads = after - before - show_status_cost;
        assert!(
            reads < 100,
            "the candidate query read {reads} rows/index entries with {RETAINED} rows retained"
        );

        // The statement the store runs, above its scan floor: from 0 (no
        // floor yet) it is the same dive into `key_status`; from a frontier
        // it stays a short range either way.
        let first_queued = queued[0];
        for (frontier, below) in [(0u64, vec![]), (first_queued, vec![7u64, 9])] {
            let mut params = vec![Value::from(4096u64), Value::from(frontier)];
            params.extend(below.iter().map(|id| Value::from(*id)));
            params.extend(candidate_params(now, &[]).into_iter().skip(1));
            let statement = sql::candidate_sql_above_floor(0, below.len(), 0);
            let plan = explain(&mut conn, &statement, params.clone()).await;
            if frontier == 0 {
                assert_eq!(plan.key.as_deref(), Some("key_status"), "{}", plan.extra);
            }
            assert!(plan.rows < 1_000, "estimate {} rows", plan.rows);
            assert!(!plan.extra.contains("filesort"), "{}", plan.extra);
            let prepared = conn.prep(&statement).await.expect("prepare");
            let before = handler_reads(&mut conn).await;
            let found: Vec<Row> = conn.exec(&prepared, params).await.expect("floored query");
            let after = handler_reads(&mut conn).await;
            assert_eq!(found.len(), queued.len());
            let reads = after - before - show_status_cost;
            assert!(
                reads < 100,
                "the floored query read {reads} with frontier {frontier}"
            );
        }

        // And through the store itself.
        let store = db.store();
        let rows = webhook_core::Store::candidates(
            &store,
            &webhook_core::CandidateQuery {
                cutoffs: webhook_core::windows::Cutoffs {
                    now,
                    lease_cutoff: now - 30,
                    retry_cutoff: now - 60,
                },
                limit: 100,
                exclude_hooks: Vec::new(),
            },
        )
        .await
        .expect("candidates");
        assert_eq!(rows.iter().map(|r| r.id).collect::<Vec<_>>(), queued);
    })
    .await;
}
