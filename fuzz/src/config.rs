//! Target `config`: an arbitrary map of variables (the daemon's own names,
//! near misses and strangers, with boundary numbers, lists, addresses and
//! arbitrary text) goes through every parser the daemon runs at startup:
//! `Settings::from_lookup` + `Windows::try_new`, `MysqlConfig::from_lookup`,
//! `TransportConfig::from_env_with` (the transport's one check, whose
//! result `HyperTransport::new` is built from) and the daemon's own
//! `DaemonConfig::from_lookup`.
//!
//! Nothing panics; every error names a `GORGE_` variable that was actually
//! set (the defaults are valid) and its message says so; the daemon fails
//! exactly when one of its parts does; accepted settings keep the spec's
//! guarantees (no zero timeouts or limits, the lease covers a delivery).
//!
//! The two CA-file variables are paths the parsers read: they only ever get
//! one of a few harmless paths (missing, a directory, small files under the
//! temp directory), never whatever the fuzzer spells (`/dev/zero` would
//! never end).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::OnceLock;

use arbitrary::{Result, Unstructured};
use webhook_core::setting::{table, SettingInfo};
use webhook_core::signing::SigningSettings;
use webhook_core::windows::{Settings, Windows};
use webhook_core::windows::{
    BATCH_SIZE, BREAKER_THRESHOLD, BREAKER_WINDOW, CLAIM_LEASE, DELIVERY_TIMEOUT, MAX_CONCURRENT,
    POLL_INTERVAL, RETRY_BACKOFF,
};
use webhook_daemon::config::{own_variables, variables, DaemonConfig};
use webhook_store_mysql::config::PASS;
use webhook_store_mysql::history::HistoryConfig;
use webhook_store_mysql::MysqlConfig;
use webhook_transport_hyper::{HyperTransport, TransportConfig};

use crate::gen;

/// Variables the daemon does not read, some one typo away from those it
/// does.
const STRANGERS: &[&str] = &[
    "GORGE_WEBHOOK_UNKNOWN",
    "GORGE_WEBHOOK_MAX_CONCURRENCY",
    "gorge_webhook_max_concurrent",
    "GORGE_WEBHOOK_MYSQL_HOST ",
    "PATH",
];

/// Values at and around every documented bound, and typical text.
const VALUES: &[&str] = &[
    "",
    " ",
    "0",
    "1",
    "-1",
    "2",
    " 8 ",
    "9",
    "10",
    "28",
    "600",
    "601",
    "1024",
    "1025",
    "3600",
    "3601",
    "10000",
    "10001",
    "86400",
    "86401",
    "1000000",
    "1000001",
    "3600000",
    "3600001",
    "65535",
    "65536",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "1.5",
    "1e3",
    "+5",
    "0x10",
    "true",
    "false",
    "yes",
    "off",
    "maybe",
    "text",
    "json",
    "xml",
    "debug",
    "webhook_core=trace,info",
    "loud==",
    "[{a=/x/}]",
    ":8160",
    ":0",
    ":99999",
    "127.0.0.1:8160",
    "[::1]:8160",
    "localhost:8160",
    "127.0.0.1/32",
    "::1/128, 10.0.0.0/8",
    "10.0.0.1",
    "fc00::/7,",
    "not-a-cidr",
    "X-Phabricator-Webhook-Signature",
    "X-Phorge-Webhook-Signature, X-Phabricator-Webhook-Signature",
    "X-Phorge-Webhook-Signature,x-phorge-webhook-signature",
    "Content-Type",
    "X-Request-Id",
    "bad header",
    "phorge",
    "a.b",
    "ns`",
    "n\u{e9}",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
];

/// The variables whose value is a path the parsers open.
const PATH_VARIABLES: &[&str] = &["GORGE_WEBHOOK_CA_FILE", "GORGE_WEBHOOK_MYSQL_TLS_CA"];

