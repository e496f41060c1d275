//! The daemon's `GORGE_*` settings as the tool reads them: validated by the
//! same library parsers the daemon composes (`Settings` + `Windows`,
//! `MysqlConfig`, `TransportConfig`, `LocalConfig`), shown with where each value came from,
//! and checked for combinations that do not do what they seem to.
//!
//! Reads no environment itself: everything goes through a lookup function,
//! so tests feed it tables. Secrets (the service token, the database
//! password) are reported as set or empty, never shown.

use ipnet::IpNet;
use serde_json::{json, Value};
use webhook_core::{Setting, Settings, WindowWarning, Windows};
use webhook_store_mysql::local_config::{LocalConfig, LocalConfigError, VARIABLE as LOCAL_CONFIG};
use webhook_store_mysql::{MysqlConfig, MysqlError};
use webhook_transport_hyper::{phorge_deny_list, TransportConfig};

use crate::error::AdminError;

/// A lookup of one variable by name (the process environment, or a table).
pub type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// A poll interval at or above this makes new rows wait noticeably on an
/// idle queue.
const SLOW_POLL_MS: u64 = 10_000;
/// A poll interval below this turns idle instances into a steady query load.
const FAST_POLL_MS: u64 = 100;

/// Everything the database-backed commands need, validated as the daemon
/// validates it.
#[derive(Debug, Clone)]
pub struct AdminConfig {
    /// The three windows and the dispatcher's sizing.
    pub windows: Windows,
    /// Where Phorge's herald database is.
    pub mysql: MysqlConfig,
    /// How receivers are called (signature headers, outbound lists).
    pub transport: TransportConfig,
    /// Phorge's `conf/local/local.json`, where `bin/config set` keeps
    /// `phabricator.silent`; `None` = not read.
    pub local_config: Option<LocalConfig>,
}

impl AdminConfig {
    /// Parses in the daemon's order, so the first bad variable reported is
    /// the one the daemon would report.
    pub fn from_lookup(get: Lookup<'_>) -> Result<Self, AdminError> {
        let windows = Settings::from_lookup(get)
            .and_then(Windows::try_new)
            .map_err(|e| setting(e.setting.env_name(), e.reason))?;
        let mysql =
            MysqlConfig::from_lookup(get, windows.max_concurrent()).map_err(|e| match e {
                MysqlError::InvalidConfig {
                    setting: name,
                    reason,
                } => setting(name, reason),
                other => setting("GORGE_WEBHOOK_MYSQL_HOST", other.to_string()),
            })?;
        let transport = TransportConfig::from_env_with(get)
            .map_err(|e| setting(e.setting.env_name(), e.reason))?;
        let local_config = LocalConfig::from_lookup(get).map_err(|e| match e {
            LocalConfigError::InvalidSetting { reason } => setting(LOCAL_CONFIG, reason),
            other => setting(LOCAL_CONFIG, other.to_string()),
        })?;
        Ok(Self {
            windows,
            mysql,
            transport,
            local_config,
        })
    }
}

fn setting(variable: &str, reason: impl Into<String>) -> AdminError {
    AdminError::Setting {
        variable: variable.to_owned(),
        reason: reason.into(),
    }
}

/// Where a value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The variable is unset: the default applies.
    Default,
    /// The variable is set (possibly to the default's value).
    Environment,
}

impl Source {
    fn as_str(self) -> &'static str {
        match self {
            Self::Default => "default",
            Self::Environment => "environment",
        }
    }
}

/// One row of `config`'s table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The variable.
    pub variable: &'static str,
    /// The value in effect, with its unit.
    pub value: String,
    /// Default or environment.
    pub source: Source,
    /// What the value works out to, when that differs from what was set.
    pub detail: Option<String>,
}

/// How loudly a finding is reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// A setting that does not do what it seems to, or opens a risk.
    Warning,
    /// How a setting really behaves; nothing to fix.
    Note,
}

/// A warning or note about one variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Warning or note.
    pub level: Level,
    /// The variable it is about.
    pub variable: &'static str,
    /// What it means, with the numbers.
    pub message: String,
}

