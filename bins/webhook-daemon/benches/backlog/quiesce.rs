//! Before the drain: the server catching up on what the seeding and the
//! baseline left it — InnoDB's purge of the row versions they replaced
//! and the flush of the pages they dirtied. Left alone, that work lands in
//! the drain wherever its timing falls (measured: about 7,000 row versions
//! still to purge and 1,100 dirty pages flushed in one go a second into
//! it), and on two cores it moves the drain's rate by more than the
//! differences the bench is asked to show.

use std::time::{Duration, Instant};

use mysql_async::Conn;

use crate::sampling::global_status;

/// The longest the bench waits; a server that never settles is measured
/// as it is (and the report says so).
const WAIT_MAX: Duration = Duration::from_secs(20);
/// How often the server's status is read.
const POLL: Duration = Duration::from_millis(100);
/// Row versions left to purge that count as caught up.
const PURGE_LEFT_MAX: u64 = 100;
/// Dirty pages that stay within this share for [`STEADY_FOR`] have
/// nothing more to flush soon.
const STEADY_SHARE: f64 = 0.02;
const STEADY_FOR: Duration = Duration::from_secs(2);
/// Dirty pages this far below their peak: the page cleaner has flushed.
const FLUSHED_SHARE: f64 = 0.7;

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
        let read = |key: &str| status.get(key).copied().unwrap_or(0);
        let purge_left = read("Innodb_history_list_length");
        let dirty = read("Innodb_buffer_pool_pages_dirty");
        peak_dirty = peak_dirty.max(dirty);
        let flushed = (dirty as f64) <= peak_dirty as f64 * FLUSHED_SHARE;
        steady = match steady {
            Some((since, level)) if dirty.abs_diff(level) as f64 <= level as f64 * STEADY_SHARE => {
                Some((since, level))
            }
            _ => Some((Instant::now(), dirty)),
        };
        let held = steady.is_some_and(|(since, _)| since.elapsed() >= STEADY_FOR);
        if purge_left <= PURGE_LEFT_MAX && (flushed || held) {
            return Quiesced {
                secs: started.elapsed().as_secs_f64(),
                settled: true,
            };
        }
        if started.elapsed() >= WAIT_MAX {
            eprintln!(
                "bench: the server did not settle within {WAIT_MAX:?} ({purge_left} row versions \
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
