//! [`HistoryQueue`]: the [`AttemptLog`] the dispatcher records into, and
//! the writer that empties it into the attempt table.
//!
//! `record` appends to a bounded queue in memory and returns: it never
//! waits and never fails (beyond [`PENDING_MAX`] attempts or
//! [`PENDING_BYTES_MAX`] bytes it drops, counted and said once). A queue
//! is made only by [`crate::history::MysqlHistory`], on that history's
//! own pool; its one writer task is started by the first
//! [`crate::MysqlStore`] given the queue. The store's group-commit
//! workers (`crate::batch`) wake it after each batch, once the batch's
//! replies are sent — the core records
//! an attempt before it submits the attempt's write-back, so the batch
//! carrying that write-back wakes the writer for it. When the writer
//! writes is its pacing's to say (`super::pacing`): once delivery pauses,
//! or once the queue is half full or its oldest attempt has waited its
//! bound. A wake that comes while the writer is busy is kept, so nothing
//! queued is stranded; [`HistoryQueue::settled`] has the writer write at
//! once and waits until the queue is empty (a stopping daemon).
//!
//! A round of writing takes what is queued when it starts, [`CHUNK_ROWS`]
//! attempts at a time (what arrives meanwhile waits for the next round),
//! and inserts them in multi-row `INSERT`s of at most [`CHUNK_ROWS`] rows
//! (and about [`CHUNK_BYTES`] of statement), values inlined as digits and
//! hex literals, each bounded by the statement timeout
//! (`crate::session`). An attempt's `number` is one more than the highest
//! on record for its request (one `SELECT … GROUP BY request_phid` per
//! chunk), counting those before it in the chunk; `(request_phid,
//! number)` is unique, so two writers numbering the same request at once
//! cannot both succeed, and the loser numbers again.
//!
//! A chunk that fails is not retried (but for another writer's insert
//! in the way: a number taken, a deadlock), the next chunks still are
//! tried (on a new session when its statement timed out; when no
//! session can be had, the rest of the round is dropped at once): its
//! attempts are dropped and counted ([`HistoryTotals`]), the failure is
//! logged once per streak
//! (`history_write_failed`, and `history_write_recovered` after it), and
//! [`HistoryQueue::failing`] says why once [`FAILING_AFTER`] rounds in a
//! row failed. Nothing of this reaches a delivery.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use mysql_async::Row;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, info, warn};
use webhook_core::history::{Attempt, AttemptLog};

use super::pacing::{Gathered, Next, Pacing};
use super::{attempt_table, HistoryConfig};
use crate::connector::Connector;
use crate::error::{server_code_of, MysqlError};
use crate::session::Session;

/// Attempts waiting to be written at most; beyond, `record` drops.
pub const PENDING_MAX: usize = 20_000;
/// Bytes of attempts (their bodies, headers and URIs, about) waiting to be
/// written at most; beyond, `record` drops: a writer that falls behind
/// holds at most this much memory, whatever the receivers answer.
pub const PENDING_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Rows in one `INSERT` at most.
pub const CHUNK_ROWS: usize = 256;
/// Statement text of one `INSERT`, about at most (a single larger row
/// goes alone): well below the smallest default `max_allowed_packet`.
pub const CHUNK_BYTES: usize = 2 * 1024 * 1024;
/// The writer's pacing (`super::pacing`): a pause of 250 ms in delivery,
/// 10 s at most, or half the queue. The age bound only serves how soon
/// an attempt can be read while delivery never pauses (the queue's halves
/// bound the memory), and every write it forces lands in the middle of
/// delivery: a 10,000-row burst on two cores drains in 1.4–2.6 s, and
/// with the bound at 2 s the inserts of the slower drains landed in
/// their last half second and cost them about 8 % (docs/performance.md).
const PACING: Pacing = Pacing {
    quiet: Duration::from_millis(250),
    max_wait: Duration::from_secs(10),
    max_rows: PENDING_MAX / 2,
    max_bytes: PENDING_BYTES_MAX / 2,
};
/// Rounds of writing failed in a row before [`HistoryQueue::failing`]
/// reports.
pub const FAILING_AFTER: u32 = 3;
/// Numberings of one chunk tried before its attempts are dropped.
const NUMBERING_TRIES: u32 = 10;
/// The server's duplicate-key error.
const ER_DUP_ENTRY: u16 = 1062;
/// The server's deadlock error (its transaction rolled back).
const ER_LOCK_DEADLOCK: u16 = 1213;
/// How often [`HistoryQueue::settled`] looks.
const SETTLE_POLL: Duration = Duration::from_millis(10);

