//! Seeding Phorge's tables the way Phorge writes them: the bench's hooks
//! (`/hook/<i>` on the receiver), the queued backlog (and putting it back
//! to fresh `queued` rows after the baseline), single timed rows, retained
//! `sent` rows for the scale check, Maniphest's object rows, and the small
//! SQL helpers every phase reads the table with.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use webhook_store_mysql::object_tables;
use webhook_test_support::{ApplicationTables, TestDb};

use crate::phases::Enqueued;

/// Properties as Phorge stores them for a rule-triggered edit.
pub(crate) const PROPERTIES: &str =
    "{\"retry\":\"never\",\"transactionPHIDs\":{\"PHID-XACT-TASK-aaaaaaaaaaaaaaa\":\
\"PHID-XACT-TASK-aaaaaaaaaaaaaaa\"},\"triggerPHIDs\":[\"PHID-HRUL-abcdefghijklmnopqrst\"],\
\"silent\":false,\"test\":false,\"secure\":false}";

/// What the daemon writes back for a 2xx (only errorType/errorCode change).
pub(crate) const PROPERTIES_SENT: &str =
    "{\"retry\":\"never\",\"transactionPHIDs\":{\"PHID-XACT-TASK-aaaaaaaaaaaaaaa\":\
\"PHID-XACT-TASK-aaaaaaaaaaaaaaa\"},\"triggerPHIDs\":[\"PHID-HRUL-abcdefghijklmnopqrst\"],\
\"silent\":false,\"test\":false,\"secure\":false,\"errorType\":\"http\",\"errorCode\":200}";

/// Rows per multi-row INSERT while seeding.
pub(crate) const SEED_CHUNK: usize = 1_000;

/// The seeded backlog: its ids and their `dateModified`, in id order.
pub(crate) struct Backlog {
    pub(crate) rows: usize,
    pub(crate) first_id: u64,
    pub(crate) last_id: u64,
    pub(crate) ids: Vec<(u64, u64)>,
    /// How long the INSERTs took.
    pub(crate) seed_secs: f64,
}

impl Backlog {
    /// Inserts `rows` queued rows over `hooks` and reads back their ids.
    pub(crate) async fn seed(conn: &mut Conn, rows: usize, hooks: &[String]) -> Self {
        eprintln!("bench: seeding {rows} rows over {} hooks", hooks.len());
        let seeded_at = Instant::now();
        seed_backlog(conn, rows, hooks).await;
        let seed_secs = seeded_at.elapsed().as_secs_f64();
        let (first_id, last_id) = queued_range(conn).await;
        let ids: Vec<(u64, u64)> = conn
            .query::<(u64, u64), _>(format!(
                "SELECT id, dateModified FROM herald_webhookrequest \
                 WHERE id BETWEEN {first_id} AND {last_id} ORDER BY id"
            ))
            .await
            .expect("bench: read the seeded ids");
        assert_eq!(ids.len(), rows, "bench: seeded row count");
        Self {
            rows,
            first_id,
            last_id,
            ids,
            seed_secs,
        }
    }

    /// How many of the backlog's rows are not `sent`.
    pub(crate) async fn not_sent(&self, conn: &mut Conn) -> u64 {
        count(
            conn,
            &format!(
                "SELECT COUNT(*) FROM herald_webhookrequest WHERE id BETWEEN {} AND {} \
                 AND status <> 'sent'",
                self.first_id, self.last_id
            ),
        )
        .await
    }

    /// Back to fresh queued rows: exactly what Phorge inserted.
    pub(crate) async fn reset(&self, conn: &mut Conn) {
        conn.exec_drop(
            "UPDATE herald_webhookrequest SET status = 'queued', lastRequestResult = 'none', \
             lastRequestEpoch = 0, dateModified = dateCreated, properties = ? \
             WHERE id BETWEEN ? AND ?",
            (PROPERTIES, self.first_id, self.last_id),
        )
        .await
        .expect("bench: reset the backlog");
        let queued = count(
            conn,
            "SELECT COUNT(*) FROM herald_webhookrequest WHERE status = 'queued'",
        )
        .await;
        assert_eq!(queued as usize, self.rows, "bench: rows queued after reset");
    }

    /// Every backlog object, expected once.
    pub(crate) fn expected(&self) -> HashMap<String, Enqueued> {
        (0..self.rows)
            .map(|i| (backlog_object(i), Enqueued::Backlog))
            .collect()
    }
}

/// Maniphest's tables beside the bench's herald database, with an object
/// row for every request's task made by a trigger as the request is
/// inserted (by whichever phase inserts it), and the transaction the rows
/// list on one of them.
pub(crate) async fn mirror_objects(db: &TestDb) -> ApplicationTables {
    let tables = object_tables("TASK").expect("bench: tasks are mapped");
    let apps = ApplicationTables::create(&db.namespace, tables).await;
    db.exec(&format!(
        "CREATE TRIGGER bench_objects AFTER INSERT ON herald_webhookrequest FOR EACH ROW \
         INSERT IGNORE INTO {} (phid, dateCreated, dateModified) \
         VALUES (NEW.objectPHID, NEW.dateCreated, NEW.dateCreated)",
        apps.object_table()
    ))
    .await;
    apps.apply(&backlog_object(0), &["PHID-XACT-TASK-aaaaaaaaaaaaaaa"])
        .await;
    apps
}

pub(crate) fn hook_phid(i: usize) -> String {
    format!("PHID-HWBH-{i:020}")
}

pub(crate) fn backlog_object(i: usize) -> String {
    format!("PHID-TASK-bl{i:018}")
}

