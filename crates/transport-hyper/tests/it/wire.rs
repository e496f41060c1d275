//! The request as it is on the wire, read from a raw socket because hyper
//! servers normalise header names: names as cURL writes PHP's, `Accept` and
//! `Accept-Encoding`, the empty POST after a 302 (no `Content-Length`, as
//! cURL sends it), and the `Authorization` line.

use webhook_core::{sign, DeliveryResult};
use webhook_transport_hyper::TransportConfig;

use crate::support::*;

const OK: &str = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";

/// The header lines of a head, without the request line.
fn header_names(head: &[String]) -> Vec<&str> {
    head[1..]
        .iter()
        .map(|line| line.split_once(':').expect("a header line").0)
        .collect()
}

#[tokio::test]
async fn header_names_go_out_in_title_case_with_accept() {
    let wire = WireServer::start(vec![OK.to_owned()]).await;
    let transport = transport(TransportConfig {
        signature_headers: vec![
            "X-Phabricator-Webhook-Signature".into(),
            "x-phorge-webhook-signature".into(),
        ],
        user_agent: "gorge-webhook-test/1".into(),
        ..local_config()
    });
    let result = deliver(&transport, outbound(&wire.server.url("/hook"), GUARD)).await;
    assert_eq!(result, DeliveryResult::Response { status: 200 });

    let head = wire.head(0);
    assert_eq!(head[0], "POST /hook HTTP/1.1");
    let mut names = header_names(&head);
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "Accept",
            "Accept-Encoding",
            "Content-Length",
            "Content-Type",
            "Host",
            "User-Agent",
            "X-Phabricator-Webhook-Signature",
            "X-Phorge-Webhook-Signature",
        ]
    );
    let signature = sign(KEY, PAYLOAD);
    // cURL's order: `Accept`, then `Accept-Encoding`.
    let at = |name: &str| head.iter().position(|line| line.starts_with(name));
    assert_eq!(
        at("Accept-Encoding:"),
        at("Accept:").map(|accept| accept + 1),
        "{head:?}"
    );
    for line in [
        "Accept: */*".to_owned(),
        "Accept-Encoding: gzip".to_owned(),
        "Content-Type: application/json".to_owned(),
        format!("Content-Length: {}", PAYLOAD.len()),
        format!("Host: {}", wire.server.addr),
        "User-Agent: gorge-webhook-test/1".to_owned(),
        format!("X-Phabricator-Webhook-Signature: {signature}"),
        format!("X-Phorge-Webhook-Signature: {signature}"),
    ] {
        assert!(head.contains(&line), "{line:?} not in {head:?}");
    }
    assert_eq!(wire.body(0), PAYLOAD);
}

#[tokio::test]
async fn a_302_is_followed_by_an_empty_post_with_the_same_headers() {
    let wire = WireServer::start(vec![
        "HTTP/1.1 302 Found\r\nLocation: /final\r\nContent-Length: 0\r\n\r\n".to_owned(),
        OK.to_owned(),
    ])
    .await;
    let transport = transport(local_config());
    let result = deliver(&transport, outbound(&wire.server.url("/start"), GUARD)).await;
    assert_eq!(result, DeliveryResult::Response { status: 200 });

    let first = wire.head(0);
    let second = wire.head(1);
    assert_eq!(second[0], "POST /final HTTP/1.1");
    // cURL sends the empty POST without a `Content-Length` (nor a
    // `Transfer-Encoding`): no body, as HTTP/1.1 reads a request without
    // either.
    assert!(
        !second
            .iter()
            .any(|line| line.starts_with("Content-Length") || line.starts_with("Transfer-Encoding")),
        "{second:?}"
    );
    assert!(wire.body(1).is_empty());
    let kept: Vec<&String> = first[1..]
        .iter()
        .filter(|line| !line.starts_with("Content-Length:"))
        .collect();
    let again: Vec<&String> = second[1..]
        .iter()
        .filter(|line| !line.starts_with("Content-Length:"))
        .collect();
    assert_eq!(kept, again, "the same headers, in the same order");
    assert!(second.contains(&"Accept-Encoding: gzip".to_owned()));
    assert!(second.contains(&"Content-Type: application/json".to_owned()));
    assert!(second.contains(&format!(
        "X-Phabricator-Webhook-Signature: {}",
        sign(KEY, PAYLOAD)
    )));
}

#[tokio::test]
async fn credentials_go_out_as_a_title_case_authorization_line() {
    let wire = WireServer::start(vec![OK.to_owned()]).await;
    let transport = transport(local_config());
    let uri = format!("http://user:secret@{}/in", wire.server.addr);
    let result = deliver(&transport, outbound(&uri, GUARD)).await;
    assert_eq!(result, DeliveryResult::Response { status: 200 });
    let head = wire.head(0);
    assert!(
        head.contains(&"Authorization: Basic dXNlcjpzZWNyZXQ=".to_owned()),
        "{head:?}"
    );
}