/// The attempt table's columns as the writer fills them; `number` last.
pub(crate) const INSERT_COLUMNS: &str = "request_id, request_phid, hook_phid, object_phid, \
     instance, claim_version, started_ms, duration_ms, status, error_type, error_code, \
     http_status, body_bytes, body_sha256, signed_with, exchange, number";

/// One row of [`INSERT_COLUMNS`] that the privilege probe inserts under
/// `EXPLAIN` (so nothing).
pub(crate) fn probe_values() -> String {
    "(0, X'', X'', X'', '', NULL, 0, 0, '', '', '', NULL, NULL, NULL, NULL, NULL, 0)".to_owned()
}

/// What became of the attempts recorded so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HistoryTotals {
    /// Handed to `record`.
    pub recorded: u64,
    /// Written to the history.
    pub written: u64,
    /// Dropped: the queue was full, or their write failed.
    pub dropped: u64,
}

/// The attempt history's queue (see the module header). Clones share it.
#[derive(Clone)]
pub struct HistoryQueue {
    inner: Arc<Inner>,
}

struct Inner {
    database: String,
    instance: String,
    body_kept: usize,
    /// The attempts waiting, oldest first.
    pending: Mutex<VecDeque<Queued>>,
    /// About how many bytes `pending` holds ([`size_of`]).
    pending_bytes: AtomicUsize,
    /// Whether the queue's being full was said (until it takes one again).
    full_said: AtomicBool,
    /// Whether the writer is to write without gathering further.
    flush: AtomicBool,
    /// Taken from `pending` by the writer, not yet written or dropped.
    in_flight: AtomicUsize,
    recorded: AtomicU64,
    written: AtomicU64,
    dropped: AtomicU64,
    health: Mutex<Health>,
    /// Wakes the writer; a wake while it is busy is kept (capacity 1).
    wake: mpsc::Sender<()>,
    /// The writer's end, until a store starts the writer.
    wakes: Mutex<Option<mpsc::Receiver<()>>>,
    /// The history's own pool, the writer's.
    connector: Connector,
}

/// An attempt waiting in the queue.
struct Queued {
    /// When it was queued (the pacing's age bound counts from it).
    at: Instant,
    /// Its [`size_of`], counted in `pending_bytes` while it waits.
    size: usize,
    attempt: Attempt,
}

/// The writes' streak of failures.
#[derive(Default)]
struct Health {
    failed_in_row: u32,
    last_error: Option<String>,
    warned: bool,
}

impl fmt::Debug for HistoryQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HistoryQueue")
            .field("database", &self.inner.database)
            .field("instance", &self.inner.instance)
            .field("totals", &self.totals())
            .finish()
    }
}

impl HistoryQueue {
    /// An empty queue for `config`'s database, written on `connector`
    /// (the history's own pool); `instance` names this daemon in each
    /// attempt (`host:pid`). Nothing is written until a store is given it
    /// ([`crate::MysqlStore::with_history`]).
    pub(crate) fn new(
        config: &HistoryConfig,
        instance: impl Into<String>,
        connector: Connector,
    ) -> Self {
        let (wake, wakes) = mpsc::channel(1);
        Self {
            inner: Arc::new(Inner {
                database: config.database.clone(),
                instance: instance.into(),
                body_kept: config.body_kept,
                pending: Mutex::new(VecDeque::new()),
                pending_bytes: AtomicUsize::new(0),
                full_said: AtomicBool::new(false),
                flush: AtomicBool::new(false),
                in_flight: AtomicUsize::new(0),
                recorded: AtomicU64::new(0),
                written: AtomicU64::new(0),
                dropped: AtomicU64::new(0),
                health: Mutex::new(Health::default()),
                wake,
                wakes: Mutex::new(Some(wakes)),
                connector,
            }),
        }
    }

    /// The history's database.
    pub fn database(&self) -> &str {
        &self.inner.database
    }

    /// What became of the attempts recorded so far.
    pub fn totals(&self) -> HistoryTotals {
        HistoryTotals {
            recorded: self.inner.recorded.load(Ordering::Relaxed),
            written: self.inner.written.load(Ordering::Relaxed),
            dropped: self.inner.dropped.load(Ordering::Relaxed),
        }
    }

