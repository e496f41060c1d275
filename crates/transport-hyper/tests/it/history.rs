//! What `deliver_recording` notes for the attempt history: each hop, the
//! request's headers without credentials, the last response's head and
//! first body bytes, and what was seen before a deadline; and that it
//! delivers exactly as `deliver` does.

use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use webhook_core::history::{Exchange, Hop, WITHHELD};
use webhook_core::{sign, DeliveryResult, OutboundRequest, Transport};
use webhook_transport_hyper::{HyperTransport, Proxies, TransportConfig};

use crate::support::*;

/// A body longer than [`KEPT`].
const LONG: &str = "0123456789abcdefghijklmnopqrstuvwxyz";

/// Body bytes the tests keep.
const KEPT: usize = 10;

/// Delivers under [`GUARD`], keeping [`KEPT`] body bytes.
async fn record(
    transport: &HyperTransport,
    request: OutboundRequest,
) -> (DeliveryResult, Exchange) {
    let mut exchange = Exchange::keeping(KEPT);
    let result = tokio::time::timeout(GUARD, transport.deliver_recording(request, &mut exchange))
        .await
        .expect("deliver_recording returned within the guard");
    (result, exchange)
}

/// `name`'s value among recorded headers, when there is one.
fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(seen, _)| seen == name)
        .map(|(_, value)| value.as_str())
}

fn hop(uri: String, status: u16) -> Hop {
    Hop { uri, status }
}

/// Routes: `/long` → 200 with [`LONG`]; `/short` → 200 `ok`; `/start` →
/// 302 to `/final`; `/final` → 201; every answer names itself in
/// `x-answer`.
async fn receiver() -> Server {
    http_server(handler(|seen| async move {
        let mut response = match seen.path.as_str() {
            "/long" => respond(200, LONG),
            "/start" => redirect(302, "/final"),
            "/final" => respond(201, "the final body"),
            _ => respond(200, "ok"),
        };
        let answer = seen.path.trim_start_matches('/').parse().expect("value");
        response.headers_mut().insert("x-answer", answer);
        if seen.path == "/cookie" {
            let cookie = "session=c00kie-s3cret; HttpOnly".parse().expect("value");
            response.headers_mut().insert("set-cookie", cookie);
        }
        response
    }))
    .await
}

#[tokio::test]
async fn a_response_is_one_hop_with_its_head_and_first_body_bytes() {
    let server = receiver().await;
    let transport = transport(TransportConfig {
        request_id_header: Some("X-Gorge-Request".into()),
        ..local_config()
    });
    let request = outbound(&server.url("/long?x=1"), GUARD);
    let phid = request.request_phid.clone();
    let (result, exchange) = record(&transport, request).await;
    assert_eq!(result, DeliveryResult::Response { status: 200 });
    assert_eq!(exchange.hops, [hop(server.url("/long?x=1"), 200)]);

    // As built, in order, names lower case; the signature is an HMAC
    // output, not a secret, and is kept.
    let signature = sign(KEY, PAYLOAD);
    let expected: Vec<(String, String)> = [
        (
            "user-agent",
            format!("gorge-webhook/{}", env!("CARGO_PKG_VERSION")),
        ),
        ("accept", "*/*".to_owned()),
        ("accept-encoding", "gzip".to_owned()),
        ("content-type", "application/json".to_owned()),
        ("x-phabricator-webhook-signature", signature),
        ("x-gorge-request", phid),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), value))
    .collect();
    assert_eq!(exchange.request_headers, expected);

    assert_eq!(header(&exchange.response_headers, "x-answer"), Some("long"));
    assert_eq!(
        header(&exchange.response_headers, "content-length"),
        Some(LONG.len().to_string().as_str())
    );
    assert_eq!(exchange.response_body, LONG[..KEPT]);
    assert!(exchange.response_body_truncated);

    let (result, exchange) = record(&transport, outbound(&server.url("/short"), GUARD)).await;
    assert_eq!(result, DeliveryResult::Response { status: 200 });
    assert_eq!(exchange.hops, [hop(server.url("/short"), 200)]);
    assert_eq!(exchange.response_body, "ok");
    assert!(!exchange.response_body_truncated);
}

