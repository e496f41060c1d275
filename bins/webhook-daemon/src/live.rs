//! The live view: the dispatcher's events (`webhook_core::events`) fanned
//! out to `GET /api/webhook/events` streams as Server-Sent Events.
//!
//! [`EventHub`] is the dispatcher's [`EventSink`]: `emit` numbers the event
//! and puts it in a bounded broadcast ring, and never waits for a watcher.
//! Each stream reads the ring at its own pace (the socket's); one that
//! falls more than [`BUFFER`] events behind loses the oldest and is told
//! how many with an `event: dropped` message. The number of streams open at
//! once is capped, and every stream ends when the hub is closed at
//! shutdown.
//!
//! The SSE text carries only [`Event::to_json`], which never holds a URI,
//! a key, a body or SQL.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;
use webhook_core::{Event, EventSink};

/// How many events a stream may fall behind before it loses the oldest.
pub const BUFFER: usize = 1024;

/// A comment is sent after this long without a message, so proxies and
/// clients can tell an idle stream from a dead one.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The first bytes of every stream (a comment): they put the response
/// head on the wire at once.
const OPENING: &[u8] = b": connected\n\n";

/// The comment sent on an idle stream.
const KEEP_ALIVE_COMMENT: &[u8] = b": keep-alive\n\n";

/// Refused: as many streams as allowed are open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{max} event streams are open already")]
pub struct TooManyStreams {
    /// The cap.
    pub max: usize,
}

/// An event and its running number.
#[derive(Debug)]
struct Numbered {
    id: u64,
    event: Event,
}

/// The fan-out from the dispatcher to the open streams.
#[derive(Debug)]
pub struct EventHub {
    sender: broadcast::Sender<Arc<Numbered>>,
    /// The last id handed out; held while sending, so ids reach the ring
    /// in order.
    last_id: Mutex<u64>,
    open: Arc<AtomicUsize>,
    max_streams: usize,
    closed: watch::Sender<bool>,
    keep_alive: Duration,
}

impl EventHub {
    /// A hub allowing `max_streams` streams at once (at least one).
    pub fn new(max_streams: usize) -> Self {
        let (sender, _) = broadcast::channel(BUFFER);
        let (closed, _) = watch::channel(false);
        Self {
            sender,
            last_id: Mutex::new(0),
            open: Arc::new(AtomicUsize::new(0)),
            max_streams: max_streams.max(1),
            closed,
            keep_alive: KEEP_ALIVE,
        }
    }

    /// Sends keep-alive comments after `every` of silence instead of
    /// [`KEEP_ALIVE`] (for tests).
    #[cfg(test)]
    pub fn with_keep_alive(mut self, every: Duration) -> Self {
        self.keep_alive = every;
        self
    }

    /// Opens a stream of the events emitted from now on, unless the cap is
    /// reached.
    pub fn subscribe(&self) -> Result<Subscription, TooManyStreams> {
        let max = self.max_streams;
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < max).then_some(open + 1)
            })
            .map_err(|_| TooManyStreams { max })?;
        Ok(Subscription {
            receiver: self.sender.subscribe(),
            closed: self.closed.subscribe(),
            keep_alive: self.keep_alive,
            quiet_since: Instant::now(),
            opened: false,
            ended: false,
            _slot: Slot(Arc::clone(&self.open)),
        })
    }

    /// Streams open now.
    pub fn open_streams(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Ends every stream (after the events it already holds) and any
    /// opened later: the daemon is stopping.
    pub fn close(&self) {
        self.closed.send_replace(true);
    }
}

impl EventSink for EventHub {
    fn emit(&self, event: Event) {
        let mut last_id = self.last_id.lock().unwrap_or_else(PoisonError::into_inner);
        *last_id += 1;
        // Never waits: with no stream open the event is simply not kept,
        // and a full ring overwrites its oldest entry.
        let _ = self.sender.send(Arc::new(Numbered {
            id: *last_id,
            event,
        }));
    }
}

/// Holds one of the hub's stream slots until dropped.
#[derive(Debug)]
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One open stream: its place in the ring, and its slot.
#[derive(Debug)]
pub struct Subscription {
    receiver: broadcast::Receiver<Arc<Numbered>>,
    closed: watch::Receiver<bool>,
    keep_alive: Duration,
    quiet_since: Instant,
    opened: bool,
    ended: bool,
    _slot: Slot,
}

