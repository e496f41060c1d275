//! The pipeline's third stage, step 7: the claim, a compare-and-set that
//! exactly one deliverer wins. A [`Guarded`] row's claim may take some of
//! the run's next rows along ([`ClaimGroup`]: a fast hook's rows claimed
//! in one group commit), their objects looked up beside it; when such a
//! row's turn comes it enters here again ([`resume`]), checked against the
//! claim-ahead budget. Either way the row becomes [`Claimed`], or an
//! [`Exit`].

use std::time::Duration;

use futures::future::{join, join_all};

use crate::events::EventKind;
use crate::metrics::bump;
use crate::model::{Hook, RequestRow};
use crate::outcome::HookError;
use crate::properties::Properties;
use crate::store::{Claim, StoreError};

use super::claim_group::{AheadClaim, AheadRow, AheadTurn, ClaimGroup};
use super::context::{Context, ObjectCheck, ObjectVerdict};
use super::stages::{ClaimToken, Claimed, Exit, Guarded, HookRun, Step};
use super::LOG_TARGET;

/// Step 7 for a guarded row of the run's own, taking as many of the
/// `upcoming` rows along as the hook's pace allows.
pub(super) async fn claim<'r>(
    cx: &Context,
    run: &mut HookRun,
    guarded: Guarded<'r>,
    upcoming: &'r [RequestRow],
) -> Result<Claimed<'r>, Exit> {
    let Guarded {
        prepared,
        transactions,
    } = guarded;
    let row = prepared.row;
    let along = match &prepared.target {
        Ok(_) => look_ahead(cx, &run.group, upcoming),
        Err(_) => Vec::new(),
    };
    let claimed_at = cx.clock.monotonic();
    let (first, ahead) = claim_together(cx, row, &prepared.hook, along).await;
    if let Ok(target) = &prepared.target {
        run.group.begin(
            prepared.hook.clone(),
            target.clone(),
            claimed_at,
            ahead.into_iter(),
        );
    }
    let version = match first {
        Ok(Claim::Won(version)) => version,
        Ok(Claim::Lost) => return Err(Exit::Lost),
        Err(_) => return Err(Exit::Stop),
    };
    // Its lease runs from its own claim, which may have committed well
    // before the slowest of its group's.
    if run.group.has_more_ahead() && cx.past_claim_budget(claimed_at) {
        return Err(left_late(claimed_at));
    }
    Ok(Claimed {
        row,
        properties: prepared.properties,
        hook: prepared.hook,
        target: prepared.target,
        transactions,
        claim: ClaimToken {
            at: claimed_at,
            version,
        },
    })
}

/// A row claimed along with an earlier one, as its turn comes (the guard
/// was asked again first): sent only while its claim is within the
/// claim-ahead budget and its object (checked beside its claim) is there.
pub(super) fn resume<'r>(
    cx: &Context,
    row: &'r RequestRow,
    ahead: AheadTurn,
) -> Result<Claimed<'r>, Exit> {
    let AheadTurn {
        check,
        version,
        hook,
        target,
        claimed_at,
    } = ahead;
    // Late, it is not ours to write: not even the object's verdict.
    if cx.past_claim_budget(claimed_at) {
        return Err(left_late(claimed_at));
    }
    // Parsed again now: a group's rows wait while the calls before them
    // are in flight, and parsed they cost several times their text. They
    // parsed when taken along (`look_ahead`).
    let properties = Properties::parse(&row.properties).map_err(|_| stopped(claimed_at))?;
    let claim = ClaimToken {
        at: claimed_at,
        version,
    };
    let transactions = match cx.object_verdict(row, check) {
        ObjectVerdict::Send(transactions) => transactions,
        ObjectVerdict::Gone => {
            return Err(Exit::HookError {
                properties,
                error: HookError::Object,
                claim: Some(claim),
            })
        }
        ObjectVerdict::Failed => return Err(stopped(claimed_at)),
    };
    Ok(Claimed {
        row,
        properties,
        hook,
        target: Ok(target),
        transactions,
        claim,
    })
}

