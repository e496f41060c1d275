//! `requeue`: the tool's one command that writes. It selects final
//! failures (`status = failed`) by row, hook, time of the last attempt and
//! recorded error, and — only with `--apply` — puts each back in the queue
//! in Phorge's own values through `webhook-store-mysql`'s `MysqlRequeue`,
//! one compare-and-set per row on the state it was read in. Without
//! `--apply` it only lists what it would change.
//!
//! It owns the selection rule ([`Selection::selects`], the one place that
//! says which rows a requeue takes) and the output; the SQL and the
//! compare-and-set are the store's. It never delivers anything: the
//! daemons' claim protocol does, once the row's claim lease has passed.

use serde_json::{json, Value};
use webhook_core::{RequestRow, RequestStatus, StoreError, UnixTime};
use webhook_store_mysql::{MysqlRequeue, Requeued};

use crate::clock::utc;
use crate::error::{exit, AdminError};
use crate::explain::LastError;
use crate::inspect::{self, columns, RequestRef};
use crate::out::{emit, emit_line};
use crate::settings::AdminConfig;

/// Failed rows read per statement.
const PAGE: u64 = 500;

/// `--error TYPE[/CODE]`: the recorded `errorType`, and optionally the
/// `errorCode` exactly (`500`, `28`, `disabled`) or an HTTP status class
/// (`5xx`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorFilter {
    error_type: String,
    code: Option<CodeFilter>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum CodeFilter {
    Exact(String),
    /// The first digit of a three-digit code.
    Class(u8),
}

impl ErrorFilter {
    /// `http`, `http/500`, `http/5xx`, `hook/disabled`, `timeout/28`.
    pub fn parse(text: &str) -> Result<Self, AdminError> {
        let (error_type, code) = match text.split_once('/') {
            Some((error_type, code)) => (error_type, Some(code)),
            None => (text, None),
        };
        let usage = || {
            AdminError::Usage(format!(
                "--error {text:?}: use TYPE or TYPE/CODE (e.g. http, http/500, http/5xx, \
                 timeout/28, hook/disabled)"
            ))
        };
        if error_type.is_empty() || code.is_some_and(str::is_empty) {
            return Err(usage());
        }
        let code = code.map(|code| match code.as_bytes() {
            [digit @ b'1'..=b'9', b'x' | b'X', b'x' | b'X'] => CodeFilter::Class(digit - b'0'),
            _ => CodeFilter::Exact(code.to_owned()),
        });
        Ok(Self {
            error_type: error_type.to_owned(),
            code,
        })
    }

    fn matches(&self, error: &LastError) -> bool {
        if error.error_type.as_deref() != Some(self.error_type.as_str()) {
            return false;
        }
        let Some(filter) = &self.code else {
            return true;
        };
        // PHP writes an integer for http/timeout and a string for hook
        // errors; both compare by their text.
        let Some(code) = code_text(error.error_code.as_ref()) else {
            return false;
        };
        match filter {
            CodeFilter::Exact(exact) => code == *exact,
            CodeFilter::Class(digit) => {
                code.len() == 3
                    && code.bytes().all(|b| b.is_ascii_digit())
                    && code.as_bytes()[0] == b'0' + digit
            }
        }
    }
}

/// An `errorCode` as text: a JSON integer's digits, a JSON string as is.
fn code_text(code: Option<&Value>) -> Option<String> {
    match code? {
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) => Some(s.clone()),
        _ => None,
    }
}

/// Which rows a requeue takes: final failures, narrowed by every filter
/// given (they AND together).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// Named rows (ids or request PHIDs); none = every failed row.
    pub named: Vec<RequestRef>,
    /// `--hook`.
    pub hook: Option<String>,
    /// `--since`: last attempt at or after.
    pub since: Option<UnixTime>,
    /// `--until`: last attempt at or before.
    pub until: Option<UnixTime>,
    /// `--error`.
    pub error: Option<ErrorFilter>,
}

/// Why a named row is not taken.
fn left_out_reason(selection: &Selection, row: &RequestRow) -> Option<&'static str> {
    if row.status != RequestStatus::Failed {
        return Some("not failed");
    }
    if row.defect.is_some() {
        // Its PHID columns were read lossily: never written back.
        return Some("unreadable row");
    }
    if selection
        .hook
        .as_deref()
        .is_some_and(|hook| row.webhook_phid != hook)
    {
        return Some("other hook");
    }
    if selection.since.is_some() || selection.until.is_some() {
        // Epoch 0 is "never attempted" (a hook error), not 1970.
        let epoch = row.last_request_epoch;
        if epoch == 0
            || selection.since.is_some_and(|since| epoch < since)
            || selection.until.is_some_and(|until| epoch > until)
        {
            return Some("last attempt outside --since/--until");
        }
    }
    if let Some(filter) = &selection.error {
        if !filter.matches(&LastError::of(row)) {
            return Some("other error");
        }
    }
    None
}

