//! The startup schema check: the columns the daemon's statements use must
//! exist (an error otherwise), and the `key_status (status, id)` index
//! should (a warning otherwise: polls cope without it through the scan
//! floor, `crate::queued_floor`, but a few reads still scan).
//!
//! It only reads `information_schema`; it never creates or alters anything
//! in Phorge's database, missing index included — adding it is Phorge's
//! (or the operator's) decision.

use std::fmt;

use mysql_async::Row;

use crate::error::MysqlError;
use crate::session::Session;
use crate::sql;

/// `herald_webhookrequest` columns the store reads or writes.
pub const REQUEST_COLUMNS: &[&str] = &[
    "id",
    "phid",
    "webhookPHID",
    "objectPHID",
    "status",
    "properties",
    "lastRequestResult",
    "lastRequestEpoch",
    "dateCreated",
    "dateModified",
];

/// `herald_webhook` columns the store reads.
pub const HOOK_COLUMNS: &[&str] = &["id", "phid", "name", "webhookURI", "status", "hmacKey"];

pub(crate) const REQUEST_TABLE: &str = "herald_webhookrequest";
const HOOK_TABLE: &str = "herald_webhook";

/// A schema problem that does not stop the daemon but should be fixed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaWarning {
    /// No `key_status` index on `herald_webhookrequest` (Phorge's stock
    /// schema). Candidate polls stay short ranges above the scan floor;
    /// what still reads every retained row (7 days of history by default)
    /// is the floor's rescan, once per `RESCAN_EVERY`, and the
    /// queue counts by status (`/api/webhook/stats`, `webhook-admin`).
    MissingStatusIndex,
    /// `key_status` exists but does not start with `(status, id)`, so it
    /// cannot serve both the filter and the `ORDER BY id` (polls stay
    /// short through the scan floor all the same).
    UnexpectedStatusIndex {
        /// Its columns, in index order.
        columns: Vec<String>,
    },
}

impl fmt::Display for SchemaWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MissingStatusIndex => write!(
                f,
                "index key_status (status, id) on herald_webhookrequest is missing; \
                 candidate polls cope (they read above a remembered scan floor and stay \
                 flat as the table grows), but the floor's rescan every {} s and the \
                 queue counts by status (/api/webhook/stats, webhook-admin) still scan \
                 all retained rows until Phorge's hand-off patch adds it",
                crate::queued_floor::RESCAN_EVERY
            ),
            Self::UnexpectedStatusIndex { columns } => write!(
                f,
                "index key_status on herald_webhookrequest is ({}), not (status, id); \
                 candidate polls stay short through the scan floor, but its rescan and \
                 the queue counts may scan retained rows",
                columns.join(", ")
            ),
        }
    }
}

/// Metadata strings are compared, never written back, so a lossy decode
/// is harmless here.
fn text(row: &mut Row, index: usize) -> String {
    match row.take_opt::<Vec<u8>, usize>(index) {
        Some(Ok(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
        _ => String::new(),
    }
}

fn missing(
    present: &[(String, String)],
    table: &'static str,
    expected: &[&'static str],
) -> Vec<&'static str> {
    expected
        .iter()
        .copied()
        .filter(|column| {
            // Column names are case-insensitive in MySQL; table names are
            // compared exactly, as the server does on Linux.
            !present
                .iter()
                .any(|(t, c)| t == table && c.eq_ignore_ascii_case(column))
        })
        .collect()
}

/// Runs the check on `conn` for `database`.
pub(crate) async fn check(
    conn: &mut Session,
    database: &str,
) -> Result<Vec<SchemaWarning>, MysqlError> {
    let rows: Vec<Row> = conn.exec(sql::SCHEMA_COLUMNS, (database,)).await?;
    let present: Vec<(String, String)> = rows
        .into_iter()
        .map(|mut row| (text(&mut row, 0), text(&mut row, 1)))
        .collect();
    for (table, expected) in [(REQUEST_TABLE, REQUEST_COLUMNS), (HOOK_TABLE, HOOK_COLUMNS)] {
        if !present.iter().any(|(t, _)| t == table) {
            return Err(MysqlError::MissingTable {
                database: database.to_owned(),
                table,
            });
        }
        let columns = missing(&present, table, expected);
        if !columns.is_empty() {
            return Err(MysqlError::MissingColumns {
                database: database.to_owned(),
                table,
                columns,
            });
        }
    }

    let index: Vec<Row> = conn.exec(sql::STATUS_INDEX_COLUMNS, (database,)).await?;
    let columns: Vec<String> = index.into_iter().map(|mut row| text(&mut row, 0)).collect();
    let serves_the_query = matches!(
        columns.as_slice(),
        [first, second, ..] if first.eq_ignore_ascii_case("status") && second.eq_ignore_ascii_case("id")
    );
    Ok(if columns.is_empty() {
        vec![SchemaWarning::MissingStatusIndex]
    } else if serves_the_query {
        Vec::new()
    } else {
        vec![SchemaWarning::UnexpectedStatusIndex { columns }]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_columns_are_named_and_case_insensitive() {
        let present = vec![
            (REQUEST_TABLE.to_owned(), "ID".to_owned()),
            (REQUEST_TABLE.to_owned(), "phid".to_owned()),
            (HOOK_TABLE.to_owned(), "status".to_owned()),
        ];
        let gone = missing(&present, REQUEST_TABLE, &["id", "phid", "status"]);
        assert_eq!(gone, vec!["status"]);
    }

    #[test]
    fn warnings_explain_themselves() {
        let missing = SchemaWarning::MissingStatusIndex.to_string();
        assert!(missing.contains("key_status (status, id)"));
        assert!(missing.contains("polls cope"), "{missing}");
        assert!(missing.contains("every 600 s"), "{missing}");
        let odd = SchemaWarning::UnexpectedStatusIndex {
            columns: vec!["status".into()],
        };
        assert!(odd.to_string().contains("(status)"));
    }
}
