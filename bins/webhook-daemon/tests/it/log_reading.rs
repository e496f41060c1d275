//! The log as a person reads it on a bad night: the real daemon run
//! through the failures an operator meets — a receiver answering 500, one
//! refusing connections, a hook on the outbound deny list, Phorge's
//! configuration unreadable (a missing `local.json`, no `{ns}_config`
//! database), a wrong database password, a server whose connections are
//! all taken (error 1040, through a proxy that answers as such a server
//! does) — and every line it wrote is
//! scanned for values in Rust's debug form (`Response { status: 500 }`,
//! `Failed(Connect)`, `Some(…)`, `5s`), causes said twice (`ERROR 1146 …:
//! ERROR 1146 …`) and placeholders where a real name belongs
//! (`{namespace}`); the lines that matter must say what happened in
//! words, with the server's reason where it gave one.

use webhook_core::memory_store::NewRequest;
use webhook_core::vectors::KEY;
use webhook_core::RequestStatus;
use webhook_test_support::{with_db, FaultProxy, Receiver, Reply};

use crate::daemon::{free_port, Daemon};
use crate::e2e::{add_hook, delivery_env, with_setting};
use crate::support::{until, wait_readyz};

/// Every line of the project's own crates; other crates' (hyper's pool)
/// are theirs to word.
const OURS_AT_DEBUG: &str = "webhook_core=debug,webhook_daemon=debug,webhook_store_mysql=debug,\
                             webhook_transport_hyper=debug,info";

const NEVER: &str = r#"{"retry":"never","triggerPHIDs":["PHID-HRUL-logreading"]}"#;
const HOOK_500: &str = "PHID-HWBH-logreading500aaaaaa";
const HOOK_CLOSED: &str = "PHID-HWBH-logreadingclosedaaa";
const HOOK_DENIED: &str = "PHID-HWBH-logreadingdeniedaaa";

/// Why `line` is not written for a person, if it is not.
fn unreadable(line: &str) -> Option<String> {
    if let Some(shape) = debug_shape(line) {
        return Some(format!("a value in Rust's debug form: {shape:?}"));
    }
    if let Some(cause) = said_twice(line) {
        return Some(format!("a cause said twice: {cause:?}"));
    }
    if let Some(placeholder) = placeholder(line) {
        return Some(format!("a placeholder for a real name: {placeholder:?}"));
    }
    None
}

/// `Name { `, `Name(Word`, `Some(`, `None`, or a bound as `Duration`'s
/// debug form writes it (`5s`, `250ms`).
fn debug_shape(line: &str) -> Option<String> {
    let words: Vec<&str> = line.split([' ', '=', ',', '[']).collect();
    for pair in words.windows(2) {
        if is_type_name(pair[0]) && pair[1] == "{" {
            return Some(format!("{} {{", pair[0]));
        }
    }
    for word in &words {
        let word = word.trim_matches(|c: char| c == '"' || c == '\'');
        if word == "None" || word.starts_with("Some(") {
            return Some(word.to_owned());
        }
        if let Some((name, rest)) = word.split_once('(') {
            if is_type_name(name) && rest.starts_with(|c: char| c.is_ascii_alphabetic()) {
                return Some(word.to_owned());
            }
        }
        let digits = word.trim_end_matches(|c: char| c.is_ascii_alphabetic() || c == 'µ');
        let unit = &word[digits.len()..];
        if !digits.is_empty()
            && digits.chars().all(|c| c.is_ascii_digit() || c == '.')
            && ["s", "ms", "µs", "ns"].contains(&unit)
        {
            return Some(word.to_owned());
        }
    }
    None
}

/// `Response`, `Failed`: a capitalised word of letters alone, not an
/// acronym (`ERROR`, `HTTP`).
fn is_type_name(word: &str) -> bool {
    let mut chars = word.chars();
    chars.next().is_some_and(|c| c.is_ascii_uppercase())
        && word.chars().all(|c| c.is_ascii_alphabetic())
        && word.chars().any(|c| c.is_ascii_lowercase())
}

/// A server error number, or a `: `-separated cause of some length, that
/// occurs twice in the line.
fn said_twice(line: &str) -> Option<String> {
    let numbers: Vec<&str> = line
        .match_indices("ERROR ")
        .filter_map(|(at, _)| line.get(at..at + 10))
        .collect();
    for (i, number) in numbers.iter().enumerate() {
        if numbers[i + 1..].contains(number) {
            return Some((*number).to_owned());
        }
    }
    let causes: Vec<&str> = line
        .split(": ")
        .map(|cause| cause.trim_matches(|c: char| c == '"' || c == '`' || c == '\'' || c == ' '))
        .filter(|cause| cause.len() >= 16)
        .collect();
    for (i, cause) in causes.iter().enumerate() {
        if causes[i + 1..].contains(cause) {
            return Some((*cause).to_owned());
        }
    }
    None
}

