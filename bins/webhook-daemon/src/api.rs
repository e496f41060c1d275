//! The read-only diagnostics API (protocol §8) as a pure request → response
//! function over the store's `QueueCounts`: routes, token check, envelopes
//! and error codes. The socket side lives in `server`. The one route that
//! does not end, `/api/webhook/events`, is answered here too
//! ([`Api::answer`]); its stream comes from `live`.
//!
//! No response ever carries a hook URI, an HMAC key, SQL, a host or a port:
//! store failures become an opaque `ERR_INTERNAL` and are logged instead.
//!
//! The routes that read the database share a limit, [`DB_ROUTES_AT_ONCE`]
//! (the daemon also gives them their own small pool, apart from delivery's):
//! a request over it waits at most [`DB_QUEUE_WAIT`] for its turn and is
//! then answered 503 `ERR_BUSY`, so pollers of `/api/webhook/stats` cannot
//! slow delivery down or pile up without bound. `/readyz` and `/metrics`
//! answer within [`PROBE_BOUND`] whatever the database does: 503, or
//! `gorge_webhook_database_up 0`, never a hang.
//!
//! `/api/webhook/requests/{id-or-PHID}/attempts` answers from the attempt
//! history (`history`), when the daemon keeps one, in the same turns; a
//! history that cannot be read is an opaque 503 `ERR_HISTORY_UNAVAILABLE`,
//! logged like the store's failures.

mod history;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use ring::hmac;
use serde_json::{json, Value};
use tokio::sync::Semaphore;
use tracing::warn;
use webhook_core::adoption::AdoptionTotals;
use webhook_core::{
    Dispatcher, HookPauses, Metrics, QueueCounts, QueueStats, StoreError, UnixTime,
};
use webhook_store_mysql::HistoryReader;

pub use self::history::{AttemptHistory, ATTEMPTS_DEFAULT, ATTEMPTS_MAX};
use crate::handoff::HandOff;
use crate::history::HistoryFigures;
use crate::live::{EventHub, Subscription};
use crate::metrics_text::{self, BinlogWake, Format, Scrape};

/// Database-backed requests (`/api/webhook/stats`, `/api/webhook/hooks`,
/// the queue count of `/metrics`, a request's attempts) running at once.
pub const DB_ROUTES_AT_ONCE: usize = 2;

/// How long a database-backed request waits for its turn before 503.
pub const DB_QUEUE_WAIT: Duration = Duration::from_secs(2);

/// `/readyz` and `/metrics` answer within this, whatever the database
/// does; longer than a healthy probe or queue count takes by far.
pub const PROBE_BOUND: Duration = Duration::from_secs(3);

/// Whether the daemon can do its work: the `/readyz` verdict.
#[async_trait]
pub trait Readiness: Send + Sync {
    /// `Err(reason)` when not ready; the reason is shown to callers, so it
    /// names no host, port or credentials.
    async fn check(&self) -> Result<(), String>;
}

/// The service token, kept only as an HMAC tag so comparing a presented
/// token takes the same time whatever it is.
pub struct ServiceToken {
    key: hmac::Key,
    tag: Option<hmac::Tag>,
}

// Hand-written: the tag is derived from the token and stays out of logs.
impl std::fmt::Debug for ServiceToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceToken")
            .field("set", &self.tag.is_some())
            .finish()
    }
}

impl ServiceToken {
    /// An empty token turns authentication off.
    pub fn new(token: &str) -> Self {
        let mut seed = [0u8; 32];
        // The key only has to be unknown to callers; it never leaves memory.
        let rng = ring::rand::SystemRandom::new();
        let _ = ring::rand::SecureRandom::fill(&rng, &mut seed);
        let key = hmac::Key::new(hmac::HMAC_SHA256, &seed);
        let tag = (!token.is_empty()).then(|| hmac::sign(&key, token.as_bytes()));
        Self { key, tag }
    }

    fn admits(&self, presented: Option<&[u8]>) -> bool {
        match (&self.tag, presented) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(tag), Some(presented)) => {
                hmac::verify(&self.key, presented, tag.as_ref()).is_ok()
            }
        }
    }
}

/// A response: status, content type and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// HTTP status.
    pub status: StatusCode,
    /// `Content-Type` value.
    pub content_type: &'static str,
    /// Body bytes.
    pub body: Bytes,
    /// `Allow` header for 405s.
    pub allow: Option<&'static str>,
}

impl Reply {
    fn json(status: StatusCode, value: &Value) -> Self {
        let mut body = value.to_string().into_bytes();
        body.push(b'\n');
        Self {
            status,
            content_type: "application/json",
            body: Bytes::from(body),
            allow: None,
        }
    }

    fn error(status: StatusCode, code: &str, message: &str) -> Self {
        Self::json(
            status,
            &json!({"error": {"code": code, "message": message}}),
        )
    }
}

/// The path of the live event stream.
pub const EVENTS_PATH: &str = "/api/webhook/events";

/// The path of what this instance holds in memory about hooks: its
/// Retry-After pauses and key graces. `/api/webhook/hooks` is the Go
/// service's count alone, so these have a route of their own.
pub const HOOK_STATE_PATH: &str = "/api/webhook/hooks/state";

/// `Content-Type` of the event stream.
pub const EVENT_STREAM: &str = "text/event-stream";

/// What a request gets: a whole reply, or the event stream.
#[derive(Debug)]
pub enum Answer {
    /// A response with its whole body.
    Whole(Reply),
    /// `200 text/event-stream`, with this stream as its body.
    Events(Subscription),
}

