//! Phorge's per-hook named lock (`GET_LOCK(name, 0)`), held by one pooled
//! connection for as long as a delivery to that hook runs.
//!
//! A MySQL named lock belongs to a session, so the connection that took it
//! must not serve anyone else until the lock is freed. Three ways free it:
//! [`HookLock::release`] (`RELEASE_LOCK`, the normal path); dropping the
//! lock inside a Tokio runtime (a spawned task runs `RELEASE_LOCK`); and,
//! as the net under both, the connection is marked for
//! `COM_RESET_CONNECTION` from the moment the lock is taken, so if it ever
//! returns to the pool still holding the lock (no runtime, a cancelled
//! task, a failed release) the pool's reset frees every named lock of that
//! session — or, if the pool is gone, closing the socket does.

use std::fmt;

use async_trait::async_trait;
use mysql_async::Row;
use webhook_core::{HookLock, StoreError};

use crate::error::MysqlError;
use crate::rows;
use crate::session::Session;
use crate::sql;

/// A held per-hook lock and the connection that holds it.
pub struct MysqlHookLock {
    name: String,
    connection_id: u32,
    database: String,
    /// `None` once released or handed to the drop path. Its statements
    /// are bounded: on a timeout the session is abandoned and killed,
    /// which frees the lock on the server (`crate::session`).
    conn: Option<Session>,
}

impl fmt::Debug for MysqlHookLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlHookLock")
            .field("name", &self.name)
            .field("connection_id", &self.connection_id)
            .field("held", &self.conn.is_some())
            .finish()
    }
}

impl MysqlHookLock {
    /// The `GET_LOCK` name (Phorge's, see `webhook_core::hook_lock_name`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The server's id of the holding session, as `IS_USED_LOCK` reports it.
    pub fn connection_id(&self) -> u32 {
        self.connection_id
    }

    /// Tries `GET_LOCK(name, 0)` on `conn`: the lock when taken, `None`
    /// (and the connection back to the pool) when another session holds it.
    pub(crate) async fn acquire(
        mut conn: Session,
        name: String,
        database: &str,
    ) -> Result<Option<Self>, StoreError> {
        // Armed before the lock exists, so a cancellation between the
        // server taking the lock and us recording it still frees it.
        conn.reset_connection(true);
        let answer = conn
            .exec_first::<Row, _, _>(sql::GET_LOCK, (name.as_str(),))
            .await
            .map_err(|err| err.into_store_error(database))?;
        match rows::nullable_int(answer, "GET_LOCK") {
            Ok(Some(1)) => Ok(Some(Self {
                name,
                connection_id: conn.id(),
                database: database.to_owned(),
                conn: Some(conn),
            })),
            Ok(Some(0)) => {
                // Nothing held: keep the connection's statement cache.
                conn.reset_connection(false);
                Ok(None)
            }
            Ok(other) => Err(unexpected("GET_LOCK", format!("{other:?}"), database)),
            Err(detail) => Err(unexpected("GET_LOCK", detail, database)),
        }
    }
}

fn unexpected(statement: &'static str, detail: String, database: &str) -> StoreError {
    MysqlError::UnexpectedResult { statement, detail }.into_store_error(database)
}

/// `RELEASE_LOCK` on the holding connection, which then goes back to the
/// pool. Anything but 1 means the session no longer held the lock.
async fn release_on(mut conn: Session, name: &str, database: &str) -> Result<(), StoreError> {
    let answer = conn
        .exec_first::<Row, _, _>(sql::RELEASE_LOCK, (name,))
        .await
        .map_err(|err| err.into_store_error(database))?;
    match rows::nullable_int(answer, "RELEASE_LOCK") {
        Ok(Some(1)) => {
            // Freed: no reset needed, so the statement cache survives.
            conn.reset_connection(false);
            Ok(())
        }
        Ok(_) => Err(MysqlError::LockNotHeld {
            name: name.to_owned(),
        }
        .into_store_error(database)),
        Err(detail) => Err(unexpected("RELEASE_LOCK", detail, database)),
    }
}

#[async_trait]
impl HookLock for MysqlHookLock {
    async fn release(mut self: Box<Self>) -> Result<(), StoreError> {
        match self.conn.take() {
            Some(conn) => release_on(conn, &self.name, &self.database).await,
            None => Ok(()),
        }
    }

    /// Asked on the holding connection itself: if its session broke, the
    /// question fails, and either way the lock is not ours any more.
    async fn still_held(&mut self) -> Result<bool, StoreError> {
        let Some(conn) = self.conn.as_mut() else {
            return Ok(false);
        };
        let answer = conn
            .exec_first::<Row, _, _>(sql::LOCK_STILL_HELD, (self.name.as_str(),))
            .await
            .map_err(|err| err.into_store_error(&self.database))?;
        match rows::nullable_int(answer, "IS_USED_LOCK") {
            Ok(Some(1)) => Ok(true),
            Ok(Some(0)) => Ok(false),
            Ok(other) => Err(unexpected(
                "IS_USED_LOCK",
                format!("{other:?}"),
                &self.database,
            )),
            Err(detail) => Err(unexpected("IS_USED_LOCK", detail, &self.database)),
        }
    }
}

impl Drop for MysqlHookLock {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                let name = std::mem::take(&mut self.name);
                let database = std::mem::take(&mut self.database);
                handle.spawn(async move {
                    if let Err(err) = release_on(conn, &name, &database).await {
                        tracing::warn!(
                            event = "hook_lock_release_failed",
                            lock = %name,
                            error = %webhook_core::error_chain(&err),
                            "releasing a dropped hook lock failed; the connection reset frees it"
                        );
                    }
                });
            }
            // Nothing can run RELEASE_LOCK here; the connection's reset
            // mark (or, without a pool, closing it) frees the lock.
            Err(_) => drop(conn),
        }
    }
}
