//! Wiring: the MySQL store, the hyper transport and the core dispatcher,
//! the diagnostics listener, the report of dropped log lines, the signals,
//! and the shutdown sequence (protocol §10). Holds no delivery logic of its
//! own.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::watch;
use tracing::{error, info, warn};
use webhook_core::adoption::TaskAdoption;
use webhook_core::hold::{PhorgeConfig, SilentMode};
use webhook_core::windows::Windows;
use webhook_core::{Clock, Dispatcher, EventSink, PhorgeObjects, QueueCounts, Store, WakeHints};
use webhook_store_mysql::history::{HistoryError, MysqlHistory};
use webhook_store_mysql::{BinlogFollower, MysqlConfig, MysqlStore};
use webhook_transport_hyper::{HyperTransport, Proxies};

use crate::access::{check_delivery_access, DeliveryAccess};
use crate::adoption::{adopt_php_tasks, hand_back_at_stop};
use crate::api::{Api, Readiness, ServiceToken};
use crate::config::DaemonConfig;
use crate::handoff::HandOff;
use crate::history::{keep, HistoryStatus};
use crate::live::EventHub;
use crate::logging::{report_dropped_lines, DroppedLines};
use crate::server;
use crate::server_clock::{keep_measured, once_measured, ServerClock};

/// How often the startup schema check retries while the database is not
/// there yet.
const SCHEMA_RETRY: Duration = Duration::from_secs(10);

/// Connections of the diagnostics API's own pool: one per database-backed
/// route at once, and one more so `/readyz`'s ping never waits behind them.
/// Apart from delivery's pool, so API load cannot take its connections.
const API_POOL: usize = crate::api::DB_ROUTES_AT_ONCE + 1;

/// How long closing each pool may take at shutdown, after the grace: a
/// connection stuck on a half-open socket never comes back, and must not
/// keep the process from exiting.
const POOL_CLOSE_BOUND: Duration = Duration::from_secs(2);

