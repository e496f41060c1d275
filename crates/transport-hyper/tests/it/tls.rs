//! HTTPS: a receiver certified by a test CA is trusted only when that CA is
//! configured; ALPN picks HTTP/2.

use http::Version;
use webhook_core::{verify, DeliveryResult, TransportFailure};
use webhook_transport_hyper::TransportConfig;

use crate::support::*;

fn lookup() -> TableLookup {
    TableLookup::default()
        .with("receiver.test", &["127.0.0.1"])
        .with("impostor.test", &["127.0.0.1"])
}

fn trusting(pki: &TestPki) -> TransportConfig {
    TransportConfig {
        extra_root_certificates_pem: pki.ca_pem.clone().into_bytes(),
        ..local_config()
    }
}

#[tokio::test]
async fn a_receiver_signed_by_a_configured_ca_is_reached_over_http2() {
    let pki = test_pki(&["receiver.test"]);
    let server = https_server(
        handler(|_| async { respond(200, "ok") }),
        pki.server.clone(),
    )
    .await;
    let transport = transport_with(trusting(&pki), lookup());
    let uri = format!("https://receiver.test:{}/hook", server.addr.port());
    for _ in 0..3 {
        let result = deliver(&transport, outbound(&uri, GUARD)).await;
        assert_eq!(result, DeliveryResult::Response { status: 200 });
    }
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    for seen in &requests {
        assert_eq!(seen.version, Version::HTTP_2);
        assert_eq!(seen.body.as_ref(), PAYLOAD);
        let signature = seen
            .headers
            .get("x-phabricator-webhook-signature")
            .expect("signature")
            .to_str()
            .expect("ascii");
        assert!(verify(KEY, &seen.body, signature));
    }
    // One multiplexed HTTP/2 connection carries all of them.
    assert_eq!(server.accepts(), 1);
}

#[tokio::test]
async fn an_untrusted_certificate_is_a_tls_failure() {
    let pki = test_pki(&["receiver.test"]);
    let server = https_server(
        handler(|_| async { respond(200, "ok") }),
        pki.server.clone(),
    )
    .await;
    let transport = transport_with(local_config(), lookup());
    let uri = format!("https://receiver.test:{}/hook", server.addr.port());
    let result = deliver(&transport, outbound(&uri, GUARD)).await;
    assert_eq!(result, DeliveryResult::Failed(TransportFailure::Tls));
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn a_certificate_for_another_name_is_a_tls_failure() {
    let pki = test_pki(&["receiver.test"]);
    let server = https_server(
        handler(|_| async { respond(200, "ok") }),
        pki.server.clone(),
    )
    .await;
    let transport = transport_with(trusting(&pki), lookup());
    let uri = format!("https://impostor.test:{}/hook", server.addr.port());
    let result = deliver(&transport, outbound(&uri, GUARD)).await;
    assert_eq!(result, DeliveryResult::Failed(TransportFailure::Tls));
}

#[tokio::test]
async fn tls_to_a_plain_http_receiver_is_a_tls_failure() {
    let server = http_server(handler(|_| async { respond(200, "ok") })).await;
    let transport = transport(local_config());
    let uri = format!("https://{}/hook", server.addr);
    let result = deliver(&transport, outbound(&uri, GUARD)).await;
    assert_eq!(result, DeliveryResult::Failed(TransportFailure::Tls));
}

#[tokio::test]
async fn a_peer_hanging_up_mid_handshake_is_a_tls_failure() {
    let server = raw_server(|mut socket| async move {
        let mut hello = [0u8; 512];
        let _ = tokio::io::AsyncReadExt::read(&mut socket, &mut hello).await;
        drop(socket);
    })
    .await;
    let transport = transport(local_config());
    let uri = format!("https://{}/hook", server.addr);
    let result = deliver(&transport, outbound(&uri, GUARD)).await;
    assert_eq!(result, DeliveryResult::Failed(TransportFailure::Tls));
}
