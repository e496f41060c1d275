//! The daemon's configuration, read from `GORGE_*` variables with the Go
//! service's names and defaults, so it replaces that binary without edits.
//! Every bad value stops startup with a message naming the variable.
//!
//! It owns the registry: every variable the daemon reads, in `--help`
//! order ([`variables`]), composed from the lists of the crates that
//! declare them (`webhook_core::windows`, `webhook_store_mysql::config` and
//! `local_config`, `webhook_transport_hyper::config`) and the daemon's own
//! (listen address, token, logging, shutdown grace, event streams).
//! `--help`, `webhook-admin config` and the docs check read it.
//!
//! Parsing takes a lookup function, never the process environment itself,
//! so tests feed it tables.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use tracing_subscriber::EnvFilter;
use webhook_core::setting::withheld;
use webhook_core::setting::{
    text, Bounds, Lookup, Setting, SettingError, SettingInfo, Shown, Unit,
};
use webhook_core::signing::SigningSettings;
use webhook_core::windows::{Settings, Windows};
use webhook_core::{signing, windows};
use webhook_store_mysql::local_config::{self, LocalConfig};
use webhook_store_mysql::{config as mysql, MysqlConfig};
use webhook_transport_hyper::{config as transport, CheckedTransportConfig, TransportConfig};

/// `GORGE_LISTEN_ADDR`
pub const LISTEN: Setting<SocketAddr> = Setting::new(
    "GORGE_LISTEN_ADDR",
    ":8160",
    "diagnostics HTTP address ([host]:port)",
    parse_listen,
)
.shown_as(show_listen);
/// `GORGE_SERVICE_TOKEN`: empty = auth off.
pub const SERVICE_TOKEN: Setting<String> = Setting::new(
    "GORGE_SERVICE_TOKEN",
    "",
    "token for every path but /, /healthz and /readyz; empty = no auth",
    text,
)
.secret();
/// `GORGE_WEBHOOK_SHUTDOWN_GRACE_SEC`
pub const SHUTDOWN_GRACE: Setting<Duration> = Setting::number(
    "GORGE_WEBHOOK_SHUTDOWN_GRACE_SEC",
    "30",
    "how long SIGTERM waits for in-flight deliveries",
    Bounds::between(1, 3_600, Unit::Secs),
);
/// `GORGE_LOG_LEVEL`, as a validated tracing filter.
pub const LOG_LEVEL: Setting<String> = Setting::new(
    "GORGE_LOG_LEVEL",
    "info",
    "error|warn|info|debug|trace, or a tracing filter",
    parse_log_filter,
);
/// `GORGE_LOG_FORMAT`
pub const LOG_FORMAT: Setting<LogFormat> =
    Setting::new("GORGE_LOG_FORMAT", "text", "text|json", |raw| {
        match raw.trim() {
            "text" | "" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("is not text or json ({})", withheld(other))),
        }
    });
/// `GORGE_WEBHOOK_EVENT_STREAMS`
pub const EVENT_STREAMS: Setting<usize> = Setting::number(
    "GORGE_WEBHOOK_EVENT_STREAMS",
    "16",
    "live /api/webhook/events streams open at once",
    Bounds::between(1, 1_024, Unit::Count),
);

/// The daemon's own variables, by where `--help` lists them.
const OWN_FIRST: &[SettingInfo] = &[LISTEN.info(), SERVICE_TOKEN.info()];
const OWN_AFTER_WINDOWS: &[SettingInfo] =
    &[SHUTDOWN_GRACE.info(), LOG_LEVEL.info(), LOG_FORMAT.info()];
const OWN_LAST: &[SettingInfo] = &[EVENT_STREAMS.info()];

/// Every variable the daemon reads, as groups in `--help` order; see
/// [`variables`].
pub const REGISTRY: &[&[SettingInfo]] = &[
    OWN_FIRST,
    mysql::VARIABLES,
    local_config::VARIABLES,
    windows::VARIABLES,
    signing::VARIABLES,
    OWN_AFTER_WINDOWS,
    transport::VARIABLES,
    OWN_LAST,
];

