//! Target `api`: the daemon's diagnostics handler (`Api::handle`, the very
//! source file the daemon compiles) over a `MemoryStore` with hooks, rows,
//! a service token or none, a readiness verdict and injected store
//! failures, answering a few requests with arbitrary methods, paths,
//! queries and headers.
//!
//! Nothing panics; the status is one protocol §8 documents and the one a
//! separate model of the routes, the token rule (header first, then the
//! first `token` query pair) and the store's failures predicts; a JSON body
//! is exactly `{data}`, `{error:{code,message}}` or a probe's `{status…}`;
//! no body ever carries a hook's URI or key, or the store's error text.

use std::sync::Arc;

use arbitrary::{Result, Unstructured};
use async_trait::async_trait;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use serde_json::{json, Value};
use webhook_core::memory_store::StoreOp;
use webhook_core::memory_store::{MemoryStore, NewRequest};
use webhook_core::{Hook, LastResult, ManualClock, Metrics, RequestStatus};
use webhook_daemon::api::{Api, Readiness, ServiceToken};

use crate::gen;

/// The routes, as protocol §8 lists them (plus `/metrics`).
const ROUTES: &[&str] = &[
    "/",
    "/healthz",
    "/readyz",
    "/api/webhook/stats",
    "/api/webhook/hooks",
    "/api/webhook/hooks/state",
    "/metrics",
];

/// `Accept` values for `/metrics`, besides arbitrary ones.
const ACCEPTS: &[&str] = &[
    "text/plain;version=0.0.4",
    "application/openmetrics-text;version=1.0.0",
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "*/*",
    "application/openmetrics-text;q=0, */*",
];

/// Hook URIs and keys: none may ever appear in a response.
const SECRETS: &[(&str, &str)] = &[
    (
        "https://hook-one.secret.example/receive?k=1",
        "kqmzt7x2wr5vbn3hjd6ycf4ulo2pgse7",
    ),
    ("http://127.0.0.1:9/two", "abcdefghijklmnopqrstuvwxyz234567"),
    (
        "https://hook-three.secret.example/",
        "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz2",
    ),
];

/// What the store's fault says; the caller must never see it.
const FAULT_TEXT: &str = "injected fault";

/// Readiness reasons the probe may show (they name no host or secret).
const REASONS: &[&str] = &[
    "database unavailable",
    "Unknown database 'phorge_herald'",
    "",
];

struct Fixed(std::result::Result<(), String>);

#[async_trait]
impl Readiness for Fixed {
    async fn check(&self) -> std::result::Result<(), String> {
        self.0.clone()
    }
}

#[derive(Debug)]
struct Request {
    method: Method,
    path: String,
    query: Option<String>,
    headers: HeaderMap,
}

#[derive(Debug)]
struct Setup {
    token: String,
    ready: std::result::Result<(), String>,
    hooks: Vec<&'static str>,
    rows: Vec<RequestStatus>,
    stats_failures: u32,
    hook_count_failures: u32,
    requests: Vec<Request>,
}

fn setup(u: &mut Unstructured<'_>) -> Result<Setup> {
    let token = match u.int_in_range(0..=3)? {
        0 => String::new(),
        1 => "s3cret".to_owned(),
        2 => "a b&c=d/%\u{e9}".to_owned(),
        _ => gen::string(u)?,
    };
    let ready = if u.ratio(1, 3)? {
        Err(u.choose(REASONS)?.to_string())
    } else {
        Ok(())
    };
    let mut hooks = Vec::new();
    for _ in 0..u.int_in_range(0..=SECRETS.len())? {
        hooks.push(*u.choose(&["enabled", "firehose", "disabled", "Disabled", ""])?);
    }
    let mut rows = Vec::new();
    for _ in 0..u.int_in_range(0..=6)? {
        rows.push(*u.choose(&[
            RequestStatus::Queued,
            RequestStatus::Sent,
            RequestStatus::Failed,
        ])?);
    }
    let stats_failures = u.int_in_range(0..=2)?;
    let hook_count_failures = u.int_in_range(0..=2)?;
    let mut requests = Vec::new();
    for _ in 0..u.int_in_range(1..=4)? {
        requests.push(request(u, &token)?);
    }
    Ok(Setup {
        token,
        ready,
        hooks,
        rows,
        stats_failures,
        hook_count_failures,
        requests,
    })
}

