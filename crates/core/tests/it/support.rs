//! Test doubles: a scripted `Transport` that records every POST on the
//! manual clock, and a harness that drives one dispatcher deterministically.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use futures::channel::oneshot;
use futures::executor::LocalPool;
use futures::task::LocalSpawnExt;
use futures::FutureExt;
use tracing::field::{Field, Visit};
use tracing::Level;
use webhook_core::history::{without_credentials, Exchange, Hop, KeptBody, WITHHELD};
use webhook_core::hold::SilentMode;
use webhook_core::memory_store::MemoryStore;
use webhook_core::signing::Signatures;
use webhook_core::windows::{Settings, Windows};
use webhook_core::{
    Clock, DeliveryResult, Dispatcher, Event, EventSink, Hook, ManualClock, OutboundRequest,
    Resolution, Target, Transport, TransportFailure, UriRefusal,
};

pub const START: u64 = 1_700_000_000;
pub const KEY: &str = "abcdefghijklmnopqrstuvwxyz234567";

/// What a receiver URI does.
#[derive(Debug, Clone)]
pub struct Reply {
    pub latency: Duration,
    pub result: DeliveryResult,
}

impl Reply {
    pub fn status(status: u16) -> Self {
        Self {
            latency: Duration::ZERO,
            result: DeliveryResult::Response { status },
        }
    }

    /// A 429 or 503 whose `Retry-After` asked for `retry_after`.
    pub fn throttled(status: u16, retry_after: Duration) -> Self {
        Self {
            latency: Duration::ZERO,
            result: DeliveryResult::Throttled {
                status,
                retry_after,
            },
        }
    }

    pub fn after(mut self, latency: Duration) -> Self {
        self.latency = latency;
        self
    }
}

/// One POST as the receiver saw it.
#[derive(Debug, Clone)]
pub struct Post {
    pub uri: String,
    pub request_phid: String,
    pub body: Vec<u8>,
    pub signatures: Signatures,
    pub started: Duration,
    pub finished: Option<Duration>,
}

#[derive(Default)]
struct Recorder {
    posts: Vec<Post>,
    scripts: HashMap<String, VecDeque<Reply>>,
    defaults: HashMap<String, Reply>,
    active: HashMap<String, usize>,
    max_active_per_uri: HashMap<String, usize>,
    max_active_total: usize,
    recorded_exchanges: usize,
}

/// A `Transport` whose receivers are scripted per URI. URIs starting with
/// `http://denied`, `http://nxdomain` or `http://dnsfail`, or without
/// `http`, exercise the outbound check.
#[derive(Clone)]
pub struct FakeTransport {
    clock: ManualClock,
    recorder: Arc<Mutex<Recorder>>,
}