/// Routes a request.
pub struct Api {
    store: Arc<dyn QueueCounts>,
    readiness: Arc<dyn Readiness>,
    metrics: Arc<Metrics>,
    token: ServiceToken,
    handoff: Option<Arc<HandOff>>,
    events: Option<Arc<EventHub>>,
    /// Turns for the database-backed routes ([`DB_ROUTES_AT_ONCE`]).
    db_turns: Semaphore,
    rows_unreadable: Option<RowsUnreadable>,
    log_lines_dropped: Option<LogLinesDropped>,
    adoption: Option<AdoptionCounts>,
    pauses: Option<Arc<HookPauses>>,
    key_grace: Option<KeysInGrace>,
    clock_skew: Option<ClockSkew>,
    lag: Option<Arc<Dispatcher>>,
    history: Option<Arc<dyn AttemptHistory>>,
    history_figures: Option<HistoryFiguresRead>,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("token", &self.token)
            .field("handoff", &self.handoff.is_some())
            .field("events", &self.events.is_some())
            .field("history", &self.history.is_some())
            .finish_non_exhaustive()
    }
}

/// Why a database-backed request got no answer from the store.
enum Unanswered {
    /// No turn within [`DB_QUEUE_WAIT`] (or the bound given).
    Busy,
    /// The store failed.
    Store(StoreError),
    /// The store did not answer within the bound.
    Late,
}

/// Reads the store's count of candidate rows skipped as unreadable.
pub type RowsUnreadable = Arc<dyn Fn() -> u64 + Send + Sync>;

/// Reads the count of log lines dropped while the log output was full.
pub type LogLinesDropped = Arc<dyn Fn() -> u64 + Send + Sync>;

/// Reads the hooks whose previous HMAC key still signs, with when it
/// stops ([`webhook_core::signing`]).
pub type KeysInGrace = Arc<dyn Fn() -> Vec<(String, UnixTime)> + Send + Sync>;

/// Reads task adoption's totals.
pub type AdoptionCounts = Arc<dyn Fn() -> Option<AdoptionTotals> + Send + Sync>;

/// Reads the attempt history's figures for `/metrics`, when it is on.
pub type HistoryFiguresRead = Arc<dyn Fn() -> Option<HistoryFigures> + Send + Sync>;

/// Reads the skew of this host's clock against the database server's, in
/// seconds, once measured.
pub type ClockSkew = Arc<dyn Fn() -> Option<f64> + Send + Sync>;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Route {
    Health,
    Ready,
    Stats,
    Hooks,
    HookState,
    Metrics,
    Events,
    Attempts,
}

impl Route {
    fn find(path: &str) -> Option<Self> {
        match path {
            "/" | "/healthz" => Some(Self::Health),
            "/readyz" => Some(Self::Ready),
            "/api/webhook/stats" => Some(Self::Stats),
            "/api/webhook/hooks" => Some(Self::Hooks),
            HOOK_STATE_PATH => Some(Self::HookState),
            "/metrics" => Some(Self::Metrics),
            EVENTS_PATH => Some(Self::Events),
            _ if history::key_in(path).is_some() => Some(Self::Attempts),
            _ => None,
        }
    }

    fn needs_token(self) -> bool {
        matches!(
            self,
            Self::Stats
                | Self::Hooks
                | Self::HookState
                | Self::Metrics
                | Self::Events
                | Self::Attempts
        )
    }
}

impl Api {
    /// The API over these parts.
    pub fn new(
        store: Arc<dyn QueueCounts>,
        readiness: Arc<dyn Readiness>,
        metrics: Arc<Metrics>,
        token: ServiceToken,
    ) -> Self {
        Self {
            store,
            readiness,
            metrics,
            token,
            handoff: None,
            events: None,
            rows_unreadable: None,
            log_lines_dropped: None,
            adoption: None,
            pauses: None,
            key_grace: None,
            clock_skew: None,
            history_figures: None,
            lag: None,
            history: None,
            db_turns: Semaphore::new(DB_ROUTES_AT_ONCE),
        }
    }

    /// Runs `call` on the store in its turn: waits for a turn at most
    /// `queue_wait`, and, when `bound` is given, gives up once that much
    /// time has passed since the request came (dropping a store call
    /// mid-statement abandons its connection; see store-mysql's
    /// `session`).
    async fn with_turn<T, F>(
        &self,
        queue_wait: Duration,
        bound: Option<Duration>,
        call: F,
    ) -> Result<T, Unanswered>
    where
        F: std::future::Future<Output = Result<T, StoreError>>,
    {
        let work = async {
            let _turn = match tokio::time::timeout(queue_wait, self.db_turns.acquire()).await {
                Ok(Ok(turn)) => turn,
                Ok(Err(_)) | Err(_) => return Err(Unanswered::Busy),
            };
            call.await.map_err(Unanswered::Store)
        };
        match bound {
            None => work.await,
            Some(bound) => tokio::time::timeout(bound, work)
                .await
                .unwrap_or(Err(Unanswered::Late)),
        }
    }

    /// Answers `/api/webhook/requests/{id-or-PHID}/attempts` from the
    /// attempt history; without it that route answers 404 `ERR_HISTORY_OFF`.
    pub fn with_history(self, reader: Arc<HistoryReader>) -> Self {
        self.with_attempt_history(reader)
    }

    /// [`Api::with_history`] over any [`AttemptHistory`].
    pub fn with_attempt_history(mut self, history: Arc<dyn AttemptHistory>) -> Self {
        self.history = Some(history);
        self
    }

    /// Reports the attempt history's figures in `/metrics`.
    pub fn with_history_figures(mut self, figures: HistoryFiguresRead) -> Self {
        self.history_figures = Some(figures);
        self
    }

