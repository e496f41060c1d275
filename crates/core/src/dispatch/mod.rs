//! The delivery loop: polls candidates, groups them per hook, and takes
//! each hook's rows through the delivery protocol's steps in id order, one
//! delivery per hook at a time and at most `max_concurrent` at once.
//!
//! It owns scheduling and the order of steps; every effect goes through the
//! `Store`, `Transport` and `Clock` it was given. It never spawns: all work
//! is driven inside the future returned by [`Dispatcher::run`].
//!
//! The loop and the run:
//!
//! - `run_loop`: [`Dispatcher::run`], its polls and wake-ups, the slots;
//! - `wake`: the probe between polls that notices a new row at once
//!   (resting while [`WakeHints`](crate::WakeHints) from a source that
//!   follows the table say so instead);
//! - `backlog`: rows fetched and not finished, per hook;
//! - `hook_run`: one hook's rows, one at a time, each through the pipeline
//!   (`deliver_row`, the only function that knows the stages' order, and
//!   settles what they hand back), and the run's end.
//!
//! The pipeline's stages, each a function of the value the row has
//! reached (`stages`) and the [`Context`](context::Context); none imports
//! another:
//!
//! - `prepare`: steps 1–5 (the hold, [`triage`](crate::triage()), the
//!   hook, the URI) → `Prepared`; and `recheck`, steps 3–5 again for a
//!   claimed row just before its call;
//! - `guard`: step 6 (pause, lock, breaker) and the object check →
//!   `Guarded`;
//! - `claim`: step 7, with the rows claimed along (`claim_group`) →
//!   `Claimed`;
//! - `call`: step 8's call (the lock checked again, the POST) →
//!   `Called`;
//! - `record`: step 8's write-back, and the hook errors and rows left to
//!   their lease the other stages hand back.
//!
//! What they share: `context` (the effects and the services several stages
//! use), `hooks` (what is known about each hook), `told` (what has been
//! said once or at a pace), `refusals` (which operations the database
//! refuses now), `local_streak` (whether every call lately failed on this
//! side).

mod attempts;
mod backlog;
mod call;
mod claim;
mod claim_group;
mod context;
mod guard;
mod hook_run;
mod hooks;
mod local_streak;
mod prepare;
mod record;
mod refusals;
mod run_loop;
mod stages;
mod told;
mod wake;

use std::fmt;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::StreamExt;

use crate::clock::Clock;
use crate::events::EventSink;
use crate::history::AttemptLog;
use crate::hold::SilentMode;
use crate::metrics::Metrics;
use crate::model::UnixTime;
use crate::objects::PhorgeObjects;
use crate::pause::HookPauses;
use crate::signing::{Signer, SigningSettings};
use crate::store::{CandidateQuery, DueRow, QueueCounts, Store, StoreError};
use crate::transport::Transport;
use crate::wake_hints::WakeHints;
use crate::windows::Windows;

use self::context::{Context, History};
use self::hooks::HookBook;
use self::local_streak::LocalStreak;
use self::refusals::Refusals;
use self::told::Told;

/// The target of every log line the dispatcher writes, whichever module
/// writes it: operators filter on it (`GORGE_LOG_LEVEL=webhook_core::dispatcher=debug`)
/// and docs/operations/monitoring.md quotes it, so splitting the dispatcher into
/// modules must not change it.
const LOG_TARGET: &str = "webhook_core::dispatcher";

/// Delivers queued requests. Cheap to share: `run` takes `&self`.
pub struct Dispatcher {
    cx: Context,
}

impl fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dispatcher")
            .field("windows", &self.cx.windows)
            .finish_non_exhaustive()
    }
}

impl Dispatcher {
    /// A dispatcher over these effects, with validated windows.
    pub fn new(
        store: Arc<dyn Store>,
        transport: Arc<dyn Transport>,
        clock: Arc<dyn Clock>,
        windows: Windows,
    ) -> Self {
        Self {
            cx: Context {
                store,
                transport,
                hooks: HookBook::default(),
                pauses: Arc::new(HookPauses::new(Arc::clone(&clock))),
                clock,
                windows,
                metrics: Arc::new(Metrics::default()),
                events: None,
                objects: None,
                silent_mode: None,
                fail_when_silent: false,
                signer: Signer::default(),
                told: Told::default(),
                refusals: Refusals::default(),
                local_streak: LocalStreak::default(),
                wake_hints: None,
                history: None,
            },
        }
    }

    /// Signs with these settings (Standard Webhooks headers, the key
    /// grace) instead of the defaults ([`crate::signing`]).
    pub fn with_signing(mut self, settings: SigningSettings) -> Self {
        self.cx.signer = Signer::new(settings);
        self
    }

    /// Reports what happens to `events` (see [`EventSink`]).
    pub fn with_events(mut self, events: Arc<dyn EventSink>) -> Self {
        self.cx.events = Some(events);
        self
    }

    /// Holds delivery while `silent_mode` says Phorge is silent: no polls,
    /// no claims, no writes, so rows stay queued for Phorge's own worker.
    pub fn with_silent_mode(mut self, silent_mode: Arc<SilentMode>) -> Self {
        self.cx.silent_mode = Some(silent_mode);
        self
    }