    /// The last write's error while the last [`FAILING_AFTER`] or more
    /// rounds of writing all failed; `None` once one succeeds.
    pub fn failing(&self) -> Option<String> {
        let health = lock(&self.inner.health);
        (health.failed_in_row >= FAILING_AFTER)
            .then(|| health.last_error.clone())
            .flatten()
    }

    /// Attempts queued and not yet written or dropped.
    pub fn pending(&self) -> usize {
        let pending = lock(&self.inner.pending);
        pending.len() + self.inner.in_flight.load(Ordering::Acquire)
    }

    /// Has the writer write at once, and waits, at most `within`, until
    /// every attempt recorded so far is written or dropped; whether that
    /// happened (not when no store writes the queue). For a stopping
    /// daemon, and tests.
    pub async fn settled(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        loop {
            if self.pending() == 0 {
                return true;
            }
            self.inner.flush.store(true, Ordering::Release);
            self.wake();
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(SETTLE_POLL).await;
        }
    }

    /// Wakes the writer if anything is queued (the batch workers, after
    /// each batch): delivery is at work.
    pub(crate) fn kick(&self) {
        if !lock(&self.inner.pending).is_empty() {
            self.wake();
        }
    }

    fn wake(&self) {
        // Full: a wake is already waiting, which is as good.
        let _ = self.inner.wake.try_send(());
    }

    /// Starts the queue's writer, unless a store started it already.
    /// Call within a tokio runtime.
    pub(crate) fn attach(&self) {
        let Some(wakes) = lock(&self.inner.wakes).take() else {
            return;
        };
        tokio::spawn(write_loop(Arc::downgrade(&self.inner), wakes));
        self.kick();
    }

    /// Clears the streak of failed writes (the schema was just prepared
    /// again): [`Self::failing`] says nothing until writes fail anew.
    pub fn schema_restored(&self) {
        let mut health = lock(&self.inner.health);
        if health.failed_in_row > 0 {
            health.failed_in_row = 0;
            health.last_error = None;
        }
    }
}

impl AttemptLog for HistoryQueue {
    fn record(&self, attempt: Attempt) {
        let inner = &self.inner;
        inner.recorded.fetch_add(1, Ordering::Relaxed);
        let size = size_of(&attempt);
        let queued = {
            let mut pending = lock(&inner.pending);
            let bytes = inner.pending_bytes.load(Ordering::Relaxed);
            if pending.len() >= PENDING_MAX || bytes.saturating_add(size) > PENDING_BYTES_MAX {
                None
            } else {
                pending.push_back(Queued {
                    at: Instant::now(),
                    size,
                    attempt,
                });
                inner.pending_bytes.fetch_add(size, Ordering::Relaxed);
                Some(pending.len())
            }
        };
        match queued {
            None => {
                inner.dropped.fetch_add(1, Ordering::Relaxed);
                if !inner.full_said.swap(true, Ordering::Relaxed) {
                    warn!(
                        event = "history_queue_full",
                        pending_max = PENDING_MAX,
                        pending_bytes_max = PENDING_BYTES_MAX,
                        "attempts are dropped: the history's writer is behind and its queue is \
                         full; deliveries go on"
                    );
                }
            }
            Some(queued) => {
                inner.full_said.store(false, Ordering::Relaxed);
                let bytes = inner.pending_bytes.load(Ordering::Relaxed);
                if queued >= PACING.max_rows || bytes >= PACING.max_bytes {
                    self.wake();
                }
            }
        }
    }
}

