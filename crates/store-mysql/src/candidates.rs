//! The candidate query with its bytes bounded: rows whose `properties` are
//! short come inline, longer ones are fetched one at a time by id, lowest
//! id first, until the poll's byte budget is spent; a row the driver
//! cannot read at all (wider than `max_allowed_packet`) is left out, said
//! in the log and counted, so the queue behind it moves.
//!
//! Without the bound a poll held every row of its batch at once (40 rows
//! of 5.1 MB peaked at about 1 GB), and one row wider than the packet
//! limit failed every poll for ever. The candidate predicate itself is
//! only in `crate::sql::candidate_sql`; the query runs above the scan
//! floor of [`crate::queued_floor`], brought up to date first.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::{Row, Value};
use tracing::warn;
use webhook_core::{CandidateQuery, RequestRow, StoreError};

use crate::connector::Connector;
use crate::error::{is_packet_too_large, MysqlError};
use crate::queued_floor::QueuedFloor;
use crate::rows;
use crate::sql;

/// The `properties` bytes one poll returns at most (its first row comes
/// whatever its size). The dispatcher keeps about one poll's rows ready
/// and copies each several times while it works on it (parsed, re-encoded,
/// inlined as hex in a group commit), so this is what bounds its memory.
pub const POLL_BYTES_MAX: u64 = 8 << 20;

/// Rows with `properties` up to this long come inline with the candidate
/// query; at most this, or less when the poll asks for many rows, so the
/// query's own answer stays within a few budgets.
pub const INLINE_PROPERTIES_MAX: u64 = 64 << 10;

/// The inline limit never drops below this, so ordinary rows (Phorge's
/// properties are a few hundred bytes) never need a fetch of their own.
const INLINE_PROPERTIES_MIN: u64 = 4 << 10;

/// A row found unreadable is said in the log at most this often.
const UNREADABLE_WARN_EVERY: Duration = Duration::from_secs(60);

/// Rows remembered for that rate limit; beyond it, stale entries go.
const UNREADABLE_REMEMBERED_MAX: usize = 1_024;

/// Candidate rows skipped because they could not be read, shared by the
/// store's clones.
#[derive(Debug, Clone, Default)]
pub(crate) struct UnreadableRows(Arc<UnreadableInner>);

#[derive(Debug, Default)]
struct UnreadableInner {
    skipped: AtomicU64,
    last_warned: Mutex<HashMap<u64, Instant>>,
}

impl UnreadableRows {
    /// Skips so far (a row counts once per poll that meets it).
    pub(crate) fn skipped(&self) -> u64 {
        self.0.skipped.load(Ordering::Relaxed)
    }

    fn record(&self, id: u64, length: u64, err: &mysql_async::Error) {
        let total = self.0.skipped.fetch_add(1, Ordering::Relaxed) + 1;
        let now = Instant::now();
        let due = match self.0.last_warned.lock() {
            Ok(mut seen) => {
                if seen.len() >= UNREADABLE_REMEMBERED_MAX {
                    seen.retain(|_, at| now.duration_since(*at) < UNREADABLE_WARN_EVERY);
                }
                match seen.get(&id) {
                    Some(at) if now.duration_since(*at) < UNREADABLE_WARN_EVERY => false,
                    _ => {
                        seen.insert(id, now);
                        true
                    }
                }
            }
            // A poisoned map only costs the rate limit.
            Err(_) => true,
        };
        if due {
            warn!(
                event = "row_unreadable",
                id,
                properties_bytes = length,
                skipped_total = total,
                error = %err,
                "a candidate row is larger than the connection's max_allowed_packet and cannot \
                 be read; it is skipped (the queue moves on) and stays queued until it is \
                 removed or the server's max_allowed_packet is raised"
            );
        }
    }
}

/// The inline limit for a poll of `limit` rows.
fn inline_limit(limit: usize) -> u64 {
    let limit = u64::try_from(limit.max(1)).unwrap_or(u64::MAX);
    (POLL_BYTES_MAX / limit).clamp(INLINE_PROPERTIES_MIN, INLINE_PROPERTIES_MAX)
}