    /// While Phorge is silent, fails each row as Phorge's worker does
    /// (`failed` / `none` / 0, `errorType` `hook`, `errorCode` `silent`)
    /// instead of holding it: for a daemon that adopted Phorge's delivery
    /// tasks, so no PHP worker will. Needs [`Self::with_silent_mode`].
    pub fn failing_when_silent(mut self) -> Self {
        self.cx.fail_when_silent = true;
        if let Some(silent_mode) = &self.cx.silent_mode {
            silent_mode.rows_fail_while_silent();
        }
        self
    }

    /// Polls as soon as `hints` says a row may have been added, and rests
    /// the wake-up probe while their source follows the table (see
    /// [`WakeHints`]).
    pub fn with_wake_hints(mut self, hints: WakeHints) -> Self {
        self.cx.wake_hints = Some(hints);
        self
    }

    /// Hands every attempt to `log` (see [`crate::history`]), keeping at
    /// most `body_kept` bytes of each response body.
    pub fn with_history(mut self, log: Arc<dyn AttemptLog>, body_kept: usize) -> Self {
        self.cx.history = Some(History { log, body_kept });
        self
    }

    /// The wake hints it listens to, if any (for reporting their source's
    /// state).
    pub fn wake_hints(&self) -> Option<&WakeHints> {
        self.cx.wake_hints.as_ref()
    }

    /// Checks each request's object and loads its transactions from
    /// Phorge's application tables before sending (see [`PhorgeObjects`]).
    /// Without it every payload lists the stored transactions in the order
    /// their shape implies, and a destroyed object goes unnoticed.
    pub fn with_objects(mut self, objects: Arc<dyn PhorgeObjects>) -> Self {
        self.cx.objects = Some(objects);
        self
    }

    /// Hooks whose previous HMAC key still signs, with when it stops.
    pub fn keys_in_grace(&self) -> Vec<(String, UnixTime)> {
        self.cx.signer.in_grace(self.cx.clock.now())
    }

    /// The live counters, for a metrics endpoint.
    pub fn metrics(&self) -> Arc<Metrics> {
        Arc::clone(&self.cx.metrics)
    }

    /// The hooks paused now by their receiver's `Retry-After`, for a
    /// diagnostics endpoint.
    pub fn pauses(&self) -> Arc<HookPauses> {
        Arc::clone(&self.cx.pauses)
    }

    /// Why delivery cannot go on: while the database refuses one of its
    /// operations (a privilege the account lacks, or its login), the
    /// operation refused first of those still refused and the store's
    /// words for its latest refusal; otherwise, while the last three calls
    /// or more, and every call since the last one to reach a receiver,
    /// failed on this side (the egress proxy down, descriptors used up),
    /// the latest such failure. `None`
    /// once each refused operation has succeeded again and a call reached
    /// a receiver.
    pub fn refusal(&self) -> Option<String> {
        self.cx
            .refusals
            .first()
            .or_else(|| self.cx.local_streak.reason())
    }

    /// The windows in force.
    pub fn windows(&self) -> &Windows {
        &self.cx.windows
    }

    /// The due row that has waited longest, asked of `counts` (the store
    /// this dispatcher delivers from) so that a stalled loop shows its lag
    /// growing: `None` when no row is due, or while delivery is held for
    /// Phorge's silent mode; rows of hooks whose breaker this instance
    /// last saw open, or that a receiver's `Retry-After` paused, wait on
    /// purpose and are left out.
    pub async fn longest_due(
        &self,
        counts: &dyn QueueCounts,
    ) -> Result<Option<DueRow>, StoreError> {
        if self.cx.held() {
            return Ok(None);
        }
        let mut held_back = self.cx.hooks.breaker_open();
        held_back.extend(self.cx.pauses.current().into_iter().map(|pause| pause.hook));
        held_back.sort();
        held_back.dedup();
        let query = CandidateQuery {
            cutoffs: self.cx.windows.cutoffs(self.cx.clock.now()),
            limit: 1,
            exclude_hooks: held_back,
        };
        Ok(counts.longest_due(&query).await?.into_iter().next())
    }

    /// How long [`Self::longest_due`]'s row has waited, in seconds; 0 when
    /// none is due.
    pub async fn lag_secs(&self, counts: &dyn QueueCounts) -> Result<u64, StoreError> {
        let due = self.longest_due(counts).await?;
        Ok(due.map_or(0, |row| self.cx.clock.now().saturating_sub(row.due_since)))
    }
}

/// Awaits `work` while still driving `others` (hook runs, or a run's
/// write-back), handing each that finishes meanwhile to `finished`. The
/// loop's own store calls must not freeze the runs: a run waiting to be
/// polled may hold the pooled connection `work` is waiting for, and with
/// the pool exhausted neither would ever move (a stall until the connect
/// timeout). Likewise a run's write-back progresses while its next row is
/// prepared.
///
/// `work` comes pinned by the caller (`pin!(…)`): taken by value and
/// pinned here, it would be stored twice in this future (the argument and
/// the pinned local), and a hook run's row is one per call in flight.
async fn alongside<'a, T, R>(
    mut work: Pin<&mut impl Future<Output = T>>,
    others: &mut FuturesUnordered<BoxFuture<'a, R>>,
    mut finished: impl FnMut(R),
) -> T {
    poll_fn(|cx| {
        while let Poll::Ready(Some(done)) = others.poll_next_unpin(cx) {
            finished(done);
        }
        work.as_mut().poll(cx)
    })
    .await
}
