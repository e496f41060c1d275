//! Why one request row is or is not being delivered right now — decided by
//! the dispatcher's own rules, never by rules of our own:
//!
//! 1. status: `sent` and `failed` are final (the daemon only ever selects
//!    `queued` rows);
//! 2. Phorge's silent mode, as the core's `Sight` adds up its two sources:
//!    while it is on the daemon polls and claims nothing (`held`), or, when
//!    it adopts Phorge's delivery tasks, fails each row as Phorge's worker
//!    does;
//! 3. the candidate query's predicate with [`Windows::cutoffs`]: a row
//!    that is neither fresh nor past its claim lease, or that failed and is
//!    inside its retry backoff, is not even selected;
//! 4. then, as the dispatcher takes a candidate through its pipeline, in
//!    order: its [`triage`](webhook_core::triage()) (a row `defect`,
//!    unparseable properties, a missing hook, a `disabled` hook), the
//!    outbound check of the hook's URI (`refused`), the hook's pause (a
//!    receiver's `Retry-After`, as the daemon reports it) and its
//!    [`Breaker`](webhook_core::Breaker) — which stop the hook's whole run,
//!    so a row behind one of the hook's rows they hold back waits too —
//!    then the object check (gone: hook error `object`), and a URI whose
//!    host could not be resolved (a failed attempt).
//!
//! Pure: it reads no clock, no database and no daemon. The caller gathers
//! the facts (the row, its hook, the hook's earlier queued rows, the
//! breaker's failure epochs, the lock holder, the daemon's pause of the
//! hook, and what the daemon's own checks answered: [`checks`]) and passes
//! `now`, so every case is unit-tested with a fixed time.

use serde_json::{json, Value};
use webhook_core::hold::{Reading, Sight, Visibility};
use webhook_core::windows::Windows;
use webhook_core::{
    triage_looked_up, Hook, HookError, HookLookup, LastResult, ObjectLookup, Properties,
    RequestRow, RequestStatus, Resolution, Triage, UnixTime,
};

use crate::clock::{moment, utc};

pub mod checks;

/// Everything the decision looks at, gathered by the caller.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    /// The row as stored.
    pub row: &'a RequestRow,
    /// Its hook, or `None` when no hook row has that PHID.
    pub hook: Option<&'a Hook>,
    /// `lastRequestEpoch` of the hook's failed rows from
    /// `Breaker::since(now)` on, oldest first (older ones are ignored).
    pub breaker_failure_epochs: &'a [UnixTime],
    /// The database session holding the hook's lock, if any.
    pub lock_holder: Option<u64>,
    /// When the daemon's pause of the hook ends (its receiver sent
    /// `Retry-After`), if the daemon said it has one.
    pub paused_until: Option<UnixTime>,
    /// Phorge's silent mode, source by source.
    pub silent: Sight,
    /// The daemon fails rows while Phorge is silent instead of holding
    /// them (it adopts Phorge's delivery tasks, so no PHP worker will).
    pub fails_when_silent: bool,
    /// The hook's URI through the outbound check, when it was made.
    pub resolution: Option<&'a Resolution>,
    /// The object check, when it was made.
    pub object: Option<&'a ObjectLookup>,
    /// Queued rows of the same hook before this one, lowest id first: a
    /// hook's run takes its rows in id order.
    pub earlier: &'a [RequestRow],
}

/// `errorType` / `errorCode` as stored (the code keeps its JSON type:
/// PHP writes an integer for `http`/`timeout`, a string for `hook`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LastError {
    /// `errorType`, if present.
    pub error_type: Option<String>,
    /// `errorCode`, if present, as JSON.
    pub error_code: Option<Value>,
}

impl LastError {
    pub(crate) fn of(row: &RequestRow) -> Self {
        match Properties::parse(&row.properties) {
            Ok(properties) => {
                let (error_type, error_code) = properties.error();
                Self {
                    error_type: error_type.map(str::to_owned),
                    error_code: error_code.cloned(),
                }
            }
            Err(_) => Self::default(),
        }
    }

    /// `errorType hook, errorCode "disabled"`.
    fn describe(&self) -> String {
        match (&self.error_type, &self.error_code) {
            (None, None) => "no errorType/errorCode recorded".to_owned(),
            (t, c) => format!(
                "errorType {}, errorCode {}",
                t.as_deref().unwrap_or("(none)"),
                c.as_ref()
                    .map_or_else(|| "(none)".to_owned(), Value::to_string)
            ),
        }
    }
}

/// One answer to "why is (or isn't) this row being delivered?".
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Delivered; final.
    Sent {
        /// The recorded result (PHP records `http`/200 on success too).
        error: LastError,
        /// When the successful attempt finished.
        last_request_epoch: UnixTime,
    },
    /// Given up on; final.
    Failed {
        /// Why, as recorded.
        error: LastError,
        /// `fail` after an HTTP attempt, `none` for a hook error.
        last_request_result: LastResult,
        /// When the last attempt finished (0 = never attempted).
        last_request_epoch: UnixTime,
    },
    /// A candidate now, and nothing stops the dispatcher from claiming it.
    Eligible {
        /// Never touched by a deliverer (`dateModified = dateCreated`).
        fresh: bool,
        /// The hook's failed rows in the breaker window.
        failures: u64,
        /// The breaker's threshold.
        threshold: u64,
        /// The hook's URI passed the outbound check here (`false`: the
        /// check could not be made).
        uri_checked: bool,
    },
    /// Phorge is in global silent mode: the daemon polls and claims
    /// nothing while it is, and the row stays queued for Phorge's worker.
    Held {
        /// Phorge's `local.json` says silent.
        local_config: bool,
        /// Phorge's `config_entry` table says silent.
        database: bool,
    },
    /// Claimed (or written) recently: protected from other claimers.
    InLease {
        /// The claim version.
        date_modified: UnixTime,
        /// The effective lease.
        lease_secs: u64,
        /// First second at which the row is a candidate again.
        until: UnixTime,
    },
    /// The last attempt failed; the retry backoff has not passed yet.
    RetryBackoff {
        /// When the failed attempt finished.
        last_request_epoch: UnixTime,
        /// `GORGE_WEBHOOK_RETRY_BACKOFF_SEC`.
        backoff_secs: u64,
        /// First second at which the row is a candidate again.
        until: UnixTime,
    },
    /// The daemon paused the hook: its receiver answered 429 or 503 with
    /// `Retry-After`, and none of its rows is claimed until then.
    Paused {
        /// When the pause ends.
        until: UnixTime,
    },
    /// The hook's breaker is open: it is skipped without claiming.
    BreakerOpen {
        /// Failed rows of the hook in the window.
        failures: u64,
        /// Failed rows that open the breaker.
        threshold: u64,
        /// The window.
        window_secs: u64,
        /// When enough failures will have slid out for it to close, if no
        /// new ones come in.
        until: UnixTime,
    },
    /// The hook's URI fails the outbound check (not http(s) with a host,
    /// no such host, or an address the deny list holds): the row will be
    /// failed.
    Refused {
        /// Why, as the transport says it.
        reason: String,
    },
    /// The request's object no longer exists: the row will be failed, as
    /// Phorge's worker fails it.
    ObjectGone {
        /// The object's PHID.
        object_phid: String,
    },
    /// The hook's host name could not be resolved just now: the row will be
    /// claimed and its attempt recorded as failed, with no POST.
    ResolveFailed {
        /// cURL's number, written as `errorCode`.
        error_code: i64,
    },
    /// Phorge is in global silent mode and the daemon adopts Phorge's
    /// delivery tasks: the row will be failed as Phorge's worker fails it.
    Silenced,
    /// The hook exists but is `disabled`: the row will be failed.
    HookDisabled {
        /// The hook.
        hook_phid: String,
    },
    /// No hook row has the request's `webhookPHID`: the row will be failed.
    HookMissing {
        /// The PHID looked for.
        hook_phid: String,
    },
    /// `properties` is not a usable JSON object: the row will be failed.
    PropertiesUnparseable {
        /// Why, from `Properties::parse`.
        error: String,
    },
    /// The row holds values outside Phorge's domain: the row will be failed.
    InvalidRow {
        /// What the store found wrong.
        defect: String,
    },
}

