//! `resolve` and the connect-time outbound check: malformed URIs, unknown
//! hosts, resolver failures, the deny list and the allow list.

use std::net::SocketAddr;

use webhook_core::{DeliveryResult, Resolution, Target, Transport, TransportFailure, UriRefusal};
use webhook_transport_hyper::{parse_cidr_list, TransportConfig};

use crate::support::*;

fn denied(ip: &str) -> UriRefusal {
    UriRefusal::DeniedAddress(ip.parse().expect("ip"))
}

#[tokio::test]
async fn uris_without_http_scheme_or_host_are_malformed() {
    let transport = transport(TransportConfig::default());
    for uri in [
        "",
        "http://",
        "https://",
        "http:///hook",
        "ftp://example.com/hook",
        "file:///etc/passwd",
        "javascript:alert(1)",
        "/relative/hook",
        "example.com/hook",
        "http://exa mple.com/",
    ] {
        let resolution = transport.resolve(uri).await;
        assert!(
            matches!(resolution, Resolution::Refused(UriRefusal::Malformed(_))),
            "{uri:?}: {resolution:?}"
        );
    }
}

#[tokio::test]
async fn loopback_is_denied_by_default_and_nothing_connects() {
    let server = http_server(handler(|_| async { respond(200, "ok") })).await;
    let transport = transport(TransportConfig::default());
    assert_eq!(
        transport.resolve(&server.url("/")).await,
        Resolution::Refused(denied("127.0.0.1"))
    );
    let result = deliver(&transport, outbound(&server.url("/"), GUARD)).await;
    assert_eq!(result, DeliveryResult::Refused(denied("127.0.0.1")));
    assert_eq!(server.accepts(), 0);
}

#[tokio::test]
async fn the_allow_list_lets_loopback_through() {
    let server = http_server(handler(|_| async { respond(200, "ok") })).await;
    let transport = transport(local_config());
    let resolution = transport.resolve(&server.url("/hook")).await;
    assert_eq!(
        resolution,
        Resolution::Ready(Target {
            uri: server.url("/hook"),
            addrs: vec![server.addr],
        })
    );
    let result = deliver(&transport, outbound(&server.url("/hook"), GUARD)).await;
    assert_eq!(result, DeliveryResult::Response { status: 200 });
}

#[tokio::test]
async fn private_and_special_literals_are_denied() {
    let transport = transport(local_config());
    for (uri, ip) in [
        ("http://10.1.2.3/", "10.1.2.3"),
        ("https://192.168.0.10:8443/x", "192.168.0.10"),
        ("http://169.254.169.254/latest/meta-data", "169.254.169.254"),
        ("http://[::1]:8080/", "::1"),
        ("http://[fd00::1]/", "fd00::1"),
        // The mapped form of an allowed address is still denied: it is an
        // entry of its own in Phorge's list.
        ("http://[::ffff:127.0.0.1]/", "::ffff:127.0.0.1"),
        ("http://[::ffff:10.0.0.1]/", "::ffff:10.0.0.1"),
    ] {
        assert_eq!(
            transport.resolve(uri).await,
            Resolution::Refused(denied(ip)),
            "{uri}"
        );
        // deliver checks again when it connects.
        assert_eq!(
            deliver(&transport, outbound(uri, GUARD)).await,
            DeliveryResult::Refused(denied(ip)),
            "{uri}"
        );
    }
}

#[tokio::test]
async fn a_name_is_refused_when_any_of_its_addresses_is_denied() {
    let lookup = TableLookup::default()
        .with("public.test", &["8.8.8.8", "2606:4700::1111"])
        .with("mixed.test", &["8.8.8.8", "10.0.0.7"]);
    let transport = transport_with(TransportConfig::default(), lookup);
    assert_eq!(
        transport.resolve("https://public.test/hook").await,
        Resolution::Ready(Target {
            uri: "https://public.test/hook".into(),
            addrs: vec![
                "8.8.8.8:443".parse::<SocketAddr>().expect("addr"),
                "[2606:4700::1111]:443".parse().expect("addr"),
            ],
        })
    );
    assert_eq!(
        transport.resolve("http://mixed.test/hook").await,
        Resolution::Refused(denied("10.0.0.7"))
    );
}

#[tokio::test]
async fn names_resolve_to_checked_addresses_and_deliver_there() {
    let server = http_server(handler(|_| async { respond(200, "ok") })).await;
    let lookup = TableLookup::default().with("receiver.test", &["127.0.0.1"]);
    let transport = transport_with(local_config(), lookup);
    let uri = format!("http://receiver.test:{}/hook", server.addr.port());
    assert_eq!(
        transport.resolve(&uri).await,
        Resolution::Ready(Target {
            uri: uri.clone(),
            addrs: vec![server.addr],
        })
    );
    let result = deliver(&transport, outbound(&uri, GUARD)).await;
    assert_eq!(result, DeliveryResult::Response { status: 200 });
    let host = server.requests()[0]
        .headers
        .get("host")
        .cloned()
        .expect("host");
    assert_eq!(
        host.to_str().expect("ascii"),
        format!("receiver.test:{}", server.addr.port())
    );
}

