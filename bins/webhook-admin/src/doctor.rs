//! `doctor`: the hand-off checks an operator runs before and after
//! switching delivery to the daemon — database readiness and schema, the
//! account's privileges for every statement delivery runs (checked under
//! `EXPLAIN`, as the daemon checks them at start), this host's clock
//! against the database server's (measured as the daemon measures it),
//! Phorge's global silent mode (its `local.json` and its database entry,
//! added up by the core's `Sight` as the daemon adds them up), leftover
//! PHP delivery tasks, whether requests' objects can be checked as
//! Phorge's worker does, whether the server's binary log can be followed
//! for new rows (one attempt, as the daemon makes it), whether the egress
//! proxy in force can be reached and how many hooks go through it, and which rows have
//! been due for longer than two
//! claim leases (what the stall alert counts), each with why it waits as
//! `explain` judges it — each with what to do about it. Read-only, like
//! every command.

use std::time::Duration;

use serde_json::{json, Value};
use webhook_core::hold::{ConfigUnreadable, PhorgeConfig};
use webhook_core::hold::{Reading, Sight, Visibility};
use webhook_core::{CandidateQuery, DueRow, LocalFailure, UnixTime, WakeHints};
use webhook_daemon::server_clock::{skew_words, Measurement, SKEW_WARN_SECS};
use webhook_store_mysql::config::WAKE_BINLOG;
use webhook_store_mysql::local_config::{LocalConfig, LocalConfigError};
use webhook_store_mysql::{
    BinlogFollower, MysqlConfig, MysqlError, MysqlReader, NotFollowing, PhpDeliveryTasks,
    TaskRunners, OBJECT_TABLES,
};
use webhook_transport_hyper::{HyperTransport, Proxies};

use crate::clock::span;
use crate::error::{exit, AdminError};
use crate::inspect::{judge, DaemonAsk, Db};
use crate::out::{emit, emit_line};
use crate::settings::AdminConfig;

/// One check's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Ok,
    Warn,
    Fail,
}

impl Verdict {
    fn label(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Warn => "warn",
            Self::Fail => "FAIL",
        }
    }
}

struct Check {
    name: &'static str,
    verdict: Verdict,
    finding: String,
    advice: Option<String>,
}

/// Overdue rows listed at most, the longest-waiting first.
const OVERDUE_LISTED: usize = 10;

