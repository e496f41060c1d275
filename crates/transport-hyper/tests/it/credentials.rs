//! Credentials in a hook URI: sent as Basic authentication the way PHP's
//! cURL sends them (expected values as cURL 7.88 sent them), on the first
//! request and same-origin redirect hops only, and never logged.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex, OnceLock};

use webhook_core::DeliveryResult;
use webhook_transport_hyper::TransportConfig;

use crate::support::*;

/// A receiver answering each path it was told about with a redirect
/// (`(status, location)`), and anything else with 200.
struct Hops {
    server: Server,
    routes: Arc<Mutex<HashMap<String, (u16, String)>>>,
}

impl Hops {
    async fn start() -> Self {
        let routes: Arc<Mutex<HashMap<String, (u16, String)>>> = Arc::default();
        let server = {
            let routes = Arc::clone(&routes);
            http_server(handler(move |recorded| {
                let route = routes.lock().expect("lock").get(&recorded.path).cloned();
                async move {
                    match route {
                        Some((status, location)) => redirect(status, &location),
                        None => respond(200, "ok"),
                    }
                }
            }))
            .await
        };
        Self { server, routes }
    }

    fn route(&self, path: &str, status: u16, location: String) {
        self.routes
            .lock()
            .expect("lock")
            .insert(path.to_owned(), (status, location));
    }

    /// The `Authorization` values of the requests for `path`, in order.
    fn authorization(&self, path: &str) -> Vec<Option<String>> {
        self.server
            .requests()
            .iter()
            .filter(|seen| seen.path == path)
            .map(|seen| {
                seen.headers
                    .get("authorization")
                    .map(|value| value.to_str().expect("ascii").to_owned())
            })
            .collect()
    }
}

/// What cURL sends for `user:secret@`.
fn user_secret() -> Option<String> {
    Some("Basic dXNlcjpzZWNyZXQ=".to_owned())
}

#[tokio::test]
async fn uri_credentials_go_out_as_basic_authentication_as_curl_decodes_them() {
    let hops = Hops::start().await;
    let transport = transport(local_config());
    for (n, (user_info, expected)) in [
        ("user:secret@", Some("Basic dXNlcjpzZWNyZXQ=")),
        ("us%40er:p%3Ass@", Some("Basic dXNAZXI6cDpzcw==")),
        // cURL sends an empty password for a user without one.
        ("user@", Some("Basic dXNlcjo=")),
        ("user:@", Some("Basic dXNlcjo=")),
        ("", None),
    ]
    .into_iter()
    .enumerate()
    {
        let path = format!("/in/{n}");
        let uri = format!("http://{user_info}{}{path}", hops.server.addr);
        let result = deliver(&transport, outbound(&uri, GUARD)).await;
        assert_eq!(result, DeliveryResult::Response { status: 200 });
        assert_eq!(
            hops.authorization(&path),
            [expected.map(str::to_owned)],
            "{user_info:?}"
        );
    }
    // One pool entry: user-info is no part of the connection's key.
    assert_eq!(hops.server.accepts(), 1);
}

#[tokio::test]
async fn same_origin_redirects_keep_basic_authentication() {
    let hops = Hops::start().await;
    hops.route("/start", 302, "/moved".into());
    hops.route("/moved", 307, hops.server.url("/final"));
    let transport = transport(local_config());
    let uri = format!("http://user:secret@{}/start", hops.server.addr);
    let result = deliver(&transport, outbound(&uri, GUARD)).await;
    assert_eq!(result, DeliveryResult::Response { status: 200 });
    for path in ["/start", "/moved", "/final"] {
        assert_eq!(hops.authorization(path), [user_secret()], "{path}");
    }
}

#[tokio::test]
async fn a_redirect_to_another_origin_carries_no_credentials() {
    let first = Hops::start().await;
    let other = Hops::start().await;
    // Another port, then back to the first origin: cURL forgets the
    // credentials when the port changes, so the way back has none either.
    first.route("/start", 307, other.server.url("/elsewhere"));
    other.route("/elsewhere", 302, first.server.url("/back"));
    let transport = transport(local_config());
    let uri = format!("http://user:secret@{}/start", first.server.addr);
    let result = deliver(&transport, outbound(&uri, GUARD)).await;
    assert_eq!(result, DeliveryResult::Response { status: 200 });
    assert_eq!(first.authorization("/start"), [user_secret()]);
    assert_eq!(other.authorization("/elsewhere"), [None]);
    assert_eq!(first.authorization("/back"), [None]);
}

