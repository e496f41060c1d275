//! The daemon's configuration, read from `GORGE_*` variables with the Go
//! service's names and defaults, so it replaces that binary without edits.
//! Every bad value stops startup with a message naming the variable.
//!
//! Parsing takes a lookup function, never the process environment itself,
//! so tests feed it tables.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use tracing_subscriber::EnvFilter;
use webhook_core::{withheld, Settings, Windows};
use webhook_store_mysql::local_config::{LocalConfig, LocalConfigError, VARIABLE as LOCAL_CONFIG};
use webhook_store_mysql::{MysqlConfig, MysqlError};
use webhook_transport_hyper::TransportConfig;

/// One documented variable, for `--help`.
#[derive(Debug, Clone, Copy)]
pub struct Variable {
    /// Its name.
    pub name: &'static str,
    /// Its default, as text.
    pub default: &'static str,
    /// What it sets.
    pub help: &'static str,
}

const fn var(name: &'static str, default: &'static str, help: &'static str) -> Variable {
    Variable {
        name,
        default,
        help,
    }
}

/// Every variable the daemon reads, with its default.
pub const VARIABLES: &[Variable] = &[
    var(
        "GORGE_LISTEN_ADDR",
        ":8160",
        "diagnostics HTTP address ([host]:port)",
    ),
    var(
        "GORGE_SERVICE_TOKEN",
        "",
        "token for every path but /, /healthz and /readyz; empty = no auth",
    ),
    var(
        "GORGE_WEBHOOK_MYSQL_HOST",
        "127.0.0.1",
        "MySQL/MariaDB host",
    ),
    var("GORGE_WEBHOOK_MYSQL_PORT", "3306", "MySQL/MariaDB port"),
    var("GORGE_WEBHOOK_MYSQL_USER", "phorge", "MySQL user"),
    var("GORGE_WEBHOOK_MYSQL_PASS", "", "MySQL password"),
    var(
        "GORGE_WEBHOOK_MYSQL_TLS",
        "false",
        "require TLS to the database (rustls)",
    ),
    var(
        "GORGE_WEBHOOK_MYSQL_TLS_CA",
        "",
        "PEM file of CAs for the database's certificate",
    ),
    var(
        "GORGE_WEBHOOK_MYSQL_POOL_MAX",
        "0",
        "database connections at most; 0 = 2 x MAX_CONCURRENT + 4",
    ),
    var(
        "GORGE_WEBHOOK_MYSQL_CONNECT_TIMEOUT_MS",
        "5000",
        "bound on getting a database connection (TCP, TLS, handshake, pool slot)",
    ),
    var(
        "GORGE_WEBHOOK_MYSQL_STATEMENT_TIMEOUT_MS",
        "10000",
        "bound on one database statement; then its connection is abandoned",
    ),
    var(
        "GORGE_WEBHOOK_MYSQL_KEEPALIVE_SEC",
        "30",
        "TCP keepalive idle time on database sockets; 0 = off",
    ),
    var(
        "GORGE_WEBHOOK_NAMESPACE",
        "phorge",
        "Phorge storage namespace; the database is {namespace}_herald",
    ),
    var(
        "GORGE_PHORGE_LOCAL_CONFIG",
        "",
        "Phorge's conf/local/local.json, read for phabricator.silent; empty = not read",
    ),
    var(
        "GORGE_WEBHOOK_POLL_INTERVAL_MS",
        "1000",
        "idle poll spacing (a full batch is followed at once)",
    ),
    var(
        "GORGE_WEBHOOK_DELIVERY_TIMEOUT",
        "15",
        "seconds for one whole HTTP exchange",
    ),
    var(
        "GORGE_WEBHOOK_MAX_CONCURRENT",
        "8",
        "deliveries in flight at once, across hooks",
    ),
    var(
        "GORGE_WEBHOOK_ERROR_BACKOFF_SEC",
        "300",
        "breaker window in seconds",
    ),
    var(
        "GORGE_WEBHOOK_ERROR_THRESHOLD",
        "10",
        "failed rows in the window that open a hook's breaker",
    ),
    var(
        "GORGE_WEBHOOK_RETRY_BACKOFF_SEC",
        "60",
        "seconds after a failed attempt before a retry",
    ),
    var(
        "GORGE_WEBHOOK_CLAIM_LEASE_SEC",
        "30",
        "claim lease in seconds (raised to delivery timeout + 2)",
    ),
    var(
        "GORGE_WEBHOOK_BATCH_SIZE",
        "0",
        "candidate rows kept ready; 0 = 8 x MAX_CONCURRENT (32..1024)",
    ),
    var(
        "GORGE_WEBHOOK_SHUTDOWN_GRACE_SEC",
        "30",
        "how long SIGTERM waits for in-flight deliveries",
    ),
    var(
        "GORGE_LOG_LEVEL",
        "info",
        "error|warn|info|debug|trace, or a tracing filter",
    ),
    var("GORGE_LOG_FORMAT", "text", "text|json"),
    var(
        "GORGE_WEBHOOK_SIGNATURE_HEADERS",
        "X-Phabricator-Webhook-Signature",
        "comma-separated signature header names",
    ),
    var(
        "GORGE_WEBHOOK_USER_AGENT",
        "gorge-webhook/<version>",
        "User-Agent sent to receivers",
    ),
    var(
        "GORGE_WEBHOOK_MAX_REDIRECTS",
        "20",
        "redirects followed; 0 = never",
    ),
    var(
        "GORGE_WEBHOOK_CONNECT_TIMEOUT_MS",
        "5000",
        "bound on one new connection",
    ),
    var(
        "GORGE_WEBHOOK_RESOLVE_TIMEOUT_MS",
        "10000",
        "bound on resolving a hook's host",
    ),
    var(
        "GORGE_WEBHOOK_RESPONSE_BODY_LIMIT",
        "65536",
        "response bytes read, then discarded",
    ),
    var(
        "GORGE_WEBHOOK_POOL_IDLE_SEC",
        "30",
        "idle keep-alive connections are closed after this",
    ),
    var(
        "GORGE_WEBHOOK_OUTBOUND_DENY",
        "Phorge's security.outbound-blacklist",
        "comma-separated CIDRs never called",
    ),
    var(
        "GORGE_WEBHOOK_OUTBOUND_ALLOW",
        "",
        "comma-separated CIDRs allowed despite the deny list",
    ),
    var(
        "GORGE_WEBHOOK_CA_FILE",
        "",
        "PEM file of extra trusted roots for receivers",
    ),
    var(
        "GORGE_WEBHOOK_REQUEST_ID_HEADER",
        "",
        "header carrying the request PHID (stable across retries); empty = off",
    ),
    var(
        "GORGE_WEBHOOK_EVENT_STREAMS",
        "16",
        "live /api/webhook/events streams open at once (1..1024)",
    ),
];

