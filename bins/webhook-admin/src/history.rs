//! `history`: the attempts the daemon recorded in its attempt history (a
//! database of its own, `GORGE_WEBHOOK_HISTORY_DATABASE`), newest first,
//! filtered by request, hook, object, outcome and time; and the last few
//! attempts of one request for `explain` (or, for a request Phorge has
//! deleted, where the history keeps it).
//!
//! Only the history database is read, never Phorge's table, so a request
//! Phorge has already deleted is still listed. A missing history database
//! means the history is off or never ran: `history` says so and fails,
//! `explain` says "history: off" and goes on.

use serde_json::Value;
use webhook_core::history::{AttemptQuery, RecordedAttempt, RequestKey};
use webhook_core::StoreError;
use webhook_daemon::config::env_lookup;
use webhook_store_mysql::HistoryConfig;

use crate::cli::HistoryFilters;
use crate::clock::{self, utc_ms};
use crate::error::{exit, AdminError};
use crate::inspect::{Db, RequestRef};
use crate::out::{emit, emit_line};
use crate::settings::AdminConfig;

/// Attempts `explain` shows.
pub const EXPLAIN_ATTEMPTS: usize = 3;

/// Characters of a response body the brief view shows.
const BODY_BRIEF: usize = 80;

/// The history database the daemon writes with these settings.
pub fn database(config: &AdminConfig) -> Result<String, AdminError> {
    Ok(HistoryConfig::database_for(
        &env_lookup,
        &config.mysql.namespace,
    )?)
}

impl HistoryFilters {
    /// The query, times read at `now` (Unix seconds); a bad value is a
    /// usage error naming its flag.
    pub fn query(self, now: u64) -> Result<AttemptQuery, AdminError> {
        let request = self
            .request
            .map(|text| {
                RequestKey::parse(&text).ok_or_else(|| {
                    AdminError::Usage(format!(
                        "--request: {text:?} is neither a request id (e.g. 42) nor a request \
                         PHID (PHID-HWBR-...)"
                    ))
                })
            })
            .transpose()?;
        let time = |text: Option<String>, flag: &str| {
            text.map(|t| clock::parse_time_or_age(&t, now).map(|secs| secs.saturating_mul(1_000)))
                .transpose()
                .map_err(|reason| AdminError::Usage(format!("{flag}: {reason}")))
        };
        let since_ms = time(self.since, "--since")?;
        let until_ms = time(self.until, "--until")?;
        if let (Some(since), Some(until)) = (since_ms, until_ms) {
            if since >= until {
                return Err(AdminError::Usage(
                    "--since must be before --until".to_owned(),
                ));
            }
        }
        let text =
            |value: Option<String>| value.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        Ok(AttemptQuery {
            request,
            hook_phid: text(self.hook),
            object_phid: text(self.object),
            outcome: text(self.outcome),
            since_ms,
            until_ms,
            limit: usize::try_from(self.limit).unwrap_or(usize::MAX),
        })
    }
}

/// `history`: the attempts `query` selects, newest first.
pub async fn run(
    db: &Db,
    database: &str,
    query: &AttemptQuery,
    json_out: bool,
    verbose: bool,
) -> Result<u8, AdminError> {
    let attempts = db
        .reader()
        .history(database)
        .attempts(query)
        .await
        .map_err(|err| match err {
            StoreError::MissingDatabase(_) => AdminError::HistoryMissing {
                database: database.to_owned(),
            },
            err => db.fail_on(database, err),
        })?;
    if json_out {
        emit_line(to_json(&attempts))?;
        return Ok(exit::OK);
    }
    if attempts.is_empty() {
        emit_line(format!("no attempts recorded in {database} match"))?;
        return Ok(exit::OK);
    }
    let text: Vec<String> = attempts.iter().map(|a| block(a, verbose)).collect();
    emit(&text.join("\n"))?;
    Ok(exit::OK)
}

/// The attempts as one JSON array, in the history's own field names.
pub fn to_json(attempts: &[RecordedAttempt]) -> Value {
    serde_json::to_value(attempts).unwrap_or_else(|_| Value::Array(Vec::new()))
}

/// What `explain` can say of a request's last attempts.
#[derive(Debug)]
pub enum Recent {
    /// No history database.
    Off,
    /// The last attempts, newest first (none when none are recorded).
    Attempts(Vec<RecordedAttempt>),
    /// The history could not be read (or its settings are wrong): why.
    Unreadable(String),
}

impl Recent {
    /// `explain`'s JSON: `{"state": "on", "attempts": […]}`, `{"state":
    /// "off"}` or `{"state": "unreadable", "reason": …}`.
    pub fn to_json(&self) -> Value {
        match self {
            Self::Off => serde_json::json!({"state": "off"}),
            Self::Attempts(attempts) => {
                serde_json::json!({"state": "on", "attempts": to_json(attempts)})
            }
            Self::Unreadable(reason) => {
                serde_json::json!({"state": "unreadable", "reason": reason})
            }
        }
    }