/// Runs every check at `now` (the server's clock); exit 1 when any failed,
/// 3 when the database is away. `daemon` is where `explain` asks about the
/// daemon's pauses.
pub async fn run(
    db: &Db,
    config: &AdminConfig,
    now: UnixTime,
    daemon: &DaemonAsk,
    json_out: bool,
) -> Result<u8, AdminError> {
    let local_config = config.local_config.as_ref();
    let reader = db.reader();
    if let Err(reason) = reader.ready().await {
        return Err(db.unusable(reason.to_string()));
    }
    let mut checks = Vec::new();
    checks.push(match reader.check_schema().await {
        Ok(warnings) if warnings.is_empty() => Check {
            name: "schema",
            verdict: Verdict::Ok,
            finding: format!(
                "{} has the columns and the key_status index",
                reader.database()
            ),
            advice: None,
        },
        Ok(warnings) => Check {
            name: "schema",
            verdict: Verdict::Warn,
            finding: warnings
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
            advice: Some(
                "apply Phorge's key_status(status, id) patch (docs/operations/switch-over.md)"
                    .into(),
            ),
        },
        Err(err) => Check {
            name: "schema",
            verdict: Verdict::Fail,
            finding: err.to_string(),
            advice: Some("point GORGE_WEBHOOK_NAMESPACE at Phorge's storage namespace".into()),
        },
    });
    checks.push(privileges_check(reader).await);
    checks.push(match reader.server_time().await {
        Ok(reading) => {
            let measurement = Measurement::taken(&reading);
            clock_check(measurement.skew_secs(), measurement.round_trip())
        }
        Err(err) => Check {
            name: "clock",
            verdict: Verdict::Warn,
            finding: format!("cannot read the database server's clock: {err}"),
            advice: None,
        },
    });
    let file = match local_config {
        Some(config) => Some((config, config.silent_mode_now().await)),
        None => None,
    };
    checks.push(silent_mode(
        file,
        reader.silent_mode().await,
        &reader.location(),
    ));
    checks.push(match reader.php_delivery_tasks().await {
        Ok(tasks) => php_delivery_check(tasks),
        Err(err) => Check {
            name: "php-delivery",
            verdict: Verdict::Warn,
            finding: format!("cannot read {}: {err}", reader.task_queue_table()),
            advice: Some(
                "grant SELECT on it so the daemon can warn when PHP still delivers".into(),
            ),
        },
    });
    checks.push(match reader.recent_task_runners(RECENT_TASKS).await {
        Ok(runners) => task_runners_check(runners),
        Err(err) => Check {
            name: "php-runs",
            verdict: Verdict::Warn,
            finding: format!(
                "cannot read {}_worker.worker_archivetask: {err}",
                reader.namespace()
            ),
            advice: Some("grant SELECT on it to see who ran Phorge's recent webhook tasks".into()),
        },
    });
    checks.push(objects_check(reader).await);
    checks.push(wake_check(&config.mysql).await);
    checks.push(proxy_check(reader, config).await);
    checks.push(overdue_check(db, config, now, daemon).await?);
    report(&checks, json_out)?;
    Ok(if checks.iter().any(|c| c.verdict == Verdict::Fail) {
        exit::CHECK_FAILED
    } else {
        exit::OK
    })
}

/// This host's clock against the database server's: the daemon's leases
/// run on the server's, so a skew only warns (the threshold is the
/// daemon's own).
fn clock_check(skew_secs: f64, round_trip: Duration) -> Check {
    let finding = format!(
        "this host's clock is {} the database server's (read in {:.1} ms); the daemon's \
         leases and spacing run on the server's",
        skew_words(skew_secs),
        round_trip.as_secs_f64() * 1e3
    );
    if skew_secs.abs() <= SKEW_WARN_SECS {
        return Check {
            name: "clock",
            verdict: Verdict::Ok,
            finding,
            advice: None,
        };
    }
    Check {
        name: "clock",
        verdict: Verdict::Warn,
        finding,
        advice: Some(
            "synchronise this host's clock (NTP) with the database server's: log times, TLS \
             certificate checks and Phorge's own hosts go by their clocks"
                .into(),
        ),
    }
}

/// How many of Phorge's archived webhook tasks the `php-runs` check reads.
const RECENT_TASKS: u64 = 1_000;

/// Who ran Phorge's recent webhook tasks: any run by a taskmaster is a
/// request `phd` delivered (or declined), which task adoption is there to
/// prevent; none archived at all is a Phorge that hands delivery over.
fn task_runners_check(runners: TaskRunners) -> Check {
    let TaskRunners { daemon, php } = runners;
    let all = daemon + php;
    let (verdict, finding, advice) = if all == 0 {
        (
            Verdict::Ok,
            "no archived HeraldWebhookWorker tasks: phd has run none".to_owned(),
            None,
        )
    } else if php == 0 {
        (
            Verdict::Ok,
            format!("the daemon ran all of the last {all} archived HeraldWebhookWorker tasks"),
            None,
        )
    } else {
        (
            Verdict::Warn,
            format!(
                "phd's taskmasters ran {php} of the last {all} archived HeraldWebhookWorker \
                 tasks ({:.0}%), the daemon {daemon}",
                php as f64 * 100.0 / all as f64
            ),
            Some(
                "on upstream Phorge set GORGE_WEBHOOK_ADOPT_PHP_TASKS=1 so the daemon runs \
                 them; with it on, these are tasks of a hook created within a second, or of \
                 a time the daemon was down (docs/operations/switch-over.md, Upstream Phorge)"
                    .into(),
            ),
        )
    };
    Check {
        name: "php-runs",
        verdict,
        finding,
        advice,
    }
}