/// Harmless paths: missing, blank, a directory, and small files (garbage,
/// an empty PEM block, an empty file).
fn paths() -> &'static [String] {
    static PATHS: OnceLock<Vec<String>> = OnceLock::new();
    PATHS.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("webhook-fuzz-{}", std::process::id()));
        let mut paths = vec![
            String::new(),
            "  ".to_owned(),
            "/nonexistent/ca.pem".to_owned(),
            dir.display().to_string(),
        ];
        if std::fs::create_dir_all(&dir).is_ok() {
            for (name, text) in [
                ("garbage.pem", "not a certificate\n"),
                (
                    "empty-block.pem",
                    "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n",
                ),
                (
                    "bad-base64.pem",
                    "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
                ),
                ("empty.pem", ""),
            ] {
                let path: PathBuf = dir.join(name);
                if std::fs::write(&path, text).is_ok() {
                    paths.push(path.display().to_string());
                }
            }
        }
        paths
    })
}

/// The daemon's registry, as a list to choose from.
fn registry() -> &'static [&'static SettingInfo] {
    static REGISTRY: OnceLock<Vec<&'static SettingInfo>> = OnceLock::new();
    REGISTRY.get_or_init(|| variables().collect())
}

fn arbitrary_variables(u: &mut Unstructured<'_>) -> Result<HashMap<String, String>> {
    let mut map = HashMap::new();
    let count = u.int_in_range(0..=12)?;
    for _ in 0..count {
        let name = if u.ratio(1, 12)? {
            u.choose(STRANGERS)?.to_string()
        } else {
            u.choose(registry())?.name.to_owned()
        };
        let value = if PATH_VARIABLES.contains(&name.as_str()) {
            u.choose(paths())?.clone()
        } else {
            match u.int_in_range(0..=3)? {
                0 | 1 => u.choose(VALUES)?.to_string(),
                2 => format!("{}{}", u.choose(VALUES)?, gen::string(u)?),
                _ => gen::string(u)?,
            }
        };
        map.insert(name, value);
    }
    Ok(map)
}

/// Runs the check on the fuzzer's bytes; panics when a property fails.
pub fn run(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(map) = arbitrary_variables(&mut u) else {
        return;
    };
    let get = |name: &str| map.get(name).cloned();

    // The order the daemon reads them in; the first failure is its error.
    let windows = check_windows(&get, &map);
    let signing = check_signing(&get, &map);
    let mysql = check_mysql(&get, &map);
    let transport = check_transport(&get, &map);
    let history = check_history(&get, &map, mysql.as_ref().ok());

    match DaemonConfig::from_lookup(&get) {
        Ok(config) => {
            assert!(
                windows.is_ok()
                    && signing.is_ok()
                    && mysql.is_ok()
                    && transport.is_ok()
                    && history.is_ok(),
                "the daemon accepted {map:?} although a part refused it"
            );
            assert_eq!(Ok(&config.delivery.signing), signing.as_ref());
            assert_eq!(
                config.service_token,
                map.get("GORGE_SERVICE_TOKEN").cloned().unwrap_or_default()
            );
            assert_eq!(Ok(&config.delivery.windows), windows.as_ref());
            assert_eq!(Ok(&config.delivery.history), history.as_ref());
        }
        Err(err) => {
            assert_names_a_set_variable(err.variable, &err.to_string(), &map);
            // The delivery settings are read before the daemon's own, so
            // the first part that refuses is the daemon's error.
            match windows
                .err()
                .or(signing.err())
                .or(mysql.err())
                .or(transport.err())
            {
                Some(variable) => assert_eq!(err.variable, variable, "{map:?}"),
                // Phorge's local config, then the history, then the
                // daemon's own.
                None => assert!(
                    err.variable == LOCAL_CONFIG_NAME
                        || history.err() == Some(err.variable)
                        || is_daemons_own(err.variable),
                    "{map:?}"
                ),
            }
        }
    }
}