impl Verdict {
    /// A stable name for scripts (`--json`'s `verdict.code`).
    pub fn code(&self) -> &'static str {
        match self {
            Self::Sent { .. } => "sent",
            Self::Failed { .. } => "failed",
            Self::Eligible { .. } => "eligible",
            Self::InLease { .. } => "in-lease",
            Self::RetryBackoff { .. } => "retry-backoff",
            Self::Held { .. } => "held",
            Self::Paused { .. } => "paused",
            Self::BreakerOpen { .. } => "breaker-open",
            Self::Refused { .. } => "refused",
            Self::ObjectGone { .. } => "object-gone",
            Self::ResolveFailed { .. } => "resolve-failed",
            Self::Silenced => "silenced",
            Self::HookDisabled { .. } => "hook-disabled",
            Self::HookMissing { .. } => "hook-missing",
            Self::PropertiesUnparseable { .. } => "properties-unparseable",
            Self::InvalidRow { .. } => "invalid-row",
        }
    }

    /// When this reason stops applying, for the waiting ones.
    pub fn until(&self) -> Option<UnixTime> {
        match self {
            Self::InLease { until, .. }
            | Self::RetryBackoff { until, .. }
            | Self::Paused { until }
            | Self::BreakerOpen { until, .. } => Some(*until),
            _ => None,
        }
    }

    /// Only an eligible row is about to be POSTed.
    pub fn deliverable_now(&self) -> bool {
        matches!(self, Self::Eligible { .. })
    }

    /// The hook error the dispatcher writes for this reason, if it fails
    /// the row without an HTTP attempt.
    pub fn hook_error(&self) -> Option<&'static str> {
        let error = match self {
            Self::Refused { .. } => HookError::Uri,
            Self::ObjectGone { .. } => HookError::Object,
            Self::Silenced => HookError::Silent,
            Self::HookDisabled { .. } => HookError::Disabled,
            Self::HookMissing { .. } => HookError::NotFound,
            Self::PropertiesUnparseable { .. } => HookError::InvalidProperties,
            Self::InvalidRow { .. } => HookError::InvalidRow,
            _ => return None,
        };
        Some(error.code())
    }

    /// The plain-words explanation, with the numbers, relative to `now`.
    pub fn describe(&self, now: UnixTime) -> String {
        const WILL_FAIL: &str = "when the daemon next picks this row up it marks it failed \
            (lastRequestResult none, no HTTP call) with errorType hook, errorCode";
        match self {
            Self::Sent {
                error,
                last_request_epoch,
            } => format!(
                "sent: delivered at {} ({}); final, the daemon never selects it again",
                moment(*last_request_epoch, now),
                error.describe()
            ),
            Self::Failed {
                error,
                last_request_result,
                last_request_epoch,
            } => {
                let how = match (last_request_result, *last_request_epoch) {
                    (LastResult::Fail, epoch) if epoch > 0 => format!(
                        "the last HTTP attempt failed at {} and retry is not \"forever\"",
                        moment(epoch, now)
                    ),
                    _ => "no HTTP attempt was made (a hook error)".to_owned(),
                };
                format!(
                    "failed: given up on ({}); {how}; final, the daemon never selects it again",
                    error.describe()
                )
            }
            Self::Eligible {
                fresh,
                failures,
                threshold,
                uri_checked,
            } => format!(
                "eligible now: {}, and the hook's breaker is closed ({failures} of {threshold} \
                 failed rows); {}",
                if *fresh {
                    "fresh (dateModified = dateCreated), so a candidate at once"
                } else {
                    "past its claim lease and any retry backoff"
                },
                if *uri_checked {
                    "the hook's URI passes the outbound check, so the next poll claims it and \
                     POSTs it"
                } else {
                    "the next poll claims it and POSTs it if the hook's URI passes the outbound \
                     check (not made here)"
                }
            ),
            Self::Held {
                local_config,
                database,
            } => format!(
                "held: Phorge is in global silent mode (phabricator.silent is on in {}), and \
                 while it is the daemon polls and claims nothing; the row stays queued for \
                 Phorge's worker to mark failed (errorCode \"silent\"), and goes out if silent \
                 mode ends first",
                match (local_config, database) {
                    (true, true) => "Phorge's local.json and its config_entry table",
                    (true, false) => "Phorge's local.json",
                    _ => "Phorge's config_entry table",
                }
            ),
            Self::Silenced => format!(
                "Phorge is in global silent mode and this daemon adopts Phorge's delivery tasks \
                 (GORGE_WEBHOOK_ADOPT_PHP_TASKS), so it does what Phorge's worker does: {WILL_FAIL} \
                 \"silent\""
            ),
            Self::Refused { reason } => format!(
                "refused: the hook's URI fails the outbound check ({reason}): {WILL_FAIL} \"uri\""
            ),
            Self::ObjectGone { object_phid } => format!(
                "the request's object {object_phid} no longer exists: {WILL_FAIL} \"object\", as \
                 Phorge's worker does"
            ),
            Self::ResolveFailed { error_code } => format!(
                "the hook's host name could not be resolved just now (resolved here as the \
                 daemon resolves it, with this host's resolver): the next poll claims the row and \
                 records a failed attempt (errorType http, errorCode {error_code}) without a POST; \
                 a retry=forever row is tried again after the retry backoff, any other is failed"
            ),
            Self::InLease {
                date_modified,
                lease_secs,
                until,
            } => format!(
                "inside a claim lease until {}: dateModified {date_modified} + effective lease \
                 {lease_secs} s. A deliverer claimed or wrote this row then; no other claimer \
                 may take it before the lease ends",
                moment(*until, now)
            ),
            Self::RetryBackoff {
                last_request_epoch,
                backoff_secs,
                until,
            } => format!(
                "waiting out retry backoff until {}: the last attempt failed at \
                 lastRequestEpoch {last_request_epoch} + GORGE_WEBHOOK_RETRY_BACKOFF_SEC \
                 {backoff_secs} s",
                moment(*until, now)
            ),
            Self::Paused { until } => format!(
                "hook paused until {}: its receiver answered 429 or 503 with Retry-After, so \
                 this daemon instance claims none of the hook's rows before then (the row's own \
                 retry spacing still applies after it)",
                moment(*until, now)
            ),
            Self::BreakerOpen {
                failures,
                threshold,
                window_secs,
                until,
            } => format!(
                "hook breaker open until about {}: {failures} failed rows in the last \
                 {window_secs} s, threshold {threshold}. The hook is skipped without claiming \
                 until {} of them slide out of the window (sooner never; later if new failures \
                 come in)",
                moment(*until, now),
                failures.saturating_sub(*threshold) + 1
            ),
            Self::HookDisabled { hook_phid } => {
                format!("hook {hook_phid} is disabled: {WILL_FAIL} \"disabled\"")
            }
            Self::HookMissing { hook_phid } => {
                format!("hook {hook_phid} does not exist: {WILL_FAIL} \"not-found\"")
            }
            Self::PropertiesUnparseable { error } => format!(
                "properties unparseable ({error}): {WILL_FAIL} \"invalid-properties\", keeping \
                 the original text under gorgeOriginalProperties"
            ),
            Self::InvalidRow { defect } => format!(
                "the row holds a value outside Phorge's domain ({defect}): {WILL_FAIL} \
                 \"invalid-row\""
            ),
        }
    }

    /// The `--json` form.
    pub fn to_json(&self, now: UnixTime) -> Value {
        let mut value = json!({
            "code": self.code(),
            "deliverableNow": self.deliverable_now(),
            "until": self.until(),
            "message": self.describe(now),
        });
        let extra = match self {
            Self::Sent { error, .. } | Self::Failed { error, .. } => json!({
                "errorType": error.error_type,
                "errorCode": error.error_code,
            }),
            Self::Eligible {
                failures,
                threshold,
                uri_checked,
                ..
            } => json!({"failures": failures, "threshold": threshold, "uriChecked": uri_checked}),
            Self::Held {
                local_config,
                database,
            } => json!({"localConfig": local_config, "database": database}),
            Self::ResolveFailed { error_code } => {
                json!({"errorType": "http", "errorCode": error_code})
            }
            Self::Refused { reason } => json!({"hookError": self.hook_error(), "reason": reason}),
            Self::InLease { lease_secs, .. } => json!({"leaseSecs": lease_secs}),
            Self::RetryBackoff { backoff_secs, .. } => json!({"backoffSecs": backoff_secs}),
            Self::Paused { .. } => json!({"reason": "retry-after"}),
            Self::BreakerOpen {
                failures,
                threshold,
                window_secs,
                ..
            } => json!({"failures": failures, "threshold": threshold, "windowSecs": window_secs}),
            other => json!({"hookError": other.hook_error()}),
        };
        if let (Some(map), Value::Object(extra)) = (value.as_object_mut(), extra) {
            map.extend(extra);
        }
        value
    }
}

