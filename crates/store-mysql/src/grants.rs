//! The check of the privileges an account has for the statements the
//! daemon runs ([`crate::sql::GrantProbe`]): delivery's, which the daemon
//! checks before its first poll and `webhook-admin doctor` reports, and
//! task adoption's. Each missing one is named `PRIVILEGE on db.table`.
//!
//! Each statement is run under `EXPLAIN`. MySQL and MariaDB check a
//! statement's privileges, table and column alike, before they plan it,
//! and refuse an `EXPLAIN` exactly as they refuse the statement; and an
//! `EXPLAIN` runs nothing, so no row is read, changed or locked and no
//! trigger fires, whatever the statement's values. The other ways are
//! less sure: `SHOW GRANTS` and the privilege tables leave the adding up
//! of roles, wildcard database names, partial revokes and column grants to
//! the reader, and the statement itself, over no row, still takes InnoDB
//! locks and is a write, which the read-only [`crate::MysqlReader`] never
//! runs.

use webhook_core::StoreError;

use crate::connector::Connector;
use crate::error::server_code_of;
use crate::sql::GrantProbe;

/// Each privilege of `probes` the account lacks, as `PRIVILEGE on
/// db.table`, once each, in the probes' order; empty when it has them all.
/// A probe failing for another reason (a missing table, the server away,
/// the login refused) is an error: nothing can be said yet.
pub(crate) async fn missing(
    connector: &Connector,
    probes: &[GrantProbe],
) -> Result<Vec<String>, StoreError> {
    let mut conn = connector.conn().await?;
    let mut missing: Vec<String> = Vec::new();
    for probe in probes {
        let named = format!("{} on {}", probe.privilege, probe.table);
        if missing.contains(&named) {
            continue;
        }
        match conn
            .query_drop(&format!("EXPLAIN {}", probe.statement))
            .await
        {
            Ok(()) => {}
            Err(err) if server_code_of(&err).is_some_and(is_access_denied) => missing.push(named),
            Err(err) => return Err(connector.statement_error(err)),
        }
    }
    Ok(missing)
}

/// Access denied to a database, table or column.
fn is_access_denied(code: u16) -> bool {
    matches!(code, 1044 | 1142 | 1143)
}