/// `config`'s whole answer.
#[derive(Debug, Clone)]
pub struct Report {
    /// Every variable, in the daemon's `--help` order.
    pub entries: Vec<Entry>,
    /// Warnings first, then notes.
    pub findings: Vec<Finding>,
    config: AdminConfig,
}

/// Shows a secret as set or empty, never its value.
fn secret(value: &str, empty: &str) -> String {
    if value.is_empty() {
        empty.to_owned()
    } else {
        "(set, not shown)".to_owned()
    }
}

fn nets(list: &[IpNet]) -> String {
    if list.is_empty() {
        "(none)".to_owned()
    } else {
        list.iter()
            .map(IpNet::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn secs(n: u64) -> String {
    format!("{n} s")
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Reads, validates and explains every setting.
pub fn report(get: Lookup<'_>) -> Result<Report, AdminError> {
    let config = AdminConfig::from_lookup(get)?;
    let w = &config.windows;
    let s = w.settings();
    let m = &config.mysql;
    let t = &config.transport;
    let raw = |name: &str, default: &str| get(name).unwrap_or_else(|| default.to_owned());
    let daemon_only = Some("read by the daemon only; not checked here".to_owned());

    // (variable, value, detail) in the daemon's `--help` order.
    let rows: Vec<(&'static str, String, Option<String>)> = vec![
        (
            "GORGE_LISTEN_ADDR",
            raw("GORGE_LISTEN_ADDR", ":8160"),
            daemon_only.clone(),
        ),
        (
            "GORGE_SERVICE_TOKEN",
            secret(
                &raw("GORGE_SERVICE_TOKEN", ""),
                "(empty: diagnostics API without auth)",
            ),
            None,
        ),
        ("GORGE_WEBHOOK_MYSQL_HOST", m.host.clone(), None),
        ("GORGE_WEBHOOK_MYSQL_PORT", m.port.to_string(), None),
        ("GORGE_WEBHOOK_MYSQL_USER", m.user.clone(), None),
        (
            "GORGE_WEBHOOK_MYSQL_PASS",
            secret(&m.password, "(empty)"),
            None,
        ),
        ("GORGE_WEBHOOK_MYSQL_TLS", m.tls.to_string(), None),
        (
            "GORGE_WEBHOOK_MYSQL_TLS_CA",
            m.tls_ca_file
                .as_ref()
                .map_or_else(|| "(none)".to_owned(), |p| p.display().to_string()),
            None,
        ),
        (
            "GORGE_WEBHOOK_MYSQL_POOL_MAX",
            m.pool_max.to_string(),
            // Unset or 0 both mean "derive it".
            match get("GORGE_WEBHOOK_MYSQL_POOL_MAX")
                .as_deref()
                .map(str::trim)
            {
                None | Some("0") => Some("derived: 2 x MAX_CONCURRENT + 4".to_owned()),
                Some(_) => None,
            },
        ),
        (
            "GORGE_WEBHOOK_NAMESPACE",
            m.namespace.clone(),
            Some(format!("database {}", m.database())),
        ),
        (
            LOCAL_CONFIG,
            config.local_config.as_ref().map_or_else(
                || "(not set)".to_owned(),
                |c| c.path().display().to_string(),
            ),
            Some(if config.local_config.is_some() {
                "read for phabricator.silent".to_owned()
            } else {
                "silent mode set with bin/config set is not seen (doctor warns)".to_owned()
            }),
        ),
        (
            "GORGE_WEBHOOK_POLL_INTERVAL_MS",
            format!("{} ms", millis(s.poll_interval)),
            Some("spaces idle polls only (see note)".to_owned()),
        ),
        (
            "GORGE_WEBHOOK_DELIVERY_TIMEOUT",
            secs(s.delivery_timeout.as_secs()),
            None,
        ),
        (
            "GORGE_WEBHOOK_MAX_CONCURRENT",
            s.max_concurrent.to_string(),
            None,
        ),
        (
            "GORGE_WEBHOOK_ERROR_BACKOFF_SEC",
            secs(s.breaker_window_secs),
            Some("breaker window".to_owned()),
        ),
        (
            "GORGE_WEBHOOK_ERROR_THRESHOLD",
            s.breaker_threshold.to_string(),
            Some(format!(
                "breaker opens at {} failed rows within {} s",
                s.breaker_threshold, s.breaker_window_secs
            )),
        ),
        (
            "GORGE_WEBHOOK_RETRY_BACKOFF_SEC",
            secs(s.retry_backoff_secs),
            Some(format!(
                "effective retry spacing {} s = max(effective lease, backoff)",
                w.effective_retry_spacing_secs()
            )),
        ),
        (
            "GORGE_WEBHOOK_CLAIM_LEASE_SEC",
            secs(s.claim_lease_secs),
            Some(format!(
                "effective lease {} s = max(this, delivery timeout + 2 s)",
                w.lease_secs()
            )),
        ),
        (
            "GORGE_WEBHOOK_BATCH_SIZE",
            s.batch_size.to_string(),
            Some(format!(
                "effective {} rows per candidate query",
                w.batch_size()
            )),
        ),
        (
            "GORGE_WEBHOOK_SHUTDOWN_GRACE_SEC",
            raw("GORGE_WEBHOOK_SHUTDOWN_GRACE_SEC", "30"),
            daemon_only.clone(),
        ),
        (
            "GORGE_LOG_LEVEL",
            raw("GORGE_LOG_LEVEL", "info"),
            daemon_only.clone(),
        ),
        (
            "GORGE_LOG_FORMAT",
            raw("GORGE_LOG_FORMAT", "text"),
            daemon_only.clone(),
        ),
        (
            "GORGE_WEBHOOK_SIGNATURE_HEADERS",
            t.signature_headers.join(", "),
            None,
        ),
        ("GORGE_WEBHOOK_USER_AGENT", t.user_agent.clone(), None),
        (
            "GORGE_WEBHOOK_MAX_REDIRECTS",
            t.max_redirects.to_string(),
            (t.max_redirects == 0).then(|| "redirects are never followed".to_owned()),
        ),
        (
            "GORGE_WEBHOOK_CONNECT_TIMEOUT_MS",
            format!("{} ms", millis(t.connect_timeout)),
            None,
        ),
        (
            "GORGE_WEBHOOK_RESOLVE_TIMEOUT_MS",
            format!("{} ms", millis(t.resolve_timeout)),
            None,
        ),
        (
            "GORGE_WEBHOOK_RESPONSE_BODY_LIMIT",
            format!("{} bytes", t.response_body_limit),
            None,
        ),
        (
            "GORGE_WEBHOOK_POOL_IDLE_SEC",
            secs(t.pool_idle_timeout.as_secs()),
            None,
        ),
        (
            "GORGE_WEBHOOK_OUTBOUND_DENY",
            if t.outbound_deny == phorge_deny_list() {
                format!(
                    "Phorge's security.outbound-blacklist ({} networks)",
                    t.outbound_deny.len()
                )
            } else {
                nets(&t.outbound_deny)
            },
            None,
        ),
        (
            "GORGE_WEBHOOK_OUTBOUND_ALLOW",
            nets(&t.outbound_allow),
            None,
        ),
        (
            "GORGE_WEBHOOK_CA_FILE",
            match raw("GORGE_WEBHOOK_CA_FILE", "").trim() {
                "" => "(none)".to_owned(),
                path => path.to_owned(),
            },
            None,
        ),
        (
            "GORGE_WEBHOOK_REQUEST_ID_HEADER",
            t.request_id_header
                .clone()
                .unwrap_or_else(|| "(off)".to_owned()),
            None,
        ),
        (
            "GORGE_WEBHOOK_EVENT_STREAMS",
            raw("GORGE_WEBHOOK_EVENT_STREAMS", "16"),
            daemon_only,
        ),
    ];
    let entries = rows
        .into_iter()
        .map(|(variable, value, detail)| Entry {
            variable,
            value,
            source: if get(variable).is_some() {
                Source::Environment
            } else {
                Source::Default
            },
            detail,
        })
        .collect();
    let findings = findings(&config);
    Ok(Report {
        entries,
        findings,
        config,
    })
}

/// Every warning and note for a validated configuration.
pub fn findings(config: &AdminConfig) -> Vec<Finding> {
    let w = &config.windows;
    let mut found: Vec<Finding> = w
        .warnings()
        .into_iter()
        .map(|warning| Finding {
            level: Level::Warning,
            variable: match warning {
                WindowWarning::LeaseRaised { .. } => Setting::ClaimLease.env_name(),
                WindowWarning::BackoffBelowLease { .. } => Setting::RetryBackoff.env_name(),
            },
            message: warning.to_string(),
        })
        .collect();

    for allow in &config.transport.outbound_allow {
        let opened: Vec<String> = config
            .transport
            .outbound_deny
            .iter()
            .filter(|deny| overlaps(allow, deny))
            .map(IpNet::to_string)
            .collect();
        if !opened.is_empty() {
            found.push(Finding {
                level: Level::Warning,
                variable: "GORGE_WEBHOOK_OUTBOUND_ALLOW",
                message: format!(
                    "{allow} opens addresses the deny list closes ({}): a hook URI pointing \
                     there will be called, so anyone who can edit a webhook in Phorge can make \
                     the daemon POST to those internal or reserved addresses",
                    opened.join(", ")
                ),
            });
        }
    }

    let poll_ms = millis(w.poll_interval());
    let poll = Setting::PollInterval.env_name();
    if poll_ms >= SLOW_POLL_MS {
        found.push(Finding {
            level: Level::Warning,
            variable: poll,
            message: format!(
                "{poll} = {poll_ms} ms: on an idle queue a new row waits up to {} before its \
                 first attempt",
                crate::clock::span(poll_ms / 1000)
            ),
        });
    } else if poll_ms < FAST_POLL_MS {
        found.push(Finding {
            level: Level::Warning,
            variable: poll,
            message: format!(
                "{poll} = {poll_ms} ms: every idle daemon instance runs about {} candidate \
                 queries a second; it buys no throughput (a full batch is followed by the next \
                 poll at once)",
                1000 / poll_ms.max(1)
            ),
        });
    }
    found.push(Finding {
        level: Level::Note,
        variable: poll,
        message: format!(
            "{poll} = {poll_ms} ms spaces idle polls only; it does not cap throughput. A \
             candidate query that comes back full ({} rows) is followed by the next one, \
             asking for twice as many, as soon as its rows are nearly handed out; one that \
             found some rows by the next one after {} ms; and up to {} hooks are delivered \
             to at a time (the Go service, by contrast, delivered at most MAX_CONCURRENT \
             rows per tick). It is the longest a new row waits on an idle queue, and how \
             long a hook whose breaker is open or whose lock is held elsewhere is left out \
             of polls.",
            w.batch_size(),
            millis(w.busy_poll_interval()),
            w.max_concurrent()
        ),
    });
    found
}

/// Two CIDR networks share an address (one contains the other).
fn overlaps(a: &IpNet, b: &IpNet) -> bool {
    a.contains(b) || b.contains(a)
}

impl Report {
    /// The terminal form: an aligned table, then warnings and notes.
    pub fn to_text(&self) -> String {
        let width = self
            .entries
            .iter()
            .map(|e| e.variable.len())
            .max()
            .unwrap_or(0);
        let value_width = self
            .entries
            .iter()
            .map(|e| e.value.chars().count())
            .filter(|n| *n <= 40)
            .max()
            .unwrap_or(0);
        let mut out = String::new();
        for e in &self.entries {
            let source = match e.source {
                Source::Default => "default",
                Source::Environment => "env",
            };
            let line = format!(
                "{:width$}  {:7}  {:value_width$}  {}",
                e.variable,
                source,
                e.value,
                e.detail.as_deref().unwrap_or("")
            );
            out.push_str(line.trim_end());
            out.push('\n');
        }
        let w = &self.config.windows;
        out.push_str(&format!(
            "\neffective: claim lease {} s, retry spacing {} s, breaker {} failed rows in {} s, \
             {} rows per candidate query\n",
            w.lease_secs(),
            w.effective_retry_spacing_secs(),
            w.breaker().threshold,
            w.breaker().window_secs,
            w.batch_size()
        ));
        let warnings: Vec<&Finding> = self
            .findings
            .iter()
            .filter(|f| f.level == Level::Warning)
            .collect();
        if warnings.is_empty() {
            out.push_str("\nwarnings: none\n");
        } else {
            out.push_str(&format!("\nwarnings ({}):\n", warnings.len()));
            for f in warnings {
                out.push_str(&format!("  ! {}\n", f.message));
            }
        }
        let notes: Vec<&Finding> = self
            .findings
            .iter()
            .filter(|f| f.level == Level::Note)
            .collect();
        if !notes.is_empty() {
            out.push_str("\nnotes:\n");
            for f in notes {
                out.push_str(&format!("  - {}\n", f.message));
            }
        }
        out
    }

    /// The `--json` form.
    pub fn to_json(&self) -> Value {
        let w = &self.config.windows;
        let finding = |f: &Finding| json!({"variable": f.variable, "message": f.message});
        json!({
            "settings": self.entries.iter().map(|e| json!({
                "variable": e.variable,
                "value": e.value,
                "source": e.source.as_str(),
                "detail": e.detail,
            })).collect::<Vec<_>>(),
            "effective": {
                "pollIntervalMs": millis(w.poll_interval()),
                "deliveryTimeoutSecs": w.delivery_timeout().as_secs(),
                "maxConcurrent": w.max_concurrent(),
                "leaseSecs": w.lease_secs(),
                "retryBackoffSecs": w.settings().retry_backoff_secs,
                "retrySpacingSecs": w.effective_retry_spacing_secs(),
                "breakerWindowSecs": w.breaker().window_secs,
                "breakerThreshold": w.breaker().threshold,
                "batchSize": w.batch_size(),
                "database": self.config.mysql.database(),
            },
            "warnings": self.findings.iter().filter(|f| f.level == Level::Warning)
                .map(finding).collect::<Vec<_>>(),
            "notes": self.findings.iter().filter(|f| f.level == Level::Note)
                .map(finding).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn report_for(pairs: &[(&str, &str)]) -> Result<Report, AdminError> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        report(&|name| map.get(name).cloned())
    }

    fn warnings(r: &Report) -> Vec<&Finding> {
        r.findings
            .iter()
            .filter(|f| f.level == Level::Warning)
            .collect()
    }

    #[test]
    fn defaults_have_no_warnings_and_every_source_is_default() {
        let r = report_for(&[]).expect("defaults are valid");
        assert!(warnings(&r).is_empty(), "{:?}", r.findings);
        assert!(r.entries.iter().all(|e| e.source == Source::Default));
        let lease = r
            .entries
            .iter()
            .find(|e| e.variable == "GORGE_WEBHOOK_CLAIM_LEASE_SEC")
            .expect("listed");
        assert_eq!(lease.value, "30 s");
        let local = r
            .entries
            .iter()
            .find(|e| e.variable == "GORGE_PHORGE_LOCAL_CONFIG")
            .expect("listed");
        assert_eq!(local.value, "(not set)");
        assert!(r
            .findings
            .iter()
            .any(|f| f.level == Level::Note && f.message.contains("does not cap throughput")));
    }

    #[test]
    fn set_variables_are_attributed_to_the_environment() {
        let r = report_for(&[("GORGE_WEBHOOK_MAX_CONCURRENT", "8")]).expect("valid");
        let entry = r
            .entries
            .iter()
            .find(|e| e.variable == "GORGE_WEBHOOK_MAX_CONCURRENT")
            .expect("listed");
        assert_eq!(
            (entry.value.as_str(), entry.source),
            ("8", Source::Environment)
        );
    }

    #[test]
    fn backoff_below_lease_and_raised_lease_are_warned_about() {
        let r = report_for(&[
            ("GORGE_WEBHOOK_RETRY_BACKOFF_SEC", "10"),
            ("GORGE_WEBHOOK_CLAIM_LEASE_SEC", "5"),
        ])
        .expect("valid");
        let vars: Vec<&str> = warnings(&r).iter().map(|f| f.variable).collect();
        assert_eq!(
            vars,
            vec![
                "GORGE_WEBHOOK_CLAIM_LEASE_SEC",
                "GORGE_WEBHOOK_RETRY_BACKOFF_SEC"
            ]
        );
        assert!(warnings(&r)[0].message.contains("using 17s"));
        assert!(warnings(&r)[1].message.contains("every 17s"));
    }

    #[test]
    fn an_allow_list_overlapping_the_deny_list_is_a_warning() {
        let r = report_for(&[("GORGE_WEBHOOK_OUTBOUND_ALLOW", "127.0.0.1/32, 8.8.8.0/24")])
            .expect("valid");
        let w = warnings(&r);
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(w[0].variable, "GORGE_WEBHOOK_OUTBOUND_ALLOW");
        assert!(
            w[0].message.starts_with("127.0.0.1/32 opens"),
            "{}",
            w[0].message
        );
        assert!(w[0].message.contains("127.0.0.0/8"));
        // A custom deny list is what the allow list is compared with.
        let r = report_for(&[
            ("GORGE_WEBHOOK_OUTBOUND_DENY", "10.0.0.0/8"),
            ("GORGE_WEBHOOK_OUTBOUND_ALLOW", "127.0.0.1/32"),
        ])
        .expect("valid");
        assert!(warnings(&r).is_empty());
    }

    #[test]
    fn overlap_is_containment_either_way_within_a_family() {
        let net = |s: &str| s.parse::<IpNet>().expect("net");
        assert!(overlaps(&net("10.1.0.0/16"), &net("10.0.0.0/8")));
        assert!(overlaps(&net("0.0.0.0/0"), &net("192.168.0.0/16")));
        assert!(!overlaps(&net("11.0.0.0/8"), &net("10.0.0.0/8")));
        assert!(!overlaps(&net("::/0"), &net("10.0.0.0/8")));
    }

    #[test]
    fn extreme_poll_intervals_are_warned_about() {
        let slow = report_for(&[("GORGE_WEBHOOK_POLL_INTERVAL_MS", "30000")]).expect("valid");
        assert!(warnings(&slow)[0].message.contains("waits up to 30s"));
        let fast = report_for(&[("GORGE_WEBHOOK_POLL_INTERVAL_MS", "20")]).expect("valid");
        assert!(warnings(&fast)[0].message.contains("about 50 candidate"));
    }

    #[test]
    fn bad_values_name_their_variable() {
        for (name, value) in [
            ("GORGE_WEBHOOK_CLAIM_LEASE_SEC", "0"),
            ("GORGE_WEBHOOK_MYSQL_PORT", "abc"),
            ("GORGE_WEBHOOK_NAMESPACE", ""),
            ("GORGE_WEBHOOK_OUTBOUND_ALLOW", "nope"),
            ("GORGE_PHORGE_LOCAL_CONFIG", "local.json"),
        ] {
            match report_for(&[(name, value)]) {
                Err(AdminError::Setting { variable, .. }) => assert_eq!(variable, name),
                other => panic!("{name}={value}: {other:?}"),
            }
        }
    }

    #[test]
    fn secrets_are_never_shown() {
        let r = report_for(&[
            ("GORGE_SERVICE_TOKEN", "tok-3141"),
            ("GORGE_WEBHOOK_MYSQL_PASS", "pw-2718"),
        ])
        .expect("valid");
        let text = r.to_text();
        let json = r.to_json().to_string();
        for shown in [&text, &json] {
            assert!(!shown.contains("tok-3141") && !shown.contains("pw-2718"));
            assert!(shown.contains("(set, not shown)"));
        }
    }
}
