//! `explain`'s verdict against what the real `Dispatcher` does with the
//! same rows: on core's `MemoryStore` and `ManualClock`, with the daemon's
//! own outbound check (a `HyperTransport` resolving through a fixed table
//! of names, so nothing leaves the process) and a POST that is only
//! recorded, each row's verdict must name what one poll of the dispatcher
//! did to it — the hook error it wrote, the delivery it made, the failed
//! attempt it recorded, or nothing at all. `explain`'s checks are made by
//! the same code as the tool's ([`checks`](super::checks)), on the very
//! doubles the dispatcher runs on; silent mode reads the same two sources.
//! Run once delivering, once with each source saying silent, and once
//! silent with the daemon failing rows instead of holding them.

use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::channel::oneshot;
use futures::executor::{block_on, LocalPool};
use futures::task::LocalSpawnExt;
use futures::FutureExt;
use webhook_core::hold::{ConfigUnreadable, PhorgeConfig, SilentMode};
use webhook_core::memory_store::{MemoryStore, NewRequest};
use webhook_core::windows::{Settings, Windows};
use webhook_core::{
    Clock, DeliveryResult, Dispatcher, Hook, HookPauses, LastResult, ManualClock, OutboundRequest,
    PhorgeObjects, Properties, RequestRow, RequestStatus, Resolution, Store, Transport, UnixTime,
};
use webhook_transport_hyper::{HyperTransport, LookupError, NameLookup, TransportConfig};

use super::checks::Ports;
use super::{explain, Explanation, Facts, Verdict};

const NOW: UnixTime = 1_700_000_000;
const HOOK_OK: &str = "PHID-HWBH-agreeokaaaaaaaaaaaa";
const HOOK_OFF: &str = "PHID-HWBH-agreeoffaaaaaaaaaaa";
const HOOK_TRIPPED: &str = "PHID-HWBH-agreetrippedaaaaaa";
const HOOK_GONE: &str = "PHID-HWBH-agreegoneaaaaaaaaaa";
/// Paused by its receiver's `Retry-After` in the dispatcher's memory.
const HOOK_PAUSED: &str = "PHID-HWBH-agreepausedaaaaaaa";
/// At an address in Phorge's default deny list.
const HOOK_DENIED: &str = "PHID-HWBH-agreedeniedaaaaaaa";
/// On loopback (denied too), and its breaker open.
const HOOK_LOOPBACK: &str = "PHID-HWBH-agreeloopbackaaaaa";
/// At a host name that does not exist.
const HOOK_NO_HOST: &str = "PHID-HWBH-agreenohostaaaaaaa";
/// At a host name whose resolver fails for now.
const HOOK_FLAKY: &str = "PHID-HWBH-agreeflakyaaaaaaaa";
const RETRY: &str = r#"{"retry":"forever"}"#;
/// The object every row is about, unless it is [`OBJECT_GONE`].
const OBJECT: &str = "PHID-TASK-aaaaaaaaaaaaaaaaaaaa";
const OBJECT_GONE: &str = "PHID-TASK-goneaaaaaaaaaaaaaaa";
/// Where every other `.example.invalid` name resolves: a documentation
/// address, let through by the allow list given to the transport.
const RECEIVERS: &str = "192.0.2.0/24";

/// Names as a fixed table: never a query, never a packet.
#[derive(Debug)]
struct Names;

#[async_trait]
impl NameLookup for Names {
    async fn lookup(&self, host: &str) -> Result<Vec<IpAddr>, LookupError> {
        match host {
            "nohost.example.invalid" => Err(LookupError::NoSuchHost),
            "flaky.example.invalid" => Err(LookupError::Temporary("SERVFAIL".into())),
            _ => Ok(vec!["192.0.2.10".parse().expect("an address")]),
        }
    }
}

/// The daemon's outbound check, and a POST that is only recorded and
/// answered 200.
struct CheckingTransport {
    outbound: HyperTransport,
    posted: Mutex<Vec<String>>,
}