/// About how much memory `attempt` holds while it waits: its texts, and
/// a fixed part for the rest.
fn size_of(attempt: &Attempt) -> usize {
    let texts = |pairs: &[(String, String)]| -> usize {
        pairs
            .iter()
            .map(|(name, value)| name.len() + value.len())
            .sum()
    };
    let exchange = attempt.exchange.as_ref().map_or(0, |exchange| {
        exchange.response_body.len()
            + texts(&exchange.request_headers)
            + texts(&exchange.response_headers)
            + exchange.hops.iter().map(|hop| hop.uri.len()).sum::<usize>()
    });
    512 + exchange
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Inner {
    /// What the writer's pacing looks at.
    fn gathered(&self) -> Gathered {
        let pending = lock(&self.pending);
        Gathered {
            rows: pending.len(),
            bytes: self.pending_bytes.load(Ordering::Relaxed),
            waited: pending
                .front()
                .map_or(Duration::ZERO, |oldest| oldest.at.elapsed()),
            flush: self.flush.load(Ordering::Acquire),
        }
    }

    /// The first `most` attempts queued (all there are, when fewer),
    /// counted in flight.
    fn take(&self, most: usize) -> Vec<Attempt> {
        let mut pending = lock(&self.pending);
        let count = most.min(pending.len());
        self.in_flight.fetch_add(count, Ordering::AcqRel);
        let mut bytes = 0usize;
        let taken: Vec<Attempt> = pending
            .drain(..count)
            .map(|queued| {
                bytes += queued.size;
                queued.attempt
            })
            .collect();
        let _ = self
            .pending_bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                Some(held.saturating_sub(bytes))
            });
        taken
    }

    /// `taken` attempts, `written` of them, are out of flight.
    fn settle(&self, taken: usize, written: u64) {
        let taken_count = u64::try_from(taken).unwrap_or(u64::MAX);
        self.written.fetch_add(written, Ordering::Relaxed);
        self.dropped
            .fetch_add(taken_count.saturating_sub(written), Ordering::Relaxed);
        self.in_flight.fetch_sub(taken, Ordering::AcqRel);
    }

    /// A round of writing is over, `dropped` attempts dropped and its
    /// first failure `failed`: the streak of failures goes on or ends.
    fn note_round(&self, dropped: u64, failed: Option<String>) {
        let mut health = lock(&self.health);
        match failed {
            None => {
                if health.warned {
                    info!(
                        event = "history_write_recovered",
                        database = %self.database,
                        failed_writes = health.failed_in_row,
                        "attempts are written to the history again"
                    );
                }
                *health = Health::default();
            }
            Some(error) => {
                health.failed_in_row = health.failed_in_row.saturating_add(1);
                if !health.warned {
                    warn!(
                        event = "history_write_failed",
                        database = %self.database,
                        dropped,
                        error = %error,
                        "attempts could not be written to the history and are dropped; \
                         deliveries go on"
                    );
                    health.warned = true;
                }
                health.last_error = Some(error);
            }
        }
    }
}

/// The writer: on each wake, gathers as its pacing says, then writes a
/// round. Ends when every handle of the queue is gone.
async fn write_loop(inner: Weak<Inner>, mut wakes: mpsc::Receiver<()>) {
    while wakes.recv().await.is_some() {
        gather(&inner, &mut wakes).await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        write_round(&inner).await;
    }
}

/// Waits while the pacing says to gather: each wake that comes within
/// its wait is delivery still at work.
async fn gather(inner: &Weak<Inner>, wakes: &mut mpsc::Receiver<()>) {
    loop {
        let Some(seen) = inner.upgrade().map(|inner| inner.gathered()) else {
            return;
        };
        match PACING.next(seen) {
            Next::Write => return,
            Next::Gather(wait) => {
                if !matches!(tokio::time::timeout(wait, wakes.recv()).await, Ok(Some(()))) {
                    return;
                }
            }
        }
    }
}

/// One round: what is queued as it starts, written [`CHUNK_ROWS`]
/// attempts at a time. Nothing queued (a wake left over from a round
/// just written) is no round: the streak of failures is left as it is.
async fn write_round(inner: &Inner) {
    inner.flush.store(false, Ordering::Release);
    let mut left = lock(&inner.pending).len();
    if left == 0 {
        return;
    }
    let table = attempt_table(&inner.database);
    let mut conn = None;
    let mut dropped = 0;
    let mut failed = None;
    while left > 0 {
        let taken = inner.take(left.min(CHUNK_ROWS));
        if taken.is_empty() {
            break;
        }
        let count = taken.len();
        left -= count;
        let written = write(inner, &mut conn, &table, taken).await;
        inner.settle(count, written.rows);
        dropped += u64::try_from(count)
            .unwrap_or(u64::MAX)
            .saturating_sub(written.rows);
        failed = failed.or(written.error);
        if written.unreachable {
            // The server cannot be reached: the rest of the round is
            // dropped now rather than each chunk waiting out a connect.
            let rest = inner.take(left).len();
            inner.settle(rest, 0);
            dropped += u64::try_from(rest).unwrap_or(u64::MAX);
            break;
        }
    }
    inner.note_round(dropped, failed);
}

