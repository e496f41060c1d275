//! Adoption of Phorge's own delivery tasks (`GORGE_WEBHOOK_ADOPT_PHP_TASKS`),
//! so `phd` never runs a webhook call beside the daemon on an upstream
//! Phorge, which queues one `HeraldWebhookWorker` task per request and has
//! no hand-off switch.
//!
//! Phorge's task queue is a table protocol too: a taskmaster leases a task
//! by setting `leaseOwner` and `leaseExpires` on a row that has no owner
//! or whose lease lapsed, re-checking the owner it saw, and archives a
//! finished one by moving it to `worker_archivetask` in one transaction.
//! This module speaks that protocol:
//!
//! - **Leases** ([`TaskAdoption::round`], and for new tasks the frequent
//!   [`TaskAdoption::sweep_unleased`]): every webhook task no
//!   taskmaster runs (no owner, a lapsed lease, or a yield) is leased for
//!   [`TASK_LEASE`] under an owner string of this instance
//!   (`gorge-webhook:<host>:<pid>:<start>:<n>`, a new `n` for every lease
//!   taken, so a taskmaster's stale compare-and-set can never match a
//!   lease taken again after it lapsed), and extended while its request is
//!   queued. A stopped daemon's leases lapse by themselves within
//!   [`TASK_LEASE`]; then `phd` takes the tasks over.
//! - **The gate** ([`TaskAdoption::gate`]): a candidate row is delivered
//!   only while a daemon instance leases its task (taken on the spot when
//!   it is free); a row whose task a taskmaster holds waits until that
//!   task is done or its lease lapsed (left out of polls meanwhile, looked
//!   at again every few seconds). A row with no task at all (its task
//!   cancelled, or not inserted yet: Phorge inserts it just after the row)
//!   goes once it is [`TASK_GRACE_SECS`] old.
//! - **The archive**: once its request is `sent` or `failed` (or gone),
//!   a daemon-leased task (this instance's, or one a stopped instance
//!   left) is archived as Phorge's worker would end it:
//!   result 0 (success) for `sent` and for a silent-mode failure, 1
//!   (failure) otherwise; the same id, lease and data row, duration 0.
//!   The rows are locked first, so two instances never archive one task.
//!
//! Only the task's `objectPHID` (the request's PHID, as Phorge queues it)
//! is read, never its data row: the grants needed are SELECT, UPDATE and
//! DELETE on `worker_activetask` and INSERT on `worker_archivetask`
//! ([`check_grants`]).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use mysql_async::Value;
use webhook_core::{Properties, RequestRow, StoreError, UnixTime};

use crate::connector::Connector;
use crate::error::{server_code_of, MysqlError};
use crate::rows;
use crate::sql;

/// How long one lease of a task lasts: a daemon gone for good hands its
/// tasks back to `phd` within this.
pub const TASK_LEASE: Duration = Duration::from_secs(300);

/// A lease is extended once fewer than this many seconds are left of it:
/// about once a minute, so a database away for up to four minutes costs
/// no lease.
const RENEW_WITHIN_SECS: u64 = 240;

/// The gate does not rely on a daemon's lease that ends sooner than this:
/// leases are extended at 240 s left, so one this short has gone two
/// minutes without a round that could extend it.
const LEASE_MARGIN_SECS: u64 = 120;

/// A queued request without any task is delivered once it is this old:
/// Phorge inserts the task just after the request row.
pub const TASK_GRACE_SECS: UnixTime = 10;

/// Tasks leased, or archived, per statement at most.
const ROUND_LIMIT: u64 = 1_000;

/// A row left to PHP is left out of polls for this long, then looked at
/// again: so rows whose tasks taskmasters hold do not fill every poll.
const LEFT_TO_PHP_SECS: UnixTime = 5;

/// Rows remembered as left to PHP at most (the lowest ids kept).
const LEFT_TO_PHP_MAX: usize = 1_024;

/// MySQL's duplicate-key error (an archive row already there: a commit
/// whose answer was lost).
const ER_DUP_ENTRY: u16 = 1062;