/// The whole answer: the reason that applies first, the others that apply
/// too (in the order they would be met), and notes.
#[derive(Debug, Clone, PartialEq)]
pub struct Explanation {
    /// The clock reading everything was judged at.
    pub now: UnixTime,
    /// What stops (or lets through) delivery first.
    pub verdict: Verdict,
    /// Further reasons that apply now: the other wait, and what happens
    /// once the waiting is over if that is not a delivery.
    pub also: Vec<Verdict>,
    /// Context that changes nothing but explains a number.
    pub notes: Vec<String>,
}

/// Judges `facts.row` at `now` under `windows`, as the dispatcher would.
pub fn explain(windows: &Windows, now: UnixTime, facts: &Facts<'_>) -> Explanation {
    let row = facts.row;
    let mut notes = Vec::new();
    let (verdict, also) = match row.status {
        RequestStatus::Sent => (
            Verdict::Sent {
                error: LastError::of(row),
                last_request_epoch: row.last_request_epoch,
            },
            Vec::new(),
        ),
        RequestStatus::Failed => (
            Verdict::Failed {
                error: LastError::of(row),
                last_request_result: row.last_request_result,
                last_request_epoch: row.last_request_epoch,
            },
            Vec::new(),
        ),
        RequestStatus::Queued => queued(windows, now, facts, &mut notes),
    };

    if row.status == RequestStatus::Queued {
        if row.date_modified == row.date_created + 1
            && row.last_request_epoch == 0
            && matches!(verdict, Verdict::InLease { .. })
        {
            notes.push(
                "dateModified is dateCreated + 1 and no attempt was ever recorded: either a \
                 deliverer claimed it in its creation second, or Phorge's insert read the clock \
                 twice. Both look the same, so the row waits out one lease"
                    .to_owned(),
            );
        }
        if let Some(holder) = facts.lock_holder {
            notes.push(format!(
                "the hook's lock is held by database session {holder} (a daemon instance, which \
                 under task adoption keeps it between deliveries, or a PHP worker working on \
                 this hook): rows of one hook are delivered one at a time by whoever holds it"
            ));
        }
        notes.extend(silent_mode_unseen(facts.silent));
    }
    Explanation {
        now,
        verdict,
        also,
        notes,
    }
}

/// A queued row: what applies first, and the rest in the order they would
/// be met — the hold, the waits before the row is a candidate again (the
/// one that ends last first), then what the pipeline does with it.
fn queued(
    windows: &Windows,
    now: UnixTime,
    facts: &Facts<'_>,
    notes: &mut Vec<String>,
) -> (Verdict, Vec<Verdict>) {
    let mut waits = candidate_waits(windows, now, facts.row);
    waits.sort_by_key(|w| std::cmp::Reverse(w.until()));
    let silent = facts.silent;
    if silent.held() && !facts.fails_when_silent {
        waits.insert(
            0,
            Verdict::Held {
                local_config: silent.local_config == Reading::On,
                database: silent.database == Reading::On,
            },
        );
    }
    let (then, behind) = processing(windows, now, facts);
    let mut reasons = waits;
    if let Some((id, own)) = behind {
        notes.push(format!(
            "request {id}, queued before this one for the same hook, comes first in the hook's \
             run, and the run stops there while the hook is {}: this row is not reached before \
             that ends",
            match then {
                Verdict::Paused { .. } => "paused",
                _ => "held back by its breaker",
            }
        ));
        reasons.push(then);
        reasons.push(own);
    } else if reasons.is_empty() || !then.deliverable_now() {
        reasons.push(then);
    }
    let first = reasons.remove(0);
    (first, reasons)
}