impl Selection {
    /// Refuses to select every failed row by accident.
    pub fn check(&self) -> Result<(), AdminError> {
        if self == &Self::default() {
            return Err(AdminError::Usage(
                "requeue needs a selector: row ids or PHIDs, --hook, --since, --until or \
                 --error (filters AND together)"
                    .to_owned(),
            ));
        }
        if let (Some(since), Some(until)) = (self.since, self.until) {
            if since > until {
                return Err(AdminError::Usage(format!(
                    "--since ({}) is after --until ({})",
                    utc(since),
                    utc(until)
                )));
            }
        }
        Ok(())
    }

    /// Whether a requeue takes `row`.
    pub fn selects(&self, row: &RequestRow) -> bool {
        left_out_reason(self, row).is_none()
    }
}

/// What happened (or would) to one selected row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    WouldRequeue,
    Requeued,
    ChangedMeanwhile,
}

impl Fate {
    fn as_str(self) -> &'static str {
        match self {
            Self::WouldRequeue => "would-requeue",
            Self::Requeued => "requeued",
            Self::ChangedMeanwhile => "changed-meanwhile",
        }
    }
}

/// The writer, and the read side's `Db` that names the database in
/// errors.
struct Db {
    writer: MysqlRequeue,
    named: inspect::Db,
}

impl Db {
    fn open(config: &AdminConfig) -> Result<Self, AdminError> {
        let (writer, named) =
            inspect::Db::open_with(config, MysqlRequeue::new, |w| w.reader().clone())?;
        Ok(Self { writer, named })
    }

    fn fail(&self, source: StoreError) -> AdminError {
        self.named.fail(source)
    }
}

/// The run's tally and, for `--json`, its rows.
#[derive(Default)]
struct Tally {
    selected: u64,
    requeued: u64,
    changed: u64,
    rows: Vec<Value>,
    left_out: Vec<Value>,
}

/// `requeue`: lists (dry run) or requeues (`apply`) the rows `selection`
/// (already [checked](Selection::check)) takes.
pub async fn run(
    config: &AdminConfig,
    selection: &Selection,
    apply: bool,
    json_out: bool,
) -> Result<u8, AdminError> {
    let db = Db::open(config)?;
    let lease_secs = config.windows.lease_secs();
    let result = requeue(&db, selection, apply, json_out, lease_secs).await;
    let _ = db.writer.disconnect().await;
    result
}

async fn requeue(
    db: &Db,
    selection: &Selection,
    apply: bool,
    json_out: bool,
    lease_secs: u64,
) -> Result<u8, AdminError> {
    let mut tally = Tally::default();
    if selection.named.is_empty() {
        let mut after = 0;
        loop {
            let page = db
                .writer
                .failed_page(after, PAGE)
                .await
                .map_err(|e| db.fail(e))?;
            let Some(last) = page.last() else { break };
            after = last.id;
            let chosen: Vec<RequestRow> = page
                .into_iter()
                .filter(|row| selection.selects(row))
                .collect();
            act(db, &chosen, apply, json_out, &mut tally).await?;
        }
    } else {
        // Every named row is read before anything is written, so a typo
        // writes nothing.
        let mut rows = Vec::with_capacity(selection.named.len());
        for which in &selection.named {
            let reader = db.writer.reader();
            let found = match which {
                RequestRef::Id(id) => reader.request_by_id(*id).await,
                RequestRef::Phid(phid) => reader.request_by_phid(phid).await,
            }
            .map_err(|e| db.fail(e))?;
            rows.push(found.ok_or_else(|| {
                AdminError::NotFound(format!(
                    "no request with {which} in {}; nothing was changed",
                    reader.database()
                ))
            })?);
        }
        rows.sort_by_key(|row| row.id);
        rows.dedup_by_key(|row| row.id);
        let mut chosen = Vec::with_capacity(rows.len());
        let mut out = Vec::new();
        for row in rows {
            match left_out_reason(selection, &row) {
                None => chosen.push(row),
                Some(reason) => {
                    tally.left_out.push(json!({
                        "id": row.id,
                        "phid": row.phid,
                        "status": row.status.as_str(),
                        "reason": reason,
                    }));
                    out.push(vec![
                        row.id.to_string(),
                        row.phid.clone(),
                        format!("left out: {reason} (status {})", row.status),
                    ]);
                }
            }
        }
        if !json_out && !out.is_empty() {
            emit(&columns(&out))?;
        }
        act(db, &chosen, apply, json_out, &mut tally).await?;
    }
    summary(&tally, apply, json_out, lease_secs)?;
    Ok(exit::OK)
}