/// Why the daemon could not run.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The store could not be configured.
    #[error("database settings: {0}")]
    Store(#[from] webhook_store_mysql::MysqlError),
    /// The transport could not be built from its checked settings.
    #[error("transport: {0}")]
    Transport(#[from] webhook_transport_hyper::BuildError),
    /// The account may not run statements delivery runs (or the server
    /// refuses Phorge's named locks).
    #[error("the database account lacks what delivery needs: {}", .0.join(", "))]
    DeliveryGrants(Vec<String>),
    /// Task adoption is on and the account lacks grants it needs.
    #[error(
        "GORGE_WEBHOOK_ADOPT_PHP_TASKS needs grants the database account lacks: {}",
        .0.join(", ")
    )]
    AdoptionGrants(Vec<String>),
    /// The attempt history cannot be kept: its schema is newer than this
    /// build, or the account lacks a privilege it needs.
    #[error("GORGE_WEBHOOK_HISTORY is on but {0}")]
    History(#[from] HistoryError),
    /// Preparing the attempt history ended unexpectedly (a bug).
    #[error("preparing the attempt history stopped unexpectedly: {0}")]
    HistoryCrashed(String),
    /// The check of delivery's privileges ended unexpectedly (a bug).
    #[error("the check of the database account's privileges stopped unexpectedly: {0}")]
    AccessCheckCrashed(String),
    /// Task adoption's task ended unexpectedly (a bug): delivery would no
    /// longer be safe beside `phd`.
    #[error("task adoption stopped unexpectedly: {0}")]
    AdoptionCrashed(String),
    /// The diagnostics address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// Ready when delivery can go on: the database answers, its server's
/// clock was measured and the account's privileges checked (delivery
/// waits for both), the database refuses none of delivery's operations
/// now, and the attempt history, when on, is being written.
struct MysqlReadiness {
    store: Arc<MysqlStore>,
    clock: Arc<ServerClock>,
    access: Arc<DeliveryAccess>,
    dispatcher: Arc<Dispatcher>,
    history: Option<Arc<HistoryStatus>>,
}

#[async_trait]
impl Readiness for MysqlReadiness {
    async fn check(&self) -> Result<(), String> {
        self.store.ready().await.map_err(|e| e.to_string())?;
        if self.clock.latest().is_none() {
            return Err(
                "the database server's clock is not measured yet; delivery waits for it".to_owned(),
            );
        }
        let history_failing = || self.history.as_ref().and_then(|h| h.failing());
        match self
            .access
            .not_yet()
            .or_else(|| self.dispatcher.refusal())
            .or_else(history_failing)
        {
            Some(reason) => Err(reason),
            None => Ok(()),
        }
    }
}

/// Logs the windows in force once, with a warning for every setting that
/// does not do what it seems to.
pub fn log_windows(windows: &Windows) {
    let s = windows.settings();
    let breaker = windows.breaker();
    info!(
        event = "windows",
        claim_lease_secs = windows.lease_secs(),
        retry_spacing_secs = windows.effective_retry_spacing_secs(),
        breaker_threshold = breaker.threshold,
        breaker_window_secs = breaker.window_secs,
        delivery_timeout_secs = s.delivery_timeout.as_secs(),
        poll_interval_ms = s.poll_interval.as_millis() as u64,
        max_concurrent = s.max_concurrent,
        batch_size = windows.batch_size(),
        "effective delivery windows"
    );
    for warning in windows.warnings() {
        warn!(event = "setting_overridden", "{warning}");
    }
}

/// Logs the egress proxies in force once (credentials withheld), when any.
fn log_proxies(proxies: &Proxies) {
    if proxies.any() {
        info!(event = "egress_proxy", proxies = %proxies.shown(), no_proxy = %proxies.no_proxy_shown(),
              "calls go through the egress proxy; the outbound check still applies to each target");
    }
}

/// Runs until SIGTERM, SIGINT or SIGQUIT, then stops claiming, waits (up
/// to the grace period) for in-flight deliveries to finish and write their
/// results, archives the finished tasks it leases when adopting them
/// (within `ARCHIVE_AT_STOP_BOUND`, beside the diagnostics connections'
/// drain), and closes the pools (each within `POOL_CLOSE_BOUND`).
/// Returns whatever is still stuck: `main` does not wait for it.
pub async fn run(config: DaemonConfig, log_dropped: DroppedLines) -> Result<(), StartError> {
    let signals = ShutdownSignals::install();
    let adopting = config.delivery.mysql.adopt_php_tasks;
    let mut store = MysqlStore::new(&config.delivery.mysql)?;
    let task_adoption =
        adopting.then(|| Arc::new(TaskAdoption::new(&host_name(), std::process::id())));
    if let Some(adoption) = &task_adoption {
        store = store.with_task_adoption(Arc::clone(adoption));
    }
    let history = match &config.delivery.history {
        Some(settings) => Some(MysqlHistory::new(
            &config.delivery.mysql,
            settings.clone(),
            format!("{}:{}", host_name(), std::process::id()),
        )?),
        None => None,
    };
    if let Some(history) = &history {
        store = store.with_history(history.queue());
    }
    let store = Arc::new(store);
    let api_store = Arc::new(MysqlStore::new(&MysqlConfig {
        pool_max: API_POOL,
        ..config.delivery.mysql.clone()
    })?);
    let transport = Arc::new(HyperTransport::new(config.delivery.transport.clone())?);
    log_windows(&config.delivery.windows);
    log_proxies(&config.delivery.transport.config().proxies);
    let mut silent_mode = SilentMode::new(Arc::clone(&store) as Arc<dyn PhorgeConfig>);
    match &config.delivery.local_config {
        Some(local_config) => {
            silent_mode = silent_mode.with_local_config(Arc::new(local_config.clone()));
        }
        None => warn!(
            event = "silent_mode_local_config_unset",
            "GORGE_PHORGE_LOCAL_CONFIG is not set: Phorge keeps phabricator.silent in \
             conf/local/local.json (bin/config set), so silent mode set that way is not seen and \
             delivery is not held while Phorge is silent. Point GORGE_PHORGE_LOCAL_CONFIG at \
             that file"
        ),
    }
    let silent_mode = Arc::new(silent_mode);
    let mut handoff = HandOff::new(Arc::clone(&silent_mode));
    if adopting {
        handoff = handoff.adopting();
    }
    let handoff = Arc::new(handoff);
    let events = Arc::new(EventHub::new(config.event_streams));
    let clock = Arc::new(ServerClock::new());
    let mut dispatcher = Dispatcher::new(
        Arc::clone(&store) as Arc<dyn Store>,
        transport,
        Arc::clone(&clock) as Arc<dyn Clock>,
        config.delivery.windows.clone(),
    )
    .with_silent_mode(silent_mode)
    .with_objects(Arc::clone(&store) as Arc<dyn PhorgeObjects>)
    .with_events(Arc::clone(&events) as Arc<dyn EventSink>)
    .with_signing(config.delivery.signing.clone());
    if adopting {
        // Nobody else will fail the rows while Phorge is silent.
        dispatcher = dispatcher.failing_when_silent();
    }
    let binlog_hints = config.delivery.mysql.wake_binlog.then(WakeHints::new);
    if let Some(hints) = &binlog_hints {
        dispatcher = dispatcher.with_wake_hints(hints.clone());
    }
    if let Some(history) = &history {
        let body_kept = history.config().body_kept;
        dispatcher = dispatcher.with_history(Arc::new(history.queue()), body_kept);
    }
    let dispatcher = Arc::new(dispatcher);
    let history_status = history.as_ref().map(|h| Arc::new(HistoryStatus::new(h)));
    let access = Arc::new(DeliveryAccess::default());
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|source| StartError::Listen {
            addr: config.listen,
            source,
        })?;
    let local_config = config.delivery.local_config.as_ref().map_or_else(
        || "(not set)".to_owned(),
        |c| c.path().display().to_string(),
    );
    info!(event = "listening", addr = %config.listen, database = %store.database(),
          local_config = %local_config, auth = !config.service_token.is_empty());
    if open_to_others(config.listen, &config.service_token) {
        warn!(event = "diagnostics_open", addr = %config.listen,
              "the diagnostics API (queue counts, /metrics, the live event stream with \
               request and hook PHIDs) answers anyone who can reach {} without a token: set \
               {}, or listen on loopback", config.listen, crate::config::SERVICE_TOKEN.name);
    }

    let mut api = Api::new(
        Arc::clone(&api_store) as Arc<dyn QueueCounts>,
        Arc::new(MysqlReadiness {
            store: Arc::clone(&api_store),
            clock: Arc::clone(&clock),
            access: Arc::clone(&access),
            dispatcher: Arc::clone(&dispatcher),
            history: history_status.clone(),
        }),
        dispatcher.metrics(),
        ServiceToken::new(&config.service_token),
    )
    .with_handoff(Arc::clone(&handoff))
    .with_events(Arc::clone(&events))
    .with_pauses(dispatcher.pauses())
    .with_lag(Arc::clone(&dispatcher))
    .with_key_grace({
        let dispatcher = Arc::clone(&dispatcher);
        Arc::new(move || dispatcher.keys_in_grace())
    })
    .with_rows_unreadable({
        let store = Arc::clone(&store);
        Arc::new(move || store.rows_unreadable())
    })
    .with_adoption({
        let adoption = task_adoption.clone();
        Arc::new(move || adoption.as_ref().map(|adoption| adoption.totals()))
    })
    .with_log_lines_dropped({
        let dropped = log_dropped.clone();
        Arc::new(move || dropped.total())
    })
    .with_clock_skew({
        let clock = Arc::clone(&clock);
        Arc::new(move || clock.skew_secs())
    });
    if let (Some(history), Some(status)) = (&history, &history_status) {
        let status = Arc::clone(status);
        let clock = Arc::clone(&clock);
        api = api
            .with_history(Arc::new(api_store.reader().history(history.database())))
            .with_history_figures(Arc::new(move || Some(status.figures(clock.now_ms()))));
    }
    let api = Arc::new(api);
    // Left running to the end: lines dropped during the stop are reported
    // if the log drains before the exit.
    tokio::spawn(report_dropped_lines(log_dropped));
    let (stop, stopped) = watch::channel(false);
    let server = tokio::spawn(server::serve(listener, api, signalled(stopped.clone())));
    let schema = tokio::spawn(check_schema_when_ready(Arc::clone(&store)));
    let php_watch = tokio::spawn(handoff.watch_php_delivery(Arc::clone(&store)));
    let measuring = tokio::spawn(keep_measured(Arc::clone(&clock), store.reader().clone()));
    let following = binlog_hints
        .map(|hints| tokio::spawn(BinlogFollower::new(&config.delivery.mysql, hints).run()));
    let adoption_clock = Arc::clone(&clock) as Arc<dyn Clock>;
    let mut checking = tokio::spawn(check_delivery_access(
        Arc::clone(&store),
        Arc::clone(&access),
        Arc::clone(&clock),
    ));
    let (history_prepared, mut history_checked) = watch::channel(history.is_none());
    let mut keeping_history = tokio::spawn({
        let history = history.clone().zip(history_status.clone());
        let clock = Arc::clone(&clock) as Arc<dyn Clock>;
        async move {
            match history {
                Some((history, status)) => keep(history, status, clock, history_prepared).await,
                None => std::future::pending().await,
            }
        }
    });
    let delivering = {
        let dispatcher = Arc::clone(&dispatcher);
        tokio::spawn(async move {
            let stop = signalled(stopped.clone());
            // Then the account's privileges, checked once the clock is,
            // and the attempt history's schema, when it is on.
            let checked = async {
                let ready = async {
                    access.granted().await;
                    let _ = history_checked.wait_for(|prepared| *prepared).await;
                };
                tokio::select! {
                    () = ready => dispatcher.run(signalled(stopped.clone())).await,
                    () = signalled(stopped.clone()) => {}
                }
            };
            once_measured(&clock, stop, checked).await;
        })
    };

    let adoption_at_stop = task_adoption.clone();
    let mut adoption = tokio::spawn({
        let store = Arc::clone(&store);
        async move {
            match task_adoption {
                Some(adoption) => adopt_php_tasks(store, adoption, adoption_clock).await,
                None => std::future::pending().await,
            }
        }
    });
    let mut outcome = Ok(());
    let mut stop_signal = None;
    tokio::select! {
        received = signals.received() => stop_signal = Some(received),
        checked = &mut checking => {
            outcome = Err(match checked {
                Ok(missing) => {
                    error!(event = "delivery_access_refused", missing = %missing.join(", "),
                           "the database account lacks what delivery needs; stopping");
                    StartError::DeliveryGrants(missing)
                }
                Err(join) => StartError::AccessCheckCrashed(join.to_string()),
            });
        }
        refused = &mut keeping_history => {
            outcome = Err(match refused {
                Ok(err) => {
                    error!(event = "history_refused", error = %err,
                           "the attempt history cannot be kept; stopping");
                    StartError::History(err)
                }
                Err(join) => StartError::HistoryCrashed(join.to_string()),
            });
        }
        ended = &mut adoption => {
            outcome = Err(match ended {
                Ok(missing) => {
                    error!(event = "php_task_adoption_refused", missing = %missing.join(", "),
                           "GORGE_WEBHOOK_ADOPT_PHP_TASKS is on but the account lacks these grants; stopping");
                    StartError::AdoptionGrants(missing)
                }
                Err(join) => {
                    error!(event = "php_task_adoption_crashed", error = %join);
                    StartError::AdoptionCrashed(join.to_string())
                }
            });
        }
    }
    info!(
        event = "shutdown_requested",
        signal = stop_signal.unwrap_or("none"),
        grace_secs = config.shutdown_grace.as_secs()
    );
    let _ = stop.send(true);
    schema.abort();
    checking.abort();
    keeping_history.abort();
    php_watch.abort();
    measuring.abort();
    if let Some(following) = &following {
        following.abort();
    }
    // The kept hook locks stay held until the deliveries drained; then
    // they are freed and the unfinished tasks handed back (below).
    adoption.abort();
    match tokio::time::timeout(config.shutdown_grace, delivering).await {
        Ok(_) => info!(event = "deliveries_drained"),
        Err(_) => warn!(
            event = "shutdown_grace_exceeded",
            in_flight = dispatcher.metrics().snapshot().in_flight,
            "in-flight deliveries abandoned; their rows are delivered again after the lease"
        ),
    }
    // Only now: watchers see the results of the deliveries drained above.
    events.close();
    // The finished tasks are archived and the others handed back while
    // the diagnostics connections finish: after the deliveries' results,
    // within their bound. Not when the daemon stops for want of grants:
    // the account cannot.
    let archive = async {
        if let (Some(adoption), true) = (&adoption_at_stop, outcome.is_ok()) {
            hand_back_at_stop(&store, adoption).await;
        }
    };
    let (_, ()) = tokio::join!(server, archive);
    // The attempts of the deliveries drained above, still waiting for the
    // history's writer, within the pools' bound.
    if let Some(history) = &history {
        if !history.queue().settled(POOL_CLOSE_BOUND).await {
            warn!(
                event = "history_unsettled",
                pending = history.queue().pending(),
                "attempts still waiting for the history at the stop are not kept"
            );
        }
        if let Ok(Err(err)) = tokio::time::timeout(POOL_CLOSE_BOUND, history.disconnect()).await {
            warn!(event = "pool_close_failed", pool = "history", error = %err);
        }
    }
    let (delivery, api) = tokio::join!(
        store.disconnect_within(POOL_CLOSE_BOUND),
        api_store.disconnect_within(POOL_CLOSE_BOUND)
    );
    for (pool, closed) in [("delivery", delivery), ("api", api)] {
        if let Err(err) = closed {
            warn!(event = "pool_close_failed", pool, error = %err);
        }
    }
    info!(event = "stopped");
    outcome
}

