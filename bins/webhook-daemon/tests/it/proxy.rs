//! Delivery through a real egress proxy (tinyproxy), set as operators set
//! it for cURL and Go: `HTTPS_PROXY` in the daemon's environment. A hook
//! on an allowed target gets the protocol's vector byte for byte, through
//! a tunnel to the address checked here; a hook whose name resolves into a
//! denied range fails `hook`/`uri` without the proxy being asked; and with
//! the proxy stopped rows stay queued and unwritten, the hook's breaker
//! stays closed, and `/readyz` and `/metrics` say why.

use std::net::{IpAddr, Ipv4Addr};

use webhook_core::memory_store::NewRequest;
use webhook_core::vectors::{
    BODY as VECTOR_BODY, KEY as VECTOR_KEY, OBJECT_PHID as VECTOR_OBJECT,
    SIGNATURE as VECTOR_SIGNATURE,
};
use webhook_core::{LastResult, RequestStatus};
use webhook_test_support::{with_db, Receiver, Tinyproxy};

use crate::daemon::Daemon;
use crate::e2e::{
    add_hook, delivery_env, properties, wait_row, with_setting, DEADLINE, VECTOR_PROPERTIES,
};
use crate::support::{count, metrics, until, wait_readyz};

const ALLOWED: &str = "PHID-HWBH-proxyallowedaaaaaaaa";
const DENIED: &str = "PHID-HWBH-proxydeniedaaaaaaaaa";

/// The receiver listens on 127.0.0.2, the only address allowed; `localhost`
/// (127.0.0.1, ::1) stays in the default deny list.
const RECEIVER_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

/// A daemon whose https calls go through `proxy`, trusting `ca_pem`.
fn proxied_env(
    namespace: &str,
    proxy: &Tinyproxy,
    ca_file: &std::path::Path,
) -> Vec<(String, String)> {
    let mut env = delivery_env(namespace);
    for (name, value) in [
        ("GORGE_WEBHOOK_OUTBOUND_ALLOW", "127.0.0.2/32".to_owned()),
        ("GORGE_WEBHOOK_CA_FILE", ca_file.display().to_string()),
        // One failure a receiver could be blamed for opens the breaker.
        ("GORGE_WEBHOOK_ERROR_THRESHOLD", "1".to_owned()),
    ] {
        env = with_setting(env, name, &value);
    }
    env.push(("HTTPS_PROXY".to_owned(), proxy.url(None)));
    env
}

fn write_ca(pem: &str, label: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("wh_proxy_ca_{}_{label}.pem", std::process::id()));
    std::fs::write(&path, pem).expect("write the test CA");
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_https_proxy_the_vector_arrives_intact_and_a_denied_name_never_reaches_the_proxy() {
    let proxy = Tinyproxy::start().await;
    let (receiver, ca_pem) = Receiver::start_https(RECEIVER_IP).await;
    let ca = write_ca(&ca_pem, "deliver");
    let ca_file = &ca;
    with_db(|db| async move {
        add_hook(&db, ALLOWED, receiver.https_url("/proxied"), VECTOR_KEY).await;
        let denied_uri = format!("https://localhost:{}/denied", receiver.addr().port());
        add_hook(&db, DENIED, denied_uri, "k").await;
        let sent = db
            .insert_request(&NewRequest {
                object_phid: VECTOR_OBJECT.to_owned(),
                date_created: Some(1_700_000_000),
                ..NewRequest::queued(ALLOWED, VECTOR_PROPERTIES)
            })
            .await;
        let refused = db
            .insert_request(&NewRequest::queued(DENIED, r#"{"retry":"never"}"#))
            .await;
        let daemon = Daemon::start(
            "proxy-deliver",
            &proxied_env(&db.namespace, &proxy, ca_file),
        )
        .await;

        let got = receiver.wait_for(1, DEADLINE).await;
        assert_eq!(got.len(), 1, "{}", daemon.log());
        assert!(
            got[0].body.as_ref() == VECTOR_BODY.as_bytes(),
            "body changed on the way: {}",
            String::from_utf8_lossy(&got[0].body)
        );
        assert_eq!(
            got[0].header("x-phabricator-webhook-signature"),
            Some(VECTOR_SIGNATURE)
        );
        let row = wait_row(&db, &daemon, sent, "sent", |r| {
            r.status == RequestStatus::Sent
        })
        .await;
        assert_eq!(row.last_request_result, LastResult::Okay);

        let row = wait_row(&db, &daemon, refused, "failed", |r| {
            r.status == RequestStatus::Failed
        })
        .await;
        let props = properties(&row);
        assert_eq!(
            (props["errorType"].as_str(), props["errorCode"].as_str()),
            (Some("hook"), Some("uri")),
            "{row:?}"
        );

        // One tunnel, to the checked address; the denied name never asked.
        let log = proxy.log();
        assert_eq!(proxy.requests(), 1, "{log}");
        assert!(
            log.contains(&format!("CONNECT 127.0.0.2:{} ", receiver.addr().port())),
            "{log}"
        );
        assert!(daemon.stderr().contains("egress_proxy"), "{}", daemon.log());
        drop(daemon);
    })
    .await;
    let _ = std::fs::remove_file(&ca);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_proxy_stopped_rows_wait_unwritten_and_the_breaker_stays_closed() {
    let mut proxy = Tinyproxy::start().await;
    let (receiver, ca_pem) = Receiver::start_https(RECEIVER_IP).await;
    let ca = write_ca(&ca_pem, "down");
    let ca_file = &ca;
    proxy.stop();
    with_db(|db| async move {
        add_hook(&db, ALLOWED, receiver.https_url("/down"), "k").await;
        let mut ids = Vec::new();
        for _ in 0..3 {
            ids.push(
                db.insert_request(&NewRequest::queued(ALLOWED, r#"{"retry":"never"}"#))
                    .await,
            );
        }
        let daemon =
            Daemon::start("proxy-down", &proxied_env(&db.namespace, &proxy, ca_file)).await;

        let ready = wait_readyz(&daemon, 503).await;
        let reason = ready["reason"].as_str().unwrap_or_default().to_owned();
        assert!(
            reason.contains("the egress proxy is unreachable"),
            "{ready}\n{}",
            daemon.log()
        );
        let series = "gorge_webhook_proxy_failures_total{reason=\"unreachable\"}";
        until(&daemon, "a proxy failure counted", async || {
            count(&metrics(&daemon).await, series) >= 2
        })
        .await;
        let scrape = metrics(&daemon).await;
        assert_eq!(
            count(&scrape, "gorge_webhook_breaker_open_hooks"),
            0,
            "{scrape}"
        );
        assert_eq!(
            count(
                &scrape,
                "gorge_webhook_deliveries_total{outcome=\"transport_error\"}"
            ),
            0,
            "{scrape}"
        );
        for id in ids {
            let row = db.row(id).await;
            assert_eq!(row.status, RequestStatus::Queued, "{row:?}");
            assert_eq!(row.last_request_result, LastResult::None, "{row:?}");
            assert_eq!(row.last_request_epoch, 0, "nothing written: {row:?}");
        }
        assert!(receiver.requests().is_empty());
        assert!(
            daemon.stderr().contains("delivery_local_failure"),
            "{}",
            daemon.log()
        );
        drop(daemon);
    })
    .await;
    let _ = std::fs::remove_file(&ca);
}
