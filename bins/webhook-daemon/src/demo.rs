//! `webhook-daemon demo`: the real dispatcher and the real hyper transport
//! on the in-memory store, against a receiver built in here, with a few
//! hooks that show what the daemon does — deliveries with verified
//! signatures, retries, a hook error, and a breaker opening and closing.
//! Needs no database; exits by itself.
//!
//! It also serves the diagnostics API, without a token, on loopback, so
//! `webhook-admin watch` can follow the dispatcher's live events; with
//! `--listen` it waits a little for such a watcher before it starts.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::watch;
use webhook_core::memory_store::{MemoryStore, NewRequest};
use webhook_core::windows::{Settings, Windows};
use webhook_core::{verify, Dispatcher, EventSink, Hook, QueueCounts, RequestStatus};
use webhook_transport_hyper::{HyperTransport, TransportConfig};

use crate::api::{Api, Readiness, ServiceToken};
use crate::app::log_windows;
use crate::clock::SystemClock;
use crate::config::EVENT_STREAMS;
use crate::live::EventHub;
use crate::server;

/// `println!` panics when stdout is closed (e.g. piped into `head`); the
/// demo just stops talking instead.
macro_rules! say {
    ($($arg:tt)*) => {
        crate::logging::print_out(&format!("{}\n", format_args!($($arg)*)))
    };
}

const DEADLINE: Duration = Duration::from_secs(50);
/// How long `demo --listen` waits for a watcher before it starts.
const WATCHER_WAIT: Duration = Duration::from_secs(20);
const SIGNATURE_HEADER: &str = "x-phabricator-webhook-signature";

struct DemoHook {
    phid: &'static str,
    name: &'static str,
    path: &'static str,
    status: &'static str,
    key: &'static str,
}

const HOOKS: [DemoHook; 4] = [
    DemoHook {
        phid: "PHID-HWBH-healthyaaaaaaaaaaaaa",
        name: "healthy",
        path: "/healthy",
        status: "enabled",
        key: "healthyhealthyhealthyhealthy2345",
    },
    DemoHook {
        phid: "PHID-HWBH-flakybbbbbbbbbbbbbbb",
        name: "flaky (two 500s, then 200)",
        path: "/flaky",
        status: "firehose",
        key: "flakyflakyflakyflakyflakyflaky23",
    },
    DemoHook {
        phid: "PHID-HWBH-brokenccccccccccccccc",
        name: "broken until repaired",
        path: "/broken",
        status: "enabled",
        key: "brokenbrokenbrokenbrokenbroken23",
    },
    DemoHook {
        phid: "PHID-HWBH-disableddddddddddddd",
        name: "disabled",
        path: "/disabled",
        status: "disabled",
        key: "disableddisableddisableddisabled",
    },
];

/// What the built-in receiver does and has seen.
struct Receiver {
    keys: HashMap<&'static str, &'static str>,
    flaky_calls: AtomicU32,
    broken_repaired: AtomicBool,
    started: Instant,
}

impl Receiver {
    async fn answer(&self, request: Request<Incoming>) -> Response<Full<Bytes>> {
        let path = request.uri().path().to_owned();
        let signature = request
            .headers()
            .get(SIGNATURE_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let body = match request.into_body().collect().await {
            Ok(body) => body.to_bytes(),
            Err(_) => Bytes::new(),
        };
        let key = self.keys.get(path.as_str()).copied().unwrap_or("");
        let verified = verify(key.as_bytes(), &body, &signature);
        let status = match path.as_str() {
            "/flaky" if self.flaky_calls.fetch_add(1, Ordering::Relaxed) < 2 => 500,
            "/broken" if !self.broken_repaired.load(Ordering::Relaxed) => 500,
            _ => 200,
        };
        let object = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["object"]["phid"].as_str().map(str::to_owned))
            .unwrap_or_default();
        say!(
            "[{:>5.1}s] receiver {path:<9} got {} bytes for {object}, signature {} -> answers {status}",
            self.started.elapsed().as_secs_f64(),
            body.len(),
            if verified { "verified" } else { "WRONG" },
        );
        let mut response = Response::new(Full::new(Bytes::from_static(b"ok")));
        *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
        response
    }
}

