//! Standard Webhooks headers as a receiver meets them: signed by the
//! core's `Signer`, sent by this transport, checked by the Standard
//! Webhooks project's own Rust verifier (`standardwebhooks`) configured
//! with `whsec_<the hook's key>` and nothing else.

use std::time::{SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderValue};
use standardwebhooks::{Webhook, WebhookError};
use webhook_core::signing::{Signer, SigningSettings, StandardScope};
use webhook_core::vectors::KEY;
use webhook_core::{sign, DeliveryResult, Hook};

use crate::support::{
    deliver, handler, http_server, local_config, outbound, respond, transport, Recorded, GUARD,
    PAYLOAD,
};

const HOOK: &str = "PHID-HWBH-aaaaaaaaaaaaaaaaaaaa";
const NEW_KEY: &str = "zyxwvutsrqponmlkjihgfedcba765432";

fn hook(key: &str) -> Hook {
    Hook {
        phid: HOOK.into(),
        name: "hook".into(),
        uri: "http://unused.test/".into(),
        status: "enabled".into(),
        hmac_key: key.into(),
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}

fn verifier(key: &str) -> Webhook {
    Webhook::new(&format!("whsec_{key}")).expect("a Phorge key is a valid whsec_ secret")
}

/// Sends one request signed by `signer` for `key` at `at` and returns what
/// the receiver saw.
async fn received(signer: &Signer, key: &str, at: u64) -> Recorded {
    let server = http_server(handler(|_| async { respond(200, "ok") })).await;
    let mut request = outbound(&server.url("/hook"), GUARD);
    request.signatures = signer
        .sign(&hook(key), &request.request_phid, at, PAYLOAD)
        .signatures;
    let result = deliver(&transport(local_config()), request).await;
    assert_eq!(result, DeliveryResult::Response { status: 200 });
    server.requests().pop().expect("one request")
}

fn all_hooks() -> Signer {
    Signer::new(SigningSettings {
        standard: StandardScope::All,
        key_grace_secs: 600,
    })
}

#[tokio::test]
async fn a_standard_webhooks_library_verifies_with_whsec_and_the_hooks_key() {
    let seen = received(&all_hooks(), KEY, unix_now()).await;
    verifier(KEY)
        .verify(&seen.body, &seen.headers)
        .expect("the library accepts the request");
    assert_eq!(
        seen.headers["webhook-id"], "PHID-HWBR-abcdefghijklmnopqrst",
        "the request PHID, the same on every retry"
    );
    assert_eq!(
        seen.headers["x-phabricator-webhook-signature"],
        sign(KEY.as_bytes(), PAYLOAD).as_str(),
        "Phorge's header is unchanged"
    );
    assert!(matches!(
        verifier(NEW_KEY).verify(&seen.body, &seen.headers),
        Err(WebhookError::InvalidSignature)
    ));
}

#[tokio::test]
async fn a_replay_outside_the_librarys_tolerance_is_rejected() {
    let captured = received(&all_hooks(), KEY, unix_now() - 600).await;
    assert!(matches!(
        verifier(KEY).verify(&captured.body, &captured.headers),
        Err(WebhookError::TimestampTooOldError)
    ));
    // Re-stamping it breaks the signature: the timestamp is signed.
    let mut restamped: HeaderMap = captured.headers.clone();
    restamped.insert(
        "webhook-timestamp",
        HeaderValue::from(i64::try_from(unix_now()).expect("fits")),
    );
    assert!(matches!(
        verifier(KEY).verify(&captured.body, &restamped),
        Err(WebhookError::InvalidSignature)
    ));
}

#[tokio::test]
async fn during_a_key_grace_either_key_verifies_and_phorges_header_has_a_previous_twin() {
    let signer = all_hooks();
    let now = unix_now();
    received(&signer, KEY, now).await;
    let seen = received(&signer, NEW_KEY, now).await;
    verifier(NEW_KEY)
        .verify(&seen.body, &seen.headers)
        .expect("a receiver that switched");
    verifier(KEY)
        .verify(&seen.body, &seen.headers)
        .expect("a receiver that did not switch yet");
    assert_eq!(
        seen.headers["x-phabricator-webhook-signature"],
        sign(NEW_KEY.as_bytes(), PAYLOAD).as_str()
    );
    assert_eq!(
        seen.headers["x-phabricator-webhook-signature-previous"],
        sign(KEY.as_bytes(), PAYLOAD).as_str()
    );
}

#[tokio::test]
async fn without_the_setting_a_request_carries_phorges_header_only() {
    let seen = received(&Signer::default(), KEY, unix_now()).await;
    for name in [
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "x-phabricator-webhook-signature-previous",
    ] {
        assert!(!seen.headers.contains_key(name), "{name}");
    }
}
