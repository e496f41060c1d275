//! The database-backed commands: `stats`, `hooks`, `explain` and
//! `payload`. They read through `webhook-store-mysql`'s `MysqlReader`
//! only, which has no method that writes: no claim, no write-back, no
//! lock. `explain` also asks the daemon which hooks it has paused
//! (`daemon_api`), since that lives in the daemon's memory, and makes the
//! daemon's own checks with the daemon's code: silent mode, the outbound
//! check of the hook's URI (which resolves its host, as the daemon does)
//! and the object check. `explain` shows the request's last attempts from
//! the attempt history too, when there is one (`history`).
//!
//! A hook's HMAC key is loaded only to sign a payload and is never printed;
//! a hook's URI is printed only when asked for.

use std::sync::Arc;

use serde_json::{json, Value};
use webhook_core::hold::{PhorgeConfig, SilentMode};
use webhook_core::{
    Hook, ObjectLookup, Payload, Properties, RequestRow, RequestStatus, StoreError, Transport,
    UnixTime,
};
use webhook_store_mysql::{HookSummary, MysqlConfig, MysqlError, MysqlReader};
use webhook_transport_hyper::HyperTransport;

use crate::clock::{moment, utc, JudgingClock};
use crate::daemon_api::{self, DaemonHooks};
use crate::error::{exit, AdminError};
use crate::explain::checks::{object_check, Ports};
use crate::explain::{explain, row_summary, Explanation, Facts};
use crate::history::{self, Recent};
use crate::out::{emit, emit_bytes, emit_line};
use crate::settings::AdminConfig;
use crate::watch::StreamUrl;

/// Connections the tool needs at most: it runs one statement at a time.
pub(crate) const POOL_MAX: usize = 2;

/// The reader and what to name in error messages.
#[derive(Debug)]
pub struct Db {
    reader: MysqlReader,
    address: String,
}

impl Db {
    /// A lazy pool for the configured database; connects on first use.
    pub fn open(config: &AdminConfig) -> Result<Self, AdminError> {
        Self::open_with(config, MysqlReader::new, MysqlReader::clone).map(|(_, db)| db)
    }

    /// `open`'s pool (the tool's small one) on the configured database,
    /// and the `Db` over its reader that names the database in errors.
    pub(crate) fn open_with<T>(
        config: &AdminConfig,
        open: impl FnOnce(&MysqlConfig) -> Result<T, MysqlError>,
        reader: impl FnOnce(&T) -> MysqlReader,
    ) -> Result<(T, Self), AdminError> {
        let mut mysql = config.mysql.clone();
        mysql.pool_max = POOL_MAX;
        let opened = open(&mysql).map_err(|err| AdminError::Setting {
            variable: webhook_store_mysql::config::HOST.name.to_owned(),
            reason: err.to_string(),
        })?;
        let db = Self {
            reader: reader(&opened),
            address: format!("{}:{}", mysql.host, mysql.port),
        };
        Ok((opened, db))
    }

    /// The reader, for the read-only checks of other commands.
    pub fn reader(&self) -> &MysqlReader {
        &self.reader
    }

    /// The error for a database that answers but cannot serve.
    pub fn unusable(&self, reason: String) -> AdminError {
        self.fail(StoreError::Unavailable(reason.into()))
    }

    /// The error for a failed statement, naming the database.
    pub(crate) fn fail(&self, source: StoreError) -> AdminError {
        AdminError::Database {
            database: self.reader.database().to_owned(),
            address: self.address.clone(),
            source,
        }
    }

    /// The error for a failed statement on another database of the same
    /// server (the attempt history's).
    pub(crate) fn fail_on(&self, database: &str, source: StoreError) -> AdminError {
        AdminError::Database {
            database: database.to_owned(),
            address: self.address.clone(),
            source,
        }
    }

    /// Closes the pool (best effort: the answer has been printed).
    pub async fn close(&self) {
        let _ = self.reader.disconnect().await;
    }

