//! What every stage works with: the effects (store, transport, clock,
//! Phorge's objects, the event sink), the windows and the signer, the two
//! owned parts of shared state ([`HookBook`]: what is known about each
//! hook; [`Told`]: what has been said), the hooks' pauses, the operations
//! the database refuses ([`Refusals`]), and the few services more than one
//! stage uses — the object check, the silent-mode hold, events and store
//! errors and refusals.

use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, error, info, warn};

use crate::clock::Clock;
use crate::events::{Event, EventKind, EventSink};
use crate::history::AttemptLog;
use crate::hold::SilentMode;
use crate::metrics::{bump, Metrics};
use crate::model::RequestRow;
use crate::objects::{ObjectLookup, PhorgeObjects, Unseen};
use crate::pause::HookPauses;
use crate::properties::Properties;
use crate::signing::Signer;
use crate::store::{Store, StoreError};
use crate::transport::Transport;
use crate::wake_hints::WakeHints;
use crate::windows::Windows;

use super::hooks::HookBook;
use super::local_streak::LocalStreak;
use super::refusals::Refusals;
use super::stages::Transactions;
use super::told::Told;
use super::LOG_TARGET;

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
    /// The store failed (said where it failed).
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

/// The dispatcher's effects, settings and shared state.
pub(super) struct Context {
    pub(super) store: Arc<dyn Store>,
    pub(super) transport: Arc<dyn Transport>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) windows: Windows,
    pub(super) metrics: Arc<Metrics>,
    pub(super) events: Option<Arc<dyn EventSink>>,
    pub(super) objects: Option<Arc<dyn PhorgeObjects>>,
    pub(super) silent_mode: Option<Arc<SilentMode>>,
    /// Silent mode fails rows instead of holding them.
    pub(super) fail_when_silent: bool,
    /// Signs each attempt and remembers each hook's previous key.
    pub(super) signer: Signer,
    pub(super) hooks: HookBook,
    /// Hooks paused by their receiver's `Retry-After`, until when.
    pub(super) pauses: Arc<HookPauses>,
    pub(super) told: Told,
    /// Delivery's operations the database refuses now.
    pub(super) refusals: Refusals,
    /// The latest local failure, while no call has reached a receiver
    /// since.
    pub(super) local_streak: LocalStreak,
    /// Hints of new rows from a source that follows the table.
    pub(super) wake_hints: Option<WakeHints>,
    /// Where attempts go, when the history is on.
    pub(super) history: Option<History>,
}

/// The attempt history's port and how much of each response it keeps.
pub(crate) struct History {
    pub(super) log: Arc<dyn AttemptLog>,
    pub(super) body_kept: usize,
}

impl Context {
    /// Whether a hint source follows the table now, so the wake-up probe
    /// rests.
    pub(super) fn hints_following(&self) -> bool {
        self.wake_hints.as_ref().is_some_and(WakeHints::following)
    }

    /// Time since `at` on the monotonic clock.
    pub(super) fn waited_since(&self, at: Duration) -> Duration {
        self.clock.monotonic().saturating_sub(at)
    }

    /// Whether a claim made at `claimed_at` is past the claim-ahead budget,
    /// so its row must be left to its lease rather than called: its call
    /// would end too close to the lease's end. Without a budget (the lease
    /// leaves no room beyond one call) nothing is claimed ahead and a row
    /// is called straight after its claim: nothing to judge.
    pub(super) fn past_claim_budget(&self, claimed_at: Duration) -> bool {
        let budget = self.windows.claim_ahead_budget();
        !budget.is_zero() && self.waited_since(claimed_at) > budget
    }