/// Every variable the daemon reads, in `--help` order.
pub fn variables() -> impl Iterator<Item = &'static SettingInfo> {
    REGISTRY.iter().flat_map(|group| group.iter())
}

/// The variables only the daemon reads ([`DaemonConfig`] beyond its
/// [`DeliveryConfig`]).
pub fn own_variables() -> impl Iterator<Item = &'static SettingInfo> {
    [OWN_FIRST, OWN_AFTER_WINDOWS, OWN_LAST]
        .into_iter()
        .flat_map(|group| group.iter())
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// `text` or `json`, as the variable spells it.
impl Shown for LogFormat {
    fn shown(&self) -> String {
        match self {
            Self::Text => "text",
            Self::Json => "json",
        }
        .to_owned()
    }
}

/// What delivering needs, and `webhook-admin` validates as the daemon
/// does: the windows, the signing, the database, the transport and
/// Phorge's local config.
#[derive(Debug, Clone)]
pub struct DeliveryConfig {
    /// The delivery windows.
    pub windows: Windows,
    /// Where Phorge's herald database is.
    pub mysql: MysqlConfig,
    /// How receivers are called, checked.
    pub transport: CheckedTransportConfig,
    /// Phorge's `conf/local/local.json`, where `bin/config set` keeps
    /// `phabricator.silent`; `None` = not read.
    pub local_config: Option<LocalConfig>,
    /// Standard Webhooks headers and the key grace.
    pub signing: SigningSettings,
}

impl DeliveryConfig {
    /// Parses and validates the delivery settings, windows first.
    pub fn from_lookup(get: Lookup<'_>) -> Result<Self, SettingError> {
        let windows = Settings::from_lookup(get).and_then(Windows::try_new)?;
        let signing = SigningSettings::from_lookup(get)?;
        let mysql = MysqlConfig::from_lookup(get)?;
        let transport = TransportConfig::from_env_with(get)?;
        let local_config = LocalConfig::from_lookup(get)?;
        Ok(Self {
            windows,
            mysql,
            transport,
            local_config,
            signing,
        })
    }
}

/// Everything the daemon runs with, validated.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    /// What delivering needs: windows, database, transport, local config.
    pub delivery: DeliveryConfig,
    /// Diagnostics listen address.
    pub listen: SocketAddr,
    /// Token for `/api` and `/metrics`; empty = auth off.
    pub service_token: String,
    /// A validated tracing filter.
    pub log_filter: String,
    /// Log line format.
    pub log_format: LogFormat,
    /// How long shutdown waits for in-flight deliveries.
    pub shutdown_grace: Duration,
    /// `/api/webhook/events` streams open at once at most.
    pub event_streams: usize,
}

impl DaemonConfig {
    /// Parses and validates every setting: the delivery settings first
    /// (so the first error is the one `webhook-admin` reports too), then
    /// the daemon's own.
    pub fn from_lookup(get: Lookup<'_>) -> Result<Self, SettingError> {
        Ok(Self {
            delivery: DeliveryConfig::from_lookup(get)?,
            listen: LISTEN.read(get)?,
            log_filter: LOG_LEVEL.read(get)?,
            log_format: LOG_FORMAT.read(get)?,
            shutdown_grace: SHUTDOWN_GRACE.read(get)?,
            event_streams: EVENT_STREAMS.read(get)?,
            service_token: SERVICE_TOKEN.read(get)?,
        })
    }
}

/// A tracing filter with each comma-separated directive trimmed and empty
/// ones dropped. tracing-subscriber 0.3 panics on a directive that starts
/// with whitespace and holds a non-ASCII character (it walks the trimmed
/// text and slices the untrimmed one), so it never sees such a directive.
fn trim_directives(filter: &str) -> String {
    filter
        .split(',')
        .map(str::trim)
        .filter(|directive| !directive.is_empty())
        .collect::<Vec<_>>()
        .join(",")
}

