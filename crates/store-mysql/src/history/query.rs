//! [`HistoryReader`]: the attempt history, read-only — the attempts an
//! [`AttemptQuery`] asks for, newest first (`ORDER BY started_ms DESC, id
//! DESC`), every filter narrowing. It shares a [`crate::MysqlReader`]'s
//! pool ([`crate::MysqlReader::history`]) and runs plain `SELECT`s on the
//! history's database.
//!
//! Rows are read without trust: text columns lossily (bytes that are not
//! UTF-8 replaced), an `exchange` that is not the JSON of an `Exchange`
//! as none, a sent body whose columns do not add up as none; a number
//! that is not one is [`StoreError::MalformedRow`]. Nothing panics on what
//! the database holds.

use std::fmt;

use mysql_async::prelude::FromValue;
use mysql_async::{Row, Value};
use webhook_core::history::{
    Attempt, AttemptQuery, Exchange, RecordedAttempt, RequestKey, SentBody, SignedWith,
};
use webhook_core::StoreError;

use super::{attempt_table, ATTEMPT_TABLE};
use crate::connector::Connector;
use crate::error::{server_code_of, MysqlError, ER_BAD_DB_ERROR};
use crate::reader::MysqlReader;

/// The server's "Table doesn't exist".
const ER_NO_SUCH_TABLE: u16 = 1146;

/// The columns a query reads, in the order [`recorded`] takes them.
pub(crate) const COLUMNS: &str = "id, number, instance, request_id, request_phid, hook_phid, \
     object_phid, claim_version, started_ms, duration_ms, status, error_type, error_code, \
     http_status, body_bytes, body_sha256, signed_with, exchange";

/// Read-only access to the attempt history. Clones share the pool.
#[derive(Clone)]
pub struct HistoryReader {
    connector: Connector,
    database: String,
}

// Hand-written: the pool's options hold the password.
impl fmt::Debug for HistoryReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HistoryReader")
            .field("database", &self.database)
            .finish()
    }
}

impl MysqlReader {
    /// The attempt history in `database`, read through this reader's pool
    /// (see [`crate::HistoryConfig::database_for`] for its name).
    pub fn history(&self, database: &str) -> HistoryReader {
        HistoryReader {
            connector: self.connector().clone(),
            database: database.to_owned(),
        }
    }
}

impl HistoryReader {
    /// The history's database.
    pub fn database(&self) -> &str {
        &self.database
    }

    /// The attempts `query` asks for, newest first, at most `query.limit`
    /// of them (0 = no limit). A history database that does not exist is
    /// [`StoreError::MissingDatabase`]; one without the attempt table a
    /// query error naming it.
    pub async fn attempts(&self, query: &AttemptQuery) -> Result<Vec<RecordedAttempt>, StoreError> {
        let (statement, params) = self.statement(query);
        let mut conn = self.connector.conn().await?;
        let rows: Vec<Row> = match conn.exec(statement, params).await {
            Ok(rows) => rows,
            Err(err) => return Err(self.failure(&mut conn, err).await),
        };
        rows.into_iter().map(recorded).collect()
    }

    /// The `SELECT` for `query` and its values.
    fn statement(&self, query: &AttemptQuery) -> (String, Vec<Value>) {
        let mut conditions: Vec<&str> = Vec::new();
        let mut params: Vec<Value> = Vec::new();
        match &query.request {
            Some(RequestKey::Id(id)) => {
                conditions.push("request_id = ?");
                params.push((*id).into());
            }
            Some(RequestKey::Phid(phid)) => {
                conditions.push("request_phid = ?");
                params.push(phid.as_bytes().into());
            }
            None => {}
        }
        if let Some(hook) = &query.hook_phid {
            conditions.push("hook_phid = ?");
            params.push(hook.as_bytes().into());
        }
        if let Some(object) = &query.object_phid {
            conditions.push("object_phid = ?");
            params.push(object.as_bytes().into());
        }
        if let Some(outcome) = &query.outcome {
            conditions.push("(status = ? OR error_type = ? OR error_code = ?)");
            for _ in 0..3 {
                params.push(outcome.as_str().into());
            }
        }
        if let Some(since) = query.since_ms {
            conditions.push("started_ms >= ?");
            params.push(since.into());
        }
        if let Some(until) = query.until_ms {
            conditions.push("started_ms < ?");
            params.push(until.into());
        }
        let mut statement = format!("SELECT {COLUMNS} FROM {}", attempt_table(&self.database));
        if !conditions.is_empty() {
            statement.push_str(" WHERE ");
            statement.push_str(&conditions.join(" AND "));
        }
        statement.push_str(" ORDER BY started_ms DESC, id DESC");
        if query.limit > 0 {
            statement.push_str(" LIMIT ?");
            params.push(u64::try_from(query.limit).unwrap_or(u64::MAX).into());
        }
        (statement, params)
    }