fn request(u: &mut Unstructured<'_>, token: &str) -> Result<Request> {
    let method = match u.int_in_range(0..=9)? {
        0..=3 => Method::GET,
        4 => Method::HEAD,
        5 => Method::POST,
        6 => u
            .choose(&[Method::PUT, Method::DELETE, Method::PATCH])?
            .clone(),
        7 => u
            .choose(&[Method::OPTIONS, Method::TRACE, Method::CONNECT])?
            .clone(),
        _ => {
            let name: Vec<u8> = u.arbitrary()?;
            Method::from_bytes(&name).unwrap_or(Method::GET)
        }
    };
    let route = *u.choose(ROUTES)?;
    let path = match u.int_in_range(0..=7)? {
        0..=3 => route.to_owned(),
        4 => format!("{route}/"),
        5 => route.to_uppercase(),
        6 => format!("{route}{}", gen::string(u)?),
        _ => gen::string(u)?,
    };
    let query = match u.int_in_range(0..=5)? {
        0 | 1 => None,
        2 => Some(format!("token={}", percent_encode(token))),
        3 => Some(format!("a=1&token={token}")),
        4 => Some(format!(
            "token={}&token={}",
            gen::string(u)?,
            percent_encode(token)
        )),
        _ => Some(gen::string(u)?),
    };
    let mut headers = HeaderMap::new();
    for _ in 0..u.int_in_range(0..=3)? {
        let name = match u.int_in_range(0..=4)? {
            0 | 1 => "x-service-token".to_owned(),
            2 => "X-Service-Token".to_owned(),
            3 => "accept".to_owned(),
            _ => gen::string(u)?,
        };
        let value: Vec<u8> = match u.int_in_range(0..=4)? {
            0 | 1 => token.as_bytes().to_vec(),
            2 => format!("{token}{}", gen::string(u)?).into_bytes(),
            3 => u.choose(ACCEPTS)?.as_bytes().to_vec(),
            _ => u.arbitrary()?,
        };
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(&value),
        ) {
            headers.append(name, value);
        }
    }
    Ok(Request {
        method,
        path,
        query,
        headers,
    })
}

fn percent_encode(s: &str) -> String {
    s.bytes().map(|b| format!("%{b:02X}")).collect()
}

/// Runs the check on the fuzzer's bytes; panics when a property fails.
pub fn run(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(setup) = self::setup(&mut u) else {
        return;
    };
    // The API bounds its database calls with tokio's timer, so it runs on
    // a (per-thread, reused) current-thread runtime with time enabled.
    thread_local! {
        static RUNTIME: Option<tokio::runtime::Runtime> = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .ok();
    }
    RUNTIME.with(|runtime| match runtime {
        Some(runtime) => runtime.block_on(check(setup)),
        None => panic!("a tokio runtime for the API check could not be built"),
    });
}