/// `SigningSettings::from_lookup`; the offending variable on failure.
fn check_signing(
    get: &dyn Fn(&str) -> Option<String>,
    map: &HashMap<String, String>,
) -> std::result::Result<SigningSettings, &'static str> {
    SigningSettings::from_lookup(get).map_err(|err| {
        assert_names_a_set_variable(err.variable, &err.to_string(), map);
        err.variable
    })
}

/// `Settings::from_lookup` and `Windows::try_new`; the offending variable
/// on failure.
fn check_windows(
    get: &dyn Fn(&str) -> Option<String>,
    map: &HashMap<String, String>,
) -> std::result::Result<Windows, &'static str> {
    let settings = match Settings::from_lookup(get) {
        Ok(settings) => settings,
        Err(err) => {
            assert_names_a_set_variable(err.variable, &err.to_string(), map);
            return Err(err.variable);
        }
    };
    // A number that parses is taken as given.
    for (setting, value) in [
        (POLL_INTERVAL.name, settings.poll_interval.as_millis()),
        (
            DELIVERY_TIMEOUT.name,
            u128::from(settings.delivery_timeout.as_secs()),
        ),
        (MAX_CONCURRENT.name, settings.max_concurrent as u128),
        (
            BREAKER_WINDOW.name,
            u128::from(settings.breaker_window_secs),
        ),
        (
            BREAKER_THRESHOLD.name,
            u128::from(settings.breaker_threshold),
        ),
        (RETRY_BACKOFF.name, u128::from(settings.retry_backoff_secs)),
        (CLAIM_LEASE.name, u128::from(settings.claim_lease_secs)),
        (BATCH_SIZE.name, settings.batch_size as u128),
    ] {
        if let Some(raw) = map.get(setting) {
            let given: u64 = raw.trim().parse().unwrap_or_else(|_| {
                panic!("{setting} = {raw:?} is not a number, yet it was accepted")
            });
            assert_eq!(u128::from(given), value, "{setting} = {raw:?}");
        }
    }
    let windows = match Windows::try_new(settings.clone()) {
        Ok(windows) => windows,
        Err(err) => {
            assert_names_a_set_variable(err.variable, &err.to_string(), map);
            return Err(err.variable);
        }
    };
    // The Go service panicked on zero; zero must never get through.
    assert!(!settings.poll_interval.is_zero());
    assert!(!settings.delivery_timeout.is_zero());
    assert!(settings.max_concurrent > 0);
    assert!(settings.breaker_window_secs > 0 && settings.breaker_threshold > 0);
    assert!(settings.claim_lease_secs > 0);
    // The lease outlives a delivery; retries are spaced by the larger window.
    let lease = windows.lease_secs();
    assert!(lease >= settings.claim_lease_secs);
    assert!(lease > settings.delivery_timeout.as_secs());
    assert_eq!(
        windows.effective_retry_spacing_secs(),
        lease.max(settings.retry_backoff_secs)
    );
    assert!(windows.batch_size() > 0);
    for now in [0, 1, lease, 1_700_000_000, u64::MAX] {
        let cutoffs = windows.cutoffs(now);
        assert!(cutoffs.lease_cutoff <= now && cutoffs.retry_cutoff <= now);
        assert_eq!(cutoffs.now, now);
    }
    let breaker = windows.breaker();
    assert!(breaker.is_open(settings.breaker_threshold));
    assert!(!breaker.is_open(settings.breaker_threshold - 1));
    for warning in windows.warnings() {
        assert!(
            warning.to_string().starts_with("GORGE_WEBHOOK_"),
            "{warning}"
        );
    }
    Ok(windows)
}

