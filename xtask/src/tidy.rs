//! Repository hygiene as ordinary tests (after rust-analyzer's tidy): every
//! Rust file opens with a `//!` header, no unfinished-work markers, and every
//! member manifest takes its versions and lints from the workspace.
//!
//! Shipping checks keep the Dockerfile, `deploy/` and the docs true to the
//! code: the Compose start-up order and health check, the systemd unit's
//! hardening (and `systemd-analyze verify` where it is installed), the
//! binaries the image copies, that every `GORGE_*` variable and
//! `gorge_webhook_*` metric the docs name exists, and that links between
//! docs resolve. The names, defaults and limits they hold the files to
//! come from the daemon's library (its settings registry, the names
//! `/metrics` exposes, the diagnostics listener's cap); the docs and
//! deploy files are scanned as plain text.

use std::fs;
use std::path::{Path, PathBuf};

use webhook_daemon::config::{variables, LISTEN, SHUTDOWN_GRACE};
use webhook_daemon::metrics_text::exposed_names;
use webhook_daemon::server::MAX_CONNECTIONS;

use crate::root;

fn files_under(dir: &Path, extension: &str, out: &mut Vec<PathBuf>) {
    let mut all = Vec::new();
    all_files_under(dir, &mut all);
    out.extend(
        all.into_iter()
            .filter(|path| path.extension().is_some_and(|e| e == extension)),
    );
}

fn source_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in ["crates", "bins", "xtask", "fuzz"] {
        files_under(&root().join(dir), "rs", &mut files);
    }
    assert!(files.len() > 10, "tidy found too few files: {files:?}");
    files
}

#[test]
fn every_module_has_a_header() {
    let missing: Vec<_> = source_files()
        .into_iter()
        .filter(|path| {
            let text = fs::read_to_string(path).unwrap_or_default();
            !text.trim_start().starts_with("//!")
        })
        .collect();
    assert!(
        missing.is_empty(),
        "files without a //! header: {missing:?}"
    );
}

#[test]
fn no_stray_todo_markers() {
    // Split so this file does not flag itself.
    let markers = [
        concat!("TO", "DO"),
        concat!("FIX", "ME"),
        concat!("XX", "X:"),
    ];
    let mut found = Vec::new();
    for path in source_files() {
        let text = fs::read_to_string(&path).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            if markers.iter().any(|m| line.contains(m)) {
                found.push(format!("{}:{}", path.display(), n + 1));
            }
        }
    }
    assert!(found.is_empty(), "unfinished work markers: {found:?}");
}

#[test]
fn member_manifests_use_workspace_versions_and_lints() {
    let mut manifests = Vec::new();
    for dir in ["crates", "bins", "xtask"] {
        files_under(&root().join(dir), "toml", &mut manifests);
    }
    let manifests: Vec<_> = manifests
        .into_iter()
        .filter(|p| p.ends_with("Cargo.toml"))
        .collect();
    assert!(manifests.len() >= 6, "{manifests:?}");
    for manifest in manifests {
        let text = fs::read_to_string(&manifest).unwrap_or_default();
        assert!(
            text.contains("[lints]\nworkspace = true"),
            "{} must inherit the workspace lints",
            manifest.display()
        );
        let mut section = "";
        for line in text.lines() {
            if line.starts_with('[') {
                section = line;
                continue;
            }
            let in_deps = section.contains("dependencies");
            if in_deps && line.contains("version =") {
                panic!(
                    "{}: `{line}` pins a version; declare it once in [workspace.dependencies]",
                    manifest.display()
                );
            }
        }
    }
}

// Shipping: the Dockerfile, deploy/ and the docs must agree with the code.
// These read the files as text (std only) and fail with the file and the
// line or key that drifted.