impl Subscription {
    /// The next piece of SSE text: the opening comment, then one message
    /// per event (or per gap), keep-alive comments while idle. `None` once
    /// the hub is closed and the events already held are out.
    pub async fn next_chunk(&mut self) -> Option<Bytes> {
        if self.ended {
            return None;
        }
        if !self.opened {
            self.opened = true;
            self.quiet_since = Instant::now();
            return Some(Bytes::from_static(OPENING));
        }
        let keep_alive_at = self.quiet_since + self.keep_alive;
        let chunk = tokio::select! {
            // Events first: what was emitted before the close still goes out.
            biased;
            received = self.receiver.recv() => match received {
                Ok(numbered) => Some(encode(numbered.id, &numbered.event)),
                Err(broadcast::error::RecvError::Lagged(missed)) => Some(dropped(missed)),
                Err(broadcast::error::RecvError::Closed) => None,
            },
            _ = self.closed.wait_for(|closed| *closed) => None,
            () = tokio::time::sleep_until(keep_alive_at) => {
                Some(Bytes::from_static(KEEP_ALIVE_COMMENT))
            }
        };
        self.quiet_since = Instant::now();
        if chunk.is_none() {
            self.ended = true;
        }
        chunk
    }

    /// The stream's chunks, for a response body.
    pub fn into_stream(self) -> impl Stream<Item = Bytes> + Send + 'static {
        futures::stream::unfold(self, |mut subscription| async move {
            let chunk = subscription.next_chunk().await?;
            Some((chunk, subscription))
        })
    }
}

/// One SSE message: `event:` the type, `id:` the running number, `data:`
/// the event's JSON on one line.
pub fn encode(id: u64, event: &Event) -> Bytes {
    message(event.kind.name(), Some(id), &event.to_json().to_string())
}

/// The message telling a stream that `missed` events were dropped because
/// it fell behind.
pub fn dropped(missed: u64) -> Bytes {
    let data = serde_json::json!({"type": "dropped", "dropped": missed}).to_string();
    message("dropped", None, &data)
}

