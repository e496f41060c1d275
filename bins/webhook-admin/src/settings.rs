//! The daemon's `GORGE_*` settings as the tool reads them: validated by the
//! daemon's own parsing (`webhook_daemon::config::DeliveryConfig`: the
//! windows, the database, the transport and Phorge's local config), listed
//! from the daemon's registry (`webhook_daemon::config::variables`, in
//! `--help` order) with where each value came from and what it works out
//! to, and checked for combinations that do not do what they seem to.
//!
//! Reads no environment itself: everything goes through a lookup function,
//! so tests feed it tables. Secrets (the service token, the database
//! password) are reported as set or empty, never shown.

use std::collections::HashMap;

use ipnet::IpNet;
use serde_json::{json, Value};
use webhook_core::setting::{Lookup, SettingInfo};
use webhook_core::signing::{KEY_GRACE, STANDARD_SIGNATURES};
use webhook_core::windows::{
    BATCH_SIZE, BREAKER_THRESHOLD, BREAKER_WINDOW, CLAIM_LEASE, DELIVERY_TIMEOUT, MAX_CONCURRENT,
    POLL_INTERVAL, RETRY_AFTER_MAX, RETRY_AFTER_MIN, RETRY_BACKOFF,
};
use webhook_core::{StandardScope, WindowWarning};
use webhook_daemon::config::{own_variables, variables, SERVICE_TOKEN};
use webhook_store_mysql::config as mysql;
use webhook_store_mysql::local_config::LOCAL_CONFIG;
use webhook_transport_hyper::config as transport;
use webhook_transport_hyper::phorge_deny_list;

use crate::error::AdminError;

/// A poll interval at or above this makes new rows wait noticeably on an
/// idle queue.
const SLOW_POLL_MS: u64 = 10_000;
/// A poll interval below this turns idle instances into a steady query load.
const FAST_POLL_MS: u64 = 100;

/// Everything the database-backed commands need, validated as the daemon
/// validates it (its `DeliveryConfig`, so the first bad variable reported
/// is the one the daemon would report).
pub use webhook_daemon::config::DeliveryConfig as AdminConfig;

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
    let mut shown = shown_values(&config, get);
    let daemon_only: Vec<&str> = own_variables().map(|v| v.name).collect();
    let entries = variables()
        .map(|info| {
            let (value, detail) = shown.remove(info.name).unwrap_or_else(|| {
                let detail = daemon_only
                    .contains(&info.name)
                    .then(|| "read by the daemon only; not checked here".to_owned());
                (plain(info, get), detail)
            });
            Entry {
                variable: info.name,
                value,
                source: if info.is_set(get) {
                    Source::Environment
                } else {
                    Source::Default
                },
                detail,
            }
        })
        .collect();
    let findings = findings(&config);
    Ok(Report {
        entries,
        findings,
        config,
    })
}

/// A variable with nothing more to say than its text (or its default's);
/// a secret only as set or empty.
fn plain(info: &SettingInfo, get: Lookup<'_>) -> String {
    let text = info.text(get);
    if info.secret {
        secret(&text, "(empty)")
    } else {
        text
    }
}

