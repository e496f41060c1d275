//! Phorge's task queue in a test's `{namespace}_worker` database: its three
//! tables with Phorge's columns and keys, a webhook task queued as
//! Phorge's `queueCall` queues it, the task's state as read back, and a
//! taskmaster's lease taken the way Phorge's lease query takes one, so a
//! test can ask "could `phd` run this now?" and act as `phd` would.

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row};

use crate::mariadb::{server_conn, PhorgeSide};

/// `worker_activetask`, `worker_archivetask` and `worker_taskdata` as
/// Phorge's schema has them (its quickstart plus the 2021 `containerPHID`
/// patch): no auto-increment on the task ids (Phorge allocates them from
/// a counter, and an archived task keeps its id).
pub const WORKER_DDL: [&str; 3] = [
    "CREATE TABLE worker_activetask (
        id INT UNSIGNED NOT NULL,
        taskClass VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
        leaseOwner VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT NULL,
        leaseExpires INT UNSIGNED DEFAULT NULL,
        failureCount INT UNSIGNED NOT NULL,
        dataID INT UNSIGNED NOT NULL,
        failureTime INT UNSIGNED DEFAULT NULL,
        priority INT UNSIGNED NOT NULL,
        objectPHID VARBINARY(64) DEFAULT NULL,
        dateCreated INT UNSIGNED NOT NULL,
        dateModified INT UNSIGNED NOT NULL,
        containerPHID VARBINARY(64) DEFAULT NULL,
        PRIMARY KEY (id),
        KEY leaseExpires (leaseExpires),
        KEY key_failuretime (failureTime),
        KEY taskClass (taskClass),
        KEY key_owner (leaseOwner, priority, id),
        KEY key_object (objectPHID),
        KEY key_container (containerPHID)
    ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
    "CREATE TABLE worker_archivetask (
        id INT UNSIGNED NOT NULL,
        taskClass VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
        leaseOwner VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT NULL,
        leaseExpires INT UNSIGNED DEFAULT NULL,
        failureCount INT UNSIGNED NOT NULL,
        dataID INT UNSIGNED NOT NULL,
        result INT UNSIGNED NOT NULL,
        duration BIGINT UNSIGNED NOT NULL,
        dateCreated INT UNSIGNED NOT NULL,
        dateModified INT UNSIGNED NOT NULL,
        priority INT UNSIGNED NOT NULL,
        objectPHID VARBINARY(64) DEFAULT NULL,
        archivedEpoch INT UNSIGNED DEFAULT NULL,
        containerPHID VARBINARY(64) DEFAULT NULL,
        PRIMARY KEY (id),
        KEY dateCreated (dateCreated),
        KEY key_modified (dateModified),
        KEY key_object (objectPHID),
        KEY key_container (containerPHID)
    ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
    "CREATE TABLE worker_taskdata (
        id INT UNSIGNED NOT NULL AUTO_INCREMENT,
        data LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
        PRIMARY KEY (id)
    ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
];

/// Phorge's default task priority, which webhook tasks get.
pub const PRIORITY_DEFAULT: u32 = 2_000;

/// How long a taskmaster's lease lasts (Phorge's default lease).
pub const TASKMASTER_LEASE_SECS: u32 = 7_200;

/// A task in the active queue, as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveTask {
    /// `leaseOwner`.
    pub lease_owner: Option<String>,
    /// `leaseExpires` minus the server's `UNIX_TIMESTAMP()`.
    pub lease_left_secs: Option<i64>,
    /// `failureCount`.
    pub failure_count: u32,
}

/// A task in the archive, as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchivedTask {
    /// `result`: 0 success, 1 failure, 2 cancelled.
    pub result: u32,
    /// `leaseOwner` as it stood when archived.
    pub lease_owner: Option<String>,
    /// `taskClass`.
    pub task_class: String,
    /// `dataID`: the data row survives the archive.
    pub data_id: u32,
    /// `objectPHID`.
    pub object_phid: String,
    /// Whether `archivedEpoch` is set.
    pub archived_epoch_set: bool,
}

impl PhorgeSide {
    /// Queues a webhook task for `request_phid` as Phorge's `queueCall`
    /// does: a data row naming the request, then an unleased task of class
    /// `HeraldWebhookWorker` whose `objectPHID` is the request. The id.
    pub async fn queue_webhook_task(&self, request_phid: &str) -> u64 {
        self.queue_task("HeraldWebhookWorker", Some(request_phid))
            .await
    }

