//! Phorge's task queue on MySQL/MariaDB: `MysqlStore`'s
//! [`webhook_core::adoption::TaskQueue`], each operation one of the
//! statements in [`crate::sql`] on `{namespace}_worker`, and the check of
//! the grants task adoption needs ([`MysqlStore::adoption_grants_missing`]).
//! When to lease, extend and archive is the core's
//! ([`webhook_core::adoption`]).
//!
//! Only the task's `objectPHID` (the request's PHID, as Phorge queues it)
//! is read, never its data row: the grants needed are SELECT, UPDATE and
//! DELETE on `worker_activetask` and INSERT on `worker_archivetask`.

use std::time::Duration;

use async_trait::async_trait;
use mysql_async::Value;
use webhook_core::adoption::{
    AdoptableTask, ArchiveResult, EndedTask, RequestTask, TaskLease, TaskQueue, DAEMON_LEASE_PREFIX,
};
use webhook_core::{StoreError, UnixTime};

use crate::connector::Connector;
use crate::error::{server_code_of, MysqlError};
use crate::grants;
use crate::rows;
use crate::sql;
use crate::store::MysqlStore;

/// MySQL's duplicate-key error (an archive row already there: a commit
/// whose answer was lost).
const ER_DUP_ENTRY: u16 = 1062;

/// `LIKE` pattern of every daemon instance's leases: a finished task is
/// archived by whichever instance sees it first, so one stopped with its
/// leases still running leaves nothing behind for long.
fn any_daemon() -> String {
    format!("{DAEMON_LEASE_PREFIX}%")
}

#[async_trait]
impl TaskQueue for MysqlStore {
    async fn unleased_tasks(&self, limit: u64) -> Result<Vec<u64>, StoreError> {
        task_ids(
            self.connector(),
            &sql::tasks_unleased(self.namespace()),
            limit,
        )
        .await
    }

    async fn adoptable_tasks(&self, limit: u64) -> Result<Vec<AdoptableTask>, StoreError> {
        let statement = sql::tasks_adoptable(self.namespace());
        let found = self
            .connector()
            .all_rows(statement.as_str(), (limit,))
            .await?;
        found
            .into_iter()
            .map(|mut row| {
                let id = rows::unsigned(&mut row, 0, "id", 0)?;
                let yielded = rows::unsigned(&mut row, 1, "yielded", id)? == 1;
                Ok(AdoptableTask { id, yielded })
            })
            .collect()
    }

    async fn lease_tasks(
        &self,
        ids: &[u64],
        owner: &str,
        lease: Duration,
    ) -> Result<u64, StoreError> {
        if ids.is_empty() {
            return Ok(0);
        }
        let mut params: Vec<Value> = Vec::with_capacity(ids.len() + 2);
        params.push(Value::from(owner));
        params.push(Value::from(lease.as_secs()));
        params.extend(ids.iter().map(|id| Value::from(*id)));
        let statement = sql::tasks_adopt(self.namespace(), ids.len());
        changed(self.connector(), &statement, params).await
    }

    async fn release_leases(&self, owner_prefix: &str) -> Result<u64, StoreError> {
        let pattern = format!("{owner_prefix}%");
        let statement = sql::tasks_release(self.namespace());
        changed(self.connector(), &statement, vec![Value::from(pattern)]).await
    }

    async fn renew_daemon_leases(
        &self,
        lease: Duration,
        due_within: Duration,
    ) -> Result<u64, StoreError> {
        let params = vec![
            Value::from(lease.as_secs()),
            Value::from(any_daemon()),
            Value::from(due_within.as_secs()),
        ];
        changed(
            self.connector(),
            &sql::tasks_renew(self.namespace()),
            params,
        )
        .await
    }

    async fn tasks_of_requests(
        &self,
        request_phids: &[&str],
    ) -> Result<Vec<RequestTask>, StoreError> {
        if request_phids.is_empty() {
            return Ok(Vec::new());
        }
        let params: Vec<Value> = request_phids
            .iter()
            .map(|phid| Value::from(*phid))
            .collect();
        let statement = sql::tasks_of_requests(self.namespace(), request_phids.len());
        let found = self
            .connector()
            .all_rows(statement.as_str(), params)
            .await?;
        found
            .into_iter()
            .map(|mut row| {
                let id = rows::unsigned(&mut row, 1, "id", 0)?;
                Ok(RequestTask {
                    request_phid: rows::text(&mut row, 0, "objectPHID", id)?,
                    id,
                    lease: TaskLease {
                        owner: rows::optional_text(&mut row, 2, "leaseOwner", id)?,
                        secs_left: rows::optional_signed(&mut row, 3, "leaseExpires", id)?,
                    },
                })
            })
            .collect()
    }

    async fn ended_tasks(&self, limit: u64) -> Result<Vec<EndedTask>, StoreError> {
        let found = self
            .connector()
            .all_rows(
                sql::tasks_ended(self.namespace()).as_str(),
                (any_daemon(), limit),
            )
            .await?;
        found
            .into_iter()
            .map(|mut row| {
                let id = rows::unsigned(&mut row, 0, "id", 0)?;
                Ok(EndedTask {
                    id,
                    status: rows::optional_text(&mut row, 1, "status", id)?,
                    properties: rows::optional_text(&mut row, 2, "properties", id)?,
                })
            })
            .collect()
    }