/// What the variables that the validated settings explain work out to,
/// with their units and derivations: (value, detail) by variable.
fn shown_values(
    config: &AdminConfig,
    get: Lookup<'_>,
) -> HashMap<&'static str, (String, Option<String>)> {
    let w = &config.windows;
    let s = w.settings();
    let m = &config.mysql;
    let t = config.transport.config();
    let ms = |d: std::time::Duration| format!("{} ms", millis(d));
    let rows: Vec<(&'static str, String, Option<String>)> = vec![
        (
            SERVICE_TOKEN.name,
            secret(
                &SERVICE_TOKEN.info().text(get),
                "(empty: diagnostics API without auth)",
            ),
            None,
        ),
        (mysql::HOST.name, m.host.clone(), None),
        (mysql::PORT.name, m.port.to_string(), None),
        (mysql::USER.name, m.user.clone(), None),
        (mysql::PASS.name, secret(&m.password, "(empty)"), None),
        (mysql::TLS.name, m.tls.to_string(), None),
        (
            mysql::TLS_CA.name,
            m.tls_ca_file
                .as_ref()
                .map_or_else(|| "(none)".to_owned(), |p| p.display().to_string()),
            None,
        ),
        (
            mysql::POOL_MAX.name,
            m.pool_max.to_string(),
            matches!(mysql::POOL_MAX.read(get), Ok(0)).then(|| "0 means the default".to_owned()),
        ),
        (
            mysql::LOCK_SESSIONS.name,
            m.lock_sessions.to_string(),
            Some(format!(
                "at most {} database sessions in all",
                m.pool_max + m.lock_sessions
            )),
        ),
        (mysql::CONNECT_TIMEOUT.name, ms(m.connect_timeout), None),
        (mysql::STATEMENT_TIMEOUT.name, ms(m.statement_timeout), None),
        (
            mysql::KEEPALIVE.name,
            m.tcp_keepalive
                .map_or_else(|| "(off)".to_owned(), |idle| secs(idle.as_secs())),
            None,
        ),
        (
            mysql::NAMESPACE.name,
            m.namespace.clone(),
            Some(format!("database {}", m.database())),
        ),
        (
            LOCAL_CONFIG.name,
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
            POLL_INTERVAL.name,
            ms(s.poll_interval),
            Some("spaces idle polls only (see note)".to_owned()),
        ),
        (
            DELIVERY_TIMEOUT.name,
            secs(s.delivery_timeout.as_secs()),
            None,
        ),
        (MAX_CONCURRENT.name, s.max_concurrent.to_string(), None),
        (
            BREAKER_WINDOW.name,
            secs(s.breaker_window_secs),
            Some("breaker window".to_owned()),
        ),
        (
            BREAKER_THRESHOLD.name,
            s.breaker_threshold.to_string(),
            Some(format!(
                "breaker opens at {} failed rows within {} s",
                s.breaker_threshold, s.breaker_window_secs
            )),
        ),
        (
            RETRY_BACKOFF.name,
            secs(s.retry_backoff_secs),
            Some(format!(
                "effective retry spacing {} s = max(effective lease, backoff)",
                w.effective_retry_spacing_secs()
            )),
        ),
        (
            CLAIM_LEASE.name,
            secs(s.claim_lease_secs),
            Some(format!(
                "effective lease {} s = max(this, delivery timeout + 2 s)",
                w.lease_secs()
            )),
        ),
        (
            RETRY_AFTER_MAX.name,
            secs(s.retry_after_max_secs),
            Some(match s.retry_after_max_secs {
                0 => "Retry-After ignored: a 429/503 pauses nothing".to_owned(),
                max => format!(
                    "a 429/503 with Retry-After pauses its hook {} to {max} s",
                    RETRY_AFTER_MIN.as_secs()
                ),
            }),
        ),
        (
            BATCH_SIZE.name,
            s.batch_size.to_string(),
            Some(format!(
                "effective {} rows per candidate query",
                w.batch_size()
            )),
        ),
        (
            STANDARD_SIGNATURES.name,
            match &config.signing.standard {
                StandardScope::Off => "off".to_owned(),
                StandardScope::All => "all".to_owned(),
                StandardScope::Hooks(hooks) => hooks.iter().cloned().collect::<Vec<_>>().join(", "),
            },
            Some(match &config.signing.standard {
                StandardScope::Off => "Phorge's signature header only".to_owned(),
                StandardScope::All => {
                    "webhook-id/-timestamp/-signature on every hook's requests".to_owned()
                }
                StandardScope::Hooks(hooks) => format!(
                    "webhook-id/-timestamp/-signature on {} hook(s)' requests",
                    hooks.len()
                ),
            }),
        ),
        (
            KEY_GRACE.name,
            secs(config.signing.key_grace_secs),
            Some(match config.signing.key_grace_secs {
                0 => "a changed HMAC key takes effect at once, as in Phorge".to_owned(),
                grace => format!("a changed HMAC key's predecessor signs too for {grace} s"),
            }),
        ),
        (
            transport::SIGNATURE_HEADERS.name,
            t.signature_headers.join(", "),
            None,
        ),
        (transport::USER_AGENT.name, t.user_agent.clone(), None),
        (
            transport::MAX_REDIRECTS.name,
            t.max_redirects.to_string(),
            (t.max_redirects == 0).then(|| "redirects are never followed".to_owned()),
        ),
        (transport::CONNECT_TIMEOUT.name, ms(t.connect_timeout), None),
        (transport::RESOLVE_TIMEOUT.name, ms(t.resolve_timeout), None),
        (
            transport::RESPONSE_BODY_LIMIT.name,
            format!("{} bytes", t.response_body_limit),
            None,
        ),
        (
            transport::RESPONSE_HEAD_MAX.name,
            format!("{} bytes", t.response_head_max),
            (t.response_head_max == 0)
                .then(|| "a buffer growing to about 100 KiB, as cURL accepts".to_owned()),
        ),
        (
            transport::POOL_IDLE.name,
            secs(t.pool_idle_timeout.as_secs()),
            None,
        ),
        (
            transport::OUTBOUND_DENY.name,
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
            transport::OUTBOUND_ALLOW.name,
            nets(&t.outbound_allow),
            None,
        ),
        (
            transport::CA_FILE.name,
            match transport::CA_FILE.info().text(get).trim() {
                "" => "(none)".to_owned(),
                path => path.to_owned(),
            },
            None,
        ),
        (
            transport::REQUEST_ID_HEADER.name,
            t.request_id_header
                .clone()
                .unwrap_or_else(|| "(off)".to_owned()),
            None,
        ),
    ];
    rows.into_iter()
        .map(|(variable, value, detail)| (variable, (value, detail)))
        .collect()
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
                WindowWarning::LeaseRaised { .. } => CLAIM_LEASE.name,
                WindowWarning::BackoffBelowLease { .. } => RETRY_BACKOFF.name,
            },
            message: warning.to_string(),
        })
        .collect();

    let transport = config.transport.config();
    for allow in &transport.outbound_allow {
        let opened: Vec<String> = transport
            .outbound_deny
            .iter()
            .filter(|deny| overlaps(allow, deny))
            .map(IpNet::to_string)
            .collect();
        if !opened.is_empty() {
            found.push(Finding {
                level: Level::Warning,
                variable: transport::OUTBOUND_ALLOW.name,
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
    let poll = POLL_INTERVAL.name;
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
    use webhook_core::setting::table;

    fn report_for(pairs: &[(&str, &str)]) -> Result<Report, AdminError> {
        report(&table(pairs))
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
        // One row per variable of the daemon's registry, in its order.
        let listed: Vec<&str> = r.entries.iter().map(|e| e.variable).collect();
        let registry: Vec<&str> = variables().map(|v| v.name).collect();
        assert_eq!(listed, registry);
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
