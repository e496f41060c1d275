//! Through an egress proxy: a real one (tinyproxy) for tunnels, forwarded
//! requests, credentials and outages, and a scripted one for an
//! `https://` proxy and the answers tinyproxy does not give. The outbound
//! check holds before the proxy is asked, and the proxy's failures are
//! this side's (`Local`), never the receiver's.

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use webhook_core::{verify, DeliveryResult, LocalFailure, ProxyFailure, UriRefusal};
use webhook_test_support::Tinyproxy;
use webhook_transport_hyper::{Proxies, TransportConfig};

use crate::support::*;

fn lookup() -> TableLookup {
    TableLookup::default()
        .with("receiver.test", &["127.0.0.1"])
        .with("localhost", &["127.0.0.1"])
        .with("proxy.test", &["127.0.0.1"])
        .with("inside.test", &["10.1.2.3"])
}

/// Trusts the test CA; every call through `proxy` but for `no_proxy`.
fn through(proxy: &str, no_proxy: &str, pki: &TestPki) -> TransportConfig {
    TransportConfig {
        extra_root_certificates_pem: pki.ca_pem.clone().into_bytes(),
        proxies: Proxies::every_call_through(proxy, no_proxy).expect("proxy settings"),
        ..local_config()
    }
}

fn proxy_failure(why: ProxyFailure) -> DeliveryResult {
    DeliveryResult::Local(LocalFailure::Proxy(why))
}

async fn https_receiver(pki: &TestPki) -> Server {
    https_server(
        handler(|_| async { respond(200, "ok") }),
        pki.server.clone(),
    )
    .await
}

fn assert_signed_payload(server: &Server) {
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let seen = &requests[0];
    assert_eq!(seen.body.as_ref(), PAYLOAD);
    let signature = seen
        .headers
        .get("x-phabricator-webhook-signature")
        .and_then(|v| v.to_str().ok())
        .expect("signature");
    assert!(verify(KEY, &seen.body, signature));
    assert!(seen.headers.get("proxy-authorization").is_none());
}

#[tokio::test]
async fn an_https_hook_goes_through_a_tunnel_to_the_address_checked_here() {
    let proxy = Tinyproxy::start().await;
    let pki = test_pki(&["receiver.test"]);
    let server = https_receiver(&pki).await;
    let transport = transport_with(through(&proxy.url(None), "", &pki), lookup());
    let uri = format!("https://receiver.test:{}/hook", server.addr.port());
    assert_eq!(
        deliver(&transport, outbound(&uri, GUARD)).await,
        DeliveryResult::Response { status: 200 }
    );
    assert_signed_payload(&server);
    // The tunnel names the checked address, never the name (the proxy
    // resolves nothing); the certificate was checked for the name.
    let log = proxy.log();
    assert_eq!(proxy.tunnels(), 1, "{log}");
    assert!(
        log.contains(&format!("CONNECT 127.0.0.1:{} ", server.addr.port())),
        "{log}"
    );
}

#[tokio::test]
async fn an_http_hook_is_forwarded_in_absolute_form_with_its_own_host() {
    let proxy = Tinyproxy::start().await;
    let pki = test_pki(&["receiver.test"]);
    let server = http_server(handler(|_| async { respond(204, "") })).await;
    let transport = transport_with(through(&proxy.url(None), "", &pki), lookup());
    let uri = format!("http://localhost:{}/hook?x=1", server.addr.port());
    assert_eq!(
        deliver(&transport, outbound(&uri, GUARD)).await,
        DeliveryResult::Response { status: 204 }
    );
    assert_signed_payload(&server);
    let seen = &server.requests()[0];
    assert_eq!(
        seen.headers.get("host").and_then(|v| v.to_str().ok()),
        Some(format!("localhost:{}", server.addr.port()).as_str())
    );
    assert!(seen.headers.contains_key("via"), "went through the proxy");
    let log = proxy.log();
    assert!(
        log.contains(&format!(
            "POST http://localhost:{}/hook?x=1 ",
            server.addr.port()
        )),
        "{log}"
    );
}

