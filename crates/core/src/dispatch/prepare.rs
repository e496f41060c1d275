//! The pipeline's first stage, steps 1–5: the silent-mode hold (or, with
//! adopted tasks, silent mode's hook error, which Phorge's worker checks
//! first), [`triage`](crate::triage()) with the row's hook as Phorge has it
//! now (the hook cache), then the hook's URI checked through the
//! transport. A candidate row becomes [`Prepared`], or an [`Exit`]: the
//! hook error to write, or nothing while delivery is held or the hook
//! cannot be read.
//!
//! The same steps 3–5 again for a claimed row just before its call
//! ([`recheck`]), with the hook as Phorge has it then: a hook disabled or
//! deleted since fails the claimed row as Phorge's worker would, a new URI
//! is resolved and checked, a new key signs.

use tracing::{debug, warn};

use crate::model::{Hook, RequestRow};
use crate::outcome::{HookError, TransportFailure};
use crate::properties::Properties;
use crate::transport::{Resolution, Target};
use crate::triage::{judge_hook, triage, HookLookup, Triage};

use super::context::Context;
use super::stages::{ClaimToken, Claimed, Exit, Prepared, Step};
use super::LOG_TARGET;

/// Longest prefix of unparseable properties quoted in a log line.
const LOGGED_PROPERTIES_MAX: usize = 512;

/// Steps 1–5 for `row`.
pub(super) async fn prepare<'r>(cx: &Context, row: &'r RequestRow) -> Result<Prepared<'r>, Exit> {
    if cx.hold_now().await {
        return Err(Exit::Stop);
    }
    if cx.fail_when_silent && row.defect.is_none() && cx.silent_now().await {
        if let Ok(properties) = Properties::parse(&row.properties) {
            return Err(Exit::HookError {
                properties,
                error: HookError::Silent,
                claim: None,
            });
        }
    }
    let (properties, hook) = match triage(row, || hook_now(cx, row)).await {
        Triage::Ready { properties, hook } => (properties, hook),
        failed => return Err(triage_exit(row, failed, None)),
    };
    let target = resolve(cx, row, &properties, &hook, None).await?;
    Ok(Prepared {
        row,
        properties,
        hook,
        target,
    })
}

/// Steps 3–5 again for a claimed row, with the hook as Phorge has it now
/// (from the cache, at most its few seconds old).
pub(super) async fn recheck<'r>(cx: &Context, claimed: Claimed<'r>) -> Result<Claimed<'r>, Exit> {
    let Claimed {
        row,
        properties,
        hook: was,
        target,
        transactions,
        claim,
    } = claimed;
    let (properties, hook) = match judge_hook(properties, hook_now(cx, row).await) {
        Triage::Ready { properties, hook } => (properties, hook),
        Triage::HookUnavailable => {
            return Err(Exit::Leave {
                claimed_at: claim.at,
                reason: "run_stopped",
                step: Step::StopRun,
            })
        }
        failed => return Err(triage_exit(row, failed, Some(claim))),
    };
    let target = if hook.uri == was.uri {
        target
    } else {
        resolve(cx, row, &properties, &hook, Some(claim)).await?
    };
    Ok(Claimed {
        row,
        properties,
        hook,
        target,
        transactions,
        claim,
    })
}

/// The row's hook as Phorge has it now (from the hook cache); a lookup the
/// store could not answer is said and is `Unavailable`.
async fn hook_now(cx: &Context, row: &RequestRow) -> HookLookup {
    let now = cx.clock.monotonic();
    match cx
        .hooks
        .lookup(cx.store.as_ref(), &row.webhook_phid, now)
        .await
    {
        Ok((lookup, asked)) => {
            if asked {
                cx.accepted("hook lookup");
            }
            lookup
        }
        Err(err) => {
            cx.store_failed("hook lookup", &err);
            HookLookup::Unavailable
        }
    }
}

/// Step 5: the hook's URI checked through the transport. A refused one is
/// the row's hook error `uri` (onto the claim's version when it was
/// claimed); a resolver failure is the attempt's result.
async fn resolve(
    cx: &Context,
    row: &RequestRow,
    properties: &Properties,
    hook: &Hook,
    claim: Option<ClaimToken>,
) -> Result<Result<Target, TransportFailure>, Exit> {
    match cx.transport.resolve(&hook.uri).await {
        Resolution::Ready(target) => Ok(Ok(target)),
        Resolution::Refused(why) => {
            warn!(target: LOG_TARGET, event = "hook_uri_refused", request = %row.phid, hook = %hook.phid, reason = %why);
            Err(Exit::HookError {
                properties: properties.clone(),
                error: HookError::Uri,
                claim,
            })
        }
        Resolution::Failed(failure) => Ok(Err(failure)),
    }
}

/// What a row [`Triage`] did not pass leaves to do, said in the log: its
/// hook error written (onto the claim's version when it was claimed), or
/// nothing while its hook could not be read.
fn triage_exit(row: &RequestRow, failed: Triage<'_>, claim: Option<ClaimToken>) -> Exit {
    note_failed_triage(row, &failed);
    match failed.into_failure() {
        Some((error, properties)) => Exit::HookError {
            properties,
            error,
            claim,
        },
        None => Exit::Stop,
    }
}

/// The log line of a row [`Triage`] failed.
fn note_failed_triage(row: &RequestRow, failed: &Triage<'_>) {
    match failed {
        Triage::InvalidRow { defect, .. } => {
            warn!(target: LOG_TARGET, event = "row_invalid", request_id = row.id, hook = %row.webhook_phid,
                  defect = %defect, "failed without delivery");
        }
        Triage::InvalidProperties { error, .. } => {
            warn!(target: LOG_TARGET, event = "properties_invalid", request = %row.phid, hook = %row.webhook_phid,
                  error = %error, original = %truncated(&row.properties),
                  "kept under gorgeOriginalProperties");
        }
        Triage::HookMissing { .. } => {
            warn!(target: LOG_TARGET, event = "hook_missing", request = %row.phid, hook = %row.webhook_phid);
        }
        Triage::HookDisabled { hook, .. } => {
            debug!(target: LOG_TARGET, event = "hook_disabled", request = %row.phid, hook = %hook.phid);
        }
        Triage::Ready { .. } | Triage::HookUnavailable => {}
    }
}

/// At most [`LOGGED_PROPERTIES_MAX`] bytes of `text`, cut at a character
/// boundary.
fn truncated(text: &str) -> &str {
    if text.len() <= LOGGED_PROPERTIES_MAX {
        return text;
    }
    let mut end = LOGGED_PROPERTIES_MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}
