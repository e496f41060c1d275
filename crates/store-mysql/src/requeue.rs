//! `MysqlRequeue`: the one writer the operator's tool may hold, for
//! `webhook-admin requeue`. It reads final failures a page at a time and
//! puts a row back in the queue with one compare-and-set on the state it
//! was read in (`sql::REQUEUE`); a row that changed meanwhile is left
//! alone.
//!
//! It owns no selection rule (the tool's filters decide which rows) and
//! no delivery: a requeued row is delivered by the daemons' normal claim
//! protocol. It runs exactly `sql::REQUEUE_STATEMENTS`, checked below,
//! and is a type of its own so every other command of the tool keeps
//! holding only the read-only [`MysqlReader`].

use std::fmt;

use mysql_async::Value;
use webhook_core::{RequestRow, StoreError};

use crate::config::MysqlConfig;
use crate::error::MysqlError;
use crate::reader::MysqlReader;
use crate::rows;
use crate::sql;

/// Final failures a page at a time, and the requeue write. Clones share
/// one pool.
#[derive(Clone)]
pub struct MysqlRequeue {
    reader: MysqlReader,
}

// Hand-written: the pool's options hold the password.
impl fmt::Debug for MysqlRequeue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlRequeue")
            .field("database", &self.reader.database())
            .finish()
    }
}

/// What [`MysqlRequeue::requeue`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requeued {
    /// The row is `queued` / `none` again.
    Yes,
    /// The row no longer stood as read (or is gone): left alone.
    ChangedMeanwhile,
}

impl MysqlRequeue {
    /// Validates `config` and builds the pool; connects on first use.
    pub fn new(config: &MysqlConfig) -> Result<Self, MysqlError> {
        Ok(Self {
            reader: MysqlReader::new(config)?,
        })
    }

    /// The read side, sharing this pool (the named rows of a requeue are
    /// read through it: `sql::REQUEST_BY_ID`, `sql::REQUEST_BY_PHID`).
    pub fn reader(&self) -> &MysqlReader {
        &self.reader
    }

    /// Up to `limit` rows with status `failed` and an id above `after`,
    /// lowest id first (`sql::FAILED_PAGE`).
    pub async fn failed_page(&self, after: u64, limit: u64) -> Result<Vec<RequestRow>, StoreError> {
        let found = self
            .reader
            .connector()
            .all_rows(sql::FAILED_PAGE, (after, limit))
            .await?;
        found.into_iter().map(rows::request_row).collect()
    }

    /// Sets `row` back to `queued` / `none` if it still stands exactly as
    /// read: `failed`, with the same `dateModified`, `lastRequestResult`
    /// and `lastRequestEpoch` (`sql::REQUEUE`).
    pub async fn requeue(&self, row: &RequestRow) -> Result<Requeued, StoreError> {
        let connector = self.reader.connector();
        let mut conn = connector.conn().await?;
        let params: Vec<Value> = vec![
            row.id.into(),
            row.date_modified.into(),
            row.last_request_result.as_str().into(),
            row.last_request_epoch.into(),
        ];
        conn.exec_drop(sql::REQUEUE, params)
            .await
            .map_err(|err| connector.statement_error(err))?;
        match conn.affected_rows() {
            1 => Ok(Requeued::Yes),
            0 => Ok(Requeued::ChangedMeanwhile),
            _ => Err(connector.unexpected("requeue", "more than one row changed")),
        }
    }

    /// Closes the pool ([`MysqlReader::disconnect`]).
    pub async fn disconnect(&self) -> Result<(), StoreError> {
        self.reader.disconnect().await
    }
}

#[cfg(test)]
mod tests {
    /// The statements named in `source`: each `sql::NAME`.
    fn statements_named(source: &str) -> Vec<&str> {
        source
            .split("sql::")
            .skip(1)
            .map(|rest| {
                let end = rest
                    .find(|c: char| !(c.is_ascii_uppercase() || c == '_'))
                    .unwrap_or(rest.len());
                &rest[..end]
            })
            .filter(|name| !name.is_empty())
            .collect()
    }

    #[test]
    fn the_requeue_runs_only_its_statement_set() {
        let source = include_str!("requeue.rs");
        let (code, _) = source.split_once("#[cfg(test)]").unwrap_or((source, ""));
        let allowed = [
            "REQUEST_BY_ID",
            "REQUEST_BY_PHID",
            "FAILED_PAGE",
            "REQUEUE",
            "REQUEUE_STATEMENTS",
        ];
        let named = statements_named(code);
        assert!(named.contains(&"REQUEUE") && named.contains(&"FAILED_PAGE"));
        for name in named {
            assert!(allowed.contains(&name), "requeue.rs runs sql::{name}");
        }
    }

    #[test]
    fn the_reader_never_names_the_requeue() {
        for source in [include_str!("reader.rs"), include_str!("reads.rs")] {
            for name in statements_named(source) {
                assert!(
                    !["REQUEUE", "FAILED_PAGE", "CLAIM", "WRITE_RESULT"].contains(&name),
                    "the read-only side runs sql::{name}"
                );
            }
        }
    }
}