/// `Store::candidates` for [`crate::MysqlStore`]: a prefix of the candidate
/// order, lowest id first, holding at most [`POLL_BYTES_MAX`] bytes of
/// `properties` (the first row whatever its size), less any row that
/// could not be read or changed between the query and its own fetch, and
/// leaving out the `exclude_rows` ids.
pub(crate) async fn candidates(
    connector: &Connector,
    unreadable: &UnreadableRows,
    floor: &QueuedFloor,
    query: &CandidateQuery,
    exclude_rows: &[u64],
) -> Result<Vec<RequestRow>, StoreError> {
    let cutoffs = query.cutoffs;
    let floor = floor.prepare(connector, cutoffs.now).await?;
    let mut params: Vec<Value> = vec![inline_limit(query.limit).into()];
    params.extend(sql::candidate_predicate_params(
        floor.frontier,
        &floor.below,
        &cutoffs,
        &query.exclude_hooks,
        exclude_rows,
    ));
    params.push(u64::try_from(query.limit).unwrap_or(u64::MAX).into());

    // Rows past the budget are read off the wire and dropped as they come.
    // Rows not inline hold no properties yet and are kept (cheap): whether
    // they fit is known only once fetched, as one that cannot be read
    // costs nothing. Inline rows alone past the budget end the poll there.
    let mut found: Vec<(RequestRow, u64, bool)> = Vec::new();
    let mut inline_bytes = 0u64;
    let mut past_budget = false;
    {
        let mut conn = connector.conn().await?;
        // The query and the reading of its rows, under one statement
        // timeout (`crate::session`).
        let (raw, limit) = conn.start().map_err(|err| connector.statement_error(err))?;
        let read = async {
            let mut result = raw
                .exec_iter(
                    sql::candidate_sql_above_floor(
                        query.exclude_hooks.len(),
                        floor.below.len(),
                        exclude_rows.len(),
                    ),
                    params,
                )
                .await
                .map_err(|err| connector.statement_error(err))?;
            while let Some(row) = result
                .next()
                .await
                .map_err(|err| connector.statement_error(err))?
            {
                if past_budget {
                    continue;
                }
                let candidate = rows::candidate_row(row)?;
                let (_, length, inline) = candidate;
                if inline {
                    if !found.is_empty() && inline_bytes.saturating_add(length) > POLL_BYTES_MAX {
                        past_budget = true;
                        continue;
                    }
                    inline_bytes = inline_bytes.saturating_add(length);
                }
                found.push(candidate);
            }
            Ok::<(), StoreError>(())
        };
        let outcome = tokio::time::timeout(limit, read).await;
        let read = conn
            .settle(outcome)
            .await
            .map_err(|err| connector.statement_error(err))?;
        if let Err(StoreError::Denied(_)) = read {
            conn.retire();
        }
        read?;
    }

    let mut out = Vec::with_capacity(found.len());
    let mut used = 0u64;
    for (mut row, length, inline) in found {
        if !out.is_empty() && used.saturating_add(length) > POLL_BYTES_MAX {
            break;
        }
        if !inline {
            let mut conn = connector.conn().await?;
            let fetched: Result<Option<Row>, _> = conn
                .exec_first(sql::CANDIDATE_PROPERTIES, (row.id, row.date_modified))
                .await;
            match fetched {
                Ok(Some(properties)) => rows::fetched_properties(properties, &mut row)?,
                // Changed since the query: not this poll's candidate any more.
                Ok(None) => continue,
                Err(MysqlError::Statement(err)) if is_packet_too_large(&err) => {
                    unreadable.record(row.id, length, &err);
                    continue;
                }
                Err(err) => return Err(connector.statement_error(err)),
            }
        }
        used = used.saturating_add(length);
        out.push(row);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inline_limit_shrinks_with_the_batch_within_bounds() {
        assert_eq!(inline_limit(0), INLINE_PROPERTIES_MAX);
        assert_eq!(inline_limit(64), INLINE_PROPERTIES_MAX);
        assert_eq!(inline_limit(1_024), 8 << 10);
        assert_eq!(inline_limit(16_384), INLINE_PROPERTIES_MIN);
    }

    #[test]
    fn an_unreadable_row_is_counted_every_time() {
        let rows = UnreadableRows::default();
        let err = mysql_async::Error::Other("too large".into());
        rows.record(7, 20 << 20, &err);
        rows.record(7, 20 << 20, &err);
        rows.record(8, 20 << 20, &err);
        assert_eq!(rows.skipped(), 3);
    }
}