    async fn request(&self, which: &RequestRef) -> Result<RequestRow, AdminError> {
        let found = match which {
            RequestRef::Id(id) => self.reader.request_by_id(*id).await,
            RequestRef::Phid(phid) => self.reader.request_by_phid(phid).await,
        }
        .map_err(|e| self.fail(e))?;
        found.ok_or_else(|| {
            AdminError::NotFound(format!(
                "no request with {which} in {}",
                self.reader.database()
            ))
        })
    }
}

/// How the user named a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestRef {
    /// `herald_webhookrequest.id`.
    Id(u64),
    /// `herald_webhookrequest.phid`.
    Phid(String),
}

impl RequestRef {
    /// `42` or `PHID-HWBR-…`; anything else is a usage error.
    pub fn parse(text: &str) -> Result<Self, AdminError> {
        let text = text.trim();
        if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
            return text
                .parse()
                .map(Self::Id)
                .map_err(|_| AdminError::Usage(format!("request id {text} is out of range")));
        }
        if text.starts_with("PHID-") {
            return Ok(Self::Phid(text.to_owned()));
        }
        Err(AdminError::Usage(format!(
            "{text:?} is neither a request id (e.g. 42) nor a request PHID (PHID-HWBR-...)"
        )))
    }
}

impl std::fmt::Display for RequestRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Id(id) => write!(f, "id {id}"),
            Self::Phid(phid) => write!(f, "PHID {phid}"),
        }
    }
}

/// `stats`: the diagnostics API's numbers, straight from the database.
pub async fn stats(db: &Db, json_out: bool) -> Result<u8, AdminError> {
    let stats = db.reader.stats().await.map_err(|e| db.fail(e))?;
    if json_out {
        emit_line(json!({"data": {
            "queuedCount": stats.queued,
            "sentCount": stats.sent,
            "failedCount": stats.failed,
            "activeWebhooks": stats.active_hooks,
        }}))?;
    } else {
        emit(&format!(
            "database         {}\nqueued           {}\nsent             {}\n\
             failed           {}\nactive webhooks  {}\n",
            db.reader.database(),
            stats.queued,
            stats.sent,
            stats.failed,
            stats.active_hooks
        ))?;
    }
    Ok(exit::OK)
}

/// One hook with its breaker state worked out.
struct HookView {
    summary: HookSummary,
    open: bool,
    closes_about: Option<UnixTime>,
}