/// What Phorge's webhook tasks say of PHP's delivery: none PHP could run
/// is fine; beside tasks a daemon leases (task adoption), a few PHP holds
/// or has not lost yet are a passing state; without adoption any is PHP
/// delivering too.
fn php_delivery_check(tasks: PhpDeliveryTasks) -> Check {
    let PhpDeliveryTasks {
        queued,
        leased,
        adopted,
    } = tasks;
    let (verdict, finding, advice) = if !tasks.any() {
        let finding = if adopted == 0 {
            "no HeraldWebhookWorker tasks in Phorge's task queue".to_owned()
        } else {
            format!("{adopted} HeraldWebhookWorker tasks, all leased by the daemon (task adoption): phd runs none")
        };
        (Verdict::Ok, finding, None)
    } else if adopted > 0 {
        (
            Verdict::Warn,
            format!(
                "{adopted} HeraldWebhookWorker tasks leased by the daemon, {queued} not yet \
                 (adopted within a second), {leased} held on PHP's side (left to PHP, \
                 their requests wait)"
            ),
            Some("run doctor again: under task adoption these pass within a second, or within a lease PHP took".into()),
        )
    } else {
        (
            Verdict::Fail,
            format!(
                "{queued} queued and {leased} leased HeraldWebhookWorker tasks: PHP delivers too, \
                 receivers get requests twice"
            ),
            Some(
                "set gorge.webhook.uri in Phorge so it hands delivery over, set \
                 GORGE_WEBHOOK_ADOPT_PHP_TASKS=1 on upstream Phorge, or stop the daemon \
                 (docs/operations/switch-over.md)"
                    .into(),
            ),
        )
    };
    Check {
        name: "php-delivery",
        verdict,
        finding,
        advice,
    }
}

/// Whether the account may run every statement delivery runs, as the
/// daemon checks it before it delivers (a missing privilege stops it).
async fn privileges_check(reader: &MysqlReader) -> Check {
    match reader.delivery_grants_missing().await {
        Ok(missing) if missing.is_empty() => Check {
            name: "privileges",
            verdict: Verdict::Ok,
            finding: format!(
                "the account may run every statement delivery runs on {} (SELECT and UPDATE on \
                 herald_webhookrequest, SELECT on herald_webhook)",
                reader.database()
            ),
            advice: None,
        },
        Ok(missing) => Check {
            name: "privileges",
            verdict: Verdict::Fail,
            finding: format!(
                "the account lacks {}: the daemon stops at start (exit 1) naming them",
                missing.join(", ")
            ),
            advice: Some(format!(
                "GRANT SELECT, UPDATE ON `{}`.* TO the daemon's account \
                     (docs/operations/database.md, the database account)",
                reader.database()
            )),
        },
        Err(err) => Check {
            name: "privileges",
            verdict: Verdict::Fail,
            finding: format!("cannot check the account's privileges for delivery: {err}"),
            advice: None,
        },
    }
}

/// How new rows reach the daemon: the server's binary log where it can be
/// followed, otherwise the wake-up probe. Never fails: the probe always
/// works.
async fn wake_check(config: &MysqlConfig) -> Check {
    let probe = "the wake-up probe notices new rows (within GORGE_WEBHOOK_WAKE_PROBE_MS)";
    let grant = "to have them read from the binary log as they commit, GRANT REPLICATION SLAVE, \
                 BINLOG MONITOR ON *.* (MySQL, MariaDB before 10.5.2: REPLICATION SLAVE, \
                 REPLICATION CLIENT) to the daemon's account (docs/operations/settings.md, \
                 following the binary log)";
    let (verdict, finding, advice) = if !config.wake_binlog {
        let finding = format!("{} is off: {probe}", WAKE_BINLOG.name);
        (Verdict::Ok, finding, None)
    } else {
        match BinlogFollower::new(config, WakeHints::new()).check().await {
            Ok(()) => (
                Verdict::Ok,
                "the account can follow the server's binary log: new rows are noticed as they \
                 are committed"
                    .to_owned(),
                None,
            ),
            Err(NotFollowing::LogOff) => (
                Verdict::Ok,
                format!("the server keeps no binary log: {probe}"),
                Some(format!("to wake on commit, turn log_bin on; then {grant}")),
            ),
            Err(err) => {
                let refused = matches!(&err, NotFollowing::Database(MysqlError::Refused(_)));
                (
                    Verdict::Warn,
                    format!("the binary log cannot be followed ({err}): {probe}"),
                    refused.then(|| grant.to_owned()),
                )
            }
        }
    };
    Check {
        name: "wake",
        verdict,
        finding,
        advice,
    }
}

