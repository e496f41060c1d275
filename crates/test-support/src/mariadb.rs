//! Test databases on the local MariaDB: each test gets a uniquely named
//! namespace (`wh_t_<pid>_<counter>_<random>`) whose `<ns>_herald` database
//! holds Phorge's two tables as protocol §2 describes them, and the database is
//! dropped afterwards, on failure too. Rows are written and read with raw
//! SQL, as Phorge would, independently of the store under test.
//!
//! Test code: it panics with a clear message when the database does.

use std::collections::hash_map::RandomState;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::FutureExt;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, OptsBuilder, Pool, Row};
use webhook_core::memory_store::NewRequest;
use webhook_core::{Hook, RequestRow};
use webhook_store_mysql::sql::REQUEST_SELECT_LIST;
use webhook_store_mysql::{MysqlConfig, MysqlStore};

/// The local MariaDB's address and account.
pub const HOST: &str = "127.0.0.1";
/// See [`HOST`].
pub const PORT: u16 = 3306;
/// See [`HOST`].
pub const USER: &str = "root";

/// `herald_webhookrequest` as Phorge creates it (plus the hand-off patch's
/// `key_status`).
pub const REQUEST_TABLE_DDL: &str = "CREATE TABLE herald_webhookrequest (
    id INT UNSIGNED NOT NULL AUTO_INCREMENT,
    phid VARBINARY(64) NOT NULL,
    webhookPHID VARBINARY(64) NOT NULL,
    objectPHID VARBINARY(64) NOT NULL,
    status VARCHAR(32) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    properties LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    lastRequestResult VARCHAR(32) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    lastRequestEpoch INT UNSIGNED NOT NULL,
    dateCreated INT UNSIGNED NOT NULL,
    dateModified INT UNSIGNED NOT NULL,
    PRIMARY KEY (id),
    UNIQUE KEY key_phid (phid),
    KEY key_ratelimit (webhookPHID, lastRequestResult, lastRequestEpoch),
    KEY key_collect (dateCreated),
    KEY key_status (status, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin";

/// `herald_webhook` as Phorge creates it (the late-2025 LONGTEXT URI).
pub const HOOK_TABLE_DDL: &str = "CREATE TABLE herald_webhook (
    id INT UNSIGNED NOT NULL AUTO_INCREMENT,
    phid VARBINARY(64) NOT NULL,
    name VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    webhookURI LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    viewPolicy VARBINARY(64) NOT NULL,
    editPolicy VARBINARY(64) NOT NULL,
    status VARCHAR(32) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    hmacKey VARCHAR(32) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    dateCreated INT UNSIGNED NOT NULL,
    dateModified INT UNSIGNED NOT NULL,
    PRIMARY KEY (id),
    UNIQUE KEY key_phid (phid),
    KEY key_status (status)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin";

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A namespace no other test (or test process) uses.
pub fn unique_namespace() -> String {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.load(Ordering::Relaxed));
    let random = hasher.finish() & 0xffff_ffff;
    format!(
        "wh_t_{}_{}_{random:08x}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Server connection options for the fixture's own (raw) sessions.
pub fn server_opts(database: Option<&str>) -> OptsBuilder {
    server_opts_on(PORT, database)
}

/// [`server_opts`] for the server on `port` (a private one).
pub fn server_opts_on(port: u16, database: Option<&str>) -> OptsBuilder {
    OptsBuilder::default()
        .ip_or_hostname(HOST)
        .tcp_port(port)
        .user(Some(USER))
        .prefer_socket(false)
        .db_name(database)
}

/// A store configuration for `namespace` on the local server.
pub fn config(namespace: &str) -> MysqlConfig {
    config_on(PORT, namespace)
}

/// [`config`] for the server on `port` (a private one).
pub fn config_on(port: u16, namespace: &str) -> MysqlConfig {
    MysqlConfig {
        host: HOST.to_owned(),
        port,
        user: USER.to_owned(),
        password: String::new(),
        namespace: namespace.to_owned(),
        connect_timeout: Duration::from_secs(10),
        ..MysqlConfig::default()
    }
}

/// A raw session without a default database.
pub async fn server_conn() -> Conn {
    Conn::new(server_opts(None))
        .await
        .expect("connect to the local MariaDB at 127.0.0.1:3306 as root")
}

/// `CREATE DATABASE` only; tables are separate so tests can leave them out.
pub async fn create_database(database: &str) {
    create_database_on(PORT, database).await;
}

async fn create_database_on(port: u16, database: &str) {
    let mut conn = Conn::new(server_opts_on(port, None))
        .await
        .expect("connect to the server as root");
    conn.query_drop(format!(
        "CREATE DATABASE `{database}` DEFAULT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
    ))
    .await
    .expect("create database");
    conn.disconnect().await.expect("disconnect");
}

/// `DROP DATABASE IF EXISTS`.
pub async fn drop_database(database: &str) {
    drop_database_on(PORT, database).await;
}

async fn drop_database_on(port: u16, database: &str) {
    let mut conn = Conn::new(server_opts_on(port, None))
        .await
        .expect("connect to the server as root");
    conn.query_drop(format!("DROP DATABASE IF EXISTS `{database}`"))
        .await
        .expect("drop database");
    conn.disconnect().await.expect("disconnect");
}

/// Runs `body` and then drops `database`, also when `body` panics.
pub async fn dropping_after<Fut: Future<Output = ()>>(database: &str, body: Fut) {
    dropping_after_on(PORT, database, body).await;
}

async fn dropping_after_on<Fut: Future<Output = ()>>(port: u16, database: &str, body: Fut) {
    let outcome = AssertUnwindSafe(body).catch_unwind().await;
    drop_database_on(port, database).await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// One statement as root, on a session of its own.
pub async fn as_root(statement: &str) {
    let mut conn = server_conn().await;
    conn.query_drop(statement)
        .await
        .unwrap_or_else(|e| panic!("{statement}: {e}"));
    conn.disconnect().await.expect("disconnect");
}

/// Runs `body` with a new account `'user'@'%'` (no password) holding
/// `privileges` on `database` (`GRANT {privileges} ON database.*`, a
/// database-level grant as `deploy/mariadb-init` gives the daemon), and
/// drops the account afterwards, also when `body` panics.
pub async fn with_account<Fut: Future<Output = ()>>(
    user: &str,
    privileges: &str,
    database: &str,
    body: Fut,
) {
    as_root(&format!("CREATE USER '{user}'@'%'")).await;
    let outcome = AssertUnwindSafe(async {
        as_root(&format!(
            "GRANT {privileges} ON `{database}`.* TO '{user}'@'%'"
        ))
        .await;
        body.await;
    })
    .catch_unwind()
    .await;
    as_root(&format!("DROP USER '{user}'@'%'")).await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// A fresh herald database with both tables.
#[derive(Clone, Debug)]
pub struct TestDb {
    /// Phorge's storage namespace for this database.
    pub namespace: String,
    /// `{namespace}_herald`.
    pub database: String,
    /// The server's port: the local MariaDB's, or a private one's.
    pub port: u16,
    pool: Pool,
    phids: std::sync::Arc<AtomicU64>,
}

/// Creates a fresh database, runs `body` with it, drops it (on failure too).
pub async fn with_db<F, Fut>(body: F)
where
    F: FnOnce(TestDb) -> Fut,
    Fut: Future<Output = ()>,
{
    with_db_on(PORT, body).await;
}

/// [`with_db`] on the server at `port` (a private one).
pub async fn with_db_on<F, Fut>(port: u16, body: F)
where
    F: FnOnce(TestDb) -> Fut,
    Fut: Future<Output = ()>,
{
    let namespace = unique_namespace();
    let database = format!("{namespace}_herald");
    create_database_on(port, &database).await;
    let db = TestDb {
        pool: Pool::new(server_opts_on(port, Some(&database))),
        namespace,
        database: database.clone(),
        port,
        phids: std::sync::Arc::new(AtomicU64::new(1)),
    };
    let pool = db.pool.clone();
    dropping_after_on(port, &database, async move {
        db.exec(REQUEST_TABLE_DDL).await;
        db.exec(HOOK_TABLE_DDL).await;
        body(db).await;
    })
    .await;
    let _ = pool.disconnect().await;
}

impl TestDb {
    /// A new store (its own pool) on this database.
    pub fn store(&self) -> MysqlStore {
        MysqlStore::new(&self.config()).expect("valid config")
    }

    /// The store configuration for this database.
    pub fn config(&self) -> MysqlConfig {
        config_on(self.port, &self.namespace)
    }

    /// A raw session on this database.
    pub async fn conn(&self) -> Conn {
        self.pool.get_conn().await.expect("fixture connection")
    }

    /// Runs one statement on this database.
    pub async fn exec(&self, sql: &str) {
        self.conn()
            .await
            .query_drop(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// The server's `UNIX_TIMESTAMP()`.
    pub async fn now(&self) -> u64 {
        self.conn()
            .await
            .query_first::<u64, _>("SELECT UNIX_TIMESTAMP()")
            .await
            .expect("now")
            .expect("a row")
    }

    /// Inserts a request as Phorge does: explicit columns, dates defaulting
    /// to the server's now (one statement, so both read the same clock).
    pub async fn insert_request(&self, request: &NewRequest) -> u64 {
        let mut conn = self.conn().await;
        insert_on(&mut conn, &self.phid_for(request), request).await
    }

    /// Inserts `count` copies of `request` in one transaction on one
    /// session (as [`Self::insert_request`] each); their ids, rising.
    pub async fn insert_requests(&self, request: &NewRequest, count: usize) -> Vec<u64> {
        let mut conn = self.conn().await;
        conn.query_drop("START TRANSACTION").await.expect("begin");
        let mut ids = Vec::with_capacity(count);
        for _ in 0..count {
            ids.push(insert_on(&mut conn, &self.phid_for(request), request).await);
        }
        conn.query_drop("COMMIT").await.expect("commit");
        ids
    }

    /// Begins inserting `request` in a transaction left open, as a Phorge
    /// process whose transaction commits late: the auto-increment id is
    /// handed out now, other sessions see the row only after
    /// [`PendingInsert::commit`].
    pub async fn begin_insert(&self, request: &NewRequest) -> PendingInsert {
        let mut conn = self.conn().await;
        conn.query_drop("START TRANSACTION").await.expect("begin");
        let id = insert_on(&mut conn, &self.phid_for(request), request).await;
        PendingInsert { conn, id }
    }

    /// Deletes a request row, as Phorge's garbage collector does.
    pub async fn delete_request(&self, id: u64) {
        self.conn()
            .await
            .exec_drop("DELETE FROM herald_webhookrequest WHERE id = ?", (id,))
            .await
            .expect("delete request");
    }

    fn phid_for(&self, request: &NewRequest) -> String {
        if request.phid.is_empty() {
            format!(
                "PHID-HWBR-{:020}",
                self.phids.fetch_add(1, Ordering::Relaxed)
            )
        } else {
            request.phid.clone()
        }
    }

    /// Inserts a hook row as Phorge would.
    pub async fn insert_hook(&self, hook: &Hook) {
        self.conn()
            .await
            .exec_drop(
                "INSERT INTO herald_webhook (phid, name, webhookURI, viewPolicy, editPolicy, \
                 status, hmacKey, dateCreated, dateModified) \
                 VALUES (?, ?, ?, 'users', 'admin', ?, ?, UNIX_TIMESTAMP(), UNIX_TIMESTAMP())",
                (
                    hook.phid.as_str(),
                    hook.name.as_str(),
                    hook.uri.as_str(),
                    hook.status.as_str(),
                    hook.hmac_key.as_str(),
                ),
            )
            .await
            .expect("insert hook");
    }

    /// Reads a row back with the fixture's own session.
    pub async fn row(&self, id: u64) -> RequestRow {
        let mut row: Row = self
            .conn()
            .await
            .exec_first(
                format!("SELECT {REQUEST_SELECT_LIST} FROM herald_webhookrequest WHERE id = ?"),
                (id,),
            )
            .await
            .expect("select row")
            .unwrap_or_else(|| panic!("row {id} exists"));
        let text = |row: &mut Row, i: usize| -> String { row.take(i).expect("column") };
        let number = |row: &mut Row, i: usize| -> u64 { row.take(i).expect("column") };
        RequestRow {
            id: number(&mut row, 0),
            phid: text(&mut row, 1),
            webhook_phid: text(&mut row, 2),
            object_phid: text(&mut row, 3),
            status: text(&mut row, 4).parse().expect("known status"),
            properties: text(&mut row, 5),
            last_request_result: text(&mut row, 6).parse().expect("known result"),
            last_request_epoch: number(&mut row, 7),
            date_created: number(&mut row, 8),
            date_modified: number(&mut row, 9),
            defect: None,
        }
    }

    /// The session id holding the named lock, if any.
    pub async fn lock_holder(&self, name: &str) -> Option<u32> {
        self.conn()
            .await
            .exec_first::<Option<u32>, _, _>("SELECT IS_USED_LOCK(?)", (name,))
            .await
            .expect("IS_USED_LOCK")
            .expect("a row")
    }

    /// Waits (bounded) until nobody holds `name`; true if that happened.
    pub async fn lock_freed_eventually(&self, name: &str) -> bool {
        for _ in 0..200 {
            if self.lock_holder(name).await.is_none() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        false
    }
}

/// An insert [`TestDb::begin_insert`] began, its transaction open.
#[derive(Debug)]
pub struct PendingInsert {
    conn: Conn,
    id: u64,
}

impl PendingInsert {
    /// The id the insert was handed.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Commits it: the row becomes visible.
    pub async fn commit(mut self) {
        self.conn.query_drop("COMMIT").await.expect("commit insert");
    }
}

/// One request insert on `conn`, as [`TestDb::insert_request`] writes it.
async fn insert_on(conn: &mut Conn, phid: &str, request: &NewRequest) -> u64 {
    conn.exec_drop(
        "INSERT INTO herald_webhookrequest (phid, webhookPHID, objectPHID, status, \
         properties, lastRequestResult, lastRequestEpoch, dateCreated, dateModified) \
         VALUES (?, ?, ?, ?, ?, ?, ?, COALESCE(?, UNIX_TIMESTAMP()), \
         COALESCE(?, ?, UNIX_TIMESTAMP()))",
        (
            phid,
            request.webhook_phid.as_str(),
            request.object_phid.as_str(),
            request.status.as_str(),
            request.properties.as_str(),
            request.last_request_result.as_str(),
            request.last_request_epoch,
            request.date_created,
            request.date_modified,
            request.date_created,
        ),
    )
    .await
    .expect("insert request");
    conn.last_insert_id().expect("auto-increment id")
}

/// `config_entry` as Phorge creates it in `{namespace}_config`: the
/// database-stored configuration (`phabricator.silent` lives here).
pub const CONFIG_ENTRY_DDL: &str = "CREATE TABLE config_entry (
    id INT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
    phid VARBINARY(64) NOT NULL,
    namespace VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    configKey VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    value LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    isDeleted TINYINT(1) NOT NULL,
    dateCreated INT UNSIGNED NOT NULL,
    dateModified INT UNSIGNED NOT NULL,
    UNIQUE KEY key_phid (phid),
    UNIQUE KEY key_name (namespace, configKey)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin";

/// Phorge's config and worker databases next to a test's herald database:
/// `{namespace}_config` and `{namespace}_worker`, with their tables. Drop
/// them with [`PhorgeSide::drop`], or let [`with_phorge_side`] do it.
#[derive(Debug, Clone)]
pub struct PhorgeSide {
    /// `{namespace}_config`.
    pub config: String,
    /// `{namespace}_worker`.
    pub worker: String,
    /// The server's port.
    port: u16,
}

impl PhorgeSide {
    /// Creates both databases and their tables.
    pub async fn create(namespace: &str) -> Self {
        Self::create_on(PORT, namespace).await
    }

    /// [`Self::create`] on the server at `port` (a private one).
    pub async fn create_on(port: u16, namespace: &str) -> Self {
        let side = Self {
            config: format!("{namespace}_config"),
            worker: format!("{namespace}_worker"),
            port,
        };
        for (database, ddls) in [
            (&side.config, &[CONFIG_ENTRY_DDL][..]),
            (&side.worker, &crate::worker_tasks::WORKER_DDL[..]),
        ] {
            create_database_on(port, database).await;
            let mut conn = Conn::new(server_opts_on(port, Some(database)))
                .await
                .expect("connect to the side database");
            for ddl in ddls {
                conn.query_drop(*ddl).await.expect("create side table");
            }
            conn.disconnect().await.expect("disconnect");
        }
        side
    }

    /// Sets (or, with `None`, removes) `phabricator.silent`, as
    /// `bin/config set` would.
    pub async fn set_silent(&self, value: Option<&str>) {
        let mut conn = Conn::new(server_opts_on(self.port, None))
            .await
            .expect("connect to the server as root");
        let table = format!("`{}`.config_entry", self.config);
        conn.query_drop(format!("DELETE FROM {table}"))
            .await
            .expect("clear config");
        if let Some(value) = value {
            conn.exec_drop(
                format!(
                    "INSERT INTO {table} (phid, namespace, configKey, value, isDeleted, \
                     dateCreated, dateModified) VALUES ('PHID-CONF-silent', 'default', \
                     'phabricator.silent', ?, 0, UNIX_TIMESTAMP(), UNIX_TIMESTAMP())"
                ),
                (value,),
            )
            .await
            .expect("set phabricator.silent");
        }
        conn.disconnect().await.expect("disconnect");
    }

    /// Drops both databases.
    pub async fn drop(self) {
        drop_database_on(self.port, &self.config).await;
        drop_database_on(self.port, &self.worker).await;
    }
}

/// Creates Phorge's config and worker databases for `namespace`, runs
/// `body` with them, and drops both afterwards, also when `body` panics.
pub async fn with_phorge_side<Fut>(namespace: &str, body: impl FnOnce(PhorgeSide) -> Fut)
where
    Fut: Future<Output = ()>,
{
    let side = PhorgeSide::create(namespace).await;
    let (config, worker) = (side.config.clone(), side.worker.clone());
    dropping_after(&config, dropping_after(&worker, body(side))).await;
}
