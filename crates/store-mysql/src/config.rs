//! Connection settings — their `GORGE_WEBHOOK_MYSQL_*` and
//! `GORGE_WEBHOOK_NAMESPACE` variables, declared once here — their
//! validation, and the `mysql_async` options built from them.
//! [`MysqlConfig::from_lookup`] reads the variables through a lookup
//! function the binary supplies; nothing here touches the process
//! environment or the network.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use webhook_core::setting::{
    switch, text, Bounds, Lookup, Setting, SettingError, SettingInfo, Unit, Zero,
};

use mysql_async::{OptsBuilder, PoolConstraints, PoolOpts, SslOpts};

/// `GORGE_WEBHOOK_MYSQL_HOST`
pub const HOST: Setting<String> = Setting::new(
    "GORGE_WEBHOOK_MYSQL_HOST",
    "127.0.0.1",
    "MySQL/MariaDB host",
    not_blank,
);
/// `GORGE_WEBHOOK_MYSQL_PORT`
pub const PORT: Setting<u16> = Setting::number(
    "GORGE_WEBHOOK_MYSQL_PORT",
    "3306",
    "MySQL/MariaDB port",
    Bounds::between(1, 65_535, Unit::Count),
);
/// `GORGE_WEBHOOK_MYSQL_USER`
pub const USER: Setting<String> = Setting::new(
    "GORGE_WEBHOOK_MYSQL_USER",
    "phorge",
    "MySQL user",
    not_blank,
);
/// `GORGE_WEBHOOK_MYSQL_PASS`
pub const PASS: Setting<String> =
    Setting::new("GORGE_WEBHOOK_MYSQL_PASS", "", "MySQL password", text).secret();
/// `GORGE_WEBHOOK_MYSQL_TLS`
pub const TLS: Setting<bool> = Setting::new(
    "GORGE_WEBHOOK_MYSQL_TLS",
    "false",
    "require TLS to the database (rustls)",
    switch,
);
/// `GORGE_WEBHOOK_MYSQL_TLS_CA`: empty = the built-in web roots.
pub const TLS_CA: Setting<Option<PathBuf>> = Setting::new(
    "GORGE_WEBHOOK_MYSQL_TLS_CA",
    "",
    "PEM file of CAs for the database's certificate",
    |raw| Ok((!raw.is_empty()).then(|| PathBuf::from(raw))),
);
/// `GORGE_WEBHOOK_MYSQL_POOL_MAX`: the pooled connections the statements
/// run on (polls, group commits, lookups), sized by what they need, not
/// by the concurrency: a held hook lock pins no pooled connection
/// (`crate::lock`). 0 reads as the default (it once meant a size derived
/// from `GORGE_WEBHOOK_MAX_CONCURRENT`).
pub const POOL_MAX: Setting<usize> = Setting::number(
    "GORGE_WEBHOOK_MYSQL_POOL_MAX",
    "16",
    "pooled database connections for statements at most; 0 = the default",
    Bounds::at_least(1, Unit::Count).or_zero(Zero::Default),
);
/// `GORGE_WEBHOOK_MYSQL_LOCK_SESSIONS`: the sessions, besides the pool,
/// that take, hold and free the hooks' named locks, each holding many
/// (`crate::lock`); each opens only when first needed.
pub const LOCK_SESSIONS: Setting<usize> = Setting::number(
    "GORGE_WEBHOOK_MYSQL_LOCK_SESSIONS",
    "4",
    "database sessions holding the hook locks, many each (besides the pool)",
    Bounds::between(1, 64, Unit::Count),
);
/// `GORGE_WEBHOOK_MYSQL_CONNECT_TIMEOUT_MS`: how long to wait for a
/// connection (TCP connect, handshake, or a free pool slot) before calling
/// the database unavailable.
pub const CONNECT_TIMEOUT: Setting<Duration> = Setting::number(
    "GORGE_WEBHOOK_MYSQL_CONNECT_TIMEOUT_MS",
    "5000",
    "bound on getting a database connection (TCP, TLS, handshake, pool slot)",
    Bounds::at_least(1, Unit::Millis),
);
/// `GORGE_WEBHOOK_MYSQL_STATEMENT_TIMEOUT_MS`: how long one statement may
/// take before its connection is abandoned and the database called
/// unavailable (`crate::session`). Far above what any of the daemon's
/// statements takes on a healthy server (the candidate query reads its
/// batch through `key_status` in milliseconds even with millions of
/// retained rows; docs/operations/database.md), and below the claim lease, so a
/// write-back that met a frozen connection is retried on a fresh one while
/// its claim still holds. At most an hour.
pub const STATEMENT_TIMEOUT: Setting<Duration> = Setting::number(
    "GORGE_WEBHOOK_MYSQL_STATEMENT_TIMEOUT_MS",
    "10000",
    "bound on one database statement; then its connection is abandoned",
    Bounds::between(1, 3_600_000, Unit::Millis),
);
/// `GORGE_WEBHOOK_MYSQL_KEEPALIVE_SEC`: TCP keepalive on database sockets,
/// the idle time before the first probe; 0 = off. It keeps NAT and
/// load-balancer entries from expiring under an idle connection, and lets
/// the kernel find a dead peer in the end; it cannot see a path that still
/// acknowledges but forwards nothing, which is what the statement timeout
/// is for.
pub const KEEPALIVE: Setting<Option<Duration>> = Setting::number(
    "GORGE_WEBHOOK_MYSQL_KEEPALIVE_SEC",
    "30",
    "TCP keepalive idle time on database sockets; 0 = off",
    Bounds::between(1, 3_600, Unit::Secs).or_zero(Zero::Off),
);
/// `GORGE_WEBHOOK_NAMESPACE`
pub const NAMESPACE: Setting<String> = Setting::new(
    "GORGE_WEBHOOK_NAMESPACE",
    "phorge",
    "Phorge storage namespace; the database is {namespace}_herald",
    |raw| check_namespace(raw).map(|()| raw.to_owned()),
);