/// This host's name, for the owner strings of adopted tasks (Phorge's
/// taskmasters put theirs in theirs too).
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// Whether the diagnostics API answers other hosts without a token.
fn open_to_others(listen: std::net::SocketAddr, token: &str) -> bool {
    token.is_empty() && !listen.ip().is_loopback()
}

/// Completes once the watch flips to true (or its sender is gone).
async fn signalled(mut stopped: watch::Receiver<bool>) {
    let _ = stopped.wait_for(|stop| *stop).await;
}

/// Waits for the database, then checks Phorge's schema once: missing
/// columns are an error in the log; a missing `key_status` a warning.
async fn check_schema_when_ready(store: Arc<MysqlStore>) {
    loop {
        match store.ready().await {
            Ok(()) => break,
            Err(reason) => {
                info!(event = "database_not_ready", reason = %reason, "waiting for the database: delivery starts once it is ready");
                tokio::time::sleep(SCHEMA_RETRY).await;
            }
        }
    }
    match store.check_schema().await {
        Ok(warnings) => {
            for warning in warnings {
                warn!(event = "schema_warning", "{warning}");
            }
        }
        Err(err) => error!(event = "schema_mismatch", error = %err),
    }
}

/// The signal handlers, installed before the listener opens: once
/// `/healthz` answers, SIGTERM, SIGINT and SIGQUIT mean a graceful stop and
/// SIGHUP is ignored (installed lazily, a signal arriving in between would
/// kill the process outright). SIGQUIT stops gracefully too: a supervisor
/// or operator sending it must not cause resends, and there is no dump of
/// the tasks to give. SIGHUP asks for a reload, and there is nothing to
/// reload: the settings are read from the environment at start only, and
/// the log goes to stderr, with no file to reopen.
struct ShutdownSignals {
    terminate: Option<Signal>,
    interrupt: Option<Signal>,
    quit: Option<Signal>,
    hangup: Option<Signal>,
}

