//! The history database's schema: its versioned [`MIGRATIONS`], the
//! `schema_version` table recording those applied, and [`prepare`], which
//! brings a database up to date and checks the account's privileges.
//!
//! [`prepare`] runs on a session of its own, outside the pool, under a
//! named lock (`GET_LOCK`), so instances starting together migrate once:
//! the first applies what is missing, the others then find nothing to do.
//! It runs DDL only when something is missing (the database, the
//! `schema_version` table, a migration), so an account that was granted
//! only what writing needs (`SELECT, INSERT, DELETE` on the database)
//! prepares an up-to-date database. A schema newer than the newest
//! migration known is refused ([`HistoryError::TooNew`]): an older daemon
//! does not write into a layout it does not know.
//!
//! Then the privileges writing and retention need (`SELECT`, `INSERT` and
//! `DELETE` on the attempt table) are probed under `EXPLAIN`, as
//! `crate::grants` probes delivery's, which runs nothing; each missing one
//! is named ([`HistoryError::Privileges`]), as is a DDL the server refused
//! (`CREATE on db`).

use std::time::{Duration, Instant};

use mysql_async::{Row, Value};
use webhook_core::StoreError;

use super::{attempt_table, quoted, HistoryConfig, HistoryError, ATTEMPT_TABLE};
use crate::connector::Connector;
use crate::error::{server_code_of, MysqlError};
use crate::grants;
use crate::session::Session;
use crate::sql::GrantProbe;

/// One step of the schema: its statements (`{db}` stands for the quoted
/// database) and the privilege they need, which a refusal names.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// Its number; they are applied in order, each once.
    pub version: u32,
    /// What it does, as `schema_version` records it.
    pub name: &'static str,
    /// Its statements, run in order.
    pub statements: &'static [&'static str],
}

/// The attempt table (see `webhook_core::history::Attempt`; `exchange` is
/// its `Exchange` as JSON). `(request_phid, number)` is unique: two
/// writers numbering the same request at once cannot both win (and it
/// serves the look-ups by request PHID). Queries read newest first, so
/// each other filter's key ends in `started_ms`.
const CREATE_ATTEMPT: &str = "CREATE TABLE IF NOT EXISTS {db}.`attempt` (
    id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    request_id BIGINT UNSIGNED NOT NULL,
    request_phid VARBINARY(64) NOT NULL,
    hook_phid VARBINARY(64) NOT NULL,
    object_phid VARBINARY(64) NOT NULL,
    number INT UNSIGNED NOT NULL,
    instance VARCHAR(255) NOT NULL,
    claim_version BIGINT UNSIGNED NULL,
    started_ms BIGINT UNSIGNED NOT NULL,
    duration_ms BIGINT UNSIGNED NOT NULL,
    status VARCHAR(16) NOT NULL,
    error_type VARCHAR(16) NOT NULL,
    error_code VARCHAR(64) NOT NULL,
    http_status SMALLINT UNSIGNED NULL,
    body_bytes BIGINT UNSIGNED NULL,
    body_sha256 CHAR(64) NULL,
    signed_with VARCHAR(32) NULL,
    exchange LONGTEXT NULL,
    PRIMARY KEY (id),
    UNIQUE KEY key_request_number (request_phid, number),
    KEY key_request_id (request_id, started_ms),
    KEY key_hook (hook_phid, started_ms),
    KEY key_object (object_phid, started_ms),
    KEY key_started (started_ms)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin";

/// Every migration, in order.
pub const MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    name: "attempt table",
    statements: &[CREATE_ATTEMPT],
}];

/// The newest schema version this build knows.
pub const HISTORY_SCHEMA_VERSION: u32 = 1;

const CREATE_SCHEMA_VERSION: &str = "CREATE TABLE IF NOT EXISTS {db}.`schema_version` (
    version INT UNSIGNED NOT NULL,
    name VARCHAR(128) NOT NULL,
    applied_at DATETIME NOT NULL,
    PRIMARY KEY (version)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin";

/// How long [`prepare`] waits for another instance's migration.
const LOCK_WAIT: Duration = Duration::from_secs(60);
const LOCK_POLL: Duration = Duration::from_millis(100);
/// MySQL's limit on a lock name.
const LOCK_NAME_MAX: usize = 64;