/// A setting that cannot be used; the message starts with its variable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable}: {reason}")]
pub struct ConfigError {
    /// The variable.
    pub variable: String,
    /// What is wrong, with what is allowed.
    pub reason: String,
}

fn invalid(variable: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        variable: variable.to_owned(),
        reason: reason.into(),
    }
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Everything the daemon runs with, validated.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    /// Diagnostics listen address.
    pub listen: SocketAddr,
    /// Token for `/api` and `/metrics`; empty = auth off.
    pub service_token: String,
    /// Where Phorge's herald database is.
    pub mysql: MysqlConfig,
    /// The delivery windows.
    pub windows: Windows,
    /// How receivers are called.
    pub transport: TransportConfig,
    /// A validated tracing filter.
    pub log_filter: String,
    /// Log line format.
    pub log_format: LogFormat,
    /// How long shutdown waits for in-flight deliveries.
    pub shutdown_grace: Duration,
    /// `/api/webhook/events` streams open at once at most.
    pub event_streams: usize,
    /// Phorge's `conf/local/local.json`, where `bin/config set` keeps
    /// `phabricator.silent`; `None` = not read.
    pub local_config: Option<LocalConfig>,
}

/// Reads variables through `get`, with every default applied.
struct Reader<'a> {
    get: &'a dyn Fn(&str) -> Option<String>,
}

impl Reader<'_> {
    fn text(&self, name: &str, default: &str) -> String {
        (self.get)(name).unwrap_or_else(|| default.to_owned())
    }

    fn number<T: std::str::FromStr>(&self, name: &str, default: T) -> Result<T, ConfigError> {
        match (self.get)(name) {
            None => Ok(default),
            Some(raw) => raw
                .trim()
                .parse()
                .map_err(|_| invalid(name, format!("is not a whole number ({})", withheld(&raw)))),
        }
    }
}