fn message(event: &str, id: Option<u64>, data: &str) -> Bytes {
    let mut text = format!("event: {event}\n");
    if let Some(id) = id {
        let _ = writeln!(text, "id: {id}");
    }
    // Compact JSON has no line break; split anyway, so a line break could
    // never end the message early.
    for line in data.split('\n') {
        let _ = writeln!(text, "data: {line}");
    }
    text.push('\n');
    Bytes::from(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;
    use webhook_core::memory_store::{MemoryStore, NewRequest};
    use webhook_core::windows::{Settings, Windows};
    use webhook_core::{
        DeliveryResult, Dispatcher, ErrorCode, EventKind, Hook, OutboundRequest, RequestStatus,
        Resolution, Target, Transport,
    };

    use crate::clock::SystemClock;

    /// A bound on anything expected to finish; only a hang comes near it.
    const DEADLINE: Duration = Duration::from_secs(60);

    fn event(request: &str, kind: EventKind) -> Event {
        Event {
            at: 1_700_000_000,
            request: Some(request.to_owned()),
            hook: Some("PHID-HWBH-a".to_owned()),
            kind,
        }
    }

    fn text(chunk: Option<Bytes>) -> String {
        let chunk = chunk.expect("a chunk");
        String::from_utf8(chunk.to_vec()).expect("SSE text is UTF-8")
    }

    async fn next(subscription: &mut Subscription) -> String {
        let chunk = tokio::time::timeout(DEADLINE, subscription.next_chunk())
            .await
            .expect("a chunk in time");
        text(chunk)
    }

    #[test]
    fn a_sequence_of_events_is_encoded_exactly() {
        let events = [
            event("PHID-HWBR-1", EventKind::ClaimWon),
            event(
                "PHID-HWBR-1",
                EventKind::Delivered {
                    status: 200,
                    latency_ms: 12,
                },
            ),
            event(
                "PHID-HWBR-2",
                EventKind::AttemptFailed {
                    error_type: "timeout",
                    error_code: ErrorCode::Number(28),
                    will_retry: true,
                    latency_ms: 2000,
                },
            ),
            Event {
                at: 1_700_000_001,
                request: None,
                hook: None,
                kind: EventKind::SilentHold { on: true },
            },
        ];
        let stream: String = events
            .iter()
            .zip(1..)
            .map(|(event, id)| text(Some(encode(id, event))))
            .collect();
        assert_eq!(
            stream,
            "event: claim_won\nid: 1\n\
             data: {\"type\":\"claim_won\",\"at\":1700000000,\"request\":\"PHID-HWBR-1\",\"hook\":\"PHID-HWBH-a\"}\n\n\
             event: delivered\nid: 2\n\
             data: {\"type\":\"delivered\",\"at\":1700000000,\"request\":\"PHID-HWBR-1\",\"hook\":\"PHID-HWBH-a\",\"status\":200,\"latencyMs\":12}\n\n\
             event: attempt_failed\nid: 3\n\
             data: {\"type\":\"attempt_failed\",\"at\":1700000000,\"request\":\"PHID-HWBR-2\",\"hook\":\"PHID-HWBH-a\",\"errorType\":\"timeout\",\"errorCode\":28,\"willRetry\":true,\"latencyMs\":2000}\n\n\
             event: silent_hold\nid: 4\n\
             data: {\"type\":\"silent_hold\",\"at\":1700000001,\"request\":null,\"hook\":null,\"held\":true}\n\n"
        );
        assert_eq!(
            text(Some(dropped(7))),
            "event: dropped\ndata: {\"type\":\"dropped\",\"dropped\":7}\n\n"
        );
        assert_eq!(
            text(Some(message("x", None, "a\nb"))),
            "event: x\ndata: a\ndata: b\n\n"
        );
    }

    #[tokio::test]
    async fn streams_open_with_a_comment_and_number_events_in_order() {
        let hub = EventHub::new(2);
        let mut first = hub.subscribe().expect("a slot");
        assert_eq!(next(&mut first).await, ": connected\n\n");
        hub.emit(event("PHID-HWBR-1", EventKind::ClaimWon));
        hub.emit(event("PHID-HWBR-1", EventKind::ClaimLost));
        let mut second = hub.subscribe().expect("a slot");
        hub.emit(event("PHID-HWBR-2", EventKind::ClaimWon));
        assert!(next(&mut first)
            .await
            .starts_with("event: claim_won\nid: 1\n"));
        assert!(next(&mut first)
            .await
            .starts_with("event: claim_lost\nid: 2\n"));
        assert!(next(&mut first)
            .await
            .starts_with("event: claim_won\nid: 3\n"));
        // A later stream starts with the events emitted after it opened.
        assert_eq!(next(&mut second).await, ": connected\n\n");
        assert!(next(&mut second)
            .await
            .starts_with("event: claim_won\nid: 3\n"));
    }

    #[tokio::test]
    async fn the_cap_counts_open_streams_only() {
        let hub = EventHub::new(2);
        let a = hub.subscribe().expect("first");
        let _b = hub.subscribe().expect("second");
        assert_eq!(hub.subscribe().err(), Some(TooManyStreams { max: 2 }));
        assert_eq!(hub.open_streams(), 2);
        drop(a);
        assert_eq!(hub.open_streams(), 1);
        let _c = hub.subscribe().expect("a slot again");
        assert_eq!(EventHub::new(0).max_streams, 1);
    }

    #[tokio::test]
    async fn idle_streams_get_keep_alive_comments() {
        let hub = EventHub::new(1).with_keep_alive(Duration::from_millis(20));
        let mut stream = hub.subscribe().expect("a slot");
        assert_eq!(next(&mut stream).await, ": connected\n\n");
        assert_eq!(next(&mut stream).await, ": keep-alive\n\n");
        assert_eq!(next(&mut stream).await, ": keep-alive\n\n");
    }

    #[tokio::test]
    async fn closing_ends_streams_after_what_they_hold() {
        let hub = EventHub::new(2);
        let mut stream = hub.subscribe().expect("a slot");
        assert_eq!(next(&mut stream).await, ": connected\n\n");
        hub.emit(event("PHID-HWBR-1", EventKind::ClaimWon));
        hub.close();
        assert!(next(&mut stream).await.starts_with("event: claim_won\n"));
        let end = tokio::time::timeout(DEADLINE, stream.next_chunk())
            .await
            .expect("the end in time");
        assert_eq!(end, None);
        assert_eq!(stream.next_chunk().await, None);
        // A stream opened after the close ends after its opening comment.
        let mut late = hub.subscribe().expect("a slot");
        assert_eq!(next(&mut late).await, ": connected\n\n");
        assert_eq!(late.next_chunk().await, None);
    }

    #[test]
    fn emitting_never_waits_for_a_stalled_stream() {
        let hub = Arc::new(EventHub::new(1));
        let stalled = hub.subscribe().expect("a slot");
        let (done, finished) = std::sync::mpsc::channel();
        let emitter = {
            let hub = Arc::clone(&hub);
            std::thread::spawn(move || {
                for n in 0..100_000 {
                    hub.emit(event(&format!("PHID-HWBR-{n}"), EventKind::ClaimWon));
                }
                let _ = done.send(());
            })
        };
        finished
            .recv_timeout(DEADLINE)
            .expect("100000 emits finish although nobody reads");
        emitter.join().expect("emitter thread");
        drop(stalled);
    }

    /// Answers every delivery with 200 at once.
    struct Accepting;

    #[async_trait]
    impl Transport for Accepting {
        async fn resolve(&self, uri: &str) -> Resolution {
            Resolution::Ready(Target {
                uri: uri.to_owned(),
                addrs: Vec::new(),
            })
        }

        async fn deliver(&self, _request: OutboundRequest) -> DeliveryResult {
            DeliveryResult::Response { status: 200 }
        }
    }

    /// The dispatcher delivers a backlog while a stream reads nothing; the
    /// stream, read afterwards, is told what it missed and then gets the
    /// newest events in order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stalled_stream_does_not_slow_the_dispatcher() {
        const ROWS: usize = 1_500;
        let hub = Arc::new(EventHub::new(2));
        let mut stalled = hub.subscribe().expect("a slot");
        let clock = Arc::new(SystemClock::new());
        let store = MemoryStore::new(clock.clone());
        store.put_hook(Hook {
            phid: "PHID-HWBH-a".into(),
            name: "a".into(),
            uri: "http://receiver.invalid/hook".into(),
            status: "enabled".into(),
            hmac_key: "abcdefghijklmnopqrstuvwxyz234567".into(),
        });
        for _ in 0..ROWS {
            store.insert_request(NewRequest::queued(
                "PHID-HWBH-a",
                r#"{"retry":"never","triggerPHIDs":[],"transactionPHIDs":[]}"#,
            ));
        }
        let windows = Windows::try_new(Settings {
            poll_interval: Duration::from_millis(10),
            max_concurrent: 4,
            ..Settings::default()
        })
        .expect("valid windows");
        let dispatcher =
            Dispatcher::new(Arc::new(store.clone()), Arc::new(Accepting), clock, windows)
                .with_events(Arc::clone(&hub) as Arc<dyn EventSink>);
        let (stop, stopped) = watch::channel(false);
        let delivered = async {
            let until = Instant::now() + DEADLINE;
            while store
                .rows()
                .iter()
                .any(|row| row.status != RequestStatus::Sent)
            {
                assert!(Instant::now() < until, "the backlog was not delivered");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            stop.send_replace(true);
        };
        let mut stopped = stopped;
        tokio::join!(
            dispatcher.run(async move {
                let _ = stopped.wait_for(|s| *s).await;
            }),
            delivered
        );
        // Two events a row (claim_won, delivered): far more than the ring.
        assert_eq!(next(&mut stalled).await, ": connected\n\n");
        let gap = next(&mut stalled).await;
        let missed: u64 = gap
            .strip_prefix("event: dropped\ndata: {\"type\":\"dropped\",\"dropped\":")
            .and_then(|rest| rest.strip_suffix("}\n\n"))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("expected a dropped message, got {gap:?}"));
        let emitted = (2 * ROWS) as u64;
        assert_eq!(missed, emitted - BUFFER as u64, "{gap}");
        let mut previous = missed;
        for _ in 0..BUFFER {
            let chunk = next(&mut stalled).await;
            let id: u64 = chunk
                .lines()
                .find_map(|line| line.strip_prefix("id: "))
                .and_then(|id| id.parse().ok())
                .unwrap_or_else(|| panic!("no id in {chunk:?}"));
            assert_eq!(id, previous + 1, "ids in order without a gap");
            previous = id;
        }
        assert_eq!(previous, emitted);
    }
}