    /// `explain`'s text: a section with one line per attempt, or one line.
    pub fn to_text(&self) -> String {
        match self {
            Self::Off => "\nhistory: off\n".to_owned(),
            Self::Unreadable(reason) => format!("\nhistory: unreadable ({reason})\n"),
            Self::Attempts(attempts) if attempts.is_empty() => {
                "\nLast attempts (history): none recorded\n".to_owned()
            }
            Self::Attempts(attempts) => {
                let mut out = "\nLast attempts (history):\n".to_owned();
                for attempt in attempts {
                    out.push_str(&format!("  {}\n", brief(attempt)));
                }
                out
            }
        }
    }
}

/// The last [`EXPLAIN_ATTEMPTS`] attempts of request `id`; never an error,
/// so `explain` never fails because of the history.
pub async fn recent(db: &Db, config: &AdminConfig, id: u64) -> Recent {
    let database = match database(config) {
        Ok(database) => database,
        Err(err) => return Recent::Unreadable(err.to_string()),
    };
    let query = AttemptQuery {
        request: Some(RequestKey::Id(id)),
        limit: EXPLAIN_ATTEMPTS,
        ..AttemptQuery::default()
    };
    match db.reader().history(&database).attempts(&query).await {
        Ok(attempts) => Recent::Attempts(attempts),
        Err(StoreError::MissingDatabase(_)) => Recent::Off,
        Err(err) => Recent::Unreadable(db.fail_on(&database, err).to_string()),
    }
}

/// For a request Phorge's table no longer has: where the history still
/// keeps it (its last attempt, and the command listing them all), to add
/// to `explain`'s "no request"; nothing when the history has no attempt
/// of it or cannot be read.
pub async fn kept_after_deletion(
    db: &Db,
    config: &AdminConfig,
    which: &RequestRef,
) -> Option<String> {
    let database = database(config).ok()?;
    let (key, named) = match which {
        RequestRef::Id(id) => (RequestKey::Id(*id), id.to_string()),
        RequestRef::Phid(phid) => (RequestKey::Phid(phid.clone()), phid.clone()),
    };
    let query = AttemptQuery {
        request: Some(key),
        limit: 1,
        ..AttemptQuery::default()
    };
    let attempts = db.reader().history(&database).attempts(&query).await.ok()?;
    let last = attempts.first()?;
    Some(format!(
        "Phorge has deleted it, but the attempt history keeps its attempts \
         (`webhook-admin history --request {named}`); the last: {}",
        brief(last)
    ))
}

/// One line: when, which attempt, its outcome, the HTTP status and how
/// long it took.
pub fn brief(recorded: &RecordedAttempt) -> String {
    let a = &recorded.attempt;
    format!(
        "{}  #{}  {}  {}  {}  {} ms  {}",
        utc_ms(a.started_ms),
        recorded.number,
        a.status,
        outcome(recorded),
        http_status(a.http_status),
        a.duration_ms,
        recorded.instance
    )
}

fn outcome(recorded: &RecordedAttempt) -> String {
    let a = &recorded.attempt;
    match (a.error_type.as_str(), a.error_code.as_str()) {
        ("", "") => "-".to_owned(),
        (kind, "") => kind.to_owned(),
        (kind, code) => format!("{kind}/{code}"),
    }
}

fn http_status(status: Option<u16>) -> String {
    status.map_or_else(|| "no response".to_owned(), |s| format!("HTTP {s}"))
}

/// One attempt's block for `history`'s text output.
pub fn block(recorded: &RecordedAttempt, verbose: bool) -> String {
    let a = &recorded.attempt;
    let mut out = format!(
        "{}  request {} {}  #{}  {}\n",
        utc_ms(a.started_ms),
        a.request_id,
        a.request_phid,
        recorded.number,
        recorded.instance
    );
    let mut line = |label: &str, value: String| out.push_str(&format!("  {label:9} {value}\n"));
    line(
        "outcome",
        format!(
            "{}  {}  {}  {} ms",
            a.status,
            outcome(recorded),
            http_status(a.http_status),
            a.duration_ms
        ),
    );
    line("hook", a.hook_phid.clone());
    line("object", a.object_phid.clone());
    if verbose {
        line(
            "claim",
            a.claim_version
                .map_or_else(|| "none (before a claim)".to_owned(), |v| v.to_string()),
        );
        line("history", format!("attempt id {}", recorded.id));
    }
    if let Some(sent) = &a.sent {
        line(
            "sent",
            format!(
                "{} bytes  sha256 {}  signed with {}",
                sent.bytes,
                sent.sha256,
                sent.signed_with.as_str()
            ),
        );
    }
    let Some(exchange) = &a.exchange else {
        return out;
    };
    for hop in &exchange.hops {
        line("hop", format!("{} {}", hop.status, hop.uri));
    }
    let truncated = if exchange.response_body_truncated {
        " (truncated)"
    } else {
        ""
    };
    if !verbose {
        let shown: String = exchange.response_body.chars().take(BODY_BRIEF).collect();
        let more = if shown.len() < exchange.response_body.len() {
            "…"
        } else {
            ""
        };
        line(
            "response",
            format!(
                "{} headers, body {shown:?}{more}{truncated}",
                exchange.response_headers.len()
            ),
        );
        return out;
    }
    out.push_str("  response headers:\n");
    for (name, value) in &exchange.response_headers {
        out.push_str(&format!("    {}: {}\n", printable(name), printable(value)));
    }
    out.push_str(&format!(
        "  response body ({} bytes kept{truncated}):\n",
        exchange.response_body.len()
    ));
    for body_line in exchange.response_body.lines() {
        out.push_str(&format!("    {}\n", printable(body_line)));
    }
    out.push_str("  request headers:\n");
    for (name, value) in &exchange.request_headers {
        out.push_str(&format!("    {}: {}\n", printable(name), printable(value)));
    }
    out
}