/// `GORGE_WEBHOOK_ADOPT_PHP_TASKS`
pub const ADOPT_PHP_TASKS: Setting<bool> = Setting::new(
    "GORGE_WEBHOOK_ADOPT_PHP_TASKS",
    "false",
    "lease Phorge's HeraldWebhookWorker tasks so phd never runs them, and archive \
     them when their request ends (upstream Phorge, which has no hand-off switch); \
     needs SELECT, UPDATE, DELETE on {namespace}_worker.worker_activetask and INSERT \
     on {namespace}_worker.worker_archivetask",
    switch,
);

/// `GORGE_WEBHOOK_WAKE_BINLOG`: follow the server's binary log for new
/// rows (`crate::binlog`), where it is on and the account may read it.
pub const WAKE_BINLOG: Setting<bool> = Setting::new(
    "GORGE_WEBHOOK_WAKE_BINLOG",
    "true",
    "follow the server's binary log for new rows where it is on and the account holds \
     REPLICATION SLAVE and BINLOG MONITOR (MySQL, MariaDB before 10.5.2: REPLICATION CLIENT); \
     otherwise, or when off, the wake-up probe notices them",
    switch,
);

/// The database's variables, in `--help` order.
pub const VARIABLES: &[SettingInfo] = &[
    HOST.info(),
    PORT.info(),
    USER.info(),
    PASS.info(),
    TLS.info(),
    TLS_CA.info(),
    POOL_MAX.info(),
    LOCK_SESSIONS.info(),
    CONNECT_TIMEOUT.info(),
    STATEMENT_TIMEOUT.info(),
    KEEPALIVE.info(),
    NAMESPACE.info(),
    ADOPT_PHP_TASKS.info(),
    WAKE_BINLOG.info(),
];

/// Idle connections are kept this long, so the per-connection prepared
/// statement cache survives between poll ticks.
const IDLE_CONNECTION_TTL: Duration = Duration::from_secs(60);

/// MySQL's limit on a database name; `_herald` takes seven of it.
const MAX_DATABASE_NAME: usize = 64;
const DATABASE_SUFFIX: &str = "_herald";

/// Where Phorge's herald database lives and how to reach it.
#[derive(Clone, PartialEq, Eq)]
pub struct MysqlConfig {
    /// Server host name or IP address.
    pub host: String,
    /// Server TCP port.
    pub port: u16,
    /// Account name.
    pub user: String,
    /// Account password; empty means none.
    pub password: String,
    /// Phorge's `storage.default-namespace`; the database is
    /// `{namespace}_herald` and the hook lock names derive from it.
    pub namespace: String,
    /// Most pooled connections open at once (the statements').
    pub pool_max: usize,
    /// Sessions holding the hook locks, each holding many, besides the
    /// pool: at most `pool_max + lock_sessions` connections in all.
    pub lock_sessions: usize,
    /// Require TLS to the server.
    pub tls: bool,
    /// A PEM file of CA certificates to trust instead of the built-in
    /// web roots (only with `tls`).
    pub tls_ca_file: Option<PathBuf>,
    /// See [`CONNECT_TIMEOUT`].
    pub connect_timeout: Duration,
    /// See [`STATEMENT_TIMEOUT`].
    pub statement_timeout: Duration,
    /// See [`KEEPALIVE`]; `None` = off.
    pub tcp_keepalive: Option<Duration>,
    /// See [`ADOPT_PHP_TASKS`].
    pub adopt_php_tasks: bool,
    /// See [`WAKE_BINLOG`].
    pub wake_binlog: bool,
}