fn read(relative: &str) -> String {
    let path = root().join(relative);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// Every file under `dir`, recursively (dotfiles and `target` skipped).
pub(crate) fn all_files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if name == "target" || name.to_string_lossy().starts_with('.') {
            continue;
        }
        if path.is_dir() {
            all_files_under(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// The files whose words operators read: the README, the changelog, the
/// operations index and every page under docs/operations/, the
/// compatibility and architecture docs, and all of deploy/. (Other docs,
/// e.g. a benchmark's, may name their own harness variables.)
fn operator_texts() -> Vec<(PathBuf, String)> {
    let mut paths: Vec<PathBuf> = [
        "README.md",
        "CHANGELOG.md",
        "docs/operations.md",
        "docs/compatibility.md",
        "docs/ARCHITECTURE.md",
    ]
    .iter()
    .map(|p| root().join(p))
    .collect();
    let pages = paths.len();
    files_under(&root().join("docs/operations"), "md", &mut paths);
    assert!(
        paths.len() > pages + 3
            && paths
                .iter()
                .any(|p| p.ends_with("docs/operations/monitoring.md")),
        "the pages under docs/operations/ are missing: {paths:?}"
    );
    all_files_under(&root().join("deploy"), &mut paths);
    assert!(
        paths.iter().any(|p| p.ends_with("deploy/compose.yaml")),
        "deploy/compose.yaml is missing: {paths:?}"
    );
    paths
        .into_iter()
        .map(|p| {
            let text = fs::read_to_string(&p)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()));
            (p, text)
        })
        .collect()
}

/// Maximal runs of `[A-Za-z0-9_]` that start with `prefix`, with where
/// they are. A run ending in `_` is a prefix being talked about
/// (`GORGE_WEBHOOK_*`), not a name, and is left out.
fn words_with_prefix(text: &str, prefix: &str) -> Vec<(usize, String)> {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find(prefix) {
            let before = rest[..at].chars().next_back();
            let word: String = rest[at..].chars().take_while(|c| is_word(*c)).collect();
            rest = &rest[at + word.len().max(prefix.len())..];
            if before.is_some_and(is_word) || word.ends_with('_') {
                continue;
            }
            found.push((n + 1, word));
        }
    }
    found
}

/// Every variable the daemon reads: its registry.
fn daemon_variables() -> Vec<&'static str> {
    variables().map(|v| v.name).collect()
}

/// Variables that Phorge's container (the gorge fork's entrypoint) reads,
/// named in deploy/compose.yaml and the docs for the hand-off. They are not
/// the daemon's, and must never become the daemon's without this list
/// going away.
const PHORGE_SIDE_VARIABLES: &[&str] = &[
    "GORGE_WEBHOOK_URI",
    "GORGE_WEBHOOK_TOKEN",
    "GORGE_WEBHOOK_MODE",
];

#[test]
fn every_gorge_variable_in_docs_and_deploy_is_one_the_daemon_reads() {
    let known = daemon_variables();
    for name in PHORGE_SIDE_VARIABLES {
        assert!(
            !known.contains(name),
            "{name} is now a daemon variable: drop it from PHORGE_SIDE_VARIABLES"
        );
    }
    let mut unknown = Vec::new();
    let mut seen = 0;
    for (path, text) in operator_texts() {
        for (line, word) in words_with_prefix(&text, "GORGE_") {
            seen += 1;
            if !known.contains(&word.as_str()) && !PHORGE_SIDE_VARIABLES.contains(&word.as_str()) {
                unknown.push(format!("{}:{line}: {word}", path.display()));
            }
        }
    }
    assert!(seen > 20, "the docs name only {seen} GORGE_ variables");
    assert!(
        unknown.is_empty(),
        "variables the daemon does not read (webhook_daemon::config::variables): {unknown:#?}"
    );
}

/// The names `/metrics` exposes (`webhook_daemon::metrics_text`): each
/// family's own name, valid in prose
/// (`gorge_webhook_delivery_duration_seconds`), and each sample's.
fn exposed_metric_names() -> Vec<String> {
    let names = exposed_names();
    for expected in [
        "gorge_webhook_deliveries_total",
        "gorge_webhook_claims_total",
        "gorge_webhook_queue_rows",
        "gorge_webhook_database_up",
        "gorge_webhook_in_flight",
        "gorge_webhook_delivery_duration_seconds_bucket",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "/metrics no longer exposes {expected}: {names:?}"
        );
    }
    names
}

#[test]
fn every_metric_in_docs_and_dashboards_is_one_the_daemon_exposes() {
    let exposed = exposed_metric_names();
    let mut unknown = Vec::new();
    let mut seen = 0;
    for (path, text) in operator_texts() {
        for (line, word) in words_with_prefix(&text, "gorge_webhook_") {
            seen += 1;
            if !exposed.contains(&word) {
                unknown.push(format!("{}:{line}: {word}", path.display()));
            }
        }
    }
    assert!(seen > 20, "the docs and dashboard name only {seen} metrics");
    assert!(
        unknown.is_empty(),
        "metrics /metrics does not expose (webhook_daemon::metrics_text::exposed_names): {unknown:#?}"
    );
    let dashboard = read("deploy/grafana-dashboard.json");
    for family in [
        "gorge_webhook_deliveries_total",
        "gorge_webhook_claims_total",
        "gorge_webhook_queue_rows",
        "gorge_webhook_delivery_duration_seconds_bucket",
        "gorge_webhook_database_up",
        "gorge_webhook_breaker_open_hooks",
    ] {
        assert!(
            dashboard.contains(family),
            "the dashboard does not chart {family}"
        );
    }
}

