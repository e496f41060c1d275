//! Redirects as PHP's cURL follows them, each hop through the outbound
//! check again.

use http::Method;
use webhook_core::{verify, DeliveryResult, TransportFailure, UriRefusal};
use webhook_transport_hyper::TransportConfig;

use crate::support::*;

/// Routes: `/redirect/{code}` → `{code}` to `/final`; `/chain/{n}/{end}`
/// → 302 to the next link until `end`; `/bare/{code}` → `{code}` without
/// `Location`; `/relative/deeper/start` → 307 to `../final`; else 200.
async fn redirecting_server() -> Server {
    http_server(handler(|recorded| async move {
        let parts: Vec<&str> = recorded.path.trim_start_matches('/').split('/').collect();
        match parts.as_slice() {
            ["redirect", code] => redirect(code.parse().expect("code"), "/final"),
            ["chain", n, end] => {
                let (n, end): (u32, u32) = (n.parse().expect("n"), end.parse().expect("end"));
                if n < end {
                    redirect(302, &format!("/chain/{}/{end}", n + 1))
                } else {
                    respond(200, "end of chain")
                }
            }
            ["bare", code] => respond(code.parse().expect("code"), "no location"),
            ["relative", "deeper", "start"] => redirect(307, "../final"),
            _ => respond(200, "final"),
        }
    }))
    .await
}

/// A server that redirects every request to `location`.
async fn redirect_to(location: &'static str, code: u16) -> Server {
    http_server(handler(move |_| async move { redirect(code, location) })).await
}

#[tokio::test]
async fn moved_found_and_see_other_repeat_the_post_without_its_body() {
    let server = redirecting_server().await;
    let transport = transport(local_config());
    for code in [301, 302, 303] {
        let before = server.requests().len();
        let result = deliver(
            &transport,
            outbound(&server.url(&format!("/redirect/{code}")), GUARD),
        )
        .await;
        assert_eq!(result, DeliveryResult::Response { status: 200 }, "{code}");
        let requests = server.requests();
        assert_eq!(requests.len(), before + 2);
        let first = &requests[before];
        assert_eq!(first.method, Method::POST);
        assert_eq!(first.body.as_ref(), PAYLOAD);
        let second = &requests[before + 1];
        assert_eq!(second.path, "/final");
        assert_eq!(second.method, Method::POST, "{code}");
        assert!(second.body.is_empty(), "{code}");
        // As cURL: no `Content-Length` on the empty POST.
        assert_eq!(second.headers.get("content-length"), None, "{code}");
        assert_eq!(
            second.headers.get("content-type").map(|v| v.as_bytes()),
            Some(&b"application/json"[..]),
            "{code}"
        );
        for name in [
            "content-type",
            "x-phabricator-webhook-signature",
            "user-agent",
            "accept",
            "accept-encoding",
        ] {
            assert_eq!(
                second.headers.get(name),
                first.headers.get(name),
                "{code}: {name}"
            );
        }
        // The signature is still the payload's, though the body is gone.
        let signature = second
            .headers
            .get("x-phabricator-webhook-signature")
            .expect("signature")
            .to_str()
            .expect("ascii");
        assert!(verify(KEY, PAYLOAD, signature), "{code}");
    }
}

#[tokio::test]
async fn temporary_and_permanent_redirects_repeat_the_signed_post() {
    let server = redirecting_server().await;
    let transport = transport(local_config());
    for code in [307, 308] {
        let before = server.requests().len();
        let result = deliver(
            &transport,
            outbound(&server.url(&format!("/redirect/{code}")), GUARD),
        )
        .await;
        assert_eq!(result, DeliveryResult::Response { status: 200 }, "{code}");
        let second = &server.requests()[before + 1];
        assert_eq!(second.path, "/final");
        assert_eq!(second.method, Method::POST);
        assert_eq!(second.body.as_ref(), PAYLOAD);
        assert_eq!(
            second.headers.get("content-type").map(|v| v.as_bytes()),
            Some(&b"application/json"[..])
        );
        let signature = second
            .headers
            .get("x-phabricator-webhook-signature")
            .expect("signature")
            .to_str()
            .expect("ascii");
        assert!(verify(KEY, &second.body, signature));
    }
}

#[tokio::test]
async fn relative_locations_resolve_against_the_current_uri() {
    let server = redirecting_server().await;
    let transport = transport(local_config());
    let result = deliver(
        &transport,
        outbound(&server.url("/relative/deeper/start"), GUARD),
    )
    .await;
    assert_eq!(result, DeliveryResult::Response { status: 200 });
    assert_eq!(server.requests()[1].path, "/relative/final");
}