    /// Queues a task of `class` (`object_phid` as its `objectPHID` and the
    /// request its data names). The id.
    pub async fn queue_task(&self, class: &str, object_phid: Option<&str>) -> u64 {
        let mut conn = server_conn().await;
        // Request PHIDs hold no characters JSON escapes.
        let data = match object_phid {
            Some(phid) => format!("{{\"webhookRequestPHID\":\"{phid}\"}}"),
            None => "{\"webhookRequestPHID\":null}".to_owned(),
        };
        conn.exec_drop(
            format!(
                "INSERT INTO `{}`.worker_taskdata (data) VALUES (?)",
                self.worker
            ),
            (data,),
        )
        .await
        .expect("insert task data");
        let data_id = conn.last_insert_id().expect("task data id");
        let id: u64 = conn
            .query_first(format!(
                "SELECT GREATEST(COALESCE((SELECT MAX(id) FROM `{w}`.worker_activetask), 0), \
                 COALESCE((SELECT MAX(id) FROM `{w}`.worker_archivetask), 0)) + 1",
                w = self.worker
            ))
            .await
            .expect("next task id")
            .expect("a row");
        conn.exec_drop(
            format!(
                "INSERT INTO `{}`.worker_activetask (id, taskClass, leaseOwner, leaseExpires, \
                 failureCount, dataID, priority, objectPHID, dateCreated, dateModified) \
                 VALUES (?, ?, NULL, NULL, 0, ?, ?, ?, UNIX_TIMESTAMP(), UNIX_TIMESTAMP())",
                self.worker
            ),
            (id, class, data_id, PRIORITY_DEFAULT, object_phid),
        )
        .await
        .expect("insert task");
        conn.disconnect().await.expect("disconnect");
        id
    }

    /// Queues a PHP `HeraldWebhookWorker` task for no particular request,
    /// leased by a taskmaster or not.
    pub async fn queue_php_task(&self, leased: bool) {
        let id = self.queue_task("HeraldWebhookWorker", None).await;
        if leased {
            self.set_lease(id, Some("12345:1700000000:php-host:1"), Some(3_600))
                .await;
        }
    }

    /// Sets a task's lease: `owner`, and `leaseExpires` this many seconds
    /// from the server's now (negative: lapsed).
    pub async fn set_lease(&self, id: u64, owner: Option<&str>, expires_in: Option<i64>) {
        let mut conn = server_conn().await;
        conn.exec_drop(
            format!(
                "UPDATE `{}`.worker_activetask SET leaseOwner = ?, \
                 leaseExpires = UNIX_TIMESTAMP() + ? WHERE id = ?",
                self.worker
            ),
            (owner, expires_in, id),
        )
        .await
        .expect("set lease");
        conn.disconnect().await.expect("disconnect");
    }

    /// The task in the active queue, if it is there.
    pub async fn active_task(&self, id: u64) -> Option<ActiveTask> {
        let mut conn = server_conn().await;
        let row: Option<Row> = conn
            .exec_first(
                format!(
                    "SELECT leaseOwner, CAST(leaseExpires AS SIGNED) - UNIX_TIMESTAMP(), failureCount \
                     FROM `{}`.worker_activetask WHERE id = ?",
                    self.worker
                ),
                (id,),
            )
            .await
            .expect("read task");
        conn.disconnect().await.expect("disconnect");
        row.map(|mut row| ActiveTask {
            lease_owner: row.take(0).expect("leaseOwner"),
            lease_left_secs: row.take(1).expect("lease left"),
            failure_count: row.take(2).expect("failureCount"),
        })
    }

    /// The task in the archive, if it is there.
    pub async fn archived_task(&self, id: u64) -> Option<ArchivedTask> {
        let mut conn = server_conn().await;
        let row: Option<Row> = conn
            .exec_first(
                format!(
                    "SELECT result, leaseOwner, taskClass, dataID, objectPHID, \
                     archivedEpoch IS NOT NULL FROM `{}`.worker_archivetask WHERE id = ?",
                    self.worker
                ),
                (id,),
            )
            .await
            .expect("read archived task");
        conn.disconnect().await.expect("disconnect");
        row.map(|mut row| ArchivedTask {
            result: row.take(0).expect("result"),
            lease_owner: row.take(1).expect("leaseOwner"),
            task_class: row.take(2).expect("taskClass"),
            data_id: row.take(3).expect("dataID"),
            object_phid: row.take(4).expect("objectPHID"),
            archived_epoch_set: row.take::<i64, _>(5).expect("archivedEpoch") == 1,
        })
    }