/// Server errors that refuse a privilege.
const ACCESS_DENIED: &[u16] = &[1044, 1045, 1142, 1143, 1227];

/// See the module header.
pub(crate) async fn prepare(
    connector: &Connector,
    config: &HistoryConfig,
) -> Result<(), HistoryError> {
    let database = config.database.as_str();
    let mut conn = connector.standalone().await?;
    let lock = lock_name(database);
    take_lock(connector, &mut conn, &lock).await?;
    let migrated = migrate(connector, &mut conn, database).await;
    // Closing the session frees the lock too; release it first so the
    // next instance need not wait for the close.
    let _ = conn
        .exec_drop("SELECT RELEASE_LOCK(?)", (lock.as_str(),))
        .await;
    conn.close().await;
    migrated?;
    let missing = grants::missing(connector, &probes(database)).await?;
    if missing.is_empty() {
        Ok(())
    } else {
        Err(HistoryError::Privileges(missing))
    }
}

/// The lock guarding `database`'s migrations.
fn lock_name(database: &str) -> String {
    let mut name = format!("gorge_webhook_history.{database}");
    // ASCII: the database name is checked to be.
    name.truncate(LOCK_NAME_MAX);
    name
}

/// Takes `lock` on `conn`, waiting for another instance's migration for
/// at most [`LOCK_WAIT`] (each try returns at once, so no statement waits
/// longer than it takes).
async fn take_lock(
    connector: &Connector,
    conn: &mut Session,
    lock: &str,
) -> Result<(), HistoryError> {
    let started = Instant::now();
    loop {
        let row: Option<Row> = conn
            .exec_first("SELECT GET_LOCK(?, 0)", (lock,))
            .await
            .map_err(|err| connector.statement_error(err))?;
        if let Some(Some(Ok(Some(1_i64)))) = row.map(|mut row| row.take_opt::<Option<i64>, _>(0)) {
            return Ok(());
        }
        if started.elapsed() >= LOCK_WAIT {
            return Err(connector
                .unexpected(
                    "GET_LOCK",
                    &format!(
                        "another instance held the history's migration lock {lock} for {} s",
                        LOCK_WAIT.as_secs()
                    ),
                )
                .into());
        }
        tokio::time::sleep(LOCK_POLL).await;
    }
}

/// The database, `schema_version` and the missing migrations, under the
/// lock.
async fn migrate(
    connector: &Connector,
    conn: &mut Session,
    database: &str,
) -> Result<(), HistoryError> {
    let db = quoted(database);
    if !exists(
        connector,
        conn,
        "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?",
        vec![database.into()],
    )
    .await?
    {
        let create = format!(
            "CREATE DATABASE IF NOT EXISTS {db} DEFAULT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
        );
        ddl(connector, conn, &create, || format!("CREATE on {database}")).await?;
    }
    let table_exists = "SELECT COUNT(*) FROM information_schema.TABLES \
                        WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?";
    if !exists(
        connector,
        conn,
        table_exists,
        vec![database.into(), "schema_version".into()],
    )
    .await?
    {
        let create = CREATE_SCHEMA_VERSION.replace("{db}", &db);
        ddl(connector, conn, &create, || format!("CREATE on {database}")).await?;
    }
    let found = applied_version(connector, conn, database).await?;
    let known = MIGRATIONS.last().map_or(0, |last| last.version);
    if found > known {
        return Err(HistoryError::TooNew {
            database: database.to_owned(),
            found,
            known,
        });
    }
    for migration in MIGRATIONS.iter().filter(|m| m.version > found) {
        for statement in migration.statements {
            let statement = statement.replace("{db}", &db);
            ddl(connector, conn, &statement, || {
                format!("CREATE on {database}")
            })
            .await?;
        }
        let record = crate::sql::inline(
            &format!(
                "INSERT INTO {db}.`schema_version` (version, name, applied_at) \
                 VALUES (?, ?, UTC_TIMESTAMP())"
            ),
            &[
                crate::sql::Literal::Number(u64::from(migration.version)),
                crate::sql::Literal::Text(migration.name),
            ],
        )
        .unwrap_or_default();
        ddl(connector, conn, &record, || {
            format!("INSERT on {database}.schema_version")
        })
        .await?;
    }
    Ok(())
}