    /// Keeps the paused-hooks gauge current.
    pub(super) fn count_paused(&self) {
        self.metrics.paused_hooks.store(
            self.pauses.len() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    pub(super) fn emit(&self, request: Option<&str>, hook: Option<&str>, kind: EventKind) {
        if let Some(events) = &self.events {
            events.emit(Event {
                at: self.clock.now(),
                request: request.map(str::to_owned),
                hook: hook.map(str::to_owned),
                kind,
            });
        }
    }

    /// Says a failed store operation: a refusal ([`Self::refused`]), or
    /// any other at warn.
    pub(super) fn store_failed(&self, operation: &'static str, err: &StoreError) {
        bump(&self.metrics.store_errors);
        if !self.refused(operation, err) {
            warn!(target: LOG_TARGET, event = "store_error", operation, error = %err, "hook skipped until the next poll");
        }
    }

    /// Whether `err` is a refusal (a privilege the account lacks, or its
    /// login); if so it is counted, kept as `operation`'s until that
    /// succeeds again ([`Self::accepted`]: delivery cannot go on meanwhile,
    /// which `/readyz` says), and said at error level at most once a
    /// minute, however many operations are refused: it fails every hook
    /// alike until granted.
    pub(super) fn refused(&self, operation: &'static str, err: &StoreError) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        if !matches!(err, StoreError::Denied(_)) {
            return false;
        }
        let count = self.metrics.store_denied.fetch_add(1, Relaxed) + 1;
        let refused_now = self.refusals.refuse(operation, err.to_string());
        self.metrics
            .delivery_refused
            .store(refused_now as u64, Relaxed);
        match self.told.denied_warning_due(count, self.clock.monotonic()) {
            Some(suppressed) => {
                error!(target: LOG_TARGET, event = "store_denied", operation, error = %err, suppressed,
                       "the database refused this account (a privilege it lacks, or its login): \
                        delivery waits until that is put right")
            }
            None => debug!(target: LOG_TARGET, event = "store_denied", operation, error = %err),
        }
        true
    }

    /// Notes that `operation` succeeded: a refusal of it is over.
    pub(super) fn accepted(&self, operation: &'static str) {
        if let Some(still_refused) = self.refusals.accept(operation) {
            self.metrics
                .delivery_refused
                .store(still_refused as u64, std::sync::atomic::Ordering::Relaxed);
            info!(target: LOG_TARGET, event = "store_denied_over", operation, still_refused,
                  "the database accepts this operation again");
        }
    }

    /// Asks the silent-mode watch (if any) whether Phorge is silent,
    /// reporting a change of verdict as an event.
    pub(super) async fn silent_now(&self) -> bool {
        let Some(silent_mode) = &self.silent_mode else {
            return false;
        };
        let silent = silent_mode.refresh(self.clock.as_ref()).await;
        if self.told.hold_changed(silent) {
            self.emit(None, None, EventKind::SilentHold { on: silent });
        }
        silent
    }

    /// Whether to hold delivery now: Phorge is silent and rows are held,
    /// not failed.
    pub(super) async fn hold_now(&self) -> bool {
        self.silent_now().await && !self.fail_when_silent
    }

    /// Whether delivery is held right now (cached; see [`SilentMode`]).
    pub(super) fn held(&self) -> bool {
        !self.fail_when_silent && self.silent_mode.as_ref().is_some_and(|s| s.is_held())
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
        let lookup = objects.lookup(&row.object_phid, &listed).await;
        if lookup.is_ok() {
            self.accepted("object_lookup");
        }
        match lookup {
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
    pub(super) fn object_verdict(&self, row: &RequestRow, check: ObjectCheck) -> ObjectVerdict {
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
                bump(&self.metrics.objects_unseen);
                if self.told.first_unseen(&why) {
                    warn!(target: LOG_TARGET, event = "objects_unseen", kind = why.kind(), reason = %why,
                          "transactions are sent in the order the stored list implies, and a destroyed \
                           object is not noticed; grant SELECT on the application's tables to do as \
                           Phorge's worker does");
                }
                ObjectVerdict::Send(None)
            }
            ObjectCheck::Failed => ObjectVerdict::Failed,
        }
    }
}