fn left_late(claimed_at: Duration) -> Exit {
    Exit::Leave {
        claimed_at,
        reason: "late",
        step: Step::Next,
    }
}

fn stopped(claimed_at: Duration) -> Exit {
    Exit::Leave {
        claimed_at,
        reason: "run_stopped",
        step: Step::StopRun,
    }
}

/// The rows after this one to claim with it: as many as the hook's pace
/// allows, stopping at the first that would fail before its claim (a
/// defect, unparseable properties: it takes the ordinary path in its
/// turn).
fn look_ahead<'r>(
    cx: &Context,
    group: &ClaimGroup,
    upcoming: &'r [RequestRow],
) -> Vec<(&'r RequestRow, Properties)> {
    if cx.windows.claim_ahead_budget().is_zero() {
        return Vec::new();
    }
    upcoming
        .iter()
        .take(group.pace().saturating_sub(1))
        .map_while(|row| match row.defect {
            Some(_) => None,
            None => Properties::parse(&row.properties).ok().map(|p| (row, p)),
        })
        .collect()
}

/// Claims `row` and the rows taken `along` together; the objects of those
/// are looked up while the claims commit, so their calls can follow each
/// other at once (one after the other, so a group holds one pooled
/// connection for them). The first row's claim, and the others' as the
/// group's rows.
async fn claim_together(
    cx: &Context,
    row: &RequestRow,
    hook: &Hook,
    along: Vec<(&RequestRow, Properties)>,
) -> (Result<Claim, StoreError>, Vec<AheadRow>) {
    let look_ups = async {
        let mut checks = Vec::with_capacity(along.len());
        for (row, properties) in &along {
            checks.push(cx.look_up_object(row, properties).await);
        }
        checks
    };
    let claims = join_all(
        std::iter::once(row)
            .chain(along.iter().map(|(r, _)| *r))
            .map(|r| cx.store.claim(r.id, r.date_modified)),
    );
    let (claims, checks) = join(claims, look_ups).await;
    let mut claims = claims.into_iter();
    let first = claims.next().unwrap_or(Ok(Claim::Lost));
    note_claim(cx, row, &hook.phid, &first);
    let ahead = along
        .into_iter()
        .zip(checks)
        .zip(claims)
        .map(|(((row, _), check), claim)| AheadRow {
            id: row.id,
            claim: ahead_claim(cx, row, &hook.phid, claim, check),
        })
        .collect();
    (first, ahead)
}

/// A row taken along: its claim, counted and reported.
fn ahead_claim(
    cx: &Context,
    row: &RequestRow,
    hook_phid: &str,
    claim: Result<Claim, StoreError>,
    check: ObjectCheck,
) -> AheadClaim {
    note_claim(cx, row, hook_phid, &claim);
    match claim {
        Ok(Claim::Won(version)) => AheadClaim::Won(check, version),
        Ok(Claim::Lost) => AheadClaim::Lost,
        Err(_) => AheadClaim::Unknown,
    }
}

/// Counts and reports a claim's answer.
fn note_claim(cx: &Context, row: &RequestRow, hook_phid: &str, claim: &Result<Claim, StoreError>) {
    match claim {
        Ok(Claim::Won(_)) => {
            cx.accepted("claim");
            bump(&cx.metrics.claims_won);
            cx.emit(Some(&row.phid), Some(hook_phid), EventKind::ClaimWon);
        }
        Ok(Claim::Lost) => {
            cx.accepted("claim");
            bump(&cx.metrics.claims_lost);
            cx.emit(Some(&row.phid), Some(hook_phid), EventKind::ClaimLost);
            tracing::debug!(target: LOG_TARGET, event = "claim_lost", request = %row.phid, hook = %hook_phid);
        }
        Err(err) => cx.store_failed("claim", err),
    }
}