/// Whether a `COUNT(*)` answers more than 0.
async fn exists(
    connector: &Connector,
    conn: &mut Session,
    statement: &str,
    params: Vec<Value>,
) -> Result<bool, StoreError> {
    let row: Option<Row> = conn
        .exec_first(statement, params)
        .await
        .map_err(|err| connector.statement_error(err))?;
    match row.map(|mut row| row.take_opt::<u64, _>(0)) {
        Some(Some(Ok(count))) => Ok(count > 0),
        other => Err(connector.unexpected("COUNT(*)", &format!("answered {other:?}"))),
    }
}

/// The highest version `schema_version` records, 0 for none.
async fn applied_version(
    connector: &Connector,
    conn: &mut Session,
    database: &str,
) -> Result<u32, HistoryError> {
    let statement = format!(
        "SELECT COALESCE(MAX(version), 0) FROM {}.`schema_version`",
        quoted(database)
    );
    let row: Option<Row> = match conn.exec_first(statement.as_str(), ()).await {
        Ok(row) => row,
        Err(err) if is_denied(&err) => {
            return Err(HistoryError::Privileges(vec![format!(
                "SELECT on {database}.schema_version"
            )]))
        }
        Err(err) => return Err(connector.statement_error(err).into()),
    };
    match row.map(|mut row| row.take_opt::<u64, _>(0)) {
        Some(Some(Ok(version))) => Ok(u32::try_from(version).unwrap_or(u32::MAX)),
        other => Err(connector
            .unexpected("schema_version", &format!("answered {other:?}"))
            .into()),
    }
}

/// Runs a statement that changes the schema (or records a migration); a
/// refusal is the privilege `needed` names.
async fn ddl(
    connector: &Connector,
    conn: &mut Session,
    statement: &str,
    needed: impl FnOnce() -> String,
) -> Result<(), HistoryError> {
    match conn.query_drop(statement).await {
        Ok(()) => Ok(()),
        Err(err) if is_denied(&err) => Err(HistoryError::Privileges(vec![needed()])),
        Err(err) => Err(connector.statement_error(err).into()),
    }
}

fn is_denied(err: &MysqlError) -> bool {
    server_code_of(err).is_some_and(|code| ACCESS_DENIED.contains(&code))
}

/// What writing (`INSERT`, and the numbering's `SELECT`) and retention
/// (`DELETE`) run on the attempt table, under `EXPLAIN`; the values match
/// no row.
fn probes(database: &str) -> Vec<GrantProbe> {
    let table = attempt_table(database);
    let named = format!("{database}.{ATTEMPT_TABLE}");
    vec![
        GrantProbe {
            privilege: "SELECT",
            table: named.clone(),
            statement: format!(
                "SELECT {} FROM {table} WHERE request_phid = X'' ORDER BY id DESC",
                super::query::COLUMNS
            ),
        },
        GrantProbe {
            privilege: "INSERT",
            table: named.clone(),
            statement: format!(
                "INSERT INTO {table} ({}) VALUES {}",
                super::writer::INSERT_COLUMNS,
                super::writer::probe_values()
            ),
        },
        GrantProbe {
            privilege: "DELETE",
            table: named,
            statement: format!("DELETE FROM {table} WHERE started_ms < 0 ORDER BY id LIMIT 1"),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_numbered_in_order_and_the_newest_is_known() {
        for (index, migration) in MIGRATIONS.iter().enumerate() {
            assert_eq!(migration.version as usize, index + 1, "{}", migration.name);
            assert!(!migration.statements.is_empty());
        }
        assert_eq!(
            MIGRATIONS.last().map(|m| m.version),
            Some(HISTORY_SCHEMA_VERSION)
        );
    }

    #[test]
    fn the_lock_name_fits() {
        assert!(lock_name(&"d".repeat(64)).len() <= LOCK_NAME_MAX);
        assert_eq!(lock_name("h"), "gorge_webhook_history.h");
    }
}