/// The candidate query's predicate, as the reasons it excludes a queued row.
fn candidate_waits(windows: &Windows, now: UnixTime, row: &RequestRow) -> Vec<Verdict> {
    let cutoffs = windows.cutoffs(now);
    let mut waits = Vec::new();
    if !cutoffs.past_lease(row) {
        waits.push(Verdict::InLease {
            date_modified: row.date_modified,
            lease_secs: windows.lease_secs(),
            until: row.date_modified.saturating_add(windows.lease_secs()),
        });
    }
    if !cutoffs.past_backoff(row) {
        let backoff_secs = windows.settings().retry_backoff_secs;
        waits.push(Verdict::RetryBackoff {
            last_request_epoch: row.last_request_epoch,
            backoff_secs,
            until: row.last_request_epoch.saturating_add(backoff_secs),
        });
    }
    waits
}

/// The pipeline's checks on a candidate, in the dispatcher's order,
/// stopping at the first that applies: silent mode's hook error (when the
/// daemon fails rows while Phorge is silent), the dispatcher's own
/// [`triage`](webhook_core::triage()), the outbound check, the hook's
/// pause and breaker, the object check, and a host that did not resolve.
/// A row failed on its own checks is not reached while an earlier row of
/// its hook stops the run: then the stop comes first, with the id of that
/// row and the row's own verdict.
fn processing(
    windows: &Windows,
    now: UnixTime,
    facts: &Facts<'_>,
) -> (Verdict, Option<(u64, Verdict)>) {
    let row = facts.row;
    if silenced(facts, row) {
        return (Verdict::Silenced, None);
    }
    if let Err(own) = triaged(row, facts.hook) {
        let own_fault = matches!(
            own,
            Verdict::InvalidRow { .. } | Verdict::PropertiesUnparseable { .. }
        );
        return match stopped_before(windows, now, facts).filter(|_| own_fault) {
            Some((id, stop)) => (stop, Some((id, own))),
            None => (own, None),
        };
    }
    if let Some(Resolution::Refused(why)) = facts.resolution {
        return (
            Verdict::Refused {
                reason: why.to_string(),
            },
            None,
        );
    }
    if let Some(stop) = hook_stop(windows, now, facts) {
        return (stop, None);
    }
    if let Some(ObjectLookup::Gone) = facts.object {
        return (
            Verdict::ObjectGone {
                object_phid: row.object_phid.clone(),
            },
            None,
        );
    }
    if let Some(Resolution::Failed(failure)) = facts.resolution {
        return (
            Verdict::ResolveFailed {
                error_code: failure.curl_code(),
            },
            None,
        );
    }
    let breaker = windows.breaker();
    let failures = breaker
        .counted_failures(now, facts.breaker_failure_epochs)
        .len() as u64;
    let verdict = Verdict::Eligible {
        fresh: row.is_fresh(),
        failures,
        threshold: breaker.threshold,
        uri_checked: matches!(facts.resolution, Some(Resolution::Ready(_))),
    };
    (verdict, None)
}

/// Whether the daemon fails `row` for silent mode before its triage, as
/// the dispatcher's first stage does: only while Phorge is silent, when
/// the daemon fails rows rather than holding them, and for a row whose
/// own values and properties can be written back as they are.
fn silenced(facts: &Facts<'_>, row: &RequestRow) -> bool {
    facts.fails_when_silent
        && facts.silent.held()
        && row.defect.is_none()
        && Properties::parse(&row.properties).is_ok()
}

/// The dispatcher's [`triage`](webhook_core::triage()) of `row` with
/// `hook` as looked up: `Err` with the verdict of the check that fails it.
fn triaged(row: &RequestRow, hook: Option<&Hook>) -> Result<(), Verdict> {
    let hook = match hook {
        Some(hook) => HookLookup::Found(hook.clone()),
        None => HookLookup::Missing,
    };
    match triage_looked_up(row, hook) {
        Triage::Ready { .. } => Ok(()),
        Triage::InvalidRow { defect, .. } => Err(Verdict::InvalidRow {
            defect: defect.to_owned(),
        }),
        Triage::InvalidProperties { error, .. } => Err(Verdict::PropertiesUnparseable {
            error: error.to_string(),
        }),
        // A lookup gathered beforehand is never `Unavailable`: a database
        // error stopped the command before it got here.
        Triage::HookMissing { .. } | Triage::HookUnavailable => Err(Verdict::HookMissing {
            hook_phid: row.webhook_phid.clone(),
        }),
        Triage::HookDisabled { hook, .. } => Err(Verdict::HookDisabled {
            hook_phid: hook.phid,
        }),
    }
}

/// What stops the hook's run at any row that gets that far (the guard's
/// order: the daemon's pause of the hook, then its breaker).
fn hook_stop(windows: &Windows, now: UnixTime, facts: &Facts<'_>) -> Option<Verdict> {
    if let Some(until) = facts.paused_until.filter(|until| *until > now) {
        return Some(Verdict::Paused { until });
    }
    let breaker = windows.breaker();
    let counted = breaker.counted_failures(now, facts.breaker_failure_epochs);
    let failures = counted.len() as u64;
    breaker.is_open(failures).then(|| Verdict::BreakerOpen {
        failures,
        threshold: breaker.threshold,
        window_secs: breaker.window_secs,
        until: breaker.closes_at(now, counted).unwrap_or(now),
    })
}

/// The stop an earlier row of the hook meets first, with that row's id:
/// the first of [`Facts::earlier`] that is a candidate now and passes
/// triage and the outbound check reaches the hook's pause and breaker,
/// and the run ends there.
fn stopped_before(windows: &Windows, now: UnixTime, facts: &Facts<'_>) -> Option<(u64, Verdict)> {
    let hook = facts.hook?;
    if facts.fails_when_silent && facts.silent.held() {
        // Such a row is failed for silent mode before the guard.
        return None;
    }
    if matches!(facts.resolution, Some(Resolution::Refused(_))) {
        return None;
    }
    let stop = hook_stop(windows, now, facts)?;
    let cutoffs = windows.cutoffs(now);
    facts
        .earlier
        .iter()
        .find(|earlier| {
            cutoffs.past_lease(earlier)
                && cutoffs.past_backoff(earlier)
                && triaged(earlier, Some(hook)).is_ok()
        })
        .map(|earlier| (earlier.id, stop))
}

/// A note when silent mode cannot be seen where Phorge keeps it, so a
/// verdict of delivery may be wrong while Phorge is silent.
fn silent_mode_unseen(silent: Sight) -> Option<String> {
    let why = match (silent.visibility(), silent.local_config) {
        (Visibility::DatabaseOnly | Visibility::Invisible, Reading::NotSet) => {
            "GORGE_PHORGE_LOCAL_CONFIG is not set here"
        }
        (Visibility::DatabaseOnly | Visibility::Invisible, _) => {
            "Phorge's local.json cannot be read here"
        }
        _ => return None,
    };
    Some(format!(
        "silent mode set with bin/config set is not seen: {why}, and a daemon configured alike \
         delivers while Phorge is silent (webhook-admin doctor says more)"
    ))
}