#[tokio::test]
async fn absolute_locations_may_lead_to_another_allowed_receiver() {
    let target = http_server(handler(|_| async { respond(204, "") })).await;
    let location: &'static str = Box::leak(target.url("/elsewhere").into_boxed_str());
    let origin = redirect_to(location, 307).await;
    let transport = transport(local_config());
    let result = deliver(&transport, outbound(&origin.url("/"), GUARD)).await;
    assert_eq!(result, DeliveryResult::Response { status: 204 });
    assert_eq!(target.requests()[0].body.as_ref(), PAYLOAD);
}

#[tokio::test]
async fn the_default_follows_twenty_redirects_and_not_one_more() {
    let server = redirecting_server().await;
    let transport = transport(local_config());
    let result = deliver(&transport, outbound(&server.url("/chain/0/20"), GUARD)).await;
    assert_eq!(result, DeliveryResult::Response { status: 200 });
    assert_eq!(server.requests().len(), 21);

    let result = deliver(&transport, outbound(&server.url("/chain/0/21"), GUARD)).await;
    assert_eq!(
        result,
        DeliveryResult::Failed(TransportFailure::TooManyRedirects)
    );
    assert_eq!(server.requests().len(), 21 + 21);
}

#[tokio::test]
async fn the_hop_limit_is_configurable() {
    let server = redirecting_server().await;
    let transport = transport(TransportConfig {
        max_redirects: 3,
        ..local_config()
    });
    let result = deliver(&transport, outbound(&server.url("/chain/0/100"), GUARD)).await;
    assert_eq!(
        result,
        DeliveryResult::Failed(TransportFailure::TooManyRedirects)
    );
    assert_eq!(server.requests().len(), 4);
}

#[tokio::test]
async fn zero_redirects_means_the_redirect_is_the_final_status() {
    let server = redirecting_server().await;
    let transport = transport(TransportConfig {
        max_redirects: 0,
        ..local_config()
    });
    for code in [301, 302, 307] {
        let before = server.requests().len();
        let result = deliver(
            &transport,
            outbound(&server.url(&format!("/redirect/{code}")), GUARD),
        )
        .await;
        assert_eq!(result, DeliveryResult::Response { status: code });
        assert_eq!(server.requests().len(), before + 1);
    }
}

#[tokio::test]
async fn a_redirect_without_location_is_final() {
    let server = redirecting_server().await;
    let transport = transport(local_config());
    let result = deliver(&transport, outbound(&server.url("/bare/302"), GUARD)).await;
    assert_eq!(result, DeliveryResult::Response { status: 302 });
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_redirect_into_a_denied_range_is_refused_without_connecting() {
    let origin = redirect_to("http://10.1.2.3:8080/internal", 302).await;
    let transport = transport(local_config());
    let result = deliver(&transport, outbound(&origin.url("/"), GUARD)).await;
    assert_eq!(
        result,
        DeliveryResult::Refused(UriRefusal::DeniedAddress("10.1.2.3".parse().expect("ip")))
    );
}

#[tokio::test]
async fn a_redirect_to_a_loopback_address_outside_the_allow_list_is_refused() {
    // 127.0.0.2 is in 127.0.0.0/8 but not in the test's 127.0.0.1/32.
    let origin = redirect_to("http://127.0.0.2/", 307).await;
    let transport = transport(local_config());
    let result = deliver(&transport, outbound(&origin.url("/"), GUARD)).await;
    assert_eq!(
        result,
        DeliveryResult::Refused(UriRefusal::DeniedAddress("127.0.0.2".parse().expect("ip")))
    );
}

#[tokio::test]
async fn a_redirect_to_a_name_with_a_denied_address_is_refused() {
    let origin = redirect_to("http://metadata.test/latest", 302).await;
    let lookup = TableLookup::default().with("metadata.test", &["8.8.8.8", "169.254.169.254"]);
    let transport = transport_with(local_config(), lookup);
    let result = deliver(&transport, outbound(&origin.url("/"), GUARD)).await;
    assert_eq!(
        result,
        DeliveryResult::Refused(UriRefusal::DeniedAddress(
            "169.254.169.254".parse().expect("ip")
        ))
    );
}

#[tokio::test]
async fn a_redirect_to_an_unknown_host_is_refused() {
    let origin = redirect_to("http://gone.test/", 302).await;
    let transport = transport_with(local_config(), TableLookup::default());
    let result = deliver(&transport, outbound(&origin.url("/"), GUARD)).await;
    assert_eq!(result, DeliveryResult::Refused(UriRefusal::UnknownHost));
}

#[tokio::test]
async fn a_redirect_to_another_scheme_is_refused_as_malformed() {
    let origin = redirect_to("ftp://files.example/", 302).await;
    let transport = transport(local_config());
    let result = deliver(&transport, outbound(&origin.url("/"), GUARD)).await;
    assert!(
        matches!(result, DeliveryResult::Refused(UriRefusal::Malformed(_))),
        "{result:?}"
    );
}