/// An indentation-structured YAML file's non-blank, non-comment lines.
fn yaml_lines(text: &str) -> Vec<(usize, &str)> {
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .map(|l| (l.len() - l.trim_start().len(), l.trim()))
        .collect()
}

/// The lines nested under the key path, e.g. `["services", "phorge"]`.
fn yaml_block<'a>(text: &'a str, path: &[&str]) -> Option<Vec<(usize, &'a str)>> {
    let mut scope = yaml_lines(text);
    for key in path {
        let indent = scope.iter().map(|(i, _)| *i).min()?;
        let at = scope.iter().position(|(i, l)| {
            *i == indent && (*l == format!("{key}:") || l.starts_with(&format!("{key}: ")))
        })?;
        scope = scope[at + 1..]
            .iter()
            .take_while(|(i, _)| *i > indent)
            .copied()
            .collect();
    }
    Some(scope)
}

/// The keys directly under the key path.
fn yaml_keys<'a>(text: &'a str, path: &[&str]) -> Vec<&'a str> {
    let block = yaml_block(text, path).unwrap_or_default();
    let Some(indent) = block.iter().map(|(i, _)| *i).min() else {
        return Vec::new();
    };
    block
        .iter()
        .filter(|(i, l)| *i == indent && !l.starts_with('-'))
        .filter_map(|(_, l)| l.split(':').next())
        .collect()
}

/// The scalar value of `key: value` directly in the block, unquoted.
fn yaml_value<'a>(block: &[(usize, &'a str)], key: &str) -> Option<&'a str> {
    let indent = block.iter().map(|(i, _)| *i).min()?;
    block.iter().find_map(|(i, l)| {
        let value = l.strip_prefix(key)?.strip_prefix(':')?.trim();
        (*i == indent).then(|| value.trim_matches('"'))
    })
}

/// `45s`, `1m30s`, `2min`, `90` (seconds) as seconds.
fn seconds(text: &str) -> Option<u64> {
    let mut total = 0;
    let mut rest = text.trim();
    if let Ok(plain) = rest.parse() {
        return Some(plain);
    }
    while !rest.is_empty() {
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        rest = &rest[digits.len()..];
        let unit: String = rest.chars().take_while(char::is_ascii_alphabetic).collect();
        rest = &rest[unit.len()..];
        let n: u64 = digits.parse().ok()?;
        total += n * match unit.as_str() {
            "h" => 3600,
            "m" | "min" => 60,
            "s" | "" => 1,
            _ => return None,
        };
    }
    Some(total)
}

const DAEMON_SERVICE: &str = "gorge-webhook";

fn shutdown_grace_default() -> u64 {
    SHUTDOWN_GRACE.default_value().as_secs()
}

