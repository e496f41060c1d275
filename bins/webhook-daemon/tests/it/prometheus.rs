//! A real Prometheus scraping the real daemon: Debian's `prometheus`
//! (which `cargo xtask ci` installs when it is missing) runs the scrape
//! job of deploy/prometheus.yml — its token, its metrics path, its rule
//! file — against the daemon after a short drain (a delivery, a failed
//! attempt, an adopted task), and then: the target is up, the alert rules
//! are loaded, every metric docs/operations/monitoring.md's table names is queryable
//! by its name, and every Grafana dashboard panel's expression returns a
//! series. And `promtool check metrics` on a scrape of each form
//! `/metrics` speaks.

use std::io::Write;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use mysql_async::prelude::Queryable;

use serde_json::Value;
use webhook_core::memory_store::NewRequest;
use webhook_core::vectors::KEY;
use webhook_core::RequestStatus;
use webhook_test_support::daemon_process::free_port;
use webhook_test_support::mariadb::{dropping_after, with_phorge_side};
use webhook_test_support::raw_http::http;
use webhook_test_support::{with_db, Receiver, Reply};

use crate::daemon::Daemon;
use crate::e2e::{add_hook, DEADLINE};
use crate::support::{until, workspace};

const TOKEN: &str = "prom-s3cret";
const HOOK_OK: &str = "PHID-HWBH-prometheusokaaaaaaa";
const HOOK_FAIL: &str = "PHID-HWBH-prometheusfailaaaaa";
const NEVER: &str = r#"{"retry":"never","triggerPHIDs":["PHID-HRUL-prometheus"]}"#;