async fn serve_receiver(listener: TcpListener, receiver: Arc<Receiver>) {
    let builder = auto::Builder::new(TokioExecutor::new());
    while let Ok((stream, _)) = listener.accept().await {
        let receiver = Arc::clone(&receiver);
        let service = service_fn(move |request| {
            let receiver = Arc::clone(&receiver);
            async move { Ok::<_, std::convert::Infallible>(receiver.answer(request).await) }
        });
        let connection = builder
            .serve_connection(TokioIo::new(stream), service)
            .into_owned();
        tokio::spawn(connection);
    }
}

/// The in-memory queue is always there.
struct AlwaysReady;

#[async_trait]
impl Readiness for AlwaysReady {
    async fn check(&self) -> Result<(), String> {
        Ok(())
    }
}

fn settings() -> Settings {
    Settings {
        poll_interval: Duration::from_millis(200),
        wake_probe: Duration::from_millis(50),
        delivery_timeout: Duration::from_secs(2),
        max_concurrent: 4,
        breaker_window_secs: 8,
        breaker_threshold: 3,
        retry_backoff_secs: 2,
        claim_lease_secs: 4,
        retry_after_max_secs: 3600,
        batch_size: 0,
    }
}

/// Runs the demo, serving the diagnostics API on `listen` (a free loopback
/// port when `None`); returns an error message when something went wrong.
pub async fn run(listen: Option<SocketAddr>) -> Result<(), String> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("cannot listen on loopback: {e}"))?;
    let addr: SocketAddr = listener
        .local_addr()
        .map_err(|e| format!("receiver address: {e}"))?;
    let api_addr = listen.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
    let api_listener = TcpListener::bind(api_addr)
        .await
        .map_err(|e| format!("cannot listen on {api_addr}: {e}"))?;
    let api_addr = api_listener
        .local_addr()
        .map_err(|e| format!("diagnostics address: {e}"))?;

    let clock = Arc::new(SystemClock::new());
    let store = MemoryStore::new(clock.clone());
    seed(&store, addr);
    let windows = Windows::try_new(settings()).map_err(|e| e.to_string())?;
    say!("gorge-webhook demo: in-memory queue, real dispatcher, real HTTP to a receiver on {addr}");
    say!(
        "live events on http://{api_addr}/api/webhook/events; watch them with: \
         webhook-admin watch --url http://{api_addr}\n"
    );
    log_windows(&windows);
    let transport = TransportConfig {
        outbound_allow: vec!["127.0.0.0/8".parse().map_err(|e| format!("{e}"))?],
        ..TransportConfig::default()
    }
    .check()
    .map_err(|e| e.to_string())?;
    let transport = HyperTransport::new(transport).map_err(|e| e.to_string())?;
    let events = Arc::new(EventHub::new(EVENT_STREAMS.default_value()));
    let dispatcher = Arc::new(
        Dispatcher::new(Arc::new(store.clone()), Arc::new(transport), clock, windows)
            .with_objects(Arc::new(store.clone()))
            .with_events(Arc::clone(&events) as Arc<dyn EventSink>),
    );
    let api = Arc::new(
        Api::new(
            Arc::new(store.clone()),
            Arc::new(AlwaysReady),
            dispatcher.metrics(),
            ServiceToken::new(""),
        )
        .with_events(Arc::clone(&events))
        .with_pauses(dispatcher.pauses()),
    );
    let (api_stop, mut api_stopped) = watch::channel(false);
    let api_server = tokio::spawn(server::serve(api_listener, api, async move {
        let _ = api_stopped.wait_for(|s| *s).await;
    }));
    if listen.is_some() {
        wait_for_watcher(&events).await;
    }
    let receiver = Arc::new(Receiver {
        keys: HOOKS.iter().map(|h| (h.path, h.key)).collect(),
        flaky_calls: AtomicU32::new(0),
        broken_repaired: AtomicBool::new(false),
        started: Instant::now(),
    });
    tokio::spawn(serve_receiver(listener, Arc::clone(&receiver)));

    let (stop, mut stopped) = watch::channel(false);
    let running = {
        let dispatcher = Arc::clone(&dispatcher);
        tokio::spawn(async move {
            dispatcher
                .run(async move {
                    let _ = stopped.wait_for(|s| *s).await;
                })
                .await;
        })
    };

    let outcome = watch_progress(&store, &dispatcher, &receiver).await;
    let _ = stop.send(true);
    let _ = running.await;
    // Watchers' streams end cleanly, after the last events.
    events.close();
    api_stop.send_replace(true);
    let _ = api_server.await;
    print_rows(&store).await;
    say!(
        "\nTo deliver for a real Phorge, follow the README's \"Run it against Phorge\": install \
         (cargo xtask dist), the database account (deploy/mariadb-init/10-accounts.sh), the \
         settings, then the switch-over, PHP delivery off first. `webhook-daemon --help` lists \
         every setting."
    );
    outcome
}