/// What became of attempts handed to [`write`].
struct Written {
    rows: u64,
    /// The first failure.
    error: Option<String>,
    /// Whether a connection could not be had.
    unreachable: bool,
}

/// The round's session in `slot`: the one it has, or a new one when it
/// has none or its last statement timed out (which abandons a session).
async fn session<'a>(
    connector: &Connector,
    slot: &'a mut Option<Session>,
) -> Result<&'a mut Session, MysqlError> {
    let usable = slot.take().filter(|session| session.id() != 0);
    let session = match usable {
        Some(session) => session,
        None => connector.connect().await?,
    };
    Ok(slot.insert(session))
}

/// One attempt's values, rendered once: `(request_id, …, exchange,` —
/// the number and `)` are added per try.
struct Rendered {
    request_phid: Vec<u8>,
    head: String,
}

/// Writes `taken` on the round's session.
async fn write(
    inner: &Inner,
    conn: &mut Option<Session>,
    table: &str,
    taken: Vec<Attempt>,
) -> Written {
    let rendered: Vec<Rendered> = taken
        .into_iter()
        .map(|attempt| render(attempt, &inner.instance, inner.body_kept))
        .collect();
    let mut written = Written {
        rows: 0,
        error: None,
        unreachable: false,
    };
    // A chunk that fails drops its own attempts only: the next ones are
    // still tried (a lock wait or a deadlock is over by then).
    for chunk in chunks(&rendered) {
        let session = match session(&inner.connector, conn).await {
            Ok(session) => session,
            Err(err) => {
                written.error = written.error.or(Some(err.to_string()));
                written.unreachable = true;
                return written;
            }
        };
        match write_chunk(session, table, chunk).await {
            Ok(count) => written.rows += count,
            Err(err) => written.error = written.error.or(Some(err)),
        }
    }
    written
}

/// `rendered` in runs of at most [`CHUNK_ROWS`] rows and about
/// [`CHUNK_BYTES`] bytes (at least one row each).
fn chunks(rendered: &[Rendered]) -> Vec<&[Rendered]> {
    let mut chunks = Vec::new();
    let mut start = 0;
    let mut bytes = 0;
    for (index, row) in rendered.iter().enumerate() {
        let rows = index - start;
        if rows > 0 && (rows >= CHUNK_ROWS || bytes + row.head.len() > CHUNK_BYTES) {
            chunks.push(&rendered[start..index]);
            start = index;
            bytes = 0;
        }
        bytes += row.head.len();
    }
    if start < rendered.len() {
        chunks.push(&rendered[start..]);
    }
    chunks
}

/// Numbers and inserts one chunk; on a numbering race, numbers again.
async fn write_chunk(conn: &mut Session, table: &str, chunk: &[Rendered]) -> Result<u64, String> {
    let mut tries = 0;
    loop {
        tries += 1;
        let mut next = highest_numbers(conn, table, chunk).await?;
        let mut text = format!("INSERT INTO {table} ({INSERT_COLUMNS}) VALUES ");
        for (index, row) in chunk.iter().enumerate() {
            let number = next.entry(row.request_phid.clone()).or_insert(0);
            *number = number.saturating_add(1);
            if index > 0 {
                text.push(',');
            }
            text.push_str(&row.head);
            let _ = write!(text, "{number})");
        }
        match conn.query_drop(&text).await {
            Ok(()) => return Ok(u64::try_from(chunk.len()).unwrap_or(u64::MAX)),
            Err(err) if is_race(&err) && tries < NUMBERING_TRIES => {
                debug!(event = "history_numbering_raced", tries);
            }
            Err(err) => return Err(err.to_string()),
        }
    }
}

/// Whether `err` is another writer's insert getting in the way (the same
/// number taken, or a deadlock between two inserts): numbered and tried
/// again.
fn is_race(err: &crate::error::MysqlError) -> bool {
    matches!(server_code_of(err), Some(ER_DUP_ENTRY | ER_LOCK_DEADLOCK))
}

