//! `explain`'s verdict against what the real `Dispatcher` does with the
//! same rows: on core's `MemoryStore` and `ManualClock`, with a transport
//! that records every POST, each row's verdict must name what one poll of
//! the dispatcher did to it — the hook error it wrote, the delivery it
//! made, or nothing at all.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::channel::oneshot;
use futures::executor::{block_on, LocalPool};
use futures::task::LocalSpawnExt;
use futures::FutureExt;
use webhook_core::memory_store::{MemoryStore, NewRequest};
use webhook_core::windows::{Settings, Windows};
use webhook_core::{
    Clock, DeliveryResult, Dispatcher, Hook, HookPauses, LastResult, ManualClock, OutboundRequest,
    Properties, RequestRow, RequestStatus, Resolution, Store, Target, Transport, UnixTime,
};

use super::{explain, Facts, Verdict};

const NOW: UnixTime = 1_700_000_000;
const HOOK_OK: &str = "PHID-HWBH-agreeokaaaaaaaaaaaa";
const HOOK_OFF: &str = "PHID-HWBH-agreeoffaaaaaaaaaaa";
const HOOK_TRIPPED: &str = "PHID-HWBH-agreetrippedaaaaaa";
const HOOK_GONE: &str = "PHID-HWBH-agreegoneaaaaaaaaaa";
/// Paused by its receiver's `Retry-After` in the dispatcher's memory.
const HOOK_PAUSED: &str = "PHID-HWBH-agreepausedaaaaaaa";
const RETRY: &str = r#"{"retry":"forever"}"#;

/// Answers every POST with 200 and remembers which request it carried.
#[derive(Default)]
struct RecordingTransport {
    posted: Mutex<Vec<String>>,
}

impl RecordingTransport {
    fn posted(&self, request_phid: &str) -> bool {
        self.posted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|phid| phid == request_phid)
    }
}

#[async_trait]
impl Transport for RecordingTransport {
    async fn resolve(&self, uri: &str) -> Resolution {
        Resolution::Ready(Target {
            uri: uri.to_owned(),
            addrs: Vec::new(),
        })
    }

    async fn deliver(&self, request: OutboundRequest) -> DeliveryResult {
        self.posted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(request.request_phid);
        DeliveryResult::Response { status: 200 }
    }
}

/// What happened to a row, or what `explain` says will.
#[derive(Debug, Clone, PartialEq)]
enum Fate {
    /// Failed without an HTTP attempt, with this `errorCode`.
    HookError(String),
    /// POSTed.
    Delivered,
    /// Neither written nor sent.
    LeftAlone,
}

fn hook(phid: &str, status: &str) -> Hook {
    Hook {
        phid: phid.into(),
        name: format!("hook {phid}"),
        uri: format!("https://{}.example.invalid/", &phid[10..]),
        status: status.into(),
        hmac_key: "abcdefghijklmnopqrstuvwxyz234567".into(),
    }
}

fn queued(hook: &str, properties: &str) -> NewRequest {
    NewRequest {
        date_created: Some(NOW - 5),
        date_modified: Some(NOW - 5),
        ..NewRequest::queued(hook, properties)
    }
}

