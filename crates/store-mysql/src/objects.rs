//! Phorge's application tables, as its webhook worker reads them before a
//! call ([`webhook_core::PhorgeObjects`]): whether the request's object
//! still exists, and which of the listed transactions exist on it, newest
//! first.
//!
//! [`crate::object_tables`] says, per PHID type, where Phorge keeps the
//! object and its transactions. A type not listed, tables this
//! account cannot read, or a lookup the server refuses for good, are
//! reported as `Unseen`, never as an error: the dispatcher then falls back
//! to the stored list. Only a lost connection is an error. Read-only: plain
//! `SELECT`s.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mysql_async::Value;
use webhook_core::{phid_type, ObjectLookup, StoreError, Unseen};

use crate::connector::Connector;
use crate::error::{is_connection_loss_code, MysqlError};
use crate::object_tables::{object_tables, ObjectTables};
use crate::sql;

/// How long tables found unreadable are not asked again: a grant given
/// meanwhile is used within this time, and an account without one does
/// not pay a failing statement per delivery.
const UNREADABLE_RECHECK: Duration = Duration::from_secs(60);

/// Server errors that mean "this account cannot read these tables here"
/// rather than "the database failed".
const UNREADABLE_CODES: &[u16] = &[
    1044, // ER_DBACCESS_DENIED_ERROR
    1049, // ER_BAD_DB_ERROR (application not installed)
    1054, // ER_BAD_FIELD_ERROR (a schema unlike Phorge's)
    1142, // ER_TABLEACCESS_DENIED_ERROR
    1143, // ER_COLUMNACCESS_DENIED_ERROR
    1146, // ER_NO_SUCH_TABLE
];

/// Types whose tables were found unreadable, and when.
#[derive(Debug, Default, Clone)]
pub(crate) struct UnreadableTables(Arc<Mutex<HashMap<&'static str, (Instant, String)>>>);

impl UnreadableTables {
    fn recent(&self, phid_type: &str) -> Option<String> {
        let mut seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match seen.get(phid_type) {
            Some((at, table)) if at.elapsed() < UNREADABLE_RECHECK => Some(table.clone()),
            Some(_) => {
                seen.remove(phid_type);
                None
            }
            None => None,
        }
    }

    fn note(&self, phid_type: &'static str, table: String) {
        let mut seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        seen.insert(phid_type, (Instant::now(), table));
    }
}

/// Whether this account can read a PHID type's object and transaction
/// tables: `Err` names the first `database.table` it cannot.
pub(crate) async fn tables_readable(
    connector: &Connector,
    namespace: &str,
    tables: &ObjectTables,
) -> Result<Result<(), String>, StoreError> {
    let mut conn = connector.conn().await?;
    for (application, table) in [
        (tables.object_application, tables.object_table),
        (tables.transaction_application, tables.transaction_table),
    ] {
        let probe = sql::table_probe(namespace, application, table);
        if let Err(err) = conn.query_drop(&probe).await {
            return match unreadable(&err) {
                true => Ok(Err(format!("{namespace}_{application}.{table}"))),
                false => Err(connector.statement_error(err)),
            };
        }
    }
    Ok(Ok(()))
}

fn unreadable(err: &MysqlError) -> bool {
    matches!(err, MysqlError::Statement(mysql_async::Error::Server(server))
        if UNREADABLE_CODES.contains(&server.code))
}

/// `PhorgeObjects::lookup`: the object and which of the listed
/// transactions exist, or why that cannot be seen.
pub(crate) async fn lookup(
    connector: &Connector,
    namespace: &str,
    unreadable_tables: &UnreadableTables,
    object_phid: &str,
    transaction_phids: &[&str],
) -> Result<ObjectLookup, StoreError> {
    let phid_type = phid_type(object_phid);
    let Some(tables) = object_tables(phid_type) else {
        return Ok(ObjectLookup::Unseen(Unseen::UnknownType(
            phid_type.to_owned(),
        )));
    };
    let unseen = |table| {
        ObjectLookup::Unseen(Unseen::NoAccess {
            phid_type: tables.phid_type.to_owned(),
            table,
        })
    };
    if let Some(table) = unreadable_tables.recent(tables.phid_type) {
        return Ok(unseen(table));
    }
    let statement = sql::object_transactions(namespace, tables, transaction_phids.len());
    let mut params: Vec<Value> = transaction_phids.iter().map(|p| Value::from(*p)).collect();
    params.push(Value::from(object_phid));
    let mut conn = connector.conn().await?;
    let found: Vec<Option<Vec<u8>>> = match conn.exec(statement, params).await {
        Ok(found) => found,
        Err(err) if unreadable(&err) => {
            let table = format!(
                "{namespace}_{}.{} / {namespace}_{}.{}",
                tables.object_application,
                tables.object_table,
                tables.transaction_application,
                tables.transaction_table
            );
            unreadable_tables.note(tables.phid_type, table.clone());
            return Ok(unseen(table));
        }
        Err(MysqlError::Statement(mysql_async::Error::Server(server)))
            if !is_connection_loss_code(server.code) =>
        {
            return Ok(ObjectLookup::Unseen(Unseen::Refused {
                phid_type: tables.phid_type.to_owned(),
                code: server.code,
            }))
        }
        Err(err) => return Err(connector.statement_error(err)),
    };
    if found.is_empty() {
        return Ok(ObjectLookup::Gone);
    }
    // The transactions matched the listed PHIDs byte for byte, and
    // those came in as text.
    let transactions = found
        .into_iter()
        .flatten()
        .filter_map(|phid| String::from_utf8(phid).ok())
        .collect();
    Ok(ObjectLookup::Found { transactions })
}