/// `text` as the receiver sent it, but for control characters (a
/// terminal's escape sequences among them), which are escaped: a hostile
/// receiver's answer cannot drive the operator's terminal. Tabs stay.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '\t' => c.to_string(),
            c if c.is_control() => c.escape_default().to_string(),
            c => c.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_receivers_control_characters_are_shown_escaped() {
        assert_eq!(
            super::printable("ok\u{1b}[2J\tdone\r"),
            "ok\\u{1b}[2J\tdone\\r"
        );
    }

    use super::*;
    use webhook_core::history::{Attempt, Exchange, Hop, SentBody, SignedWith};

    fn attempt() -> RecordedAttempt {
        RecordedAttempt {
            id: 9,
            number: 2,
            instance: "host:77".into(),
            attempt: Attempt {
                request_id: 42,
                request_phid: "PHID-HWBR-x".into(),
                hook_phid: "PHID-HWBH-h".into(),
                object_phid: "PHID-TASK-o".into(),
                claim_version: Some(1_700_000_000),
                started_ms: 1_700_000_000_250,
                duration_ms: 31,
                status: "queued".into(),
                error_type: "http".into(),
                error_code: "503".into(),
                http_status: Some(503),
                sent: Some(SentBody {
                    bytes: 120,
                    sha256: "ab".repeat(32),
                    signed_with: SignedWith::Current,
                }),
                exchange: Some(Exchange {
                    hops: vec![
                        Hop {
                            uri: "https://a.example/x".into(),
                            status: 302,
                        },
                        Hop {
                            uri: "https://b.example/y".into(),
                            status: 503,
                        },
                    ],
                    request_headers: vec![("Authorization".into(), "(withheld)".into())],
                    response_headers: vec![("retry-after".into(), "5".into())],
                    response_body: "busy\nlater".into(),
                    response_body_truncated: true,
                    ..Exchange::default()
                }),
            },
        }
    }

    #[test]
    fn a_block_shows_the_outcome_hops_and_body() {
        let text = block(&attempt(), false);
        assert!(
            text.starts_with("2023-11-14 22:13:20.250 UTC  request 42 PHID-HWBR-x  #2  host:77\n"),
            "{text}"
        );
        assert!(text.contains("queued  http/503  HTTP 503  31 ms"), "{text}");
        assert!(
            text.contains("hop       302 https://a.example/x\n"),
            "{text}"
        );
        assert!(
            text.contains("hop       503 https://b.example/y\n"),
            "{text}"
        );
        assert!(text.contains("signed with current"), "{text}");
        assert!(text.contains(r#"body "busy\nlater" (truncated)"#), "{text}");
        assert!(!text.contains("retry-after: 5"), "{text}");
        let text = block(&attempt(), true);
        assert!(text.contains("    retry-after: 5\n"), "{text}");
        assert!(text.contains("    Authorization: (withheld)\n"), "{text}");
        assert!(text.contains("    later\n"), "{text}");
    }

    #[test]
    fn filters_name_the_flag_they_refuse() {
        let refused = |filters: HistoryFilters| match filters.query(1_700_000_000) {
            Err(AdminError::Usage(message)) => message,
            other => panic!("{other:?}"),
        };
        let message = refused(HistoryFilters {
            request: Some("HWBR-1".into()),
            ..HistoryFilters::default()
        });
        assert!(message.starts_with("--request: "), "{message}");
        let message = refused(HistoryFilters {
            since: Some("soon".into()),
            ..HistoryFilters::default()
        });
        assert!(message.starts_with("--since: "), "{message}");
        let query = HistoryFilters {
            request: Some("PHID-HWBR-1".into()),
            since: Some("2h".into()),
            until: Some("1700000000".into()),
            outcome: Some(" 503 ".into()),
            limit: 5,
            ..HistoryFilters::default()
        }
        .query(1_700_000_000)
        .map_err(|e| e.to_string());
        assert_eq!(
            query,
            Ok(AttemptQuery {
                request: Some(RequestKey::Phid("PHID-HWBR-1".into())),
                outcome: Some("503".into()),
                since_ms: Some(1_699_992_800_000),
                until_ms: Some(1_700_000_000_000),
                limit: 5,
                ..AttemptQuery::default()
            })
        );
    }
}