#[tokio::test]
async fn another_host_on_the_same_port_gets_none_and_the_way_back_does() {
    let hops = Hops::start().await;
    let port = hops.server.addr.port();
    hops.route("/start", 302, format!("http://other.test:{port}/elsewhere"));
    hops.route(
        "/elsewhere",
        302,
        format!("http://Receiver.TEST:{port}/back"),
    );
    let lookup = TableLookup::default()
        .with("receiver.test", &["127.0.0.1"])
        .with("other.test", &["127.0.0.1"]);
    let transport = transport_with(local_config(), lookup);
    let uri = format!("http://user:secret@receiver.test:{port}/start");
    let result = deliver(&transport, outbound(&uri, GUARD)).await;
    assert_eq!(result, DeliveryResult::Response { status: 200 });
    assert_eq!(hops.authorization("/start"), [user_secret()]);
    assert_eq!(hops.authorization("/elsewhere"), [None]);
    // cURL compares the host without regard to case.
    assert_eq!(hops.authorization("/back"), [user_secret()]);
}

#[tokio::test]
async fn credentials_go_out_over_http2_too() {
    let pki = test_pki(&["receiver.test"]);
    let server = https_server(handler(|_| async { respond(200, "ok") }), pki.server).await;
    let transport = transport_with(
        TransportConfig {
            extra_root_certificates_pem: pki.ca_pem.into_bytes(),
            ..local_config()
        },
        TableLookup::default().with("receiver.test", &["127.0.0.1"]),
    );
    let uri = format!(
        "https://user:secret@receiver.test:{}/in",
        server.addr.port()
    );
    let result = deliver(&transport, outbound(&uri, GUARD)).await;
    assert_eq!(result, DeliveryResult::Response { status: 200 });
    let seen = &server.requests()[0];
    assert_eq!(seen.version, http::Version::HTTP_2);
    assert_eq!(
        seen.headers.get("authorization").map(|v| v.as_bytes()),
        Some(&b"Basic dXNlcjpzZWNyZXQ="[..])
    );
}

/// Everything logged, at every level, into one buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().expect("lock").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// What this test binary logs from the first call on. The subscriber is
/// the global one: tracing caches per call site whether anyone listens,
/// and a subscriber scoped to one test's thread misses the call sites
/// other tests' threads reached first.
fn captured_log() -> &'static Captured {
    static CAPTURED: OnceLock<Captured> = OnceLock::new();
    CAPTURED.get_or_init(|| {
        let captured = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer({
                let captured = captured.clone();
                move || captured.clone()
            })
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("the only global subscriber");
        captured
    })
}

#[tokio::test]
async fn credentials_never_reach_a_log_line_or_a_result() {
    const USER: &str = "hookuser-4q";
    const PASSWORD: &str = "hookpass-7z";
    const ENCODED: &str = "aG9va3VzZXItNHE6aG9va3Bhc3MtN3o=";
    let captured = captured_log();

    let hops = Hops::start().await;
    // Hangs up without answering, so the last hop fails and is logged.
    let hang_up = raw_server(|stream| async move { drop(stream) }).await;
    hops.route("/start", 302, "/moved".into());
    hops.route("/moved", 307, hang_up.url("/gone"));
    let pki = test_pki(&["receiver.test"]);
    let tls = https_server(handler(|_| async { respond(200, "ok") }), pki.server).await;
    let transport = transport_with(
        TransportConfig {
            extra_root_certificates_pem: pki.ca_pem.into_bytes(),
            ..local_config()
        },
        TableLookup::default().with("receiver.test", &["127.0.0.1"]),
    );
    let credentials = format!("{USER}:{PASSWORD}");
    let mut results = Vec::new();
    for uri in [
        format!("http://{credentials}@{}/start", hops.server.addr),
        format!("https://{credentials}@receiver.test:{}/in", tls.addr.port()),
        format!("http://{credentials}@@{}/two-at-signs", hops.server.addr),
        format!("http://{USER}%00:{PASSWORD}@{}/nul", hops.server.addr),
    ] {
        results.push(deliver(&transport, outbound(&uri, GUARD)).await);
    }
    assert!(
        matches!(results[0], DeliveryResult::Failed(_)),
        "{results:?}"
    );
    assert_eq!(results[1], DeliveryResult::Response { status: 200 });
    assert_eq!(hops.authorization("/moved").len(), 1);

    let log = String::from_utf8(captured.0.lock().expect("lock").clone()).expect("utf-8");
    // This test's own lines, and HTTP/2 and pool internals at trace level.
    for expected in [
        format!("location=http://{}", hang_up.addr),
        "request_failed".to_owned(),
        "h2::".to_owned(),
        "hyper_util".to_owned(),
    ] {
        assert!(log.contains(&expected), "no {expected} in the log:\n{log}");
    }
    let printed = format!("{results:?}");
    for secret in [USER, PASSWORD, ENCODED, "Basic "] {
        assert!(!log.contains(secret), "{secret} logged:\n{log}");
        assert!(!printed.contains(secret), "{secret} in a result: {printed}");
    }
}
