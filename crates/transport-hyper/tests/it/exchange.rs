//! The request as SPEC §6 describes it, final statuses, keep-alive reuse
//! and the bounded response body read.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Response};
use http_body_util::BodyExt;
use webhook_core::{verify, DeliveryResult};
use webhook_transport_hyper::TransportConfig;

use crate::support::*;

#[tokio::test]
async fn final_statuses_are_reported_as_received() {
    let server = http_server(handler(|recorded| async move {
        let code: u16 = recorded.path.trim_start_matches('/').parse().expect("code");
        respond(code, "body")
    }))
    .await;
    let transport = transport(local_config());
    for code in [200u16, 201, 204, 299, 400, 404, 410, 500, 503] {
        let result = deliver(
            &transport,
            outbound(&server.url(&format!("/{code}")), GUARD),
        )
        .await;
        assert_eq!(result, DeliveryResult::Response { status: code });
        assert_eq!(result.is_success(), (200..300).contains(&code));
    }
}

#[tokio::test]
async fn request_is_a_signed_json_post_of_the_exact_bytes() {
    let server = http_server(handler(|_| async { respond(200, "ok") })).await;
    let config = TransportConfig {
        signature_headers: vec![
            "X-Phabricator-Webhook-Signature".into(),
            "X-Phorge-Webhook-Signature".into(),
        ],
        user_agent: "gorge-webhook-test/1".into(),
        request_id_header: Some("X-Gorge-Request".into()),
        ..local_config()
    };
    let transport = transport(config);
    let result = deliver(&transport, outbound(&server.url("/hook?x=1"), GUARD)).await;
    assert_eq!(result, DeliveryResult::Response { status: 200 });

    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let seen = &requests[0];
    assert_eq!(seen.method, Method::POST);
    assert_eq!(seen.path, "/hook");
    assert_eq!(seen.body.as_ref(), PAYLOAD);
    assert_eq!(
        seen.headers.get("content-type").map(|v| v.as_bytes()),
        Some(&b"application/json"[..])
    );
    assert_eq!(
        seen.headers.get("content-length").map(|v| v.as_bytes()),
        Some(PAYLOAD.len().to_string().as_bytes())
    );
    assert_eq!(
        seen.headers.get("user-agent").map(|v| v.as_bytes()),
        Some(&b"gorge-webhook-test/1"[..])
    );
    assert_eq!(
        seen.headers.get("x-gorge-request").map(|v| v.as_bytes()),
        Some(&b"PHID-HWBR-abcdefghijklmnopqrst"[..])
    );
    assert!(seen.headers.get("content-encoding").is_none());
    assert!(seen.headers.get("accept-encoding").is_none());
    for name in [
        "x-phabricator-webhook-signature",
        "x-phorge-webhook-signature",
    ] {
        let values: Vec<_> = seen.headers.get_all(name).iter().collect();
        assert_eq!(values.len(), 1, "{name} once");
        let signature = values[0].to_str().expect("ascii");
        assert_eq!(signature.len(), 64);
        assert_eq!(signature, signature.to_ascii_lowercase(), "lower-case hex");
        assert!(verify(KEY, &seen.body, signature), "{name} verifies");
    }
}

#[tokio::test]
async fn defaults_send_only_the_phabricator_signature_header() {
    let server = http_server(handler(|_| async { respond(200, "ok") })).await;
    let transport = transport(local_config());
    deliver(&transport, outbound(&server.url("/"), GUARD)).await;
    let seen = &server.requests()[0];
    let signature = seen
        .headers
        .get("x-phabricator-webhook-signature")
        .expect("signature header")
        .to_str()
        .expect("ascii");
    assert!(verify(KEY, &seen.body, signature));
    assert!(seen.headers.get("x-phorge-webhook-signature").is_none());
    assert!(seen.headers.get("x-gorge-request").is_none());
    let agent = seen.headers.get("user-agent").expect("user agent");
    assert!(agent.to_str().expect("ascii").starts_with("gorge-webhook/"));
}

#[tokio::test]
async fn sequential_deliveries_reuse_one_connection() {
    let server = http_server(handler(|_| async { respond(200, "ok") })).await;
    let transport = transport(local_config());
    for _ in 0..50 {
        let result = deliver(&transport, outbound(&server.url("/"), GUARD)).await;
        assert_eq!(result, DeliveryResult::Response { status: 200 });
    }
    assert_eq!(server.requests().len(), 50);
    assert!(
        server.accepts() <= 2,
        "50 deliveries used {} connections",
        server.accepts()
    );
}

#[tokio::test]
async fn a_huge_body_is_not_read_to_the_end() {
    const TOTAL: usize = 50 * 1024 * 1024;
    let produced = Arc::new(AtomicUsize::new(0));
    let server = {
        let produced = Arc::clone(&produced);
        http_server(handler(move |_| {
            let produced = Arc::clone(&produced);
            async move { Response::new(LazyBody::new(TOTAL, produced).boxed()) }
        }))
        .await
    };
    let transport = transport(local_config());
    let result = deliver(
        &transport,
        outbound(&server.url("/"), Duration::from_secs(15)),
    )
    .await;
    assert_eq!(result, DeliveryResult::Response { status: 200 });
    // The receiver could only hand over what fits in socket buffers on top
    // of what was read before the transport stopped.
    let handed_over = produced.load(Ordering::SeqCst);
    assert!(
        handed_over < TOTAL,
        "the whole body was pulled: {handed_over}"
    );
}

#[tokio::test]
async fn a_body_within_the_limit_is_read_and_the_connection_kept() {
    let server = http_server(handler(|_| async {
        respond(200, "a short body that fits")
    }))
    .await;
    let transport = transport(TransportConfig {
        response_body_limit: 1024,
        ..local_config()
    });
    for _ in 0..5 {
        let result = deliver(&transport, outbound(&server.url("/"), GUARD)).await;
        assert_eq!(result, DeliveryResult::Response { status: 200 });
    }
    assert!(server.accepts() <= 2, "{} connections", server.accepts());
}

#[tokio::test]
async fn a_body_over_the_limit_is_abandoned_with_its_connection() {
    let produced = Arc::new(AtomicUsize::new(0));
    let server = {
        let produced = Arc::clone(&produced);
        http_server(handler(move |_| {
            let produced = Arc::clone(&produced);
            async move { Response::new(LazyBody::new(256 * 1024, produced).boxed()) }
        }))
        .await
    };
    let transport = transport(TransportConfig {
        response_body_limit: 1024,
        ..local_config()
    });
    for _ in 0..3 {
        let result = deliver(&transport, outbound(&server.url("/"), GUARD)).await;
        assert_eq!(result, DeliveryResult::Response { status: 200 });
    }
    assert_eq!(server.accepts(), 3);
}

#[tokio::test]
async fn idle_connections_are_dropped_after_the_idle_timeout() {
    let server = http_server(handler(|_| async { respond(200, "ok") })).await;
    let transport = transport(TransportConfig {
        pool_idle_timeout: Duration::from_millis(100),
        ..local_config()
    });
    let result = deliver(&transport, outbound(&server.url("/"), GUARD)).await;
    assert_eq!(result, DeliveryResult::Response { status: 200 });
    // The receiver keeps the connection open; only the pool can drop it.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let result = deliver(&transport, outbound(&server.url("/"), GUARD)).await;
    assert_eq!(result, DeliveryResult::Response { status: 200 });
    assert_eq!(server.accepts(), 2);
}
