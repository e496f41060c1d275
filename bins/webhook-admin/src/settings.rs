//! The daemon's `GORGE_*` settings as the tool reads them: validated by the
//! daemon's own parsing (`webhook_daemon::config::DaemonConfig`: every
//! variable it reads, its own — listen address, logging, shutdown grace,
//! event streams — included), listed from the daemon's registry
//! (`webhook_daemon::config::variables`, in `--help` order) with each
//! value as its own declaration reads and shows it and where it came from,
//! what some of them work out to, and checked for combinations that do not
//! do what they seem to. A value the daemon would refuse fails `config` as
//! it fails the daemon (exit 2, naming the variable).
//!
//! Reads no environment itself: everything goes through a lookup function,
//! so tests feed it tables. Secrets (the service token, the database
//! password) are reported as set or empty, never shown.

use std::collections::HashMap;

use ipnet::IpNet;
use serde_json::{json, Value};
use webhook_core::setting::{whole_number, Lookup, SettingInfo};
use webhook_core::signing::StandardScope;
use webhook_core::signing::{KEY_GRACE, STANDARD_SIGNATURES};
use webhook_core::windows::WindowWarning;
use webhook_core::windows::{
    BATCH_SIZE, BREAKER_THRESHOLD, BREAKER_WINDOW, CLAIM_LEASE, POLL_INTERVAL, RETRY_AFTER_MAX,
    RETRY_AFTER_MIN, RETRY_BACKOFF,
};
use webhook_daemon::config::{variables, DaemonConfig, SERVICE_TOKEN};
use webhook_store_mysql::config as mysql;
use webhook_store_mysql::local_config::LOCAL_CONFIG;
use webhook_transport_hyper::config as transport;

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
    /// The value in effect, as the variable's declaration shows it.
    pub value: String,
    /// The value as the environment or the default gives it, for scripts;
    /// `None` for a secret and for a default `--help` describes.
    pub text: Option<String>,
    /// For a secret, whether it is set to something; `None` otherwise.
    pub secret_set: Option<bool>,
    /// Default or environment.
    pub source: Source,
    /// The default, as `--help` shows it.
    pub default: &'static str,
    /// What a whole-number variable accepts.
    pub allowed: Option<String>,
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

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Reads, validates and explains every setting of the daemon's registry.
pub fn report(get: Lookup<'_>) -> Result<Report, AdminError> {
    report_on(variables(), get)
}

/// [`report`] over `registry`: the daemon's whole configuration is read
/// first, as the daemon reads it (so the first error is the daemon's),
/// then each variable's row comes from its own declaration, so a variable
/// added to the registry is listed, and checked, as it reads.
fn report_on<'a>(
    registry: impl Iterator<Item = &'a SettingInfo>,
    get: Lookup<'_>,
) -> Result<Report, AdminError> {
    let config = DaemonConfig::from_lookup(get)?.delivery;
    let mut details = details(&config, get);
    let entries = registry
        .map(|info| entry(info, get, details.remove(info.name)))
        .collect::<Result<_, _>>()?;
    let findings = findings(&config);
    Ok(Report {
        entries,
        findings,
        config,
    })
}

/// One variable's row: its value as its declaration reads and shows it;
/// the declaration's refusal is the error.
fn entry(info: &SettingInfo, get: Lookup<'_>, detail: Option<String>) -> Result<Entry, AdminError> {
    Ok(Entry {
        variable: info.name,
        value: info.shown(get)?,
        text: (!info.secret).then(|| literal_value(info, get)).flatten(),
        secret_set: info.secret.then(|| !info.text(get).is_empty()),
        source: if info.is_set(get) {
            Source::Environment
        } else {
            Source::Default
        },
        default: info.default,
        allowed: info.allowed(),
        detail,
    })
}