    /// Rows in `worker_archivetask`.
    pub async fn archived_count(&self) -> u64 {
        let mut conn = server_conn().await;
        let count: u64 = conn
            .query_first(format!(
                "SELECT COUNT(*) FROM `{}`.worker_archivetask",
                self.worker
            ))
            .await
            .expect("count archive")
            .expect("a row");
        conn.disconnect().await.expect("disconnect");
        count
    }

    /// A webhook task in the archive as if run and ended under `owner`'s
    /// lease (a taskmaster's or a daemon's), with a fresh id. The id.
    pub async fn archive_webhook_task_as(&self, owner: &str) -> u64 {
        let id = self
            .queue_webhook_task("PHID-HWBR-archivedarchivedarch")
            .await;
        let mut conn = server_conn().await;
        let w = &self.worker;
        conn.exec_drop(
            format!(
                "INSERT INTO `{w}`.worker_archivetask (id, taskClass, leaseOwner, leaseExpires, \
                 failureCount, dataID, result, duration, dateCreated, dateModified, priority, \
                 objectPHID, archivedEpoch) SELECT id, taskClass, ?, leaseExpires, failureCount, \
                 dataID, 0, 0, dateCreated, dateModified, priority, objectPHID, UNIX_TIMESTAMP() \
                 FROM `{w}`.worker_activetask WHERE id = ?"
            ),
            (owner, id),
        )
        .await
        .expect("archive the task");
        conn.exec_drop(
            format!("DELETE FROM `{w}`.worker_activetask WHERE id = ?"),
            (id,),
        )
        .await
        .expect("remove the archived task");
        conn.disconnect().await.expect("disconnect");
        id
    }

    /// Leases one task as a Phorge taskmaster does, or `None` when its
    /// lease query finds nothing it may run: first a task with no owner
    /// (by priority, then id), then one whose lease lapsed (soonest
    /// lapsed first), each taken with an `UPDATE` that re-checks what the
    /// `SELECT` saw. Any task class, as the taskmaster takes any.
    pub async fn taskmaster_lease(&self, owner: &str) -> Option<u64> {
        let mut conn = server_conn().await;
        let leased = self.taskmaster_lease_on(&mut conn, owner).await;
        conn.disconnect().await.expect("disconnect");
        leased
    }

    /// [`Self::taskmaster_lease`] on a connection the caller keeps, as a
    /// taskmaster keeps its own between tasks.
    pub async fn taskmaster_lease_on(&self, conn: &mut Conn, owner: &str) -> Option<u64> {
        let table = format!("`{}`.worker_activetask", self.worker);
        let mut leased = None;
        let unleased: Option<u64> = conn
            .query_first(format!(
                "SELECT id FROM {table} WHERE leaseOwner IS NULL ORDER BY priority, id LIMIT 1"
            ))
            .await
            .expect("lease query, unleased");
        if let Some(id) = unleased {
            conn.exec_drop(
                format!(
                    "UPDATE {table} SET leaseOwner = ?, leaseExpires = UNIX_TIMESTAMP() + ? \
                     WHERE leaseOwner IS NULL AND id IN (?)"
                ),
                (owner, TASKMASTER_LEASE_SECS, id),
            )
            .await
            .expect("lease, unleased");
            if conn.affected_rows() == 1 {
                leased = Some(id);
            }
        }
        if leased.is_none() {
            let expired: Option<(u64, Option<String>)> = conn
                .query_first(format!(
                    "SELECT id, leaseOwner FROM {table} WHERE leaseExpires < UNIX_TIMESTAMP() \
                     ORDER BY leaseExpires LIMIT 1"
                ))
                .await
                .expect("lease query, expired");
            if let Some((id, seen_owner)) = expired {
                conn.exec_drop(
                    format!(
                        "UPDATE {table} SET leaseOwner = ?, leaseExpires = UNIX_TIMESTAMP() + ? \
                         WHERE id = ? AND leaseOwner = ?"
                    ),
                    (owner, TASKMASTER_LEASE_SECS, id, seen_owner),
                )
                .await
                .expect("lease, expired");
                if conn.affected_rows() == 1 {
                    leased = Some(id);
                }
            }
        }
        leased
    }
}

