//! Database outages end to end: the daemon reaches MariaDB through an
//! in-test TCP proxy ([`DbProxy`]) that can be cut (every proxied
//! connection closed, new ones closed as soon as they are accepted) and
//! restored, while the real server keeps running for everyone else.
//!
//! Checked: the daemon keeps running and says why it is not ready, delivery
//! resumes by itself, and a result whose write-back met the outage is
//! retried until it is stored, so its row is neither lost nor sent twice.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;
use webhook_core::NewRequest;
use webhook_test_support::mariadb::{HOST, PORT};
use webhook_test_support::{with_db, Receiver, Reply, TestDb};

use crate::daemon::Daemon;
use crate::e2e::{add_hook, delivery_env, wait_log, with_setting, DEADLINE};
use crate::support::{
    all_rows, all_sent, assert_alive_without_panic, assert_value_domain, count, metrics, wait_table,
};

/// A TCP proxy from a loopback port to the local MariaDB that can be cut.
struct DbProxy {
    port: u16,
    inner: Arc<ProxyState>,
    accept: AbortHandle,
}

#[derive(Default)]
struct ProxyState {
    /// `Some` (the tasks copying each proxied connection) while up, `None`
    /// while cut; one lock, so a connection is either proxied and closed
    /// by a cut, or closed on arrival.
    links: Mutex<Option<Vec<AbortHandle>>>,
    proxied: AtomicU64,
    turned_away: AtomicU64,
}

impl DbProxy {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("proxy: bind 127.0.0.1:0");
        let port = listener.local_addr().expect("proxy address").port();
        let inner = Arc::new(ProxyState {
            links: Mutex::new(Some(Vec::new())),
            ..ProxyState::default()
        });
        let state = Arc::clone(&inner);
        let accept = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let mut links = state.links.lock().unwrap_or_else(|e| e.into_inner());
                let Some(links) = links.as_mut() else {
                    state.turned_away.fetch_add(1, Ordering::Relaxed);
                    drop(client);
                    continue;
                };
                state.proxied.fetch_add(1, Ordering::Relaxed);
                let link = tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect((HOST, PORT)).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                links.retain(|l| !l.is_finished());
                links.push(link.abort_handle());
            }
        })
        .abort_handle();
        Self {
            port,
            inner,
            accept,
        }
    }

    /// Closes every proxied connection and turns new ones away.
    fn cut(&self) {
        let mut links = self.inner.links.lock().unwrap_or_else(|e| e.into_inner());
        for link in links.take().unwrap_or_default() {
            link.abort();
        }
    }

    /// Proxies new connections again.
    fn restore(&self) {
        let mut links = self.inner.links.lock().unwrap_or_else(|e| e.into_inner());
        links.get_or_insert_with(Vec::new);
    }

    fn turned_away(&self) -> u64 {
        self.inner.turned_away.load(Ordering::Relaxed)
    }
}

impl Drop for DbProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

fn through(proxy: &DbProxy, env: Vec<(String, String)>) -> Vec<(String, String)> {
    with_setting(env, "GORGE_WEBHOOK_MYSQL_PORT", &proxy.port.to_string())
}

