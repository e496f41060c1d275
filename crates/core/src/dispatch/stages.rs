//! The values a row takes on its way through the pipeline, in order —
//! [`Prepared`] (steps 1–5) → [`Guarded`] (step 6 and the object check) →
//! [`Claimed`] (step 7) → [`Called`] (step 8) — and [`Exit`], what a
//! stage hands back instead when the row goes no further now. Types only:
//! the stages (`prepare`, `guard`, `claim`, `call`, `record`) each take
//! one of these and give the next, and only the row's orchestrator (`row`)
//! knows their order. Beside them, [`HookRun`]: what the stages share of
//! the hook's run (its lock, its breaker, its claim group).

use std::time::Duration;

use crate::model::{Hook, RequestRow, UnixTime};
use crate::outcome::{DeliveryResult, HookError, TransportFailure};
use crate::properties::Properties;
use crate::store::HookLock;
use crate::transport::Target;

use super::attempts::CallRecord;
use super::claim_group::ClaimGroup;

/// What a hook run does after a row's turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// On to the hook's next row.
    Next,
    /// The run ends here: its remaining rows wait for a later poll.
    StopRun,
}

/// Per-run state: the hook's lock (taken once per run, or kept from the
/// last), whether its breaker is known to be closed, and the claim group.
pub(super) struct HookRun {
    pub(super) lock: Option<Box<dyn HookLock>>,
    pub(super) lock_acquired_at: Duration,
    pub(super) breaker_closed: bool,
    pub(super) group: ClaimGroup,
}

/// The transactions a payload lists: as loaded from the object's
/// transaction table, or (`None`) the stored list in the order its shape
/// implies.
pub(super) type Transactions = Option<Vec<String>>;

/// A won claim: when it was sent (its lease began no earlier) and the
/// version it wrote, which guards every write of its result.
#[derive(Debug, Clone, Copy)]
pub(super) struct ClaimToken {
    pub(super) at: Duration,
    pub(super) version: UnixTime,
}

/// A row that passed steps 1–5: its properties, its hook and where to
/// send it (or why the address could not be resolved, which is the
/// attempt's result).
pub(super) struct Prepared<'r> {
    pub(super) row: &'r RequestRow,
    pub(super) properties: Properties,
    pub(super) hook: Hook,
    pub(super) target: Result<Target, TransportFailure>,
}

/// A prepared row the hook may be called about now (its pause, lock and
/// breaker allow it) whose object exists: ready to be claimed.
pub(super) struct Guarded<'r> {
    pub(super) prepared: Prepared<'r>,
    pub(super) transactions: Transactions,
}

/// A row this deliverer owns, ready for its call.
pub(super) struct Claimed<'r> {
    pub(super) row: &'r RequestRow,
    pub(super) properties: Properties,
    pub(super) hook: Hook,
    pub(super) target: Result<Target, TransportFailure>,
    pub(super) transactions: Transactions,
    pub(super) claim: ClaimToken,
}

/// A claimed row after its call: what the receiver (or the network) said.
pub(super) struct Called<'r> {
    pub(super) row: &'r RequestRow,
    pub(super) properties: Properties,
    pub(super) hook: String,
    pub(super) claim: ClaimToken,
    pub(super) result: DeliveryResult,
    pub(super) latency: Duration,
    /// What the call sent and saw, with the history on.
    pub(super) record: Option<CallRecord>,
}

/// Why a row goes no further now, and what that leaves to do.
pub(super) enum Exit {
    /// Nothing is written and the run stops: held, paused, locked, the
    /// breaker open, the store failing (said where it failed).
    Stop,
    /// Another deliverer claimed the row first: nothing is written.
    Lost,
    /// Phorge's worker would fail the row without a call: this hook error
    /// is written (onto the claim's version when it was claimed).
    HookError {
        properties: Properties,
        error: HookError,
        claim: Option<ClaimToken>,
    },
    /// Claimed but not sent: the row waits out its lease, as if its
    /// deliverer had died. `reason` is the log's (`late`, `run_stopped`,
    /// `lock_lost`, `local_failure`).
    Leave {
        claimed_at: Duration,
        reason: &'static str,
        step: Step,
    },
}
