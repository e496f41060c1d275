//! Phorge's application tables next to a test's herald database: for one
//! PHID type of `webhook_store_mysql::OBJECT_TABLES`, its object table and
//! its transaction table in `{namespace}_{application}`, created as Phorge
//! creates them (the transaction table with every column Phorge's
//! transactions have; the object table with the columns every Lisk object
//! has, which is all delivery reads), and dropped afterwards.
//!
//! Objects and transactions are written with raw SQL, as Phorge's editor
//! would: transactions in the order they are applied, so with rising ids.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};

use mysql_async::prelude::Queryable;
use webhook_store_mysql::ObjectTables;

use crate::mariadb::{dropping_after, server_conn};

/// The columns of every Phorge transaction table.
const TRANSACTION_COLUMNS: &str = "(
    id INT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
    phid VARBINARY(64) NOT NULL,
    authorPHID VARBINARY(64) NOT NULL,
    objectPHID VARBINARY(64) NOT NULL,
    viewPolicy VARBINARY(64) NOT NULL,
    editPolicy VARBINARY(64) NOT NULL,
    commentPHID VARBINARY(64),
    commentVersion INT UNSIGNED NOT NULL,
    transactionType VARCHAR(32) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    oldValue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    newValue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    contentSource LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    metadata LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    dateCreated INT UNSIGNED NOT NULL,
    dateModified INT UNSIGNED NOT NULL,
    UNIQUE KEY key_phid (phid),
    KEY key_object (objectPHID)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin";

/// The columns every Lisk object table has.
const OBJECT_COLUMNS: &str = "(
    id INT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
    phid VARBINARY(64) NOT NULL,
    dateCreated INT UNSIGNED NOT NULL,
    dateModified INT UNSIGNED NOT NULL,
    UNIQUE KEY key_phid (phid)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin";

/// One PHID type's object and transaction tables for a test namespace.
#[derive(Debug)]
pub struct ApplicationTables {
    objects: String,
    transactions: String,
    /// Databases this fixture created (never the herald database).
    created: Vec<String>,
    next: AtomicU64,
}

impl ApplicationTables {
    /// Creates the databases that do not exist yet and both tables (the
    /// object table only where it is not there yet: hooks' is Phorge's
    /// `herald_webhook`, which the herald fixture makes).
    pub async fn create(namespace: &str, tables: &ObjectTables) -> Self {
        let mut conn = server_conn().await;
        let mut created = Vec::new();
        for application in [tables.object_application, tables.transaction_application] {
            let database = format!("{namespace}_{application}");
            let exists: Option<String> = conn
                .exec_first(
                    "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?",
                    (database.as_str(),),
                )
                .await
                .expect("look up the application database");
            if exists.is_none() {
                conn.query_drop(format!(
                    "CREATE DATABASE `{database}` DEFAULT CHARACTER SET utf8mb4 \
                     COLLATE utf8mb4_bin"
                ))
                .await
                .expect("create the application database");
                created.push(database);
            }
        }
        let objects = format!(
            "`{namespace}_{}`.`{}`",
            tables.object_application, tables.object_table
        );
        let transactions = format!(
            "`{namespace}_{}`.`{}`",
            tables.transaction_application, tables.transaction_table
        );
        conn.query_drop(format!(
            "CREATE TABLE IF NOT EXISTS {objects} {OBJECT_COLUMNS}"
        ))
        .await
        .expect("create the object table");
        conn.query_drop(format!("CREATE TABLE {transactions} {TRANSACTION_COLUMNS}"))
            .await
            .expect("create the transaction table");
        conn.disconnect().await.expect("disconnect");
        Self {
            objects,
            transactions,
            created,
            next: AtomicU64::new(1),
        }
    }

    /// Creates an object with these transactions, applied in this order.
    pub async fn insert_object(&self, object_phid: &str, transactions: &[&str]) {
        let mut conn = server_conn().await;
        conn.exec_drop(
            format!(
                "INSERT INTO {} (phid, dateCreated, dateModified) \
                 VALUES (?, UNIX_TIMESTAMP(), UNIX_TIMESTAMP())",
                self.objects
            ),
            (object_phid,),
        )
        .await
        .expect("insert the object");
        conn.disconnect().await.expect("disconnect");
        self.apply(object_phid, transactions).await;
    }

    /// Applies more transactions to an object, in this order.
    pub async fn apply(&self, object_phid: &str, transactions: &[&str]) {
        let mut conn = server_conn().await;
        for phid in transactions {
            let n = self.next.fetch_add(1, Ordering::Relaxed);
            conn.exec_drop(
                format!(
                    "INSERT INTO {} (phid, authorPHID, objectPHID, viewPolicy, editPolicy, \
                     commentPHID, commentVersion, transactionType, oldValue, newValue, \
                     contentSource, metadata, dateCreated, dateModified) \
                     VALUES (?, 'PHID-USER-fixture', ?, 'users', 'PHID-USER-fixture', NULL, 0, \
                     'core:comment', 'null', ?, '{{\"source\":\"web\"}}', '{{}}', \
                     UNIX_TIMESTAMP(), UNIX_TIMESTAMP())",
                    self.transactions
                ),
                (*phid, object_phid, format!("\"edit {n}\"")),
            )
            .await
            .expect("insert a transaction");
        }
        conn.disconnect().await.expect("disconnect");
    }

    /// Removes one transaction.
    pub async fn delete_transaction(&self, phid: &str) {
        let mut conn = server_conn().await;
        conn.exec_drop(
            format!("DELETE FROM {} WHERE phid = ?", self.transactions),
            (phid,),
        )
        .await
        .expect("delete a transaction");
        conn.disconnect().await.expect("disconnect");
    }

    /// Destroys an object and its transactions, as `bin/remove destroy`.
    pub async fn destroy_object(&self, object_phid: &str) {
        let mut conn = server_conn().await;
        for (table, column) in [(&self.transactions, "objectPHID"), (&self.objects, "phid")] {
            conn.exec_drop(
                format!("DELETE FROM {table} WHERE {column} = ?"),
                (object_phid,),
            )
            .await
            .expect("destroy the object");
        }
        conn.disconnect().await.expect("disconnect");
    }
}

impl ApplicationTables {
    /// The object table, as `` `database`.`table` ``.
    pub fn object_table(&self) -> &str {
        &self.objects
    }

    /// Drops the databases this fixture created.
    pub async fn drop(self) {
        for database in &self.created {
            crate::mariadb::drop_database(database).await;
        }
    }
}

/// Creates `tables` for `namespace`, runs `body` with them, and drops the
/// databases the fixture created afterwards, also when `body` panics. Tables
/// it made in a database that already existed (the herald database, for
/// hooks) go when the test drops that database.
pub async fn with_application_tables<Fut>(
    namespace: &str,
    tables: &ObjectTables,
    body: impl FnOnce(ApplicationTables) -> Fut,
) where
    Fut: Future<Output = ()>,
{
    let fixture = ApplicationTables::create(namespace, tables).await;
    let created = fixture.created.clone();
    let mut work: Pin<Box<dyn Future<Output = ()> + '_>> = Box::pin(body(fixture));
    for database in &created {
        work = Box::pin(dropping_after(database, work));
    }
    work.await;
}
