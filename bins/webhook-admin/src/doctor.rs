//! `doctor`: the hand-off checks an operator runs before and after
//! switching delivery to the daemon — database readiness and schema,
//! Phorge's global silent mode, leftover PHP delivery tasks, and whether
//! requests' objects can be checked as Phorge's worker does — each
//! with what to do about it. Read-only, like every command.

use serde_json::{json, Value};
use webhook_core::PhorgeConfig;
use webhook_store_mysql::{MysqlStore, PhpDeliveryTasks, OBJECT_TABLES};

use crate::error::{exit, AdminError};
use crate::inspect::Db;
use crate::out::{emit, emit_line};

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
    advice: Option<&'static str>,
}

/// Runs every check; exit 1 when any failed, 3 when the database is away.
pub async fn run(db: &Db, json_out: bool) -> Result<u8, AdminError> {
    let store = db.store();
    if let Err(reason) = store.ready().await {
        return Err(db.unusable(reason.to_string()));
    }
    let mut checks = Vec::new();
    checks.push(match store.check_schema().await {
        Ok(warnings) if warnings.is_empty() => Check {
            name: "schema",
            verdict: Verdict::Ok,
            finding: format!(
                "{} has the columns and the key_status index",
                store.database()
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
            advice: Some("apply Phorge's key_status(status, id) patch (docs/operations.md)"),
        },
        Err(err) => Check {
            name: "schema",
            verdict: Verdict::Fail,
            finding: err.to_string(),
            advice: Some("point GORGE_WEBHOOK_NAMESPACE at Phorge's storage namespace"),
        },
    });
    checks.push(match store.silent_mode().await {
        Ok(false) => Check {
            name: "silent-mode",
            verdict: Verdict::Ok,
            finding: "phabricator.silent is off in Phorge's database configuration".into(),
            advice: None,
        },
        Ok(true) => Check {
            name: "silent-mode",
            verdict: Verdict::Warn,
            finding: "phabricator.silent is ON: the daemon holds delivery (claims nothing)".into(),
            advice: Some("expected while Phorge is silent; rows stay queued for Phorge's worker"),
        },
        Err(err) => Check {
            name: "silent-mode",
            verdict: Verdict::Warn,
            finding: format!("cannot read {{namespace}}_config.config_entry: {err}"),
            advice: Some(
                "grant SELECT on it, or stop the daemon whenever Phorge is silent \
                 (silent mode set only in local.json is never visible)",
            ),
        },
    });
    checks.push(match store.php_delivery_tasks().await {
        Ok(tasks) if !tasks.any() => Check {
            name: "php-delivery",
            verdict: Verdict::Ok,
            finding: "no HeraldWebhookWorker tasks in Phorge's task queue".into(),
            advice: None,
        },
        Ok(PhpDeliveryTasks { queued, leased }) => Check {
            name: "php-delivery",
            verdict: Verdict::Fail,
            finding: format!(
                "{queued} queued and {leased} leased HeraldWebhookWorker tasks: PHP delivers too, \
                 receivers get requests twice"
            ),
            advice: Some(
                "set gorge.webhook.uri in Phorge so it hands delivery over, or stop the daemon \
                 (docs/operations.md, switching over)",
            ),
        },
        Err(err) => Check {
            name: "php-delivery",
            verdict: Verdict::Warn,
            finding: format!("cannot read {{namespace}}_worker.worker_activetask: {err}"),
            advice: Some("grant SELECT on it so the daemon can warn when PHP still delivers"),
        },
    });
    checks.push(objects_check(store).await);
    report(&checks, json_out)?;
    Ok(if checks.iter().any(|c| c.verdict == Verdict::Fail) {
        exit::CHECK_FAILED
    } else {
        exit::OK
    })
}

/// Whether the daemon can check requests' objects as Phorge's worker does:
/// every application's object and transaction tables readable.
async fn objects_check(store: &MysqlStore) -> Check {
    let mut unreadable = Vec::new();
    for tables in OBJECT_TABLES {
        match store.object_tables_readable(tables).await {
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
        advice: Some(
            "grant the daemon's account SELECT on Phorge's application databases \
             ({namespace}_maniphest, …; docs/operations.md, the object check)",
        ),
    }
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
        text.push_str(&format!(
            "{:<4}  {:<12}  {}\n",
            check.verdict.label(),
            check.name,
            check.finding
        ));
        if let Some(advice) = check.advice {
            text.push_str(&format!("{:<4}  {:<12}  -> {advice}\n", "", ""));
        }
    }
    emit(&text)
}