#[tokio::test]
async fn hosts_the_no_proxy_list_names_are_called_directly() {
    let proxy = Tinyproxy::start().await;
    let pki = test_pki(&["receiver.test"]);
    let server = https_receiver(&pki).await;
    let transport = transport_with(
        through(&proxy.url(None), "example.org, .test", &pki),
        lookup(),
    );
    let uri = format!("https://receiver.test:{}/hook", server.addr.port());
    assert_eq!(
        deliver(&transport, outbound(&uri, GUARD)).await,
        DeliveryResult::Response { status: 200 }
    );
    assert_eq!(server.requests().len(), 1);
    assert_eq!(proxy.requests(), 0, "{}", proxy.log());
}

#[tokio::test]
async fn proxy_credentials_open_the_tunnel_and_never_reach_the_receiver() {
    let proxy = Tinyproxy::with_credentials("hooks", "s3cret").await;
    let pki = test_pki(&["receiver.test"]);
    let server = https_receiver(&pki).await;
    let uri = format!("https://receiver.test:{}/hook", server.addr.port());
    let with = transport_with(
        through(&proxy.url(Some(("hooks", "s3cret"))), "", &pki),
        lookup(),
    );
    assert_eq!(
        deliver(&with, outbound(&uri, GUARD)).await,
        DeliveryResult::Response { status: 200 }
    );
    assert_signed_payload(&server);

    for proxy_url in [proxy.url(None), proxy.url(Some(("hooks", "wrong")))] {
        let transport = transport_with(through(&proxy_url, "", &pki), lookup());
        assert_eq!(
            deliver(&transport, outbound(&uri, GUARD)).await,
            proxy_failure(ProxyFailure::AuthRequired),
            "https through {proxy_url}"
        );
    }
    // A forwarded request without credentials: the proxy's 407. (tinyproxy
    // answers wrong ones with 401, which through a forwarding proxy cannot
    // be told from the receiver's own.)
    let transport = transport_with(through(&proxy.url(None), "", &pki), lookup());
    let plain = format!("http://localhost:{}/hook", server.addr.port());
    assert_eq!(
        deliver(&transport, outbound(&plain, GUARD)).await,
        proxy_failure(ProxyFailure::AuthRequired)
    );
    assert_eq!(
        server.requests().len(),
        1,
        "only the authorised call arrived"
    );
}

#[tokio::test]
async fn a_host_resolving_into_a_denied_range_is_refused_before_the_proxy_is_asked() {
    let proxy = Tinyproxy::start().await;
    let pki = test_pki(&["receiver.test"]);
    let transport = transport_with(through(&proxy.url(None), "", &pki), lookup());
    for uri in [
        "https://inside.test/hook",
        "http://inside.test/hook",
        "https://10.9.8.7/hook",
    ] {
        let result = deliver(&transport, outbound(uri, GUARD)).await;
        assert!(
            matches!(
                result,
                DeliveryResult::Refused(UriRefusal::DeniedAddress(_))
            ),
            "{uri}: {result:?}"
        );
    }
    assert_eq!(proxy.requests(), 0, "{}", proxy.log());
}

#[tokio::test]
async fn a_proxy_that_is_down_or_cannot_reach_the_receiver_is_a_local_failure() {
    let mut proxy = Tinyproxy::start().await;
    let pki = test_pki(&["receiver.test"]);
    let transport = transport_with(through(&proxy.url(None), "", &pki), lookup());
    // Nothing listens there: tinyproxy answers the CONNECT with a 5xx.
    let closed = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = closed.local_addr().expect("addr").port();
    drop(closed);
    let uri = format!("https://receiver.test:{port}/hook");
    assert_eq!(
        deliver(&transport, outbound(&uri, GUARD)).await,
        proxy_failure(ProxyFailure::TunnelFailed)
    );
    proxy.stop();
    assert_eq!(
        deliver(&transport, outbound(&uri, GUARD)).await,
        proxy_failure(ProxyFailure::Unreachable)
    );
    let plain = format!("http://localhost:{port}/hook");
    assert_eq!(
        deliver(&transport, outbound(&plain, GUARD)).await,
        proxy_failure(ProxyFailure::Unreachable)
    );
}

