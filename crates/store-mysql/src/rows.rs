//! Turning result rows into domain values without trusting them: every
//! column is taken by position and checked. A request row whose text
//! columns hold values outside Phorge's domain (bytes that are not UTF-8, an
//! unknown `lastRequestResult`) is still returned, read lossily, with
//! `RequestRow::defect` saying what is wrong, so the dispatcher can fail
//! that one row instead of every poll failing on it. Other surprises become
//! `StoreError::MalformedRow` naming the column (never its content, which
//! may be a hook's key).
//!
//! The driver's `FromRow` conversions panic on a mismatch, so they are not
//! used on database data anywhere in this crate.

use mysql_async::prelude::FromValue;
use mysql_async::{Row, Value};
use webhook_core::{Hook, LastResult, RequestRow, RequestStatus, StoreError};

fn malformed(id: u64, reason: String) -> StoreError {
    StoreError::MalformedRow { id, reason }
}

/// Column `index` converted to `T`; `id` labels the error.
fn take<T: FromValue>(row: &mut Row, index: usize, column: &str, id: u64) -> Result<T, StoreError> {
    match row.take_opt::<T, usize>(index) {
        Some(Ok(value)) => Ok(value),
        // The offending value stays out of the message on purpose.
        Some(Err(err)) => Err(malformed(
            id,
            format!("column {column} has an unexpected {}", kind(&err.0)),
        )),
        None => Err(malformed(id, format!("column {column} is missing"))),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::NULL => "NULL",
        Value::Bytes(_) => "string",
        Value::Int(_) => "negative or oversized integer",
        Value::UInt(_) => "oversized integer",
        Value::Float(_) | Value::Double(_) => "floating-point value",
        Value::Date(..) | Value::Time(..) => "date/time value",
    }
}

/// A string column, which must be UTF-8: VARBINARY columns arrive as raw
/// bytes and are rejected rather than repaired.
pub(crate) fn text(
    row: &mut Row,
    index: usize,
    column: &str,
    id: u64,
) -> Result<String, StoreError> {
    let bytes: Vec<u8> = take(row, index, column, id)?;
    String::from_utf8(bytes).map_err(|err| {
        malformed(
            id,
            format!(
                "column {column} is not valid UTF-8 (at byte {})",
                err.utf8_error().valid_up_to()
            ),
        )
    })
}

/// An unsigned count or epoch.
pub(crate) fn unsigned(
    row: &mut Row,
    index: usize,
    column: &str,
    id: u64,
) -> Result<u64, StoreError> {
    take(row, index, column, id)
}

/// A text column read lossily; the first defect found is noted.
fn lossy_text(
    row: &mut Row,
    index: usize,
    column: &str,
    id: u64,
    defect: &mut Option<String>,
) -> Result<String, StoreError> {
    let bytes: Vec<u8> = take(row, index, column, id)?;
    match String::from_utf8(bytes) {
        Ok(text) => Ok(text),
        Err(err) => {
            let at = err.utf8_error().valid_up_to();
            defect.get_or_insert_with(|| {
                format!("column {column} is not valid UTF-8 (at byte {at})")
            });
            Ok(String::from_utf8_lossy(err.as_bytes()).into_owned())
        }
    }
}

/// A row selected with [`crate::sql::REQUEST_SELECT_LIST`].
pub(crate) fn request_row(mut row: Row) -> Result<RequestRow, StoreError> {
    // Until the id is known, errors are reported against id 0.
    let id = unsigned(&mut row, 0, "id", 0)?;
    let mut defect = None;
    let status = text(&mut row, 4, "status", id)?;
    let last = lossy_text(&mut row, 6, "lastRequestResult", id, &mut defect)?;
    let last_request_result = last.parse::<LastResult>().unwrap_or_else(|_| {
        defect
            .get_or_insert_with(|| "column lastRequestResult is not none, okay or fail".to_owned());
        LastResult::None
    });
    Ok(RequestRow {
        id,
        phid: lossy_text(&mut row, 1, "phid", id, &mut defect)?,
        webhook_phid: lossy_text(&mut row, 2, "webhookPHID", id, &mut defect)?,
        object_phid: lossy_text(&mut row, 3, "objectPHID", id, &mut defect)?,
        status: status
            .parse::<RequestStatus>()
            .map_err(|err| malformed(id, err.to_string()))?,
        properties: lossy_text(&mut row, 5, "properties", id, &mut defect)?,
        last_request_result,
        last_request_epoch: unsigned(&mut row, 7, "lastRequestEpoch", id)?,
        date_created: unsigned(&mut row, 8, "dateCreated", id)?,
        date_modified: unsigned(&mut row, 9, "dateModified", id)?,
        defect,
    })
}

/// A row selected with [`crate::sql::HOOK`]; errors carry the hook's id.
pub(crate) fn hook(mut row: Row) -> Result<Hook, StoreError> {
    let id = unsigned(&mut row, 0, "id", 0)?;
    Ok(Hook {
        phid: text(&mut row, 1, "phid", id)?,
        name: text(&mut row, 2, "name", id)?,
        uri: text(&mut row, 3, "webhookURI", id)?,
        status: text(&mut row, 4, "status", id)?,
        hmac_key: text(&mut row, 5, "hmacKey", id)?,
    })
}

/// The single value of a one-column, one-row answer that may be NULL
/// (`GET_LOCK`, `RELEASE_LOCK`); `None` for NULL.
pub(crate) fn nullable_int(
    row: Option<Row>,
    statement: &'static str,
) -> Result<Option<i64>, String> {
    let mut row = row.ok_or_else(|| format!("{statement} returned no row"))?;
    match row.take_opt::<Option<i64>, usize>(0) {
        Some(Ok(value)) => Ok(value),
        Some(Err(err)) => Err(format!("{statement} returned a {}", kind(&err.0))),
        None => Err(format!("{statement} returned no column")),
    }
}
