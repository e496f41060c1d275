//! protocol §5's checks on a candidate row before its URI is resolved, in
//! order, written once: a row the store could only read lossily, then
//! unparseable `properties`, then the hook (missing, `disabled`). The
//! dispatcher acts on the answer; `webhook-admin explain` reports it.
//!
//! Pure: the row's own checks and the hook's are two plain functions;
//! [`triage`] asks its hook lookup only once the row itself passed, so a
//! row failed on its own never costs a hook lookup. The URI check needs the transport and stays in the dispatcher.

use std::future::Future;

use crate::model::{Hook, RequestRow};
use crate::outcome::HookError;
use crate::properties::{Properties, PropertiesError};

/// What looking up a row's hook found.
#[derive(Debug, Clone)]
pub enum HookLookup {
    /// The hook row.
    Found(Hook),
    /// No hook row has the request's `webhookPHID`.
    Missing,
    /// The lookup failed on the database: nothing can be said yet.
    Unavailable,
}

/// The answer for one row, in protocol §5's order: the first check that
/// applies.
#[derive(Debug)]
pub enum Triage<'r> {
    /// Passed: the row's properties and its hook, for the URI check, the
    /// lock, the breaker and the call.
    Ready {
        /// The parsed `properties`.
        properties: Properties,
        /// The row's hook, not disabled.
        hook: Hook,
    },
    /// The row holds values outside Phorge's domain (hook error
    /// `invalid-row`).
    InvalidRow {
        /// What the store found wrong.
        defect: &'r str,
        /// The properties to write back (kept as they were, or preserved
        /// under `gorgeOriginalProperties` if they do not parse either).
        properties: Properties,
    },
    /// `properties` is not a usable JSON object (hook error
    /// `invalid-properties`).
    InvalidProperties {
        /// Why it does not parse.
        error: PropertiesError,
        /// The original text, preserved under `gorgeOriginalProperties`.
        properties: Properties,
    },
    /// No hook row has the request's `webhookPHID` (hook error
    /// `not-found`).
    HookMissing {
        /// The parsed `properties`.
        properties: Properties,
    },
    /// The hook is `disabled` (hook error `disabled`).
    HookDisabled {
        /// The parsed `properties`.
        properties: Properties,
        /// The hook.
        hook: Hook,
    },
    /// The hook lookup failed on the database: the row is skipped until
    /// the next poll and nothing is written.
    HookUnavailable,
}

impl Triage<'_> {
    /// The hook error written for this answer, if the row fails without an
    /// HTTP attempt.
    pub fn hook_error(&self) -> Option<HookError> {
        match self {
            Self::InvalidRow { .. } => Some(HookError::InvalidRow),
            Self::InvalidProperties { .. } => Some(HookError::InvalidProperties),
            Self::HookMissing { .. } => Some(HookError::NotFound),
            Self::HookDisabled { .. } => Some(HookError::Disabled),
            Self::Ready { .. } | Self::HookUnavailable => None,
        }
    }
}

impl<'r> Triage<'r> {
    /// The hook error and the properties to write back with it, for a row
    /// that fails without an HTTP attempt; `None` for `Ready` and
    /// `HookUnavailable`.
    pub fn into_failure(self) -> Option<(HookError, Properties)> {
        let error = self.hook_error()?;
        match self {
            Self::InvalidRow { properties, .. }
            | Self::InvalidProperties { properties, .. }
            | Self::HookMissing { properties }
            | Self::HookDisabled { properties, .. } => Some((error, properties)),
            Self::Ready { .. } | Self::HookUnavailable => None,
        }
    }
}

/// protocol §5's checks on `row`, in order; `look_up_hook` is called only once
/// the row and its properties passed.
pub async fn triage<'r, F>(row: &'r RequestRow, look_up_hook: impl FnOnce() -> F) -> Triage<'r>
where
    F: Future<Output = HookLookup>,
{
    match check_row(row) {
        Ok(properties) => judge_hook(properties, look_up_hook().await),
        Err(failed) => *failed,
    }
}

/// [`triage`] with the hook already looked up (for a caller that gathered
/// its facts beforehand, as `webhook-admin explain` does).
pub fn triage_looked_up(row: &RequestRow, hook: HookLookup) -> Triage<'_> {
    match check_row(row) {
        Ok(properties) => judge_hook(properties, hook),
        Err(failed) => *failed,
    }
}