/// Gives a watcher (`webhook-admin watch`) up to [`WATCHER_WAIT`] to
/// connect, so it sees the whole story.
async fn wait_for_watcher(events: &EventHub) {
    say!(
        "waiting up to {}s for a watcher before delivering ...",
        WATCHER_WAIT.as_secs()
    );
    let until = Instant::now() + WATCHER_WAIT;
    while events.open_streams() == 0 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if events.open_streams() > 0 {
        say!("a watcher is connected; delivering\n");
    } else {
        say!("no watcher connected; delivering anyway\n");
    }
}

fn seed(store: &MemoryStore, addr: SocketAddr) {
    for hook in &HOOKS {
        store.put_hook(Hook {
            phid: hook.phid.to_owned(),
            name: hook.name.to_owned(),
            uri: format!("http://{addr}{}", hook.path),
            status: hook.status.to_owned(),
            hmac_key: hook.key.to_owned(),
        });
    }
    let request = |hook: &DemoHook, n: usize| NewRequest {
        object_phid: format!("PHID-TASK-demo{n:016}"),
        ..NewRequest::queued(
            hook.phid,
            &format!(
                r#"{{"retry":"forever","transactionPHIDs":{{"PHID-XACT-TASK-{n:015}":"PHID-XACT-TASK-{n:015}"}},"triggerPHIDs":["PHID-HRUL-demo{n:016}"],"silent":false,"secure":false}}"#
            ),
        )
    };
    let mut n = 0;
    for (hook, rows) in HOOKS.iter().zip([4, 1, 5, 1]) {
        for _ in 0..rows {
            n += 1;
            let request = request(hook, n);
            // The edited task and its transaction, as Maniphest keeps them.
            store.add_object(&request.object_phid, &[&format!("PHID-XACT-TASK-{n:015}")]);
            store.insert_request(request);
        }
    }
}

/// Waits until the story has played out: every row final and the broken
/// hook's breaker has opened and closed again.
async fn watch_progress(
    store: &MemoryStore,
    dispatcher: &Dispatcher,
    receiver: &Receiver,
) -> Result<(), String> {
    let started = Instant::now();
    let mut breaker_opened = false;
    loop {
        let metrics = dispatcher.metrics().snapshot();
        if metrics.breaker_open_hooks > 0 && !breaker_opened {
            breaker_opened = true;
            say!(
                "[{:>5.1}s] demo: the broken hook's breaker is open; repairing its receiver \
                 (delivery resumes once failures slide out of the {}s window)",
                started.elapsed().as_secs_f64(),
                settings().breaker_window_secs
            );
            receiver.broken_repaired.store(true, Ordering::Relaxed);
        }
        let all_final = store
            .rows()
            .iter()
            .all(|r| r.status != RequestStatus::Queued);
        if all_final && breaker_opened && metrics.breaker_open_hooks == 0 {
            return Ok(());
        }
        if started.elapsed() > DEADLINE {
            return Err("the demo did not finish in time".to_owned());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn print_rows(store: &MemoryStore) {
    say!("\nFinal rows (what Phorge's UI would show):\n");
    say!(
        "  {:>3}  {:<28} {:<7} {:<5} {:<8} errorCode",
        "id",
        "hook",
        "status",
        "last",
        "errorType"
    );
    let names: HashMap<&str, &str> = HOOKS.iter().map(|h| (h.phid, h.name)).collect();
    for row in store.rows() {
        let props: serde_json::Value =
            serde_json::from_str(&row.properties).unwrap_or(serde_json::Value::Null);
        say!(
            "  {:>3}  {:<28} {:<7} {:<5} {:<8} {}",
            row.id,
            names.get(row.webhook_phid.as_str()).copied().unwrap_or("?"),
            row.status,
            row.last_request_result,
            props["errorType"].as_str().unwrap_or(""),
            props["errorCode"]
        );
    }
    if let Ok(stats) = store.stats().await {
        say!(
            "\n  queued {}  sent {}  failed {}",
            stats.queued,
            stats.sent,
            stats.failed
        );
    }
}
