//! Read-only lookups for the operator's tool (`webhook-admin`): one
//! request row by id or PHID, a per-hook summary, the breaker's failure
//! epochs and who holds a hook's lock.
//!
//! Nothing here writes, claims or locks: every statement is a plain
//! `SELECT` from [`crate::sql`], so the tool can be pointed at a live
//! Phorge database without changing what the daemon sees. Rows go through
//! the same validating mapping as the dispatcher's candidates, so the tool
//! judges exactly what the daemon would read.

use mysql_async::{Row, Value};
use webhook_core::{RequestRow, StoreError, UnixTime};

use crate::rows;
use crate::sql;
use crate::store::MysqlStore;

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
    /// `lastRequestEpoch >= since` (see `MysqlStore::hook_summaries`).
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

impl MysqlStore {
    /// The request row with this id, if any ([`sql::REQUEST_BY_ID`]).
    pub async fn request_by_id(&self, id: u64) -> Result<Option<RequestRow>, StoreError> {
        self.one_request(sql::REQUEST_BY_ID, Value::from(id)).await
    }

    /// The request row with this PHID, if any ([`sql::REQUEST_BY_PHID`]).
    pub async fn request_by_phid(&self, phid: &str) -> Result<Option<RequestRow>, StoreError> {
        self.one_request(sql::REQUEST_BY_PHID, Value::from(phid))
            .await
    }

    async fn one_request(
        &self,
        statement: &'static str,
        key: Value,
    ) -> Result<Option<RequestRow>, StoreError> {
        let mut conn = self.conn().await?;
        let row: Option<Row> = conn
            .exec_first(statement, vec![key])
            .await
            .map_err(|err| self.statement_error(err))?;
        row.map(rows::request_row).transpose()
    }

    /// Every hook, lowest id first, with its queued and failed row counts
    /// and the breaker's count of failed rows with `lastRequestEpoch >=
    /// since` (pass `Breaker::since(now)` for the daemon's view).
    pub async fn hook_summaries(&self, since: UnixTime) -> Result<Vec<HookSummary>, StoreError> {
        let mut conn = self.conn().await?;
        let found: Vec<Row> = conn
            .exec(sql::HOOK_SUMMARIES, (since,))
            .await
            .map_err(|err| self.statement_error(err))?;
        found.into_iter().map(hook_summary).collect()
    }

    /// The `lastRequestEpoch` of each row the breaker counts for this hook
    /// (`fail`, epoch `>= since`), oldest first. Its length is what
    /// `Store::breaker_failures` returns for the same arguments.
    pub async fn breaker_failure_epochs(
        &self,
        hook_phid: &str,
        since: UnixTime,
    ) -> Result<Vec<UnixTime>, StoreError> {
        let mut conn = self.conn().await?;
        let found: Vec<Row> = conn
            .exec(sql::BREAKER_FAILURE_EPOCHS, (hook_phid, since))
            .await
            .map_err(|err| self.statement_error(err))?;
        found
            .into_iter()
            .map(|mut row| rows::unsigned(&mut row, 0, "lastRequestEpoch", 0))
            .collect()
    }

    /// The server session holding this hook's lock (Phorge's `GET_LOCK`
    /// name), or `None` when it is free. Looks only; takes nothing.
    pub async fn hook_lock_holder(&self, hook_phid: &str) -> Result<Option<u64>, StoreError> {
        let mut conn = self.conn().await?;
        let row: Option<Row> = conn
            .exec_first(sql::IS_USED_LOCK, (self.hook_lock_name(hook_phid),))
            .await
            .map_err(|err| self.statement_error(err))?;
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
}

/// A row selected with [`sql::HOOK_SUMMARIES`]; errors carry the hook's id.
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