/// Archive results, as Phorge's `PhabricatorWorkerArchiveTask` numbers
/// them.
const RESULT_SUCCESS: u64 = 0;
const RESULT_FAILURE: u64 = 1;

/// What one round did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AdoptionRound {
    /// Tasks leased.
    pub adopted: u64,
    /// Leases extended.
    pub renewed: u64,
    /// Tasks archived as succeeded.
    pub archived_success: u64,
    /// Tasks archived as failed.
    pub archived_failure: u64,
}

/// Totals since start, for `/metrics`.
#[derive(Debug, Default)]
struct Totals {
    adopted: AtomicU64,
    archived_success: AtomicU64,
    archived_failure: AtomicU64,
    rows_waiting_for_php: AtomicU64,
}

/// Totals since start, as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AdoptionTotals {
    /// Tasks leased.
    pub adopted: u64,
    /// Tasks archived as succeeded.
    pub archived_success: u64,
    /// Tasks archived as failed.
    pub archived_failure: u64,
    /// Candidate rows left for a taskmaster that held their task, once per
    /// poll that met one.
    pub rows_waiting_for_php: u64,
}

/// This instance's side of Phorge's task protocol.
#[derive(Debug)]
pub(crate) struct TaskAdoption {
    /// `gorge-webhook:<host>:<pid>:<start>:`: every owner string of this
    /// instance starts with it.
    prefix: String,
    next_lease: AtomicU64,
    totals: Totals,
    /// Rows the gate left to PHP, with when: left out of polls for
    /// [`LEFT_TO_PHP_SECS`].
    left_to_php: Mutex<HashMap<u64, UnixTime>>,
}