/// A scripted `CONNECT` proxy: behind TLS when `tls` is given; answers
/// `answer` and closes, or (`None`) opens the tunnel and relays.
async fn scripted_proxy(
    tls: Option<Arc<rustls::ServerConfig>>,
    answer: Option<&'static str>,
) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let tls = tls.clone();
            tokio::spawn(async move {
                match tls {
                    Some(config) => {
                        let acceptor = tokio_rustls::TlsAcceptor::from(config);
                        if let Ok(stream) = acceptor.accept(stream).await {
                            tunnel(stream, answer).await;
                        }
                    }
                    None => tunnel(stream, answer).await,
                }
            });
        }
    });
    addr
}

async fn tunnel<S>(mut client: S, answer: Option<&'static str>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let head = read_request(&mut client).await;
    let head = String::from_utf8_lossy(&head).into_owned();
    if let Some(answer) = answer {
        let _ = client.write_all(answer.as_bytes()).await;
        return;
    }
    let target = head
        .strip_prefix("CONNECT ")
        .and_then(|rest| rest.split(' ').next())
        .expect("a CONNECT request")
        .to_owned();
    let Ok(mut upstream) = TcpStream::connect(&target).await else {
        let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
        return;
    };
    let _ = client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await;
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}

#[tokio::test]
async fn an_https_proxy_is_spoken_to_over_tls() {
    let proxy_pki = test_pki(&["proxy.test"]);
    let proxy = scripted_proxy(Some(proxy_pki.server.clone()), None).await;
    let pki = test_pki(&["receiver.test"]);
    let server = https_receiver(&pki).await;
    let mut config = through(&format!("https://proxy.test:{}", proxy.port()), "", &pki);
    // Both CAs: the proxy's and the receiver's.
    config
        .extra_root_certificates_pem
        .extend_from_slice(proxy_pki.ca_pem.as_bytes());
    let transport = transport_with(config, lookup());
    let uri = format!("https://receiver.test:{}/hook", server.addr.port());
    assert_eq!(
        deliver(&transport, outbound(&uri, GUARD)).await,
        DeliveryResult::Response { status: 200 }
    );
    assert_signed_payload(&server);

    // A proxy whose certificate is not trusted: this side's failure.
    let untrusted = transport_with(
        through(&format!("https://proxy.test:{}", proxy.port()), "", &pki),
        lookup(),
    );
    assert_eq!(
        deliver(&untrusted, outbound(&uri, GUARD)).await,
        proxy_failure(ProxyFailure::Tls)
    );
}

#[tokio::test]
async fn each_way_a_proxy_can_fail_a_tunnel_is_named() {
    let pki = test_pki(&["receiver.test"]);
    let uri = "https://receiver.test:443/hook";
    for (answer, expected) in [
        (
            "HTTP/1.1 403 Forbidden\r\n\r\n",
            ProxyFailure::TunnelRefused,
        ),
        (
            "HTTP/1.1 407 Proxy Authentication Required\r\n\r\n",
            ProxyFailure::AuthRequired,
        ),
        (
            "HTTP/1.0 401 Unauthorized\r\n\r\n",
            ProxyFailure::AuthRequired,
        ),
        (
            "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 3\r\n\r\nbad",
            ProxyFailure::TunnelFailed,
        ),
        (
            "HTTP/1.1 503 Service Unavailable\r\n\r\n",
            ProxyFailure::TunnelFailed,
        ),
        (
            "HTTP/1.1 504 Gateway Timeout\r\n\r\n",
            ProxyFailure::TunnelFailed,
        ),
        ("SSH-2.0-OpenSSH\r\n\r\n", ProxyFailure::Protocol),
        ("", ProxyFailure::Protocol),
    ] {
        let proxy = scripted_proxy(None, Some(answer)).await;
        let transport = transport_with(
            through(&format!("http://127.0.0.1:{}", proxy.port()), "", &pki),
            lookup(),
        );
        assert_eq!(
            deliver(&transport, outbound(uri, GUARD)).await,
            proxy_failure(expected),
            "{answer:?}"
        );
    }
}

