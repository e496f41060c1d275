//! Storing a result: an attempt's or a hook error's, in one guarded
//! UPDATE, retried for a while and never over a newer claim's row.

use std::time::Duration;

use tracing::{debug, error, warn};

use crate::events::EventKind;
use crate::metrics::bump;
use crate::model::RequestRow;
use crate::outcome::{hook_error_write, HookError, ResultWrite};
use crate::properties::Properties;
use crate::store::Written;

use super::attempt::ClaimToken;
use super::Dispatcher;
use super::LOG_TARGET;

/// Tries for one write-back before the row is left to its lease.
const WRITE_ATTEMPTS: u32 = 6;
/// First pause between write-back tries; doubles each time.
const WRITE_RETRY_DELAY: Duration = Duration::from_millis(500);

impl Dispatcher {
    /// A hook-configuration error. Without a claim it is written only onto
    /// the version that was judged; after one, like an attempt's result,
    /// onto the version the claim wrote.
    pub(super) async fn fail_hook(
        &self,
        row: &RequestRow,
        properties: &Properties,
        error: HookError,
        claim: Option<ClaimToken>,
    ) {
        bump(&self.metrics.hook_errors);
        self.emit(
            Some(&row.phid),
            Some(&row.webhook_phid),
            EventKind::HookError { code: error.code() },
        );
        let version = claim.map_or(row.date_modified, |claim| claim.version);
        let write = hook_error_write(row.id, version, properties, error, self.clock.now());
        self.write_back(&write, &row.phid, claim.map(|claim| claim.at))
            .await;
    }

    /// Writes a result, retrying for a while: a lost write-back means the row
    /// is delivered again once its lease ends. Every try is guarded by the
    /// version the write expects (for a claimed attempt, the one its claim
    /// wrote), so it lands only while that claim still owns the row: a
    /// deliverer that was paused past its lease, and whose row another
    /// claimed meanwhile, has its result dropped and counted
    /// (`result_dropped_stale`) instead of stored over the newer one. Its
    /// first try is made however late it comes: if nobody claimed the row
    /// meanwhile, storing the answer is what keeps it from being sent
    /// twice. With `claimed_at`, retries stop one second before the claim's
    /// lease ends.
    ///
    /// Whether the row is settled: the result stored, or the row moved on
    /// (nothing of ours to store any more). `false`: the result is lost and
    /// the row will be delivered again after its lease.
    pub(super) async fn write_back(
        &self,
        write: &ResultWrite,
        request_phid: &str,
        claimed_at: Option<Duration>,
    ) -> bool {
        let lease = Duration::from_secs(self.windows.lease_secs());
        let give_up_at = claimed_at.map(|at| at + lease.saturating_sub(Duration::from_secs(1)));
        let mut delay = WRITE_RETRY_DELAY;
        for attempt in 1..=WRITE_ATTEMPTS {
            if attempt > 1 && give_up_at.is_some_and(|end| self.clock.monotonic() >= end) {
                bump(&self.metrics.writeback_failures);
                error!(target: LOG_TARGET, event = "writeback_failed", request = %request_phid, attempts = attempt - 1,
                       "lease over: result not stored, so as not to overwrite another deliverer's; \
                        the row will be delivered again");
                return false;
            }
            match self.store.write_result(write).await {
                Ok(Written::Yes) => return true,
                Ok(Written::Skipped) if claimed_at.is_some() => {
                    bump(&self.metrics.writeback_stale);
                    warn!(target: LOG_TARGET, event = "result_dropped_stale", request = %request_phid, attempt,
                          "the row moved on since this claim (another deliverer claimed it after \
                           the lease, or an earlier try of this write landed): not stored over it");
                    return true;
                }
                Ok(Written::Skipped) => {
                    debug!(target: LOG_TARGET, event = "write_skipped", request = %request_phid,
                           "row changed since it was read; another deliverer owns it");
                    return true;
                }
                Err(err) if attempt < WRITE_ATTEMPTS => {
                    self.count_denied(&err);
                    bump(&self.metrics.writeback_retries);
                    warn!(target: LOG_TARGET, event = "writeback_retry", request = %request_phid, attempt,
                          error = %err, retry_in_ms = delay.as_millis() as u64);
                    self.clock.sleep(delay).await;
                    delay *= 2;
                }
                Err(err) => {
                    self.count_denied(&err);
                    bump(&self.metrics.writeback_failures);
                    error!(target: LOG_TARGET, event = "writeback_failed", request = %request_phid, attempts = attempt,
                           error = %err, "result not stored; the row will be delivered again after its lease");
                }
            }
        }
        false
    }
}