    /// Reports task adoption's totals in `/metrics`.
    pub fn with_adoption(mut self, totals: AdoptionCounts) -> Self {
        self.adoption = Some(totals);
        self
    }

    /// Lists the dispatcher's paused hooks (`Retry-After`) in
    /// [`HOOK_STATE_PATH`]; without them the list is empty.
    pub fn with_pauses(mut self, pauses: Arc<HookPauses>) -> Self {
        self.pauses = Some(pauses);
        self
    }

    /// Lists the hooks in a key grace in [`HOOK_STATE_PATH`]; without it
    /// the list is empty.
    pub fn with_key_grace(mut self, keys: KeysInGrace) -> Self {
        self.key_grace = Some(keys);
        self
    }

    /// Reports the skew of this host's clock against the database
    /// server's in `/metrics`.
    pub fn with_clock_skew(mut self, skew: ClockSkew) -> Self {
        self.clock_skew = Some(skew);
        self
    }

    /// Reports `dispatcher`'s lag (`gorge_webhook_oldest_due_seconds`) in
    /// `/metrics`, read from this API's store at each scrape.
    pub fn with_lag(mut self, dispatcher: Arc<Dispatcher>) -> Self {
        self.lag = Some(dispatcher);
        self
    }

    /// Reports the store's unreadable-row count in `/metrics`.
    pub fn with_rows_unreadable(mut self, count: RowsUnreadable) -> Self {
        self.rows_unreadable = Some(count);
        self
    }

    /// Reports the count of dropped log lines in `/metrics`.
    pub fn with_log_lines_dropped(mut self, count: LogLinesDropped) -> Self {
        self.log_lines_dropped = Some(count);
        self
    }

    /// Serves `hub`'s events on `/api/webhook/events` (without a hub the
    /// path is not found).
    pub fn with_events(mut self, hub: Arc<EventHub>) -> Self {
        self.events = Some(hub);
        self
    }

    /// Answers one request, opening an event stream for an admitted
    /// `GET /api/webhook/events`, or refusing it with 503
    /// `ERR_TOO_MANY_STREAMS` when the cap is reached. Every other answer
    /// is [`Api::handle`]'s.
    pub async fn answer(
        &self,
        method: &Method,
        path: &str,
        query: Option<&str>,
        headers: &HeaderMap,
    ) -> Answer {
        let reply = self.handle(method, path, query, headers).await;
        if method != Method::GET || reply.status != StatusCode::OK || path != EVENTS_PATH {
            return Answer::Whole(reply);
        }
        let Some(hub) = &self.events else {
            return Answer::Whole(reply);
        };
        match hub.subscribe() {
            Ok(subscription) => Answer::Events(subscription),
            Err(_) => Answer::Whole(Reply::error(
                StatusCode::SERVICE_UNAVAILABLE,
                "ERR_TOO_MANY_STREAMS",
                "too many event streams are open; try again later",
            )),
        }
    }

    /// Reports the hand-off checks in `/metrics`.
    pub fn with_handoff(mut self, handoff: Arc<HandOff>) -> Self {
        self.handoff = Some(handoff);
        self
    }

    /// Answers one request with a whole reply. For the event stream that
    /// is its head (`HEAD`, and the verdict [`Api::answer`] starts from).
    pub async fn handle(
        &self,
        method: &Method,
        path: &str,
        query: Option<&str>,
        headers: &HeaderMap,
    ) -> Reply {
        let route =
            Route::find(path).filter(|route| *route != Route::Events || self.events.is_some());
        // The token comes before the route, as in the Go service's
        // contract: without it, only the probes answer, so an unknown path
        // or a write method tells an unauthenticated caller nothing.
        let open = route.is_some_and(|route| !route.needs_token());
        if !open
            && !self
                .token
                .admits(presented_token(headers, query).as_deref())
        {
            return Reply::error(
                StatusCode::UNAUTHORIZED,
                "ERR_UNAUTHORIZED",
                "missing or invalid service token",
            );
        }
        let Some(route) = route else {
            return Reply::error(StatusCode::NOT_FOUND, "ERR_NOT_FOUND", "not found");
        };
        if method != Method::GET && method != Method::HEAD {
            let mut reply = Reply::error(
                StatusCode::METHOD_NOT_ALLOWED,
                "ERR_METHOD_NOT_ALLOWED",
                "method not allowed; this API is read-only",
            );
            reply.allow = Some("GET, HEAD");
            return reply;
        }
        match route {
            Route::Health => Reply::json(StatusCode::OK, &json!({"status": "ok"})),
            Route::Ready => self.ready().await,
            Route::Stats => self.stats().await,
            Route::Hooks => self.hooks().await,
            Route::HookState => self.hook_state(),
            Route::Metrics => self.metrics(headers).await,
            Route::Attempts => self.attempts(path, query).await,
            Route::Events => Reply {
                status: StatusCode::OK,
                content_type: EVENT_STREAM,
                body: Bytes::new(),
                allow: None,
            },
        }
    }

