//! `config` as a process: every setting with its source, the effective
//! windows, and the warnings the issue asks for. Needs no database.

use crate::support::{env, run};

fn warnings(json: &serde_json::Value) -> Vec<(String, String)> {
    json["warnings"]
        .as_array()
        .expect("warnings")
        .iter()
        .map(|w| {
            (
                w["variable"].as_str().unwrap_or_default().to_owned(),
                w["message"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn defaults_are_listed_with_their_source_and_no_warnings() {
    let out = run(&env(&[]), &["config", "--json"]).await;
    assert_eq!(out.status, 0, "{out:?}");
    let json = out.json();
    assert!(warnings(&json).is_empty(), "{json:#}");
    let settings = json["settings"].as_array().expect("settings");
    assert!(settings.len() >= 30);
    assert!(settings.iter().all(|s| s["source"] == "default"));
    assert_eq!(json["effective"]["leaseSecs"], 30);
    assert_eq!(json["effective"]["retrySpacingSecs"], 60);
    assert_eq!(json["effective"]["database"], "phorge_herald");
    let note = json["notes"][0]["message"].as_str().expect("a note");
    assert!(note.contains("does not cap throughput"), "{note}");

    let text = run(&env(&[]), &["config"]).await;
    assert_eq!(text.status, 0);
    assert!(
        text.stdout
            .contains("GORGE_WEBHOOK_CLAIM_LEASE_SEC             default  30 s"),
        "{}",
        text.stdout
    );
    assert!(text.stdout.contains("warnings: none"));
}

#[tokio::test]
async fn misleading_settings_are_warned_about_by_variable() {
    let out = run(
        &env(&[
            ("GORGE_WEBHOOK_RETRY_BACKOFF_SEC", "10"),
            ("GORGE_WEBHOOK_CLAIM_LEASE_SEC", "5"),
            ("GORGE_WEBHOOK_DELIVERY_TIMEOUT", "20"),
            (
                "GORGE_WEBHOOK_OUTBOUND_ALLOW",
                "127.0.0.1/32,192.168.1.0/24,203.0.114.0/24",
            ),
            ("GORGE_WEBHOOK_POLL_INTERVAL_MS", "60000"),
        ]),
        &["config", "--json"],
    )
    .await;
    assert_eq!(out.status, 0, "{out:?}");
    let json = out.json();
    let found = warnings(&json);
    let about = |variable: &str| -> Vec<&String> {
        found
            .iter()
            .filter(|(v, _)| v == variable)
            .map(|(_, m)| m)
            .collect()
    };
    // Lease raised to the 20 s timeout + 2; backoff 10 s below it.
    assert!(about("GORGE_WEBHOOK_CLAIM_LEASE_SEC")[0].contains("using 22 s"));
    assert!(about("GORGE_WEBHOOK_RETRY_BACKOFF_SEC")[0].contains("every 22 s"));
    let allow = about("GORGE_WEBHOOK_OUTBOUND_ALLOW");
    assert_eq!(allow.len(), 2, "{allow:?}");
    assert!(allow[0].contains("127.0.0.1/32 opens") && allow[0].contains("127.0.0.0/8"));
    assert!(allow[1].contains("192.168.1.0/24 opens") && allow[1].contains("192.168.0.0/16"));
    assert!(about("GORGE_WEBHOOK_POLL_INTERVAL_MS")[0].contains("waits up to 1m 0s"));
    assert_eq!(json["effective"]["leaseSecs"], 22);
    assert_eq!(json["effective"]["retrySpacingSecs"], 22);
    let lease = json["settings"]
        .as_array()
        .expect("settings")
        .iter()
        .find(|s| s["variable"] == "GORGE_WEBHOOK_CLAIM_LEASE_SEC")
        .expect("listed")
        .clone();
    assert_eq!(lease["source"], "environment");
    // The value as set, for scripts; the unit only in what a person reads.
    assert_eq!(lease["value"], "5");
    assert_eq!(lease["shown"], "5 s");
    assert_eq!(lease["secret"], serde_json::Value::Null);
    let setting = |name: &str| {
        json["settings"]
            .as_array()
            .and_then(|all| all.iter().find(|s| s["variable"] == name))
            .cloned()
            .unwrap_or_default()
    };
    let token = setting("GORGE_SERVICE_TOKEN");
    assert_eq!(token["value"], serde_json::Value::Null, "{token}");
    assert_eq!(token["secret"]["set"], false, "{token}");
    // A default --help describes rather than states is no value to set.
    let deny = setting("GORGE_WEBHOOK_OUTBOUND_DENY");
    assert_eq!(deny["value"], serde_json::Value::Null, "{deny}");
    assert_eq!(setting("GORGE_WEBHOOK_MYSQL_PORT")["value"], "3306");

    let text = run(
        &env(&[("GORGE_WEBHOOK_RETRY_BACKOFF_SEC", "10")]),
        &["config"],
    )
    .await;
    assert!(text.stdout.contains("warnings (1):"), "{}", text.stdout);
    assert!(
        text.stdout
            .contains("GORGE_WEBHOOK_RETRY_BACKOFF_SEC           env      10 s"),
        "{}",
        text.stdout
    );
}

#[tokio::test]
async fn secrets_are_reported_as_set_but_never_shown() {
    let out = run(
        &env(&[
            ("GORGE_SERVICE_TOKEN", "token-0xdeadbeef"),
            ("GORGE_WEBHOOK_MYSQL_PASS", "password-0xfeedface"),
        ]),
        &["config"],
    )
    .await;
    assert_eq!(out.status, 0, "{out:?}");
    assert!(!out.stdout.contains("0xdeadbeef") && !out.stdout.contains("0xfeedface"));
    assert!(
        out.stdout
            .contains("GORGE_WEBHOOK_MYSQL_PASS                  env      (set, not shown)"),
        "{}",
        out.stdout
    );
    let json = run(
        &env(&[("GORGE_WEBHOOK_MYSQL_PASS", "password-0xfeedface")]),
        &["config", "--json"],
    )
    .await;
    assert!(!json.stdout.contains("0xfeedface"));
    let pass = json.json()["settings"]
        .as_array()
        .and_then(|all| {
            all.iter()
                .find(|s| s["variable"] == "GORGE_WEBHOOK_MYSQL_PASS")
                .cloned()
        })
        .unwrap_or_default();
    assert_eq!(pass["value"], serde_json::Value::Null, "{pass}");
    assert_eq!(pass["secret"]["set"], true, "{pass}");
}

/// `config` runs every variable's own parser, the daemon's own variables
/// included, and fails (exit 2, naming the variable and showing the value)
/// on whatever the daemon would refuse.
#[tokio::test]
async fn the_daemons_own_variables_are_checked_as_the_daemon_checks_them() {
    for (name, value, says) in [
        ("GORGE_LOG_LEVEL", "warning", "is not a log level"),
        ("GORGE_LOG_FORMAT", "xml", "is not text or json"),
        ("GORGE_LISTEN_ADDR", "nonsense", "is not an address"),
        (
            "GORGE_WEBHOOK_SHUTDOWN_GRACE_SEC",
            "abc",
            "is not a whole number",
        ),
        (
            "GORGE_WEBHOOK_EVENT_STREAMS",
            "0",
            "must be between 1 and 1024",
        ),
    ] {
        let out = run(&env(&[(name, value)]), &["config"]).await;
        assert_eq!(out.status, 2, "{name}={value}: {out:?}");
        let expected = format!("webhook-admin: {name}: {says}");
        assert!(
            out.stderr.starts_with(&expected)
                && out.stderr.contains(&format!("(set to {value:?})")),
            "{name}={value}: {}",
            out.stderr
        );
        assert!(out.stdout.is_empty(), "{}", out.stdout);
    }
}

/// The proxies in force, read from the environment as the daemon reads
/// them, are shown without their credentials; a bad one stops `config` as
/// it stops the daemon, naming the variable and never the password.
#[tokio::test]
async fn the_egress_proxy_is_shown_with_its_credentials_withheld() {
    let proxied = env(&[
        ("HTTPS_PROXY", "http://hooks:pw-0xc0ffee@proxy.corp:3128"),
        ("no_proxy", "internal.corp, 10.0.0.0/8"),
    ]);
    let out = run(&proxied, &["config"]).await;
    assert_eq!(out.status, 0, "{out:?}");
    assert!(!out.stdout.contains("0xc0ffee"), "{}", out.stdout);
    assert!(
        out.stdout.contains(
            "https: http://proxy.corp:3128 (with credentials) from HTTPS_PROXY; http: (none)"
        ),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("internal.corp,10.0.0.0/8 from no_proxy"),
        "{}",
        out.stdout
    );
    let json = run(&proxied, &["config", "--json"]).await;
    assert_eq!(json.status, 0, "{json:?}");
    assert!(!json.stdout.contains("0xc0ffee"), "{}", json.stdout);

    let own = run(
        &env(&[
            ("HTTPS_PROXY", "http://proxy.corp:3128"),
            ("GORGE_WEBHOOK_PROXY", "none"),
        ]),
        &["config"],
    )
    .await;
    assert!(own.stdout.contains("no proxy"), "{}", own.stdout);

    let bad = run(
        &env(&[("https_proxy", "socks5://hooks:pw-0xc0ffee@proxy.corp:1080")]),
        &["config"],
    )
    .await;
    assert_eq!(bad.status, 2, "{bad:?}");
    assert!(
        bad.stderr.starts_with(
            "webhook-admin: https_proxy: the proxy's scheme \"socks5\" is not http or https"
        ),
        "{}",
        bad.stderr
    );
    assert!(!bad.stderr.contains("0xc0ffee"), "{}", bad.stderr);
}