/// `hooks`: the API's total plus a per-hook view, with what the daemon
/// knows of each (a Retry-After pause, a key grace) when it can be asked.
pub async fn hooks(
    db: &Db,
    config: &AdminConfig,
    now: UnixTime,
    json_out: bool,
    show_uri: bool,
    daemon: &DaemonAsk,
) -> Result<u8, AdminError> {
    let (known, daemon_note) = match daemon
        .hooks("which hooks it paused (Retry-After) or signs with a previous key too")
        .await
    {
        Ok(known) => (known, None),
        Err(note) => (DaemonHooks::default(), Some(note)),
    };
    let breaker = config.windows.breaker();
    let since = breaker.since(now);
    let total = db.reader.hook_count().await.map_err(|e| db.fail(e))?;
    let summaries = db
        .reader
        .hook_summaries(since)
        .await
        .map_err(|e| db.fail(e))?;
    let mut views = Vec::with_capacity(summaries.len());
    for summary in summaries {
        let open = breaker.is_open(summary.breaker_failures);
        let closes_about = if open {
            let epochs = db
                .reader
                .breaker_failure_epochs(&summary.phid, since)
                .await
                .map_err(|e| db.fail(e))?;
            breaker.closes_at(now, &epochs)
        } else {
            None
        };
        views.push(HookView {
            summary,
            open,
            closes_about,
        });
    }

    if json_out {
        let hooks: Vec<Value> = views
            .iter()
            .map(|v| {
                let s = &v.summary;
                let mut hook = json!({
                    "id": s.id,
                    "phid": s.phid,
                    "name": s.name,
                    "status": s.status,
                    "queuedCount": s.queued,
                    "failedCount": s.failed,
                    "breakerFailures": s.breaker_failures,
                    "breakerThreshold": breaker.threshold,
                    "breakerWindowSecs": breaker.window_secs,
                    "breakerOpen": v.open,
                    "breakerClosesAbout": v.closes_about,
                    "pausedUntil": known.paused.get(&s.phid),
                    "keyGraceUntil": known.key_grace.get(&s.phid),
                });
                if show_uri {
                    hook["uri"] = Value::from(s.uri.as_str());
                }
                hook
            })
            .collect();
        let mut data = json!({"total": total, "hooks": hooks});
        if let Some(note) = &daemon_note {
            data["daemonNote"] = Value::from(note.as_str());
        }
        emit_line(json!({ "data": data }))?;
        return Ok(exit::OK);
    }

    let active = views
        .iter()
        .filter(|v| v.summary.status != "disabled")
        .count();
    let mut text = format!(
        "{total} hooks ({active} not disabled) in {}; a breaker opens at {} failed rows within \
         {} s (judged at {})\n",
        db.reader.database(),
        breaker.threshold,
        breaker.window_secs,
        utc(now)
    );
    if let Some(note) = &daemon_note {
        text.push_str(&format!("note: {note}\n"));
    }
    if views.is_empty() {
        emit(&text)?;
        return Ok(exit::OK);
    }
    let mut header = vec![
        "ID", "NAME", "PHID", "STATUS", "QUEUED", "FAILED", "BREAKER", "DAEMON",
    ];
    if show_uri {
        header.push("URI");
    }
    let mut table: Vec<Vec<String>> = vec![header.into_iter().map(str::to_owned).collect()];
    for v in &views {
        let s = &v.summary;
        let state = match (v.open, v.closes_about) {
            (true, Some(t)) => format!(
                "OPEN {}/{}, closes about {}",
                s.breaker_failures,
                breaker.threshold,
                moment(t, now)
            ),
            (true, None) => format!("OPEN {}/{}", s.breaker_failures, breaker.threshold),
            (false, _) => format!("closed {}/{}", s.breaker_failures, breaker.threshold),
        };
        let mut line = vec![
            s.id.to_string(),
            s.name.clone(),
            s.phid.clone(),
            s.status.clone(),
            s.queued.to_string(),
            s.failed.to_string(),
            state,
            daemon_state(&known, &s.phid, now),
        ];
        if show_uri {
            line.push(s.uri.clone());
        }
        table.push(line);
    }
    text.push_str(&columns(&table));
    emit(&text)?;
    Ok(exit::OK)
}

/// What the daemon said of one hook, for the `DAEMON` column.
fn daemon_state(known: &DaemonHooks, hook: &str, now: UnixTime) -> String {
    let mut parts = Vec::new();
    if let Some(until) = known.paused.get(hook) {
        parts.push(format!(
            "paused (Retry-After) until {}",
            moment(*until, now)
        ));
    }
    if let Some(until) = known.key_grace.get(hook) {
        parts.push(format!(
            "previous key signs too until {}",
            moment(*until, now)
        ));
    }
    if parts.is_empty() {
        "-".to_owned()
    } else {
        parts.join("; ")
    }
}