#[test]
fn compose_starts_phorge_once_the_daemon_is_started_not_healthy() {
    let compose = read("deploy/compose.yaml");
    let services = yaml_keys(&compose, &["services"]);
    assert!(
        services.contains(&DAEMON_SERVICE) && services.contains(&"phorge"),
        "deploy/compose.yaml services: {services:?}"
    );
    let dependency = yaml_block(
        &compose,
        &["services", "phorge", "depends_on", DAEMON_SERVICE],
    )
    .expect("phorge depends_on gorge-webhook");
    assert_eq!(
        yaml_value(&dependency, "condition"),
        Some("service_started"),
        "phorge must wait for the daemon to be started, not healthy (protocol §10)"
    );
    for service in &services {
        if let Some(block) = yaml_block(
            &compose,
            &["services", service, "depends_on", DAEMON_SERVICE],
        ) {
            assert_ne!(
                yaml_value(&block, "condition"),
                Some("service_healthy"),
                "{service} waits for the daemon's health: a deadlock on first start"
            );
        }
    }
    let health = yaml_block(&compose, &["services", DAEMON_SERVICE, "healthcheck"])
        .expect("the daemon service has a healthcheck");
    let test = yaml_value(&health, "test").expect("healthcheck has a test");
    assert!(
        test.contains("/readyz"),
        "the daemon's healthcheck must probe /readyz: {test}"
    );
    let daemon = yaml_block(&compose, &["services", DAEMON_SERVICE]).expect("daemon service");
    let stop = yaml_value(&daemon, "stop_grace_period")
        .and_then(seconds)
        .expect("the daemon service sets stop_grace_period");
    assert!(
        stop > shutdown_grace_default(),
        "stop_grace_period {stop}s must exceed GORGE_WEBHOOK_SHUTDOWN_GRACE_SEC"
    );
    let phorge_env = yaml_block(&compose, &["services", "phorge", "environment"])
        .expect("phorge has an environment");
    let uri = yaml_value(&phorge_env, "GORGE_WEBHOOK_URI").expect("phorge gets GORGE_WEBHOOK_URI");
    let daemon_env = yaml_block(&compose, &["services", DAEMON_SERVICE, "environment"])
        .expect("the daemon has an environment");
    let listen = yaml_value(&daemon_env, LISTEN.name).unwrap_or(LISTEN.default);
    let port = listen.rsplit(':').next().unwrap_or_default();
    assert_eq!(
        uri,
        format!("http://{DAEMON_SERVICE}:{port}"),
        "Phorge's hand-off URI must name the daemon service and its listen port"
    );
}

/// `[Section]` → `Key` → values, as systemd reads a unit (later values of
/// a repeated key add to it; comments dropped).
fn unit_entries(text: &str) -> Vec<(String, String, String)> {
    let mut section = String::new();
    let mut entries = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_owned();
        } else if let Some((key, value)) = line.split_once('=') {
            entries.push((
                section.clone(),
                key.trim().to_owned(),
                value.trim().to_owned(),
            ));
        } else {
            panic!("deploy/gorge-webhook.service: not a key=value line: {line}");
        }
    }
    entries
}

#[test]
fn systemd_unit_is_hardened() {
    let unit = read("deploy/gorge-webhook.service");
    let entries = unit_entries(&unit);
    let values = |key: &str| -> Vec<String> {
        entries
            .iter()
            .filter(|(s, k, _)| s == "Service" && k == key)
            .map(|(_, _, v)| v.clone())
            .collect()
    };
    let required = [
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("PrivateDevices", "yes"),
        ("RestrictAddressFamilies", "AF_INET AF_INET6 AF_UNIX"),
        ("CapabilityBoundingSet", ""),
        ("SystemCallFilter", "@system-service"),
        ("MemoryDenyWriteExecute", "yes"),
        ("LockPersonality", "yes"),
        ("RestrictNamespaces", "yes"),
        ("ProtectKernelTunables", "yes"),
        ("ProtectKernelModules", "yes"),
        ("ProtectKernelLogs", "yes"),
        ("EnvironmentFile", "/etc/gorge-webhook/env"),
        ("Restart", "on-failure"),
        ("KillSignal", "SIGTERM"),
    ];
    let mut missing = Vec::new();
    for (key, value) in required {
        if !values(key).iter().any(|v| v == value) {
            missing.push(format!("{key}={value} (found {:?})", values(key)));
        }
    }
    assert!(
        missing.is_empty(),
        "deploy/gorge-webhook.service lacks {missing:#?}"
    );
    let dedicated_user = values("DynamicUser").iter().any(|v| v == "yes")
        || values("User").iter().any(|v| !v.is_empty() && v != "root");
    assert!(
        dedicated_user,
        "the unit must run as DynamicUser=yes or a dedicated User="
    );
    let stop = values("TimeoutStopSec")
        .last()
        .and_then(|v| seconds(v))
        .expect("TimeoutStopSec is set in seconds");
    assert!(
        stop > shutdown_grace_default(),
        "TimeoutStopSec={stop}s must exceed GORGE_WEBHOOK_SHUTDOWN_GRACE_SEC, or SIGKILL cuts deliveries off"
    );
    let exec = values("ExecStart");
    assert_eq!(exec, ["/usr/local/bin/webhook-daemon"], "ExecStart");
}

