//! The diagnostics API's contract, data-driven (`cargo xtask
//! contract-test`): every `contracts/api/*.json` fixture is sent with a
//! real HTTP client to the real daemon binary, started once per database
//! setup the fixtures name, and `contracts/openapi.json` is checked against
//! the fixtures. The fixture format is described in `contracts/README.md`.
//!
//! A failure lists every fixture that did not hold, by name, with the
//! expected and the actual answer.
//!
//! The event stream never ends by itself: a fixture marked
//! `request.stream` is read only until every `expect.contains` string has
//! arrived (or 10 s passed), then the harness hangs up.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde::Deserialize;
use serde_json::Value;
use webhook_core::memory_store::NewRequest;
use webhook_core::{Hook, LastResult, RequestStatus};
use webhook_test_support::mariadb::{create_database, dropping_after, unique_namespace};
use webhook_test_support::{with_db, Receiver, TestDb};

use crate::daemon::{database_env, free_port, http, Daemon, HttpResponse};
use crate::live::stream_prefix;

/// The `GORGE_SERVICE_TOKEN` every contract daemon runs with.
const TOKEN: &str = "contract-token";

/// The seeded database (see contracts/README.md).
const SEEDED_URI: &str = "https://hooks.example.invalid/contract-secret-path";
const SEEDED_KEY: &str = "contractsecretkeycontractsecret2";

/// Fixtures the brief of the API names; deleting one fails the suite.
const REQUIRED: &[&str] = &[
    "stats",
    "hooks",
    "stats-missing-token",
    "stats-wrong-token",
    "hooks-token-by-query",
    "token-header-wins-over-query",
    "unknown-path",
    "unknown-path-without-token",
    "stats-post",
    "stats-post-without-token",
    "healthz",
    "root",
    "readyz",
    "readyz-database-unreachable",
    "readyz-database-missing",
    "metrics-missing-token",
    "metrics",
    "metrics-openmetrics",
    "hooks-state",
    "stats-store-failure-is-opaque",
    "events",
    "events-missing-token",
    "attempts",
    "attempts-missing-token",
    "attempts-bad-key",
    "attempts-history-off",
];

/// Error codes `openapi.json` documents that no fixture can produce, each
/// with why and where it is tested instead.
const CODES_WITHOUT_FIXTURE: &[(&str, &str)] = &[
    (
        "ERR_TOO_MANY_STREAMS",
        "needs GORGE_WEBHOOK_EVENT_STREAMS streams held open while the fixture runs; \
         tests/it/live.rs `the_stream_cap_answers_503_and_frees_slots` checks it on the real daemon",
    ),
    (
        "ERR_HISTORY_UNAVAILABLE",
        "needs the history database to fail under a running daemon that keeps one; \
         src/api.rs `attempts_say_when_the_history_is_off_or_fails` checks the opaque 503",
    ),
];

/// The history setup's hook and request (row id 1 in its fresh table).
const HISTORY_HOOK: &str = "PHID-HWBH-contracthistory00000";
const HISTORY_REQUEST: &str = "PHID-HWBR-contracthistory00001";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Fixture {
    description: String,
    setup: Setup,
    request: RequestSpec,
    expect: Expect,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Setup {
    database: DatabaseSetup,
}

/// Which daemon a fixture runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum DatabaseSetup {
    /// A fresh database with Phorge's tables and the known rows.
    Seeded,
    /// Nothing listens on the database port.
    Unreachable,
    /// The database exists, its tables do not.
    MissingTables,
    /// The server answers, `{namespace}_herald` does not exist.
    MissingDatabase,
    /// The attempt history on, one request delivered and then deleted
    /// from Phorge's table.
    History,
}

