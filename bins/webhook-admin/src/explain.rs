//! Why one request row is or is not being delivered right now — decided by
//! the dispatcher's own rules, never by rules of our own:
//!
//! 1. status: `sent` and `failed` are final (SPEC §1: the daemon only ever
//!    selects `queued` rows);
//! 2. the candidate predicate of SPEC §4 with [`Windows::cutoffs`]: a row
//!    that is neither fresh nor past its claim lease, or that failed and is
//!    inside its retry backoff, is not even selected;
//! 3. then, as the dispatcher processes a candidate (SPEC §5, in order): its
//!    [`triage`](webhook_core::triage()) (a row `defect`, unparseable
//!    properties, a missing hook, a `disabled` hook), the hook's pause (a
//!    receiver's `Retry-After`, as the daemon reports it) and the hook's
//!    [`Breaker`](webhook_core::Breaker).
//!
//! Pure: it reads no clock, no database and no daemon. The caller gathers
//! the facts (the row, its hook, the breaker's failure epochs, the lock
//! holder, the daemon's pause of the hook) and passes `now`, so every case
//! is unit-tested with a fixed time.

use serde_json::{json, Value};
use webhook_core::windows::Windows;
use webhook_core::{
    triage_looked_up, Hook, HookError, HookLookup, LastResult, Properties, RequestRow,
    RequestStatus, Triage, UnixTime,
};

use crate::clock::{moment, utc};

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
            Self::Paused { .. } => "paused",
            Self::BreakerOpen { .. } => "breaker-open",
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
            } => format!(
                "eligible now: {}, and the hook's breaker is closed ({failures} of {threshold} \
                 failed rows); the next poll claims it and POSTs it after the outbound check of \
                 the hook's URI",
                if *fresh {
                    "fresh (dateModified = dateCreated), so a candidate at once"
                } else {
                    "past its claim lease and any retry backoff"
                }
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
                ..
            } => json!({"failures": failures, "threshold": threshold}),
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
    let verdict_and_also = match row.status {
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
        RequestStatus::Queued => {
            let mut waits = candidate_waits(windows, now, row);
            // The wait that ends last is the one that decides when.
            waits.sort_by_key(|w| std::cmp::Reverse(w.until()));
            let then = processing(windows, now, facts);
            if waits.is_empty() {
                (then, Vec::new())
            } else {
                let first = waits.remove(0);
                if !then.deliverable_now() {
                    waits.push(then);
                }
                (first, waits)
            }
        }
    };
    let (verdict, also) = verdict_and_also;

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
                "the hook's lock is held by database session {holder} (a daemon instance or a \
                 PHP worker working on this hook): rows of one hook are delivered one at a time \
                 by whoever holds it"
            ));
        }
    }
    Explanation {
        now,
        verdict,
        also,
        notes,
    }
}

/// SPEC §4's candidate predicate, as the reasons it excludes a queued row.
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

/// SPEC §5's checks on a candidate, through the dispatcher's own
/// [`triage`](webhook_core::triage()), then the daemon's pause of the hook
/// and the breaker (the guard's order), stopping at the first that applies
/// (the URI check needs the network and is left to the daemon).
fn processing(windows: &Windows, now: UnixTime, facts: &Facts<'_>) -> Verdict {
    let row = facts.row;
    let hook = match facts.hook {
        Some(hook) => HookLookup::Found(hook.clone()),
        None => HookLookup::Missing,
    };
    match triage_looked_up(row, hook) {
        Triage::Ready { .. } => {}
        Triage::InvalidRow { defect, .. } => {
            return Verdict::InvalidRow {
                defect: defect.to_owned(),
            }
        }
        Triage::InvalidProperties { error, .. } => {
            return Verdict::PropertiesUnparseable {
                error: error.to_string(),
            }
        }
        // A lookup gathered beforehand is never `Unavailable`: a database
        // error stopped the command before it got here.
        Triage::HookMissing { .. } | Triage::HookUnavailable => {
            return Verdict::HookMissing {
                hook_phid: row.webhook_phid.clone(),
            }
        }
        Triage::HookDisabled { hook, .. } => {
            return Verdict::HookDisabled {
                hook_phid: hook.phid,
            }
        }
    }
    if let Some(until) = facts.paused_until.filter(|until| *until > now) {
        return Verdict::Paused { until };
    }
    let breaker = windows.breaker();
    let counted = breaker.counted_failures(now, facts.breaker_failure_epochs);
    let failures = counted.len() as u64;
    if breaker.is_open(failures) {
        return Verdict::BreakerOpen {
            failures,
            threshold: breaker.threshold,
            window_secs: breaker.window_secs,
            until: breaker.closes_at(now, counted).unwrap_or(now),
        };
    }
    Verdict::Eligible {
        fresh: row.is_fresh(),
        failures,
        threshold: breaker.threshold,
    }
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

    const NOW: UnixTime = 1_700_000_000;
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

    fn judge(row: &RequestRow, hook: Option<&Hook>, epochs: &[UnixTime]) -> Explanation {
        explain(
            &windows(),
            NOW,
            &Facts {
                row,
                hook,
                breaker_failure_epochs: epochs,
                lock_holder: None,
                paused_until: None,
            },
        )
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
                threshold: 10
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
            &Facts {
                row: &r,
                hook: Some(&hook("enabled")),
                breaker_failure_epochs: &[],
                lock_holder: None,
                paused_until: None,
            },
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
        let e = explain(
            &raised,
            NOW,
            &Facts {
                row: &r,
                hook: Some(&hook("enabled")),
                breaker_failure_epochs: &[],
                lock_holder: None,
                paused_until: None,
            },
        );
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
            &Facts {
                row: &r,
                hook: Some(&hook("enabled")),
                breaker_failure_epochs: &epochs,
                lock_holder: None,
                paused_until: None,
            },
        );
        assert_eq!(
            later.verdict,
            Verdict::Eligible {
                fresh: true,
                failures: 9,
                threshold: 10
            }
        );
        // One second earlier it was still open.
        let before = explain(
            &windows(),
            second_oldest + 300,
            &Facts {
                row: &r,
                hook: Some(&hook("enabled")),
                breaker_failure_epochs: &epochs,
                lock_holder: None,
                paused_until: None,
            },
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
                    row: &r,
                    hook: Some(&hook("enabled")),
                    breaker_failure_epochs: epochs,
                    lock_holder: None,
                    paused_until: Some(NOW + 5),
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
                threshold: 10
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
        let facts = Facts {
            row: &r,
            hook: Some(&hook("enabled")),
            breaker_failure_epochs: &[],
            lock_holder: Some(42),
            paused_until: None,
        };
        let e = explain(&windows(), NOW, &facts);
        assert!(e.verdict.deliverable_now());
        assert!(e.notes[0].contains("database session 42"));
        let sent = row(RequestStatus::Sent, NOW - 1, NOW - 1);
        let e = explain(
            &windows(),
            NOW,
            &Facts {
                row: &sent,
                ..facts
            },
        );
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
}