/// A one-line summary of the row's columns, for the text output.
pub fn row_summary(row: &RequestRow, now: UnixTime) -> Vec<(&'static str, String)> {
    let last = match (row.last_request_result, row.last_request_epoch) {
        (result, 0) => format!("{result} (never attempted)"),
        (result, epoch) => format!("{result} at {}", moment(epoch, now)),
    };
    let retry = match Properties::parse(&row.properties) {
        Ok(p) if p.retries_forever() => "forever (stays queued after a failed attempt)".to_owned(),
        Ok(_) => "not forever (fails after one failed attempt)".to_owned(),
        Err(_) => "unknown (properties unparseable)".to_owned(),
    };
    let mut lines = vec![
        ("status", row.status.to_string()),
        ("last attempt", last),
        (
            "dateCreated",
            format!("{} ({})", utc(row.date_created), row.date_created),
        ),
        (
            "dateModified",
            format!("{} ({})", utc(row.date_modified), row.date_modified),
        ),
        ("retry", retry),
        ("recorded error", LastError::of(row).describe()),
    ];
    if let Some(defect) = &row.defect {
        lines.push(("defect", defect.clone()));
    }
    lines
}

#[cfg(test)]
mod agrees_with_dispatcher;

#[cfg(test)]
mod tests {
    use super::*;
    use webhook_core::windows::Settings;
    use webhook_core::{Target, TransportFailure, UriRefusal};

    const NOW: UnixTime = 1_700_000_000;

    /// Both of Phorge's sources read, neither silent.
    const SEEN_OFF: Sight = Sight {
        local_config: Reading::Off,
        database: Reading::Off,
    };
    const HOOK: &str = "PHID-HWBH-explainaaaaaaaaaaaa";

    /// Defaults: lease 30 s, backoff 60 s, breaker 10 rows in 300 s.
    fn windows() -> Windows {
        Windows::try_new(Settings::default()).expect("defaults")
    }

    fn hook(status: &str) -> Hook {
        Hook {
            phid: HOOK.into(),
            name: "alpha".into(),
            uri: "https://example.invalid/".into(),
            status: status.into(),
            hmac_key: "abcdefghijklmnopqrstuvwxyz234567".into(),
        }
    }

    fn row(status: RequestStatus, created: UnixTime, modified: UnixTime) -> RequestRow {
        RequestRow {
            id: 7,
            phid: "PHID-HWBR-explainaaaaaaaaaaaa".into(),
            webhook_phid: HOOK.into(),
            object_phid: "PHID-TASK-aaaaaaaaaaaaaaaaaaaa".into(),
            status,
            properties: r#"{"retry":"forever"}"#.into(),
            last_request_result: LastResult::None,
            last_request_epoch: 0,
            date_created: created,
            date_modified: modified,
            defect: None,
        }
    }

    fn failed_attempt(epoch: UnixTime) -> RequestRow {
        RequestRow {
            last_request_result: LastResult::Fail,
            last_request_epoch: epoch,
            properties: r#"{"retry":"forever","errorType":"http","errorCode":500}"#.into(),
            ..row(RequestStatus::Queued, epoch - 100, epoch)
        }
    }