impl DaemonConfig {
    /// Parses and validates every setting.
    pub fn from_lookup(get: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let read = Reader { get };
        let windows = Settings::from_lookup(get)
            .and_then(Windows::try_new)
            .map_err(|e| invalid(e.setting.env_name(), e.reason))?;
        let mysql =
            MysqlConfig::from_lookup(get, windows.max_concurrent()).map_err(|e| match e {
                MysqlError::InvalidConfig { setting, reason } => invalid(setting, reason),
                other => invalid("GORGE_WEBHOOK_MYSQL_HOST", other.to_string()),
            })?;
        let listen = parse_listen(&read.text("GORGE_LISTEN_ADDR", ":8160"))
            .map_err(|reason| invalid("GORGE_LISTEN_ADDR", reason))?;
        let raw_filter = read.text("GORGE_LOG_LEVEL", "info");
        let log_filter = trim_directives(&raw_filter);
        // The parser's own message quotes the directive, so it is left out.
        EnvFilter::try_new(&log_filter).map_err(|_| {
            invalid(
                "GORGE_LOG_LEVEL",
                format!(
                    "is not a level or tracing filter ({})",
                    withheld(&raw_filter)
                ),
            )
        })?;
        let log_format = match read.text("GORGE_LOG_FORMAT", "text").trim() {
            "text" | "" => LogFormat::Text,
            "json" => LogFormat::Json,
            other => {
                return Err(invalid(
                    "GORGE_LOG_FORMAT",
                    format!("is not text or json ({})", withheld(other)),
                ))
            }
        };
        let grace: u64 = read.number("GORGE_WEBHOOK_SHUTDOWN_GRACE_SEC", 30)?;
        if !(1..=3_600).contains(&grace) {
            return Err(invalid(
                "GORGE_WEBHOOK_SHUTDOWN_GRACE_SEC",
                "must be between 1 and 3600".to_owned(),
            ));
        }
        let event_streams: usize =
            read.number("GORGE_WEBHOOK_EVENT_STREAMS", crate::live::DEFAULT_STREAMS)?;
        if !(1..=1_024).contains(&event_streams) {
            return Err(invalid(
                "GORGE_WEBHOOK_EVENT_STREAMS",
                "must be between 1 and 1024".to_owned(),
            ));
        }
        let transport = TransportConfig::from_env_with(|name| (read.get)(name))
            .map_err(|e| invalid(e.setting.env_name(), e.reason))?;
        let local_config = LocalConfig::from_lookup(get).map_err(|e| match e {
            LocalConfigError::InvalidSetting { reason } => invalid(LOCAL_CONFIG, reason),
            other => invalid(LOCAL_CONFIG, other.to_string()),
        })?;
        Ok(Self {
            listen,
            service_token: read.text("GORGE_SERVICE_TOKEN", ""),
            mysql,
            windows,
            transport,
            log_filter,
            log_format,
            shutdown_grace: Duration::from_secs(grace),
            event_streams,
            local_config,
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
    let width = VARIABLES.iter().map(|v| v.name.len()).max().unwrap_or(0);
    for v in VARIABLES {
        let default = if v.default.is_empty() {
            "(empty)"
        } else {
            v.default
        };
        out.push_str(&format!(
            "  {:width$}  {}\n  {:width$}  default: {default}\n",
            v.name, v.help, ""
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(pairs: &[(&str, &str)]) -> Result<DaemonConfig, ConfigError> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        DaemonConfig::from_lookup(&|name| map.get(name).cloned())
    }

    #[test]
    fn defaults_match_the_go_service() {
        let config = parse(&[]).expect("defaults are valid");
        assert_eq!(config.listen.port(), 8160);
        assert!(config.listen.ip().is_unspecified());
        assert_eq!(config.service_token, "");
        assert_eq!(config.mysql.host, "127.0.0.1");
        assert_eq!(config.mysql.port, 3306);
        assert_eq!(config.mysql.user, "phorge");
        assert_eq!(config.mysql.database(), "phorge_herald");
        assert_eq!(config.mysql.pool_max, 20);
        assert_eq!(config.windows.settings(), &Settings::default());
        assert_eq!(config.log_format, LogFormat::Text);
        assert_eq!(config.shutdown_grace, Duration::from_secs(30));
        assert_eq!(config.event_streams, 16);
        assert_eq!(config.local_config, None);
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
            config.local_config.as_ref().map(|c| c.path().to_owned()),
            Some("/srv/phorge/conf/local/local.json".into())
        );
        assert_eq!(config.event_streams, 3);
        assert_eq!(config.listen, "127.0.0.1:9000".parse().expect("addr"));
        assert_eq!(config.mysql.database(), "phabricator_herald");
        assert_eq!(config.windows.max_concurrent(), 4);
        assert_eq!(config.windows.poll_interval(), Duration::from_millis(250));
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
            ("GORGE_WEBHOOK_MYSQL_POOL_MAX", "3"),
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
            for v in VARIABLES {
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
    fn help_lists_every_variable_with_its_default() {
        let text = help();
        for v in VARIABLES {
            assert!(text.contains(v.name), "{}", v.name);
        }
        assert!(text.contains("default: 8"));
    }
}
