//! Helpers shared by the reliability, outage, hostile-input and secrets
//! tests: seeded per-request randomness for receivers, bulk inserts and
//! reads of Phorge's request table, waiting for the whole table to reach a
//! state, scraping `/metrics` (its samples read by test-support's
//! `metrics_text`), and the checks every such test ends with (Phorge's
//! value domain, no panic in the log).
//!
//! Reads go through the test's own MariaDB session, never through the
//! daemon, so they see what Phorge would see.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use mysql_async::prelude::Queryable;
use serde_json::Value;
use webhook_test_support::{Receiver, Recorded, TestDb};

use crate::daemon::Daemon;

pub use webhook_test_support::metrics_text::count;

/// The header the reliability tests ask the daemon to put the request PHID
/// in (`GORGE_WEBHOOK_REQUEST_ID_HEADER`), as sent and as received.
pub const REQUEST_ID_HEADER: &str = "X-Gorge-Request";
/// [`REQUEST_ID_HEADER`] as the receiver records it.
pub const REQUEST_ID_RECEIVED: &str = "x-gorge-request";

/// The seed of the receivers' per-request randomness: `RELIABILITY_SEED`
/// when set (to replay a failure), else a fixed one so CI runs the same
/// schedule of failures and latencies every time.
pub fn seed() -> u64 {
    std::env::var("RELIABILITY_SEED")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0x5eed_2026_0008)
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A pseudo-random number that depends only on its inputs: the same row,
/// attempt and purpose get the same draw whatever order requests arrive in
/// (three processes racing cannot make a seed's schedule differ).
pub fn draw(seed: u64, key: &str, attempt: u32, purpose: u64) -> u64 {
    let mut h = splitmix(seed ^ purpose.wrapping_mul(0x2545_f491_4f6c_dd1d));
    for byte in key.bytes() {
        h = splitmix(h ^ u64::from(byte));
    }
    splitmix(h ^ u64::from(attempt))
}

/// One request row as stored, read back with raw SQL.
#[derive(Debug, Clone)]
pub struct Stored {
    /// `id`.
    pub id: u64,
    /// `phid` (the request PHID).
    pub phid: String,
    /// `webhookPHID`.
    pub hook: String,
    /// `objectPHID`.
    pub object: String,
    /// `status`.
    pub status: String,
    /// `properties`.
    pub properties: String,
    /// `lastRequestResult`.
    pub last_result: String,
    /// `lastRequestEpoch`.
    pub last_epoch: u64,
    /// `dateCreated`.
    pub date_created: u64,
    /// `dateModified`.
    pub date_modified: u64,
}

impl Stored {
    /// `properties` as JSON; panics with the row when it is not.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.properties).unwrap_or_else(|e| {
            panic!(
                "row {} properties are not JSON ({e}): {:.300}",
                self.id, self.properties
            )
        })
    }

    /// `(status, lastRequestResult, errorType, errorCode)`, the code as
    /// stored (integer or string).
    pub fn outcome(&self) -> (String, String, String, Value) {
        let props = self.json();
        (
            self.status.clone(),
            self.last_result.clone(),
            props["errorType"].as_str().unwrap_or_default().to_owned(),
            props["errorCode"].clone(),
        )
    }
}

/// Every request row, in id order.
pub async fn all_rows(db: &TestDb) -> Vec<Stored> {
    let rows: Vec<mysql_async::Row> = db
        .conn()
        .await
        .query(
            "SELECT id, phid, webhookPHID, objectPHID, status, properties, lastRequestResult, \
             lastRequestEpoch, dateCreated, dateModified FROM herald_webhookrequest ORDER BY id",
        )
        .await
        .expect("read every request row");
    rows.iter()
        .map(|row| Stored {
            id: column(row, 0),
            phid: column(row, 1),
            hook: column(row, 2),
            object: column(row, 3),
            status: column(row, 4),
            properties: column(row, 5),
            last_result: column(row, 6),
            last_epoch: column(row, 7),
            date_created: column(row, 8),
            date_modified: column(row, 9),
        })
        .collect()
}

/// One column of a row read by [`all_rows`], of the type its field has.
fn column<T: mysql_async::prelude::FromValue>(row: &mysql_async::Row, index: usize) -> T {
    row.get_opt(index)
        .and_then(Result::ok)
        .unwrap_or_else(|| panic!("column {index} of {row:?}"))
}

/// A row to insert as Phorge does (`queued`, `none`, epoch 0, both dates
/// the server's now).
#[derive(Debug, Clone)]
pub struct NewRow {
    /// Request PHID.
    pub phid: String,
    /// Hook PHID.
    pub hook: String,
    /// Object PHID.
    pub object: String,
    /// `properties` text.
    pub properties: String,
}