/// The egress proxy, where one is in force: whether each proxy can be
/// reached as the daemon reaches it, and how many callable hooks go
/// through it.
async fn proxy_check(reader: &MysqlReader, config: &AdminConfig) -> Check {
    let proxies = &config.transport.config().proxies;
    let check = |verdict, finding, advice| Check {
        name: "proxy",
        verdict,
        finding,
        advice,
    };
    if !proxies.any() {
        return check(
            Verdict::Ok,
            "no egress proxy: calls go straight to receivers".to_owned(),
            None,
        );
    }
    let transport = match HyperTransport::new(config.transport.clone()) {
        Ok(transport) => transport,
        Err(err) => return check(Verdict::Warn, err.to_string(), None),
    };
    let mut unreachable = Vec::new();
    for (proxy, reached) in transport.reach_proxies().await {
        if let Err(why) = reached {
            unreachable.push(format!("{proxy}: {}", LocalFailure::Proxy(why)));
        }
    }
    let routes = match reader.callable_hook_phids().await {
        Ok(phids) => hook_routes(reader, proxies, &phids).await,
        Err(err) => format!("cannot list the hooks: {err}"),
    };
    let finding = format!("{}; {routes}", proxies.shown());
    if unreachable.is_empty() {
        check(Verdict::Ok, finding, None)
    } else {
        check(
            Verdict::Fail,
            format!("{finding}; cannot reach {}", unreachable.join(", ")),
            Some(
                "calls through it wait, unwritten, until it answers (gorge_webhook_proxy_failures_total)"
                    .to_owned(),
            ),
        )
    }
}

/// How many of the hooks `phids` names go through the proxy, and how many
/// directly.
async fn hook_routes(reader: &MysqlReader, proxies: &Proxies, phids: &[String]) -> String {
    let (mut through, mut direct) = (0usize, 0usize);
    for phid in phids {
        if let Ok(Some(hook)) = reader.hook(phid).await {
            if proxies.proxied(&hook.uri) {
                through += 1;
            } else {
                direct += 1;
            }
        }
    }
    format!("{through} callable hook(s) go through it, {direct} directly")
}

/// Whether the daemon can check requests' objects as Phorge's worker does:
/// every application's object and transaction tables readable.
async fn objects_check(reader: &MysqlReader) -> Check {
    let mut unreadable = Vec::new();
    for tables in OBJECT_TABLES {
        match reader.object_tables_readable(tables).await {
            Ok(Ok(())) => {}
            Ok(Err(table)) => unreadable.push(format!("{table} ({})", tables.phid_type)),
            Err(err) => {
                return Check {
                    name: "objects",
                    verdict: Verdict::Warn,
                    finding: format!("cannot probe the application tables: {err}"),
                    advice: None,
                }
            }
        }
    }
    if unreadable.is_empty() {
        return Check {
            name: "objects",
            verdict: Verdict::Ok,
            finding: format!(
                "reads the object and transaction tables of all {} object types: transactions go \
                 out as Phorge's worker sends them, a destroyed object's request fails with hook \
                 error object",
                OBJECT_TABLES.len()
            ),
            advice: None,
        };
    }
    Check {
        name: "objects",
        verdict: Verdict::Warn,
        finding: format!(
            "cannot read {}: requests about those objects list the stored transactions in the \
             order their shape implies (removed ones included), and a destroyed object is sent \
             instead of failed",
            unreadable.join(", ")
        ),
        advice: Some(format!(
            "grant the daemon's account SELECT on Phorge's application databases \
             ({}_maniphest, …; docs/operations/database.md, the object check)",
            reader.namespace()
        )),
    }
}