#[test]
fn deploy_raises_the_descriptor_limit_well_above_the_diagnostics_cap() {
    // A full diagnostics listener must leave most descriptors to
    // deliveries and the database pool: at least 16 times its cap.
    let floor = MAX_CONNECTIONS as u64 * 16;
    let unit = read("deploy/gorge-webhook.service");
    let limits: Vec<u64> = unit_entries(&unit)
        .into_iter()
        .filter(|(s, k, _)| s == "Service" && k == "LimitNOFILE")
        .map(|(_, _, v)| v.parse().expect("LimitNOFILE is one number (soft = hard)"))
        .collect();
    assert!(
        matches!(limits.as_slice(), [n] if *n >= floor),
        "deploy/gorge-webhook.service: LimitNOFILE {limits:?}, want one value >= {floor}"
    );
    let compose = read("deploy/compose.yaml");
    let nofile = yaml_block(&compose, &["services", DAEMON_SERVICE, "ulimits", "nofile"])
        .expect("the daemon service sets ulimits: nofile");
    for key in ["soft", "hard"] {
        let value: u64 = yaml_value(&nofile, key)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("ulimits.nofile.{key} is a number"));
        assert!(
            value >= floor,
            "compose ulimits.nofile.{key} = {value} < {floor}"
        );
    }
}

#[test]
fn systemd_unit_passes_systemd_analyze_verify() {
    // The unit is verified as written, except that ExecStart points at a
    // file that exists here (verify fails on a missing executable): this
    // test binary.
    let program = "systemd-analyze";
    match std::process::Command::new(program)
        .arg("--version")
        .output()
    {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("{program} is not installed: only the key checks ran");
            return;
        }
        Err(e) => panic!("cannot run {program}: {e}"),
        Ok(_) => {}
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let unit = read("deploy/gorge-webhook.service");
    assert!(unit.contains("\nExecStart=/usr/local/bin/webhook-daemon\n"));
    let unit = unit.replace(
        "\nExecStart=/usr/local/bin/webhook-daemon\n",
        &format!("\nExecStart={}\n", exe.display()),
    );
    let dir = std::env::temp_dir().join(format!("xtask-unit-{}", std::process::id()));
    fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("gorge-webhook.service");
    fs::write(&path, unit).expect("write the unit");
    let output = std::process::Command::new(program)
        .arg("verify")
        .arg(&path)
        .output()
        .expect("run systemd-analyze verify");
    let _ = fs::remove_dir_all(&dir);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    // Unknown keys and unparseable values are only warnings (exit 0), so
    // any line about the unit fails the test too.
    let complaints: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("gorge-webhook.service"))
        .collect();
    assert!(
        output.status.success() && complaints.is_empty(),
        "systemd-analyze verify: {}\n{text}",
        output.status
    );
}

#[test]
fn dockerfile_ships_both_binaries_as_cargo_builds_them() {
    let dockerfile = read("Dockerfile");
    let lines: Vec<&str> = dockerfile
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .collect();
    for binary in ["webhook-daemon", "webhook-admin"] {
        // The binary target is named after the package: by default, or
        // in its own `[[bin]]` (the daemon's, for its required feature).
        let manifest = read(&format!("bins/{binary}/Cargo.toml"));
        let bin_name = |section: &str| {
            section
                .lines()
                .find_map(|l| l.trim().strip_prefix("name = "))
                .map(|name| name.trim_matches('"').to_owned())
        };
        assert!(
            manifest.contains(&format!("\nname = \"{binary}\"\n"))
                && manifest
                    .split("[[bin]]")
                    .skip(1)
                    .all(|section| bin_name(section).as_deref() == Some(binary)),
            "bins/{binary}/Cargo.toml no longer builds a binary called {binary}"
        );
        assert!(
            dockerfile.contains(&format!("-p {binary}"))
                && dockerfile.contains(&format!("target/release/{binary} ")),
            "the Dockerfile does not build and copy {binary}"
        );
    }
    let instruction = |name: &str| -> Vec<&str> {
        lines
            .iter()
            .filter_map(|l| l.strip_prefix(name).map(str::trim))
            .collect()
    };
    assert_eq!(instruction("ENTRYPOINT "), ["[\"webhook-daemon\"]"]);
    let port = LISTEN.default_value().port().to_string();
    assert_eq!(instruction("EXPOSE "), [port.as_str()]);
    let user = instruction("USER ");
    assert!(
        user.len() == 1 && !user[0].starts_with("root") && !user[0].starts_with("0"),
        "the runtime stage must run as a non-root USER: {user:?}"
    );
    assert!(
        dockerfile.contains("HEALTHCHECK") && dockerfile.contains("/healthz"),
        "the image needs a HEALTHCHECK on /healthz"
    );
    for copied in instruction("COPY ") {
        let Some(source) = copied.split_whitespace().rev().nth(1) else {
            continue;
        };
        if !copied.contains("--from=") && source != "." {
            assert!(
                root().join(source).exists(),
                "the Dockerfile copies a missing {source}"
            );
        }
    }
    let ignore = read(".dockerignore");
    for needed in ["deploy", "LICENSE", "xtask", "crates", "bins", "Cargo.lock"] {
        assert!(
            !ignore.lines().any(|l| l.trim() == needed),
            ".dockerignore leaves out {needed}, which the image build needs"
        );
    }
}

