//! Standard Webhooks signatures and key rotation through the real daemon:
//! a request it delivered is verified by the Standard Webhooks project's
//! own verifier given `whsec_<the hook's key>` and nothing else, and after
//! `hmacKey` changes in Phorge's table a receiver holding either key
//! verifies, until the grace ends; and the other headers a receiver sees
//! are Phorge's cURL's, its `User-Agent` too when set so.

use http::{HeaderMap, HeaderName, HeaderValue};
use standardwebhooks::Webhook;
use webhook_core::memory_store::NewRequest;
use webhook_core::sign;
use webhook_core::vectors::KEY;
use webhook_test_support::receiver::Recorded;
use webhook_test_support::{with_db, Receiver};

use crate::daemon::Daemon;
use crate::e2e::{add_hook, delivery_env, wait_log, with_setting, DEADLINE};

const HOOK: &str = "PHID-HWBH-standardaaaaaaaaaaa";
const OTHER_HOOK: &str = "PHID-HWBH-standardbbbbbbbbbbb";
const NEW_KEY: &str = "zyxwvutsrqponmlkjihgfedcba765432";
const PROPERTIES: &str = r#"{"retry":"never","triggerPHIDs":["PHID-HRUL-aaaaaaaaaaaaaaaaaaaa"]}"#;

fn headers_of(request: &Recorded) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, value) in &request.headers {
        headers.append(
            HeaderName::from_bytes(name.as_bytes()).expect("a received header name"),
            HeaderValue::from_str(value).expect("a received header value"),
        );
    }
    headers
}