/// The silent-mode check, from one reading of each source; what the
/// readings add up to is the core's [`Sight`], as in the daemon.
fn silent_mode(
    file: Option<(&LocalConfig, Result<bool, LocalConfigError>)>,
    database: Result<bool, ConfigUnreadable>,
    database_table: &str,
) -> Check {
    let sight = Sight {
        local_config: file
            .as_ref()
            .map_or(Reading::NotSet, |(_, read)| Reading::of(read)),
        database: Reading::of(&database),
    };
    let path = file
        .as_ref()
        .map(|(config, _)| config.path().display().to_string());
    let file_error = file.and_then(|(_, read)| read.err());
    let database_error = database
        .err()
        .map(|err| format!("cannot read {database_table}: {err}"));
    let check = |verdict, finding: String, advice| Check {
        name: "silent-mode",
        verdict,
        finding,
        advice,
    };
    match sight.visibility() {
        Visibility::On => {
            let mut places = Vec::new();
            if sight.local_config == Reading::On {
                places.push(path.unwrap_or_default());
            }
            if sight.database == Reading::On {
                places.push("Phorge's database configuration".to_owned());
            }
            check(
                Verdict::Warn,
                format!(
                    "phabricator.silent is ON in {}: the daemon holds delivery (claims nothing)",
                    places.join(" and ")
                ),
                Some(
                    "expected while Phorge is silent; rows stay queued for Phorge's worker".into(),
                ),
            )
        }
        Visibility::Off => {
            let database = match database_error {
                None => " and in Phorge's database configuration".to_owned(),
                Some(err) => format!("; {err} (a second source: Phorge's tools never write it)"),
            };
            check(
                Verdict::Ok,
                format!(
                    "phabricator.silent is off in {}{database}",
                    path.unwrap_or_default()
                ),
                None,
            )
        }
        Visibility::DatabaseOnly => match file_error {
            None => check(
                Verdict::Warn,
                "phabricator.silent is off in Phorge's database configuration, but Phorge keeps \
                 it in conf/local/local.json (bin/config set), which is not read: silent mode \
                 set that way is not seen"
                    .to_owned(),
                Some(
                    "set GORGE_PHORGE_LOCAL_CONFIG to Phorge's conf/local/local.json, for the \
                     daemon and for this tool"
                        .into(),
                ),
            ),
            Some(err) => check(
                Verdict::Warn,
                format!(
                    "{err}; only the database entry is seen (off), and Phorge's tools never \
                     write it"
                ),
                Some("make GORGE_PHORGE_LOCAL_CONFIG name a readable conf/local/local.json".into()),
            ),
        },
        Visibility::Invisible | Visibility::Unchecked => {
            let file = file_error.map_or_else(
                || "GORGE_PHORGE_LOCAL_CONFIG is not set".to_owned(),
                |err| err.to_string(),
            );
            check(
                Verdict::Warn,
                format!(
                    "unknown: neither source of phabricator.silent can be read ({file}; {})",
                    database_error.unwrap_or_default()
                ),
                Some(format!(
                    "set GORGE_PHORGE_LOCAL_CONFIG to Phorge's conf/local/local.json (or \
                         grant SELECT on {database_table}); until then stop the daemon \
                         whenever Phorge is silent"
                )),
            )
        }
    }
}