/// One row per way the dispatcher's triage and breaker can go, and rows
/// where two checks apply, so their order counts too. Returns the ids of
/// the rows to compare.
fn seed(store: &MemoryStore) -> Vec<u64> {
    store.put_hook(hook(HOOK_OK, "enabled"));
    store.put_hook(hook(HOOK_OFF, "disabled"));
    store.put_hook(hook(HOOK_TRIPPED, "firehose"));
    store.put_hook(hook(HOOK_PAUSED, "enabled"));
    // Ten failed attempts of the tripped hook in the breaker's window (final
    // rows themselves, so they are never candidates).
    for epoch in NOW - 100..NOW - 90 {
        store.insert_request(NewRequest {
            status: RequestStatus::Failed,
            last_request_result: LastResult::Fail,
            last_request_epoch: epoch,
            ..NewRequest::queued(HOOK_TRIPPED, "{}")
        });
    }
    let mut ids = Vec::new();
    let mut add = |new: NewRequest, defect: Option<&str>| {
        let id = store.insert_request(new);
        if let Some(defect) = defect {
            store.mark_defective(id, defect);
        }
        ids.push(id);
    };
    let defect = Some("column objectPHID is not valid UTF-8 (at byte 4)");
    add(queued(HOOK_OK, RETRY), None);
    add(queued(HOOK_OK, RETRY), defect);
    add(queued(HOOK_GONE, "not json"), defect);
    add(queued(HOOK_OK, "not json"), None);
    add(queued(HOOK_GONE, "[1]"), None);
    add(queued(HOOK_OFF, r#"{"transactionPHIDs":"x"}"#), None);
    add(queued(HOOK_GONE, RETRY), None);
    add(queued(HOOK_OFF, RETRY), None);
    // Before the tripped hook's deliverable row: the dispatcher stops a
    // hook's run at the first row its breaker holds back, so a later row
    // of that hook is not reached in this poll, whatever `explain` says of
    // it on its own.
    add(queued(HOOK_TRIPPED, "not json"), None);
    add(queued(HOOK_TRIPPED, RETRY), None);
    // Triage comes before the pause, so this one is failed all the same.
    add(queued(HOOK_PAUSED, "not json"), None);
    add(queued(HOOK_PAUSED, RETRY), None);
    add(queued(HOOK_OK, r#"{"retry":"never"}"#), None);
    ids
}

/// `explain`'s answer for a row, with the facts the admin tool would read.
fn explained(
    windows: &Windows,
    store: &MemoryStore,
    pauses: &HookPauses,
    row: &RequestRow,
) -> Verdict {
    let hook = block_on(store.hook(&row.webhook_phid)).expect("the memory store answers");
    let since = windows.breaker().since(NOW);
    // As `breaker_failure_epochs` reads them: the hook's failed rows from
    // `since` on, oldest first.
    let mut epochs: Vec<UnixTime> = store
        .rows()
        .iter()
        .filter(|r| {
            r.webhook_phid == row.webhook_phid
                && r.last_request_result == LastResult::Fail
                && r.last_request_epoch >= since
        })
        .map(|r| r.last_request_epoch)
        .collect();
    epochs.sort_unstable();
    let facts = Facts {
        row,
        hook: hook.as_ref(),
        breaker_failure_epochs: &epochs,
        lock_holder: None,
        // As the daemon's `GET /api/webhook/hooks/state` reports them.
        paused_until: pauses.until(&row.webhook_phid),
    };
    explain(windows, NOW, &facts).verdict
}

fn foretold(verdict: &Verdict) -> Fate {
    match verdict.hook_error() {
        Some(code) => Fate::HookError(code.to_owned()),
        None if verdict.deliverable_now() => Fate::Delivered,
        None => Fate::LeftAlone,
    }
}

fn observed(before: &RequestRow, after: &RequestRow, transport: &RecordingTransport) -> Fate {
    if transport.posted(&after.phid) {
        return Fate::Delivered;
    }
    if after.status == RequestStatus::Failed && after.last_request_result == LastResult::None {
        let code = Properties::parse(&after.properties)
            .ok()
            .and_then(|p| p.error().1.and_then(|c| c.as_str().map(str::to_owned)));
        return Fate::HookError(code.unwrap_or_default());
    }
    assert_eq!(before, after, "written, but neither a hook error nor sent");
    Fate::LeftAlone
}

/// Runs the dispatcher until it has nothing left to do but wait for its
/// next poll, then stops it.
fn one_poll(dispatcher: Dispatcher, clock: &ManualClock) {
    let mut pool = LocalPool::new();
    let (stop, stopped) = oneshot::channel::<()>();
    let finished = Arc::new(Mutex::new(false));
    let done = Arc::clone(&finished);
    pool.spawner()
        .spawn_local(async move {
            dispatcher.run(stopped.map(|_| ())).await;
            *done.lock().unwrap_or_else(|e| e.into_inner()) = true;
        })
        .expect("spawn on a local pool");
    pool.run_until_stalled();
    let _ = stop.send(());
    for _ in 0..1_000 {
        pool.run_until_stalled();
        if *finished.lock().unwrap_or_else(|e| e.into_inner()) {
            return;
        }
        clock.advance_to_next_sleeper();
    }
    panic!("the dispatcher did not stop");
}

#[test]
fn explain_says_what_the_dispatcher_does_row_by_row() {
    let clock = ManualClock::new(NOW);
    let store = MemoryStore::new(Arc::new(clock.clone()));
    let transport = Arc::new(RecordingTransport::default());
    let windows = Windows::try_new(Settings::default()).expect("defaults");
    let ids = seed(&store);
    let before: Vec<RequestRow> = ids.iter().filter_map(|id| store.row(*id)).collect();
    assert_eq!(before.len(), ids.len());
    let dispatcher = Dispatcher::new(
        Arc::new(store.clone()),
        Arc::clone(&transport) as Arc<dyn Transport>,
        Arc::new(clock.clone()) as Arc<dyn Clock>,
        windows.clone(),
    );
    let pauses = dispatcher.pauses();
    pauses.start(HOOK_PAUSED, Duration::from_secs(60));
    let verdicts: Vec<Verdict> = before
        .iter()
        .map(|row| explained(&windows, &store, &pauses, row))
        .collect();
    one_poll(dispatcher, &clock);

    let mut fates = Vec::new();
    for (row, verdict) in before.iter().zip(&verdicts) {
        let after = store.row(row.id).expect("rows are never deleted");
        let did = observed(row, &after, &transport);
        assert_eq!(
            foretold(verdict),
            did,
            "row {} ({}, properties {:?}, defect {:?}): explain said {verdict:?}",
            row.id,
            row.webhook_phid,
            row.properties,
            row.defect
        );
        fates.push(did);
    }
    // Every kind of answer was met, so none of them agrees vacuously.
    for code in ["invalid-row", "invalid-properties", "not-found", "disabled"] {
        assert!(fates.contains(&Fate::HookError(code.into())), "{code}");
    }
    assert!(fates.contains(&Fate::Delivered));
    assert!(verdicts.iter().any(|v| v.code() == "breaker-open"));
    assert!(verdicts.iter().any(|v| v.code() == "paused"));
    assert!(fates.contains(&Fate::LeftAlone));
}