async fn check(setup: Setup) {
    let store = MemoryStore::new(Arc::new(ManualClock::new(1_700_000_000)));
    for (i, status) in setup.hooks.iter().enumerate() {
        let (uri, key) = SECRETS[i];
        store.put_hook(Hook {
            phid: format!("PHID-HWBH-hook{i}"),
            name: format!("hook {i}"),
            uri: uri.to_owned(),
            status: (*status).to_owned(),
            hmac_key: key.to_owned(),
        });
    }
    for (i, status) in setup.rows.iter().enumerate() {
        store.insert_request(NewRequest {
            status: *status,
            last_request_result: match status {
                RequestStatus::Sent => LastResult::Okay,
                _ => LastResult::None,
            },
            ..NewRequest::queued(&format!("PHID-HWBH-hook{}", i % 3), "{}")
        });
    }
    store.fail_next(StoreOp::Stats, setup.stats_failures);
    store.fail_next(StoreOp::HookCount, setup.hook_count_failures);
    let api = Api::new(
        Arc::new(store),
        Arc::new(Fixed(setup.ready.clone())),
        Arc::new(Metrics::default()),
        ServiceToken::new(&setup.token),
    );

    let mut model = Model {
        setup: &setup,
        stats_failures: setup.stats_failures,
        hook_count_failures: setup.hook_count_failures,
    };
    for request in &setup.requests {
        let reply = api
            .handle(
                &request.method,
                &request.path,
                request.query.as_deref(),
                &request.headers,
            )
            .await;
        let expected = model.answer(request);
        let context = format!("{request:?} with token {:?}", setup.token);
        assert!(
            [200, 401, 404, 405, 500, 503].contains(&reply.status.as_u16()),
            "undocumented status {} for {context}",
            reply.status
        );
        assert_eq!(reply.status, expected.status, "{context}");
        assert_eq!(
            reply.allow.is_some(),
            reply.status == StatusCode::METHOD_NOT_ALLOWED,
            "{context}"
        );
        let body = String::from_utf8(reply.body.to_vec()).expect("bodies are UTF-8");
        for (uri, key) in SECRETS {
            assert!(
                !body.contains(uri) && !body.contains(key),
                "secret in {body}"
            );
        }
        assert!(!body.contains("secret.example") && !body.contains(FAULT_TEXT));
        match expected.body {
            Some(value) => {
                assert_eq!(reply.content_type, "application/json", "{context}");
                assert!(body.ends_with('\n'));
                let actual: Value = serde_json::from_str(&body)
                    .unwrap_or_else(|e| panic!("body is not JSON ({e}): {body}"));
                assert_envelope(&actual);
                assert_eq!(actual, value, "{context}");
            }
            // Either text format, whatever `Accept` says; OpenMetrics
            // alone ends with `# EOF`.
            None => match reply.content_type {
                "text/plain; version=0.0.4; charset=utf-8" => {
                    assert!(!body.contains("# EOF"), "{body}");
                }
                "application/openmetrics-text; version=1.0.0; charset=utf-8" => {
                    assert!(body.ends_with("\n# EOF\n"), "{body}");
                }
                other => panic!("{other} for {context}"),
            },
        }
    }
}

/// Exactly `{data}`, `{error:{code,message}}`, `{status:"ok"}` or
/// `{status:"unavailable",reason}`.
fn assert_envelope(body: &Value) {
    let object = body.as_object().expect("a JSON object");
    let keys: Vec<&str> = object.keys().map(String::as_str).collect();
    match keys.as_slice() {
        ["data"] => assert!(object["data"].is_object()),
        ["error"] => {
            let error = object["error"].as_object().expect("error is an object");
            let mut fields: Vec<&str> = error.keys().map(String::as_str).collect();
            fields.sort_unstable();
            assert_eq!(fields, ["code", "message"]);
            assert!(error["code"]
                .as_str()
                .is_some_and(|c| c.starts_with("ERR_")));
            assert!(error["message"].is_string());
        }
        ["status"] => assert_eq!(object["status"], "ok"),
        ["status", "reason"] => {
            assert_eq!(object["status"], "unavailable");
            assert!(object["reason"].is_string());
        }
        other => panic!("not a documented envelope: {other:?} in {body}"),
    }
}

/// What the API should answer, from protocol §8 written out separately.
struct Model<'a> {
    setup: &'a Setup,
    stats_failures: u32,
    hook_count_failures: u32,
}

struct Expected {
    status: StatusCode,
    /// `None` for the metrics text.
    body: Option<Value>,
}

fn error(status: StatusCode, code: &str, message: &str) -> Expected {
    Expected {
        status,
        body: Some(json!({"error": {"code": code, "message": message}})),
    }
}

fn internal() -> Expected {
    error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "ERR_INTERNAL",
        "internal server error",
    )
}

