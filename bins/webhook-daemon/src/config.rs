//! The daemon's configuration, read from `GORGE_*` variables with the Go
//! service's names and defaults, so it replaces that binary without edits.
//! Every bad value stops startup with a message naming the variable.
//!
//! It owns the registry: every variable the daemon reads, in `--help`
//! order ([`variables`]), composed from the lists of the crates that
//! declare them (`webhook_core::windows`, `webhook_store_mysql::config`,
//! `history::config` and `local_config`, `webhook_transport_hyper::config`) and the daemon's own
//! (listen address, token, logging, shutdown grace, event streams).
//! `--help`, `webhook-admin config` and the docs check read it.
//!
//! Parsing takes a lookup function, never the process environment itself,
//! so tests feed it tables; [`env_lookup`] is the environment as the daemon
//! and `webhook-admin` both read it.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use webhook_core::setting::{
    text, Bounds, Lookup, Setting, SettingError, SettingInfo, Shown, Unit,
};
use webhook_core::signing::SigningSettings;
use webhook_core::windows::{Settings, Windows};
use webhook_core::{signing, windows};
use webhook_store_mysql::history::config as history_config;
use webhook_store_mysql::history::HistoryConfig;
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
/// Whether output to a stream may be coloured: only on a terminal, and not
/// when `NO_COLOR` is set to anything but the empty string (the
/// convention of no-color.org), for the daemon's log and the admin tool
/// alike.
pub fn colour(is_terminal: bool, no_color: Option<&str>) -> bool {
    is_terminal && no_color.is_none_or(str::is_empty)
}

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
/// The levels [`LOG_LEVEL`] takes, most severe first, as tracing (and
/// `RUST_LOG`) spells them; read in any case.
pub const LOG_LEVELS: [&str; 5] = ["error", "warn", "info", "debug", "trace"];
/// `GORGE_LOG_LEVEL`: one of [`LOG_LEVELS`], or comma-separated directives
/// each a level or `target=level` (`webhook_core::dispatcher=debug,info`).
/// Anything else is refused: a word tracing would take as a target
/// (`warning`, `loud`) would otherwise silence every line, errors
/// included.
pub const LOG_LEVEL: Setting<String> = Setting::new(
    "GORGE_LOG_LEVEL",
    "info",
    "error|warn|info|debug|trace (any case), or comma-separated target=level \
     directives such as webhook_core::dispatcher=debug,info",
    parse_log_filter,
);
/// `GORGE_LOG_FORMAT`
pub const LOG_FORMAT: Setting<LogFormat> = Setting::new(
    "GORGE_LOG_FORMAT",
    "text",
    "text|json (any case)",
    |raw| match raw.trim().to_ascii_lowercase().as_str() {
        "text" | "" => Ok(LogFormat::Text),
        "json" => Ok(LogFormat::Json),
        _ => Err("is not text or json".to_owned()),
    },
);
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
    history_config::VARIABLES,
    local_config::VARIABLES,
    windows::VARIABLES,
    signing::VARIABLES,
    OWN_AFTER_WINDOWS,
    transport::VARIABLES,
    OWN_LAST,
];

/// The process environment as every `GORGE_*` variable is read, by the
/// daemon and by `webhook-admin` alike: a value that is not UTF-8 is read
/// lossily, so it is refused naming its variable rather than taken as
/// unset.
pub fn env_lookup(name: &str) -> Option<String> {
    std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
}

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
    /// The attempt history, when it is on.
    pub history: Option<HistoryConfig>,
}