/// Requeues (or, in a dry run, lists) `rows`, printing a line each.
async fn act(
    db: &Db,
    rows: &[RequestRow],
    apply: bool,
    json_out: bool,
    tally: &mut Tally,
) -> Result<(), AdminError> {
    let mut table = Vec::with_capacity(rows.len());
    for row in rows {
        tally.selected += 1;
        let fate = if apply {
            match db.writer.requeue(row).await.map_err(|e| db.fail(e))? {
                Requeued::Yes => {
                    tally.requeued += 1;
                    Fate::Requeued
                }
                Requeued::ChangedMeanwhile => {
                    tally.changed += 1;
                    Fate::ChangedMeanwhile
                }
            }
        } else {
            Fate::WouldRequeue
        };
        let error = LastError::of(row);
        if json_out {
            tally.rows.push(json!({
                "id": row.id,
                "phid": row.phid,
                "hook": row.webhook_phid,
                "errorType": error.error_type,
                "errorCode": error.error_code,
                "lastRequestEpoch": row.last_request_epoch,
                "result": fate.as_str(),
            }));
        } else {
            table.push(row_line(row, &error, fate));
        }
    }
    if !table.is_empty() {
        emit(&columns(&table))?;
    }
    Ok(())
}

fn row_line(row: &RequestRow, error: &LastError, fate: Fate) -> Vec<String> {
    let error = match (&error.error_type, code_text(error.error_code.as_ref())) {
        (None, None) => "(no error recorded)".to_owned(),
        (t, c) => format!(
            "{}/{}",
            t.as_deref().unwrap_or("?"),
            c.as_deref().unwrap_or("?")
        ),
    };
    let last = match row.last_request_epoch {
        0 => "never attempted".to_owned(),
        epoch => format!("last attempt {}", utc(epoch)),
    };
    let mut line = vec![
        row.id.to_string(),
        row.phid.clone(),
        row.webhook_phid.clone(),
        error,
        last,
    ];
    match fate {
        Fate::WouldRequeue => {}
        Fate::Requeued => line.push("requeued".to_owned()),
        Fate::ChangedMeanwhile => line.push("changed meanwhile, left alone".to_owned()),
    }
    line
}