impl CheckingTransport {
    fn new() -> Self {
        let config = TransportConfig::from_env_with(|name| {
            (name == "GORGE_WEBHOOK_OUTBOUND_ALLOW").then(|| RECEIVERS.to_owned())
        })
        .expect("valid settings");
        Self {
            outbound: HyperTransport::with_lookup(config, Arc::new(Names)).expect("transport"),
            posted: Mutex::new(Vec::new()),
        }
    }

    fn posted(&self, request_phid: &str) -> bool {
        self.posted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|phid| phid == request_phid)
    }
}

#[async_trait]
impl Transport for CheckingTransport {
    async fn resolve(&self, uri: &str) -> Resolution {
        self.outbound.resolve(uri).await
    }

    async fn deliver(&self, request: OutboundRequest) -> DeliveryResult {
        self.posted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(request.request_phid);
        DeliveryResult::Response { status: 200 }
    }
}

/// Phorge's `local.json` as a fixed answer.
struct LocalJson(bool);

#[async_trait]
impl PhorgeConfig for LocalJson {
    async fn silent_mode(&self) -> Result<bool, ConfigUnreadable> {
        Ok(self.0)
    }

    fn location(&self) -> String {
        "local.json".to_owned()
    }
}

/// What happened to a row, or what `explain` says will.
#[derive(Debug, Clone, PartialEq)]
enum Fate {
    /// Failed without an HTTP attempt, with this `errorCode`.
    HookError(String),
    /// POSTed.
    Delivered,
    /// An attempt recorded as failed without a POST, with this `errorCode`.
    FailedAttempt(i64),
    /// Neither written nor sent.
    LeftAlone,
}

/// Who says silent, and what the daemon does then.
#[derive(Debug, Clone, Copy)]
struct Scenario {
    database_silent: bool,
    local_config_silent: bool,
    /// The daemon adopts Phorge's delivery tasks: it fails rows while
    /// Phorge is silent instead of holding them.
    fails_when_silent: bool,
}

const DELIVERING: Scenario = Scenario {
    database_silent: false,
    local_config_silent: false,
    fails_when_silent: false,
};

fn hook(phid: &str, status: &str) -> Hook {
    Hook {
        phid: phid.into(),
        name: format!("hook {phid}"),
        uri: format!("https://{}.example.invalid/", &phid[15..]),
        status: status.into(),
        hmac_key: "abcdefghijklmnopqrstuvwxyz234567".into(),
    }
}

fn at(phid: &str, uri: &str) -> Hook {
    Hook {
        uri: uri.into(),
        ..hook(phid, "enabled")
    }
}

fn queued(hook: &str, properties: &str) -> NewRequest {
    NewRequest {
        date_created: Some(NOW - 5),
        date_modified: Some(NOW - 5),
        ..NewRequest::queued(hook, properties)
    }
}

/// Ten failed attempts of `hook` in the breaker's window (final rows
/// themselves, so they are never candidates).
fn trip(store: &MemoryStore, hook: &str) {
    for epoch in NOW - 100..NOW - 90 {
        store.insert_request(NewRequest {
            status: RequestStatus::Failed,
            last_request_result: LastResult::Fail,
            last_request_epoch: epoch,
            ..NewRequest::queued(hook, "{}")
        });
    }
}

fn seed_hooks(store: &MemoryStore) {
    store.put_hook(hook(HOOK_OK, "enabled"));
    store.put_hook(hook(HOOK_OFF, "disabled"));
    store.put_hook(hook(HOOK_TRIPPED, "firehose"));
    store.put_hook(hook(HOOK_PAUSED, "enabled"));
    store.put_hook(at(HOOK_DENIED, "http://10.0.0.1/hook"));
    store.put_hook(at(HOOK_LOOPBACK, "http://127.0.0.1:8080/hook"));
    store.put_hook(at(HOOK_NO_HOST, "https://nohost.example.invalid/"));
    store.put_hook(at(HOOK_FLAKY, "https://flaky.example.invalid/"));
    trip(store, HOOK_TRIPPED);
    trip(store, HOOK_LOOPBACK);
    // The object's tables can be read: one object lives, one is gone.
    store.add_object(OBJECT, &[]);
}

