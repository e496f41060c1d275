//! Retention: [`MysqlHistory::enforce_retention`] deletes the attempts
//! older than the age kept, then the oldest beyond the most rows kept.
//!
//! Every delete is a `DELETE … ORDER BY id LIMIT` of [`DELETE_BATCH`]
//! rows in autocommit, repeated until nothing is left to delete, so no
//! pass holds many locks or a long transaction, and writers go on
//! between the deletes. The daemon runs a pass now and then; nothing
//! else deletes from the history.

use mysql_async::Row;
use webhook_core::StoreError;

use super::{attempt_table, MysqlHistory};
use crate::connector::Connector;
use crate::session::Session;

/// Rows one `DELETE` removes at most.
pub const DELETE_BATCH: u64 = 1_000;

/// What one retention pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionPass {
    /// Attempts deleted, by age and by count.
    pub deleted: u64,
    /// Attempts kept after the pass (`COUNT(*)`).
    pub rows_kept: u64,
    /// When the oldest attempt kept started, Unix milliseconds; `None`
    /// when none is.
    pub oldest_started_ms: Option<u64>,
}

impl MysqlHistory {
    /// Deletes, in batches of [`DELETE_BATCH`] (see the module header),
    /// the attempts that started before `now_ms` less the age kept, then
    /// the oldest (lowest id) beyond the most rows kept; what it did.
    pub async fn enforce_retention(&self, now_ms: u64) -> Result<RetentionPass, StoreError> {
        let connector = &self.connector;
        let table = attempt_table(&self.config.database);
        let mut conn = connector.conn().await?;
        let max_age_ms = u64::try_from(self.config.max_age.as_millis()).unwrap_or(u64::MAX);
        let cutoff = now_ms.saturating_sub(max_age_ms);
        let mut deleted = delete_in_batches(
            connector,
            &mut conn,
            &format!(
                "DELETE FROM {table} WHERE started_ms < {cutoff} ORDER BY id LIMIT {DELETE_BATCH}"
            ),
        )
        .await?;
        // By size: the ids are handed out in order, so the rows beyond
        // the most kept are those at or below the newest id less that
        // many (fewer where ids were skipped: never more kept). An index
        // lookup, not a count of the table.
        let newest = number(
            connector,
            &mut conn,
            &format!("SELECT MAX(id) FROM {table}"),
        )
        .await?;
        if let Some(boundary) = newest.and_then(|id| id.checked_sub(self.config.max_rows)) {
            deleted += delete_in_batches(
                connector,
                &mut conn,
                &format!(
                    "DELETE FROM {table} WHERE id <= {boundary} ORDER BY id LIMIT {DELETE_BATCH}"
                ),
            )
            .await?;
        }
        let rows_kept = number(
            connector,
            &mut conn,
            &format!("SELECT COUNT(*) FROM {table}"),
        )
        .await?
        .unwrap_or(0);
        let oldest_started_ms = number(
            connector,
            &mut conn,
            &format!("SELECT MIN(started_ms) FROM {table}"),
        )
        .await?;
        Ok(RetentionPass {
            deleted,
            rows_kept,
            oldest_started_ms,
        })
    }
}

/// Runs `statement` (a `DELETE … LIMIT` [`DELETE_BATCH`]) until it deletes
/// fewer; the rows deleted.
async fn delete_in_batches(
    connector: &Connector,
    conn: &mut Session,
    statement: &str,
) -> Result<u64, StoreError> {
    let mut deleted = 0;
    loop {
        conn.query_drop(statement)
            .await
            .map_err(|err| connector.statement_error(err))?;
        let batch = conn.affected_rows();
        deleted += batch;
        if batch < DELETE_BATCH {
            return Ok(deleted);
        }
    }
}

/// The one number `statement` answers; `None` for no row or NULL.
async fn number(
    connector: &Connector,
    conn: &mut Session,
    statement: &str,
) -> Result<Option<u64>, StoreError> {
    let rows: Vec<Row> = conn
        .query(statement)
        .await
        .map_err(|err| connector.statement_error(err))?;
    let Some(mut row) = rows.into_iter().next() else {
        return Ok(None);
    };
    match row.take_opt::<Option<u64>, _>(0) {
        Some(Ok(value)) => Ok(value),
        _ => Err(connector.unexpected("history retention", "a number that is none")),
    }
}