/// The variable's value as text a script can set again: what the
/// environment holds, or the default when that is a value the variable
/// accepts (`None` where `--help` describes the default instead, as
/// "Phorge's security.outbound-blacklist").
fn literal_value(info: &SettingInfo, get: Lookup<'_>) -> Option<String> {
    if info.is_set(get) {
        return Some(info.text(get));
    }
    let default_as_set = |name: &str| (name == info.name).then(|| info.default.to_owned());
    info.shown(&default_as_set)
        .is_ok()
        .then(|| info.default.to_owned())
}

/// What some variables work out to in the validated settings, by variable:
/// derived values and what a 0 or an empty value turns off.
fn details(config: &AdminConfig, get: Lookup<'_>) -> HashMap<&'static str, String> {
    let w = &config.windows;
    let s = w.settings();
    let m = &config.mysql;
    let t = config.transport.config();
    let mut details = vec![
        (
            mysql::LOCK_SESSIONS.name,
            format!(
                "at most {} database sessions in all",
                m.pool_max + m.lock_sessions
            ),
        ),
        (mysql::NAMESPACE.name, format!("database {}", m.database())),
        (
            LOCAL_CONFIG.name,
            if config.local_config.is_some() {
                "read for phabricator.silent"
            } else {
                "silent mode set with bin/config set is not seen (doctor warns)"
            }
            .to_owned(),
        ),
        (
            POLL_INTERVAL.name,
            "spaces idle polls only (see note)".to_owned(),
        ),
        (BREAKER_WINDOW.name, "breaker window".to_owned()),
        (
            BREAKER_THRESHOLD.name,
            format!(
                "breaker opens at {} failed rows within {} s",
                s.breaker_threshold, s.breaker_window_secs
            ),
        ),
        (
            RETRY_BACKOFF.name,
            format!(
                "effective retry spacing {} s = max(effective lease, backoff)",
                w.effective_retry_spacing_secs()
            ),
        ),
        (
            CLAIM_LEASE.name,
            format!(
                "effective lease {} s = max(this, delivery timeout + 2 s)",
                w.lease_secs()
            ),
        ),
        (
            RETRY_AFTER_MAX.name,
            match s.retry_after_max_secs {
                0 => "Retry-After ignored: a 429/503 pauses nothing".to_owned(),
                max => format!(
                    "a 429/503 with Retry-After pauses its hook {} to {max} s",
                    RETRY_AFTER_MIN.as_secs()
                ),
            },
        ),
        (
            BATCH_SIZE.name,
            format!("effective {} rows per candidate query", w.batch_size()),
        ),
        (
            STANDARD_SIGNATURES.name,
            match &config.signing.standard {
                StandardScope::Off => "Phorge's signature header only".to_owned(),
                StandardScope::All => {
                    "webhook-id/-timestamp/-signature on every hook's requests".to_owned()
                }
                StandardScope::Hooks(hooks) => format!(
                    "webhook-id/-timestamp/-signature on {} hook(s)' requests",
                    hooks.len()
                ),
            },
        ),
        (
            KEY_GRACE.name,
            match config.signing.key_grace_secs {
                0 => "a changed HMAC key takes effect at once, as in Phorge".to_owned(),
                grace => format!("a changed HMAC key's predecessor signs too for {grace} s"),
            },
        ),
    ];
    let zero = |info: SettingInfo| whole_number::<u64>(&info.text(get)) == Ok(0);
    if zero(mysql::POOL_MAX.info()) {
        details.push((mysql::POOL_MAX.name, "0 means the default".to_owned()));
    }
    if t.max_redirects == 0 {
        details.push((
            transport::MAX_REDIRECTS.name,
            "redirects are never followed".to_owned(),
        ));
    }
    if t.response_head_max == 0 {
        details.push((
            transport::RESPONSE_HEAD_MAX.name,
            "a buffer growing to about 100 KiB, as cURL accepts".to_owned(),
        ));
    }
    details.push((transport::PROXY.name, t.proxies.shown()));
    details.push((
        transport::NO_PROXY.name,
        if t.proxies.any() {
            t.proxies.no_proxy_shown()
        } else {
            "no proxy to bypass".to_owned()
        },
    ));
    if SERVICE_TOKEN.info().text(get).is_empty() {
        details.push((
            SERVICE_TOKEN.name,
            "the diagnostics API without auth".to_owned(),
        ));
    }
    details.into_iter().collect()
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
                "value": e.text,
                "shown": e.value,
                "secret": e.secret_set.map(|set| json!({"set": set})),
                "source": e.source.as_str(),
                "default": e.default,
                "allowed": e.allowed,
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
    use std::time::Duration;
    use webhook_core::setting::{table, Bounds, Setting, Unit};

    /// A variable in no registry: a row for it can only come from its own
    /// declaration.
    const EXAMPLE: Setting<Duration> = Setting::number(
        "EXAMPLE_WAIT_MS",
        "250",
        "a wait",
        Bounds::between(10, 1_000, Unit::Millis),
    );
    const EXAMPLE_INFO: SettingInfo = EXAMPLE.info();

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
    fn a_variable_added_to_the_registry_is_listed_as_its_declaration_reads_it() {
        let registry = || variables().chain([&EXAMPLE_INFO]);
        let r = report_on(registry(), &table(&[("EXAMPLE_WAIT_MS", " 500 ")])).expect("valid");
        let listed: Vec<&str> = r.entries.iter().map(|e| e.variable).collect();
        let names: Vec<&str> = registry().map(|v| v.name).collect();
        assert_eq!(listed, names);
        let example = r.entries.last().expect("listed");
        assert_eq!(example.value, "500 ms", "parsed, in its unit");
        assert_eq!(example.source, Source::Environment);
        assert_eq!(example.default, "250");
        assert_eq!(example.allowed.as_deref(), Some("between 10 and 1000 ms"));
        // Refused by its declaration: `config` fails, as the daemon would.
        match report_on(registry(), &table(&[("EXAMPLE_WAIT_MS", "5")])) {
            Err(AdminError::Setting { variable, reason }) => {
                assert_eq!(variable, "EXAMPLE_WAIT_MS");
                assert_eq!(reason, "must be between 10 and 1000 ms (set to \"5\")");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn every_value_is_the_one_its_own_declaration_shows() {
        let get = table(&[
            ("GORGE_WEBHOOK_MYSQL_KEEPALIVE_SEC", "0"),
            ("GORGE_WEBHOOK_MYSQL_POOL_MAX", "0"),
            ("GORGE_WEBHOOK_SHUTDOWN_GRACE_SEC", "45"),
            ("GORGE_LISTEN_ADDR", "127.0.0.1:9000"),
        ]);
        let r = report(&get).expect("valid");
        for (entry, info) in r.entries.iter().zip(variables()) {
            assert_eq!(Ok(entry.value.clone()), info.shown(&get), "{}", info.name);
        }
        let value = |name: &str| {
            r.entries
                .iter()
                .find(|e| e.variable == name)
                .map(|e| e.value.as_str())
        };
        assert_eq!(value("GORGE_WEBHOOK_MYSQL_POOL_MAX"), Some("16"));
        assert_eq!(value("GORGE_WEBHOOK_SHUTDOWN_GRACE_SEC"), Some("45 s"));
        assert_eq!(value("GORGE_LISTEN_ADDR"), Some("127.0.0.1:9000"));
        assert_eq!(value("GORGE_WEBHOOK_REQUEST_ID_HEADER"), Some("(off)"));
        assert_eq!(
            value("GORGE_WEBHOOK_OUTBOUND_DENY"),
            Some("Phorge's security.outbound-blacklist (29 networks)")
        );
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
        assert!(warnings(&r)[0].message.contains("using 17 s"));
        assert!(warnings(&r)[1].message.contains("every 17 s"));
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
            // The daemon's own: refused by `config` as by the daemon.
            ("GORGE_LOG_LEVEL", "warning"),
            ("GORGE_LOG_FORMAT", "xml"),
            ("GORGE_LISTEN_ADDR", "nonsense"),
            ("GORGE_WEBHOOK_SHUTDOWN_GRACE_SEC", "abc"),
            ("GORGE_WEBHOOK_EVENT_STREAMS", "0"),
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
