//! Before the drain: the server catching up on what the seeding and the
//! baseline left it — InnoDB's purge of the undo logs of their
//! transactions (the baseline's claims and write-backs are one each, the
//! reset one more for all 10,000 rows) and the flush of the pages they
//! dirtied. Left alone, that work lands in the drain wherever its timing
//! falls (measured: about 7,000 transactions' undo logs still to purge
//! and 1,100 dirty pages flushed in one go a second into it), and on two
//! cores it moves the drain's rate by more than the differences the
//! bench is asked to show.
//!
//! The wait is a heuristic, bounded by [`WAIT_MAX`]: it ends once nothing
//! is left to purge and the dirty pages either fell well below their peak
//! (the page cleaner's flush) or held steady for [`STEADY_FOR`]; a flush
//! that has not begun by then, or a slow one, can still land in the
//! drain. Another client busy on the server keeps it waiting the whole
//! bound, which the report says.

use std::time::{Duration, Instant};

use mysql_async::Conn;

use crate::sampling::{global_status, Status};

/// The longest the bench waits; a server that never settles is measured
/// as it is (and the report says so).
const WAIT_MAX: Duration = Duration::from_secs(20);
/// How often the server's status is read.
const POLL: Duration = Duration::from_millis(100);
/// Dirty pages that stay within this share for [`STEADY_FOR`] have
/// nothing more to flush soon.
const STEADY_SHARE: f64 = 0.02;
const STEADY_FOR: Duration = Duration::from_secs(2);
/// Dirty pages this far below their peak: the page cleaner has flushed.
const FLUSHED_SHARE: f64 = 0.7;
/// Committed transactions whose undo logs are not purged yet.
const PURGE_LEFT: &str = "Innodb_history_list_length";
const DIRTY_PAGES: &str = "Innodb_buffer_pool_pages_dirty";

/// How the wait went.
pub(crate) struct Quiesced {
    pub(crate) secs: f64,
    /// Whether the server caught up within [`WAIT_MAX`].
    pub(crate) settled: bool,
}

/// Waits until the purge has caught up and the dirty pages were flushed
/// (or hold steady), at most [`WAIT_MAX`].
pub(crate) async fn quiesce(conn: &mut Conn) -> Quiesced {
    let started = Instant::now();
    let mut peak_dirty = 0u64;
    let mut steady: Option<(Instant, u64)> = None;
    loop {
        let status = global_status(conn).await;
        let (Some(purge_left), Some(dirty)) =
            (read(&status, PURGE_LEFT), read(&status, DIRTY_PAGES))
        else {
            eprintln!("bench: the server shows no {PURGE_LEFT} or {DIRTY_PAGES}; not waiting");
            return Quiesced {
                secs: started.elapsed().as_secs_f64(),
                settled: false,
            };
        };
        peak_dirty = peak_dirty.max(dirty);
        let flushed = (dirty as f64) <= peak_dirty as f64 * FLUSHED_SHARE;
        steady = match steady {
            Some((since, level)) if dirty.abs_diff(level) as f64 <= level as f64 * STEADY_SHARE => {
                Some((since, level))
            }
            _ => Some((Instant::now(), dirty)),
        };
        let held = steady.is_some_and(|(since, _)| since.elapsed() >= STEADY_FOR);
        if purge_left == 0 && (flushed || held) {
            return Quiesced {
                secs: started.elapsed().as_secs_f64(),
                settled: true,
            };
        }
        if started.elapsed() >= WAIT_MAX {
            eprintln!(
                "bench: the server did not settle within {WAIT_MAX:?} ({purge_left} transactions \
                 to purge, {dirty} dirty pages); measuring as it is"
            );
            return Quiesced {
                secs: started.elapsed().as_secs_f64(),
                settled: false,
            };
        }
        tokio::time::sleep(POLL).await;
    }
}

fn read(status: &Status, key: &str) -> Option<u64> {
    status.get(key).copied()
}