/// Polls `/readyz` until it answers `status`; returns the body.
async fn wait_readyz(daemon: &Daemon, status: u16) -> Value {
    let until = tokio::time::Instant::now() + DEADLINE;
    loop {
        let response = daemon.get("/readyz", &[]).await;
        if response.status == status {
            return serde_json::from_slice(&response.body).expect("/readyz is JSON");
        }
        assert!(
            tokio::time::Instant::now() < until,
            "/readyz still {} ({}) instead of {status}\n{}",
            response.status,
            response.text(),
            daemon.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn insert(db: &TestDb, hook: &str, n: u32) -> u64 {
    db.insert_request(&NewRequest {
        object_phid: format!("PHID-TASK-outage{n:015}"),
        ..NewRequest::queued(hook, r#"{"retry":"forever"}"#)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_outage_pauses_delivery_and_it_resumes_by_itself() {
    with_db(|db| async move {
        let proxy = DbProxy::start().await;
        let receiver = Receiver::start().await;
        let hook = "PHID-HWBH-outageaaaaaaaaaaaaaa";
        add_hook(
            &db,
            hook,
            receiver.url("/outage"),
            "outagekeyaaaaaaaaaaaaaaaaaaaaaaa",
        )
        .await;
        let mut daemon =
            Daemon::start("outage", &through(&proxy, delivery_env(&db.namespace))).await;
        for n in 0..3 {
            insert(&db, hook, n).await;
        }
        wait_table(&db, &[&daemon], "all sent", DEADLINE, all_sent).await;
        wait_readyz(&daemon, 200).await;

        proxy.cut();
        let unready = wait_readyz(&daemon, 503).await;
        let reason = unready["reason"].as_str().unwrap_or_default();
        assert_eq!(unready["status"], "unavailable");
        assert!(!reason.is_empty(), "503 without a reason: {unready}");
        for n in 3..6 {
            insert(&db, hook, n).await;
        }
        wait_log(&daemon, "event=\"poll_failed\"").await;
        let scrape = metrics(&daemon).await;
        assert_eq!(count(&scrape, "gorge_webhook_database_up"), 0, "{scrape}");
        // Nothing can be claimed while the database is away.
        assert_eq!(receiver.requests().len(), 3, "{}", daemon.log());
        assert_alive_without_panic(&mut daemon);
        assert!(
            proxy.turned_away() > 0,
            "the daemon never tried to reconnect"
        );

        proxy.restore();
        wait_readyz(&daemon, 200).await;
        let rows = wait_table(&db, &[&daemon], "all sent", DEADLINE, all_sent).await;
        assert_eq!(rows.len(), 6);
        assert_value_domain(&rows);
        wait_log(&daemon, "event=\"poll_recovered\"").await;
        let got = receiver.requests();
        assert_eq!(got.len(), 6, "each row once\n{}", daemon.log());
        assert_eq!(
            count(&metrics(&daemon).await, "gorge_webhook_database_up"),
            1
        );
        eprintln!(
            "reliability: outage readyz_reason={reason:?} connections_turned_away={} receipts={}",
            proxy.turned_away(),
            got.len()
        );
        assert_alive_without_panic(&mut daemon);
        daemon.stop_cleanly(DEADLINE).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_back_cut_off_by_an_outage_is_retried_until_stored() {
    // GORGE_WEBHOOK_DELIVERY_TIMEOUT=4 raises the lease to 4 + 2.
    const LEASE: Duration = Duration::from_secs(6);
    with_db(|db| async move {
        let proxy = DbProxy::start().await;
        let receiver = Receiver::start().await;
        receiver.always("/slow", Reply::status(200).after(Duration::from_secs(2)));
        let hook = "PHID-HWBH-writebackaaaaaaaaaaa";
        add_hook(
            &db,
            hook,
            receiver.url("/slow"),
            "writebackkeyaaaaaaaaaaaaaaaaaaaa",
        )
        .await;
        let env = with_setting(
            through(&proxy, delivery_env(&db.namespace)),
            "GORGE_WEBHOOK_DELIVERY_TIMEOUT",
            "4",
        );
        let mut daemon = Daemon::start("write-back", &env).await;
        let id = insert(&db, hook, 0).await;
        let arrived = receiver.wait_for(1, DEADLINE).await;
        assert_eq!(arrived.len(), 1, "{}", daemon.log());
        // The receiver holds the request for 2 s; its answer comes back to a
        // daemon whose every database connection is gone.
        assert!(arrived[0].replied.is_none(), "answered before the cut");
        proxy.cut();
        // Two tries failed (the second one's retry waits 1000 ms): the
        // result is being retried, so bring the database back.
        wait_log(&daemon, "retry_in_ms=1000").await;
        proxy.restore();
        let rows = wait_table(&db, &[&daemon], "all sent", DEADLINE, all_sent).await;
        assert_value_domain(&rows);
        assert_eq!(rows[0].id, id);
        assert_eq!(rows[0].outcome().3, 200);
        // Well past the lease: the stored result means no second delivery.
        let later = receiver.wait_for(2, LEASE + Duration::from_secs(2)).await;
        assert_eq!(later.len(), 1, "delivered again\n{}", daemon.log());
        let scrape = metrics(&daemon).await;
        let retries = count(&scrape, "gorge_webhook_writeback_retries_total");
        assert!(retries >= 2, "{scrape}");
        assert_eq!(count(&scrape, "gorge_webhook_writeback_failures_total"), 0);
        assert!(
            !daemon.stderr().contains("writeback_failed"),
            "{}",
            daemon.log()
        );
        eprintln!(
            "reliability: write-back outage retries={retries} receipts={} final={:?}",
            later.len(),
            all_rows(&db).await[0].outcome()
        );
        assert_alive_without_panic(&mut daemon);
    })
    .await;
}

/// Regression test: the write-back after a claimed attempt is unguarded
/// (`UPDATE … WHERE id = ?`, as PHP's save), so it must not be retried
/// past the claim's lease. Before that bound, one instance that lost the
/// database mid-delivery kept retrying while another took the row over
/// after the lease and delivered it with success; the first one's late
/// write of its failed attempt then made the `sent` row `queued` again, and
/// it was delivered once more after a 2xx.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_write_back_from_a_partitioned_instance_does_not_undo_a_success() {
    with_db(|db| async move {
        let proxy = DbProxy::start().await;
        let receiver = Receiver::start().await;
        receiver.script(
            "/partition",
            [Reply::status(500).after(Duration::from_secs(1))],
        );
        let hook = "PHID-HWBH-partitionaaaaaaaaaaa";
        add_hook(
            &db,
            hook,
            receiver.url("/partition"),
            "partitionkeyaaaaaaaaaaaaaaaaaaaa",
        )
        .await;
        let cut_off_env = through(&proxy, delivery_env(&db.namespace));
        let cut_off = Daemon::start("partitioned", &cut_off_env).await;
        let id = insert(&db, hook, 0).await;
        let arrived = receiver.wait_for(1, DEADLINE).await;
        assert_eq!(arrived.len(), 1, "{}", cut_off.log());
        // The partitioned instance is waiting for its 500; it will not be
        // able to store it. Another instance still reaches the database.
        proxy.cut();
        let other = Daemon::start("connected", &delivery_env(&db.namespace)).await;
        wait_table(
            &db,
            &[&cut_off, &other],
            "sent by the other instance",
            DEADLINE,
            all_sent,
        )
        .await;
        // The partition heals while the first instance still retries.
        proxy.restore();
        let settled = receiver.requests().len();
        let later = receiver
            .wait_for(settled + 1, Duration::from_secs(20))
            .await;
        let row = db.row(id).await;
        assert_eq!(
            later.len(),
            settled,
            "delivered again after a 2xx; row now {row:?}\n{}\n{}",
            cut_off.log(),
            other.log()
        );
        assert_eq!(row.status, webhook_core::RequestStatus::Sent, "{row:?}");
    })
    .await;
}