/// One row per way the dispatcher's checks can go, and rows where two
/// checks apply, so their order counts too. Returns the ids of the rows
/// to compare.
fn seed(store: &MemoryStore) -> Vec<u64> {
    seed_hooks(store);
    let mut ids = Vec::new();
    let mut add = |new: NewRequest, defect: Option<&str>| {
        let id = store.insert_request(new);
        if let Some(defect) = defect {
            store.mark_defective(id, defect);
        }
        ids.push(id);
    };
    let defect = Some("column objectPHID is not valid UTF-8 (at byte 4)");
    let gone = |hook: &str| NewRequest {
        object_phid: OBJECT_GONE.into(),
        ..queued(hook, RETRY)
    };
    add(queued(HOOK_OK, RETRY), None);
    add(queued(HOOK_OK, RETRY), defect);
    add(queued(HOOK_GONE, "not json"), defect);
    add(queued(HOOK_OK, "not json"), None);
    add(queued(HOOK_GONE, "[1]"), None);
    add(queued(HOOK_OFF, r#"{"transactionPHIDs":"x"}"#), None);
    add(queued(HOOK_GONE, RETRY), None);
    add(queued(HOOK_OFF, RETRY), None);
    // Before the tripped hook's deliverable row: failed on its own.
    add(queued(HOOK_TRIPPED, "not json"), None);
    add(queued(HOOK_TRIPPED, RETRY), None);
    // After it: the run stops at the row before, so this one is not
    // reached while the breaker is open, though it would fail on its own.
    add(queued(HOOK_TRIPPED, "not json"), None);
    // Triage comes before the pause, so this one is failed all the same.
    add(queued(HOOK_PAUSED, "not json"), None);
    add(queued(HOOK_PAUSED, RETRY), None);
    // Behind the paused hook's row: not reached either.
    add(queued(HOOK_PAUSED, RETRY), defect);
    add(queued(HOOK_OK, r#"{"retry":"never"}"#), None);
    // The outbound check: after triage, before the breaker.
    add(queued(HOOK_DENIED, "not json"), None);
    add(queued(HOOK_DENIED, RETRY), None);
    add(queued(HOOK_LOOPBACK, RETRY), None);
    add(queued(HOOK_NO_HOST, RETRY), None);
    // The object check: after the guard, before the call.
    add(gone(HOOK_OK), None);
    add(gone(HOOK_FLAKY), None);
    add(gone(HOOK_TRIPPED), None);
    // A resolver failure is an attempt that failed.
    add(queued(HOOK_FLAKY, RETRY), None);
    ids
}

/// The sources of silent mode, wired as the daemon wires them.
fn silent_mode(store: &MemoryStore, scenario: Scenario) -> SilentMode {
    SilentMode::new(Arc::new(store.clone()) as Arc<dyn PhorgeConfig>)
        .with_local_config(Arc::new(LocalJson(scenario.local_config_silent)))
}

/// `explain`'s answer for a row, with the facts the admin tool would read
/// and its checks made by its own code.
fn explained(
    windows: &Windows,
    store: &MemoryStore,
    ports: &Ports<'_>,
    pauses: &HookPauses,
    scenario: Scenario,
    row: &RequestRow,
) -> Explanation {
    let hook = block_on(store.hook(&row.webhook_phid)).expect("the memory store answers");
    let checked = block_on(ports.check(row, hook.as_ref())).expect("the memory store answers");
    let since = windows.breaker().since(NOW);
    let rows = store.rows();
    let of_hook = || rows.iter().filter(|r| r.webhook_phid == row.webhook_phid);
    // As `breaker_failure_epochs` reads them: the hook's failed rows from
    // `since` on, oldest first.
    let mut epochs: Vec<UnixTime> = of_hook()
        .filter(|r| r.last_request_result == LastResult::Fail && r.last_request_epoch >= since)
        .map(|r| r.last_request_epoch)
        .collect();
    epochs.sort_unstable();
    // As `queued_before` reads them: lowest id first.
    let earlier: Vec<RequestRow> = of_hook()
        .filter(|r| r.status == RequestStatus::Queued && r.id < row.id)
        .cloned()
        .collect();
    let facts = Facts {
        row,
        hook: hook.as_ref(),
        breaker_failure_epochs: &epochs,
        lock_holder: None,
        // As the daemon's `GET /api/webhook/hooks/state` reports them.
        paused_until: pauses.until(&row.webhook_phid),
        silent: checked.silent,
        fails_when_silent: scenario.fails_when_silent,
        resolution: checked.resolution.as_ref(),
        object: checked.object.as_ref(),
        earlier: &earlier,
    };
    explain(windows, NOW, &facts)
}

fn foretold(verdict: &Verdict) -> Fate {
    if let Verdict::ResolveFailed { error_code } = verdict {
        return Fate::FailedAttempt(*error_code);
    }
    match verdict.hook_error() {
        Some(code) => Fate::HookError(code.to_owned()),
        None if verdict.deliverable_now() => Fate::Delivered,
        None => Fate::LeftAlone,
    }
}

fn observed(before: &RequestRow, after: &RequestRow, transport: &CheckingTransport) -> Fate {
    if transport.posted(&after.phid) {
        return Fate::Delivered;
    }
    let code = || {
        Properties::parse(&after.properties)
            .ok()
            .and_then(|p| p.error().1.cloned())
    };
    if after.status == RequestStatus::Failed && after.last_request_result == LastResult::None {
        let code = code().and_then(|c| c.as_str().map(str::to_owned));
        return Fate::HookError(code.unwrap_or_default());
    }
    if after.last_request_result == LastResult::Fail && after != before {
        return Fate::FailedAttempt(code().and_then(|c| c.as_i64()).unwrap_or_default());
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

/// Seeds a store, lets `explain` judge every row, runs one poll of the
/// dispatcher wired for `scenario`, and checks that every row went as
/// foretold. Returns the verdicts and the fates, in seeding order.
fn agree(scenario: Scenario) -> (Vec<Explanation>, Vec<Fate>) {
    // The transport's resolver is bounded by tokio's timer: a runtime's
    // context for it, as the daemon's dispatcher runs on one.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let _context = runtime.enter();
    let clock = ManualClock::new(NOW);
    let store = MemoryStore::new(Arc::new(clock.clone()));
    store.set_silent_mode(Some(scenario.database_silent));
    let transport = Arc::new(CheckingTransport::new());
    let windows = Windows::try_new(Settings::default()).expect("defaults");
    let ids = seed(&store);
    let before: Vec<RequestRow> = ids.iter().filter_map(|id| store.row(*id)).collect();
    assert_eq!(before.len(), ids.len());
    let mut dispatcher = Dispatcher::new(
        Arc::new(store.clone()),
        Arc::clone(&transport) as Arc<dyn Transport>,
        Arc::new(clock.clone()) as Arc<dyn Clock>,
        windows.clone(),
    )
    .with_silent_mode(Arc::new(silent_mode(&store, scenario)))
    .with_objects(Arc::new(store.clone()) as Arc<dyn PhorgeObjects>);
    if scenario.fails_when_silent {
        dispatcher = dispatcher.failing_when_silent();
    }
    let pauses = dispatcher.pauses();
    pauses.start(HOOK_PAUSED, Duration::from_secs(60));
    // The tool's own silent-mode watch over the same sources.
    let explains_silent_mode = silent_mode(&store, scenario);
    let ports = Ports {
        silent_mode: &explains_silent_mode,
        clock: &clock,
        transport: Some(transport.as_ref() as &dyn Transport),
        objects: &store,
    };
    let explanations: Vec<Explanation> = before
        .iter()
        .map(|row| explained(&windows, &store, &ports, &pauses, scenario, row))
        .collect();
    one_poll(dispatcher, &clock);

    let mut fates = Vec::new();
    for (row, explanation) in before.iter().zip(&explanations) {
        let verdict = &explanation.verdict;
        let after = store.row(row.id).expect("rows are never deleted");
        let did = observed(row, &after, &transport);
        assert_eq!(
            foretold(verdict),
            did,
            "{scenario:?}: row {} ({}, properties {:?}, defect {:?}): explain said {verdict:?}",
            row.id,
            row.webhook_phid,
            row.properties,
            row.defect
        );
        fates.push(did);
    }
    (explanations, fates)
}

fn codes(explanations: &[Explanation]) -> Vec<&'static str> {
    explanations.iter().map(|e| e.verdict.code()).collect()
}

#[test]
fn explain_says_what_the_dispatcher_does_row_by_row() {
    let (explanations, fates) = agree(DELIVERING);
    // Every kind of answer was met, so none of them agrees vacuously.
    for code in [
        "invalid-row",
        "invalid-properties",
        "not-found",
        "disabled",
        "uri",
        "object",
    ] {
        assert!(fates.contains(&Fate::HookError(code.into())), "{code}");
    }
    assert!(fates.contains(&Fate::Delivered));
    assert!(fates.contains(&Fate::FailedAttempt(6)));
    assert!(fates.contains(&Fate::LeftAlone));
    let codes = codes(&explanations);
    for code in [
        "breaker-open",
        "paused",
        "refused",
        "object-gone",
        "resolve-failed",
    ] {
        assert!(codes.contains(&code), "{code}: {codes:?}");
    }
    let refused = codes.iter().filter(|code| **code == "refused").count();
    assert_eq!(refused, 3, "deny list, loopback, no such host: {codes:?}");
    // The rows behind the tripped and the paused hook's deliverable rows
    // would each fail on their own, and wait with the row before them.
    let behind: Vec<(&str, Vec<&str>)> = explanations
        .iter()
        .filter(|e| e.also.iter().any(|v| v.hook_error().is_some()))
        .map(|e| (e.verdict.code(), e.also.iter().map(Verdict::code).collect()))
        .collect();
    assert_eq!(
        behind,
        [
            ("breaker-open", vec!["properties-unparseable"]),
            ("paused", vec!["invalid-row"])
        ]
    );
}

#[test]
fn while_phorge_is_silent_in_either_source_explain_says_held_and_nothing_moves() {
    for scenario in [
        Scenario {
            database_silent: true,
            ..DELIVERING
        },
        Scenario {
            local_config_silent: true,
            ..DELIVERING
        },
    ] {
        let (explanations, fates) = agree(scenario);
        assert!(
            explanations.iter().all(|e| e.verdict.code() == "held"),
            "{scenario:?}: {:?}",
            codes(&explanations)
        );
        assert!(fates.iter().all(|f| *f == Fate::LeftAlone), "{fates:?}");
    }
}

#[test]
fn a_daemon_failing_rows_while_silent_fails_them_as_explain_says() {
    let (explanations, fates) = agree(Scenario {
        local_config_silent: true,
        fails_when_silent: true,
        ..DELIVERING
    });
    assert!(fates.contains(&Fate::HookError("silent".into())));
    assert!(fates.contains(&Fate::HookError("invalid-properties".into())));
    assert!(fates.contains(&Fate::HookError("invalid-row".into())));
    assert!(!codes(&explanations).contains(&"held"));
    assert!(!fates.contains(&Fate::Delivered));
}