impl TaskAdoption {
    /// This process's owner strings: `host` is cut to 12 characters of
    /// `[A-Za-z0-9.-]` (others become `-`), so the pattern matching them
    /// holds no `LIKE` wildcard and fits Phorge's 64-character column; a
    /// random nonce tells apart instances whose host and pid agree (pid 1
    /// in containers of one deployment).
    pub(crate) fn new(host: &str, pid: u32) -> Self {
        let host: String = host
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '-'
                }
            })
            .take(12)
            .collect();
        Self {
            prefix: format!("{}{host}:{pid}:{:08x}:", sql::DAEMON_LEASE_PREFIX, nonce()),
            next_lease: AtomicU64::new(1),
            totals: Totals::default(),
            left_to_php: Mutex::new(HashMap::new()),
        }
    }

    /// The owner string of the next lease taken.
    fn next_owner(&self) -> String {
        let n = self.next_lease.fetch_add(1, Ordering::Relaxed);
        format!("{}{n}", self.prefix)
    }

    /// `LIKE` pattern of every daemon instance's leases: a finished task is
    /// archived by whichever instance sees it first, so one stopped with
    /// its leases still running leaves nothing behind for long.
    fn any_daemon() -> String {
        format!("{}%", sql::DAEMON_LEASE_PREFIX)
    }

    /// Rows to leave out of the poll at `now`: those the gate left to PHP
    /// less than [`LEFT_TO_PHP_SECS`] ago.
    pub(crate) fn left_to_php(&self, now: UnixTime) -> Vec<u64> {
        let mut left = self.left_to_php.lock().unwrap_or_else(|e| e.into_inner());
        left.retain(|_, at| at.saturating_add(LEFT_TO_PHP_SECS) > now);
        left.keys().copied().collect()
    }

    fn note_left_to_php(&self, ids: &[u64], now: UnixTime) {
        let mut left = self.left_to_php.lock().unwrap_or_else(|e| e.into_inner());
        for id in ids {
            if left.len() >= LEFT_TO_PHP_MAX {
                break;
            }
            left.insert(*id, now);
        }
    }

    pub(crate) fn totals(&self) -> AdoptionTotals {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        AdoptionTotals {
            adopted: read(&self.totals.adopted),
            archived_success: read(&self.totals.archived_success),
            archived_failure: read(&self.totals.archived_failure),
            rows_waiting_for_php: read(&self.totals.rows_waiting_for_php),
        }
    }

    /// Leases the tasks Phorge queued since the last sweep (no owner yet):
    /// cheap enough to run several times a second, so a taskmaster rarely
    /// meets one first. The count leased.
    pub(crate) async fn sweep_unleased(
        &self,
        connector: &Connector,
        namespace: &str,
    ) -> Result<u64, StoreError> {
        self.adopt_found(connector, namespace, &sql::tasks_unleased(namespace))
            .await
    }

    /// Leases the tasks `statement` finds (it selects their ids, taking the
    /// limit as its parameter).
    async fn adopt_found(
        &self,
        connector: &Connector,
        namespace: &str,
        statement: &str,
    ) -> Result<u64, StoreError> {
        let found = connector.all_rows(statement, (ROUND_LIMIT,)).await?;
        let ids = found
            .into_iter()
            .map(|mut row| rows::unsigned(&mut row, 0, "id", 0))
            .collect::<Result<Vec<u64>, _>>()?;
        self.adopt(connector, namespace, &ids).await
    }

    /// Extends the daemon leases that are due and leases free tasks.
    pub(crate) async fn round(
        &self,
        connector: &Connector,
        namespace: &str,
    ) -> Result<AdoptionRound, StoreError> {
        let mut round = AdoptionRound {
            renewed: self.renew(connector, namespace).await?,
            ..AdoptionRound::default()
        };
        round.adopted = self
            .adopt_found(connector, namespace, &sql::tasks_adoptable(namespace))
            .await?;
        Ok(round)
    }

    /// Archives the daemon-leased tasks whose request ended.
    pub(crate) async fn archive_ended(
        &self,
        connector: &Connector,
        namespace: &str,
    ) -> Result<AdoptionRound, StoreError> {
        let mut round = AdoptionRound::default();
        let (success, failure) = self.ended_tasks(connector, namespace).await?;
        round.archived_success = self
            .archive(connector, namespace, &success, RESULT_SUCCESS)
            .await?;
        round.archived_failure = self
            .archive(connector, namespace, &failure, RESULT_FAILURE)
            .await?;
        self.totals
            .archived_success
            .fetch_add(round.archived_success, Ordering::Relaxed);
        self.totals
            .archived_failure
            .fetch_add(round.archived_failure, Ordering::Relaxed);
        Ok(round)
    }

    /// The candidate rows a daemon may deliver now (see the module's
    /// gate), in their order; free tasks of the rows are leased first.
    /// `now` (the poll's clock) times how long rows left to PHP stay out
    /// of polls.
    pub(crate) async fn gate(
        &self,
        connector: &Connector,
        namespace: &str,
        rows: Vec<RequestRow>,
        now: UnixTime,
    ) -> Result<Vec<RequestRow>, StoreError> {
        if rows.is_empty() {
            return Ok(rows);
        }
        let mut tasks = self.tasks_of(connector, namespace, &rows).await?;
        let free: Vec<u64> = tasks
            .values()
            .flatten()
            .filter(|(_, standing)| *standing == Standing::Free)
            .map(|(id, _)| *id)
            .collect();
        if !free.is_empty() {
            self.adopt(connector, namespace, &free).await?;
            tasks = self.tasks_of(connector, namespace, &rows).await?;
        }
        // A row without a task is judged by the server's clock, as
        // Phorge's own timestamps are: the daemon's may run ahead.
        let server_now = if rows
            .iter()
            .any(|row| !tasks.contains_key(row.phid.as_bytes()))
        {
            let row = connector.first_row(sql::SERVER_NOW, ()).await?;
            match row {
                Some(mut row) => rows::unsigned(&mut row, 0, "UNIX_TIMESTAMP()", 0)?,
                None => 0,
            }
        } else {
            0
        };
        let mut waiting_for_php = Vec::new();
        let allowed = rows
            .into_iter()
            .filter(|row| match tasks.get(row.phid.as_bytes()) {
                None => row.date_created.saturating_add(TASK_GRACE_SECS) <= server_now,
                Some(standing) => {
                    let ours = standing.iter().all(|(_, s)| *s == Standing::Daemon);
                    if !ours {
                        waiting_for_php.push(row.id);
                    }
                    ours
                }
            })
            .collect();
        self.note_left_to_php(&waiting_for_php, now);
        self.totals.rows_waiting_for_php.fetch_add(
            u64::try_from(waiting_for_php.len()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        Ok(allowed)
    }

    /// Each listed request's tasks and how they stand, by request PHID.
    async fn tasks_of(
        &self,
        connector: &Connector,
        namespace: &str,
        rows: &[RequestRow],
    ) -> Result<HashMap<Vec<u8>, Vec<(u64, Standing)>>, StoreError> {
        let phids: HashSet<&str> = rows.iter().map(|row| row.phid.as_str()).collect();
        let mut params: Vec<Value> = Vec::with_capacity(phids.len() + 1);
        params.push(Value::from(LEASE_MARGIN_SECS));
        params.extend(phids.iter().map(|phid| Value::from(*phid)));
        let found = connector
            .all_rows(
                sql::tasks_of_requests(namespace, phids.len()).as_str(),
                params,
            )
            .await?;
        let mut tasks: HashMap<Vec<u8>, Vec<(u64, Standing)>> = HashMap::new();
        for mut row in found {
            let phid: Vec<u8> = rows::bytes(&mut row, 0, "objectPHID", 0)?;
            let id = rows::unsigned(&mut row, 1, "id", 0)?;
            let standing = match rows::unsigned(&mut row, 2, "standing", id)? {
                0 => Standing::Daemon,
                1 => Standing::Free,
                _ => Standing::Php,
            };
            tasks.entry(phid).or_default().push((id, standing));
        }
        Ok(tasks)
    }

    /// Leases those of `ids` that are still free, under a new owner string.
    async fn adopt(
        &self,
        connector: &Connector,
        namespace: &str,
        ids: &[u64],
    ) -> Result<u64, StoreError> {
        if ids.is_empty() {
            return Ok(0);
        }
        let mut params: Vec<Value> = Vec::with_capacity(ids.len() + 2);
        params.push(Value::from(self.next_owner()));
        params.push(Value::from(TASK_LEASE.as_secs()));
        params.extend(ids.iter().map(|id| Value::from(*id)));
        let mut conn = connector.conn().await?;
        conn.exec_drop(sql::tasks_adopt(namespace, ids.len()).as_str(), params)
            .await
            .map_err(|err| connector.statement_error(err))?;
        let adopted = conn.affected_rows();
        self.totals.adopted.fetch_add(adopted, Ordering::Relaxed);
        Ok(adopted)
    }

    /// Extends every daemon instance's leases that are due (not this
    /// instance's alone): rows on a stopped instance's leases are delivered
    /// by the others, so those leases must not lapse under them.
    async fn renew(&self, connector: &Connector, namespace: &str) -> Result<u64, StoreError> {
        let mut conn = connector.conn().await?;
        conn.exec_drop(
            sql::tasks_renew(namespace).as_str(),
            (TASK_LEASE.as_secs(), Self::any_daemon(), RENEW_WITHIN_SECS),
        )
        .await
        .map_err(|err| connector.statement_error(err))?;
        Ok(conn.affected_rows())
    }

    /// Daemon-leased tasks whose request ended: `(archive as success,
    /// archive as failure)`.
    async fn ended_tasks(
        &self,
        connector: &Connector,
        namespace: &str,
    ) -> Result<(Vec<u64>, Vec<u64>), StoreError> {
        let found = connector
            .all_rows(
                sql::tasks_ended(namespace).as_str(),
                (Self::any_daemon(), ROUND_LIMIT),
            )
            .await?;
        let mut success = Vec::new();
        let mut failure = Vec::new();
        for mut row in found {
            let id = rows::unsigned(&mut row, 0, "id", 0)?;
            let status: Option<String> = rows::optional_text(&mut row, 1, "status", id)?;
            let properties: Option<String> = rows::optional_text(&mut row, 2, "properties", id)?;
            match archive_result(status.as_deref(), properties.as_deref()) {
                RESULT_SUCCESS => success.push(id),
                _ => failure.push(id),
            }
        }
        Ok((success, failure))
    }

    /// Archives those of `ids` a daemon instance still leases, with
    /// `result`: all in one transaction, or, when one of them is in the
    /// archive already (a commit whose answer was lost), one by one, so
    /// that one never holds up the others. The count moved.
    async fn archive(
        &self,
        connector: &Connector,
        namespace: &str,
        ids: &[u64],
        result: u64,
    ) -> Result<u64, StoreError> {
        if ids.is_empty() {
            return Ok(0);
        }
        match self
            .archive_together(connector, namespace, ids, result)
            .await
        {
            Err(err) if server_code_of(&err) == Some(ER_DUP_ENTRY) => {
                let mut moved = 0;
                for id in ids {
                    moved += match self
                        .archive_together(connector, namespace, &[*id], result)
                        .await
                    {
                        Ok(one) => one,
                        // Archived before: only the active row is left.
                        Err(err) if server_code_of(&err) == Some(ER_DUP_ENTRY) => {
                            self.remove_archived(connector, namespace, *id).await?
                        }
                        Err(err) => return Err(connector.statement_error(err)),
                    };
                }
                Ok(moved)
            }
            other => other.map_err(|err| connector.statement_error(err)),
        }
    }

    /// One transaction: the listed tasks a daemon still leases are locked,
    /// copied into the archive and removed from the queue, so of two
    /// instances (or a taskmaster) only one moves a task. A failure closes
    /// the connection, which rolls the transaction back.
    async fn archive_together(
        &self,
        connector: &Connector,
        namespace: &str,
        ids: &[u64],
        result: u64,
    ) -> Result<u64, MysqlError> {
        let mut conn = connector.connect().await?;
        let outcome = async {
            conn.query_drop("START TRANSACTION").await?;
            let mut lock: Vec<Value> = Vec::with_capacity(ids.len() + 1);
            lock.push(Value::from(Self::any_daemon()));
            lock.extend(ids.iter().map(|id| Value::from(*id)));
            let held: Vec<mysql_async::Row> = conn
                .exec(sql::tasks_lock_ours(namespace, ids.len()).as_str(), lock)
                .await?;
            let held = held
                .into_iter()
                .map(|mut row| rows::unsigned(&mut row, 0, "id", 0))
                .collect::<Result<Vec<u64>, _>>()
                .map_err(|err| MysqlError::UnexpectedResult {
                    statement: "tasks_lock_ours",
                    detail: err.to_string(),
                })?;
            let mut moved = 0;
            if !held.is_empty() {
                let mut archive: Vec<Value> = Vec::with_capacity(held.len() + 1);
                archive.push(Value::from(result));
                archive.extend(held.iter().map(|id| Value::from(*id)));
                conn.exec_drop(sql::tasks_archive(namespace, held.len()).as_str(), archive)
                    .await?;
                let remove: Vec<Value> = held.iter().map(|id| Value::from(*id)).collect();
                conn.exec_drop(sql::tasks_remove(namespace, held.len()).as_str(), remove)
                    .await?;
                moved = conn.affected_rows();
            }
            conn.query_drop("COMMIT").await?;
            Ok::<u64, MysqlError>(moved)
        }
        .await;
        if outcome.is_err() {
            conn.close().await;
        }
        outcome
    }

    /// Removes task `id` from the queue when a daemon still leases it (its
    /// archive row exists already). 1 if removed.
    async fn remove_archived(
        &self,
        connector: &Connector,
        namespace: &str,
        id: u64,
    ) -> Result<u64, StoreError> {
        let mut conn = connector.conn().await?;
        conn.exec_drop(
            sql::task_remove_if_daemon_leased(namespace).as_str(),
            (id, Self::any_daemon()),
        )
        .await
        .map_err(|err| connector.statement_error(err))?;
        Ok(conn.affected_rows())
    }
}

/// 32 random bits, from the standard library's per-process hash keys.
fn nonce() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    // Truncation intended: any 32 of the 64 bits will do.
    hasher.finish() as u32
}