/// The highest `number` on record for each request of `chunk`.
async fn highest_numbers(
    conn: &mut Session,
    table: &str,
    chunk: &[Rendered],
) -> Result<HashMap<Vec<u8>, u32>, String> {
    let mut phids: Vec<&[u8]> = chunk
        .iter()
        .map(|row| row.request_phid.as_slice())
        .collect();
    phids.sort_unstable();
    phids.dedup();
    let mut text = format!("SELECT request_phid, MAX(number) FROM {table} WHERE request_phid IN (");
    for (index, phid) in phids.iter().enumerate() {
        if index > 0 {
            text.push(',');
        }
        push_binary(&mut text, phid);
    }
    text.push_str(") GROUP BY request_phid");
    let rows: Vec<Row> = conn.query(&text).await.map_err(|err| err.to_string())?;
    let mut highest = HashMap::with_capacity(rows.len());
    for mut row in rows {
        match (row.take_opt::<Vec<u8>, _>(0), row.take_opt::<u32, _>(1)) {
            (Some(Ok(phid)), Some(Ok(number))) => {
                highest.insert(phid, number);
            }
            _ => return Err("the attempt numbers read back are not numbers".to_owned()),
        }
    }
    Ok(highest)
}

/// `attempt`'s values up to its number, cut to the columns' sizes.
fn render(mut attempt: Attempt, instance: &str, body_kept: usize) -> Rendered {
    if let Some(exchange) = &mut attempt.exchange {
        if exchange.response_body.len() > body_kept {
            let mut cut = body_kept;
            while !exchange.response_body.is_char_boundary(cut) {
                cut -= 1;
            }
            exchange.response_body.truncate(cut);
            exchange.response_body_truncated = true;
        }
    }
    let request_phid = cut_bytes(&attempt.request_phid, 64).to_vec();
    let mut head = String::with_capacity(256);
    head.push('(');
    let _ = write!(head, "{},", attempt.request_id);
    push_binary(&mut head, &request_phid);
    head.push(',');
    push_binary(&mut head, cut_bytes(&attempt.hook_phid, 64));
    head.push(',');
    push_binary(&mut head, cut_bytes(&attempt.object_phid, 64));
    head.push(',');
    push_text(&mut head, cut_chars(instance, 255));
    head.push(',');
    push_optional(&mut head, attempt.claim_version);
    let _ = write!(head, "{},{},", attempt.started_ms, attempt.duration_ms);
    push_text(&mut head, cut_chars(&attempt.status, 16));
    head.push(',');
    push_text(&mut head, cut_chars(&attempt.error_type, 16));
    head.push(',');
    push_text(&mut head, cut_chars(&attempt.error_code, 64));
    head.push(',');
    push_optional(&mut head, attempt.http_status.map(u64::from));
    match &attempt.sent {
        Some(sent) => {
            let _ = write!(head, "{},", sent.bytes);
            push_text(&mut head, cut_chars(&sent.sha256, 64));
            head.push(',');
            push_text(&mut head, sent.signed_with.as_str());
            head.push(',');
        }
        None => head.push_str("NULL,NULL,NULL,"),
    }
    match attempt
        .exchange
        .as_ref()
        .and_then(|exchange| serde_json::to_string(exchange).ok())
    {
        Some(json) => push_text(&mut head, &json),
        None => head.push_str("NULL"),
    }
    head.push(',');
    Rendered { request_phid, head }
}

