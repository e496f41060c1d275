//! Secrets end to end: with every log target at `trace`, deliveries (a
//! success, a failure and its retry, a redirect, a hook with credentials in
//! its URI, a malformed URI) must leave no HMAC key and no service token in
//! the daemon's output, and no key, token or URI part in `/metrics` or any
//! API body. As docs/reliability.md ("Secrets") documents, a hook URI's
//! user-info, path and query — and a redirect target's — never appear in
//! the log at any level: the transport keeps user-info out of the URI it
//! hands the connection pool and sends it only as Basic authentication
//! (whose header value is never logged either), `redirect_followed` names
//! only scheme, host and port, and `hook_uri_refused` never quotes an
//! unparseable URI.

use webhook_core::memory_store::NewRequest;
use webhook_test_support::{with_db, Receiver, Reply};

use crate::daemon::Daemon;
use crate::e2e::{add_hook, delivery_env, with_setting, DEADLINE};
use crate::raw::{Misbehaviour, RawReceiver};
use crate::support::{assert_alive_without_panic, wait_table};

/// Keys no other text contains, 32 characters of `a-z2-7` as Phorge's.
const KEYS: [&str; 4] = [
    "qx7kzv2hmd4lw6nrbt3jcy5pfeg2sa7u",
    "m4tq2zx7bnd3kvy6wfr5hcj2pes7gla3",
    "zq3vbn7kw2dx5trm6yhc4jfpl2eus7ag",
    "t6wn2kqz5xvb3mhr7dcj4lfyp2gsu7ae",
];
const TOKEN: &str = "svc-token-8hz3wq5t";

/// Parts of hook URIs, by where the log may show them.
const NEVER_LOGGED: [&str; 2] = ["hookpath-6tqv", "uriquery-3mzk"];
const DEBUG_ONLY: [&str; 5] = [
    "uriuser-r8wd",
    "uripass-9wqn",
    "rpass-2kqz",
    "final-5vbn",
    "rquery-5vbn",
];
const MALFORMED_ONLY: &str = "badquery-4pzk";
/// The `Authorization: Basic` values of the two hooks with credentials.
const BASIC: [&str; 2] = [
    "dXJpdXNlci1yOHdkOnVyaXBhc3MtOXdxbg==",
    "cnVzZXItMmtxejpycGFzcy0ya3F6",
];