#[tokio::test]
async fn a_proxy_that_never_answers_the_tunnel_request_is_silent() {
    let pki = test_pki(&["receiver.test"]);
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut buf = [0u8; 1024];
            let _ = stream.read(&mut buf).await;
            open.push(stream);
        }
    });
    let transport = transport_with(
        TransportConfig {
            connect_timeout: std::time::Duration::from_millis(300),
            ..through(&format!("http://127.0.0.1:{port}"), "", &pki)
        },
        lookup(),
    );
    assert_eq!(
        deliver(&transport, outbound("https://receiver.test/hook", GUARD)).await,
        proxy_failure(ProxyFailure::Silent)
    );
    held.abort();
}

#[tokio::test]
async fn forwarded_requests_carry_the_proxy_s_credentials_and_redirects_are_routed_hop_by_hop() {
    let proxy = Tinyproxy::with_credentials("hooks", "s3cret").await;
    let pki = test_pki(&["receiver.test"]);
    let plain = http_server(handler(|_| async { respond(200, "ok") })).await;
    let next = format!("http://localhost:{}/next", plain.addr.port());
    let tls = https_server(
        handler(move |seen| {
            let next = next.clone();
            async move {
                match seen.path.as_str() {
                    "/inside" => redirect(307, "https://inside.test/hook"),
                    _ => redirect(307, &next),
                }
            }
        }),
        pki.server.clone(),
    )
    .await;
    let transport = transport_with(
        through(&proxy.url(Some(("hooks", "s3cret"))), "", &pki),
        lookup(),
    );
    // https through a tunnel, then the 307 to an http receiver forwarded
    // with the proxy's credentials: tinyproxy lets neither through
    // without them.
    let uri = format!("https://receiver.test:{}/hook", tls.addr.port());
    assert_eq!(
        deliver(&transport, outbound(&uri, GUARD)).await,
        DeliveryResult::Response { status: 200 }
    );
    let forwarded = plain.requests();
    assert_eq!(forwarded.len(), 1);
    assert_eq!(
        forwarded[0].body.as_ref(),
        PAYLOAD,
        "a 307 repeats the body"
    );
    assert_eq!(proxy.tunnels(), 1, "{}", proxy.log());
    assert_eq!(proxy.requests(), 2, "{}", proxy.log());

    // A redirect into the deny list is refused before the proxy hears of it.
    let inside = format!("https://receiver.test:{}/inside", tls.addr.port());
    let result = deliver(&transport, outbound(&inside, GUARD)).await;
    assert!(
        matches!(
            result,
            DeliveryResult::Refused(UriRefusal::DeniedAddress(_))
        ),
        "{result:?}"
    );
    // The first hop may ride the pooled tunnel; the second never asked.
    let log = proxy.log();
    assert!(
        !log.contains("10.1.2.3") && !log.contains("inside.test"),
        "{log}"
    );
}

/// A name whose lookup the test changes between calls.
#[derive(Debug, Clone)]
struct Rebinding(Arc<std::sync::Mutex<Vec<std::net::IpAddr>>>);

impl Rebinding {
    fn answer(&self, ip: &str) {
        *self.0.lock().expect("lock") = vec![ip.parse().expect("ip")];
    }
}

#[async_trait::async_trait]
impl webhook_transport_hyper::NameLookup for Rebinding {
    async fn lookup(
        &self,
        _host: &str,
    ) -> Result<Vec<std::net::IpAddr>, webhook_transport_hyper::LookupError> {
        Ok(self.0.lock().expect("lock").clone())
    }
}

