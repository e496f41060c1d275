//! The delivery loop: polls candidates, groups them per hook, and runs each
//! hook's rows through SPEC §5 in id order, one delivery per hook at a time
//! and at most `max_concurrent` at once.
//!
//! It owns scheduling and the order of steps; every effect goes through the
//! `Store`, `Transport` and `Clock` it was given. It never spawns: all work
//! is driven inside the future returned by [`Dispatcher::run`].
//!
//! One module per job, in the order a row meets them:
//!
//! - `run_loop`: [`Dispatcher::run`], its polls and wake-ups, the slots;
//! - `backlog`: rows fetched and not finished, per hook;
//! - `hook_run`: one hook's rows, one at a time: SPEC §5's steps in order;
//! - `prepare`: steps 1–5 (the [`triage`](crate::triage()), the hook
//!   lookup, the URI) and the object check;
//! - `guard`: the hook's pause, lock and breaker, before every call;
//! - `claim_group`: rows claimed together, and the hook's pace;
//! - `attempt`: the POST and what it says;
//! - `write_back`: storing a result, with retries;
//! - `report`: events, log lines, the periodic summary.

mod attempt;
mod backlog;
mod claim_group;
mod guard;
mod hook_run;
mod prepare;
mod report;
mod run_loop;
mod write_back;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;

use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::StreamExt;

use crate::clock::Clock;
use crate::events::{EventKind, EventSink};
use crate::hold::SilentMode;
use crate::metrics::Metrics;
use crate::model::UnixTime;
use crate::objects::{PhorgeObjects, Unseen};
use crate::pause::HookPauses;
use crate::signing::{Signer, SigningSettings};
use crate::store::Store;
use crate::transport::Transport;
use crate::windows::Windows;

use self::prepare::CachedHook;
use self::report::DeniedReported;

/// The target of every log line the dispatcher writes, whichever module
/// writes it: operators filter on it (`GORGE_LOG_LEVEL=webhook_core::dispatcher=debug`)
/// and docs/operations.md quotes it, so splitting the dispatcher into
/// modules must not change it.
const LOG_TARGET: &str = "webhook_core::dispatcher";

/// Delivers queued requests. Cheap to share: `run` takes `&self`.
pub struct Dispatcher {
    store: Arc<dyn Store>,
    transport: Arc<dyn Transport>,
    clock: Arc<dyn Clock>,
    windows: Windows,
    metrics: Arc<Metrics>,
    open_breakers: Mutex<HashSet<String>>,
    /// Hooks whose receiver asked for a pause (`Retry-After`).
    pauses: Arc<HookPauses>,
    hooks: Mutex<HashMap<String, CachedHook>>,
    silent_mode: Option<Arc<SilentMode>>,
    objects: Option<Arc<dyn PhorgeObjects>>,
    /// Why objects could not be looked up, each logged once.
    unseen_reported: Mutex<HashSet<Unseen>>,
    /// When each slow hook was last reported.
    slow_reported: Mutex<HashMap<String, std::time::Duration>>,
    /// Hooks whose last call took half the delivery timeout or more (a
    /// timeout included): they share at most half the slots, and their
    /// runs give their slot back after every row (see `may_start`).
    slow_hooks: Mutex<HashSet<String>>,
    events: Option<Arc<dyn EventSink>>,
    /// The hold last reported as an event.
    reported_hold: AtomicBool,
    /// Silent mode fails rows instead of holding them.
    fail_when_silent: bool,
    /// Signs each attempt and remembers each hook's previous key.
    signer: Signer,
    /// Hooks whose key could not give Standard Webhooks headers, each
    /// logged once.
    standard_unavailable_reported: Mutex<HashSet<String>>,
    /// The last `store_denied` warning (`None`: none yet).
    denied_reported: Mutex<Option<DeniedReported>>,
}