fn parse_log_filter(raw: &str) -> Result<String, String> {
    let filter = trim_directives(raw);
    // The parser's own message quotes the directive, so it is left out.
    EnvFilter::try_new(&filter)
        .map_err(|_| format!("is not a level or tracing filter ({})", withheld(raw)))?;
    Ok(filter)
}

/// All interfaces as `:8160`, the way it is written; any other address
/// as it reads.
fn show_listen(addr: &SocketAddr) -> String {
    if addr.ip() == IpAddr::V6(Ipv6Addr::UNSPECIFIED) {
        format!(":{}", addr.port())
    } else {
        addr.to_string()
    }
}

/// `:8160` (all interfaces, as Go reads it), `host:port` or `[v6]:port`.
fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    if let Some(port) = text.strip_prefix(':') {
        let port: u16 = port.parse().map_err(|_| {
            format!(
                "the port is not a number from 0 to 65535 ({})",
                withheld(text)
            )
        })?;
        return Ok(SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port));
    }
    text.parse().map_err(|_| {
        format!(
            "is not an address like :8160, 127.0.0.1:8160 or [::1]:8160 ({})",
            withheld(text)
        )
    })
}

/// The `--help` text.
pub fn help() -> String {
    let mut out = format!(
        "webhook-daemon {}: delivers Phorge's queued Herald webhook requests.\n\n\
         usage: webhook-daemon [--help | --version | demo [--listen ADDR]]\n\n  \
         demo  a self-contained demonstration on an in-memory queue (no database); it serves\n        \
         the diagnostics API and its live event stream on --listen (a loopback address;\n        \
         default a free port), waiting up to 20 s for a watcher when --listen is given\n\n\
         Configuration comes from the environment (same names as the Go gorge-webhook):\n\n",
        env!("CARGO_PKG_VERSION")
    );
    let width = variables().map(|v| v.name.len()).max().unwrap_or(0);
    for v in variables() {
        let default = if v.default.is_empty() {
            "(empty)"
        } else {
            v.default
        };
        let allowed = v
            .allowed()
            .map(|allowed| format!("; {allowed}"))
            .unwrap_or_default();
        out.push_str(&format!(
            "  {:width$}  {}\n  {:width$}  default: {default}{allowed}\n",
            v.name, v.help, ""
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use webhook_core::setting::table;

    fn parse(pairs: &[(&str, &str)]) -> Result<DaemonConfig, SettingError> {
        DaemonConfig::from_lookup(&table(pairs))
    }

    #[test]
    fn defaults_match_the_go_service() {
        let config = parse(&[]).expect("defaults are valid");
        assert_eq!(config.listen.port(), 8160);
        assert!(config.listen.ip().is_unspecified());
        assert_eq!(config.service_token, "");
        assert_eq!(config.delivery.mysql.host, "127.0.0.1");
        assert_eq!(config.delivery.mysql.port, 3306);
        assert_eq!(config.delivery.mysql.user, "phorge");
        assert_eq!(config.delivery.mysql.database(), "phorge_herald");
        assert_eq!(config.delivery.mysql.pool_max, 16);
        assert_eq!(config.delivery.mysql.lock_sessions, 4);
        assert_eq!(config.delivery.windows.settings(), &Settings::default());
        assert_eq!(config.log_format, LogFormat::Text);
        assert_eq!(config.shutdown_grace, Duration::from_secs(30));
        assert_eq!(config.event_streams, 16);
        assert_eq!(config.delivery.local_config, None);
    }

    #[test]
    fn values_are_read() {
        let config = parse(&[
            ("GORGE_LISTEN_ADDR", "127.0.0.1:9000"),
            ("GORGE_WEBHOOK_NAMESPACE", "phabricator"),
            ("GORGE_WEBHOOK_MAX_CONCURRENT", "4"),
            ("GORGE_WEBHOOK_POLL_INTERVAL_MS", "250"),
            ("GORGE_LOG_LEVEL", "webhook_core=debug,info"),
            ("GORGE_LOG_FORMAT", "json"),
            ("GORGE_WEBHOOK_OUTBOUND_ALLOW", "127.0.0.1/32"),
            ("GORGE_WEBHOOK_EVENT_STREAMS", "3"),
            (
                "GORGE_PHORGE_LOCAL_CONFIG",
                "/srv/phorge/conf/local/local.json",
            ),
        ])
        .expect("valid");
        assert_eq!(
            config
                .delivery
                .local_config
                .as_ref()
                .map(|c| c.path().to_owned()),
            Some("/srv/phorge/conf/local/local.json".into())
        );
        assert_eq!(config.event_streams, 3);
        assert_eq!(config.listen, "127.0.0.1:9000".parse().expect("addr"));
        assert_eq!(config.delivery.mysql.database(), "phabricator_herald");
        assert_eq!(config.delivery.windows.max_concurrent(), 4);
        assert_eq!(
            config.delivery.windows.poll_interval(),
            Duration::from_millis(250)
        );
        assert_eq!(config.log_format, LogFormat::Json);
    }

    #[test]
    fn every_bad_value_names_its_variable() {
        let cases = [
            ("GORGE_LISTEN_ADDR", "nonsense"),
            ("GORGE_LISTEN_ADDR", ":99999"),
            ("GORGE_WEBHOOK_MYSQL_PORT", "abc"),
            ("GORGE_WEBHOOK_MYSQL_PORT", "0"),
            ("GORGE_WEBHOOK_POLL_INTERVAL_MS", "-5"),
            ("GORGE_WEBHOOK_POLL_INTERVAL_MS", "0"),
            ("GORGE_WEBHOOK_DELIVERY_TIMEOUT", "0"),
            ("GORGE_WEBHOOK_MAX_CONCURRENT", "0"),
            ("GORGE_WEBHOOK_MAX_CONCURRENT", "eight"),
            ("GORGE_WEBHOOK_ERROR_BACKOFF_SEC", "0"),
            ("GORGE_WEBHOOK_ERROR_THRESHOLD", "0"),
            ("GORGE_WEBHOOK_RETRY_BACKOFF_SEC", "1.5"),
            ("GORGE_WEBHOOK_CLAIM_LEASE_SEC", "0"),
            ("GORGE_WEBHOOK_NAMESPACE", ""),
            ("GORGE_WEBHOOK_MYSQL_POOL_MAX", "many"),
            ("GORGE_WEBHOOK_MYSQL_LOCK_SESSIONS", "0"),
            ("GORGE_WEBHOOK_MYSQL_LOCK_SESSIONS", "65"),
            ("GORGE_WEBHOOK_MYSQL_TLS", "maybe"),
            ("GORGE_WEBHOOK_MYSQL_CONNECT_TIMEOUT_MS", "0"),
            ("GORGE_WEBHOOK_MYSQL_STATEMENT_TIMEOUT_MS", "0"),
            ("GORGE_WEBHOOK_MYSQL_STATEMENT_TIMEOUT_MS", "ten"),
            ("GORGE_WEBHOOK_MYSQL_KEEPALIVE_SEC", "-1"),
            ("GORGE_WEBHOOK_SHUTDOWN_GRACE_SEC", "0"),
            ("GORGE_LOG_LEVEL", "loud=="),
            ("GORGE_LOG_FORMAT", "xml"),
            ("GORGE_WEBHOOK_OUTBOUND_ALLOW", "not-a-cidr"),
            ("GORGE_WEBHOOK_MAX_REDIRECTS", "many"),
            ("GORGE_WEBHOOK_EVENT_STREAMS", "0"),
            ("GORGE_WEBHOOK_EVENT_STREAMS", "2000"),
            ("GORGE_WEBHOOK_EVENT_STREAMS", "lots"),
            // Parsed by the transport, refused by its check.
            ("GORGE_WEBHOOK_CONNECT_TIMEOUT_MS", "0"),
            ("GORGE_WEBHOOK_SIGNATURE_HEADERS", "bad header"),
            ("GORGE_PHORGE_LOCAL_CONFIG", "conf/local/local.json"),
        ];
        for (name, value) in cases {
            let err = parse(&[(name, value)]).expect_err(&format!("{name}={value}"));
            assert_eq!(err.variable, name, "{name}={value}: {err}");
            assert!(err.to_string().starts_with(name));
        }
    }

    /// A password pasted into the wrong variable must not be printed: no
    /// refused value is echoed, whatever the variable, whether it failed to
    /// parse or parsed to a number out of range.
    #[test]
    fn refused_values_are_never_echoed() {
        let secrets = [
            "hunter2:s3cr\u{e9}t/`x y=",
            "987654321987",
            "9876543219876543219876",
        ];
        let mut refused = 0;
        for secret in secrets {
            for v in variables() {
                for extra in [None, Some(("GORGE_WEBHOOK_MYSQL_TLS", "true"))] {
                    let mut pairs = vec![(v.name, secret)];
                    pairs.extend(extra);
                    if let Err(err) = parse(&pairs) {
                        refused += 1;
                        let text = format!("{err} {err:?}");
                        for needle in [secret, "hunter2", "98765"] {
                            assert!(!text.contains(needle), "{}={secret}: {text}", v.name);
                        }
                    }
                }
            }
        }
        // Most variables refuse such values: the check saw real messages.
        assert!(refused > 40, "{refused}");
    }

    #[test]
    fn log_directives_are_trimmed() {
        for (given, kept) in [
            ("info, webhook_core=debug", "info,webhook_core=debug"),
            (" \u{e9}=debug", "\u{e9}=debug"),
            ("\u{3000}a=debug,", "a=debug"),
            // Untrimmed, these panic inside tracing-subscriber 0.3.
            ("info, \u{e9}[x]", "info,\u{e9}[x]"),
        ] {
            let config = parse(&[("GORGE_LOG_LEVEL", given)]).expect(given);
            assert_eq!(config.log_filter, kept);
        }
    }

    #[test]
    fn the_registry_names_each_variable_once_and_every_default_parses() {
        let mut names: Vec<&str> = variables().map(|v| v.name).collect();
        let count = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), count, "a variable is listed twice");
        // Unset, every variable reads as its default (and the defaults are
        // valid together).
        parse(&[]).expect("defaults are valid");
    }

    #[test]
    fn help_lists_every_variable_with_its_default() {
        let text = help();
        for v in variables() {
            assert!(text.contains(v.name), "{}", v.name);
        }
        assert!(text.contains("default: 256"));
    }

    #[test]
    fn help_shows_the_declared_bounds() {
        let text = help();
        assert!(
            text.contains("default: 256; between 1 and 1024\n"),
            "{text}"
        );
        assert!(
            text.contains("default: 30; between 1 and 3600 s\n"),
            "{text}"
        );
    }

    #[test]
    fn a_bound_is_refused_naming_its_variable_and_the_bound() {
        for (name, value, message) in [
            (
                "GORGE_WEBHOOK_SHUTDOWN_GRACE_SEC",
                "3601",
                "GORGE_WEBHOOK_SHUTDOWN_GRACE_SEC: must be between 1 and 3600 s",
            ),
            (
                "GORGE_WEBHOOK_EVENT_STREAMS",
                "2000",
                "GORGE_WEBHOOK_EVENT_STREAMS: must be between 1 and 1024",
            ),
            (
                "GORGE_WEBHOOK_MAX_CONCURRENT",
                "0",
                "GORGE_WEBHOOK_MAX_CONCURRENT: must be between 1 and 1024",
            ),
        ] {
            let err = parse(&[(name, value)]).expect_err(name);
            assert_eq!(err.to_string(), message);
        }
    }
}