impl Model<'_> {
    fn answer(&mut self, request: &Request) -> Expected {
        let path = request.path.as_str();
        // The token comes before the route: without it only the probes
        // answer, whatever the path or method.
        let probe = matches!(path, "/" | "/healthz" | "/readyz");
        if !probe && !self.admitted(request) {
            return error(
                StatusCode::UNAUTHORIZED,
                "ERR_UNAUTHORIZED",
                "missing or invalid service token",
            );
        }
        if !ROUTES.contains(&path) {
            return error(StatusCode::NOT_FOUND, "ERR_NOT_FOUND", "not found");
        }
        if request.method != Method::GET && request.method != Method::HEAD {
            return error(
                StatusCode::METHOD_NOT_ALLOWED,
                "ERR_METHOD_NOT_ALLOWED",
                "method not allowed; this API is read-only",
            );
        }
        let ok = |body: Value| Expected {
            status: StatusCode::OK,
            body: Some(body),
        };
        match path {
            "/readyz" => match &self.setup.ready {
                Ok(()) => ok(json!({"status": "ok"})),
                Err(reason) => Expected {
                    status: StatusCode::SERVICE_UNAVAILABLE,
                    body: Some(json!({"status": "unavailable", "reason": reason})),
                },
            },
            "/api/webhook/stats" => {
                if take(&mut self.stats_failures) {
                    return internal();
                }
                let count = |s: RequestStatus| self.setup.rows.iter().filter(|r| **r == s).count();
                ok(json!({"data": {
                    "queuedCount": count(RequestStatus::Queued),
                    "sentCount": count(RequestStatus::Sent),
                    "failedCount": count(RequestStatus::Failed),
                    "activeWebhooks": self.setup.hooks.iter().filter(|s| **s != "disabled").count(),
                }}))
            }
            "/api/webhook/hooks" => {
                if take(&mut self.hook_count_failures) {
                    return internal();
                }
                ok(json!({"data": {"total": self.setup.hooks.len()}}))
            }
            // From the daemon's memory; none here.
            "/api/webhook/hooks/state" => ok(json!({"data": {"paused": [], "keyGrace": []}})),
            "/metrics" => {
                // The queue gauge is left out when the store fails; the
                // scrape itself still answers.
                take(&mut self.stats_failures);
                Expected {
                    status: StatusCode::OK,
                    body: None,
                }
            }
            _ => ok(json!({"status": "ok"})),
        }
    }

    /// protocol §8: `X-Service-Token` when present (its first value), else the
    /// first `token` pair of the query, URL-decoded; an empty configured
    /// token admits everyone.
    fn admitted(&self, request: &Request) -> bool {
        let token = &self.setup.token;
        if token.is_empty() {
            return true;
        }
        let presented: Option<Vec<u8>> = match request.headers.get("x-service-token") {
            Some(value) => Some(value.as_bytes().to_vec()),
            None => request.query.as_deref().and_then(|query| {
                query
                    .split('&')
                    .filter(|pair| !pair.is_empty())
                    .map(|pair| match pair.split_once('=') {
                        Some((key, value)) => (url_decode(key), url_decode(value)),
                        None => (url_decode(pair), String::new()),
                    })
                    .find(|(key, _)| key == "token")
                    .map(|(_, value)| value.into_bytes())
            }),
        };
        presented.as_deref() == Some(token.as_bytes())
    }
}

fn take(failures: &mut u32) -> bool {
    let failed = *failures > 0;
    *failures = failures.saturating_sub(1);
    failed
}

/// `application/x-www-form-urlencoded` decoding: `+` is a space, `%XX` a
/// byte (a malformed escape stays as written), the bytes read as UTF-8
/// with invalid sequences replaced.
fn url_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let digit = |at: usize| bytes.get(at).copied().and_then(hex);
                match (digit(i + 1), digit(i + 2)) {
                    (Some(high), Some(low)) => {
                        out.push(high * 16 + low);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).and_then(|d| u8::try_from(d).ok())
}
