//! Following the binary log for new rows, on a private server that keeps
//! one (the shared server does not). Every insert into the request table
//! is a hint, whether the server logs statements or rows; an update, a
//! delete, another table or another database's table of the same name is
//! not: checked on the events the server logged, read to their end
//! (a non-blocking stream), so the count is exact. A follower whose
//! account lacks the grants says why and follows once they are given, and
//! one whose stream is killed follows again, each hinting at a new row.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use mysql_async::binlog::events::Event;
use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStreamRequest, Conn, Row};
use webhook_core::WakeHints;
use webhook_store_mysql::{BinlogFollower, MysqlConfig, NotFollowing, RequestInserts};
use webhook_test_support::BinlogServer;

use crate::fixture::{with_db_on, TestDb};

const DEADLINE: Duration = Duration::from_secs(30);
const RETRY: Duration = Duration::from_millis(200);

/// Waits until `done` holds, panicking after [`DEADLINE`].
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < DEADLINE, "{what} within {DEADLINE:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// An insert into the request table as Phorge writes one, on `conn`: the
/// table named with its database in backticks, constant values (so
/// `MIXED` logs it as a statement, `ROW` as rows).
async fn insert_request(conn: &mut Conn, database: &str) {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let sql = format!(
        "INSERT INTO `{database}`.`herald_webhookrequest` (`phid`, `webhookPHID`, \
         `objectPHID`, `status`, `properties`, `lastRequestResult`, `lastRequestEpoch`, \
         `dateCreated`, `dateModified`) VALUES ('PHID-HWBR-binlog{n:014}', \
         'PHID-HWBH-binlogaaaaaaaaaaaaa', 'PHID-TASK-binlogaaaaaaaaaaaaa', 'queued', '{{}}', \
         '', 0, 1700000000, 1700000000)"
    );
    conn.query_drop(&sql).await.expect("insert request");
}

/// Writes that are not a new request: another table, an update, a
/// delete, and the same table name in another database.
async fn other_writes(conn: &mut Conn, elsewhere: &str) {
    for sql in [
        "INSERT INTO herald_webhook (phid, name, webhookURI, viewPolicy, editPolicy, status, \
         hmacKey, dateCreated, dateModified) VALUES (CONCAT('PHID-HWBH-', UUID_SHORT()), 'h', \
         'http://127.0.0.1/', 'users', 'admin', 'enabled', 'k', 0, 0)"
            .to_owned(),
        "UPDATE herald_webhookrequest SET status = 'sent' ORDER BY id DESC LIMIT 1".to_owned(),
        "DELETE FROM herald_webhookrequest ORDER BY id LIMIT 1".to_owned(),
        format!(
            "INSERT INTO `{elsewhere}`.herald_webhookrequest SELECT * FROM herald_webhookrequest \
             ORDER BY id DESC LIMIT 1"
        ),
    ] {
        conn.query_drop(&sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

#[tokio::test]
async fn each_insert_into_the_request_table_is_a_hint_and_nothing_else_is() {
    let server = &BinlogServer::start().await;
    with_db_on(server.port(), |db| async move {
        let elsewhere = format!("{}_elsewhere", db.namespace);
        server.exec(&format!("CREATE DATABASE `{elsewhere}`")).await;
        server
            .exec(&format!(
                "CREATE TABLE `{elsewhere}`.herald_webhookrequest LIKE `{}`.herald_webhookrequest",
                db.database
            ))
            .await;
        let mut conn = db.conn().await;
        for format in ["STATEMENT", "ROW", "MIXED"] {
            conn.query_drop(format!("SET SESSION binlog_format = '{format}'"))
                .await
                .expect("set the session's log format");
            let from = log_end(server).await;
            insert_request(&mut conn, &db.database).await;
            other_writes(&mut conn, &elsewhere).await;
            insert_request(&mut conn, &db.database).await;
            let events = logged_since(server, &from).await;
            let mut inserts = RequestInserts::new(&db.database);
            let hints = events.iter().filter(|e| inserts.adds_a_request(e)).count();
            assert_eq!(
                hints,
                2,
                "{format}: only the two inserts of {} events",
                events.len()
            );
        }
    })
    .await;
}

/// The log's current file and end.
async fn log_end(server: &BinlogServer) -> (String, u64) {
    let mut conn = server.conn().await;
    let row: Row = conn
        .query_first("SHOW MASTER STATUS")
        .await
        .expect("SHOW MASTER STATUS")
        .expect("the log is on");
    let _ = conn.disconnect().await;
    (
        row.get("File").expect("File"),
        row.get("Position").expect("Position"),
    )
}

/// Every event logged from `from` to the log's end now.
async fn logged_since(server: &BinlogServer, (file, position): &(String, u64)) -> Vec<Event> {
    let request = BinlogStreamRequest::new(2)
        .with_filename(file.as_bytes())
        .with_pos(*position)
        .with_non_blocking();
    let stream = server.conn().await.get_binlog_stream(request).await;
    let events: Vec<_> = stream.expect("a binary log stream").collect().await;
    events
        .into_iter()
        .map(|e| e.expect("a readable event"))
        .collect()
}

#[tokio::test]
async fn a_grant_given_later_is_followed_and_a_killed_stream_is_followed_again() {
    let server = &BinlogServer::start().await;
    with_db_on(server.port(), |db| async move {
        server.exec("CREATE USER 'follower'@'%'").await;
        server
            .exec(&format!("GRANT SELECT ON `{}`.* TO 'follower'@'%'", db.database))
            .await;
        let config = MysqlConfig {
            user: "follower".to_owned(),
            ..db.config()
        };
        let hints = WakeHints::new();
        let refused = BinlogFollower::new(&config, hints.clone()).check().await;
        assert!(
            matches!(&refused, Err(NotFollowing::Database(e)) if e.to_string().contains("BINLOG MONITOR")),
            "{refused:?}"
        );
        let follower = BinlogFollower::new(&config, hints.clone()).retrying_every(RETRY);
        let follower = tokio::spawn(follower.run());
        server
            .exec("GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'follower'@'%'")
            .await;
        until("following once granted", || hints.following()).await;
        hinted_by_an_insert(&db, &hints).await;

        let first = dump_thread(server).await.expect("a dump thread");
        server.exec(&format!("KILL CONNECTION {first}")).await;
        let started = Instant::now();
        while dump_thread(server).await.is_none_or(|id| id == first) {
            assert!(started.elapsed() < DEADLINE, "a new stream within {DEADLINE:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        until("following again", || hints.following()).await;
        hinted_by_an_insert(&db, &hints).await;
        follower.abort();
    })
    .await;
}

#[tokio::test]
async fn a_server_without_a_binary_log_is_said_so() {
    crate::fixture::with_db(|db| async move {
        let checked = BinlogFollower::new(&db.config(), WakeHints::new())
            .check()
            .await;
        assert!(matches!(checked, Err(NotFollowing::LogOff)), "{checked:?}");
    })
    .await;
}

async fn hinted_by_an_insert(db: &TestDb, hints: &WakeHints) {
    let given = hints.given();
    insert_request(&mut db.conn().await, &db.database).await;
    until("a hint for the insert", || hints.given() > given).await;
}

/// The session id of the stream the server sends the log on, if any.
async fn dump_thread(server: &BinlogServer) -> Option<u64> {
    let mut conn = server.conn().await;
    let id = conn
        .query_first("SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND = 'Binlog Dump'")
        .await
        .expect("processlist");
    let _ = conn.disconnect().await;
    id
}