impl Default for MysqlConfig {
    /// protocol §9's defaults: `phorge@127.0.0.1:3306`, no password, namespace
    /// `phorge`, no TLS.
    fn default() -> Self {
        Self {
            host: HOST.default_value(),
            port: PORT.default_value(),
            user: USER.default_value(),
            password: PASS.default_value(),
            namespace: NAMESPACE.default_value(),
            pool_max: POOL_MAX.default_value(),
            lock_sessions: LOCK_SESSIONS.default_value(),
            tls: TLS.default_value(),
            tls_ca_file: TLS_CA.default_value(),
            connect_timeout: CONNECT_TIMEOUT.default_value(),
            statement_timeout: STATEMENT_TIMEOUT.default_value(),
            tcp_keepalive: KEEPALIVE.default_value(),
            adopt_php_tasks: ADOPT_PHP_TASKS.default_value(),
            wake_binlog: WAKE_BINLOG.default_value(),
        }
    }
}

// Hand-written so the password never reaches a log through `{:?}`.
impl fmt::Debug for MysqlConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlConfig")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field(
                "password",
                &if self.password.is_empty() {
                    "<empty>"
                } else {
                    "<redacted>"
                },
            )
            .field("namespace", &self.namespace)
            .field("pool_max", &self.pool_max)
            .field("lock_sessions", &self.lock_sessions)
            .field("tls", &self.tls)
            .field("tls_ca_file", &self.tls_ca_file)
            .field("connect_timeout", &self.connect_timeout)
            .field("statement_timeout", &self.statement_timeout)
            .field("tcp_keepalive", &self.tcp_keepalive)
            .field("adopt_php_tasks", &self.adopt_php_tasks)
            .field("wake_binlog", &self.wake_binlog)
            .finish()
    }
}

impl MysqlConfig {
    /// The herald database: `{namespace}_herald`.
    pub fn database(&self) -> String {
        format!("{}{DATABASE_SUFFIX}", self.namespace)
    }

    /// Reads the `GORGE_WEBHOOK_MYSQL_*` and `GORGE_WEBHOOK_NAMESPACE`
    /// variables through `get` (protocol §9 defaults) and validates them; an
    /// error names the variable.
    pub fn from_lookup(get: Lookup<'_>) -> Result<Self, SettingError> {
        let config = Self {
            host: HOST.read(get)?,
            port: PORT.read(get)?,
            user: USER.read(get)?,
            password: PASS.read(get)?,
            namespace: NAMESPACE.read(get)?,
            pool_max: POOL_MAX.read(get)?,
            lock_sessions: LOCK_SESSIONS.read(get)?,
            tls: TLS.read(get)?,
            tls_ca_file: TLS_CA.read(get)?,
            connect_timeout: CONNECT_TIMEOUT.read(get)?,
            statement_timeout: STATEMENT_TIMEOUT.read(get)?,
            tcp_keepalive: KEEPALIVE.read(get)?,
            adopt_php_tasks: ADOPT_PHP_TASKS.read(get)?,
            wake_binlog: WAKE_BINLOG.read(get)?,
        };
        config.check_together()?;
        Ok(config)
    }

    /// Checks every setting without connecting, each by its variable's
    /// declaration (the values may have been built in code), then the
    /// rules between them; the error names the variable.
    pub fn validate(&self) -> Result<(), SettingError> {
        HOST.parse_text(&self.host)?;
        PORT.check(&self.port)?;
        USER.parse_text(&self.user)?;
        NAMESPACE.parse_text(&self.namespace)?;
        LOCK_SESSIONS.check(&self.lock_sessions)?;
        POOL_MAX.check(&self.pool_max)?;
        CONNECT_TIMEOUT.check(&self.connect_timeout)?;
        STATEMENT_TIMEOUT.check(&self.statement_timeout)?;
        KEEPALIVE.check(&self.tcp_keepalive)?;
        self.check_together()
    }