/// Left-aligned columns two spaces apart; the last column is not padded.
pub(crate) fn columns(table: &[Vec<String>]) -> String {
    let n = table.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n)
        .map(|i| {
            table
                .iter()
                .filter_map(|row| row.get(i))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in table {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if i + 1 < row.len() {
                let pad = widths[i].saturating_sub(cell.chars().count()) + 2;
                line.push_str(&" ".repeat(pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The body that would be POSTed, if one would be built at all: with the
/// transactions the object check finds (the stored list in the order its
/// shape implies where the object's tables cannot be read).
async fn payload_for(db: &Db, row: &RequestRow) -> Result<Result<Payload, String>, AdminError> {
    let object = object_check(&db.reader, row)
        .await
        .map_err(|e| db.fail(e))?;
    Ok(payload_of(row, object.as_ref()))
}

/// [`payload_for`] with the object check's answer at hand.
fn payload_of(row: &RequestRow, object: Option<&ObjectLookup>) -> Result<Payload, String> {
    if let Some(defect) = &row.defect {
        return Err(format!(
            "request {} holds a value outside Phorge's domain ({defect}); it would be failed, \
             not sent",
            row.id
        ));
    }
    let properties = Properties::parse(&row.properties).map_err(|err| {
        format!(
            "request {} has unparseable properties ({err}); it would be failed, not sent",
            row.id
        )
    })?;
    match object {
        Some(ObjectLookup::Found { transactions }) => {
            Ok(Payload::with_transactions(row, &properties, transactions))
        }
        Some(ObjectLookup::Gone) => Err(format!(
            "request {}'s object {} no longer exists; it would be failed with hook error \
             object, not sent",
            row.id, row.object_phid
        )),
        Some(ObjectLookup::Unseen(_)) | None => Ok(Payload::build(row, &properties)),
    }
}

/// `payload`: the body bytes, nothing added.
pub async fn payload(db: &Db, which: &RequestRef) -> Result<u8, AdminError> {
    let row = db.request(which).await?;
    let body = payload_for(db, &row)
        .await?
        .map_err(AdminError::NoPayload)?;
    emit_bytes(body.as_bytes())?;
    Ok(exit::OK)
}

/// Where `explain` asks which hooks the daemon has paused: the daemon's
/// diagnostics address (or why there is none) and its service token.
#[derive(Debug, Clone)]
pub struct DaemonAsk {
    /// `--url`, else `GORGE_LISTEN_ADDR` on loopback.
    pub url: Result<StreamUrl, String>,
    /// `GORGE_SERVICE_TOKEN`.
    pub token: Option<String>,
}

impl DaemonAsk {
    /// What the daemon knows of its hooks; or, when it could not say, the
    /// one-line note that says so, about `what` it was asked for.
    async fn hooks(&self, what: &str) -> Result<DaemonHooks, String> {
        let url = self.url.as_ref().map_err(|why| {
            format!("the daemon was not asked {what}: {why}; judged from the database alone")
        })?;
        daemon_api::daemon_hooks(url, self.token.as_deref())
            .await
            .map_err(|why| {
                format!(
                    "the daemon at {} could not say {what}: {why}; judged from the database alone",
                    daemon_api::state_url(url)
                )
            })
    }

    /// When the daemon's pause of `hook` ends, if it has one; or the note.
    async fn pause_of(&self, hook: &str) -> Result<Option<UnixTime>, String> {
        let hooks = self
            .hooks("whether it paused this hook (Retry-After)")
            .await?;
        Ok(hooks.paused.get(hook).copied())
    }
}

/// How many of a hook's queued rows before the one explained are looked
/// at for a row the hook's run reaches first: the first candidate among
/// them decides, and it is nearly always among the first few.
const EARLIER_ROWS: u64 = 100;

/// `explain`: gathers the facts — the daemon's own checks among them,
/// made with the daemon's code ([`checks`](crate::explain::checks)) —
/// lets [`explain`] judge, prints.
pub async fn explain_request(
    db: &Db,
    config: &AdminConfig,
    which: &RequestRef,
    now: UnixTime,
    json_out: bool,
    daemon: &DaemonAsk,
) -> Result<u8, AdminError> {
    let row = match db.request(which).await {
        Err(AdminError::NotFound(message)) => {
            return Err(AdminError::NotFound(
                match history::kept_after_deletion(db, config, which).await {
                    Some(kept) => format!("{message}; {kept}"),
                    None => message,
                },
            ));
        }
        found => found?,
    };
    let Judged {
        hook,
        object,
        explanation,
    } = judge(db, config, &row, now, daemon).await?;
    let payload = payload_of(&row, object.as_ref());
    // Signed with the hook's key, which is used here and never shown.
    let signature = match (&payload, &hook) {
        (Ok(body), Some(hook)) => Some(body.sign(&hook.hmac_key)),
        _ => None,
    };
    let headers = &config.transport.config().signature_headers;
    let recent = history::recent(db, config, row.id).await;
    let explained = Explained {
        recent: &recent,
        row: &row,
        hook: hook.as_ref(),
        explanation: &explanation,
        payload: &payload,
        signature: signature.as_deref(),
        headers,
    };
    if json_out {
        emit_line(explained.to_json())?;
    } else {
        emit(&explained.to_text())?;
    }
    Ok(exit::OK)
}

/// `explain`'s judgement of `row` at `now`: its hook, the object check's
/// answer, and the explanation with its notes.
pub(crate) struct Judged {
    pub(crate) hook: Option<Hook>,
    pub(crate) object: Option<ObjectLookup>,
    pub(crate) explanation: Explanation,
}

/// Gathers the facts the dispatcher would look at for `row` (its hook,
/// the breaker's failures, the lock's holder, the daemon's pause, its
/// earlier rows, the outbound and object checks) and judges it at `now`.
pub(crate) async fn judge(
    db: &Db,
    config: &AdminConfig,
    row: &RequestRow,
    now: UnixTime,
    daemon: &DaemonAsk,
) -> Result<Judged, AdminError> {
    let queued = row.status == RequestStatus::Queued;
    // Only a queued row can wait for a pause; the daemon is not asked
    // about final ones.
    let (paused_until, daemon_note) = if queued {
        match daemon.pause_of(&row.webhook_phid).await {
            Ok(until) => (until, None),
            Err(note) => (None, Some(note)),
        }
    } else {
        (None, None)
    };
    let hook: Option<Hook> = db
        .reader
        .hook(&row.webhook_phid)
        .await
        .map_err(|e| db.fail(e))?;
    let since = config.windows.breaker().since(now);
    let epochs = db
        .reader
        .breaker_failure_epochs(&row.webhook_phid, since)
        .await
        .map_err(|e| db.fail(e))?;
    let lock_holder = db
        .reader
        .hook_lock_holder(&row.webhook_phid)
        .await
        .map_err(|e| db.fail(e))?;
    let earlier = if queued {
        db.reader
            .queued_before(&row.webhook_phid, row.id, EARLIER_ROWS)
            .await
            .map_err(|e| db.fail(e))?
    } else {
        Vec::new()
    };
    // The daemon's transport, from the same settings: its `resolve` is the
    // outbound check the dispatcher makes. Building it fails only on a
    // fault of the TLS library, which the note names.
    let (transport, transport_note) = match HyperTransport::new(config.transport.clone()) {
        Ok(transport) => (Some(transport), None),
        Err(err) => (
            None,
            queued.then(|| format!("the outbound check of the hook's URI was not made: {err}")),
        ),
    };
    let silent_mode = silent_mode(db, config);
    let clock = JudgingClock::at(now);
    let ports = Ports {
        silent_mode: &silent_mode,
        clock: &clock,
        transport: transport.as_ref().map(|t| t as &dyn Transport),
        objects: &db.reader,
    };
    let checked = ports
        .check(row, hook.as_ref())
        .await
        .map_err(|e| db.fail(e))?;
    let mut explanation = explain(
        &config.windows,
        now,
        &Facts {
            row,
            hook: hook.as_ref(),
            breaker_failure_epochs: &epochs,
            lock_holder,
            paused_until,
            silent: checked.silent,
            fails_when_silent: config.mysql.adopt_php_tasks,
            resolution: checked.resolution.as_ref(),
            object: checked.object.as_ref(),
            earlier: &earlier,
        },
    );
    explanation.notes.extend(daemon_note);
    explanation.notes.extend(transport_note);
    if let (true, Some(hook)) = (queued, &hook) {
        let route = config.transport.config().proxies.describe(&hook.uri);
        explanation
            .notes
            .extend(route.map(|route| format!("the call goes {route}")));
    }
    Ok(Judged {
        hook,
        object: checked.object,
        explanation,
    })
}

/// Phorge's silent mode as the daemon wires it: the `config_entry` table
/// (through the reader), and `local.json` where
/// `GORGE_PHORGE_LOCAL_CONFIG` names it.
fn silent_mode(db: &Db, config: &AdminConfig) -> SilentMode {
    let silent_mode = SilentMode::new(Arc::new(db.reader.clone()) as Arc<dyn PhorgeConfig>);
    match &config.local_config {
        Some(local_config) => silent_mode.with_local_config(Arc::new(local_config.clone())),
        None => silent_mode,
    }
}

/// Everything `explain` prints about one request, for either output.
struct Explained<'a> {
    row: &'a RequestRow,
    hook: Option<&'a Hook>,
    explanation: &'a Explanation,
    payload: &'a Result<Payload, String>,
    signature: Option<&'a str>,
    headers: &'a [String],
    recent: &'a Recent,
}

impl Explained<'_> {
    fn to_json(&self) -> Value {
        let (row, e) = (self.row, self.explanation);
        json!({
            "now": e.now,
            "request": {
                "id": row.id,
                "phid": row.phid,
                "webhookPHID": row.webhook_phid,
                "objectPHID": row.object_phid,
                "status": row.status.as_str(),
                "lastRequestResult": row.last_request_result.as_str(),
                "lastRequestEpoch": row.last_request_epoch,
                "dateCreated": row.date_created,
                "dateModified": row.date_modified,
                "defect": row.defect,
            },
            "hook": self.hook.map(|h| json!({"phid": h.phid, "name": h.name, "status": h.status})),
            "verdict": e.verdict.to_json(e.now),
            "also": e.also.iter().map(|v| v.to_json(e.now)).collect::<Vec<_>>(),
            "notes": e.notes,
            "payload": self.payload.as_ref().ok()
                .map(|p| String::from_utf8_lossy(p.as_bytes()).into_owned()),
            "payloadBytes": self.payload.as_ref().ok().map(|p| p.as_bytes().len()),
            "noPayloadReason": self.payload.as_ref().err(),
            "signature": self.signature,
            "signatureHeaders": self.headers,
            "history": self.recent.to_json(),
        })
    }

    fn to_text(&self) -> String {
        let (row, e) = (self.row, self.explanation);
        let mut out = format!("request {}  {}\n", row.id, row.phid);
        let hook_line = match self.hook {
            Some(h) => format!("{} {:?} ({})", h.phid, h.name, h.status),
            None => format!("{} (no such hook)", row.webhook_phid),
        };
        let mut lines = vec![("hook", hook_line), ("object", row.object_phid.clone())];
        lines.extend(row_summary(row, e.now));
        lines.push(("judged at", format!("{} ({})", utc(e.now), e.now)));
        for (label, value) in lines {
            out.push_str(&format!("  {label:15} {value}\n"));
        }
        let headline = if e.verdict.deliverable_now() {
            "deliverable now"
        } else {
            "not being delivered now"
        };
        out.push_str(&format!(
            "\nverdict: {} ({headline})\n  {}\n",
            e.verdict.code(),
            e.verdict.describe(e.now)
        ));
        for also in &e.also {
            out.push_str(&format!(
                "also: {}\n  {}\n",
                also.code(),
                also.describe(e.now)
            ));
        }
        for note in &e.notes {
            out.push_str(&format!("note: {note}\n"));
        }
        out.push_str(&self.recent.to_text());
        match self.payload {
            Ok(body) => {
                out.push_str(&format!(
                    "\npayload ({} bytes, as `webhook-admin payload {}` prints it):\n{}",
                    body.as_bytes().len(),
                    row.id,
                    String::from_utf8_lossy(body.as_bytes())
                ));
                match self.signature {
                    Some(sig) => {
                        for header in self.headers {
                            out.push_str(&format!("{header}: {sig}\n"));
                        }
                    }
                    None => {
                        out.push_str("no signature: the hook does not exist, so there is no key\n")
                    }
                }
            }
            Err(reason) => out.push_str(&format!("\nno payload: {reason}\n")),
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_named_by_id_or_phid() {
        assert_eq!(RequestRef::parse("42").ok(), Some(RequestRef::Id(42)));
        assert_eq!(
            RequestRef::parse(" PHID-HWBR-abc ").ok(),
            Some(RequestRef::Phid("PHID-HWBR-abc".into()))
        );
        for bad in ["", "-1", "4x", "HWBR-abc", "99999999999999999999999"] {
            assert!(
                matches!(RequestRef::parse(bad), Err(AdminError::Usage(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn columns_align_and_do_not_pad_the_last() {
        let table = vec![
            vec!["A".to_owned(), "BB".to_owned(), "C".to_owned()],
            vec!["aaa".to_owned(), "b".to_owned(), "c".to_owned()],
        ];
        assert_eq!(columns(&table), "A    BB  C\naaa  b   c\n");
    }
}