/// Inserts `n` enabled hooks, `/hook/<i>` on the receiver; returns PHIDs.
pub(crate) async fn insert_hooks(db: &TestDb, n: usize, receiver: SocketAddr) -> Vec<String> {
    let mut conn = db.conn().await;
    let phids: Vec<String> = (0..n).map(hook_phid).collect();
    for chunk in (0..n).collect::<Vec<_>>().chunks(SEED_CHUNK) {
        let mut sql = String::from(
            "INSERT INTO herald_webhook (phid, name, webhookURI, viewPolicy, editPolicy, \
             status, hmacKey, dateCreated, dateModified) VALUES ",
        );
        for (k, i) in chunk.iter().enumerate() {
            if k > 0 {
                sql.push(',');
            }
            let _ = write!(
                sql,
                "('{}', 'bench hook {i}', 'http://{receiver}/hook/{i}', 'users', 'admin', \
                 'enabled', 'abcdefghijklmnopqrstuvwxyz234567', UNIX_TIMESTAMP(), UNIX_TIMESTAMP())",
                phids[*i]
            );
        }
        conn.query_drop(sql).await.expect("bench: insert hooks");
    }
    phids
}

/// `n` fresh queued rows, round-robin over the hooks, as Phorge inserts
/// them (`dateModified = dateCreated`), in multi-row INSERTs.
pub(crate) async fn seed_backlog(conn: &mut Conn, n: usize, hooks: &[String]) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(SEED_CHUNK) {
        let mut sql = String::from(
            "INSERT INTO herald_webhookrequest (phid, webhookPHID, objectPHID, status, \
             properties, lastRequestResult, lastRequestEpoch, dateCreated, dateModified) VALUES ",
        );
        for (k, i) in chunk.iter().enumerate() {
            if k > 0 {
                sql.push(',');
            }
            let _ = write!(
                sql,
                "('PHID-HWBR-bl{i:018}', '{}', '{}', 'queued', '{PROPERTIES}', 'none', 0, \
                 UNIX_TIMESTAMP(), UNIX_TIMESTAMP())",
                hooks[i % hooks.len()],
                backlog_object(*i)
            );
        }
        conn.query_drop(sql).await.expect("bench: seed the backlog");
    }
}

pub(crate) async fn queued_range(conn: &mut Conn) -> (u64, u64) {
    let range: Option<(Option<u64>, Option<u64>)> = conn
        .query_first("SELECT MIN(id), MAX(id) FROM herald_webhookrequest WHERE status = 'queued'")
        .await
        .expect("bench: queued id range");
    match range {
        Some((Some(lo), Some(hi))) => (lo, hi),
        _ => panic!("bench: no queued rows after seeding"),
    }
}

pub(crate) async fn count(conn: &mut Conn, sql: &str) -> u64 {
    conn.query_first::<u64, _>(sql)
        .await
        .unwrap_or_else(|e| panic!("bench: {sql}: {e}"))
        .unwrap_or(0)
}

pub(crate) fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// One row, inserted the way Phorge does; returns when it was sent.
pub(crate) async fn insert_one(conn: &mut Conn, object: &str, hook: &str) -> Instant {
    let phid = format!("PHID-HWBR-{}", &object["PHID-TASK-".len()..]);
    let at = Instant::now();
    conn.exec_drop(
        "INSERT INTO herald_webhookrequest (phid, webhookPHID, objectPHID, status, properties, \
         lastRequestResult, lastRequestEpoch, dateCreated, dateModified) \
         VALUES (?, ?, ?, 'queued', ?, 'none', 0, UNIX_TIMESTAMP(), UNIX_TIMESTAMP())",
        (phid, hook, object, PROPERTIES),
    )
    .await
    .expect("bench: insert a timed row");
    at
}

/// `retained` sent rows: one multi-row INSERT, then INSERT … SELECT
/// doubling until there are enough.
pub(crate) async fn insert_retained(conn: &mut Conn, retained: u64, hooks: &[String]) {
    let day_ago = now_unix().saturating_sub(86_400);
    let first = retained.min(SEED_CHUNK as u64) as usize;
    let mut sql = String::from(
        "INSERT INTO herald_webhookrequest (phid, webhookPHID, objectPHID, status, \
         properties, lastRequestResult, lastRequestEpoch, dateCreated, dateModified) VALUES ",
    );
    for i in 0..first {
        if i > 0 {
            sql.push(',');
        }
        let _ = write!(
            sql,
            "('PHID-HWBR-R{i:019}', '{}', 'PHID-TASK-R{i:019}', 'sent', '{PROPERTIES_SENT}', \
             'okay', {day_ago}, {day_ago}, {})",
            hooks[i % hooks.len()],
            day_ago + 1
        );
    }
    conn.query_drop(sql).await.expect("bench: retained rows");
    for step in 1..=40u32 {
        let have = count(
            conn,
            "SELECT COUNT(*) FROM herald_webhookrequest WHERE status = 'sent'",
        )
        .await;
        if have >= retained {
            break;
        }
        let n = have.min(retained - have);
        eprintln!("bench: retained rows {have}, adding {n}");
        conn.query_drop(format!(
            "INSERT INTO herald_webhookrequest (phid, webhookPHID, objectPHID, status, \
             properties, lastRequestResult, lastRequestEpoch, dateCreated, dateModified) \
             SELECT CONCAT('PHID-HWBR-R', {step}, '-', id), webhookPHID, \
             CONCAT('PHID-TASK-R', {step}, '-', id), status, properties, lastRequestResult, \
             lastRequestEpoch, dateCreated, dateModified \
             FROM herald_webhookrequest WHERE status = 'sent' LIMIT {n}"
        ))
        .await
        .expect("bench: double the retained rows");
    }
}