/// The closing line: what was (or would be) requeued, and when a daemon
/// with these settings sends it: a requeued row's new `dateModified` makes
/// it wait out one claim lease, as a claim would.
fn summary(tally: &Tally, apply: bool, json_out: bool, lease_secs: u64) -> Result<(), AdminError> {
    if json_out {
        return emit_line(json!({
            "apply": apply,
            "leaseSecs": lease_secs,
            "selected": tally.selected,
            "requeued": tally.requeued,
            "changedMeanwhile": tally.changed,
            "rows": tally.rows,
            "leftOut": tally.left_out,
        }));
    }
    let rows = |n: u64| if n == 1 { "row" } else { "rows" };
    if apply {
        emit_line(format!(
            "requeued {} of {} {} ({} changed meanwhile and {} left alone)",
            tally.requeued,
            tally.selected,
            rows(tally.selected),
            tally.changed,
            if tally.changed == 1 { "was" } else { "were" },
        ))?;
        if tally.requeued == 0 {
            return Ok(());
        }
        emit_line(format!(
            "they go out once one claim lease has passed: in {lease_secs} s with these \
             settings (GORGE_WEBHOOK_CLAIM_LEASE_SEC, raised to cover a delivery); \
             `webhook-admin explain ID` says when for one row"
        ))
    } else {
        emit_line(format!(
            "{} {} would be requeued; run again with --apply to write",
            tally.selected,
            rows(tally.selected)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use webhook_core::LastResult;

    fn failed(properties: &str, epoch: UnixTime) -> RequestRow {
        RequestRow {
            id: 7,
            phid: "PHID-HWBR-aaaaaaaaaaaaaaaaaaaa".into(),
            webhook_phid: "PHID-HWBH-aaaaaaaaaaaaaaaaaaaa".into(),
            object_phid: "PHID-TASK-aaaaaaaaaaaaaaaaaaaa".into(),
            status: RequestStatus::Failed,
            properties: properties.into(),
            last_request_result: if epoch == 0 {
                LastResult::None
            } else {
                LastResult::Fail
            },
            last_request_epoch: epoch,
            date_created: 1,
            date_modified: epoch.max(1),
            defect: None,
        }
    }

    fn error(filter: &str) -> Selection {
        Selection {
            error: Some(ErrorFilter::parse(filter).expect("valid")),
            ..Selection::default()
        }
    }

    #[test]
    fn error_codes_match_exactly_or_by_class_whatever_their_json_type() {
        let int = failed(r#"{"errorType":"http","errorCode":503}"#, 100);
        let text = failed(r#"{"errorType":"http","errorCode":"503"}"#, 100);
        let hook = failed(r#"{"errorType":"hook","errorCode":"disabled"}"#, 0);
        let timeout = failed(r#"{"errorType":"timeout","errorCode":28}"#, 100);
        for row in [&int, &text] {
            assert!(error("http").selects(row));
            assert!(error("http/503").selects(row));
            assert!(error("http/5xx").selects(row));
            assert!(error("http/5XX").selects(row));
            assert!(!error("http/4xx").selects(row));
            assert!(!error("http/500").selects(row));
            assert!(!error("timeout").selects(row));
        }
        assert!(error("hook/disabled").selects(&hook));
        assert!(!error("hook/uri").selects(&hook));
        assert!(error("timeout/28").selects(&timeout));
        assert!(!error("timeout/2xx").selects(&timeout), "28 is no class");
        assert!(!error("http").selects(&failed("not json", 100)));
        assert!(!error("http").selects(&failed("{}", 100)));
    }

    #[test]
    fn bad_error_filters_are_usage_errors() {
        for bad in ["", "/500", "http/"] {
            assert_eq!(
                ErrorFilter::parse(bad)
                    .map(|_| ())
                    .map_err(|e| e.exit_status()),
                Err(exit::USAGE),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn only_final_failures_are_taken() {
        let any = Selection {
            hook: Some("PHID-HWBH-aaaaaaaaaaaaaaaaaaaa".into()),
            ..Selection::default()
        };
        let mut row = failed("{}", 100);
        assert!(any.selects(&row));
        for status in [RequestStatus::Queued, RequestStatus::Sent] {
            row.status = status;
            assert!(!any.selects(&row));
        }
        let mut row = failed("{}", 100);
        row.defect = Some("lossy phid".into());
        assert!(!any.selects(&row));
    }

    #[test]
    fn time_filters_match_the_last_attempt_and_never_a_row_never_attempted() {
        let window = Selection {
            since: Some(100),
            until: Some(200),
            ..Selection::default()
        };
        assert!(window.selects(&failed("{}", 100)));
        assert!(window.selects(&failed("{}", 200)));
        assert!(!window.selects(&failed("{}", 99)));
        assert!(!window.selects(&failed("{}", 201)));
        let until = Selection {
            until: Some(200),
            ..Selection::default()
        };
        assert!(until.selects(&failed("{}", 1)));
        assert!(!until.selects(&failed("{}", 0)), "never attempted");
    }

    #[test]
    fn no_selector_is_refused() {
        assert_eq!(
            Selection::default().check().map_err(|e| e.exit_status()),
            Err(exit::USAGE)
        );
        let backwards = Selection {
            since: Some(200),
            until: Some(100),
            ..Selection::default()
        };
        assert!(backwards.check().is_err());
        assert!(error("http").check().is_ok());
    }

    #[test]
    fn only_this_module_holds_the_writer() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut stack = vec![src];
        let mut checked = 0;
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("read src") {
                let path = entry.expect("entry").path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                if path.extension().is_none_or(|ext| ext != "rs") {
                    continue;
                }
                checked += 1;
                let text = std::fs::read_to_string(&path).expect("read module");
                let names_writer = text.contains("MysqlRequeue") || text.contains("requeue(");
                let is_this = path.file_name().is_some_and(|name| name == "requeue.rs");
                let is_main = path.file_name().is_some_and(|name| name == "main.rs");
                assert!(
                    is_this || is_main || !names_writer,
                    "{} reaches the writer",
                    path.display()
                );
                if is_main {
                    assert!(!text.contains("MysqlRequeue"), "main.rs builds the writer");
                }
            }
        }
        assert!(checked > 10, "read the sources");
    }
}