    /// The rules between settings: a CA file only with TLS, and one that
    /// can be read.
    fn check_together(&self) -> Result<(), SettingError> {
        let Some(path) = &self.tls_ca_file else {
            return Ok(());
        };
        if !self.tls {
            return Err(SettingError::new(
                TLS_CA.name,
                format!(
                    "is set but {} is off; enable TLS or drop the CA file",
                    TLS.name
                ),
            ));
        }
        // Only a local file check: a typo would otherwise surface as a
        // database that never becomes ready.
        std::fs::metadata(path).map(drop).map_err(|err| {
            SettingError::new(
                TLS_CA.name,
                format!(
                    "the file it names cannot be read: {err} (set to {})",
                    TLS_CA.given(&path.to_string_lossy())
                ),
            )
        })
    }

    /// The driver options. Assumes [`validate`](Self::validate) passed.
    pub(crate) fn opts(&self) -> OptsBuilder {
        // `max(1)` keeps the constraint valid even unvalidated; `validate`
        // already rejects 0.
        let constraints = PoolConstraints::new(0, self.pool_max.max(1)).unwrap_or_default();
        let pool = PoolOpts::default()
            .with_constraints(constraints)
            .with_inactive_connection_ttl(IDLE_CONNECTION_TTL)
            // Pooled connections keep no session state (hook locks live
            // on the lock sessions, outside the pool: `crate::lock`), and
            // resetting every connection on return would also empty its
            // prepared statement cache.
            .with_reset_connection(false);
        let ssl = self.tls.then(|| {
            let opts = SslOpts::default();
            match &self.tls_ca_file {
                Some(path) => opts
                    .with_root_certs(vec![path.clone().into()])
                    .with_disable_built_in_roots(true),
                None => opts,
            }
        });
        OptsBuilder::default()
            .ip_or_hostname(self.host.clone())
            .tcp_port(self.port)
            .user(Some(self.user.clone()))
            .pass((!self.password.is_empty()).then(|| self.password.clone()))
            .db_name(Some(self.database()))
            // The configured address is the contract: no silent switch to
            // the local socket the server advertises.
            .prefer_socket(false)
            // "Affected" must mean "matched": a guarded write that happens
            // to store identical values still landed.
            .client_found_rows(true)
            .tcp_keepalive(self.tcp_keepalive)
            .pool_opts(pool)
            .ssl_opts(ssl)
    }
}

/// Text that must hold more than blanks.
fn not_blank(raw: &str) -> Result<String, String> {
    if raw.trim().is_empty() {
        Err("must not be empty".to_owned())
    } else {
        Ok(raw.to_owned())
    }
}

