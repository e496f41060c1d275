//! Steps 1–5 for a row of the run's own (not claimed along): the core's
//! [`triage`](crate::triage()) with the hook looked up (cached for a few
//! seconds), the hook errors it finds written, and the hook's URI checked
//! through the transport; the same hook checks again just before every
//! call, so Phorge's edits to a hook (disabled, deleted, a new URI or key)
//! win within [`HOOK_CACHE_TTL`] even in the middle of a long run; then
//! the object check Phorge's worker makes before it calls.

use std::time::Duration;

use tracing::{debug, warn};

use crate::metrics::bump;
use crate::model::{Hook, RequestRow};
use crate::objects::{ObjectLookup, Unseen};
use crate::outcome::{HookError, TransportFailure};
use crate::properties::Properties;
use crate::transport::{Resolution, Target};
use crate::triage::{judge_hook, triage, HookLookup, Triage};

use super::attempt::{ClaimToken, Claimed};
use super::hook_run::Step;
use super::report::truncated;
use super::Dispatcher;
use super::LOG_TARGET;

/// How long a looked-up hook row is reused: a hook disabled or edited in
/// Phorge is seen within this time, as every call asks the cache just
/// before it is made.
pub(super) const HOOK_CACHE_TTL: Duration = Duration::from_secs(5);

/// A hook row (or its absence) and when it was read.
#[derive(Clone)]
pub(super) struct CachedHook {
    hook: Option<Hook>,
    read_at: Duration,
}

/// A row that passed steps 1–5.
pub(super) struct Ready {
    pub(super) properties: Properties,
    pub(super) hook: Hook,
    pub(super) target: Result<Target, TransportFailure>,
}

/// The transactions a payload lists: as loaded from the object's
/// transaction table, or (`None`) the stored list in the order its shape
/// implies.
pub(super) type Transactions = Option<Vec<String>>;

/// What the object check's lookup found, before it is acted on (and
/// counted): a row taken along is looked up beside its claim, and may yet
/// be left to its lease unsent.
pub(super) enum ObjectCheck {
    /// The object exists; its listed transactions that do, newest first.
    Found(Vec<String>),
    /// Its tables cannot be read here.
    Unseen(Unseen),
    /// The object is gone.
    Gone,
    /// The store failed.
    Failed,
}

/// What to do about a row's object check, once it is acted on.
pub(super) enum ObjectVerdict {
    /// Send these transactions.
    Send(Transactions),
    /// Hook error `object`, as Phorge's worker writes it.
    Gone,
    /// Nothing is written; the row is tried again later.
    Failed,
}

impl Dispatcher {
    /// Steps 1–5: the row's properties, its hook and where to send it; or
    /// the step to take after a hook error was written (or the lookup
    /// failed).
    pub(super) async fn prepare(&self, row: &RequestRow) -> Result<Ready, Step> {
        let (properties, hook) = match triage(row, || self.hook_for(row)).await {
            Triage::Ready { properties, hook } => (properties, hook),
            Triage::HookUnavailable => return Err(Step::StopRun),
            failed => return Err(self.fail_triaged(row, failed, None).await),
        };
        let target = self.resolve(row, &properties, &hook, None).await?;
        Ok(Ready {
            properties,
            hook,
            target,
        })
    }