fn read(relative: &str) -> String {
    std::fs::read_to_string(workspace().join(relative))
        .unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// The metric names of docs/operations/monitoring.md's metrics table, as Prometheus
/// stores them (a histogram by its `_count`).
fn documented_metrics() -> Vec<String> {
    let docs = read("docs/operations/monitoring.md");
    let names: Vec<String> = docs
        .lines()
        .filter_map(|line| line.strip_prefix("| `gorge_webhook_"))
        .filter_map(|rest| {
            let (name, rest) = rest.split_once('`')?;
            let kind = rest.trim_start_matches(" |").split('|').next()?.trim();
            Some(match kind {
                "histogram" => format!("gorge_webhook_{name}_count"),
                _ => format!("gorge_webhook_{name}"),
            })
        })
        .collect();
    assert!(
        names.len() >= 25,
        "the metrics table was not found: {names:?}"
    );
    names
}

/// Every `expr` of the Grafana dashboard, with its variables set as for
/// one instance.
fn dashboard_expressions() -> Vec<String> {
    fn walk(value: &Value, found: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                for (key, inner) in map {
                    match (key.as_str(), inner) {
                        ("expr", Value::String(expr)) => found.push(expr.clone()),
                        _ => walk(inner, found),
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|item| walk(item, found)),
            _ => {}
        }
    }
    let dashboard: Value =
        serde_json::from_str(&read("deploy/grafana-dashboard.json")).expect("dashboard JSON");
    let mut found = Vec::new();
    walk(&dashboard, &mut found);
    assert!(!found.is_empty(), "no panel expressions");
    found
        .into_iter()
        .map(|expr| {
            expr.replace("$__rate_interval", "1m")
                .replace("\"$instance\"", "\".*\"")
        })
        .collect()
}

/// deploy/prometheus.yml's job aimed at `daemon`, scraping every second.
fn scrape_config(daemon: &str) -> String {
    let shipped = read("deploy/prometheus.yml");
    for needle in [
        "\"change-me\"",
        "\"gorge-webhook:8160\"",
        "scrape_interval: 15s",
    ] {
        assert!(
            shipped.contains(needle),
            "deploy/prometheus.yml lost {needle}"
        );
    }
    shipped
        .replace("\"change-me\"", &format!("\"{TOKEN}\""))
        .replace("\"gorge-webhook:8160\"", &format!("\"{daemon}\""))
        .replace("scrape_interval: 15s", "scrape_interval: 1s")
        .replace("scrape_timeout: 5s", "scrape_timeout: 1s")
}

/// A Prometheus server, killed when dropped.
struct Prometheus(std::process::Child);

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A Prometheus server on `port` with `config`, its data in `dir`.
fn start_prometheus(dir: &Path, config: &str, port: u16) -> Prometheus {
    std::fs::create_dir_all(dir).expect("prometheus dir");
    std::fs::write(dir.join("prometheus.yml"), config).expect("config");
    std::fs::copy(
        workspace().join("deploy/alerts.yml"),
        dir.join("alerts.yml"),
    )
    .expect("rules");
    let child = std::process::Command::new("prometheus")
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("Debian's prometheus package is installed (cargo xtask ci installs it)");
    Prometheus(child)
}

/// `GET path` from Prometheus' HTTP API: its `data`, once it answers
/// `success`.
async fn api(port: u16, path: &str) -> Option<Value> {
    let addr = ([127, 0, 0, 1], port).into();
    let response = http(addr, "GET", path, &[], b"").await.ok()?;
    let body: Value = serde_json::from_str(&response.text()).ok()?;
    (body["status"] == "success").then(|| body["data"].clone())
}

async fn query(port: u16, expr: &str) -> Option<Value> {
    let encoded: String = form_urlencoded::byte_serialize(expr.as_bytes()).collect();
    api(port, &format!("/api/v1/query?query={encoded}")).await
}

async fn series_count(port: u16, expr: &str) -> usize {
    query(port, expr)
        .await
        .and_then(|data| data["result"].as_array().map(Vec::len))
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_scrapes_every_documented_metric_and_every_dashboard_panel() {
    with_db(|db| async move {
        let db = &db;
        let history = format!("{}_webhook_history", db.namespace);
        dropping_after(
            &history,
            with_phorge_side(&db.namespace, |side| async move {
                let receiver = Receiver::start().await;
                receiver.always("/fail", Reply::status(500));
                add_hook(db, HOOK_OK, receiver.url("/ok"), KEY).await;
                add_hook(db, HOOK_FAIL, receiver.url("/fail"), KEY).await;
                let ok = db.insert_request(&NewRequest::queued(HOOK_OK, NEVER)).await;
                side.queue_webhook_task(&db.row(ok).await.phid).await;
                let failing = db
                    .insert_request(&NewRequest::queued(HOOK_FAIL, NEVER))
                    .await;
                side.queue_webhook_task(&db.row(failing).await.phid).await;

                let mut env = crate::handoff::env(&db.namespace);
                env.extend(
                    [
                        ("GORGE_SERVICE_TOKEN", TOKEN),
                        ("GORGE_WEBHOOK_ADOPT_PHP_TASKS", "1"),
                        ("GORGE_WEBHOOK_HISTORY", "1"),
                    ]
                    .map(|(k, v)| (k.to_owned(), v.to_owned())),
                );
                let daemon = Daemon::start("prometheus", &env).await;
                until(&daemon, "both rows written back", async || {
                    db.row(ok).await.status == RequestStatus::Sent
                        && db.row(failing).await.status == RequestStatus::Failed
                })
                .await;
                // The history's gauges come with its first pass that finds
                // an attempt.
                until(&daemon, "the history's figures", async || {
                    let metrics = daemon.get("/metrics", &[("X-Service-Token", TOKEN)]).await;
                    String::from_utf8_lossy(&metrics.body)
                        .contains("gorge_webhook_history_oldest_seconds ")
                })
                .await;

                let port = free_port();
                let dir = std::env::temp_dir()
                    .join(format!("gorge-prometheus-{}-{port}", std::process::id()));
                let prometheus =
                    start_prometheus(&dir, &scrape_config(&daemon.addr().to_string()), port);
                let deadline = tokio::time::Instant::now() + DEADLINE;
                // Three scrapes, so rates over them have points.
                loop {
                    let scrapes = query(port, "count_over_time(up{job=\"gorge-webhook\"}[1m])")
                        .await
                        .and_then(|d| d["result"][0]["value"][1].as_str().map(str::to_owned))
                        .and_then(|n| n.parse::<u32>().ok())
                        .unwrap_or(0);
                    if scrapes >= 3 {
                        break;
                    }
                    assert!(
                    tokio::time::Instant::now() < deadline,
                    "Prometheus did not scrape the daemon 3 times within {DEADLINE:?}: {:?}\n{}",
                    api(port, "/api/v1/targets").await,
                    daemon.log()
                );
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }

                let targets = api(port, "/api/v1/targets").await.expect("targets");
                let target = &targets["activeTargets"][0];
                assert_eq!(target["health"], "up", "{targets}");
                assert_eq!(target["labels"]["job"], "gorge-webhook", "{targets}");
                assert_eq!(target["labels"]["service"], "gorge-webhook", "{targets}");

                let rules = api(port, "/api/v1/rules").await.expect("rules");
                let loaded = rules["groups"][0]["rules"].as_array().map_or(0, Vec::len);
                assert_eq!(loaded, 8, "deploy/alerts.yml's rules are loaded: {rules}");

                let missing: Vec<String> = {
                    let mut missing = Vec::new();
                    for name in documented_metrics() {
                        if series_count(port, &name).await == 0 {
                            missing.push(name);
                        }
                    }
                    missing
                };
                assert!(
                    missing.is_empty(),
                    "documented metrics Prometheus does not have: {missing:?}"
                );

                let mut empty = Vec::new();
                for expr in dashboard_expressions() {
                    if series_count(port, &expr).await == 0 {
                        empty.push(expr);
                    }
                }
                assert!(
                    empty.is_empty(),
                    "dashboard panels without a series: {empty:?}"
                );

                drop(prometheus);
                let _ = std::fs::remove_dir_all(&dir);
            }),
        )
        .await;
    })
    .await;
}

/// The `expr` of `alert` in deploy/alerts.yml (a one-line value, or a
/// folded block on the lines below it), as Prometheus evaluates it.
fn shipped_alert_expr(alert: &str) -> String {
    let rules = read("deploy/alerts.yml");
    let mut lines = rules
        .lines()
        .skip_while(|line| line.trim() != format!("- alert: {alert}"))
        .skip(1);
    let expr = lines
        .find_map(|line| line.trim().strip_prefix("expr:"))
        .unwrap_or_else(|| panic!("{alert} has no expr in deploy/alerts.yml"))
        .trim()
        .to_owned();
    if expr != ">-" {
        return expr;
    }
    let block: Vec<&str> = lines
        .take_while(|line| !line.trim_start().starts_with("for:"))
        .map(str::trim)
        .collect();
    block.join(" ")
}

/// A stall none of the other alerts see: the daemon and the database are
/// up and no breaker is open, but a row's hook is held by a session that
/// never lets go. Once the row has waited two leases (3 s each here) with
/// nothing delivered, the shipped stall alert's expression holds in a real
/// Prometheus scraping the daemon; when the hook is let go, the row goes
/// out and the expression no longer holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_induced_stall_makes_the_shipped_stall_alert_fire() {
    let stalled_expr = shipped_alert_expr("GorgeWebhookDeliveryStalled");
    with_db(|db| async move {
        let db = &db;
        with_phorge_side(&db.namespace, |_side| async move {
            let receiver = Receiver::start().await;
            add_hook(db, HOOK_OK, receiver.url("/ok"), KEY).await;
            let mut holder = db.conn().await;
            let lock = webhook_core::hook_lock_name(&db.namespace, HOOK_OK);
            let taken: Option<i64> = holder
                .exec_first("SELECT GET_LOCK(?, 0)", (&lock,))
                .await
                .expect("GET_LOCK")
                .flatten();
            assert_eq!(taken, Some(1), "the test holds the hook");
            let row = db.insert_request(&NewRequest::queued(HOOK_OK, NEVER)).await;

            let mut env = crate::handoff::env(&db.namespace);
            env.extend(
                [
                    ("GORGE_SERVICE_TOKEN", TOKEN),
                    ("GORGE_WEBHOOK_DELIVERY_TIMEOUT", "1"),
                    ("GORGE_WEBHOOK_CLAIM_LEASE_SEC", "1"),
                ]
                .map(|(k, v)| (k.to_owned(), v.to_owned())),
            );
            let daemon = Daemon::start("stall", &env).await;
            let port = free_port();
            let dir = std::env::temp_dir().join(format!(
                "gorge-prometheus-stall-{}-{port}",
                std::process::id()
            ));
            let prometheus =
                start_prometheus(&dir, &scrape_config(&daemon.addr().to_string()), port);
            let deadline = tokio::time::Instant::now() + DEADLINE;
            while series_count(port, &stalled_expr).await == 0 {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the stall expression never held within {DEADLINE:?}: {stalled_expr}\n\
                     lag {:?}\nlease {:?}\n{}",
                    query(port, "gorge_webhook_oldest_due_seconds").await,
                    query(port, "gorge_webhook_claim_lease_seconds").await,
                    daemon.log()
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            assert_eq!(db.row(row).await.status, RequestStatus::Queued);
            assert!(receiver.requests().is_empty(), "nothing was sent");

            holder
                .exec_drop("SELECT RELEASE_LOCK(?)", (&lock,))
                .await
                .expect("RELEASE_LOCK");
            until(
                &daemon,
                "the row sent once the hook is let go",
                async || db.row(row).await.status == RequestStatus::Sent,
            )
            .await;
            let deadline = tokio::time::Instant::now() + DEADLINE;
            while series_count(port, &stalled_expr).await > 0 {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the stall expression still holds after the delivery"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            drop(prometheus);
            let _ = std::fs::remove_dir_all(&dir);
        })
        .await;
    })
    .await;
}

/// What Prometheus 2's scraper sends: OpenMetrics first, the text format
/// at q=0.5.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,\
     application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// `promtool check metrics` on `text`: its exit code and its findings,
/// one a line.
fn promtool_check(text: &str) -> (i32, Vec<String>) {
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("Debian's prometheus package (promtool) is installed (cargo xtask ci installs it)");
    child
        .stdin
        .take()
        .expect("promtool's stdin")
        .write_all(text.as_bytes())
        .expect("feeding promtool");
    let output = child.wait_with_output().expect("promtool ran");
    let findings = [output.stdout, output.stderr]
        .iter()
        .flat_map(|bytes| {
            String::from_utf8_lossy(bytes)
                .lines()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .filter(|line| !line.trim().is_empty())
        .collect();
    (output.status.code().unwrap_or(-1), findings)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promtool_accepts_every_scrape_in_the_text_format_and_openmetrics_comes_when_asked_for() {
    with_db(|db| async move {
        let db = &db;
        with_phorge_side(&db.namespace, |side| async move {
            let receiver = Receiver::start().await;
            receiver.always("/fail", Reply::status(500));
            add_hook(db, HOOK_OK, receiver.url("/ok"), KEY).await;
            add_hook(db, HOOK_FAIL, receiver.url("/fail"), KEY).await;
            let ok = db.insert_request(&NewRequest::queued(HOOK_OK, NEVER)).await;
            side.queue_webhook_task(&db.row(ok).await.phid).await;
            let failing = db
                .insert_request(&NewRequest::queued(HOOK_FAIL, NEVER))
                .await;
            let mut env = crate::handoff::env(&db.namespace);
            env.push(("GORGE_WEBHOOK_ADOPT_PHP_TASKS".into(), "1".into()));
            let daemon = Daemon::start("promtool", &env).await;
            until(&daemon, "both rows written back", async || {
                db.row(ok).await.status == RequestStatus::Sent
                    && db.row(failing).await.status == RequestStatus::Failed
            })
            .await;
            // Every family a running daemon has: the clock's skew comes
            // with its first measurement.
            until(&daemon, "a scrape with every family", async || {
                let text = daemon.get("/metrics", &[]).await.text();
                [
                    "gorge_webhook_clock_skew_seconds ",
                    "gorge_webhook_queue_rows{",
                    "gorge_webhook_php_tasks_adopted_total ",
                    "gorge_webhook_silent_mode ",
                    "gorge_webhook_delivery_duration_seconds_count 2",
                ]
                .iter()
                .all(|sample| text.contains(sample))
            })
            .await;

            for accept in [None, Some("text/plain;version=0.0.4"), Some("text/plain")] {
                let headers: Vec<(&str, &str)> =
                    accept.map(|a| ("Accept", a)).into_iter().collect();
                let scrape = daemon.get("/metrics", &headers).await;
                assert_eq!(scrape.status, 200);
                assert_eq!(
                    scrape.header("content-type"),
                    Some(TEXT_FORMAT),
                    "Accept {accept:?}"
                );
                let text = scrape.text();
                assert!(!text.contains("# EOF"), "{text}");
                assert_eq!(
                    promtool_check(&text),
                    (0, Vec::new()),
                    "promtool check metrics, Accept {accept:?}:\n{text}"
                );
            }

            let scrape = daemon
                .get("/metrics", &[("Accept", PROMETHEUS_ACCEPT)])
                .await;
            assert_eq!(scrape.header("content-type"), Some(OPENMETRICS));
            let text = scrape.text();
            assert!(text.ends_with("\n# EOF\n"), "{text}");
            // promtool reads only the text format. Read so, OpenMetrics
            // differs in one way: it names a counter's family without the
            // `_total` its samples carry, so those samples have no HELP of
            // their own name. Anything else it found would be a fault.
            let counters: Vec<&str> = text
                .lines()
                .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
                .collect();
            let (code, findings) = promtool_check(&text);
            assert_eq!(code, 3, "{findings:?}");
            let expected: Vec<String> = {
                let mut expected: Vec<String> = counters
                    .iter()
                    .map(|family| format!("{family}_total no help text"))
                    .collect();
                expected.sort_unstable();
                expected
            };
            let mut findings = findings;
            findings.sort_unstable();
            assert_eq!(findings, expected, "{text}");
        })
        .await;
    })
    .await;
}