/// How a task stands for the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    /// A daemon instance leases it (for at least the margin).
    Daemon,
    /// No taskmaster runs it: it may be leased.
    Free,
    /// A taskmaster holds it, or will run it when its yield is due.
    Php,
}

/// The archive result Phorge's worker records for a request that ended
/// this way: success for `sent` and for the silent-mode failure
/// (`errorType` `hook`, `errorCode` `silent`, which its worker returns
/// from normally), failure for any other end and for a request gone.
fn archive_result(status: Option<&str>, properties: Option<&str>) -> u64 {
    match status {
        Some("sent") => RESULT_SUCCESS,
        Some("failed") => {
            let silent = properties
                .and_then(|text| Properties::parse(text).ok())
                .is_some_and(|parsed| {
                    let (error_type, code) = parsed.error();
                    error_type == Some("hook") && code.and_then(|c| c.as_str()) == Some("silent")
                });
            if silent {
                RESULT_SUCCESS
            } else {
                RESULT_FAILURE
            }
        }
        _ => RESULT_FAILURE,
    }
}

/// The privileges adoption needs that the account lacks, each as
/// `PRIVILEGE on db.table`; empty when it has them all. A probe failing
/// for another reason (a missing table, the server away) is an error.
pub(crate) async fn check_grants(
    connector: &Connector,
    namespace: &str,
) -> Result<Vec<String>, StoreError> {
    let mut missing = Vec::new();
    for (privilege, table, probe) in sql::adoption_grant_probes(namespace) {
        let mut conn = connector.conn().await?;
        match conn.query_drop(&probe).await {
            Ok(()) => {}
            Err(err) if server_code_of(&err).is_some_and(is_access_denied) => {
                missing.push(format!("{privilege} on {namespace}_worker.{table}"));
            }
            Err(err) => return Err(connector.statement_error(err)),
        }
    }
    Ok(missing)
}