#[test]
fn shipping_helpers_read_what_they_claim() {
    assert_eq!(seconds("45s"), Some(45));
    assert_eq!(seconds("1m30s"), Some(90));
    assert_eq!(seconds("2min"), Some(120));
    assert_eq!(seconds("30"), Some(30));
    assert_eq!(seconds("soon"), None);
    let words = words_with_prefix(
        "`GORGE_A_B` and GORGE_WEBHOOK_* and XGORGE_C\nGORGE_D.",
        "GORGE_",
    );
    assert_eq!(
        words,
        [(1, "GORGE_A_B".to_owned()), (2, "GORGE_D".to_owned())]
    );
    let yaml = "a:\n  b:\n    # note\n    c: \"1\"\n  d:\n    e: x\n";
    assert_eq!(yaml_keys(yaml, &["a"]), ["b", "d"]);
    let b = yaml_block(yaml, &["a", "b"]).expect("a.b");
    assert_eq!(yaml_value(&b, "c"), Some("1"));
    assert!(yaml_block(yaml, &["a", "e"]).is_none());
}

/// GitHub's anchor for a heading: lower case, punctuation other than `-`
/// and `_` dropped, spaces as `-`.
fn heading_anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors_of(markdown: &str) -> Vec<String> {
    let mut in_code = false;
    let mut anchors = Vec::new();
    for line in markdown.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
        } else if !in_code && line.starts_with('#') {
            anchors.push(heading_anchor(line.trim_start_matches('#')));
        }
    }
    anchors
}

/// `(target, line)` of every inline link `](target)` outside code blocks.
fn markdown_links(markdown: &str) -> Vec<(String, usize)> {
    let mut in_code = false;
    let mut links = Vec::new();
    for (n, line) in markdown.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else {
                break;
            };
            links.push((after[..end].to_owned(), n + 1));
            rest = &after[end..];
        }
    }
    links
}

#[test]
fn links_between_docs_resolve() {
    let mut pages = vec![root().join("README.md"), root().join("CHANGELOG.md")];
    files_under(&root().join("docs"), "md", &mut pages);
    files_under(&root().join("contracts"), "md", &mut pages);
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages {
        let text = fs::read_to_string(&page).unwrap_or_default();
        let dir = page.parent().map(Path::to_path_buf).unwrap_or_default();
        for (link, line) in markdown_links(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, anchor) = link.split_once('#').unwrap_or((&link, ""));
            let target = if path.is_empty() {
                page.clone()
            } else {
                dir.join(path)
            };
            let problem = if !target.exists() {
                Some("no such file")
            } else if !anchor.is_empty()
                && target.extension().is_some_and(|e| e == "md")
                && !anchors_of(&fs::read_to_string(&target).unwrap_or_default())
                    .iter()
                    .any(|a| a == anchor)
            {
                Some("no such heading")
            } else {
                None
            };
            if let Some(problem) = problem {
                broken.push(format!("{}:{line}: {link} ({problem})", page.display()));
            }
        }
    }
    assert!(checked > 20, "only {checked} links checked");
    assert!(broken.is_empty(), "broken links: {broken:#?}");
}

#[test]
fn heading_anchors_follow_github() {
    assert_eq!(
        heading_anchor(" The key_status index"),
        "the-key_status-index"
    );
    assert_eq!(
        heading_anchor(" Health checks: /healthz and /readyz"),
        "health-checks-healthz-and-readyz"
    );
    assert_eq!(
        markdown_links("see [a](x.md#b) and [c](#d)\n```\n[e](f)\n```\n"),
        [("x.md#b".to_owned(), 1), ("#d".to_owned(), 1)]
    );
}