fn check_namespace(namespace: &str) -> Result<(), String> {
    if namespace.is_empty() {
        return Err("must not be empty".to_owned());
    }
    let max = MAX_DATABASE_NAME - DATABASE_SUFFIX.len();
    if namespace.len() > max {
        return Err(format!(
            "must be at most {max} bytes so `{{namespace}}{DATABASE_SUFFIX}` is a valid database name"
        ));
    }
    // Phorge's lock names are built from the namespace's bytes; ASCII keeps
    // ours byte-identical (and Phorge's own database names are ASCII).
    if !namespace.is_ascii() {
        return Err("must be ASCII".to_owned());
    }
    if namespace
        .chars()
        .any(|c| matches!(c, '/' | '\\' | '.' | '`') || c.is_control())
    {
        return Err("must not contain '/', '\\', '.', '`' or control characters".to_owned());
    }
    if namespace.ends_with(' ') {
        return Err("must not end with a space".to_owned());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use webhook_core::setting::table;

    fn setting(config: &MysqlConfig) -> Option<&'static str> {
        config.validate().err().map(|err| err.variable)
    }

    #[test]
    fn defaults_are_valid_and_name_the_herald_database() {
        let config = MysqlConfig::default();
        assert_eq!(setting(&config), None);
        assert_eq!(config.database(), "phorge_herald");
        assert_eq!(config.pool_max, 16);
        assert_eq!(config.lock_sessions, 4);
    }

    #[test]
    fn the_pool_is_sized_apart_from_the_concurrency_and_holds_the_lock_sessions() {
        let read = |pairs: &[(&str, &str)]| MysqlConfig::from_lookup(&table(pairs));
        let defaults = read(&[]).expect("defaults");
        assert_eq!((defaults.pool_max, defaults.lock_sessions), (16, 4));
        let zero = read(&[("GORGE_WEBHOOK_MYSQL_POOL_MAX", "0")]).expect("0 = the default");
        assert_eq!(zero.pool_max, 16);
        let set = read(&[
            ("GORGE_WEBHOOK_MYSQL_POOL_MAX", "6"),
            ("GORGE_WEBHOOK_MYSQL_LOCK_SESSIONS", "2"),
            ("GORGE_WEBHOOK_MAX_CONCURRENT", "512"),
        ])
        .expect("valid: the concurrency does not size the pool");
        assert_eq!((set.pool_max, set.lock_sessions), (6, 2));
        for (pairs, variable) in [
            (
                &[("GORGE_WEBHOOK_MYSQL_LOCK_SESSIONS", "0")][..],
                "GORGE_WEBHOOK_MYSQL_LOCK_SESSIONS",
            ),
            (
                &[("GORGE_WEBHOOK_MYSQL_LOCK_SESSIONS", "65")][..],
                "GORGE_WEBHOOK_MYSQL_LOCK_SESSIONS",
            ),
        ] {
            match read(pairs) {
                Err(err) => assert_eq!(err.variable, variable, "{pairs:?}"),
                other => panic!("{pairs:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn each_bad_setting_is_named() {
        let base = MysqlConfig::default();
        let cases = [
            (
                MysqlConfig {
                    host: " ".into(),
                    ..base.clone()
                },
                HOST.name,
            ),
            (
                MysqlConfig {
                    port: 0,
                    ..base.clone()
                },
                PORT.name,
            ),
            (
                MysqlConfig {
                    user: String::new(),
                    ..base.clone()
                },
                USER.name,
            ),
            (
                MysqlConfig {
                    namespace: String::new(),
                    ..base.clone()
                },
                NAMESPACE.name,
            ),
            (
                MysqlConfig {
                    namespace: "a".repeat(58),
                    ..base.clone()
                },
                NAMESPACE.name,
            ),
            (
                MysqlConfig {
                    namespace: "a.b".into(),
                    ..base.clone()
                },
                NAMESPACE.name,
            ),
            (
                MysqlConfig {
                    pool_max: 0,
                    ..base.clone()
                },
                POOL_MAX.name,
            ),
            (
                MysqlConfig {
                    lock_sessions: 0,
                    ..base.clone()
                },
                LOCK_SESSIONS.name,
            ),
            (
                MysqlConfig {
                    connect_timeout: Duration::ZERO,
                    ..base.clone()
                },
                CONNECT_TIMEOUT.name,
            ),
            (
                MysqlConfig {
                    statement_timeout: Duration::ZERO,
                    ..base.clone()
                },
                STATEMENT_TIMEOUT.name,
            ),
            (
                MysqlConfig {
                    statement_timeout: Duration::from_secs(7_200),
                    ..base.clone()
                },
                STATEMENT_TIMEOUT.name,
            ),
            (
                MysqlConfig {
                    tcp_keepalive: Some(Duration::ZERO),
                    ..base.clone()
                },
                KEEPALIVE.name,
            ),
            (
                MysqlConfig {
                    tls_ca_file: Some("/nonexistent/ca.pem".into()),
                    ..base.clone()
                },
                TLS_CA.name,
            ),
            (
                MysqlConfig {
                    tls: true,
                    tls_ca_file: Some("/nonexistent/ca.pem".into()),
                    ..base.clone()
                },
                TLS_CA.name,
            ),
        ];
        for (config, expected) in cases {
            assert_eq!(setting(&config), Some(expected), "{config:?}");
        }
        let longest = MysqlConfig {
            namespace: "a".repeat(57),
            ..base
        };
        assert_eq!(setting(&longest), None);
        assert_eq!(longest.database().len(), 64);
    }

    #[test]
    fn timeouts_are_read_and_bad_ones_named() {
        let read = |pairs: &[(&str, &str)]| MysqlConfig::from_lookup(&table(pairs));
        let defaults = read(&[]).expect("defaults");
        assert_eq!(defaults.connect_timeout, Duration::from_secs(5));
        assert_eq!(defaults.statement_timeout, Duration::from_secs(10));
        assert_eq!(defaults.tcp_keepalive, Some(Duration::from_secs(30)));
        assert_eq!(defaults, MysqlConfig::default());
        let set = read(&[
            ("GORGE_WEBHOOK_MYSQL_CONNECT_TIMEOUT_MS", "1500"),
            ("GORGE_WEBHOOK_MYSQL_STATEMENT_TIMEOUT_MS", "2500"),
            ("GORGE_WEBHOOK_MYSQL_KEEPALIVE_SEC", "0"),
        ])
        .expect("valid");
        assert_eq!(set.connect_timeout, Duration::from_millis(1_500));
        assert_eq!(set.statement_timeout, Duration::from_millis(2_500));
        assert_eq!(set.tcp_keepalive, None);
        for (name, value) in [
            ("GORGE_WEBHOOK_MYSQL_CONNECT_TIMEOUT_MS", "0"),
            ("GORGE_WEBHOOK_MYSQL_CONNECT_TIMEOUT_MS", "soon"),
            ("GORGE_WEBHOOK_MYSQL_STATEMENT_TIMEOUT_MS", "0"),
            ("GORGE_WEBHOOK_MYSQL_STATEMENT_TIMEOUT_MS", "99999999"),
            ("GORGE_WEBHOOK_MYSQL_KEEPALIVE_SEC", "-1"),
        ] {
            match read(&[(name, value)]) {
                Err(err) => assert_eq!(err.variable, name, "{name}={value}"),
                other => panic!("{name}={value}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_bound_is_refused_naming_its_variable_and_the_bound() {
        for (name, value, message) in [
            (
                "GORGE_WEBHOOK_MYSQL_LOCK_SESSIONS",
                "65",
                "GORGE_WEBHOOK_MYSQL_LOCK_SESSIONS: must be between 1 and 64",
            ),
            (
                "GORGE_WEBHOOK_MYSQL_PORT",
                "65536",
                "GORGE_WEBHOOK_MYSQL_PORT: must be between 1 and 65535",
            ),
            (
                "GORGE_WEBHOOK_MYSQL_STATEMENT_TIMEOUT_MS",
                "3600001",
                "GORGE_WEBHOOK_MYSQL_STATEMENT_TIMEOUT_MS: must be between 1 and 3600000 ms",
            ),
            (
                "GORGE_WEBHOOK_MYSQL_KEEPALIVE_SEC",
                "3601",
                "GORGE_WEBHOOK_MYSQL_KEEPALIVE_SEC: must be 0 or between 1 and 3600 s",
            ),
            (
                "GORGE_WEBHOOK_MYSQL_CONNECT_TIMEOUT_MS",
                "0",
                "GORGE_WEBHOOK_MYSQL_CONNECT_TIMEOUT_MS: must be at least 1 ms",
            ),
        ] {
            let err = MysqlConfig::from_lookup(&table(&[(name, value)])).expect_err(name);
            assert_eq!(err.to_string(), format!("{message} (set to {value:?})"));
        }
        // A hand-built value meets the same bound, named the same way.
        let err = MysqlConfig {
            lock_sessions: 65,
            ..MysqlConfig::default()
        }
        .validate()
        .expect_err("65");
        assert_eq!(
            err.to_string(),
            "GORGE_WEBHOOK_MYSQL_LOCK_SESSIONS: must be between 1 and 64"
        );
    }

    #[test]
    fn debug_hides_the_password() {
        let config = MysqlConfig {
            password: "hunter2".into(),
            ..MysqlConfig::default()
        };
        let text = format!("{config:?}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("<redacted>"));
    }

    #[test]
    fn options_carry_the_contract() {
        let opts = mysql_async::Opts::from(
            MysqlConfig {
                password: "pw".into(),
                pool_max: 3,
                lock_sessions: 1,
                namespace: "ns".into(),
                ..MysqlConfig::default()
            }
            .opts(),
        );
        assert!(opts.client_found_rows());
        assert!(!opts.prefer_socket());
        assert_eq!(opts.db_name(), Some("ns_herald"));
        assert_eq!(opts.pass(), Some("pw"));
        assert_eq!(opts.pool_opts().constraints().max(), 3);
        assert_eq!(opts.pool_opts().constraints().min(), 0);
        assert!(!opts.pool_opts().reset_connection());
        assert!(opts.ssl_opts().is_none());
        assert_eq!(opts.tcp_keepalive(), Some(Duration::from_secs(30)));
        let empty = mysql_async::Opts::from(MysqlConfig::default().opts());
        assert_eq!(empty.pass(), None);
    }
}