/// `{namespace}`, `{ns}`: a braced lower-case name.
fn placeholder(line: &str) -> Option<String> {
    line.match_indices('{').find_map(|(at, _)| {
        let rest = &line[at + 1..];
        let end = rest.find('}')?;
        let name = &rest[..end];
        (!name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
            .then(|| format!("{{{name}}}"))
    })
}

/// Every line of `log` a person would stumble on, with why.
fn stumbles(log: &str) -> Vec<String> {
    log.lines()
        .filter_map(|line| unreadable(line).map(|why| format!("{why}\n    in: {line}")))
        .collect()
}

#[test]
fn the_scan_finds_what_the_daemon_once_wrote() {
    for line in [
        "INFO webhook_core: event=\"attempt_failed\" result=Response { status: 500 }",
        "INFO webhook_core: event=\"attempt_failed\" result=Failed(Connect) will_retry=false",
        "WARN webhook_core::hold: cannot read Phorge's database configuration \
         ({namespace}_config.config_entry)",
        "WARN x: error=database query failed: ERROR 1146 (42S02): Table 'a.b' doesn't exist: \
         ERROR 1146 (42S02): Table 'a.b' doesn't exist",
        "WARN x: error=no database connection within 5s",
        "WARN x: local_config=Some(\"/srv/local.json\")",
    ] {
        assert!(unreadable(line).is_some(), "not caught: {line}");
    }
    for line in [
        "INFO webhook_core: event=\"attempt_failed\" result=500 will_retry=false",
        "INFO webhook_core: result=connection refused or unreachable (7)",
        "WARN x: error=database unavailable: cannot connect to the database server: \
         ERROR 1040 (08004): Too many connections",
        "WARN x: error=no database connection within 2.5 s",
        "INFO webhook_daemon: status=429 retry_after_secs=30",
    ] {
        assert_eq!(unreadable(line), None, "{line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_through_failures_logs_for_a_person() {
    with_db(|db| async move {
        let db = &db;
        let receiver = Receiver::start().await;
        receiver.always("/fail", Reply::status(500));
        add_hook(db, HOOK_500, receiver.url("/fail"), KEY).await;
        let closed = format!("http://127.0.0.1:{}/closed", free_port());
        add_hook(db, HOOK_CLOSED, closed, KEY).await;
        add_hook(db, HOOK_DENIED, "http://10.0.0.1/denied".into(), KEY).await;
        let mut rows = Vec::new();
        for hook in [HOOK_500, HOOK_CLOSED, HOOK_DENIED] {
            rows.push(db.insert_request(&NewRequest::queued(hook, NEVER)).await);
        }
        let missing = std::env::temp_dir().join(format!("{}-local.json", db.namespace));
        let env = with_setting(
            with_setting(
                delivery_env(&db.namespace),
                "GORGE_PHORGE_LOCAL_CONFIG",
                &missing.display().to_string(),
            ),
            "GORGE_LOG_LEVEL",
            OURS_AT_DEBUG,
        );
        let daemon = Daemon::start("log-reading", &env).await;
        until(&daemon, "every row failed and said so", async || {
            for id in &rows {
                if db.row(*id).await.status != RequestStatus::Failed {
                    return false;
                }
            }
            let log = daemon.log();
            [
                "attempt_failed",
                "hook_uri_refused",
                "silent_mode_invisible",
            ]
            .iter()
            .all(|event| log.contains(event))
        })
        .await;
        let log = daemon.log();
        let found = stumbles(&log);
        assert!(found.is_empty(), "{}\n\n{log}", found.join("\n"));

        let attempts: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("attempt_failed"))
            .collect();
        let said = |text: &str| attempts.iter().any(|l| l.contains(text));
        assert!(said("result=500"), "{attempts:#?}");
        assert!(
            said("result=connection refused or unreachable (7)"),
            "{attempts:#?}"
        );
        let config_table = format!("{}_config.config_entry", db.namespace);
        assert!(
            log.lines()
                .any(|l| l.contains("silent_mode_invisible") && l.contains(&config_table)),
            "the real table is named: {log}"
        );
        assert!(
            log.lines().any(|l| l.contains("silent_mode_invisible")
                && l.contains(&missing.display().to_string())),
            "the real file is named: {log}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_named_where_the_operator_looks() {
    with_db(|db| async move {
        let password = "not-the-password-1";
        let env = with_setting(
            delivery_env(&db.namespace),
            "GORGE_WEBHOOK_MYSQL_PASS",
            password,
        );
        let daemon = Daemon::start("log-reading-password", &env).await;
        let body = wait_readyz(&daemon, 503).await;
        let reason = body.to_string();
        assert!(
            reason.contains("Access denied for user 'root'"),
            "/readyz: {reason}"
        );
        // Delivery waits for the server's clock, so the lines that say why
        // it waits are the ones to name the refusal.
        until(&daemon, "the waiting lines name the refusal", async || {
            let log = daemon.log();
            ["database_not_ready", "server_clock_unmeasured"]
                .iter()
                .all(|event| {
                    log.lines()
                        .any(|l| l.contains(event) && l.contains("Access denied for user 'root'"))
                })
        })
        .await;
        let log = daemon.log();
        let found = stumbles(&log);
        assert!(found.is_empty(), "{}\n\n{log}", found.join("\n"));
        assert!(!log.contains(password), "{log}");
        assert!(
            !reason.contains("127.0.0.1") && !reason.contains("localhost"),
            "{reason}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_server_is_named_by_its_error_not_as_unavailable() {
    with_db(|db| async move {
        let proxy = FaultProxy::to_mariadb().await;
        let env = with_setting(
            with_setting(
                delivery_env(&db.namespace),
                "GORGE_WEBHOOK_MYSQL_PORT",
                &proxy.port().to_string(),
            ),
            "GORGE_LOG_LEVEL",
            OURS_AT_DEBUG,
        );
        let daemon = Daemon::start("log-reading-full", &env).await;
        wait_readyz(&daemon, 200).await;
        proxy.full();
        until(&daemon, "a poll failure naming error 1040", async || {
            daemon.log().lines().any(|l| {
                l.contains("poll_failed") && l.contains("ERROR 1040") && l.contains("Too many")
            })
        })
        .await;
        let body = wait_readyz(&daemon, 503).await.to_string();
        assert!(body.contains("ERROR 1040"), "/readyz: {body}");
        let log = daemon.log();
        let found = stumbles(&log);
        assert!(found.is_empty(), "{}\n\n{log}", found.join("\n"));
    })
    .await;
}