/// `HistoryConfig::from_lookup` on the namespace the database settings
/// name (the default one when they are refused); the offending variable
/// on failure. Every history variable is checked even with the history
/// off, and an accepted database is a valid name.
fn check_history(
    get: &dyn Fn(&str) -> Option<String>,
    map: &HashMap<String, String>,
    mysql: Option<&MysqlConfig>,
) -> std::result::Result<Option<HistoryConfig>, &'static str> {
    let namespace = mysql.map_or("phorge", |config| config.namespace.as_str());
    match HistoryConfig::from_lookup(get, namespace) {
        Ok(config) => {
            if let Some(config) = &config {
                assert!(config.validate().is_ok(), "{config:?} from {map:?}");
            }
            Ok(config)
        }
        Err(err) => {
            assert_names_a_set_variable(err.variable, &err.to_string(), map);
            Err(err.variable)
        }
    }
}

fn check_mysql(
    get: &dyn Fn(&str) -> Option<String>,
    map: &HashMap<String, String>,
) -> std::result::Result<MysqlConfig, &'static str> {
    match MysqlConfig::from_lookup(get) {
        Ok(config) => {
            assert!(config.validate().is_ok(), "{config:?}");
            assert!(config.pool_max >= 1, "{config:?}");
            assert!((1..=64).contains(&config.lock_sessions), "{config:?}");
            assert_eq!(
                config.database(),
                format!(
                    "{}_herald",
                    map.get("GORGE_WEBHOOK_NAMESPACE")
                        .map_or("phorge", String::as_str)
                )
            );
            if let Some(password) = map.get(PASS.name) {
                assert_eq!(&config.password, password);
                // `{:?}` shows whether there is a password, never which.
                if !password.is_empty() {
                    let other = MysqlConfig {
                        password: "another password".to_owned(),
                        ..config.clone()
                    };
                    assert_eq!(format!("{config:?}"), format!("{other:?}"));
                }
            }
            Ok(config)
        }
        Err(err) => {
            assert_names_a_set_variable(err.variable, &err.to_string(), map);
            Err(err.variable)
        }
    }
}

/// `TransportConfig::from_env_with`, which checks what it reads; the
/// offending variable on failure. `HyperTransport::new` builds a transport
/// from whatever it accepts.
fn check_transport(
    get: &dyn Fn(&str) -> Option<String>,
    map: &HashMap<String, String>,
) -> std::result::Result<(), &'static str> {
    match TransportConfig::from_env_with(get) {
        Ok(config) => {
            if let Err(err) = HyperTransport::new(config) {
                panic!("no transport from settings it read without complaint: {err}\n{map:?}");
            }
            Ok(())
        }
        Err(err) => {
            assert_names_a_set_variable(err.variable, &err.to_string(), map);
            Err(err.variable)
        }
    }
}

/// Read after the transport's, by the delivery settings.
const LOCAL_CONFIG_NAME: &str = webhook_store_mysql::local_config::LOCAL_CONFIG.name;

/// A variable the daemon reads itself, after the delivery settings.
fn is_daemons_own(name: &str) -> bool {
    own_variables().any(|v| v.name == name)
}

fn assert_names_a_set_variable(name: &str, message: &str, map: &HashMap<String, String>) {
    assert!(
        name.starts_with("GORGE_"),
        "error names {name:?}: {message}"
    );
    assert!(
        map.contains_key(name),
        "error names {name}, which was not set (defaults must be valid): {message}\n{map:?}"
    );
    assert!(
        message.contains(name),
        "the message must name {name}: {message}"
    );
}

/// The daemon's verdict on these variables (`DaemonConfig::from_lookup`):
/// the error's text, if it refuses them.
pub fn daemon_refuses(variables: &[(&str, &str)]) -> Option<String> {
    DaemonConfig::from_lookup(&table(variables))
        .err()
        .map(|e| e.to_string())
}

/// The transport's verdict when the daemon starts it
/// (`HyperTransport::new`): the error's text, if it refuses them.
pub fn transport_refuses(variables: &[(&str, &str)]) -> Option<String> {
    match TransportConfig::from_env_with(table(variables)) {
        Ok(config) => HyperTransport::new(config).err().map(|e| e.to_string()),
        Err(err) => Some(err.to_string()),
    }
}