    /// All in one transaction, or, when one of them is in the archive
    /// already, one by one, so that one never holds up the others.
    async fn archive_tasks(&self, ids: &[u64], result: ArchiveResult) -> Result<u64, StoreError> {
        if ids.is_empty() {
            return Ok(0);
        }
        let (connector, namespace) = (self.connector(), self.namespace());
        match archive_together(connector, namespace, ids, result).await {
            Err(err) if server_code_of(&err) == Some(ER_DUP_ENTRY) => {
                let mut moved = 0;
                for id in ids {
                    moved += match archive_together(connector, namespace, &[*id], result).await {
                        Ok(one) => one,
                        // Archived before: only the active row is left.
                        Err(err) if server_code_of(&err) == Some(ER_DUP_ENTRY) => {
                            remove_archived(connector, namespace, *id).await?
                        }
                        Err(err) => return Err(connector.statement_error(err)),
                    };
                }
                Ok(moved)
            }
            other => other.map_err(|err| connector.statement_error(err)),
        }
    }

    async fn queue_now(&self) -> Result<UnixTime, StoreError> {
        match self.connector().first_row(sql::SERVER_NOW, ()).await? {
            Some(mut row) => rows::unsigned(&mut row, 0, "UNIX_TIMESTAMP()", 0),
            None => Err(self.connector().unexpected("SERVER_NOW", "answered no row")),
        }
    }
}

impl MysqlStore {
    /// The privileges task adoption needs that the account lacks, each as
    /// `PRIVILEGE on db.table`; empty when it has them all
    /// ([`crate::grants`]). A probe failing for another reason (a missing
    /// table, the server away) is an error.
    pub async fn adoption_grants_missing(&self) -> Result<Vec<String>, StoreError> {
        grants::missing(
            self.connector(),
            &sql::adoption_grant_probes(self.namespace()),
        )
        .await
    }
}

/// The task ids `statement` selects, taking the limit as its parameter.
async fn task_ids(
    connector: &Connector,
    statement: &str,
    limit: u64,
) -> Result<Vec<u64>, StoreError> {
    let found = connector.all_rows(statement, (limit,)).await?;
    found
        .into_iter()
        .map(|mut row| rows::unsigned(&mut row, 0, "id", 0))
        .collect()
}

/// Runs a write; the rows it matched (the connection reports found rows).
async fn changed(
    connector: &Connector,
    statement: &str,
    params: Vec<Value>,
) -> Result<u64, StoreError> {
    let mut conn = connector.conn().await?;
    conn.exec_drop(statement, params)
        .await
        .map_err(|err| connector.statement_error(err))?;
    Ok(conn.affected_rows())
}

/// One transaction: the listed tasks a daemon still leases are locked,
/// copied into the archive and removed from the queue, so of two
/// instances (or a taskmaster) only one moves a task. A failure closes the
/// connection, which rolls the transaction back.
async fn archive_together(
    connector: &Connector,
    namespace: &str,
    ids: &[u64],
    result: ArchiveResult,
) -> Result<u64, MysqlError> {
    let mut conn = connector.connect().await?;
    let outcome = async {
        conn.query_drop("START TRANSACTION").await?;
        let mut lock: Vec<Value> = Vec::with_capacity(ids.len() + 1);
        lock.push(Value::from(any_daemon()));
        lock.extend(ids.iter().map(|id| Value::from(*id)));
        let held: Vec<mysql_async::Row> = conn
            .exec(sql::tasks_lock_ours(namespace, ids.len()).as_str(), lock)
            .await?;
        let held = held
            .into_iter()
            .map(|mut row| rows::unsigned(&mut row, 0, "id", 0))
            .collect::<Result<Vec<u64>, _>>()
            .map_err(|err| MysqlError::UnexpectedResult {
                statement: "tasks_lock_ours",
                detail: err.to_string(),
            })?;
        let mut moved = 0;
        if !held.is_empty() {
            let mut archive: Vec<Value> = Vec::with_capacity(held.len() + 1);
            archive.push(Value::from(result.code()));
            archive.extend(held.iter().map(|id| Value::from(*id)));
            conn.exec_drop(sql::tasks_archive(namespace, held.len()).as_str(), archive)
                .await?;
            let remove: Vec<Value> = held.iter().map(|id| Value::from(*id)).collect();
            conn.exec_drop(sql::tasks_remove(namespace, held.len()).as_str(), remove)
                .await?;
            moved = conn.affected_rows();
        }
        conn.query_drop("COMMIT").await?;
        Ok::<u64, MysqlError>(moved)
    }
    .await;
    if outcome.is_err() {
        conn.close().await;
    }
    outcome
}

/// Removes task `id` from the queue when a daemon still leases it (its
/// archive row exists already). 1 if removed.
async fn remove_archived(
    connector: &Connector,
    namespace: &str,
    id: u64,
) -> Result<u64, StoreError> {
    let params = vec![Value::from(id), Value::from(any_daemon())];
    changed(
        connector,
        &sql::task_remove_if_daemon_leased(namespace),
        params,
    )
    .await
}
