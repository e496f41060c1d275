//! The request as protocol §6 describes it, final statuses, keep-alive reuse
//! and the bounded response body read.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

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
    assert_eq!(
        seen.headers.get("accept-encoding").map(|v| v.as_bytes()),
        Some(&b"gzip"[..]),
        "as Phorge's cURL asks"
    );
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

/// Asked for gzip, a receiver may compress its answer: the status is the
/// result and the body, read only to be discarded, is never decoded (here
/// it is not even valid gzip), and the connection is reused.
#[tokio::test]
async fn a_compressed_answer_is_read_and_discarded_undecoded() {
    let server = http_server(handler(|_| async {
        let mut response = respond(200, "\x1f\u{8b} not really gzip");
        response.headers_mut().insert(
            http::header::CONTENT_ENCODING,
            http::HeaderValue::from_static("gzip"),
        );
        response
    }))
    .await;
    let transport = transport(local_config());
    for _ in 0..3 {
        let result = deliver(&transport, outbound(&server.url("/"), GUARD)).await;
        assert_eq!(result, DeliveryResult::Response { status: 200 });
    }
    assert_eq!(server.accepts(), 1, "one connection, reused");
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

/// A response with this status and `Retry-After` value.
fn retry_after(status: u16, value: &str) -> Response<ResponseBody> {
    let mut response = respond(status, "slow down");
    response.headers_mut().insert(
        http::header::RETRY_AFTER,
        value.parse().expect("a header value"),
    );
    response
}

#[tokio::test]
async fn a_final_429_or_503_with_retry_after_reports_the_wait() {
    let server = http_server(handler(|recorded| async move {
        let in_an_hour = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(3_600));
        match recorded.path.as_str() {
            "/429-seconds" => retry_after(429, "5"),
            "/503-date" => retry_after(503, &in_an_hour),
            "/429-past" => retry_after(429, "Sun, 06 Nov 1994 08:49:37 GMT"),
            "/429-garbage" => retry_after(429, "soon"),
            "/500-seconds" => retry_after(500, "5"),
            "/200-seconds" => retry_after(200, "5"),
            "/302-seconds" => {
                let mut hop = redirect(302, "/429-plain");
                hop.headers_mut()
                    .insert(http::header::RETRY_AFTER, "5".parse().expect("value"));
                hop
            }
            "/302-then-429" => redirect(302, "/429-seconds"),
            "/429-plain" => respond(429, "slow down"),
            other => panic!("unexpected path {other}"),
        }
    }))
    .await;
    let transport = transport(local_config());
    let result = |path: &'static str| {
        let request = outbound(&server.url(path), GUARD);
        let transport = &transport;
        async move { deliver(transport, request).await }
    };
    let throttled = |status, secs| DeliveryResult::Throttled {
        status,
        retry_after: Duration::from_secs(secs),
    };
    assert_eq!(result("/429-seconds").await, throttled(429, 5));
    match result("/503-date").await {
        DeliveryResult::Throttled {
            status: 503,
            retry_after,
        } => assert!(
            (3_590..=3_600).contains(&retry_after.as_secs()),
            "{retry_after:?}"
        ),
        other => panic!("{other:?}"),
    }
    for (path, status) in [
        ("/429-past", 429),
        ("/429-garbage", 429),
        ("/429-plain", 429),
        ("/500-seconds", 500),
        ("/200-seconds", 200),
        ("/302-seconds", 429),
    ] {
        assert_eq!(
            result(path).await,
            DeliveryResult::Response { status },
            "{path}"
        );
    }
    assert_eq!(
        result("/302-then-429").await,
        throttled(429, 5),
        "after redirects"
    );
}