    /// A failed query as the store error that says why: a missing
    /// database or table named as the history's.
    async fn failure(&self, conn: &mut crate::session::Session, err: MysqlError) -> StoreError {
        match server_code_of(&err) {
            Some(ER_BAD_DB_ERROR) => StoreError::MissingDatabase(self.database.clone()),
            Some(ER_NO_SUCH_TABLE) => {
                let exists: Result<Option<Row>, MysqlError> = conn
                    .exec_first(
                        "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?",
                        (self.database.as_str(),),
                    )
                    .await;
                let known = exists
                    .ok()
                    .flatten()
                    .and_then(|mut row| row.take_opt::<u64, _>(0))
                    .and_then(Result::ok);
                if known == Some(0) {
                    StoreError::MissingDatabase(self.database.clone())
                } else {
                    StoreError::Query(Box::new(MysqlError::MissingTable {
                        database: self.database.clone(),
                        table: ATTEMPT_TABLE,
                    }))
                }
            }
            _ => err.into_store_error(&self.database),
        }
    }
}

/// One row of [`COLUMNS`].
fn recorded(mut row: Row) -> Result<RecordedAttempt, StoreError> {
    let id: u64 = take(&mut row, 0, "id", 0)?;
    let number: u32 = take(&mut row, 1, "number", id)?;
    let instance = lossy(&mut row, 2, "instance", id)?.unwrap_or_default();
    let request_id: u64 = take(&mut row, 3, "request_id", id)?;
    let request_phid = lossy(&mut row, 4, "request_phid", id)?.unwrap_or_default();
    let hook_phid = lossy(&mut row, 5, "hook_phid", id)?.unwrap_or_default();
    let object_phid = lossy(&mut row, 6, "object_phid", id)?.unwrap_or_default();
    let claim_version: Option<u64> = take(&mut row, 7, "claim_version", id)?;
    let started_ms: u64 = take(&mut row, 8, "started_ms", id)?;
    let duration_ms: u64 = take(&mut row, 9, "duration_ms", id)?;
    let status = lossy(&mut row, 10, "status", id)?.unwrap_or_default();
    let error_type = lossy(&mut row, 11, "error_type", id)?.unwrap_or_default();
    let error_code = lossy(&mut row, 12, "error_code", id)?.unwrap_or_default();
    let http_status: Option<u16> = take(&mut row, 13, "http_status", id)?;
    let body_bytes: Option<u64> = take(&mut row, 14, "body_bytes", id)?;
    let body_sha256 = lossy(&mut row, 15, "body_sha256", id)?;
    let signed_with = lossy(&mut row, 16, "signed_with", id)?;
    let exchange = lossy(&mut row, 17, "exchange", id)?;
    let sent = match (
        body_bytes,
        body_sha256,
        signed_with.as_deref().and_then(SignedWith::parse),
    ) {
        (Some(bytes), Some(sha256), Some(signed_with)) => Some(SentBody {
            bytes,
            sha256,
            signed_with,
        }),
        _ => None,
    };
    let exchange = exchange.and_then(|json| serde_json::from_str::<Exchange>(&json).ok());
    Ok(RecordedAttempt {
        id,
        number,
        instance,
        attempt: Attempt {
            request_id,
            request_phid,
            hook_phid,
            object_phid,
            claim_version,
            started_ms,
            duration_ms,
            status,
            error_type,
            error_code,
            http_status,
            sent,
            exchange,
        },
    })
}

/// Column `index` as `T`, or the row named malformed.
fn take<T: FromValue>(row: &mut Row, index: usize, column: &str, id: u64) -> Result<T, StoreError> {
    match row.take_opt::<T, usize>(index) {
        Some(Ok(value)) => Ok(value),
        Some(Err(_)) => Err(StoreError::MalformedRow {
            id,
            reason: format!("history column {column} holds an unexpected value"),
        }),
        None => Err(StoreError::MalformedRow {
            id,
            reason: format!("history column {column} is missing"),
        }),
    }
}

/// A text column read lossily; `None` for NULL.
fn lossy(row: &mut Row, index: usize, column: &str, id: u64) -> Result<Option<String>, StoreError> {
    let bytes: Option<Vec<u8>> = take(row, index, column, id)?;
    Ok(bytes.map(|bytes| String::from_utf8_lossy(&bytes).into_owned()))
}