fn verifies(key: &str, request: &Recorded) -> bool {
    Webhook::new(&format!("whsec_{key}"))
        .expect("a Phorge key is a whsec_ secret")
        .verify(&request.body, &headers_of(request))
        .is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivered_request_verifies_with_whsec_and_the_key_and_only_listed_hooks_get_it() {
    with_db(|db| async move {
        let receiver = Receiver::start().await;
        add_hook(&db, HOOK, receiver.url("/listed"), KEY).await;
        add_hook(&db, OTHER_HOOK, receiver.url("/other"), KEY).await;
        let id = db
            .insert_request(&NewRequest::queued(HOOK, PROPERTIES))
            .await;
        db.insert_request(&NewRequest::queued(OTHER_HOOK, PROPERTIES))
            .await;
        let env = with_setting(
            delivery_env(&db.namespace),
            "GORGE_WEBHOOK_STANDARD_SIGNATURES",
            HOOK,
        );
        let daemon = Daemon::start("standard", &env).await;

        let got = receiver.wait_for(2, DEADLINE).await;
        assert_eq!(got.len(), 2, "{}", daemon.log());
        let listed = got.iter().find(|r| r.path == "/listed").expect("listed");
        assert!(verifies(KEY, listed), "{:?}", listed.headers);
        assert!(!verifies(NEW_KEY, listed));
        assert_eq!(
            listed.header("webhook-id"),
            Some(db.row(id).await.phid.as_str())
        );
        assert_eq!(
            listed.header("x-phabricator-webhook-signature"),
            Some(sign(KEY.as_bytes(), &listed.body).as_str())
        );
        let other = got.iter().find(|r| r.path == "/other").expect("other");
        assert_eq!(other.header("webhook-signature"), None, "not in the list");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_phorge_regenerates_a_key_both_keys_verify_during_the_grace() {
    with_db(|db| async move {
        let receiver = Receiver::start().await;
        add_hook(&db, HOOK, receiver.url("/rotated"), KEY).await;
        db.insert_request(&NewRequest::queued(HOOK, PROPERTIES))
            .await;
        let env = with_setting(
            delivery_env(&db.namespace),
            "GORGE_WEBHOOK_STANDARD_SIGNATURES",
            "all",
        );
        let daemon = Daemon::start("rotation", &env).await;
        let first = receiver.wait_for(1, DEADLINE).await;
        assert_eq!(first.len(), 1, "{}", daemon.log());
        assert_eq!(
            first[0].header("x-phabricator-webhook-signature-previous"),
            None
        );

        // What "Regenerate HMAC Key" writes.
        db.exec(&format!(
            "UPDATE herald_webhook SET hmacKey = '{NEW_KEY}', dateModified = UNIX_TIMESTAMP() \
             WHERE phid = '{HOOK}'"
        ))
        .await;
        // The daemon reads a hook again within seconds (its hook cache):
        // send rows until one is signed under the new key.
        let until = tokio::time::Instant::now() + DEADLINE;
        let second = loop {
            db.insert_request(&NewRequest::queued(HOOK, PROPERTIES))
                .await;
            let seen = receiver.requests().len() + 1;
            let got = receiver.wait_for(seen, DEADLINE).await;
            let last = got.last().cloned().expect("a request");
            if last.header("x-phabricator-webhook-signature")
                == Some(sign(NEW_KEY.as_bytes(), &last.body).as_str())
            {
                break last;
            }
            assert!(
                tokio::time::Instant::now() < until,
                "never signed under the new key\n{}",
                daemon.log()
            );
        };
        wait_log(&daemon, "hook_key_changed").await;
        let hooks = daemon.get("/api/webhook/hooks/state", &[]).await;
        let hooks: serde_json::Value = serde_json::from_str(&hooks.text()).expect("JSON");
        let grace = &hooks["data"]["keyGrace"];
        assert_eq!(grace[0]["hookPHID"], HOOK, "{hooks}");
        let until = grace[0]["until"].as_u64().unwrap_or(0);
        let now = db.now().await;
        assert!(
            (now + 86_300..=now + 86_400).contains(&until),
            "a day's grace: {hooks}"
        );
        assert!(
            verifies(NEW_KEY, &second),
            "a receiver that switched: {:?}",
            second.headers
        );
        assert!(
            verifies(KEY, &second),
            "a receiver that did not yet: {:?}",
            second.headers
        );
        assert_eq!(
            second.header("x-phabricator-webhook-signature-previous"),
            Some(sign(KEY.as_bytes(), &second.body).as_str())
        );
    })
    .await;
}

/// What a receiver sees besides the signature: Phorge's cURL asks for
/// `Accept: */*` and `Accept-Encoding: gzip`, and so does the daemon; its
/// `User-Agent` is its own unless `GORGE_WEBHOOK_USER_AGENT` gives
/// Phorge's, which it then sends as given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_sees_phorges_accept_headers_and_the_user_agent_set() {
    with_db(|db| async move {
        let receiver = Receiver::start().await;
        add_hook(&db, HOOK, receiver.url("/own"), KEY).await;
        add_hook(&db, OTHER_HOOK, receiver.url("/phorge"), KEY).await;
        db.insert_request(&NewRequest::queued(HOOK, PROPERTIES))
            .await;
        let mut daemon = Daemon::start("headers", &delivery_env(&db.namespace)).await;
        let got = receiver.wait_for(1, DEADLINE).await;
        let own = &got[0];
        assert_eq!(own.header("accept"), Some("*/*"), "{:?}", own.headers);
        assert_eq!(
            own.header("accept-encoding"),
            Some("gzip"),
            "{:?}",
            own.headers
        );
        let agent = own.header("user-agent").unwrap_or_default();
        assert!(agent.starts_with("gorge-webhook/"), "{agent}");
        // A clean stop: the row's result is written, so it is not sent again.
        daemon.terminate();
        daemon.wait_exit(DEADLINE).await;

        db.insert_request(&NewRequest::queued(OTHER_HOOK, PROPERTIES))
            .await;
        let env = with_setting(
            delivery_env(&db.namespace),
            "GORGE_WEBHOOK_USER_AGENT",
            "Arcanist/1.0 cURL/7.88.1",
        );
        let daemon = Daemon::start("headers-phorge", &env).await;
        let got = receiver.wait_for(2, DEADLINE).await;
        let phorge = got.iter().find(|r| r.path == "/phorge").expect("sent");
        assert_eq!(
            phorge.header("user-agent"),
            Some("Arcanist/1.0 cURL/7.88.1"),
            "{}",
            daemon.log()
        );
        assert_eq!(phorge.header("accept-encoding"), Some("gzip"));
    })
    .await;
}