#[tokio::test]
async fn the_check_runs_again_at_connect_time() {
    // A name that passed `resolve` earlier but now has a denied address
    // (DNS rebinding) is refused when the connection is made.
    let lookup = TableLookup::default().with("rebind.test", &["127.0.0.2"]);
    let transport = transport_with(local_config(), lookup);
    let result = deliver(&transport, outbound("http://rebind.test/", GUARD)).await;
    assert_eq!(result, DeliveryResult::Refused(denied("127.0.0.2")));
}

#[tokio::test]
async fn an_unknown_host_is_refused() {
    let transport = transport_with(TransportConfig::default(), TableLookup::default());
    assert_eq!(
        transport.resolve("https://no-such-host.invalid/hook").await,
        Resolution::Refused(UriRefusal::UnknownHost)
    );
    assert_eq!(
        deliver(
            &transport,
            outbound("https://no-such-host.invalid/hook", GUARD)
        )
        .await,
        DeliveryResult::Refused(UriRefusal::UnknownHost)
    );
}

#[tokio::test]
async fn a_resolver_failure_is_a_failed_attempt_not_a_refusal() {
    let lookup = TableLookup::default().failing("flaky.test");
    let transport = transport_with(TransportConfig::default(), lookup);
    assert_eq!(
        transport.resolve("https://flaky.test/hook").await,
        Resolution::Failed(TransportFailure::Resolve)
    );
    assert_eq!(
        deliver(&transport, outbound("https://flaky.test/hook", GUARD)).await,
        DeliveryResult::Failed(TransportFailure::Resolve)
    );
}

#[tokio::test]
async fn localhost_through_the_system_resolver() {
    // `localhost` comes from /etc/hosts: no DNS traffic. Whichever loopback
    // addresses it has, all must pass the check.
    let server = http_server(handler(|_| async { respond(200, "ok") })).await;
    let uri = format!("http://localhost:{}/", server.addr.port());
    let strict = transport(TransportConfig::default());
    assert!(
        matches!(
            strict.resolve(&uri).await,
            Resolution::Refused(UriRefusal::DeniedAddress(ip)) if ip.is_loopback()
        ),
        "localhost must be denied by default"
    );
    let allowed = transport(TransportConfig {
        outbound_allow: parse_cidr_list("127.0.0.0/8,::1/128").expect("allow"),
        ..TransportConfig::default()
    });
    match allowed.resolve(&uri).await {
        Resolution::Ready(target) => {
            assert!(target.addrs.iter().all(|a| a.ip().is_loopback()));
            assert!(target.addrs.iter().all(|a| a.port() == server.addr.port()));
        }
        other => panic!("localhost not resolved: {other:?}"),
    }
}

#[tokio::test]
async fn invalid_ports_are_refused_as_malformed_like_curl_does() {
    // The http crate reads these as "no port": they went to port 80.
    let transport = transport(local_config());
    for (uri, why) in [
        ("http://127.0.0.1:99999/", "port 99999 is above 65535"),
        ("http://127.0.0.1:65616/", "port 65616 is above 65535"),
        ("http://127.0.0.1:-1/", "the port is not a decimal number"),
        (
            "https://hooks.example:44x3/",
            "the port is not a decimal number",
        ),
    ] {
        let expected = UriRefusal::Malformed(why.to_owned());
        assert_eq!(
            transport.resolve(uri).await,
            Resolution::Refused(expected.clone()),
            "{uri}"
        );
        assert_eq!(
            deliver(&transport, outbound(uri, GUARD)).await,
            DeliveryResult::Refused(expected),
            "{uri}"
        );
    }
    // Port 0 is a port to cURL too; nothing listens there (7).
    assert_eq!(
        deliver(&transport, outbound("http://127.0.0.1:0/", GUARD)).await,
        DeliveryResult::Failed(TransportFailure::Connect)
    );
}

#[tokio::test]
async fn an_empty_port_is_the_schemes_default_like_curl() {
    let transport = transport(local_config());
    for (uri, port) in [("http://127.0.0.1:/x", 80), ("https://127.0.0.1:/x", 443)] {
        let resolution = transport.resolve(uri).await;
        assert!(
            matches!(&resolution, Resolution::Ready(target)
                if target.addrs == [SocketAddr::from(([127, 0, 0, 1], port))]),
            "{uri}: {resolution:?}"
        );
    }
}

#[tokio::test]
async fn a_uri_past_the_http_crates_limit_is_refused_saying_why() {
    let transport = transport(local_config());
    let uri = format!("http://127.0.0.1/{}", "a".repeat(70_000));
    let Resolution::Refused(UriRefusal::Malformed(why)) = transport.resolve(&uri).await else {
        panic!("a 70,017-byte URI must be refused");
    };
    assert_eq!(
        why,
        "URI longer than 65,534 bytes, the HTTP library's limit (70017 bytes)"
    );
}
