//! The readiness probe and the lazy pool: a store is built without a
//! database, reports why it is not ready, and becomes ready once Phorge
//! has created its database — creating nothing itself.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use webhook_core::{QueueCounts, Store, StoreError};
use webhook_store_mysql::{MysqlConfig, MysqlError, MysqlStore, NotReady};

use crate::fixture::{
    config, create_database, dropping_after, server_conn, unique_namespace, HOOK_TABLE_DDL,
    REQUEST_TABLE_DDL,
};

async fn database_exists(database: &str) -> bool {
    let found: Option<String> = server_conn()
        .await
        .exec_first(
            "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?",
            (database,),
        )
        .await
        .expect("query schemata");
    found.is_some()
}

#[tokio::test]
async fn missing_database_is_reported_until_phorge_creates_it() {
    let namespace = unique_namespace();
    let store = MysqlStore::new(&config(&namespace)).expect("valid config");
    let database = store.database().to_owned();
    assert_eq!(database, format!("{namespace}_herald"));
    dropping_after(&database, async {
        let err = store.ready().await.expect_err("no database yet");
        assert!(
            matches!(&err, NotReady::MissingDatabase { database: d } if *d == database),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            format!("database `{database}` does not exist yet")
        );
        assert!(matches!(
            store.hook_count().await,
            Err(StoreError::MissingDatabase(d)) if d == database
        ));
        assert!(matches!(
            store.check_schema().await,
            Err(MysqlError::NotReady(NotReady::MissingDatabase { .. }))
        ));
        assert!(
            !database_exists(&database).await,
            "the probe created nothing"
        );

        create_database(&database).await;
        store.ready().await.expect("ready once the database exists");
        // Ready, but the tables are Phorge's to create: the schema check
        // says which one is missing.
        match store.check_schema().await {
            Err(MysqlError::MissingTable { table, .. }) => {
                assert_eq!(table, "herald_webhookrequest");
            }
            other => panic!("expected a missing table, got {other:?}"),
        }
        let mut conn = server_conn().await;
        conn.query_drop(format!("USE `{database}`"))
            .await
            .expect("use");
        conn.query_drop(REQUEST_TABLE_DDL).await.expect("create");
        conn.query_drop(HOOK_TABLE_DDL).await.expect("create");
        assert_eq!(store.check_schema().await.expect("schema"), vec![]);
        assert_eq!(store.hook_count().await.expect("count"), 0);
        store.disconnect().await.expect("close");
    })
    .await;
}

#[tokio::test]
async fn refused_port_is_unreachable() {
    let store = MysqlStore::new(&MysqlConfig {
        port: 1,
        connect_timeout: Duration::from_secs(2),
        ..config(&unique_namespace())
    })
    .expect("valid config");
    let err = store.ready().await.expect_err("nothing listens on port 1");
    assert!(matches!(err, NotReady::Unreachable(_)), "{err:?}");
    assert_eq!(err.to_string(), "database server unreachable");
    assert!(matches!(
        store.stats().await,
        Err(StoreError::Unavailable(_))
    ));
}

#[tokio::test]
async fn silent_server_times_out_as_unreachable() {
    // Accepts TCP (the kernel completes the handshake) but never speaks.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let store = MysqlStore::new(&MysqlConfig {
        port,
        connect_timeout: Duration::from_millis(500),
        ..config(&unique_namespace())
    })
    .expect("valid config");
    let err = store.ready().await.expect_err("no greeting ever comes");
    assert!(matches!(err, NotReady::Unreachable(_)), "{err:?}");
    let source = std::error::Error::source(&err)
        .expect("a cause")
        .to_string();
    assert!(source.contains("no database connection within"), "{source}");
    assert!(matches!(
        store
            .candidates(&webhook_core::CandidateQuery {
                cutoffs: webhook_core::windows::Cutoffs {
                    now: 100,
                    lease_cutoff: 70,
                    retry_cutoff: 40
                },
                limit: 1,
                exclude_hooks: Vec::new(),
            })
            .await,
        Err(StoreError::Unavailable(_))
    ));
    drop(listener);
}

#[tokio::test]
async fn unknown_account_is_rejected() {
    let store = MysqlStore::new(&MysqlConfig {
        user: "wh_t_no_such_user".to_owned(),
        password: "wrong".to_owned(),
        ..config(&unique_namespace())
    })
    .expect("valid config");
    let err = store.ready().await.expect_err("access denied");
    assert!(matches!(err, NotReady::Rejected { .. }), "{err:?}");
    // The server's words, without the host it saw the client come from.
    // (MariaDB answers an unknown user with 1698, a wrong password with 1045.)
    let text = err.to_string();
    assert!(
        text.starts_with("database server rejected the connection: ERROR ")
            && text.contains("Access denied for user 'wh_t_no_such_user'")
            && !text.contains('@')
            && !text.contains("127.0.0.1"),
        "{text}"
    );
}

#[test]
fn construction_needs_neither_a_server_nor_a_runtime() {
    // Outside any Tokio runtime, pointing at a port nobody listens on.
    let store = MysqlStore::new(&MysqlConfig {
        port: 1,
        ..config("phorge")
    })
    .expect("a store is built without connecting");
    assert_eq!(store.database(), "phorge_herald");
    assert!(matches!(
        MysqlStore::new(&MysqlConfig {
            pool_max: 0,
            ..config("phorge")
        }),
        Err(MysqlError::InvalidConfig(err)) if err.variable == "GORGE_WEBHOOK_MYSQL_POOL_MAX"
    ));
}

#[tokio::test]
async fn required_tls_never_falls_back_to_plaintext() {
    // The local server has TLS disabled: a store that requires TLS must
    // refuse to talk to it rather than send the password in the clear.
    let mut probe = server_conn().await;
    let have_ssl: Option<(String, String)> = probe
        .query_first("SHOW VARIABLES LIKE 'have_ssl'")
        .await
        .expect("have_ssl");
    let enabled = have_ssl.is_some_and(|(_, value)| value == "YES");
    let namespace = unique_namespace();
    let database = format!("{namespace}_herald");
    create_database(&database).await;
    dropping_after(&database, async {
        let store = MysqlStore::new(&MysqlConfig {
            tls: true,
            ..config(&namespace)
        })
        .expect("valid config");
        let outcome = store.ready().await;
        if enabled {
            // A TLS-enabled server with a certificate the web roots do not
            // know: still no plaintext session.
            assert!(outcome.is_err(), "untrusted certificate accepted");
        } else {
            let err = outcome.expect_err("no TLS on the server");
            assert!(matches!(err, NotReady::Unreachable(_)), "{err:?}");
        }
    })
    .await;
}