/// The checks on the row itself: its parsed properties, or the answer
/// that fails it before its hook is looked at.
fn check_row(row: &RequestRow) -> Result<Properties, Box<Triage<'_>>> {
    if let Some(defect) = &row.defect {
        let properties = Properties::parse(&row.properties)
            .unwrap_or_else(|_| Properties::preserving_unparseable(&row.properties));
        return Err(Box::new(Triage::InvalidRow { defect, properties }));
    }
    Properties::parse(&row.properties).map_err(|error| {
        Box::new(Triage::InvalidProperties {
            error,
            properties: Properties::preserving_unparseable(&row.properties),
        })
    })
}

/// The checks on the hook of a row that passed its own (the dispatcher
/// makes them again just before each call).
pub(crate) fn judge_hook<'r>(properties: Properties, hook: HookLookup) -> Triage<'r> {
    match hook {
        HookLookup::Found(hook) if hook.is_disabled() => Triage::HookDisabled { properties, hook },
        HookLookup::Found(hook) => Triage::Ready { properties, hook },
        HookLookup::Missing => Triage::HookMissing { properties },
        HookLookup::Unavailable => Triage::HookUnavailable,
    }
}

#[cfg(test)]
mod tests {
    use std::future::ready;

    use futures::FutureExt;

    use super::*;
    use crate::model::{LastResult, RequestStatus};

    fn row(properties: &str) -> RequestRow {
        RequestRow {
            id: 7,
            phid: "PHID-HWBR-triageaaaaaaaaaaaaa".into(),
            webhook_phid: "PHID-HWBH-triageaaaaaaaaaaaaa".into(),
            object_phid: "PHID-TASK-aaaaaaaaaaaaaaaaaaaa".into(),
            status: RequestStatus::Queued,
            properties: properties.into(),
            last_request_result: LastResult::None,
            last_request_epoch: 0,
            date_created: 100,
            date_modified: 100,
            defect: None,
        }
    }

    fn hook(status: &str) -> HookLookup {
        HookLookup::Found(Hook {
            phid: "PHID-HWBH-triageaaaaaaaaaaaaa".into(),
            name: "triage".into(),
            uri: "https://example.invalid/".into(),
            status: status.into(),
            hmac_key: "abcdefghijklmnopqrstuvwxyz234567".into(),
        })
    }

    fn code(row: &RequestRow, hook: HookLookup) -> Option<&'static str> {
        triage_looked_up(row, hook)
            .hook_error()
            .map(HookError::code)
    }

    #[test]
    fn a_defect_comes_first_and_keeps_what_parses() {
        let mut r = row(r#"{"retry":"forever"}"#);
        r.defect = Some("column objectPHID is not valid UTF-8".into());
        match triage_looked_up(&r, HookLookup::Unavailable) {
            Triage::InvalidRow { defect, properties } => {
                assert_eq!(defect, "column objectPHID is not valid UTF-8");
                assert!(properties.retries_forever());
            }
            other => panic!("{other:?}"),
        }
        r.properties = "not json".into();
        assert_eq!(code(&r, HookLookup::Missing), Some("invalid-row"));
    }

    #[test]
    fn unparseable_properties_come_before_the_hook() {
        for text in ["not json", "[1]", r#"{"transactionPHIDs":"x"}"#] {
            assert_eq!(
                code(&row(text), HookLookup::Unavailable),
                Some("invalid-properties"),
                "{text}"
            );
        }
    }

    #[test]
    fn then_the_hook_missing_disabled_or_unavailable() {
        let r = row("{}");
        assert_eq!(code(&r, HookLookup::Missing), Some("not-found"));
        assert_eq!(code(&r, hook("disabled")), Some("disabled"));
        assert!(matches!(
            triage_looked_up(&r, HookLookup::Unavailable),
            Triage::HookUnavailable
        ));
        assert!(matches!(
            triage_looked_up(&r, hook("firehose")),
            Triage::Ready { .. }
        ));
    }

    #[test]
    fn a_row_failed_on_its_own_never_looks_up_its_hook() {
        let mut r = row("not json");
        let looked_up = std::cell::Cell::new(false);
        let look_up = || {
            looked_up.set(true);
            ready(HookLookup::Missing)
        };
        assert!(triage(&r, look_up).now_or_never().is_some());
        assert!(!looked_up.get());
        r.properties = "{}".into();
        r.defect = Some("defect".into());
        let look_up = || {
            looked_up.set(true);
            ready(HookLookup::Missing)
        };
        assert!(triage(&r, look_up).now_or_never().is_some());
        assert!(!looked_up.get());
    }
}