    /// The facts of a row nothing else is known of: silent mode off in both
    /// sources, no check made, no earlier rows.
    fn facts<'a>(row: &'a RequestRow, hook: Option<&'a Hook>, epochs: &'a [UnixTime]) -> Facts<'a> {
        Facts {
            row,
            hook,
            breaker_failure_epochs: epochs,
            lock_holder: None,
            paused_until: None,
            silent: SEEN_OFF,
            fails_when_silent: false,
            resolution: None,
            object: None,
            earlier: &[],
        }
    }

    /// `facts` judged with the default windows at `NOW`.
    fn judged(facts: &Facts<'_>) -> Explanation {
        explain(&windows(), NOW, facts)
    }

    fn judge(row: &RequestRow, hook: Option<&Hook>, epochs: &[UnixTime]) -> Explanation {
        judged(&facts(row, hook, epochs))
    }

    #[test]
    fn sent_is_final_with_its_recorded_result() {
        let mut r = row(RequestStatus::Sent, NOW - 100, NOW - 90);
        r.last_request_result = LastResult::Okay;
        r.last_request_epoch = NOW - 90;
        r.properties = r#"{"errorType":"http","errorCode":200}"#.into();
        let e = judge(&r, Some(&hook("enabled")), &[]);
        assert_eq!(
            e.verdict,
            Verdict::Sent {
                error: LastError {
                    error_type: Some("http".into()),
                    error_code: Some(Value::from(200))
                },
                last_request_epoch: NOW - 90
            }
        );
        assert!(e.also.is_empty());
        let text = e.verdict.describe(NOW);
        assert!(text.contains("errorType http, errorCode 200"), "{text}");
        assert!(text.contains("1m 30s ago"), "{text}");
    }

    #[test]
    fn failed_is_final_and_says_whether_it_was_a_hook_error() {
        let mut r = row(RequestStatus::Failed, NOW - 100, NOW - 99);
        r.properties = r#"{"errorType":"hook","errorCode":"disabled"}"#.into();
        let e = judge(&r, None, &[]);
        assert_eq!(e.verdict.code(), "failed");
        let text = e.verdict.describe(NOW);
        assert!(
            text.contains("errorType hook, errorCode \"disabled\""),
            "{text}"
        );
        assert!(text.contains("no HTTP attempt"), "{text}");
        // A final row is not judged further, even with a missing hook.
        assert!(e.also.is_empty());

        let mut r = failed_attempt(NOW - 20);
        r.status = RequestStatus::Failed;
        let text = judge(&r, None, &[]).verdict.describe(NOW);
        assert!(text.contains("errorCode 500"), "{text}");
        assert!(text.contains("retry is not \"forever\""), "{text}");
    }

    #[test]
    fn a_fresh_row_is_eligible_at_once() {
        let r = row(RequestStatus::Queued, NOW - 1, NOW - 1);
        let e = judge(&r, Some(&hook("enabled")), &[NOW - 5]);
        assert_eq!(
            e.verdict,
            Verdict::Eligible {
                fresh: true,
                failures: 1,
                threshold: 10,
                uri_checked: false
            }
        );
        assert!(e.verdict.deliverable_now());
        assert!(e.also.is_empty() && e.notes.is_empty());
    }

    #[test]
    fn a_claimed_row_waits_out_its_lease_to_the_second() {
        let r = row(RequestStatus::Queued, NOW - 100, NOW - 10);
        let e = judge(&r, Some(&hook("enabled")), &[]);
        assert_eq!(
            e.verdict,
            Verdict::InLease {
                date_modified: NOW - 10,
                lease_secs: 30,
                until: NOW + 20
            }
        );
        assert!(e.also.is_empty());
        assert!(e.verdict.describe(NOW).contains("in 20s"));
        // At `until` the candidate query takes it (dateModified <= now - lease).
        let at_until = explain(
            &windows(),
            NOW + 20,
            &facts(&r, Some(&hook("enabled")), &[]),
        );
        assert!(at_until.verdict.deliverable_now(), "{at_until:?}");
        assert!(!judge(
            &row(RequestStatus::Queued, NOW - 100, NOW - 29),
            Some(&hook("enabled")),
            &[]
        )
        .verdict
        .deliverable_now());
    }

    #[test]
    fn the_lease_follows_the_raised_effective_lease() {
        let raised = Windows::try_new(Settings {
            claim_lease_secs: 5,
            ..Settings::default()
        })
        .expect("valid");
        let r = row(RequestStatus::Queued, NOW - 100, NOW - 10);
        let e = explain(&raised, NOW, &facts(&r, Some(&hook("enabled")), &[]));
        assert_eq!(e.verdict.until(), Some(NOW - 10 + 17));
    }

    #[test]
    fn a_failed_attempt_waits_out_the_backoff() {
        // Failed 40 s ago: past the 30 s lease, inside the 60 s backoff.
        let mut r = failed_attempt(NOW - 40);
        r.date_modified = NOW - 40;
        let e = judge(&r, Some(&hook("enabled")), &[NOW - 40]);
        assert_eq!(
            e.verdict,
            Verdict::RetryBackoff {
                last_request_epoch: NOW - 40,
                backoff_secs: 60,
                until: NOW + 20
            }
        );
        assert!(e.also.is_empty());
        assert!(e
            .verdict
            .describe(NOW)
            .contains("GORGE_WEBHOOK_RETRY_BACKOFF_SEC 60 s"));
    }

    #[test]
    fn lease_and_backoff_together_report_the_later_first() {
        let r = failed_attempt(NOW - 5);
        let e = judge(&r, Some(&hook("enabled")), &[NOW - 5]);
        assert_eq!(e.verdict.code(), "retry-backoff");
        assert_eq!(e.verdict.until(), Some(NOW + 55));
        assert_eq!(e.also.len(), 1);
        assert_eq!(e.also[0].code(), "in-lease");
        assert_eq!(e.also[0].until(), Some(NOW + 25));
    }

    #[test]
    fn an_open_breaker_says_when_enough_failures_slide_out() {
        let r = row(RequestStatus::Queued, NOW - 1, NOW - 1);
        // 12 failures (one too old to count), threshold 10: the breaker
        // closes once the 2 oldest counted ones leave the 300 s window.
        let mut epochs: Vec<UnixTime> = vec![NOW - 301];
        epochs.extend((0..11).map(|i| NOW - 290 + i * 10));
        let e = judge(&r, Some(&hook("enabled")), &epochs);
        let second_oldest = NOW - 280;
        assert_eq!(
            e.verdict,
            Verdict::BreakerOpen {
                failures: 11,
                threshold: 10,
                window_secs: 300,
                until: second_oldest + 301
            }
        );
        let text = e.verdict.describe(NOW);
        assert!(
            text.contains("11 failed rows in the last 300 s, threshold 10"),
            "{text}"
        );
        assert!(text.contains("until 2 of them slide out"), "{text}");
        // At that second the breaker counts 9 rows and lets the row through.
        let later = explain(
            &windows(),
            second_oldest + 301,
            &facts(&r, Some(&hook("enabled")), &epochs),
        );
        assert_eq!(
            later.verdict,
            Verdict::Eligible {
                fresh: true,
                failures: 9,
                threshold: 10,
                uri_checked: false
            }
        );
        // One second earlier it was still open.
        let before = explain(
            &windows(),
            second_oldest + 300,
            &facts(&r, Some(&hook("enabled")), &epochs),
        );
        assert_eq!(before.verdict.code(), "breaker-open");
    }

    #[test]
    fn a_hook_the_daemon_paused_waits_until_the_pause_ends_before_the_breaker() {
        let r = row(RequestStatus::Queued, NOW - 1, NOW - 1);
        let open: Vec<UnixTime> = (0..10).map(|i| NOW - 100 + i).collect();
        let judge_paused = |at: UnixTime, epochs: &[UnixTime]| {
            explain(
                &windows(),
                at,
                &Facts {
                    paused_until: Some(NOW + 5),
                    ..facts(&r, Some(&hook("enabled")), epochs)
                },
            )
        };
        let e = judge_paused(NOW, &open);
        assert_eq!(
            e.verdict,
            Verdict::Paused { until: NOW + 5 },
            "before the breaker"
        );
        assert_eq!(e.verdict.until(), Some(NOW + 5));
        let text = e.verdict.describe(NOW);
        assert!(
            text.starts_with("hook paused until 2023-11-14 22:13:25 UTC (1700000005, in 5s)"),
            "{text}"
        );
        assert!(text.contains("Retry-After"), "{text}");
        assert_eq!(e.verdict.to_json(NOW)["code"], "paused");
        assert_eq!(
            judge_paused(NOW + 5, &[]).verdict.code(),
            "eligible",
            "ended"
        );
    }

    #[test]
    fn below_the_threshold_the_breaker_is_closed() {
        let r = row(RequestStatus::Queued, NOW - 1, NOW - 1);
        let epochs: Vec<UnixTime> = (0..9).map(|i| NOW - 100 + i).collect();
        assert_eq!(
            judge(&r, Some(&hook("firehose")), &epochs).verdict,
            Verdict::Eligible {
                fresh: true,
                failures: 9,
                threshold: 10,
                uri_checked: false
            }
        );
    }

    #[test]
    fn a_disabled_hook_fails_the_row_and_skips_the_breaker() {
        let r = row(RequestStatus::Queued, NOW - 1, NOW - 1);
        let epochs: Vec<UnixTime> = (0..20).map(|i| NOW - 100 + i).collect();
        let e = judge(&r, Some(&hook("disabled")), &epochs);
        assert_eq!(
            e.verdict,
            Verdict::HookDisabled {
                hook_phid: HOOK.into()
            }
        );
        assert_eq!(e.verdict.hook_error(), Some("disabled"));
        assert!(e.verdict.describe(NOW).contains("errorCode \"disabled\""));
    }

    #[test]
    fn a_missing_hook_fails_the_row() {
        let r = row(RequestStatus::Queued, NOW - 1, NOW - 1);
        let e = judge(&r, None, &[]);
        assert_eq!(
            e.verdict,
            Verdict::HookMissing {
                hook_phid: HOOK.into()
            }
        );
        assert!(e.verdict.describe(NOW).contains("\"not-found\""));
    }

    #[test]
    fn unparseable_properties_come_before_the_hook() {
        for text in ["not json", "[1]", r#"{"transactionPHIDs":"x"}"#] {
            let mut r = row(RequestStatus::Queued, NOW - 1, NOW - 1);
            r.properties = text.into();
            let e = judge(&r, None, &[]);
            assert_eq!(e.verdict.code(), "properties-unparseable", "{text}");
            assert_eq!(e.verdict.hook_error(), Some("invalid-properties"));
        }
    }

    #[test]
    fn a_defect_comes_first_of_all_processing_checks() {
        let mut r = row(RequestStatus::Queued, NOW - 1, NOW - 1);
        r.properties = "not json".into();
        r.defect = Some("column objectPHID is not valid UTF-8 (at byte 4)".into());
        let e = judge(&r, None, &[]);
        assert_eq!(
            e.verdict,
            Verdict::InvalidRow {
                defect: "column objectPHID is not valid UTF-8 (at byte 4)".into()
            }
        );
    }

    #[test]
    fn a_waiting_row_also_says_what_happens_afterwards() {
        let r = row(RequestStatus::Queued, NOW - 100, NOW - 10);
        let e = judge(&r, Some(&hook("disabled")), &[]);
        assert_eq!(e.verdict.code(), "in-lease");
        assert_eq!(
            e.also,
            vec![Verdict::HookDisabled {
                hook_phid: HOOK.into()
            }]
        );
    }

    #[test]
    fn creation_second_plus_one_is_explained() {
        let r = row(RequestStatus::Queued, NOW - 3, NOW - 2);
        let e = judge(&r, Some(&hook("enabled")), &[]);
        assert_eq!(e.verdict.until(), Some(NOW - 2 + 30));
        assert_eq!(e.notes.len(), 1);
        assert!(e.notes[0].contains("dateCreated + 1"));
    }

    #[test]
    fn a_held_lock_is_noted_for_queued_rows_only() {
        let r = row(RequestStatus::Queued, NOW - 1, NOW - 1);
        let h = hook("enabled");
        let held = Facts {
            lock_holder: Some(42),
            ..facts(&r, Some(&h), &[])
        };
        let e = judged(&held);
        assert!(e.verdict.deliverable_now());
        assert!(e.notes[0].contains("database session 42"));
        let sent = row(RequestStatus::Sent, NOW - 1, NOW - 1);
        let e = judged(&Facts { row: &sent, ..held });
        assert!(e.notes.is_empty());
    }

    #[test]
    fn json_carries_code_until_and_numbers() {
        let r = failed_attempt(NOW - 40);
        let e = judge(&r, Some(&hook("enabled")), &[]);
        let json = e.verdict.to_json(NOW);
        assert_eq!(json["code"], "retry-backoff");
        assert_eq!(json["until"], NOW + 20);
        assert_eq!(json["backoffSecs"], 60);
        assert_eq!(json["deliverableNow"], false);
        let missing = Verdict::HookMissing {
            hook_phid: HOOK.into(),
        }
        .to_json(NOW);
        assert_eq!(missing["hookError"], "not-found");
        assert_eq!(missing["until"], Value::Null);
    }

    fn ready() -> Resolution {
        Resolution::Ready(Target {
            uri: "https://example.invalid/".into(),
            addrs: vec!["192.0.2.10:443".parse().expect("addr")],
        })
    }

    #[test]
    fn silent_mode_in_either_source_holds_every_queued_row_first() {
        let h = hook("enabled");
        let fresh = row(RequestStatus::Queued, NOW - 1, NOW - 1);
        let leased = row(RequestStatus::Queued, NOW - 100, NOW - 10);
        for (silent, local_config, database) in [
            (
                Sight {
                    local_config: Reading::On,
                    database: Reading::Off,
                },
                true,
                false,
            ),
            (
                Sight {
                    local_config: Reading::NotSet,
                    database: Reading::On,
                },
                false,
                true,
            ),
            (
                Sight {
                    local_config: Reading::On,
                    database: Reading::Unreadable,
                },
                true,
                false,
            ),
        ] {
            let e = judged(&Facts {
                silent,
                ..facts(&fresh, Some(&h), &[])
            });
            assert_eq!(
                e.verdict,
                Verdict::Held {
                    local_config,
                    database
                },
                "{silent:?}"
            );
            assert!(e.also.is_empty(), "{e:?}");
            assert!(!e.verdict.deliverable_now());
            assert_eq!(e.verdict.hook_error(), None);
            let text = e.verdict.describe(NOW);
            assert!(
                text.starts_with("held: Phorge is in global silent mode"),
                "{text}"
            );
            // A row in its lease is held too; the lease follows.
            let e = judged(&Facts {
                silent,
                ..facts(&leased, Some(&h), &[])
            });
            assert_eq!(e.verdict.code(), "held");
            assert_eq!(
                e.also.iter().map(Verdict::code).collect::<Vec<_>>(),
                ["in-lease"]
            );
        }
        // What the row meets once silent mode ends is said too.
        let e = judged(&Facts {
            silent: Sight {
                local_config: Reading::On,
                database: Reading::Off,
            },
            ..facts(&fresh, Some(&hook("disabled")), &[])
        });
        assert_eq!(
            e.also.iter().map(Verdict::code).collect::<Vec<_>>(),
            ["hook-disabled"]
        );
        // Final rows are not held.
        let sent = row(RequestStatus::Sent, NOW - 1, NOW - 1);
        let e = judged(&Facts {
            silent: Sight {
                local_config: Reading::On,
                database: Reading::On,
            },
            ..facts(&sent, Some(&h), &[])
        });
        assert_eq!(e.verdict.code(), "sent");
    }

    #[test]
    fn a_daemon_adopting_phorges_tasks_fails_rows_while_silent() {
        let h = hook("enabled");
        let silent = Sight {
            local_config: Reading::On,
            database: Reading::Off,
        };
        let fresh = row(RequestStatus::Queued, NOW - 1, NOW - 1);
        let e = judged(&Facts {
            silent,
            fails_when_silent: true,
            ..facts(&fresh, Some(&h), &[])
        });
        assert_eq!(e.verdict, Verdict::Silenced);
        assert_eq!(e.verdict.hook_error(), Some("silent"));
        // Properties that cannot be written back as they are: triage's.
        let mut broken = fresh.clone();
        broken.properties = "not json".into();
        let e = judged(&Facts {
            silent,
            fails_when_silent: true,
            ..facts(&broken, Some(&h), &[])
        });
        assert_eq!(e.verdict.code(), "properties-unparseable");
    }

    #[test]
    fn a_uri_the_outbound_check_refuses_fails_the_row_before_pause_and_breaker() {
        let r = row(RequestStatus::Queued, NOW - 1, NOW - 1);
        let h = hook("enabled");
        let denied =
            Resolution::Refused(UriRefusal::DeniedAddress("10.0.0.1".parse().expect("ip")));
        let open: Vec<UnixTime> = (0..10).map(|i| NOW - 100 + i).collect();
        let e = judged(&Facts {
            resolution: Some(&denied),
            paused_until: Some(NOW + 5),
            ..facts(&r, Some(&h), &open)
        });
        assert_eq!(
            e.verdict,
            Verdict::Refused {
                reason: "address 10.0.0.1 is in the outbound deny list".into()
            }
        );
        assert_eq!(e.verdict.hook_error(), Some("uri"));
        let text = e.verdict.describe(NOW);
        assert!(
            text.starts_with("refused: the hook's URI fails the outbound check"),
            "{text}"
        );
        assert!(text.contains("errorCode \"uri\""), "{text}");
        let json = e.verdict.to_json(NOW);
        assert_eq!(json["hookError"], "uri");
        assert_eq!(
            json["reason"],
            "address 10.0.0.1 is in the outbound deny list"
        );
        // A disabled hook is judged before its URI.
        let off = hook("disabled");
        let e = judged(&Facts {
            resolution: None,
            ..facts(&r, Some(&off), &[])
        });
        assert_eq!(e.verdict.code(), "hook-disabled");
    }

    #[test]
    fn a_host_that_did_not_resolve_is_a_failed_attempt_after_the_guard_and_object() {
        let r = row(RequestStatus::Queued, NOW - 1, NOW - 1);
        let h = hook("enabled");
        let unresolved = Resolution::Failed(TransportFailure::Resolve);
        let e = judged(&Facts {
            resolution: Some(&unresolved),
            ..facts(&r, Some(&h), &[])
        });
        assert_eq!(e.verdict, Verdict::ResolveFailed { error_code: 6 });
        assert!(!e.verdict.deliverable_now());
        assert_eq!(e.verdict.hook_error(), None);
        assert_eq!(e.verdict.to_json(NOW)["errorCode"], 6);
        let open: Vec<UnixTime> = (0..10).map(|i| NOW - 100 + i).collect();
        let e = judged(&Facts {
            resolution: Some(&unresolved),
            ..facts(&r, Some(&h), &open)
        });
        assert_eq!(e.verdict.code(), "breaker-open");
        let gone = ObjectLookup::Gone;
        let e = judged(&Facts {
            resolution: Some(&unresolved),
            object: Some(&gone),
            ..facts(&r, Some(&h), &[])
        });
        assert_eq!(e.verdict.code(), "object-gone");
    }

    #[test]
    fn an_object_that_is_gone_fails_the_row_once_the_hook_may_be_called() {
        let r = row(RequestStatus::Queued, NOW - 1, NOW - 1);
        let h = hook("enabled");
        let (gone, checked) = (ObjectLookup::Gone, ready());
        let e = judged(&Facts {
            object: Some(&gone),
            resolution: Some(&checked),
            ..facts(&r, Some(&h), &[])
        });
        assert_eq!(
            e.verdict,
            Verdict::ObjectGone {
                object_phid: "PHID-TASK-aaaaaaaaaaaaaaaaaaaa".into()
            }
        );
        assert_eq!(e.verdict.hook_error(), Some("object"));
        let e = judged(&Facts {
            object: Some(&gone),
            paused_until: Some(NOW + 5),
            ..facts(&r, Some(&h), &[])
        });
        assert_eq!(e.verdict.code(), "paused", "the guard comes first");
        let found = ObjectLookup::Found {
            transactions: Vec::new(),
        };
        let e = judged(&Facts {
            object: Some(&found),
            resolution: Some(&checked),
            ..facts(&r, Some(&h), &[])
        });
        assert_eq!(
            e.verdict,
            Verdict::Eligible {
                fresh: true,
                failures: 0,
                threshold: 10,
                uri_checked: true
            }
        );
        assert!(e
            .verdict
            .describe(NOW)
            .contains("passes the outbound check"));
    }

    #[test]
    fn a_row_behind_one_the_breaker_or_pause_holds_back_waits_with_it() {
        let h = hook("enabled");
        let open: Vec<UnixTime> = (0..10).map(|i| NOW - 100 + i).collect();
        let mut broken = row(RequestStatus::Queued, NOW - 1, NOW - 1);
        broken.properties = "not json".into();
        let mut first = row(RequestStatus::Queued, NOW - 2, NOW - 2);
        first.id = 5;
        let earlier = [first.clone()];
        let e = judged(&Facts {
            earlier: &earlier,
            ..facts(&broken, Some(&h), &open)
        });
        assert_eq!(e.verdict.code(), "breaker-open");
        assert_eq!(
            e.also.iter().map(Verdict::code).collect::<Vec<_>>(),
            ["properties-unparseable"]
        );
        assert!(
            e.notes
                .iter()
                .any(|n| n.starts_with("request 5, queued before this one")),
            "{e:?}"
        );
        let e = judged(&Facts {
            earlier: &earlier,
            paused_until: Some(NOW + 5),
            ..facts(&broken, Some(&h), &[])
        });
        assert_eq!(e.verdict.code(), "paused");
        assert!(
            e.notes
                .iter()
                .any(|n| n.contains("while the hook is paused")),
            "{e:?}"
        );

        // An earlier row that is no candidate now (in its lease), or that
        // fails its own checks too, does not stop the run before this one.
        let mut leased = first.clone();
        leased.date_modified = NOW - 10;
        let mut also_broken = first.clone();
        also_broken.defect = Some("column phid is not valid UTF-8".into());
        for other in [leased, also_broken] {
            let earlier = [other];
            let e = judged(&Facts {
                earlier: &earlier,
                ..facts(&broken, Some(&h), &open)
            });
            assert_eq!(e.verdict.code(), "properties-unparseable", "{e:?}");
        }
        // Nor does one whose hook's URI is refused: it is failed, and the
        // run goes on.
        let denied = Resolution::Refused(UriRefusal::UnknownHost);
        let e = judged(&Facts {
            earlier: &earlier,
            resolution: Some(&denied),
            ..facts(&broken, Some(&h), &open)
        });
        assert_eq!(e.verdict.code(), "properties-unparseable");
    }

    #[test]
    fn silent_mode_not_seen_where_phorge_keeps_it_is_noted() {
        let r = row(RequestStatus::Queued, NOW - 1, NOW - 1);
        let h = hook("enabled");
        for (local_config, why) in [
            (Reading::NotSet, "GORGE_PHORGE_LOCAL_CONFIG is not set here"),
            (
                Reading::Unreadable,
                "Phorge's local.json cannot be read here",
            ),
        ] {
            for database in [Reading::Off, Reading::Unreadable] {
                let silent = Sight {
                    local_config,
                    database,
                };
                let e = judged(&Facts {
                    silent,
                    ..facts(&r, Some(&h), &[])
                });
                assert_eq!(e.notes.len(), 1, "{e:?}");
                assert!(e.notes[0].contains(why), "{}", e.notes[0]);
            }
        }
        assert!(judge(&r, Some(&h), &[]).notes.is_empty(), "seen: no note");
    }
}