/// Rows due for longer than two claim leases: the stall alert's measure,
/// without the daemon's view of breakers and pauses (each row's line says
/// whether one holds it back). Warns, listing each with why it waits.
async fn overdue_check(
    db: &Db,
    config: &AdminConfig,
    now: UnixTime,
    daemon: &DaemonAsk,
) -> Result<Check, AdminError> {
    let windows = &config.windows;
    let limit = 2 * windows.lease_secs();
    let query = CandidateQuery {
        cutoffs: windows.cutoffs(now),
        limit: OVERDUE_LISTED,
        exclude_hooks: Vec::new(),
    };
    let due = match db.reader().longest_due(&query).await {
        Ok(due) => due,
        Err(err) => {
            return Ok(Check {
                name: "overdue",
                verdict: Verdict::Warn,
                finding: format!("cannot read the due rows: {err}"),
                advice: None,
            })
        }
    };
    let overdue: Vec<&DueRow> = due
        .iter()
        .filter(|row| now.saturating_sub(row.due_since) > limit)
        .collect();
    if overdue.is_empty() {
        return Ok(Check {
            name: "overdue",
            verdict: Verdict::Ok,
            finding: format!(
                "no row has been due for longer than two claim leases ({})",
                span(limit)
            ),
            advice: None,
        });
    }
    let mut lines = vec![format!(
        "{}{} row(s) due for longer than two claim leases ({}), longest first:",
        if overdue.len() == OVERDUE_LISTED {
            "at least "
        } else {
            ""
        },
        overdue.len(),
        span(limit)
    )];
    let mut notes: Vec<String> = Vec::new();
    for row in overdue {
        let (line, row_notes) = overdue_line(db, config, now, daemon, row).await?;
        lines.push(line);
        for note in row_notes {
            if !notes.contains(&note) {
                notes.push(note);
            }
        }
    }
    lines.extend(notes.into_iter().map(|note| format!("note: {note}")));
    Ok(Check {
        name: "overdue",
        verdict: Verdict::Warn,
        finding: lines.join("\n"),
        advice: Some(
            "is a daemon running and ready (GET /readyz)? `webhook-admin explain <id>` says \
             more about each row"
                .into(),
        ),
    })
}

/// One overdue row: how long it has waited and why, as `explain` says,
/// and `explain`'s notes on it (said once under the list: several rows
/// often share them).
async fn overdue_line(
    db: &Db,
    config: &AdminConfig,
    now: UnixTime,
    daemon: &DaemonAsk,
    due: &DueRow,
) -> Result<(String, Vec<String>), AdminError> {
    let waited = span(now.saturating_sub(due.due_since));
    let row = match db.reader().request_by_id(due.id).await {
        Ok(Some(row)) => row,
        Ok(None) => {
            return Ok((
                format!("row {}: gone since it was listed", due.id),
                Vec::new(),
            ))
        }
        Err(err) => return Err(db.fail(err)),
    };
    let explanation = judge(db, config, &row, now, daemon).await?.explanation;
    let line = format!(
        "row {} ({}, hook {}) due for {waited}: {}",
        due.id,
        due.phid,
        due.webhook_phid,
        explanation.verdict.describe(now)
    );
    Ok((line, explanation.notes))
}

fn report(checks: &[Check], json_out: bool) -> Result<(), AdminError> {
    if json_out {
        let items: Vec<Value> = checks
            .iter()
            .map(|c| {
                json!({
                    "check": c.name,
                    "verdict": c.verdict.label().to_lowercase(),
                    "finding": c.finding,
                    "advice": c.advice,
                })
            })
            .collect();
        return emit_line(json!({ "checks": items }));
    }
    let mut text = String::new();
    for check in checks {
        let mut finding = check.finding.lines();
        text.push_str(&format!(
            "{:<4}  {:<12}  {}\n",
            check.verdict.label(),
            check.name,
            finding.next().unwrap_or_default()
        ));
        for more in finding {
            text.push_str(&format!("{:<4}  {:<12}    {more}\n", "", ""));
        }
        if let Some(advice) = &check.advice {
            text.push_str(&format!("{:<4}  {:<12}  -> {advice}\n", "", ""));
        }
    }
    emit(&text)
}