impl ShutdownSignals {
    fn install() -> Self {
        let install = |kind: SignalKind, name: &'static str| match signal(kind) {
            Ok(stream) => Some(stream),
            Err(err) => {
                error!(event = "signal_handler_failed", signal = name, error = %err);
                None
            }
        };
        Self {
            terminate: install(SignalKind::terminate(), "SIGTERM"),
            interrupt: install(SignalKind::interrupt(), "SIGINT"),
            quit: install(SignalKind::quit(), "SIGQUIT"),
            hangup: install(SignalKind::hangup(), "SIGHUP"),
        }
    }

    /// Completes on the first SIGTERM, SIGINT or SIGQUIT, naming it; says
    /// in the log that each SIGHUP before it is ignored.
    async fn received(mut self) -> &'static str {
        /// The stream's next signal; never, once it has ended.
        async fn next(stream: &mut Option<Signal>) {
            let ended = match stream.as_mut() {
                Some(stream) => stream.recv().await.is_none(),
                None => true,
            };
            if ended {
                *stream = None;
                std::future::pending::<()>().await;
            }
        }
        loop {
            tokio::select! {
                () = next(&mut self.terminate) => return "SIGTERM",
                () = next(&mut self.interrupt) => return "SIGINT",
                () = next(&mut self.quit) => return "SIGQUIT",
                () = next(&mut self.hangup) => info!(
                    event = "sighup_ignored",
                    "settings are read from the environment at start only and the log goes to \
                     stderr: nothing to reload or reopen; restart the daemon to apply new settings"
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_a_tokenless_api_beyond_loopback_is_open_to_others() {
        let addr = |text: &str| text.parse().expect("an address");
        assert!(super::open_to_others(addr("[::]:8160"), ""));
        assert!(super::open_to_others(addr("10.1.2.3:8160"), ""));
        assert!(!super::open_to_others(addr("[::]:8160"), "s3cret"));
        assert!(!super::open_to_others(addr("127.0.0.1:8160"), ""));
        assert!(!super::open_to_others(addr("[::1]:8160"), ""));
    }
}
