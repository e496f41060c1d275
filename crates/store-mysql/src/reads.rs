//! The plain lookups of [`crate::MysqlReader`]: one request row by id or
//! PHID, a hook's queued rows before one, a hook, the queue's counts, a
//! per-hook summary, the breaker's failure epochs and who holds a hook's
//! lock.
//!
//! Nothing here writes, claims or locks: every statement is a plain
//! `SELECT` from [`crate::sql`], so the operator's tool can be pointed at
//! a live Phorge database without changing what the daemon sees. Rows go
//! through the same validating mapping as the dispatcher's candidates, so
//! the tool judges exactly what the daemon would read.

use mysql_async::{Row, Value};
use webhook_core::{CandidateQuery, DueRow, Hook, QueueStats, RequestRow, StoreError, UnixTime};

use crate::connector::Connector;
use crate::queued_floor::QueuedFloor;
use crate::rows;
use crate::sql;

/// One hook with the counts an operator asks about first. It carries no
/// HMAC key: the statement does not select one.
#[derive(Clone, PartialEq, Eq)]
pub struct HookSummary {
    /// `herald_webhook.id`.
    pub id: u64,
    /// `PHID-HWBH-…`.
    pub phid: String,
    /// Display name.
    pub name: String,
    /// Where requests are POSTed; may carry credentials, so callers show it
    /// only when asked to.
    pub uri: String,
    /// `enabled`, `firehose` or `disabled`, as stored.
    pub status: String,
    /// Rows of this hook with status `queued`.
    pub queued: u64,
    /// Rows of this hook with status `failed`.
    pub failed: u64,
    /// Rows the breaker counts: `lastRequestResult = 'fail'` with
    /// `lastRequestEpoch >= since` (see `MysqlReader::hook_summaries`).
    pub breaker_failures: u64,
}

// Hand-written so a URI (which may hold credentials) never reaches a log
// through `{:?}`.
impl std::fmt::Debug for HookSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookSummary")
            .field("id", &self.id)
            .field("phid", &self.phid)
            .field("name", &self.name)
            .field("uri", &"<redacted>")
            .field("status", &self.status)
            .field("queued", &self.queued)
            .field("failed", &self.failed)
            .field("breaker_failures", &self.breaker_failures)
            .finish()
    }
}

/// The one request row `statement` selects by `key`, if any.
pub(crate) async fn request(
    connector: &Connector,
    statement: &'static str,
    key: Value,
) -> Result<Option<RequestRow>, StoreError> {
    let row = connector.first_row(statement, vec![key]).await?;
    row.map(rows::request_row).transpose()
}

/// The hook with this PHID, if any (`sql::HOOK`).
pub(crate) async fn hook(connector: &Connector, phid: &str) -> Result<Option<Hook>, StoreError> {
    let row = connector.first_row(sql::HOOK, (phid,)).await?;
    row.map(rows::hook).transpose()
}

/// The queue's counts (`sql::STATS`).
pub(crate) async fn stats(connector: &Connector) -> Result<QueueStats, StoreError> {
    let row = connector.first_row(sql::STATS, ()).await?;
    let mut row = row.ok_or_else(|| connector.unexpected("stats", "no row"))?;
    Ok(QueueStats {
        queued: rows::unsigned(&mut row, 0, "queued count", 0)?,
        sent: rows::unsigned(&mut row, 1, "sent count", 0)?,
        failed: rows::unsigned(&mut row, 2, "failed count", 0)?,
        active_hooks: rows::unsigned(&mut row, 3, "active hook count", 0)?,
    })
}