/// A forwarding proxy that answers every request itself with `answer` and
/// keeps the connection open for the next, as squid does.
async fn keep_alive_forwarder(answer: &'static str) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                loop {
                    if read_request(&mut stream).await.is_empty() {
                        return;
                    }
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
async fn a_forwarded_request_is_checked_again_even_where_the_proxy_keeps_connections() {
    let proxy = keep_alive_forwarder("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n").await;
    let pki = test_pki(&["receiver.test"]);
    let names = Rebinding(Arc::default());
    names.answer("127.0.0.1");
    let config = through(&format!("http://127.0.0.1:{}", proxy.port()), "", &pki);
    let transport = webhook_transport_hyper::HyperTransport::with_lookup(
        config.check().expect("config"),
        Arc::new(names.clone()),
    )
    .expect("transport");
    let uri = "http://rebinding.test/hook";
    assert_eq!(
        deliver(&transport, outbound(uri, GUARD)).await,
        DeliveryResult::Response { status: 200 }
    );
    // The name now points inside: the proxy would resolve it there, so the
    // next call must not ride the connection checked for the old answer.
    names.answer("10.1.2.3");
    let result = deliver(&transport, outbound(uri, GUARD)).await;
    assert!(
        matches!(
            result,
            DeliveryResult::Refused(UriRefusal::DeniedAddress(_))
        ),
        "{result:?}"
    );
}

#[tokio::test]
async fn only_a_407_asking_for_proxy_credentials_is_the_proxy_s() {
    let pki = test_pki(&["receiver.test"]);
    for (answer, expected) in [
        (
            "HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"p\"\r\nContent-Length: 0\r\n\r\n",
            proxy_failure(ProxyFailure::AuthRequired),
        ),
        (
            "HTTP/1.1 407 Odd Receiver\r\nContent-Length: 0\r\n\r\n",
            DeliveryResult::Response { status: 407 },
        ),
    ] {
        let proxy = keep_alive_forwarder(answer).await;
        let transport = transport_with(
            through(&format!("http://127.0.0.1:{}", proxy.port()), "", &pki),
            lookup(),
        );
        assert_eq!(
            deliver(&transport, outbound("http://localhost/hook", GUARD)).await,
            expected,
            "{answer:?}"
        );
    }
}

#[tokio::test]
async fn a_tunnel_the_proxy_cannot_open_to_one_checked_address_is_tried_to_the_next() {
    let pki = test_pki(&["two.test"]);
    let server = https_receiver(&pki).await;
    let port = server.addr.port();
    // A proxy that cannot reach 127.0.0.1 and reaches the receiver for
    // 127.0.0.2; the targets it was asked for, in order.
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let proxy = listener.local_addr().expect("addr");
    let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&asked);
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let head = String::from_utf8_lossy(&read_request(&mut client).await).into_owned();
            let target = head.split(' ').nth(1).unwrap_or_default().to_owned();
            seen.lock().expect("lock").push(target.clone());
            if target.starts_with("127.0.0.1:") {
                let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
                continue;
            }
            tokio::spawn(async move {
                let Ok(mut upstream) = TcpStream::connect(("127.0.0.1", port)).await else {
                    return;
                };
                let _ = client
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await;
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            });
        }
    });
    let config = TransportConfig {
        outbound_allow: webhook_transport_hyper::parse_cidr_list("127.0.0.0/30").expect("allow"),
        ..through(&format!("http://{proxy}"), "", &pki)
    };
    let transport = transport_with(
        config,
        TableLookup::default().with("two.test", &["127.0.0.1", "127.0.0.2"]),
    );
    let uri = format!("https://two.test:{port}/hook");
    assert_eq!(
        deliver(&transport, outbound(&uri, GUARD)).await,
        DeliveryResult::Response { status: 200 }
    );
    assert_signed_payload(&server);
    assert_eq!(
        *asked.lock().expect("lock"),
        vec![format!("127.0.0.1:{port}"), format!("127.0.0.2:{port}")]
    );
}