/// What a taskmaster did with one webhook task, as Phorge's
/// `HeraldWebhookWorker` would.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerRun {
    /// The request was no longer queued (or gone): the worker declines
    /// the call and the task is archived.
    Declined,
    /// The hook's lock was held elsewhere: the task yields for 15 s
    /// (owner `(yield)`), a line in phd's log.
    Yielded,
    /// The worker took the hook's lock: it would call the hook. Here it
    /// writes the request `sent` as the call's result and archives the
    /// task, so the request is counted as delivered by PHP.
    Delivered,
}

/// A busy `phd` taskmaster, on a connection of its own: it leases webhook
/// tasks by Phorge's lease query and runs each the way
/// `HeraldWebhookWorker` does up to its call: the request must be
/// `queued`, then the hook's lock is taken without waiting, or the task
/// yields.
#[derive(Debug)]
pub struct Taskmaster<'a> {
    side: &'a PhorgeSide,
    herald: String,
    namespace: String,
    owner: String,
    conn: Conn,
}

impl<'a> Taskmaster<'a> {
    /// A taskmaster for the Phorge whose storage namespace is `namespace`.
    pub async fn new(side: &'a PhorgeSide, namespace: &str, owner: &str) -> Self {
        Self {
            side,
            herald: format!("{namespace}_herald"),
            namespace: namespace.to_owned(),
            owner: owner.to_owned(),
            conn: server_conn().await,
        }
    }

    /// Leases the next task it may run and runs it; `None` when the lease
    /// query found nothing.
    pub async fn run_next(&mut self) -> Option<(u64, WorkerRun)> {
        let id = self
            .side
            .taskmaster_lease_on(&mut self.conn, &self.owner)
            .await?;
        Some((id, self.run(id).await))
    }

    async fn run(&mut self, id: u64) -> WorkerRun {
        let worker = &self.side.worker;
        let request: Option<(String, String)> = self
            .conn
            .exec_first(
                format!(
                    "SELECT r.status, r.webhookPHID FROM `{worker}`.worker_activetask t \
                     JOIN `{}`.herald_webhookrequest r ON r.phid = t.objectPHID WHERE t.id = ?",
                    self.herald
                ),
                (id,),
            )
            .await
            .expect("the task's request");
        let Some(("queued", hook)) = request.as_ref().map(|(s, h)| (s.as_str(), h.clone())) else {
            self.archive(id).await;
            return WorkerRun::Declined;
        };
        let name = webhook_core::hook_lock_name(&self.namespace, &hook);
        let locked: Option<i64> = self
            .conn
            .exec_first("SELECT GET_LOCK(?, 0)", (&name,))
            .await
            .expect("GET_LOCK")
            .flatten();
        if locked != Some(1) {
            self.conn
                .exec_drop(
                    format!(
                        "UPDATE `{worker}`.worker_activetask SET leaseOwner = '(yield)', \
                         leaseExpires = UNIX_TIMESTAMP() + 15 WHERE id = ? AND leaseOwner = ?"
                    ),
                    (id, &self.owner),
                )
                .await
                .expect("yield");
            return WorkerRun::Yielded;
        }
        self.conn
            .exec_drop(
                format!(
                    "UPDATE `{}`.herald_webhookrequest SET status = 'sent', \
                     lastRequestResult = 'okay', lastRequestEpoch = UNIX_TIMESTAMP() \
                     WHERE phid = (SELECT objectPHID FROM `{worker}`.worker_activetask \
                     WHERE id = ?)",
                    self.herald
                ),
                (id,),
            )
            .await
            .expect("the call's result");
        self.conn
            .exec_drop("SELECT RELEASE_LOCK(?)", (&name,))
            .await
            .expect("RELEASE_LOCK");
        self.archive(id).await;
        WorkerRun::Delivered
    }

    /// Ends the task (its archive is not what the tests look at).
    async fn archive(&mut self, id: u64) {
        let worker = &self.side.worker;
        self.conn
            .exec_drop(
                format!("DELETE FROM `{worker}`.worker_activetask WHERE id = ?"),
                (id,),
            )
            .await
            .expect("end the task");
    }
}
