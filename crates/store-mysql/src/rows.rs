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

/// A string column that may be NULL (a LEFT JOIN's missing side).
pub(crate) fn optional_text(
    row: &mut Row,
    index: usize,
    column: &str,
    id: u64,
) -> Result<Option<String>, StoreError> {
    let bytes: Option<Vec<u8>> = take(row, index, column, id)?;
    bytes
        .map(|bytes| {
            String::from_utf8(bytes)
                .map_err(|_| malformed(id, format!("column {column} is not valid UTF-8")))
        })
        .transpose()
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

/// A signed number that may be NULL (a difference of epochs).
pub(crate) fn optional_signed(
    row: &mut Row,
    index: usize,
    column: &str,
    id: u64,
) -> Result<Option<i64>, StoreError> {
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
    Ok(lossy_bytes(bytes, column, defect))
}

/// A row selected with `crate::sql::REQUEST_SELECT_LIST`.
pub(crate) fn request_row(mut row: Row) -> Result<RequestRow, StoreError> {
    request_columns(&mut row, |row, id, defect| {
        lossy_text(row, 5, "properties", id, defect)
    })
}

/// A row selected with `crate::sql::CANDIDATE_SELECT_LIST`, and the
/// length of its `properties`. Properties left out for their length are
/// `None` (the row's `properties` is then empty until fetched).
pub(crate) fn candidate_row(mut row: Row) -> Result<(RequestRow, u64, bool), StoreError> {
    let mut inline = true;
    let request = request_columns(&mut row, |row, id, defect| {
        let value: Option<Vec<u8>> = take(row, 5, "properties", id)?;
        match value {
            Some(bytes) => Ok(lossy_bytes(bytes, "properties", defect)),
            None => {
                inline = false;
                Ok(String::new())
            }
        }
    })?;
    let length = unsigned(&mut row, 10, "LENGTH(properties)", request.id)?;
    Ok((request, length, inline))
}

/// The one column of `crate::sql::CANDIDATE_PROPERTIES`, read lossily
/// into `request` (its defect noted as the full row's read would).
pub(crate) fn fetched_properties(mut row: Row, request: &mut RequestRow) -> Result<(), StoreError> {
    let mut defect = request.defect.take();
    request.properties = lossy_text(&mut row, 0, "properties", request.id, &mut defect)?;
    request.defect = defect;
    Ok(())
}

fn lossy_bytes(bytes: Vec<u8>, column: &str, defect: &mut Option<String>) -> String {
    match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(err) => {
            let at = err.utf8_error().valid_up_to();
            defect.get_or_insert_with(|| {
                format!("column {column} is not valid UTF-8 (at byte {at})")
            });
            String::from_utf8_lossy(err.as_bytes()).into_owned()
        }
    }
}

/// The request columns in `crate::sql::REQUEST_SELECT_LIST`'s positions,
/// with `properties` read by `properties`.
fn request_columns(
    row: &mut Row,
    properties: impl FnOnce(&mut Row, u64, &mut Option<String>) -> Result<String, StoreError>,
) -> Result<RequestRow, StoreError> {
    // Until the id is known, errors are reported against id 0.
    let id = unsigned(row, 0, "id", 0)?;
    let mut defect = None;
    let status = text(row, 4, "status", id)?;
    let last = lossy_text(row, 6, "lastRequestResult", id, &mut defect)?;
    let last_request_result = last.parse::<LastResult>().unwrap_or_else(|_| {
        defect
            .get_or_insert_with(|| "column lastRequestResult is not none, okay or fail".to_owned());
        LastResult::None
    });
    Ok(RequestRow {
        id,
        phid: lossy_text(row, 1, "phid", id, &mut defect)?,
        webhook_phid: lossy_text(row, 2, "webhookPHID", id, &mut defect)?,
        object_phid: lossy_text(row, 3, "objectPHID", id, &mut defect)?,
        status: status
            .parse::<RequestStatus>()
            .map_err(|err| malformed(id, err.to_string()))?,
        properties: properties(row, id, &mut defect)?,
        last_request_result,
        last_request_epoch: unsigned(row, 7, "lastRequestEpoch", id)?,
        date_created: unsigned(row, 8, "dateCreated", id)?,
        date_modified: unsigned(row, 9, "dateModified", id)?,
        defect,
    })
}

/// A row selected with `crate::sql::HOOK`; errors carry the hook's id.
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