    /// Steps 3–5 again for a claimed row, just before its call, with the
    /// hook as Phorge has it now (from the cache, at most
    /// [`HOOK_CACHE_TTL`] old): a hook deleted or disabled since fails the
    /// row as Phorge's worker would, a new URI is resolved and checked, a
    /// new key signs. `Err` is the step to take instead of calling.
    pub(super) async fn recheck_hook<'r>(&self, claimed: Claimed<'r>) -> Result<Claimed<'r>, Step> {
        let Claimed {
            row,
            properties,
            hook: was,
            target,
            transactions,
            claim,
        } = claimed;
        let (properties, hook) = match judge_hook(properties, self.hook_for(row).await) {
            Triage::Ready { properties, hook } => (properties, hook),
            Triage::HookUnavailable => {
                let waited = self.clock.monotonic().saturating_sub(claim.at);
                self.leave_to_lease(row, waited, "run_stopped");
                return Err(Step::StopRun);
            }
            failed => return Err(self.fail_triaged(row, failed, Some(claim)).await),
        };
        let target = if hook.uri == was.uri {
            target
        } else {
            self.resolve(row, &properties, &hook, Some(claim)).await?
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

    /// A row [`triage`] failed: said in the log and written with its hook
    /// error (onto the claim's version when it was claimed).
    async fn fail_triaged(
        &self,
        row: &RequestRow,
        failed: Triage<'_>,
        claim: Option<ClaimToken>,
    ) -> Step {
        note_failed_triage(row, &failed);
        if let Some((error, properties)) = failed.into_failure() {
            self.fail_hook(row, &properties, error, claim).await;
        }
        Step::Next
    }

    /// Step 5: the hook's URI checked through the transport. A refused one
    /// fails the row (hook error `uri`, onto the claim's version when it
    /// was claimed); a resolver failure is the attempt's result.
    async fn resolve(
        &self,
        row: &RequestRow,
        properties: &Properties,
        hook: &Hook,
        claim: Option<ClaimToken>,
    ) -> Result<Result<Target, TransportFailure>, Step> {
        match self.transport.resolve(&hook.uri).await {
            Resolution::Ready(target) => Ok(Ok(target)),
            Resolution::Refused(why) => {
                warn!(target: LOG_TARGET, event = "hook_uri_refused", request = %row.phid, hook = %hook.phid, reason = %why);
                self.fail_hook(row, properties, HookError::Uri, claim).await;
                Err(Step::Next)
            }
            Resolution::Failed(failure) => Ok(Err(failure)),
        }
    }

    /// The row's hook, read from the store at most every
    /// [`HOOK_CACHE_TTL`].
    async fn hook_for(&self, row: &RequestRow) -> HookLookup {
        let now = self.clock.monotonic();
        let cached = self
            .hooks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&row.webhook_phid)
            .filter(|c| now.saturating_sub(c.read_at) < HOOK_CACHE_TTL)
            .cloned();
        if let Some(cached) = cached {
            return found(cached.hook);
        }
        match self.store.hook(&row.webhook_phid).await {
            Ok(hook) => {
                self.hooks.lock().unwrap_or_else(|e| e.into_inner()).insert(
                    row.webhook_phid.clone(),
                    CachedHook {
                        hook: hook.clone(),
                        read_at: now,
                    },
                );
                found(hook)
            }
            Err(err) => {
                self.store_failed("hook lookup", &err);
                HookLookup::Unavailable
            }
        }
    }

    /// Phorge's worker loads the request's object, and fails the request
    /// when it is gone; then it sends only the listed transactions that
    /// still exist, newest first. Asked afresh for every delivery: nothing
    /// cached could keep a deleted object alive.
    pub(super) async fn look_up_object(
        &self,
        row: &RequestRow,
        properties: &Properties,
    ) -> ObjectCheck {
        let Some(objects) = &self.objects else {
            return ObjectCheck::Unseen(Unseen::NoSource);
        };
        let listed = properties.listed_transaction_phids();
        match objects.lookup(&row.object_phid, &listed).await {
            Ok(ObjectLookup::Found { transactions }) => ObjectCheck::Found(transactions),
            Ok(ObjectLookup::Gone) => ObjectCheck::Gone,
            Ok(ObjectLookup::Unseen(why)) => ObjectCheck::Unseen(why),
            Err(err) => {
                self.store_failed("object_lookup", &err);
                ObjectCheck::Failed
            }
        }
    }

    /// Counts and reports an object check as its row is acted on.
    pub(super) fn act_on(&self, row: &RequestRow, check: ObjectCheck) -> ObjectVerdict {
        match check {
            ObjectCheck::Found(transactions) => {
                bump(&self.metrics.objects_found);
                ObjectVerdict::Send(Some(transactions))
            }
            ObjectCheck::Gone => {
                bump(&self.metrics.objects_gone);
                warn!(target: LOG_TARGET, event = "object_missing", request = %row.phid, hook = %row.webhook_phid,
                      object = %row.object_phid, "the object no longer exists: failed as Phorge does");
                ObjectVerdict::Gone
            }
            ObjectCheck::Unseen(why) => {
                self.note_unseen(why);
                ObjectVerdict::Send(None)
            }
            ObjectCheck::Failed => ObjectVerdict::Failed,
        }
    }

    fn note_unseen(&self, why: Unseen) {
        bump(&self.metrics.objects_unseen);
        let kind = why.kind();
        let first = {
            let mut reported = self
                .unseen_reported
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            !reported.contains(&why) && reported.insert(why.clone())
        };
        if first {
            warn!(target: LOG_TARGET, event = "objects_unseen", kind, reason = %why,
                  "transactions are sent in the order the stored list implies, and a destroyed \
                   object is not noticed; grant SELECT on the application's tables to do as \
                   Phorge's worker does");
        }
    }
}

/// A hook row as a lookup's answer.
fn found(hook: Option<Hook>) -> HookLookup {
    hook.map_or(HookLookup::Missing, HookLookup::Found)
}

/// The log line of a row failed by [`triage`] before its URI is resolved.
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