fn push_optional(text: &mut String, value: Option<u64>) {
    match value {
        Some(value) => {
            let _ = write!(text, "{value},");
        }
        None => text.push_str("NULL,"),
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn push_hex(text: &mut String, bytes: &[u8]) {
    text.reserve(2 * bytes.len() + 1);
    for byte in bytes {
        text.push(char::from(HEX[usize::from(byte >> 4)]));
        text.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    text.push('\'');
}

/// A `VARBINARY` value: `X'…'`.
fn push_binary(text: &mut String, bytes: &[u8]) {
    text.push_str("X'");
    push_hex(text, bytes);
}

/// A text value: `_utf8mb4 X'…'` (hex only, whatever the text holds).
fn push_text(text: &mut String, value: &str) {
    text.push_str("_utf8mb4 X'");
    push_hex(text, value.as_bytes());
}

fn cut_bytes(text: &str, max: usize) -> &[u8] {
    let bytes = text.as_bytes();
    &bytes[..bytes.len().min(max)]
}

fn cut_chars(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use webhook_core::history::{Exchange, SentBody, SignedWith};

    fn attempt(phid: &str) -> Attempt {
        Attempt {
            request_id: 7,
            request_phid: phid.to_owned(),
            hook_phid: "PHID-HWBH-1".to_owned(),
            object_phid: "PHID-TASK-1".to_owned(),
            claim_version: None,
            started_ms: 1,
            duration_ms: 2,
            status: "sent".to_owned(),
            error_type: "http".to_owned(),
            error_code: "200".to_owned(),
            http_status: Some(200),
            sent: Some(SentBody {
                bytes: 3,
                sha256: "ab".to_owned(),
                signed_with: SignedWith::Current,
            }),
            exchange: Some(Exchange {
                response_body: "é".repeat(10),
                ..Exchange::default()
            }),
        }
    }

    /// A queue on a lazy pool no writer uses (none is attached): what is
    /// queued stays.
    fn test_queue(config: &HistoryConfig) -> HistoryQueue {
        let history = crate::history::MysqlHistory::new(
            &crate::MysqlConfig::default(),
            config.clone(),
            "test:1",
        )
        .expect("the default settings are valid");
        history.queue()
    }

    /// Attempts with large answers fill the queue by their bytes before
    /// its count: the rest are dropped and counted, and the queue takes
    /// attempts again once the writer took what waited.
    #[test]
    fn the_queue_holds_at_most_its_bytes() {
        let config = HistoryConfig::with_defaults("budget");
        let queue = test_queue(&config);
        let big = |phid: &str| {
            let mut attempt = attempt(phid);
            attempt.exchange = Some(Exchange {
                response_body: "x".repeat(1024 * 1024),
                ..Exchange::default()
            });
            attempt
        };
        let fits = PENDING_BYTES_MAX / size_of(&big("PHID-HWBR-1"));
        for n in 0..fits + 3 {
            queue.record(big(&format!("PHID-HWBR-{n}")));
        }
        let totals = queue.totals();
        assert_eq!(totals.recorded, (fits + 3) as u64);
        assert_eq!(totals.dropped, 3);
        assert_eq!(queue.pending(), fits);
        let taken = queue.inner.take(usize::MAX);
        assert_eq!(taken.len(), fits);
        queue.record(big("PHID-HWBR-after"));
        assert_eq!(queue.totals().dropped, 3, "room again once taken");
    }

    #[test]
    fn a_row_has_every_column_but_the_number_and_its_body_is_cut() {
        let rendered = render(attempt("PHID-HWBR-1"), "host:1", 5);
        let values = probe_values();
        // Every column but the number is followed by a comma in the head.
        assert_eq!(
            rendered.head.matches(',').count(),
            INSERT_COLUMNS.matches(',').count(),
            "{}",
            rendered.head
        );
        assert_eq!(
            values.matches(',').count(),
            INSERT_COLUMNS.matches(',').count()
        );
        assert!(rendered.head.contains("NULL,"), "claim_version");
        // The body cut at a character boundary: "éé" is 4 bytes.
        let json = serde_json::to_string(&Exchange {
            response_body: "éé".to_owned(),
            response_body_truncated: true,
            ..Exchange::default()
        })
        .expect("json");
        let mut hex = String::new();
        push_hex(&mut hex, json.as_bytes());
        assert!(rendered.head.contains(hex.trim_end_matches('\'')));
    }

    #[test]
    fn chunks_are_bounded_by_rows_and_bytes() {
        let small: Vec<Rendered> = (0..600)
            .map(|_| Rendered {
                request_phid: Vec::new(),
                head: "x".repeat(10),
            })
            .collect();
        let sizes: Vec<usize> = chunks(&small).iter().map(|c| c.len()).collect();
        assert_eq!(sizes, [256, 256, 88]);
        let big: Vec<Rendered> = (0..3)
            .map(|_| Rendered {
                request_phid: Vec::new(),
                head: "x".repeat(CHUNK_BYTES),
            })
            .collect();
        let sizes: Vec<usize> = chunks(&big).iter().map(|c| c.len()).collect();
        assert_eq!(sizes, [1, 1, 1]);
        assert!(chunks(&[]).is_empty());
    }

    #[test]
    fn texts_are_cut_to_their_columns() {
        assert_eq!(cut_chars("ééé", 2), "éé");
        assert_eq!(cut_chars("ab", 5), "ab");
        assert_eq!(cut_bytes("abc", 2), b"ab");
    }

    /// How the writer is woken in a test: its one attempt queued `before`
    /// it starts gathering, then a batch committed every `every` for
    /// `for_how_long` (on tokio's paused clock).
    struct Wakes {
        before: Duration,
        every: Duration,
        for_how_long: Duration,
    }

    /// How long the writer gathers, woken as `wakes` says.
    async fn gathering_time(wakes: Wakes) -> Duration {
        let queue = test_queue(&HistoryConfig::with_defaults("h"));
        queue.record(attempt("PHID-HWBR-1"));
        tokio::time::sleep(wakes.before).await;
        let (batches, mut received) = mpsc::channel(1);
        let inner = Arc::downgrade(&queue.inner);
        let started = Instant::now();
        let writer = tokio::spawn(async move {
            gather(&inner, &mut received).await;
            started.elapsed()
        });
        while started.elapsed() + wakes.every <= wakes.for_how_long {
            tokio::time::sleep(wakes.every).await;
            let _ = batches.try_send(());
        }
        writer.await.expect("the writer gathers")
    }

    /// A batch every 100 ms for `ms`, the attempt queued as gathering
    /// starts.
    fn batches_for(ms: u64) -> Wakes {
        Wakes {
            before: Duration::ZERO,
            every: Duration::from_millis(100),
            for_how_long: Duration::from_millis(ms),
        }
    }

    /// Batches for three times the age bound.
    fn never_pausing() -> u64 {
        3 * u64::try_from(PACING.max_wait.as_millis()).expect("a bound in milliseconds")
    }

    #[tokio::test(start_paused = true)]
    async fn the_writer_waits_for_delivery_to_pause() {
        let at_once = gathering_time(batches_for(0)).await;
        assert_eq!(
            at_once, PACING.quiet,
            "no batch: written after the quiet span"
        );
        let after_burst = gathering_time(batches_for(600)).await;
        assert_eq!(after_burst, Duration::from_millis(600) + PACING.quiet);
    }

    #[tokio::test(start_paused = true)]
    async fn a_delivery_that_never_pauses_has_its_attempts_written_within_the_bound() {
        let busy = gathering_time(batches_for(never_pausing())).await;
        assert_eq!(busy, PACING.max_wait);
    }

    #[tokio::test(start_paused = true)]
    async fn the_age_bound_counts_from_when_the_oldest_attempt_was_queued() {
        // The writer was busy with a round for 1.9 s after the attempt
        // was queued.
        let gathered = gathering_time(Wakes {
            before: Duration::from_millis(1900),
            ..batches_for(never_pausing())
        })
        .await;
        assert_eq!(gathered, PACING.max_wait - Duration::from_millis(1900));
    }

    /// A wake left over from a round just written finds nothing queued:
    /// no connection is asked for and the streak of failures stands.
    #[tokio::test]
    async fn nothing_queued_is_no_round() {
        let config = HistoryConfig::with_defaults("h");
        let unreachable = crate::MysqlConfig {
            port: 1,
            ..crate::MysqlConfig::default()
        };
        let history = crate::history::MysqlHistory::new(&unreachable, config, "test:1")
            .expect("valid settings");
        let queue = history.queue();
        *lock(&queue.inner.health) = Health {
            failed_in_row: FAILING_AFTER,
            last_error: Some("the last round failed".to_owned()),
            warned: true,
        };
        write_round(&queue.inner).await;
        let health = lock(&queue.inner.health);
        assert_eq!(
            (health.failed_in_row, health.last_error.as_deref()),
            (FAILING_AFTER, Some("the last round failed"))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stopping_daemon_has_the_queue_written_at_once() {
        let queue = test_queue(&HistoryConfig::with_defaults("h"));
        queue.record(attempt("PHID-HWBR-1"));
        queue.inner.flush.store(true, Ordering::Release);
        let (_batches, mut wakes) = mpsc::channel(1);
        let started = Instant::now();
        gather(&Arc::downgrade(&queue.inner), &mut wakes).await;
        assert_eq!(started.elapsed(), Duration::ZERO);
    }

    #[test]
    fn a_full_queue_drops_and_counts() {
        let queue = test_queue(&HistoryConfig::with_defaults("h"));
        for _ in 0..PENDING_MAX + 3 {
            queue.record(attempt("PHID-HWBR-1"));
        }
        assert_eq!(
            queue.totals(),
            HistoryTotals {
                recorded: (PENDING_MAX + 3) as u64,
                written: 0,
                dropped: 3
            }
        );
        assert_eq!(queue.pending(), PENDING_MAX);
        assert_eq!(queue.failing(), None);
    }
}