/// Inserts `rows` with multi-row INSERTs of up to `chunk` rows each, in
/// order; returns when all are in.
pub async fn insert_rows(db: &TestDb, rows: &[NewRow], chunk: usize) {
    let mut conn = db.conn().await;
    for part in rows.chunks(chunk.max(1)) {
        let values = vec![
            "(?, ?, ?, 'queued', ?, 'none', 0, UNIX_TIMESTAMP(), UNIX_TIMESTAMP())";
            part.len()
        ];
        let sql = format!(
            "INSERT INTO herald_webhookrequest (phid, webhookPHID, objectPHID, status, properties, \
             lastRequestResult, lastRequestEpoch, dateCreated, dateModified) VALUES {}",
            values.join(", ")
        );
        let params: Vec<mysql_async::Value> = part
            .iter()
            .flat_map(|r| {
                [
                    r.phid.as_str().into(),
                    r.hook.as_str().into(),
                    r.object.as_str().into(),
                    r.properties.as_str().into(),
                ]
            })
            .collect();
        conn.exec_drop(sql, params)
            .await
            .expect("insert request rows");
    }
}

/// Polls the table until `done` holds for all rows; panics after
/// `deadline` with a summary and the daemons' logs.
pub async fn wait_table(
    db: &TestDb,
    daemons: &[&Daemon],
    what: &str,
    deadline: Duration,
    done: impl Fn(&[Stored]) -> bool,
) -> Vec<Stored> {
    let until = tokio::time::Instant::now() + deadline;
    loop {
        let rows = all_rows(db).await;
        if done(&rows) {
            return rows;
        }
        if tokio::time::Instant::now() >= until {
            let mut by_state: BTreeMap<(String, String), usize> = BTreeMap::new();
            for row in &rows {
                *by_state
                    .entry((row.status.clone(), row.last_result.clone()))
                    .or_default() += 1;
            }
            let logs: Vec<String> = daemons.iter().map(|d| d.log()).collect();
            panic!(
                "the table never became {what} within {deadline:?}; rows by (status, \
                 lastRequestResult): {by_state:?}\n{}",
                logs.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// True when every row is `sent`.
pub fn all_sent(rows: &[Stored]) -> bool {
    !rows.is_empty() && rows.iter().all(|r| r.status == "sent")
}

/// Receipts grouped by the request-id header, each group in arrival order.
pub fn by_request(receipts: &[Recorded]) -> BTreeMap<String, Vec<Recorded>> {
    let mut groups: BTreeMap<String, Vec<Recorded>> = BTreeMap::new();
    for receipt in receipts {
        let id = receipt
            .header(REQUEST_ID_RECEIVED)
            .unwrap_or_else(|| panic!("a receipt without {REQUEST_ID_HEADER}: {receipt:?}"))
            .to_owned();
        groups.entry(id).or_default().push(receipt.clone());
    }
    for group in groups.values_mut() {
        group.sort_by_key(|r| r.at);
    }
    groups
}

/// Waits (within [`DEADLINE`](crate::e2e::DEADLINE), polling every
/// 100 ms) until `ready` says yes, failing with `what` and the daemon's
/// log otherwise.
pub async fn until(daemon: &Daemon, what: &str, mut ready: impl AsyncFnMut() -> bool) {
    poll(daemon, what, async || {
        ready().await.then_some(()).ok_or_else(String::new)
    })
    .await;
}

/// Polls `check` (every 100 ms) until it gives a value; after
/// [`DEADLINE`](crate::e2e::DEADLINE) fails with `what`, what `check`
/// last said instead, and the daemon's log.
pub async fn poll<T>(
    daemon: &Daemon,
    what: &str,
    mut check: impl AsyncFnMut() -> Result<T, String>,
) -> T {
    let until = tokio::time::Instant::now() + crate::e2e::DEADLINE;
    loop {
        let last = match check().await {
            Ok(value) => return value,
            Err(last) => last,
        };
        assert!(
            tokio::time::Instant::now() < until,
            "never happened: {what}; last: {last}\n{}",
            daemon.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The daemon's `/metrics` text (the tests run without a service token).
/// Polls `/readyz` until it answers `status`; returns the body.
pub async fn wait_readyz(daemon: &Daemon, status: u16) -> Value {
    poll(daemon, &format!("/readyz answering {status}"), async || {
        let response = daemon.get("/readyz", &[]).await;
        match response.status == status {
            true => Ok(serde_json::from_slice(&response.body).expect("/readyz is JSON")),
            false => Err(format!("{} ({})", response.status, response.text())),
        }
    })
    .await
}

pub async fn metrics(daemon: &Daemon) -> String {
    let response = daemon.get("/metrics", &[]).await;
    assert_eq!(response.status, 200, "/metrics: {}", response.text());
    response.text()
}

/// Every row holds values from Phorge's domain (protocol §2, §3, §5):
/// `status` and `lastRequestResult` from their sets, `properties` a JSON
/// object whose `errorType`/`errorCode` agree with the row's state.
pub fn assert_value_domain(rows: &[Stored]) {
    for row in rows {
        let context = || format!("row {} ({}): {:.400}", row.id, row.phid, row.properties);
        assert!(
            ["queued", "sent", "failed"].contains(&row.status.as_str()),
            "status {:?} — {}",
            row.status,
            context()
        );
        assert!(
            ["none", "okay", "fail"].contains(&row.last_result.as_str()),
            "lastRequestResult {:?} — {}",
            row.last_result,
            context()
        );
        let props = row.json();
        assert!(
            props.is_object(),
            "properties not an object — {}",
            context()
        );
        let error_type = &props["errorType"];
        let code = &props["errorCode"];
        match row.last_result.as_str() {
            "okay" => {
                assert_eq!(row.status, "sent", "{}", context());
                assert_eq!(error_type, "http", "{}", context());
                assert!(
                    code.as_u64().is_some_and(|c| (200..300).contains(&c)),
                    "okay needs a 2xx integer errorCode — {}",
                    context()
                );
            }
            "fail" => {
                assert!(row.last_epoch > 0, "fail without an epoch — {}", context());
                assert!(
                    error_type == "http" || error_type == "timeout",
                    "fail needs errorType http or timeout — {}",
                    context()
                );
                assert!(
                    code.is_u64(),
                    "errorCode must be a JSON integer — {}",
                    context()
                );
                if error_type == "timeout" {
                    assert_eq!(code, 28, "{}", context());
                }
            }
            _ => {
                if row.status == "failed" {
                    assert_eq!(row.last_epoch, 0, "{}", context());
                    assert_eq!(error_type, "hook", "{}", context());
                    assert!(
                        code.is_string(),
                        "a hook error's code is a string — {}",
                        context()
                    );
                } else {
                    assert_eq!(row.status, "queued", "{}", context());
                }
            }
        }
    }
}

/// The daemon is still running and its log shows no panic.
pub fn assert_alive_without_panic(daemon: &mut Daemon) {
    assert!(daemon.is_running(), "the daemon exited\n{}", daemon.log());
    assert!(
        !daemon.stderr().contains("panicked"),
        "the daemon panicked\n{}",
        daemon.log()
    );
}

#[test]
fn draws_depend_only_on_their_inputs() {
    assert_eq!(draw(1, "a", 1, 1), draw(1, "a", 1, 1));
    let distinct: std::collections::BTreeSet<u64> = [
        draw(1, "a", 1, 1),
        draw(2, "a", 1, 1),
        draw(1, "b", 1, 1),
        draw(1, "a", 2, 1),
        draw(1, "a", 1, 2),
    ]
    .into_iter()
    .collect();
    assert_eq!(distinct.len(), 5);
    // Roughly uniform: about 10 % of 10,000 draws fall under 10 of 100.
    let low = (0..10_000)
        .filter(|n| draw(7, &format!("row{n}"), 1, 2) % 100 < 10)
        .count();
    assert!((800..1_200).contains(&low), "{low}");
}

/// The workspace root, for the docs, fixtures and deployment files tests
/// read.
pub(crate) fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Waits (up to `deadline`) until `daemons` have every row `sent`, then
/// `settle` longer for anything still to come (a second delivery after a
/// lease); asserts that nothing came then, that every row is in Phorge's
/// value domain and that each of the `rows` was received exactly once.
/// Returns the rows and every receipt.
pub async fn each_sent_once(
    db: &TestDb,
    daemons: &[&Daemon],
    receiver: &Receiver,
    rows: usize,
    deadline: Duration,
    settle: Duration,
) -> (Vec<Stored>, Vec<Recorded>) {
    let stored = wait_table(db, daemons, "all sent", deadline, all_sent).await;
    let settled = receiver.requests().len();
    let all = receiver.wait_for(settled + 1, settle).await;
    assert_eq!(all.len(), settled, "a receipt after every row was sent");
    assert_value_domain(&stored);
    let groups = by_request(&all);
    assert_eq!(groups.len(), rows);
    for (phid, receipts) in &groups {
        assert_eq!(receipts.len(), 1, "{phid} sent twice: {receipts:?}");
    }
    (stored, all)
}