impl DeliveryConfig {
    /// Parses and validates the delivery settings, windows first.
    pub fn from_lookup(get: Lookup<'_>) -> Result<Self, SettingError> {
        let windows = Settings::from_lookup(get).and_then(Windows::try_new)?;
        let signing = SigningSettings::from_lookup(get)?;
        let mysql = MysqlConfig::from_lookup(get)?;
        let transport = TransportConfig::from_env_with(get)?;
        let local_config = LocalConfig::from_lookup(get)?;
        let history = HistoryConfig::from_lookup(get, &mysql.namespace)?;
        Ok(Self {
            windows,
            mysql,
            transport,
            local_config,
            signing,
            history,
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

/// [`LOG_LEVEL`]'s text as the filter the log is written with: each
/// comma-separated directive trimmed, empty ones dropped, each level in
/// lower case; no directive at all is the default, `info`. A target is a
/// module path (letters, digits, `_`, `::`), which is all the daemon's
/// lines carry; tracing's span and field filters are not taken.
fn parse_log_filter(raw: &str) -> Result<String, String> {
    let mut directives = Vec::new();
    for directive in raw.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let (target, level) = match directive.split_once('=') {
            Some((target, level)) => (Some(target.trim()), level.trim()),
            None => (None, directive),
        };
        let level = log_level(level)?;
        directives.push(match target {
            None => level.to_owned(),
            Some(target) if is_log_target(target) => format!("{target}={level}"),
            Some(_) => {
                return Err(
                    "holds a directive whose target is not a module path such as \
                     webhook_core::dispatcher"
                        .to_owned(),
                )
            }
        });
    }
    if directives.is_empty() {
        return Ok(LOG_LEVEL.default.to_owned());
    }
    Ok(directives.join(","))
}

/// One of [`LOG_LEVELS`], in any case.
fn log_level(text: &str) -> Result<&'static str, String> {
    let lower = text.to_ascii_lowercase();
    if let Some(level) = LOG_LEVELS.iter().find(|level| **level == lower) {
        return Ok(level);
    }
    let hint = if lower == "warning" {
        "; for warnings write warn"
    } else {
        ""
    };
    Err(format!(
        "is not a log level: error, warn, info, debug or trace (any case), or \
         comma-separated target=level directives such as \
         webhook_core::dispatcher=debug,info{hint}"
    ))
}

/// A module path: `webhook_core`, `webhook_core::dispatcher`.
fn is_log_target(text: &str) -> bool {
    !text.is_empty()
        && text.split("::").all(|part| {
            !part.is_empty() && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
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
        let port: u16 = port
            .parse()
            .map_err(|_| "the port is not a number from 0 to 65535".to_owned())?;
        return Ok(SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port));
    }
    text.parse()
        .map_err(|_| "is not an address like :8160, 127.0.0.1:8160 or [::1]:8160".to_owned())
}

/// What `--help` says after the options: every variable the daemon
/// reads, with its default and bounds, then `NO_COLOR` and the exit codes.
pub fn environment_help() -> String {
    let mut out = String::from(
        "Configuration comes from the environment (same names as the Go gorge-webhook):\n\n",
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
    out.push_str(
        "\nNO_COLOR set (to anything but empty) turns off colour in the text log.\n\n\
         Exit status:\n  \
         0  stopped by SIGTERM, SIGINT or SIGQUIT after draining its deliveries\n  \
         1  cannot deliver: the database account lacks a privilege it needs (each named),\n     \
         the listen address cannot be bound, or the runtime failed\n  \
         2  a setting or an argument is invalid (its variable named)\n",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(colour(true, None));
        assert!(colour(true, Some("")));
        assert!(!colour(true, Some("1")));
        assert!(!colour(false, None));
    }
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

    /// A refused value is shown, so the operator sees what was read;
    /// a secret's never is, whatever it was refused for.
    #[test]
    fn refused_values_are_shown_except_a_secrets() {
        let values = [
            "hunter2:s3cr\u{e9}t/`x y=",
            "987654321987",
            "9876543219876543219876",
        ];
        let mut refused = 0;
        for value in values {
            for v in variables() {
                for extra in [None, Some(("GORGE_WEBHOOK_MYSQL_TLS", "true"))] {
                    let mut pairs = vec![(v.name, value)];
                    pairs.extend(extra);
                    let Err(err) = parse(&pairs) else { continue };
                    // Refused by its declaration, not by a rule between
                    // variables (a CA file without TLS).
                    if err.variable != v.name || v.shown(&table(&pairs)).is_ok() {
                        continue;
                    }
                    refused += 1;
                    let text = format!("{err} {err:?}");
                    if v.secret {
                        // A proxy URL may carry a password.
                        assert!(
                            !text.contains(value) && text.contains("characters, not shown"),
                            "{}: {text}",
                            v.name
                        );
                        continue;
                    }
                    assert!(
                        text.contains(&format!("{value:?}")),
                        "{}={value}: {text}",
                        v.name
                    );
                }
            }
        }
        // Most variables refuse such values: the check saw real messages.
        assert!(refused > 40, "{refused}");
        // Where a secret is refused, it is by its length only.
        let err = SERVICE_TOKEN.info().given("hunter2");
        assert_eq!(err, "7 characters, not shown");
    }

    #[test]
    fn the_log_level_is_one_of_the_stated_levels_or_target_level_directives() {
        for (given, kept) in [
            ("info", "info"),
            ("WARN", "warn"),
            (" Debug ", "debug"),
            ("error", "error"),
            ("trace", "trace"),
            ("", "info"),
            (" , ", "info"),
            ("\u{3000}a=debug,", "a=debug"),
            ("info, webhook_core=debug", "info,webhook_core=debug"),
            (
                "webhook_core::dispatcher = DEBUG,warn",
                "webhook_core::dispatcher=debug,warn",
            ),
        ] {
            let config = parse(&[("GORGE_LOG_LEVEL", given)]).expect(given);
            assert_eq!(config.log_filter, kept, "{given:?}");
        }
        for refused in [
            "warning",
            "loud",
            "verbose",
            "off",
            "info,warning",
            "webhook_core=warning",
            "webhook_core",
            "loud==",
            "=debug",
            "web-hook=debug",
            "webhook_core:::x=debug",
            "[{a=/x/}]",
            "webhook_core[span]=debug",
            " \u{e9}=debug",
            "info, \u{e9}[x]",
        ] {
            let err = parse(&[("GORGE_LOG_LEVEL", refused)]).expect_err(refused);
            assert_eq!(err.variable, "GORGE_LOG_LEVEL", "{refused:?}");
            assert!(
                err.to_string().contains(&format!("(set to {refused:?})")),
                "{err}"
            );
        }
        let err = parse(&[("GORGE_LOG_LEVEL", "warning")]).expect_err("warning");
        assert_eq!(
            err.to_string(),
            "GORGE_LOG_LEVEL: is not a log level: error, warn, info, debug or trace (any \
             case), or comma-separated target=level directives such as \
             webhook_core::dispatcher=debug,info; for warnings write warn (set to \"warning\")"
        );
    }

    /// What the setting accepts, the logger takes as the same filter.
    #[test]
    fn every_accepted_log_level_is_a_filter_the_log_is_written_with() {
        for given in ["info", "TRACE", "info, webhook_core::dispatcher=debug", ""] {
            let filter = parse(&[("GORGE_LOG_LEVEL", given)])
                .expect(given)
                .log_filter;
            let built = tracing_subscriber::EnvFilter::try_new(&filter).expect(&filter);
            let directives = |text: &str| {
                let mut all: Vec<String> = text.split(',').map(str::to_owned).collect();
                all.sort_unstable();
                all
            };
            assert_eq!(
                directives(&built.to_string()),
                directives(&filter),
                "{given:?}"
            );
        }
    }

    /// One parser per variable, and the daemon runs each: a text a
    /// declaration refuses stops the daemon, naming that variable, so
    /// `webhook-admin config`, which runs the same declarations, fails on
    /// exactly what the daemon refuses.
    #[test]
    fn the_daemon_refuses_whatever_a_variables_own_declaration_refuses() {
        let texts = [
            "",
            " ",
            "0",
            "-1",
            "x",
            "99999999999",
            "warning",
            ":0",
            "a,b",
        ];
        let mut refused = 0;
        for v in variables() {
            for text in texts {
                let get = table(&[(v.name, text)]);
                if let Err(own) = v.shown(&get) {
                    refused += 1;
                    let err = DaemonConfig::from_lookup(&get).expect_err(v.name);
                    assert_eq!(err, own, "{}={text:?}", v.name);
                }
            }
        }
        assert!(refused > 60, "{refused}");
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
        let text = environment_help();
        for v in variables() {
            assert!(text.contains(v.name), "{}", v.name);
        }
        assert!(text.contains("default: 256"));
    }

    #[test]
    fn help_shows_the_declared_bounds() {
        let text = environment_help();
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
                "GORGE_WEBHOOK_SHUTDOWN_GRACE_SEC: must be between 1 and 3600 s (set to \"3601\")",
            ),
            (
                "GORGE_WEBHOOK_EVENT_STREAMS",
                "2000",
                "GORGE_WEBHOOK_EVENT_STREAMS: must be between 1 and 1024 (set to \"2000\")",
            ),
            (
                "GORGE_WEBHOOK_MAX_CONCURRENT",
                "0",
                "GORGE_WEBHOOK_MAX_CONCURRENT: must be between 1 and 1024 (set to \"0\")",
            ),
        ] {
            let err = parse(&[(name, value)]).expect_err(name);
            assert_eq!(err.to_string(), message);
        }
    }
}