#[tokio::test]
async fn a_body_of_exactly_the_bound_is_not_truncated() {
    let server = http_server(handler(|_| async { respond(200, &LONG[..KEPT]) })).await;
    let transport = transport(local_config());
    let (_, exchange) = record(&transport, outbound(&server.url("/"), GUARD)).await;
    assert_eq!(exchange.response_body, LONG[..KEPT]);
    assert!(!exchange.response_body_truncated);
}

#[tokio::test]
async fn each_hop_of_a_redirect_chain_is_noted_and_the_final_response_kept() {
    let server = receiver().await;
    let transport = transport(local_config());
    let uri = format!("http://user:secret@{}/start", server.addr);
    let (result, exchange) = record(&transport, outbound(&uri, GUARD)).await;
    assert_eq!(result, DeliveryResult::Response { status: 201 });
    assert_eq!(
        exchange.hops,
        [
            hop(server.url("/start"), 302),
            hop(server.url("/final"), 201)
        ]
    );
    assert_eq!(
        header(&exchange.response_headers, "x-answer"),
        Some("final")
    );
    assert_eq!(header(&exchange.response_headers, "location"), None);
    assert_eq!(exchange.response_body, "the final ");
    assert!(exchange.response_body_truncated);
    // The first hop's request, with its payload's signature.
    assert_eq!(
        header(&exchange.request_headers, "x-phabricator-webhook-signature"),
        Some(sign(KEY, PAYLOAD).as_str())
    );
}

#[tokio::test]
async fn a_redirect_that_ends_the_exchange_is_the_last_response() {
    let server = http_server(handler(|_| async { redirect(302, "ftp://files.example/") })).await;
    let transport = transport(local_config());
    let (result, exchange) = record(&transport, outbound(&server.url("/"), GUARD)).await;
    assert!(matches!(result, DeliveryResult::Refused(_)), "{result:?}");
    assert_eq!(exchange.hops, [hop(server.url("/"), 302)]);
    assert_eq!(
        header(&exchange.response_headers, "location"),
        Some("ftp://files.example/")
    );
    // Its body was never read: nothing kept, and more there was.
    assert_eq!(exchange.response_body, "");
    assert!(exchange.response_body_truncated);
}

#[tokio::test]
async fn uri_credentials_are_never_recorded() {
    const USER: &str = "hookuser-4q";
    const PASSWORD: &str = "hookpass-7z";
    const ENCODED: &str = "aG9va3VzZXItNHE6aG9va3Bhc3MtN3o=";
    let server = receiver().await;
    let transport = transport(local_config());
    let uri = format!("http://{USER}:{PASSWORD}@{}/start", server.addr);
    let (result, exchange) = record(&transport, outbound(&uri, GUARD)).await;
    assert_eq!(result, DeliveryResult::Response { status: 201 });
    // It did go out.
    assert_eq!(
        server.requests()[0]
            .headers
            .get("authorization")
            .map(|v| v.as_bytes()),
        Some(format!("Basic {ENCODED}").as_bytes())
    );
    assert_eq!(
        header(&exchange.request_headers, "authorization"),
        Some(WITHHELD)
    );
    let printed = format!("{exchange:?}");
    for secret in [USER, PASSWORD, ENCODED, "Basic "] {
        assert!(!printed.contains(secret), "{secret} recorded: {printed}");
    }
}