impl fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dispatcher")
            .field("windows", &self.windows)
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
            store,
            transport,
            pauses: Arc::new(HookPauses::new(Arc::clone(&clock))),
            clock,
            windows,
            metrics: Arc::new(Metrics::default()),
            open_breakers: Mutex::new(HashSet::new()),
            hooks: Mutex::new(HashMap::new()),
            silent_mode: None,
            objects: None,
            unseen_reported: Mutex::new(HashSet::new()),
            slow_reported: Mutex::new(HashMap::new()),
            slow_hooks: Mutex::new(HashSet::new()),
            events: None,
            reported_hold: AtomicBool::new(false),
            fail_when_silent: false,
            signer: Signer::default(),
            standard_unavailable_reported: Mutex::new(HashSet::new()),
            denied_reported: Mutex::new(None),
        }
    }

    /// Signs with these settings (Standard Webhooks headers, the key
    /// grace) instead of the defaults ([`crate::signing`]).
    pub fn with_signing(mut self, settings: SigningSettings) -> Self {
        self.signer = Signer::new(settings);
        self
    }

    /// Hooks whose previous HMAC key still signs, with when it stops.
    pub fn keys_in_grace(&self) -> Vec<(String, UnixTime)> {
        self.signer.in_grace(self.clock.now())
    }

    /// Reports what happens to `events` (see [`crate::events`]).
    pub fn with_events(mut self, events: Arc<dyn EventSink>) -> Self {
        self.events = Some(events);
        self
    }

    /// Holds delivery while `silent_mode` says Phorge is silent: no polls,
    /// no claims, no writes, so rows stay queued for Phorge's own worker.
    pub fn with_silent_mode(mut self, silent_mode: Arc<SilentMode>) -> Self {
        self.silent_mode = Some(silent_mode);
        self
    }

    /// While Phorge is silent, fails each row as Phorge's worker does
    /// (`failed` / `none` / 0, `errorType` `hook`, `errorCode` `silent`)
    /// instead of holding it: for a daemon that adopted Phorge's delivery
    /// tasks, so no PHP worker will. Needs [`Self::with_silent_mode`].
    pub fn failing_when_silent(mut self) -> Self {
        self.fail_when_silent = true;
        self
    }

    /// Checks each request's object and loads its transactions from
    /// Phorge's application tables before sending (see [`crate::objects`]).
    /// Without it every payload lists the stored transactions in the order
    /// their shape implies, and a destroyed object goes unnoticed.
    pub fn with_objects(mut self, objects: Arc<dyn PhorgeObjects>) -> Self {
        self.objects = Some(objects);
        self
    }

    /// The live counters, for a metrics endpoint.
    pub fn metrics(&self) -> Arc<Metrics> {
        Arc::clone(&self.metrics)
    }

    /// The hooks paused now by their receiver's `Retry-After`, for a
    /// diagnostics endpoint.
    pub fn pauses(&self) -> Arc<HookPauses> {
        Arc::clone(&self.pauses)
    }

    /// The windows in force.
    pub fn windows(&self) -> &Windows {
        &self.windows
    }

    /// Asks the silent-mode watch (if any) whether Phorge is silent,
    /// reporting a change of verdict as an event.
    async fn silent_now(&self) -> bool {
        let Some(silent_mode) = &self.silent_mode else {
            return false;
        };
        let silent = silent_mode.refresh(self.clock.as_ref()).await;
        if self.reported_hold.swap(silent, Ordering::Relaxed) != silent {
            self.emit(None, None, EventKind::SilentHold { on: silent });
        }
        silent
    }

    /// Whether to hold delivery now: Phorge is silent and rows are held,
    /// not failed.
    async fn hold_now(&self) -> bool {
        self.silent_now().await && !self.fail_when_silent
    }

    /// Whether delivery is held right now (cached; see [`SilentMode`]).
    fn held(&self) -> bool {
        !self.fail_when_silent && self.silent_mode.as_ref().is_some_and(|s| s.is_held())
    }
}

/// Awaits `work` while still driving `others` (hook runs, or a run's
/// write-backs), handing each that finishes meanwhile to `finished`. The
/// loop's own store calls must not freeze the runs: a run waiting to be
/// polled may hold the pooled connection `work` is waiting for, and with
/// the pool exhausted neither would ever move (a stall until the connect
/// timeout). Likewise a run's write-backs progress while it goes on.
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