    async fn ready(&self) -> Reply {
        // Not behind the turns: a probe must not wait for pollers.
        let verdict = tokio::time::timeout(PROBE_BOUND, self.readiness.check())
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "database did not answer within {} s",
                    PROBE_BOUND.as_secs()
                ))
            });
        // Exactly the documented bodies: a hold for Phorge's silent mode is
        // delivery doing what it should, and is said by `/metrics`
        // (`gorge_webhook_silent_mode`) and the log, not here.
        match verdict {
            Ok(()) => Reply::json(StatusCode::OK, &json!({"status": "ok"})),
            Err(reason) => Reply::json(
                StatusCode::SERVICE_UNAVAILABLE,
                &json!({"status": "unavailable", "reason": reason}),
            ),
        }
    }

    async fn stats(&self) -> Reply {
        match self
            .with_turn(DB_QUEUE_WAIT, None, self.store.stats())
            .await
        {
            Ok(s) => Reply::json(
                StatusCode::OK,
                &json!({"data": {
                    "queuedCount": s.queued,
                    "sentCount": s.sent,
                    "failedCount": s.failed,
                    "activeWebhooks": s.active_hooks,
                }}),
            ),
            Err(why) => unanswered("stats", why),
        }
    }

    async fn hooks(&self) -> Reply {
        match self
            .with_turn(DB_QUEUE_WAIT, None, self.store.hook_count())
            .await
        {
            // How many hooks exist, never which.
            Ok(total) => Reply::json(StatusCode::OK, &json!({"data": {"total": total}})),
            Err(why) => unanswered("hooks", why),
        }
    }

    /// One request's attempts from the history, in a database turn.
    async fn attempts(&self, path: &str, query: Option<&str>) -> Reply {
        let Some(key) = history::key_in(path) else {
            return Reply::error(StatusCode::NOT_FOUND, "ERR_NOT_FOUND", "not found");
        };
        let asked = match history::query_of(key, query) {
            Ok(asked) => asked,
            Err(reply) => return reply,
        };
        let Some(reader) = &self.history else {
            return history::off();
        };
        match self
            .with_turn(DB_QUEUE_WAIT, None, reader.attempts(&asked))
            .await
        {
            Ok(attempts) => history::found(key, &attempts),
            Err(Unanswered::Store(err)) => history::failed(&err),
            Err(why) => unanswered("attempts", why),
        }
    }

    /// The hooks this instance treats apart now, from its memory (no
    /// database call): those it paused for `Retry-After` and those whose
    /// previous key it still signs with.
    fn hook_state(&self) -> Reply {
        let paused: Vec<Value> = self
            .pauses
            .iter()
            .flat_map(|pauses| pauses.current())
            .map(|pause| {
                json!({"hookPHID": pause.hook, "until": pause.until, "reason": "retry-after"})
            })
            .collect();
        let key_grace: Vec<Value> = self
            .key_grace
            .iter()
            .flat_map(|keys| keys())
            .map(|(hook, until)| json!({"hookPHID": hook, "until": until}))
            .collect();
        Reply::json(
            StatusCode::OK,
            &json!({"data": {"paused": paused, "keyGrace": key_grace}}),
        )
    }

    /// The queue count for a scrape, within [`PROBE_BOUND`] (its turn
    /// included); `None` reads as `gorge_webhook_database_up 0`.
    async fn queue_count(&self) -> Option<QueueStats> {
        let why = match self
            .with_turn(PROBE_BOUND, Some(PROBE_BOUND), self.store.stats())
            .await
        {
            Ok(stats) => return Some(stats),
            Err(why) => why,
        };
        match why {
            Unanswered::Store(err) => warn!(event = "metrics_queue_unavailable", error = %err),
            Unanswered::Late => warn!(
                event = "metrics_queue_unavailable",
                error = "the database did not answer in time",
                bound_secs = PROBE_BOUND.as_secs()
            ),
            Unanswered::Busy => warn!(
                event = "metrics_queue_unavailable",
                error = "no turn for the database in time",
                bound_secs = PROBE_BOUND.as_secs()
            ),
        }
        None
    }

    /// The lag for a scrape, within [`PROBE_BOUND`] like the queue count;
    /// `None` without a dispatcher, or when the database did not answer
    /// (which the queue count reports).
    async fn lag_secs(&self) -> Option<u64> {
        let dispatcher = self.lag.as_ref()?;
        let read = dispatcher.lag_secs(self.store.as_ref());
        self.with_turn(PROBE_BOUND, Some(PROBE_BOUND), read)
            .await
            .ok()
    }

    /// The scrape in the format the `Accept` header asks for
    /// ([`metrics_text::Format::negotiate`]).
    async fn metrics(&self, headers: &HeaderMap) -> Reply {
        let format = Format::negotiate(
            headers
                .get_all(http::header::ACCEPT)
                .iter()
                .filter_map(|value| value.to_str().ok()),
        );
        let queue = self.queue_count().await;
        // Only once the database answered the count: in an outage a second
        // bounded read would double the scrape's wait.
        let oldest_due_secs = match queue {
            Some(_) => self.lag_secs().await,
            None => None,
        };
        let scrape = Scrape {
            dispatcher: self.metrics.snapshot(),
            queue,
            handoff: self.handoff.as_ref().map(|h| h.status()),
            rows_unreadable: self.rows_unreadable.as_ref().map(|count| count()),
            log_lines_dropped: self.log_lines_dropped.as_ref().map(|count| count()),
            adoption: self.adoption.as_ref().and_then(|totals| totals()),
            clock_skew_secs: self.clock_skew.as_ref().and_then(|skew| skew()),
            oldest_due_secs,
            history: self.history_figures.as_ref().and_then(|figures| figures()),
            claim_lease_secs: self.lag.as_ref().map(|d| d.windows().lease_secs()),
            binlog_wake: (self.lag.as_ref())
                .and_then(|d| d.wake_hints())
                .map(|hints| BinlogWake {
                    following: hints.following(),
                    hints: hints.given(),
                }),
        };
        match metrics_text::render(scrape, format) {
            Ok(text) => Reply {
                status: StatusCode::OK,
                content_type: format.content_type(),
                body: Bytes::from(text),
                allow: None,
            },
            Err(_) => Reply::error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "ERR_INTERNAL",
                "internal server error",
            ),
        }
    }
}