/// `QueueCounts::longest_due`: the candidates due longest, over the scan
/// floor brought up to date as for a poll.
pub(crate) async fn longest_due(
    connector: &Connector,
    floor: &QueuedFloor,
    query: &CandidateQuery,
) -> Result<Vec<DueRow>, StoreError> {
    let cutoffs = query.cutoffs;
    let floor = floor.prepare(connector, cutoffs.now).await?;
    let mut params: Vec<Value> =
        Vec::with_capacity(query.exclude_hooks.len() + floor.below.len() + 6);
    params.push(cutoffs.now.saturating_sub(cutoffs.lease_cutoff).into());
    params.push(cutoffs.now.saturating_sub(cutoffs.retry_cutoff).into());
    params.push(floor.frontier.into());
    params.extend(floor.below.iter().map(|id| Value::from(*id)));
    params.push(cutoffs.lease_cutoff.into());
    params.push(cutoffs.retry_cutoff.into());
    params.extend(query.exclude_hooks.iter().map(|h| Value::from(h.as_str())));
    params.push(u64::try_from(query.limit).unwrap_or(u64::MAX).into());
    let statement = sql::longest_due_sql(query.exclude_hooks.len(), floor.below.len());
    let found = connector.all_rows(statement, params).await?;
    found
        .into_iter()
        .map(|mut row| {
            let id = rows::unsigned(&mut row, 0, "id", 0)?;
            Ok(DueRow {
                id,
                phid: rows::text(&mut row, 1, "phid", id)?,
                webhook_phid: rows::text(&mut row, 2, "webhookPHID", id)?,
                due_since: rows::unsigned(&mut row, 3, "dueSince", id)?,
            })
        })
        .collect()
}

/// A single-row `COUNT(*)`-style answer.
pub(crate) async fn count(
    connector: &Connector,
    statement: &'static str,
    params: Vec<Value>,
) -> Result<u64, StoreError> {
    let row = connector.first_row(statement, params).await?;
    let mut row = row.ok_or_else(|| connector.unexpected(statement, "no row"))?;
    rows::unsigned(&mut row, 0, "COUNT(*)", 0)
}

/// Every hook with its counts (`sql::HOOK_SUMMARIES`).
pub(crate) async fn hook_summaries(
    connector: &Connector,
    since: UnixTime,
) -> Result<Vec<HookSummary>, StoreError> {
    let found = connector.all_rows(sql::HOOK_SUMMARIES, (since,)).await?;
    found.into_iter().map(hook_summary).collect()
}

/// The epochs of the rows the breaker counts for a hook, oldest first
/// (`sql::BREAKER_FAILURE_EPOCHS`).
pub(crate) async fn breaker_failure_epochs(
    connector: &Connector,
    hook_phid: &str,
    since: UnixTime,
) -> Result<Vec<UnixTime>, StoreError> {
    let found = connector
        .all_rows(sql::BREAKER_FAILURE_EPOCHS, (hook_phid, since))
        .await?;
    found
        .into_iter()
        .map(|mut row| rows::unsigned(&mut row, 0, "lastRequestEpoch", 0))
        .collect()
}

/// Up to `limit` queued rows of a hook with ids below `id`, lowest id
/// first (`sql::QUEUED_BEFORE`).
pub(crate) async fn queued_before(
    connector: &Connector,
    hook_phid: &str,
    id: u64,
    limit: u64,
) -> Result<Vec<RequestRow>, StoreError> {
    let found = connector
        .all_rows(sql::QUEUED_BEFORE, (hook_phid, id, limit))
        .await?;
    found.into_iter().map(rows::request_row).collect()
}

/// The server session holding the named lock, or `None` when it is free
/// (`sql::IS_USED_LOCK`). Looks only; takes nothing.
pub(crate) async fn lock_holder(
    connector: &Connector,
    lock_name: String,
) -> Result<Option<u64>, StoreError> {
    let row = connector.first_row(sql::IS_USED_LOCK, (lock_name,)).await?;
    let mut row = row.ok_or_else(|| StoreError::MalformedRow {
        id: 0,
        reason: "IS_USED_LOCK returned no row".to_owned(),
    })?;
    match row.take_opt::<Option<u64>, usize>(0) {
        Some(Ok(holder)) => Ok(holder),
        Some(Err(_)) | None => Err(StoreError::MalformedRow {
            id: 0,
            reason: "IS_USED_LOCK returned something other than a session id".to_owned(),
        }),
    }
}

/// A row selected with `sql::HOOK_SUMMARIES`; errors carry the hook's id.
fn hook_summary(mut row: Row) -> Result<HookSummary, StoreError> {
    let id = rows::unsigned(&mut row, 0, "id", 0)?;
    Ok(HookSummary {
        id,
        phid: rows::text(&mut row, 1, "phid", id)?,
        name: rows::text(&mut row, 2, "name", id)?,
        uri: rows::text(&mut row, 3, "webhookURI", id)?,
        status: rows::text(&mut row, 4, "status", id)?,
        queued: rows::unsigned(&mut row, 5, "queued count", id)?,
        failed: rows::unsigned(&mut row, 6, "failed count", id)?,
        breaker_failures: rows::unsigned(&mut row, 7, "breaker count", id)?,
    })
}
