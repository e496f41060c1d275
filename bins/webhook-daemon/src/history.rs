//! The attempt history's part of the process, when it is on: its schema
//! prepared before the first delivery (a schema newer than this build or
//! a missing privilege stops the daemon), then its retention pass every
//! [`RETENTION_EVERY`] and its schema prepared again while its writes
//! fail ([`keep`]), and what it reports — the writer's totals, the
//! rows kept and the oldest, and a writer failing for `/readyz`.
//! Writing and pruning are `webhook_store_mysql::history`'s.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tracing::{info, warn};
use webhook_core::Clock;
use webhook_store_mysql::history::{
    HistoryError, HistoryQueue, HistoryTotals, MysqlHistory, RetentionPass,
};

/// How often old attempts are pruned.
pub const RETENTION_EVERY: Duration = Duration::from_secs(60);

/// How often preparing the schema is tried again while the server cannot
/// be reached, and while the history's writes fail (its database dropped,
/// a grant revoked): the bound on a recreated schema.
const PREPARE_RETRY: Duration = Duration::from_secs(5);

/// What the history reports to `/metrics` and `/readyz`.
#[derive(Debug)]
pub struct HistoryStatus {
    queue: HistoryQueue,
    /// The last retention pass, and the attempts this instance had
    /// written when it ended.
    last_pass: Mutex<Option<(RetentionPass, u64)>>,
}

/// The history's figures at one scrape.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HistoryFigures {
    /// Attempts handed over, written and dropped so far.
    pub totals: HistoryTotals,
    /// Attempts kept, as of the last retention pass.
    pub rows_kept: Option<u64>,
    /// The age of the oldest attempt kept as of that pass, in seconds.
    pub oldest_age_secs: Option<u64>,
}

impl HistoryStatus {
    /// The status of `history`'s writer.
    pub fn new(history: &MysqlHistory) -> Self {
        Self {
            queue: history.queue(),
            last_pass: Mutex::new(None),
        }
    }

    /// Why the history is failing now (several rounds of writing in a row
    /// failed),
    /// for `/readyz`; `None` while it writes.
    pub fn failing(&self) -> Option<String> {
        self.queue
            .failing()
            .map(|why| format!("the attempt history cannot be written: {why}"))
    }

    /// The figures to report at `now_ms` (Unix ms).
    pub fn figures(&self, now_ms: u64) -> HistoryFigures {
        let pass = self
            .last_pass
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .map(|(pass, _)| pass);
        HistoryFigures {
            totals: self.queue.totals(),
            rows_kept: pass.map(|pass| pass.rows_kept),
            oldest_age_secs: pass
                .and_then(|pass| pass.oldest_started_ms)
                .map(|oldest| now_ms.saturating_sub(oldest) / 1000),
        }
    }

    fn note_pass(&self, pass: RetentionPass) {
        let written = self.queue.totals().written;
        *self.last_pass.lock().unwrap_or_else(|e| e.into_inner()) = Some((pass, written));
    }

    /// Whether the figures are due before the next pass: none yet, or the
    /// last pass found the history empty and this instance has written
    /// attempts since (a fresh history shows them within
    /// [`PREPARE_RETRY`], not a minute later).
    fn figures_stale(&self) -> bool {
        let last = *self.last_pass.lock().unwrap_or_else(|e| e.into_inner());
        match last {
            None => true,
            Some((pass, written)) => pass.rows_kept == 0 && self.queue.totals().written > written,
        }
    }
}

/// The history's life beside delivery: its schema prepared (delivery
/// waits for `prepared` to turn true), then kept in order until dropped
/// ([`keep_pruned`]). Returns only what stops the daemon: a schema too
/// new, a missing privilege.
pub async fn keep(
    history: MysqlHistory,
    status: Arc<HistoryStatus>,
    clock: Arc<dyn Clock>,
    prepared: watch::Sender<bool>,
) -> HistoryError {
    if let Err(err) = prepare(&history).await {
        return err;
    }
    let _ = prepared.send(true);
    keep_pruned(history, status, clock).await
}

/// Prepares the history's schema, trying again while the server cannot
/// be reached; an error only for what waiting cannot mend (a schema too
/// new, a missing privilege).
async fn prepare(history: &MysqlHistory) -> Result<(), HistoryError> {
    loop {
        match history.prepare().await {
            Ok(()) => {
                info!(event = "history_ready", database = %history.database(),
                      "every attempt is kept in the attempt history");
                return Ok(());
            }
            Err(err) if err.needs_operator() => return Err(err),
            Err(err) => {
                info!(event = "history_not_ready", error = %err,
                      "the attempt history cannot be prepared yet (tried again shortly); \
                       delivery waits for it");
                tokio::time::sleep(PREPARE_RETRY).await;
            }
        }
    }
}

/// Keeps the history in order until dropped: prunes it now and every
/// [`RETENTION_EVERY`] (keeping `status`'s figures; sooner while they say
/// the history is empty and it no longer is), and while its writes
/// fail, prepares its schema again every [`PREPARE_RETRY`], so a dropped
/// database is back within that bound (a restored grant needs nothing:
/// the next write succeeds).
async fn keep_pruned(
    history: MysqlHistory,
    status: Arc<HistoryStatus>,
    clock: Arc<dyn Clock>,
) -> ! {
    let mut since_pass = RETENTION_EVERY;
    loop {
        if status.failing().is_some() {
            match history.prepare().await {
                Ok(()) => {
                    history.queue().schema_restored();
                    info!(event = "history_prepared_again", database = %history.database(),
                          "the attempt history's schema is in place; writing resumes with the next attempt");
                }
                Err(err) => warn!(event = "history_prepare_failed", error = %err,
                                  "the attempt history is tried again shortly"),
            }
        }
        if since_pass >= RETENTION_EVERY || status.figures_stale() {
            since_pass = Duration::ZERO;
            prune(&history, &status, clock.now_ms()).await;
        }
        tokio::time::sleep(PREPARE_RETRY).await;
        since_pass += PREPARE_RETRY;
    }
}

/// One retention pass, its figures kept.
async fn prune(history: &MysqlHistory, status: &HistoryStatus, now_ms: u64) {
    match history.enforce_retention(now_ms).await {
        Ok(pass) => {
            if pass.deleted > 0 {
                info!(
                    event = "history_pruned",
                    deleted = pass.deleted,
                    kept = pass.rows_kept
                );
            }
            status.note_pass(pass);
        }
        Err(err) => warn!(event = "history_prune_failed", error = %err,
                          "old attempts are pruned again at the next pass"),
    }
}