/// `X-Service-Token` wins; the `token` query parameter is the fallback.
fn presented_token(headers: &HeaderMap, query: Option<&str>) -> Option<Vec<u8>> {
    if let Some(value) = headers.get("x-service-token") {
        return Some(HeaderValue::as_bytes(value).to_vec());
    }
    let query = query?;
    form_urlencoded::parse(query.as_bytes())
        .find(|(key, _)| key == "token")
        .map(|(_, value)| value.into_owned().into_bytes())
}

fn unanswered(route: &str, why: Unanswered) -> Reply {
    match why {
        Unanswered::Store(err) => internal(route, &err),
        Unanswered::Busy | Unanswered::Late => {
            tracing::debug!(event = "api_busy", route, limit = DB_ROUTES_AT_ONCE);
            Reply::error(
                StatusCode::SERVICE_UNAVAILABLE,
                "ERR_BUSY",
                "too many requests are reading the database; try again later",
            )
        }
    }
}

fn internal(route: &str, err: &webhook_core::StoreError) -> Reply {
    // The detail (driver text, host) goes to the log, never to the caller.
    let detail = std::error::Error::source(err).map(ToString::to_string);
    warn!(event = "api_store_error", route, error = %err, detail = ?detail);
    Reply::error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "ERR_INTERNAL",
        "internal server error",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use webhook_core::history::{Attempt, AttemptQuery, RecordedAttempt, RequestKey};
    use webhook_core::memory_store::StoreOp;
    use webhook_core::memory_store::{MemoryStore, NewRequest};
    use webhook_core::{Hook, ManualClock};

    struct Fixed(Result<(), String>);

    #[async_trait]
    impl Readiness for Fixed {
        async fn check(&self) -> Result<(), String> {
            self.0.clone()
        }
    }

    fn api(token: &str, ready: Result<(), String>) -> (Api, MemoryStore) {
        let store = MemoryStore::new(Arc::new(ManualClock::new(1_700_000_000)));
        store.put_hook(Hook {
            phid: "PHID-HWBH-a".into(),
            name: "a".into(),
            uri: "https://secret.example/hook".into(),
            status: "disabled".into(),
            hmac_key: "abcdefghijklmnopqrstuvwxyz234567".into(),
        });
        store.insert_request(NewRequest::queued("PHID-HWBH-a", "{}"));
        let api = Api::new(
            Arc::new(store.clone()),
            Arc::new(Fixed(ready)),
            Arc::new(Metrics::default()),
            ServiceToken::new(token),
        );
        (api, store)
    }

    async fn get(api: &Api, path: &str, query: Option<&str>, token: Option<&str>) -> (u16, Value) {
        let mut headers = HeaderMap::new();
        if let Some(token) = token {
            headers.insert(
                "x-service-token",
                HeaderValue::from_str(token).expect("header"),
            );
        }
        let reply = api.handle(&Method::GET, path, query, &headers).await;
        let value = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
        (reply.status.as_u16(), value)
    }

    /// While Phorge is silent and delivery held, `/readyz` still answers
    /// exactly the documented body: the hold is `/metrics`' to say.
    #[tokio::test]
    async fn readyz_is_exactly_ok_while_delivery_is_held() {
        let (api, store) = api("", Ok(()));
        store.set_silent_mode(Some(true));
        let silent_mode = Arc::new(webhook_core::hold::SilentMode::new(Arc::new(store)));
        assert!(silent_mode.refresh(&ManualClock::new(1_700_000_000)).await);
        let api = api.with_handoff(Arc::new(HandOff::new(silent_mode)));
        assert_eq!(
            get(&api, "/readyz", None, None).await,
            (200, json!({"status": "ok"}))
        );
        let metrics = api
            .handle(&Method::GET, "/metrics", None, &HeaderMap::new())
            .await;
        let text = String::from_utf8_lossy(&metrics.body).into_owned();
        assert!(text.contains("\ngorge_webhook_silent_mode 1\n"), "{text}");
    }

    struct Hanging;

    #[async_trait]
    impl Readiness for Hanging {
        async fn check(&self) -> Result<(), String> {
            std::future::pending().await
        }
    }

    #[tokio::test]
    async fn readyz_answers_503_in_bounded_time_when_the_database_hangs() {
        let (_, store) = api("", Ok(()));
        let api = Api::new(
            Arc::new(store),
            Arc::new(Hanging),
            Arc::new(Metrics::default()),
            ServiceToken::new(""),
        );
        let started = std::time::Instant::now();
        let (status, body) = tokio::time::timeout(
            PROBE_BOUND + std::time::Duration::from_secs(5),
            get(&api, "/readyz", None, None),
        )
        .await
        .expect("/readyz hung");
        drop(api);
        assert!(started.elapsed() >= PROBE_BOUND);
        assert_eq!(status, 503);
        assert_eq!(
            body,
            json!({"status": "unavailable", "reason": "database did not answer within 3 s"})
        );
    }

    #[tokio::test]
    async fn hook_state_lists_the_hooks_paused_by_retry_after() {
        let (api, _) = api("", Ok(()));
        let clock = ManualClock::new(1_700_000_000);
        let pauses = Arc::new(HookPauses::new(Arc::new(clock.clone())));
        pauses.start("PHID-HWBH-b", std::time::Duration::from_secs(5));
        let api = api.with_pauses(Arc::clone(&pauses));
        assert_eq!(
            get(&api, HOOK_STATE_PATH, None, None).await,
            (
                200,
                json!({"data": {"paused": [
                    {"hookPHID": "PHID-HWBH-b", "until": 1_700_000_005u64, "reason": "retry-after"}
                ], "keyGrace": []}})
            )
        );
        clock.advance(std::time::Duration::from_secs(5));
        assert_eq!(
            get(&api, HOOK_STATE_PATH, None, None).await.1["data"]["paused"],
            json!([])
        );
    }

    #[tokio::test]
    async fn hook_state_lists_the_hooks_in_a_key_grace() {
        let (api, _) = api("", Ok(()));
        let api = api.with_key_grace(Arc::new(|| vec![("PHID-HWBH-k".to_owned(), 1_700_086_400)]));
        assert_eq!(
            get(&api, HOOK_STATE_PATH, None, None).await.1["data"]["keyGrace"],
            json!([{"hookPHID": "PHID-HWBH-k", "until": 1_700_086_400u64}])
        );
    }

    #[tokio::test]
    async fn hooks_says_how_many_hooks_exist_never_which() {
        let (api, _) = api("", Ok(()));
        let clock = ManualClock::new(1_700_000_000);
        let pauses = Arc::new(HookPauses::new(Arc::new(clock)));
        pauses.start("PHID-HWBH-b", std::time::Duration::from_secs(5));
        let api = api
            .with_pauses(pauses)
            .with_key_grace(Arc::new(|| vec![("PHID-HWBH-k".to_owned(), 1_700_086_400)]));
        assert_eq!(
            get(&api, "/api/webhook/hooks", None, None).await,
            (200, json!({"data": {"total": 1}}))
        );
    }

    #[tokio::test]
    async fn routes_and_envelopes() {
        let (api, _) = api("", Ok(()));
        assert_eq!(
            get(&api, "/healthz", None, None).await,
            (200, json!({"status": "ok"}))
        );
        assert_eq!(get(&api, "/", None, None).await.0, 200);
        assert_eq!(
            get(&api, "/readyz", None, None).await,
            (200, json!({"status": "ok"}))
        );
        assert_eq!(
            get(&api, "/api/webhook/stats", None, None).await,
            (
                200,
                json!({"data": {"queuedCount": 1, "sentCount": 0, "failedCount": 0, "activeWebhooks": 0}})
            )
        );
        assert_eq!(
            get(&api, "/api/webhook/hooks", None, None).await,
            (200, json!({"data": {"total": 1}}))
        );
        assert_eq!(
            get(&api, HOOK_STATE_PATH, None, None).await,
            (200, json!({"data": {"paused": [], "keyGrace": []}}))
        );
        let (status, body) = get(&api, "/nope", None, None).await;
        assert_eq!(
            (status, &body["error"]["code"]),
            (404, &json!("ERR_NOT_FOUND"))
        );
        for method in [Method::POST, Method::PUT, Method::DELETE, Method::PATCH] {
            let reply = api
                .handle(&method, "/api/webhook/stats", None, &HeaderMap::new())
                .await;
            assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED, "{method}");
        }
    }

    #[tokio::test]
    async fn token_by_header_then_query() {
        let (api, _) = api("s3cret", Ok(()));
        let unauthorized = json!({"error": {"code": "ERR_UNAUTHORIZED", "message": "missing or invalid service token"}});
        assert_eq!(
            get(&api, "/api/webhook/stats", None, None).await,
            (401, unauthorized.clone())
        );
        assert_eq!(
            get(&api, "/api/webhook/stats", None, Some("wrong")).await.0,
            401
        );
        assert_eq!(
            get(&api, "/api/webhook/stats", None, Some("s3cret"))
                .await
                .0,
            200
        );
        assert_eq!(
            get(&api, "/api/webhook/hooks", Some("token=s3cret"), None)
                .await
                .0,
            200
        );
        assert_eq!(
            get(&api, "/api/webhook/hooks", Some("a=1&token=s3cre%74"), None)
                .await
                .0,
            200
        );
        // The header wins over the query.
        assert_eq!(
            get(
                &api,
                "/api/webhook/hooks",
                Some("token=s3cret"),
                Some("wrong")
            )
            .await
            .0,
            401
        );
        assert_eq!(get(&api, "/metrics", None, None).await.0, 401);
        assert_eq!(get(&api, HOOK_STATE_PATH, None, None).await.0, 401);
        assert_eq!(
            get(&api, HOOK_STATE_PATH, None, Some("s3cret")).await.0,
            200
        );
        // Probes need no token.
        assert_eq!(get(&api, "/healthz", None, None).await.0, 200);
        assert_eq!(get(&api, "/", None, None).await.0, 200);
        assert_eq!(get(&api, "/readyz", None, None).await.0, 200);
    }

    #[tokio::test]
    async fn with_a_token_the_token_is_checked_before_the_route() {
        let (api, _) = api("s3cret", Ok(()));
        let unauthorized = json!({"error": {"code": "ERR_UNAUTHORIZED", "message": "missing or invalid service token"}});
        for path in ["/nope", "/api/webhook", "/healthz/", "/api/webhook/events"] {
            assert_eq!(
                get(&api, path, None, None).await,
                (401, unauthorized.clone()),
                "{path}"
            );
            assert_eq!(get(&api, path, None, Some("wrong")).await.0, 401, "{path}");
            assert_eq!(
                get(&api, path, None, Some("s3cret")).await.0,
                404,
                "{path} (no event hub here)"
            );
        }
        let post = |token: Option<&str>, path: &'static str| {
            let headers = headers(token);
            let api = &api;
            async move {
                api.handle(&Method::POST, path, None, &headers)
                    .await
                    .status
                    .as_u16()
            }
        };
        assert_eq!(post(None, "/api/webhook/stats").await, 401);
        assert_eq!(post(None, "/nope").await, 401);
        assert_eq!(post(Some("s3cret"), "/api/webhook/stats").await, 405);
        // The probes stay open, whatever the method.
        assert_eq!(post(None, "/healthz").await, 405);
        assert_eq!(post(None, "/readyz").await, 405);
    }

    #[tokio::test]
    async fn without_a_token_unknown_paths_stay_not_found() {
        let (api, _) = api("", Ok(()));
        for path in ["/nope", "/api/webhook", "/api/webhook/events"] {
            let (status, body) = get(&api, path, None, None).await;
            assert_eq!(
                (status, &body["error"]["code"]),
                (404, &json!("ERR_NOT_FOUND")),
                "{path}"
            );
        }
    }

    /// A history holding `attempts` (or failing), answering as the
    /// MySQL one does: the request's, newest first, at most `limit`.
    struct Recorded(Result<Vec<RecordedAttempt>, String>);

    #[async_trait]
    impl AttemptHistory for Recorded {
        async fn attempts(&self, query: &AttemptQuery) -> Result<Vec<RecordedAttempt>, StoreError> {
            let all = self
                .0
                .clone()
                .map_err(|why| StoreError::Unavailable(why.into()))?;
            let mut found: Vec<RecordedAttempt> = all
                .into_iter()
                .filter(|a| match &query.request {
                    Some(RequestKey::Id(id)) => a.attempt.request_id == *id,
                    Some(RequestKey::Phid(phid)) => &a.attempt.request_phid == phid,
                    None => true,
                })
                .collect();
            found.sort_by_key(|a| std::cmp::Reverse(a.attempt.started_ms));
            found.truncate(query.limit);
            Ok(found)
        }
    }

    fn recorded(id: u64, request_id: u64, number: u32, started_ms: u64) -> RecordedAttempt {
        RecordedAttempt {
            id,
            number,
            instance: "host:1".into(),
            attempt: Attempt {
                request_id,
                request_phid: format!("PHID-HWBR-{request_id}"),
                hook_phid: "PHID-HWBH-a".into(),
                object_phid: "PHID-TASK-a".into(),
                claim_version: Some(1_700_000_000),
                started_ms,
                duration_ms: 12,
                status: "queued".into(),
                error_type: "http".into(),
                error_code: "503".into(),
                http_status: Some(503),
                sent: None,
                exchange: None,
            },
        }
    }

    #[tokio::test]
    async fn attempts_answer_from_the_history_newest_first() {
        let (api, _) = api("s3cret", Ok(()));
        let api = api.with_attempt_history(Arc::new(Recorded(Ok(vec![
            recorded(1, 7, 1, 1_000),
            recorded(2, 8, 1, 1_500),
            recorded(3, 7, 2, 2_000),
        ]))));
        let path = "/api/webhook/requests/7/attempts";
        assert_eq!(get(&api, path, None, None).await.0, 401);
        let (status, body) = get(&api, path, None, Some("s3cret")).await;
        assert_eq!((status, &body["request"]), (200, &json!("7")));
        let ids: Vec<&Value> = body["attempts"]
            .as_array()
            .expect("attempts")
            .iter()
            .map(|a| &a["id"])
            .collect();
        assert_eq!(ids, [&json!(3), &json!(1)]);
        assert_eq!(body["attempts"][0]["request_id"], json!(7));
        assert_eq!(body["attempts"][0]["error_code"], json!("503"));
        let (status, body) = get(
            &api,
            "/api/webhook/requests/PHID-HWBR-8/attempts",
            Some("limit=1&token=s3cret"),
            None,
        )
        .await;
        assert_eq!(
            (
                status,
                body["request"].clone(),
                body["attempts"][0]["id"].clone()
            ),
            (200, json!("PHID-HWBR-8"), json!(2))
        );
        let (status, body) = get(&api, path, Some("limit=0"), Some("s3cret")).await;
        assert_eq!(
            (status, &body["error"]["code"]),
            (400, &json!("ERR_BAD_REQUEST"))
        );
        let (status, body) = get(
            &api,
            "/api/webhook/requests/nope/attempts",
            None,
            Some("s3cret"),
        )
        .await;
        assert_eq!(
            (status, &body["error"]["code"]),
            (400, &json!("ERR_BAD_REQUEST"))
        );
        let reply = api
            .handle(&Method::POST, path, None, &headers(Some("s3cret")))
            .await;
        assert_eq!(
            (reply.status, reply.allow),
            (StatusCode::METHOD_NOT_ALLOWED, Some("GET, HEAD"))
        );
    }

    #[tokio::test]
    async fn attempts_say_when_the_history_is_off_or_fails() {
        let (api, _) = api("", Ok(()));
        let path = "/api/webhook/requests/7/attempts";
        let (status, body) = get(&api, path, None, None).await;
        assert_eq!(
            (status, &body["error"]["code"]),
            (404, &json!("ERR_HISTORY_OFF"))
        );
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("GORGE_WEBHOOK_HISTORY")),
            "{body}"
        );
        let api = api.with_attempt_history(Arc::new(Recorded(Err(
            "cannot reach 10.1.2.3:3306 (gorge_webhook_history)".into(),
        ))));
        let reply = api
            .handle(&Method::GET, path, None, &HeaderMap::new())
            .await;
        let text = String::from_utf8_lossy(&reply.body).into_owned();
        assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            serde_json::from_str::<Value>(&text).unwrap_or(Value::Null),
            json!({"error": {"code": "ERR_HISTORY_UNAVAILABLE", "message": "the attempt history cannot be read now; try again later"}})
        );
        assert!(
            !text.contains("10.1.2.3") && !text.contains("3306"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn store_failures_are_opaque() {
        let (api, store) = api("", Err("database server unreachable".into()));
        store.fail_next(StoreOp::Stats, 1);
        store.fail_next(StoreOp::HookCount, 1);
        let internal =
            json!({"error": {"code": "ERR_INTERNAL", "message": "internal server error"}});
        assert_eq!(
            get(&api, "/api/webhook/stats", None, None).await,
            (500, internal.clone())
        );
        assert_eq!(
            get(&api, "/api/webhook/hooks", None, None).await,
            (500, internal)
        );
        let (status, body) = get(&api, "/readyz", None, None).await;
        assert_eq!(
            (status, body),
            (
                503,
                json!({"status": "unavailable", "reason": "database server unreachable"})
            )
        );
    }

    fn headers(token: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(token) = token {
            headers.insert(
                "x-service-token",
                HeaderValue::from_str(token).expect("header"),
            );
        }
        headers
    }

    /// The whole reply, or "stream" for an opened stream.
    async fn answer(
        api: &Api,
        method: Method,
        query: Option<&str>,
        token: Option<&str>,
    ) -> (u16, Value) {
        match api
            .answer(&method, EVENTS_PATH, query, &headers(token))
            .await
        {
            Answer::Whole(reply) => (
                reply.status.as_u16(),
                serde_json::from_slice(&reply.body).unwrap_or(Value::Null),
            ),
            Answer::Events(_) => (200, json!("stream")),
        }
    }

    #[tokio::test]
    async fn the_event_stream_needs_the_token_and_respects_the_cap() {
        let (api, _) = api("s3cret", Ok(()));
        let hub = Arc::new(EventHub::new(1));
        let api = api.with_events(Arc::clone(&hub));
        let unauthorized = json!({"error": {"code": "ERR_UNAUTHORIZED", "message": "missing or invalid service token"}});
        assert_eq!(
            answer(&api, Method::GET, None, None).await,
            (401, unauthorized.clone())
        );
        assert_eq!(
            answer(&api, Method::GET, None, Some("wrong")).await,
            (401, unauthorized.clone())
        );
        assert_eq!(
            answer(&api, Method::GET, Some("token=wrong"), None).await,
            (401, unauthorized)
        );
        assert_eq!(
            answer(&api, Method::POST, None, Some("s3cret")).await.0,
            405
        );
        assert_eq!(
            answer(&api, Method::GET, None, Some("s3cret")).await,
            (200, json!("stream"))
        );
        // The stream above was dropped at once, freeing its slot.
        assert_eq!(hub.open_streams(), 0);
        let open = match api
            .answer(
                &Method::GET,
                EVENTS_PATH,
                Some("token=s3cret"),
                &HeaderMap::new(),
            )
            .await
        {
            Answer::Events(subscription) => subscription,
            Answer::Whole(reply) => panic!("no stream: {reply:?}"),
        };
        assert_eq!(
            answer(&api, Method::GET, None, Some("s3cret")).await,
            (
                503,
                json!({"error": {"code": "ERR_TOO_MANY_STREAMS", "message": "too many event streams are open; try again later"}})
            )
        );
        // HEAD shows the stream's head without opening one.
        let head = api
            .handle(&Method::HEAD, EVENTS_PATH, None, &headers(Some("s3cret")))
            .await;
        assert_eq!(
            (head.status, head.content_type),
            (StatusCode::OK, EVENT_STREAM)
        );
        drop(open);
        assert_eq!(
            answer(&api, Method::GET, None, Some("s3cret")).await,
            (200, json!("stream"))
        );
    }

    #[tokio::test]
    async fn without_a_hub_there_is_no_event_stream() {
        let (api, _) = api("", Ok(()));
        assert_eq!(answer(&api, Method::GET, None, None).await.0, 404);
    }

    #[tokio::test]
    async fn metrics_answer_in_the_format_the_accept_header_asks_for() {
        let (api, _) = api("", Ok(()));
        let scrape = |accept: &[&'static str]| {
            let mut headers = HeaderMap::new();
            for value in accept {
                headers.append(http::header::ACCEPT, HeaderValue::from_static(value));
            }
            let api = &api;
            async move {
                let reply = api.handle(&Method::GET, "/metrics", None, &headers).await;
                let text = String::from_utf8(reply.body.to_vec()).expect("utf-8");
                (reply.status, reply.content_type, text.ends_with("# EOF\n"))
            }
        };
        let text_format = "text/plain; version=0.0.4; charset=utf-8";
        let openmetrics = "application/openmetrics-text; version=1.0.0; charset=utf-8";
        assert_eq!(scrape(&[]).await, (StatusCode::OK, text_format, false));
        assert_eq!(
            scrape(&["text/plain;version=0.0.4"]).await,
            (StatusCode::OK, text_format, false)
        );
        assert_eq!(
            scrape(&["application/openmetrics-text;version=1.0.0"]).await,
            (StatusCode::OK, openmetrics, true)
        );
        // Several Accept headers read as one list.
        assert_eq!(
            scrape(&["text/plain;q=0.5", "application/openmetrics-text"]).await,
            (StatusCode::OK, openmetrics, true)
        );
    }

    #[tokio::test]
    async fn metrics_never_show_secrets() {
        let (api, _) = api("", Ok(()));
        let reply = api
            .handle(&Method::GET, "/metrics", None, &HeaderMap::new())
            .await;
        let text = String::from_utf8(reply.body.to_vec()).expect("utf-8");
        assert!(text.contains("gorge_webhook_queue_rows{status=\"queued\"} 1"));
        assert!(!text.contains("secret.example"));
        assert!(!text.contains("abcdefghij"));
    }
}