/// A forwarding proxy that answers every request itself with `answer`.
async fn forwarder(answer: &'static str) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                while !read_request(&mut stream).await.is_empty() {
                    if stream.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

#[tokio::test]
async fn proxy_credentials_are_never_recorded() {
    const PASSWORD: &str = "proxypass-9k";
    let proxy = forwarder("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").await;
    let transport = transport_with(
        TransportConfig {
            proxies: Proxies::every_call_through(
                &format!("http://proxyuser:{PASSWORD}@127.0.0.1:{}", proxy.port()),
                "",
            )
            .expect("proxy settings"),
            ..local_config()
        },
        TableLookup::default().with("receiver.test", &["127.0.0.1"]),
    );
    let (result, exchange) = record(&transport, outbound("http://receiver.test/hook", GUARD)).await;
    assert_eq!(result, DeliveryResult::Response { status: 200 });
    assert_eq!(
        exchange.hops,
        [hop("http://receiver.test/hook".to_owned(), 200)]
    );
    assert_eq!(
        header(&exchange.request_headers, "proxy-authorization"),
        Some(WITHHELD)
    );
    let printed = format!("{exchange:?}");
    for secret in ["proxyuser", PASSWORD, "Basic "] {
        assert!(!printed.contains(secret), "{secret} recorded: {printed}");
    }
}

#[tokio::test]
async fn a_receiver_that_never_answers_leaves_the_request_noted() {
    let server = raw_server(|mut socket| async move {
        read_request(&mut socket).await;
        tokio::time::sleep(Duration::from_secs(60)).await;
        drop(socket);
    })
    .await;
    let transport = transport(local_config());
    let (result, exchange) = record(&transport, outbound(&server.url("/"), SHORT)).await;
    assert_eq!(result, DeliveryResult::Timeout);
    assert_eq!(exchange.hops, []);
    assert_eq!(
        header(&exchange.request_headers, "content-type"),
        Some("application/json")
    );
    assert!(exchange.response_headers.is_empty());
    assert_eq!(exchange.response_body, "");
}

#[tokio::test]
async fn a_deadline_in_the_body_keeps_what_was_received() {
    let server = raw_server(|mut socket| async move {
        read_request(&mut socket).await;
        write_all(
            &mut socket,
            b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nX-Answer: slow\r\n\r\nabc",
        )
        .await;
        tokio::time::sleep(Duration::from_secs(60)).await;
        drop(socket);
    })
    .await;
    let transport = transport(local_config());
    let (result, exchange) = record(&transport, outbound(&server.url("/slow"), SHORT)).await;
    assert_eq!(result, DeliveryResult::Timeout);
    assert_eq!(exchange.hops, [hop(server.url("/slow"), 200)]);
    assert_eq!(header(&exchange.response_headers, "x-answer"), Some("slow"));
    assert_eq!(exchange.response_body, "abc");
    // The body went on; it was cut by the deadline.
    assert!(exchange.response_body_truncated);
}

#[tokio::test]
async fn recording_delivers_exactly_as_deliver_does() {
    let server = receiver().await;
    let silent = raw_server(|mut socket| async move {
        read_request(&mut socket).await;
        tokio::time::sleep(Duration::from_secs(60)).await;
        drop(socket);
    })
    .await;
    let hang_up = raw_server(|stream| async move { drop(stream) }).await;
    let transport = transport(local_config());
    for (uri, timeout) in [
        (server.url("/long"), GUARD),
        (server.url("/short"), GUARD),
        (format!("http://user:pw@{}/start", server.addr), GUARD),
        (silent.url("/"), SHORT),
        (hang_up.url("/"), GUARD),
        ("ftp://files.example/".to_owned(), GUARD),
    ] {
        let plain = deliver(&transport, outbound(&uri, timeout)).await;
        let (recorded, _) = record(&transport, outbound(&uri, timeout)).await;
        assert_eq!(plain, recorded, "{uri}");
    }
}

#[tokio::test]
async fn a_cookie_the_receiver_sets_is_withheld() {
    let server = receiver().await;
    let transport = transport(local_config());
    let (result, exchange) = record(&transport, outbound(&server.url("/cookie"), GUARD)).await;
    assert_eq!(result, DeliveryResult::Response { status: 200 });
    assert_eq!(
        header(&exchange.response_headers, "set-cookie"),
        Some(WITHHELD)
    );
    assert_eq!(
        header(&exchange.response_headers, "x-answer"),
        Some("cookie")
    );
    assert!(!format!("{exchange:?}").contains("c00kie-s3cret"));
}