/// Access denied to a database, table or column.
fn is_access_denied(code: u16) -> bool {
    matches!(code, 1044 | 1142 | 1143)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archive_results_follow_phorges_worker() {
        let silent = r#"{"errorType":"hook","errorCode":"silent"}"#;
        let disabled = r#"{"errorType":"hook","errorCode":"disabled"}"#;
        let http = r#"{"errorType":"http","errorCode":500}"#;
        assert_eq!(archive_result(Some("sent"), Some("{}")), RESULT_SUCCESS);
        assert_eq!(archive_result(Some("failed"), Some(silent)), RESULT_SUCCESS);
        assert_eq!(
            archive_result(Some("failed"), Some(disabled)),
            RESULT_FAILURE
        );
        assert_eq!(archive_result(Some("failed"), Some(http)), RESULT_FAILURE);
        assert_eq!(
            archive_result(Some("failed"), Some("not json")),
            RESULT_FAILURE
        );
        assert_eq!(archive_result(None, None), RESULT_FAILURE);
    }

    #[test]
    fn owner_strings_fit_phorges_column_and_hold_no_wildcard() {
        let adoption = TaskAdoption::new("web_01.example.org%with-a-long-name", 4_294_967_295);
        // A trillion leases taken later, the owner still fits.
        adoption
            .next_lease
            .store(999_999_999_999, Ordering::Relaxed);
        let owner = adoption.next_owner();
        assert!(owner.len() <= 64, "{} bytes: {owner}", owner.len());
        assert!(owner.starts_with(sql::DAEMON_LEASE_PREFIX));
        assert!(!adoption.prefix.contains(['%', '_']), "{}", adoption.prefix);
        assert_ne!(
            adoption.next_owner(),
            owner,
            "every lease gets its own owner"
        );
        // Two containers of one deployment: same host prefix, pid 1.
        let (one, two) = (
            TaskAdoption::new("gorge-webhook-7d9f", 1),
            TaskAdoption::new("gorge-webhook-7d9f", 1),
        );
        assert_ne!(one.prefix, two.prefix);
    }
}