impl FakeTransport {
    pub fn new(clock: ManualClock) -> Self {
        Self {
            clock,
            recorder: Arc::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Recorder> {
        self.recorder.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every later POST to `uri` gets `reply` (after any scripted ones).
    pub fn always(&self, uri: &str, reply: Reply) {
        self.lock().defaults.insert(uri.to_owned(), reply);
    }

    /// The next POSTs to `uri` get these replies, in order.
    pub fn script(&self, uri: &str, replies: impl IntoIterator<Item = Reply>) {
        self.lock()
            .scripts
            .entry(uri.to_owned())
            .or_default()
            .extend(replies);
    }

    pub fn posts(&self) -> Vec<Post> {
        self.lock().posts.clone()
    }

    pub fn max_concurrent_to(&self, uri: &str) -> usize {
        self.lock()
            .max_active_per_uri
            .get(uri)
            .copied()
            .unwrap_or(0)
    }

    /// Calls made through `deliver_recording`.
    pub fn recorded_exchanges(&self) -> usize {
        self.lock().recorded_exchanges
    }

    pub fn max_concurrent_total(&self) -> usize {
        self.lock().max_active_total
    }
}

#[async_trait]
impl Transport for FakeTransport {
    async fn resolve(&self, uri: &str) -> Resolution {
        if !uri.starts_with("http") {
            return Resolution::Refused(UriRefusal::Malformed("no http(s) scheme".into()));
        }
        if uri.starts_with("http://denied") {
            return Resolution::Refused(UriRefusal::DeniedAddress([10, 0, 0, 1].into()));
        }
        if uri.starts_with("http://nxdomain") {
            return Resolution::Refused(UriRefusal::UnknownHost);
        }
        if uri.starts_with("http://dnsfail") {
            return Resolution::Failed(TransportFailure::Resolve);
        }
        Resolution::Ready(Target {
            uri: uri.to_owned(),
            addrs: Vec::new(),
        })
    }

    async fn deliver(&self, request: OutboundRequest) -> DeliveryResult {
        let uri = request.target.uri.clone();
        let (index, reply) = {
            let mut rec = self.lock();
            let reply = rec
                .scripts
                .get_mut(&uri)
                .and_then(VecDeque::pop_front)
                .or_else(|| rec.defaults.get(&uri).cloned())
                .unwrap_or_else(|| Reply::status(200));
            rec.posts.push(Post {
                uri: uri.clone(),
                request_phid: request.request_phid.clone(),
                body: request.body.clone(),
                signatures: request.signatures.clone(),
                started: self.clock.monotonic(),
                finished: None,
            });
            let active = rec.active.entry(uri.clone()).or_default();
            *active += 1;
            let now_active = *active;
            let max = rec.max_active_per_uri.entry(uri.clone()).or_default();
            *max = (*max).max(now_active);
            let total: usize = rec.active.values().sum();
            rec.max_active_total = rec.max_active_total.max(total);
            (rec.posts.len() - 1, reply)
        };
        let (latency, result) = if reply.latency > request.timeout {
            (request.timeout, DeliveryResult::Timeout)
        } else {
            (reply.latency, reply.result)
        };
        if !latency.is_zero() {
            self.clock.sleep(latency).await;
        }
        let mut rec = self.lock();
        rec.posts[index].finished = Some(self.clock.monotonic());
        if let Some(active) = rec.active.get_mut(&uri) {
            *active -= 1;
        }
        result
    }

    /// What a receiver would show: one hop (when it answered), a header
    /// and a body longer than what is kept.
    async fn deliver_recording(
        &self,
        request: OutboundRequest,
        exchange: &mut Exchange,
    ) -> DeliveryResult {
        let uri = without_credentials(&request.target.uri);
        self.lock().recorded_exchanges += 1;
        exchange
            .request_headers
            .push(("authorization".to_owned(), WITHHELD.to_owned()));
        let result = self.deliver(request).await;
        if let DeliveryResult::Response { status } | DeliveryResult::Throttled { status, .. } =
            &result
        {
            exchange.hops.push(Hop {
                uri,
                status: *status,
            });
            exchange
                .response_headers
                .push(("content-type".to_owned(), "text/plain".to_owned()));
            let answer = format!("answer {status} from the receiver");
            KeptBody::default().keep(exchange, answer.as_bytes());
        }
        result
    }
}

/// Keeps every event the dispatcher emits, in order.
#[derive(Default)]
pub struct RecordingSink(Mutex<Vec<Event>>);

impl RecordingSink {
    pub fn events(&self) -> Vec<Event> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// `type` names, for compact assertions.
    pub fn names(&self) -> Vec<&'static str> {
        self.events().iter().map(|e| e.kind.name()).collect()
    }
}

impl EventSink for RecordingSink {
    fn emit(&self, event: Event) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(event);
    }
}

pub fn hook(phid: &str, uri: &str) -> Hook {
    Hook {
        phid: phid.to_owned(),
        name: format!("hook {phid}"),
        uri: uri.to_owned(),
        status: "enabled".to_owned(),
        hmac_key: KEY.to_owned(),
    }
}

/// One dispatcher on a `MemoryStore`, a `FakeTransport` and a `ManualClock`,
/// run on a single-threaded executor.
pub struct Harness {
    pub clock: ManualClock,
    pub store: MemoryStore,
    pub transport: FakeTransport,
    pub dispatcher: Arc<Dispatcher>,
    pub silent_mode: Arc<SilentMode>,
    pub events: Arc<RecordingSink>,
    pool: LocalPool,
    shutdown: Option<oneshot::Sender<()>>,
    finished: Arc<Mutex<bool>>,
}

impl Harness {
    pub fn new(settings: Settings) -> Self {
        Self::configured(settings, |dispatcher| dispatcher)
    }