fn level(line: &str) -> Option<&str> {
    line.split_whitespace()
        .nth(1)
        .filter(|l| ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"].contains(l))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_key_token_or_uri_secret_leaks_into_logs_metrics_or_api_bodies() {
    with_db(|db| async move {
        let receiver = Receiver::start().await;
        receiver.script("/hookpath-6tqv/in", [Reply::status(500)]);
        // A relative redirect: the next hop keeps the hook's user-info.
        let redirector = RawReceiver::start(
            "127.0.0.1",
            Misbehaviour::Answers(vec![
                "HTTP/1.1 307 Temporary Redirect\r\nlocation: /final-5vbn?token=rquery-5vbn\r\n\
                 content-length: 0\r\n\r\n"
                    .to_owned(),
                "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n".to_owned(),
            ]),
        )
        .await;
        let hooks = [
            receiver.url("/hookpath-6tqv/in?token=uriquery-3mzk"),
            format!("http://uriuser-r8wd:uripass-9wqn@{}/creds", receiver.addr()),
            format!(
                "http://ruser-2kqz:rpass-2kqz@127.0.0.1:{}/start",
                redirector.port()
            ),
            "http://bad host.example/x?token=badquery-4pzk".to_owned(),
        ];
        for (n, (uri, key)) in hooks.iter().zip(KEYS).enumerate() {
            let hook = format!("PHID-HWBH-secrets{n:013}");
            add_hook(&db, &hook, uri.clone(), key).await;
            db.insert_request(&NewRequest {
                object_phid: format!("PHID-TASK-secrets{n:013}"),
                ..NewRequest::queued(&hook, r#"{"retry":"forever"}"#)
            })
            .await;
        }
        let mut env = with_setting(delivery_env(&db.namespace), "GORGE_LOG_LEVEL", "trace");
        env = with_setting(env, "GORGE_SERVICE_TOKEN", TOKEN);
        let mut daemon = Daemon::start("secrets", &env).await;
        wait_table(&db, &[&daemon], "settled", DEADLINE, |rows| {
            rows.len() == 4 && rows.iter().all(|r| r.status != "queued")
        })
        .await;
        assert_eq!(
            receiver.requests().len(),
            3,
            "a failure, its retry, and the credentialed hook"
        );
        assert_eq!(redirector.connections(), 2, "the redirect and its target");
        let credentialed = receiver
            .requests()
            .into_iter()
            .find(|seen| seen.path == "/creds")
            .expect("the credentialed hook's request");
        assert_eq!(
            credentialed.header("authorization"),
            Some(format!("Basic {}", BASIC[0]).as_str()),
            "the credentials went out, so the log checks below are not vacuous"
        );

        let auth = [("X-Service-Token", TOKEN)];
        let mut bodies = Vec::new();
        for (target, headers, status) in [
            ("/metrics", &auth[..], 200),
            ("/api/webhook/stats", &auth[..], 200),
            ("/api/webhook/hooks", &auth[..], 200),
            ("/api/webhook/hooks/state", &auth[..], 200),
            ("/api/webhook/hooks?token=wrong-token", &[][..], 401),
            ("/readyz", &[][..], 200),
            ("/healthz", &[][..], 200),
            ("/", &[][..], 200),
            ("/api/webhook/route-echo-7hzk", &auth[..], 404),
        ] {
            let response = daemon.get(target, headers).await;
            assert_eq!(response.status, status, "{target}: {}", response.text());
            let headers: Vec<String> = response
                .headers
                .iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect();
            bodies.push((
                target,
                format!("{}\n{}", headers.join("\n"), response.text()),
            ));
        }
        assert_alive_without_panic(&mut daemon);
        daemon.stop_cleanly(DEADLINE).await;
        let log = daemon.log();
        assert!(log.contains(" TRACE "), "trace logging is on: {log}");

        for secret in KEYS.into_iter().chain([TOKEN]).chain(BASIC) {
            assert!(
                !log.contains(secret),
                "{secret} in the daemon's output:\n{log}"
            );
        }
        let uri_parts = NEVER_LOGGED
            .iter()
            .chain(&DEBUG_ONLY)
            .chain(&[MALFORMED_ONLY, "route-echo-7hzk"]);
        for secret in KEYS.iter().chain(&[TOKEN]).chain(&BASIC).chain(uri_parts) {
            for (target, body) in &bodies {
                assert!(!body.contains(secret), "{secret} in {target}: {body}");
            }
        }

        let mut refused = 0;
        let mut redirects = 0;
        for line in log.lines() {
            for part in NEVER_LOGGED
                .iter()
                .chain(&DEBUG_ONLY)
                .chain(&[MALFORMED_ONLY])
            {
                assert!(
                    !line.contains(part),
                    "a hook URI's user-info, path or query logged at {:?}: {line}",
                    level(line)
                );
            }
            refused += usize::from(line.contains("event=\"hook_uri_refused\""));
            redirects += usize::from(line.contains("event=\"redirect_followed\""));
        }
        // The lines that used to quote URIs exist (so the rule above is not
        // vacuous): they now name only what is safe.
        assert!(
            refused > 0,
            "the malformed URI's refusal is not logged:\n{log}"
        );
        assert!(redirects > 0, "no redirect_followed line:\n{log}");
        eprintln!(
            "reliability: secrets log_lines={} refused={refused} redirects={redirects}",
            log.lines().count()
        );
    })
    .await;
}