const ALL_SETUPS: [DatabaseSetup; 5] = [
    DatabaseSetup::Seeded,
    DatabaseSetup::Unreachable,
    DatabaseSetup::MissingTables,
    DatabaseSetup::MissingDatabase,
    DatabaseSetup::History,
];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RequestSpec {
    #[serde(default = "get")]
    method: String,
    path: String,
    #[serde(default)]
    query: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    body: Option<String>,
    /// The response is an event stream: read it until `expect.contains`.
    #[serde(default)]
    stream: bool,
}

fn get() -> String {
    "GET".to_owned()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    status: u16,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    body: Option<Value>,
    #[serde(default)]
    body_text: Option<String>,
    #[serde(default)]
    json: Vec<JsonAssertion>,
    #[serde(default)]
    contains: Vec<String>,
    #[serde(default)]
    not_contains: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonAssertion {
    pointer: String,
    #[serde(default)]
    equals: Option<Value>,
    #[serde(default)]
    contains: Option<String>,
}

struct Named {
    name: String,
    fixture: Fixture,
}

fn contracts_dir() -> PathBuf {
    crate::support::workspace().join("contracts")
}

fn load_fixtures() -> Vec<Named> {
    let dir = contracts_dir().join("api");
    let mut fixtures: Vec<Named> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .map(|path| {
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
            let fixture = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{} is not a fixture: {e}", path.display()));
            let name = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            Named { name, fixture }
        })
        .collect();
    fixtures.sort_by(|a, b| a.name.cmp(&b.name));
    assert!(
        fixtures.len() >= REQUIRED.len(),
        "too few fixtures in {}",
        dir.display()
    );
    fixtures
}

fn load_openapi() -> Value {
    let path = contracts_dir().join("openapi.json");
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// Values the harness fills into `{{…}}` placeholders of expectations.
struct Context {
    database: String,
    mysql_port: u16,
}

impl Context {
    fn expand(&self, text: &str) -> String {
        text.replace("{{database}}", &self.database)
            .replace("{{mysql_port}}", &self.mysql_port.to_string())
    }
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|line| format!("      {line}\n"))
        .collect::<String>()
}

/// Every way `response` differs from `expect`, as readable lines.
fn mismatches(expect: &Expect, response: &HttpResponse, ctx: &Context) -> Vec<String> {
    let mut out = Vec::new();
    if response.status != expect.status {
        out.push(format!(
            "status: expected {}, got {}",
            expect.status, response.status
        ));
    }
    for (name, want) in &expect.headers {
        let got = response.header(&name.to_ascii_lowercase());
        if got != Some(want.as_str()) {
            out.push(format!("header {name}: expected {want:?}, got {got:?}"));
        }
    }
    let text = response.text();
    let parsed: Option<Value> = serde_json::from_slice(&response.body).ok();
    if let Some(want) = &expect.body {
        match &parsed {
            Some(got) if got == want => {}
            Some(got) => out.push(format!(
                "body differs:\n    expected\n{}    actual\n{}",
                indent(&pretty(want)),
                indent(&pretty(got))
            )),
            None => out.push(format!(
                "body is not JSON:\n    expected\n{}    actual\n{}",
                indent(&pretty(want)),
                indent(&text)
            )),
        }
    }
    if let Some(want) = &expect.body_text {
        if &text != want {
            out.push(format!("body text: expected {want:?}, got {text:?}"));
        }
    }
    for assertion in &expect.json {
        let got = parsed
            .as_ref()
            .and_then(|value| value.pointer(&assertion.pointer));
        if let Some(want) = &assertion.equals {
            if got != Some(want) {
                out.push(format!(
                    "{}: expected {want}, got {}",
                    assertion.pointer,
                    got.map_or("nothing".to_owned(), Value::to_string)
                ));
            }
        }
        if let Some(needle) = &assertion.contains {
            let needle = ctx.expand(needle);
            if !got
                .and_then(Value::as_str)
                .is_some_and(|s| s.contains(&needle))
            {
                out.push(format!(
                    "{}: expected a string containing {needle:?}, got {}",
                    assertion.pointer,
                    got.map_or("nothing".to_owned(), Value::to_string)
                ));
            }
        }
    }
    for needle in &expect.contains {
        let needle = ctx.expand(needle);
        if !text.contains(&needle) {
            out.push(format!("body does not contain {needle:?}"));
        }
    }
    for needle in &expect.not_contains {
        let needle = ctx.expand(needle);
        if text.contains(&needle) {
            out.push(format!("body contains {needle:?}, which it must not"));
        }
    }
    if !out.is_empty() {
        out.push(format!("actual body:\n{}", indent(&text)));
    }
    out
}

fn target(request: &RequestSpec) -> String {
    match &request.query {
        Some(query) => format!("{}?{query}", request.path),
        None => request.path.clone(),
    }
}

/// Runs every fixture of `setup` against `daemon`; panics listing each one
/// that failed. Returns how many ran.
async fn run_fixtures(setup: DatabaseSetup, daemon: &Daemon, ctx: &Context) -> usize {
    let fixtures: Vec<Named> = load_fixtures()
        .into_iter()
        .filter(|named| named.fixture.setup.database == setup)
        .collect();
    assert!(!fixtures.is_empty(), "no fixture uses the {setup:?} setup");
    let mut failures = Vec::new();
    for Named { name, fixture } in &fixtures {
        let request = &fixture.request;
        let headers: Vec<(String, String)> = request
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let body = request.body.as_deref().unwrap_or("").as_bytes();
        let line = format!("{} {}", request.method, target(request));
        let response = if request.stream {
            let expect: Vec<String> = fixture
                .expect
                .contains
                .iter()
                .map(|needle| ctx.expand(needle))
                .collect();
            stream_prefix(daemon.addr(), &target(request), &headers, &expect).await
        } else {
            http(
                daemon.addr(),
                &request.method,
                &target(request),
                &headers,
                body,
            )
            .await
        };
        match response {
            Ok(response) => {
                let problems = mismatches(&fixture.expect, &response, ctx);
                if !problems.is_empty() {
                    failures.push(format!(
                        "fixture `{name}` ({line}): {}\n  - {}",
                        fixture.description,
                        problems.join("\n  - ")
                    ));
                }
            }
            Err(e) => failures.push(format!("fixture `{name}` ({line}): no response: {e}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} {setup:?} fixtures failed:\n\n{}\n\n{}",
        failures.len(),
        fixtures.len(),
        failures.join("\n\n"),
        daemon.log()
    );
    fixtures.len()
}

fn contract_env(namespace: &str) -> Vec<(String, String)> {
    let mut env = database_env(namespace);
    env.extend(
        [
            ("GORGE_SERVICE_TOKEN", TOKEN),
            // The seeded queued rows wait for a retry; these windows keep
            // them out of the candidate query for the whole test, so the
            // counts stay put while the daemon runs.
            ("GORGE_WEBHOOK_RETRY_BACKOFF_SEC", "3600"),
            ("GORGE_WEBHOOK_CLAIM_LEASE_SEC", "3600"),
            ("GORGE_WEBHOOK_POLL_INTERVAL_MS", "200"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned())),
    );
    env
}

/// Three hooks (one disabled); 2 queued rows waiting for a retry, 3 sent,
/// 1 failed.
async fn seed(db: &TestDb) {
    let hooks = [
        ("PHID-HWBH-contractenabled00000", "enabled"),
        ("PHID-HWBH-contractfirehose0000", "firehose"),
        ("PHID-HWBH-contractdisabled0000", "disabled"),
    ];
    for (phid, status) in hooks {
        db.insert_hook(&Hook {
            phid: phid.to_owned(),
            name: format!("contract {status}"),
            uri: SEEDED_URI.to_owned(),
            status: status.to_owned(),
            hmac_key: SEEDED_KEY.to_owned(),
        })
        .await;
    }
    let now = db.now().await;
    let properties = r#"{"retry":"forever","triggerPHIDs":[],"transactionPHIDs":[]}"#;
    let row = |status, result, epoch: u64| NewRequest {
        status,
        last_request_result: result,
        last_request_epoch: epoch,
        date_created: Some(now - 600),
        date_modified: Some(epoch.max(now - 600)),
        ..NewRequest::queued(hooks[0].0, properties)
    };
    for _ in 0..2 {
        db.insert_request(&row(RequestStatus::Queued, LastResult::Fail, now))
            .await;
    }
    for _ in 0..3 {
        db.insert_request(&row(RequestStatus::Sent, LastResult::Okay, now - 300))
            .await;
    }
    db.insert_request(&row(RequestStatus::Failed, LastResult::Fail, now - 300))
        .await;
}

#[tokio::test]
async fn seeded_daemon_meets_the_contract() {
    with_db(|db| async move {
        seed(&db).await;
        let daemon = Daemon::start("contract seeded", &contract_env(&db.namespace)).await;
        let ctx = Context {
            database: db.database.clone(),
            mysql_port: 3306,
        };
        run_fixtures(DatabaseSetup::Seeded, &daemon, &ctx).await;
        // The daemon ran next to the seeded rows; none may have moved.
        let stats = daemon
            .get("/api/webhook/stats", &[("X-Service-Token", TOKEN)])
            .await;
        assert!(
            stats.text().contains(r#""queuedCount":2"#),
            "{}",
            stats.text()
        );
    })
    .await;
}

#[tokio::test]
async fn daemon_without_a_database_server_meets_the_contract() {
    let namespace = unique_namespace();
    let port = free_port();
    let mut env = contract_env(&namespace);
    env.push(("GORGE_WEBHOOK_MYSQL_PORT".into(), port.to_string()));
    let daemon = Daemon::start("contract unreachable", &env).await;
    let ctx = Context {
        database: format!("{namespace}_herald"),
        mysql_port: port,
    };
    run_fixtures(DatabaseSetup::Unreachable, &daemon, &ctx).await;
}

#[tokio::test]
async fn daemon_with_missing_tables_meets_the_contract() {
    let namespace = unique_namespace();
    let database = format!("{namespace}_herald");
    create_database(&database).await;
    dropping_after(&database, async {
        let daemon = Daemon::start("contract missing-tables", &contract_env(&namespace)).await;
        let ctx = Context {
            database: database.clone(),
            mysql_port: 3306,
        };
        run_fixtures(DatabaseSetup::MissingTables, &daemon, &ctx).await;
    })
    .await;
}

#[tokio::test]
async fn daemon_before_the_database_exists_meets_the_contract() {
    let namespace = unique_namespace();
    let database = format!("{namespace}_herald");
    // Dropped afterwards only in case something created it by mistake.
    dropping_after(&database, async {
        let daemon = Daemon::start("contract missing-database", &contract_env(&namespace)).await;
        let ctx = Context {
            database: database.clone(),
            mysql_port: 3306,
        };
        run_fixtures(DatabaseSetup::MissingDatabase, &daemon, &ctx).await;
    })
    .await;
}

/// Waits (up to a minute) until `check` holds, failing with `what` and the
/// daemon's log otherwise.
async fn eventually<F: std::future::Future<Output = bool>>(
    daemon: &Daemon,
    what: &str,
    mut check: impl FnMut() -> F,
) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never happened: {what}\n{}",
            daemon.log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn daemon_with_history_meets_the_contract() {
    with_db(|db| async move {
        let receiver = Receiver::start().await;
        db.insert_hook(&Hook {
            phid: HISTORY_HOOK.to_owned(),
            name: "contract history".to_owned(),
            uri: receiver.url("/contract-history"),
            status: "enabled".to_owned(),
            hmac_key: SEEDED_KEY.to_owned(),
        })
        .await;
        let properties = r#"{"retry":"forever","triggerPHIDs":[],"transactionPHIDs":[]}"#;
        let id = db
            .insert_request(&NewRequest {
                phid: HISTORY_REQUEST.to_owned(),
                ..NewRequest::queued(HISTORY_HOOK, properties)
            })
            .await;
        assert_eq!(id, 1, "the fixtures name request 1");
        let history = format!("{}_webhook_history", db.namespace);
        dropping_after(&history, async {
            let mut env = contract_env(&db.namespace);
            env.extend(
                [
                    ("GORGE_WEBHOOK_HISTORY", "on"),
                    ("GORGE_WEBHOOK_OUTBOUND_ALLOW", "127.0.0.1/32"),
                ]
                .map(|(k, v)| (k.to_owned(), v.to_owned())),
            );
            let daemon = Daemon::start("contract history", &env).await;
            let (on_db, on_daemon) = (&db, &daemon);
            eventually(&daemon, "request 1 sent", || async move {
                on_db.row(id).await.status == RequestStatus::Sent
            })
            .await;
            // The history is written apart from Phorge's row: wait until
            // it holds the attempt, then let Phorge forget the request.
            eventually(
                &daemon,
                "request 1's attempt in the history",
                || async move {
                    let answer = on_daemon
                        .get(
                            "/api/webhook/requests/1/attempts",
                            &[("X-Service-Token", TOKEN)],
                        )
                        .await;
                    answer.status == 200 && answer.text().contains(r#""status":"sent""#)
                },
            )
            .await;
            db.delete_request(id).await;
            let ctx = Context {
                database: db.database.clone(),
                mysql_port: 3306,
            };
            run_fixtures(DatabaseSetup::History, &daemon, &ctx).await;
        })
        .await;
    })
    .await;
}

/// The `openapi.json` path `path` is an instance of, with its item: the
/// same path, or a template whose `{…}` segments each stand for one
/// non-empty segment.
fn documented<'a>(
    paths: &'a serde_json::Map<String, Value>,
    path: &str,
) -> Option<(&'a String, &'a Value)> {
    if let Some(found) = paths.get_key_value(path) {
        return Some(found);
    }
    let segments: Vec<&str> = path.split('/').collect();
    paths.iter().find(|(template, _)| {
        let parts: Vec<&str> = template.split('/').collect();
        parts.len() == segments.len()
            && parts.iter().zip(&segments).all(|(part, segment)| {
                part == segment
                    || (part.starts_with('{') && part.ends_with('}') && !segment.is_empty())
            })
    })
}

/// Every `ERR_…` string anywhere in `value`.
fn error_codes(value: &Value, out: &mut BTreeSet<String>) {
    match value {
        Value::String(s) if s.starts_with("ERR_") => {
            out.insert(s.clone());
        }
        Value::Array(items) => items.iter().for_each(|v| error_codes(v, out)),
        Value::Object(map) => map.values().for_each(|v| error_codes(v, out)),
        _ => {}
    }
}

#[test]
fn contracts_fixtures_are_complete_and_match_openapi() {
    let fixtures = load_fixtures();
    let names: BTreeSet<&str> = fixtures.iter().map(|n| n.name.as_str()).collect();
    let missing: Vec<_> = REQUIRED.iter().filter(|r| !names.contains(**r)).collect();
    assert!(missing.is_empty(), "required fixtures missing: {missing:?}");
    let setups: BTreeSet<DatabaseSetup> =
        fixtures.iter().map(|n| n.fixture.setup.database).collect();
    assert_eq!(
        setups,
        ALL_SETUPS.into_iter().collect(),
        "every setup is used"
    );

    let openapi = load_openapi();
    assert!(
        openapi["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.0")),
        "contracts/openapi.json must be OpenAPI 3.0"
    );
    let paths = openapi["paths"]
        .as_object()
        .expect("openapi.json has paths");
    let mut problems = Vec::new();
    let mut documented_and_ok = BTreeSet::new();
    let mut codes = BTreeSet::new();
    for Named { name, fixture } in &fixtures {
        let expect = &fixture.expect;
        if expect.body.is_none()
            && expect.body_text.is_none()
            && expect.json.is_empty()
            && expect.contains.is_empty()
        {
            problems.push(format!("`{name}` asserts nothing about the body"));
        }
        if let Some(body) = &expect.body {
            error_codes(body, &mut codes);
        }
        for assertion in &expect.json {
            if let Some(value) = &assertion.equals {
                error_codes(value, &mut codes);
            }
            if assertion.equals.is_none() && assertion.contains.is_none() {
                problems.push(format!(
                    "`{name}`: json assertion on {} checks nothing",
                    assertion.pointer
                ));
            }
        }
        if fixture.request.stream && (fixture.request.method != "GET" || expect.contains.is_empty())
        {
            problems.push(format!(
                "`{name}`: a stream fixture is a GET with `expect.contains` (what to read up to)"
            ));
        }
        let path = fixture.request.path.as_str();
        let method = fixture.request.method.to_ascii_lowercase();
        // Without the token every path but the probes is 401, before its
        // route is looked up.
        let unauthorized = expect.status == 401;
        let Some((template, item)) = documented(paths, path) else {
            if expect.status != 404 && !unauthorized {
                problems.push(format!(
                    "`{name}`: path {path} is not in openapi.json (only 404 and 401 fixtures may use undocumented paths)"
                ));
            }
            continue;
        };
        let documents_404 = item
            .get("get")
            .is_some_and(|op| op["responses"].get("404").is_some());
        if expect.status == 404 && !documents_404 {
            problems.push(format!(
                "`{name}` expects 404 on {path}, which openapi.json documents (without a 404)"
            ));
            continue;
        }
        // HEAD is answered as GET without a body (documented in info).
        let operation = if method == "head" { "get" } else { &method };
        match item.get(operation) {
            Some(op) => {
                let status = expect.status.to_string();
                if op["responses"].get(&status).is_none() {
                    problems.push(format!(
                        "`{name}`: {method} {path} answers {status}, which openapi.json does not document"
                    ));
                }
                if expect.status == 200 {
                    documented_and_ok.insert(template.clone());
                }
            }
            None if expect.status == 405 || unauthorized => {}
            None => problems.push(format!(
                "`{name}`: {method} {path} is not an operation in openapi.json"
            )),
        }
    }
    for path in paths.keys() {
        if !documented_and_ok.contains(path) {
            problems.push(format!("openapi path {path} has no fixture answering 200"));
        }
    }
    for (code, why) in CODES_WITHOUT_FIXTURE {
        assert!(!why.is_empty());
        assert!(
            codes.insert((*code).to_owned()),
            "{code} has a fixture now: drop it from CODES_WITHOUT_FIXTURE"
        );
    }
    let documented: BTreeSet<String> = openapi["components"]["schemas"]["ErrorCode"]["enum"]
        .as_array()
        .expect("components.schemas.ErrorCode.enum")
        .iter()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    assert_eq!(
        codes, documented,
        "error codes the fixtures expect vs those openapi.json documents"
    );
    // The Go service's contract: how many hooks exist, never which.
    let hooks = &openapi["components"]["schemas"]["Hooks"];
    assert_eq!(
        (&hooks["required"], &hooks["additionalProperties"]),
        (&serde_json::json!(["total"]), &Value::Bool(false)),
        "/api/webhook/hooks is the count alone: {hooks}"
    );
    assert_eq!(
        hooks["properties"].as_object().map(|p| p.len()),
        Some(1),
        "/api/webhook/hooks is the count alone: {hooks}"
    );
    for scheme in ["serviceTokenHeader", "serviceTokenQuery"] {
        assert!(
            openapi["components"]["securitySchemes"]
                .get(scheme)
                .is_some(),
            "security scheme {scheme}"
        );
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