    /// [`Self::new`], with the dispatcher's options set by `configure`.
    pub fn configured(
        settings: Settings,
        configure: impl FnOnce(Dispatcher) -> Dispatcher,
    ) -> Self {
        let clock = ManualClock::new(START);
        let store = MemoryStore::new(Arc::new(clock.clone()));
        let transport = FakeTransport::new(clock.clone());
        let windows = Windows::try_new(settings).expect("valid settings");
        let silent_mode = Arc::new(SilentMode::new(Arc::new(store.clone())));
        let events = Arc::new(RecordingSink::default());
        let dispatcher = Arc::new(configure(
            Dispatcher::new(
                Arc::new(store.clone()),
                Arc::new(transport.clone()),
                Arc::new(clock.clone()),
                windows,
            )
            .with_silent_mode(Arc::clone(&silent_mode))
            .with_objects(Arc::new(store.clone()))
            .with_events(Arc::clone(&events) as Arc<dyn EventSink>),
        ));
        Self {
            clock,
            store,
            transport,
            dispatcher,
            silent_mode,
            events,
            pool: LocalPool::new(),
            shutdown: None,
            finished: Arc::default(),
        }
    }

    pub fn with_defaults() -> Self {
        Self::new(Settings::default())
    }

    /// Starts the dispatcher and lets it run until it waits on the clock.
    pub fn start(&mut self) {
        let (tx, rx) = oneshot::channel::<()>();
        self.shutdown = Some(tx);
        let dispatcher = Arc::clone(&self.dispatcher);
        let finished = Arc::clone(&self.finished);
        self.pool
            .spawner()
            .spawn_local(async move {
                dispatcher.run(rx.map(|_| ())).await;
                *finished.lock().unwrap_or_else(|e| e.into_inner()) = true;
            })
            .expect("spawn");
        self.pool.run_until_stalled();
    }

    /// Lets `by` pass on the clock, waking sleepers in deadline order.
    pub fn run_for(&mut self, by: Duration) {
        let target = self.clock.monotonic() + by;
        loop {
            self.pool.run_until_stalled();
            let now = self.clock.monotonic();
            match self.clock.next_sleeper_in() {
                Some(step) if now + step <= target => self.clock.advance(step),
                _ => {
                    self.clock.advance(target.saturating_sub(now));
                    self.pool.run_until_stalled();
                    return;
                }
            }
        }
    }

    /// Asks the dispatcher to stop and runs until it returns (bounded).
    pub fn stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        for _ in 0..10_000 {
            self.pool.run_until_stalled();
            if self.is_finished() {
                return;
            }
            if !self.clock.advance_to_next_sleeper() {
                break;
            }
        }
        assert!(self.is_finished(), "dispatcher did not stop");
    }

    pub fn is_finished(&self) -> bool {
        *self.finished.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One log line: its level, target, the module that wrote it and every
/// field, as text.
#[derive(Debug, Clone)]
pub struct Line {
    pub level: Level,
    pub target: String,
    pub module: String,
    pub fields: BTreeMap<String, String>,
}

impl Line {
    pub fn field(&self, name: &str) -> &str {
        self.fields.get(name).map_or("", String::as_str)
    }
}

/// Keeps every event's level, target, module and fields: a subscriber
/// for `tracing::subscriber::with_default`.
#[derive(Default)]
pub struct LineRecorder(Mutex<Vec<Line>>);

impl LineRecorder {
    /// Every line, in the order written.
    pub fn all(&self) -> Vec<Line> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Every line of `event`, in the order written.
    pub fn in_order(&self, event: &str) -> Vec<Line> {
        self.all()
            .into_iter()
            .filter(|line| line.field("event") == event)
            .collect()
    }

    /// The lines of `event` at `level`.
    pub fn lines(&self, event: &str, level: Level) -> Vec<Line> {
        self.in_order(event)
            .into_iter()
            .filter(|line| line.level == level)
            .collect()
    }
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(
            field.name().to_owned(),
            format!("{value:?}").trim_matches('"').to_owned(),
        );
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl tracing::Subscriber for LineRecorder {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        let meta = event.metadata();
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(Line {
            level: *meta.level(),
            target: meta.target().to_owned(),
            module: meta.module_path().unwrap_or_default().to_owned(),
            fields,
        });
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}
