//! The scan floor: what the store remembers about where queued rows can
//! be, so the candidate query stays a short primary-key range on Phorge's
//! stock schema, which has no `key_status (status, id)` index. Without it
//! `WHERE status = 'queued' … ORDER BY id LIMIT n` walks the primary key
//! over every retained row (a week of history: a third of a second to a
//! second per idle poll with a million rows).
//!
//! It owns a per-process cache of facts about the table, shared by the
//! store's clones: a *frontier* (every id below it is in `below`, known
//! not `queued`, or a gap presumed dead) and `below` (ids under the
//! frontier last seen `queued`, at most [`BELOW_MAX`]). The candidate
//! query is then `(id >= frontier OR id IN (below)) AND` the unchanged
//! predicate of [`crate::sql`]. It decides nothing about rows: a fact
//! only narrows where the query looks, the claim's compare-and-set still
//! decides who delivers, so several daemons stay exactly as safe as one.
//!
//! Before each poll, [`QueuedFloor::prepare`]:
//! 1. drops from `below` the ids no longer `queued` (primary-key lookups);
//! 2. walks the primary key up from the frontier, a few pages at most,
//!    moving it past each id that follows without a gap. A missing id may
//!    be an insert not committed yet (auto-increment ids are handed out at
//!    `INSERT` and committed later), so a gap is stepped over only when the
//!    row above it was created [`GAP_GRACE`] before the poll's `now`:
//!    Phorge sets `dateCreated` just before its `INSERT`, so that row's id
//!    — and every id below it — was handed out at least that long ago;
//! 3. at the first poll and every [`RESCAN_EVERY`] after, rebuilds both
//!    from the table: the safe point `P` is the newest row created
//!    `GAP_GRACE` ago (`key_collect`), `below` the queued ids up to `P`
//!    and the frontier `P + 1`. Without `key_status` this is the one
//!    statement that still reads every retained row (one old-style poll
//!    per period); it is also what finds a row set back to `queued` by
//!    hand below the frontier, within a rescan period;
//! 4. every [`LOOK_EVERY`] (by the poll's `now`, not at every poll, so an
//!    idle poll costs what it did), looks for rows `webhook-admin
//!    requeue` set back to `queued` below the frontier: queued, result
//!    `none` and `lastRequestEpoch` within [`LOOK_WINDOW`], one short
//!    `key_ratelimit` range per hook (`sql::floor_requeued_sql`), and adds
//!    them to `below` as far as [`BELOW_MAX`] allows (the rest: the next
//!    rescan). Only fresh PHP rows (`none`, epoch 0, never in the window)
//!    and requeued rows have result `none` on a queued row.
//!
//! The grace compares Phorge's `dateCreated` (its web hosts' clocks) with
//! the poll's `now` (this host's), as the claim lease compares
//! `dateModified` with it: with this host's clock ahead by more than a
//! fraction of the grace, a late commit may be stepped over and is then
//! found by the next rescan instead of the next poll. Keep the clocks in
//! step (NTP), as the lease already asks.
//!
//! Each step changes the floor only after its statement answered, so a
//! failed or cancelled poll leaves it where it was (never past an id not
//! seen), and a failure of these steps fails no poll (only no connection
//! at all does, as the candidate query would): the candidate query
//! runs on the floor as it stands (at worst frontier 0, the full scan:
//! correct, only slow). The walk and the refresh are bounded by the
//! statement timeout like every statement here (`crate::session`).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};

use mysql_async::{Row, Value};
use tracing::{debug, warn};
use webhook_core::{StoreError, UnixTime};

use crate::connector::Connector;
use crate::error::MysqlError;
use crate::session::Session;
use crate::sql;

/// How long before the poll's `now` the row above a missing id must have
/// been created for the walk to step over the gap (seconds). An insert
/// whose transaction stays open longer than this is presumed dead; if it
/// commits after all, the next rescan finds it.
pub const GAP_GRACE: u64 = 300;

/// How often the floor is rebuilt from the table (seconds of the poll's
/// clock), its first poll included.
pub const RESCAN_EVERY: u64 = 600;

/// After a failed rescan, the next is tried this much later (seconds), not
/// at every poll: on a table too large for the statement timeout each try
/// costs that timeout.
const RESCAN_RETRY: u64 = 60;

/// How often the look for requeued rows below the frontier runs (seconds
/// of the poll's clock), its first poll included.
pub const LOOK_EVERY: u64 = 5;

/// How far back the look reads `lastRequestEpoch` (seconds): two rescan
/// periods, so a look that failed or was skipped for a while is caught up
/// by the next rescan long before a requeued row leaves the window.
pub const LOOK_WINDOW: u64 = 2 * RESCAN_EVERY;

/// Hooks one statement of the look lists at most.
const LOOK_HOOKS_MAX: usize = 256;

/// Queued ids remembered below the frontier at most; the walk stops at
/// the first that does not fit, so the range covers the rest.
pub const BELOW_MAX: usize = 1_024;

/// The walk's first page is small (at idle it reads no row at all, and
/// after a fresh gap only the first one counts); each full page doubles
/// the next, up to [`WALK_PAGE_MAX`].
const WALK_PAGE_FIRST: usize = 128;
const WALK_PAGE_MAX: usize = 1_024;

/// Rows the walk reads in one poll at most.
const WALK_ROWS_MAX: usize = 4_096;

/// The floor one candidate query restricts itself to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Floor {
    /// Every id from here up.
    pub(crate) frontier: u64,
    /// And these below it, padded to a few list lengths (repeating the
    /// last) so the statement text, and its prepared statement, is one of
    /// a few.
    pub(crate) below: Vec<u64>,
}

/// The scan floor, shared by the store's clones.
#[derive(Debug, Clone, Default)]
pub(crate) struct QueuedFloor(Arc<Shared>);

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<FloorState>,
    /// One poll's upkeep at a time: each step reads the state, awaits its
    /// statement, then applies what it saw to the state it read.
    upkeep: tokio::sync::Mutex<()>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct FloorState {
    frontier: u64,
    below: BTreeSet<u64>,
    /// `None`: at the next poll.
    rescan_due: Option<UnixTime>,
    /// The look for requeued rows; `None`: at the next poll.
    look_due: Option<UnixTime>,
    /// The table's highest id as the wake-up probe last read it, if it
    /// did: below the frontier, the walk would read nothing.
    newest_id: Option<u64>,
}

/// One row of a walk page: id, queued, dateCreated.
type WalkRow = (u64, bool, UnixTime);

impl QueuedFloor {
    fn state(&self) -> MutexGuard<'_, FloorState> {
        // Every change is a plain assignment after the statement answered,
        // so a poisoned state is still a consistent one.
        self.0.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes the table's highest id, as the wake-up probe read it: while it
    /// stays below the frontier, the next poll skips the walk (which could
    /// only read nothing). A reading gone stale is harmless: the candidate
    /// query covers every id from the frontier up whether or not the walk
    /// ran; the walk only keeps that range short.
    pub(crate) fn note_newest_id(&self, newest: u64) {
        self.state().newest_id = Some(newest);
    }

    /// The current frontier (diagnostics and tests).
    pub(crate) fn frontier(&self) -> u64 {
        self.state().frontier
    }

    /// Brings the floor up to date for a poll at `now` (the query's clock,
    /// as its cutoffs) and returns it. A step that fails leaves the floor
    /// as it was and fails nothing; only no connection at all fails, as
    /// the candidate query would.
    pub(crate) async fn prepare(
        &self,
        connector: &Connector,
        now: UnixTime,
    ) -> Result<Floor, StoreError> {
        let _upkeep = self.0.upkeep.lock().await;
        let mut conn = connector.conn().await?;
        self.upkeep(&mut conn, now).await;
        let state = self.state();
        Ok(Floor {
            frontier: state.frontier,
            below: padded(&state.below),
        })
    }

    async fn upkeep(&self, conn: &mut Session, now: UnixTime) {
        let due = self.state().rescan_due.is_none_or(|due| now >= due);
        if !(due && self.rescan(conn, now).await) {
            if let Err(err) = self.refresh(conn).await {
                debug!(event = "scan_floor_step_failed", step = "refresh", error = %err);
            }
        }
        // Each reading serves one poll: while the probe rests (the binary
        // log is followed) no new one comes, and an old one must not keep
        // skipping the walk.
        let nothing_above = {
            let mut state = self.state();
            let frontier = state.frontier;
            state
                .newest_id
                .take()
                .is_some_and(|newest| newest < frontier)
        };
        if !nothing_above {
            if let Err(err) = self.walk(conn, now).await {
                debug!(event = "scan_floor_step_failed", step = "walk", error = %err);
            }
        }
        if self.state().look_due.is_none_or(|due| now >= due) {
            if let Err(err) = self.look(conn, now).await {
                debug!(event = "scan_floor_step_failed", step = "look", error = %err);
            }
            // Failed or not, the next look is a period away: a failing
            // look must not cost a statement per poll.
            self.state().look_due = Some(now.saturating_add(LOOK_EVERY));
        }
    }

    /// Step 4: remembers the rows requeued recently below the frontier.
    async fn look(&self, conn: &mut Session, now: UnixTime) -> Result<(), MysqlError> {
        let frontier = self.state().frontier;
        if frontier == 0 {
            return Ok(());
        }
        let hooks: Vec<Row> = conn.exec(sql::FLOOR_HOOKS, ()).await?;
        let hooks = hooks
            .into_iter()
            .map(|row| {
                mysql_async::from_row_opt::<Vec<u8>>(row).map_err(|err| {
                    MysqlError::UnexpectedResult {
                        statement: "scan floor hooks",
                        detail: format!("not a PHID: {:?}", err.0),
                    }
                })
            })
            .collect::<Result<Vec<Vec<u8>>, _>>()?;
        let since = now.saturating_sub(LOOK_WINDOW);
        let limit = u64::try_from(BELOW_MAX).unwrap_or(u64::MAX);
        let mut found = Vec::new();
        for chunk in hooks.chunks(LOOK_HOOKS_MAX) {
            // Padded (repeating the last) so the text is one of a few.
            let listed = chunk.len().next_power_of_two();
            let mut params: Vec<Value> =
                chunk.iter().map(|phid| Value::from(phid.clone())).collect();
            params.resize(listed, params.last().cloned().unwrap_or(Value::NULL));
            params.extend([since, frontier, limit].map(Value::from));
            let rows: Vec<Row> = conn.exec(sql::floor_requeued_sql(listed), params).await?;
            for row in rows {
                found.push(one_id(row, "scan floor look")?);
            }
        }
        let mut state = self.state();
        if state.frontier < frontier {
            // Only a rescan lowers it, and a rescan saw the table itself.
            return Ok(());
        }
        let before = state.below.len();
        let mut left_out = 0;
        for id in found {
            if state.below.contains(&id) {
                continue;
            }
            if state.below.len() >= BELOW_MAX {
                left_out += 1;
                continue;
            }
            state.below.insert(id);
        }
        let added = state.below.len() - before;
        if added > 0 || left_out > 0 {
            debug!(
                event = "scan_floor_requeued_found",
                added, left_out, frontier
            );
        }
        Ok(())
    }

    /// Step 3, when due; whether the floor was rebuilt.
    async fn rescan(&self, conn: &mut Session, now: UnixTime) -> bool {
        match rescan(conn, now).await {
            Ok(fresh) => {
                debug!(
                    event = "scan_floor_rescanned",
                    frontier = fresh.frontier,
                    below = fresh.below.len()
                );
                let mut state = self.state();
                *state = FloorState {
                    rescan_due: Some(now.saturating_add(RESCAN_EVERY)),
                    look_due: state.look_due,
                    ..fresh
                };
                true
            }
            Err(err) => {
                warn!(
                    event = "scan_floor_rescan_failed",
                    error = %err,
                    retry_in_s = RESCAN_RETRY,
                    "the scan floor could not be rebuilt; polls keep the floor they have \
                     (correct, perhaps slower) and the rescan is tried again later"
                );
                self.state().rescan_due = Some(now.saturating_add(RESCAN_RETRY));
                false
            }
        }
    }

    /// Step 1: forgets the ids in `below` that are no longer queued.
    async fn refresh(&self, conn: &mut Session) -> Result<(), MysqlError> {
        let asked = padded(&self.state().below);
        if asked.is_empty() {
            return Ok(());
        }
        let params: Vec<Value> = asked.iter().map(|id| Value::from(*id)).collect();
        let rows: Vec<Row> = conn
            .exec(sql::floor_still_queued_sql(asked.len()), params)
            .await?;
        let still = rows
            .into_iter()
            .map(|row| one_id(row, "scan floor refresh"))
            .collect::<Result<BTreeSet<u64>, _>>()?;
        let mut state = self.state();
        state
            .below
            .retain(|id| still.contains(id) || !asked.contains(id));
        Ok(())
    }

    /// Step 2: moves the frontier up past contiguous ids, a page at a time.
    async fn walk(&self, conn: &mut Session, now: UnixTime) -> Result<(), MysqlError> {
        let mut page = WALK_PAGE_FIRST;
        let mut read = 0;
        while read < WALK_ROWS_MAX {
            let from = self.state().frontier;
            let rows: Vec<Row> = conn
                .exec(
                    sql::FLOOR_WALK,
                    (from, u64::try_from(page).unwrap_or(u64::MAX)),
                )
                .await?;
            let rows = rows
                .into_iter()
                .map(walk_row)
                .collect::<Result<Vec<WalkRow>, _>>()?;
            read += rows.len();
            let mut state = self.state();
            if state.frontier != from {
                // Upkeep is serialised, so nothing else moves it meanwhile;
                // still, a page read from another frontier is never applied.
                return Ok(());
            }
            let more = apply_walk_page(&mut state, &rows, now) && rows.len() == page;
            drop(state);
            if !more {
                return Ok(());
            }
            page = (page * 2)
                .min(WALK_PAGE_MAX)
                .min(WALK_ROWS_MAX.saturating_sub(read));
        }
        Ok(())
    }
}

/// Step 3: the floor rebuilt from the table.
async fn rescan(conn: &mut Session, now: UnixTime) -> Result<FloorState, MysqlError> {
    let cutoff = now.saturating_sub(GAP_GRACE);
    let safe: Option<Row> = conn.exec_first(sql::FLOOR_SAFE_POINT, (cutoff,)).await?;
    let Some(safe) = safe else {
        // Nothing is that old: every row is in the range from 0.
        return Ok(FloorState::default());
    };
    let safe_point = one_id(safe, "scan floor safe point")?;
    let limit = u64::try_from(BELOW_MAX + 1).unwrap_or(u64::MAX);
    let rows: Vec<Row> = conn.exec(sql::FLOOR_RESCAN, (safe_point, limit)).await?;
    let queued = rows
        .into_iter()
        .map(|row| one_id(row, "scan floor rescan"))
        .collect::<Result<Vec<u64>, _>>()?;
    Ok(rescanned(safe_point, &queued))
}

/// The floor after a rescan: `queued` are the queued ids up to
/// `safe_point`, lowest first, at most one more than [`BELOW_MAX`].
fn rescanned(safe_point: u64, queued: &[u64]) -> FloorState {
    match queued.get(BELOW_MAX) {
        // More than fit: the range covers everything from the first left
        // out.
        Some(&first_left_out) => FloorState {
            frontier: first_left_out,
            below: queued[..BELOW_MAX].iter().copied().collect(),
            ..FloorState::default()
        },
        None => FloorState {
            frontier: safe_point.saturating_add(1),
            below: queued.iter().copied().collect(),
            ..FloorState::default()
        },
    }
}

/// Applies one walk page (rows from the frontier up, lowest id first);
/// whether the walk may read on.
fn apply_walk_page(state: &mut FloorState, rows: &[WalkRow], now: UnixTime) -> bool {
    let settled = now.saturating_sub(GAP_GRACE);
    for &(id, queued, created) in rows {
        if id < state.frontier {
            // Not what `id >= frontier` answers; believe nothing more.
            return false;
        }
        if id > state.frontier && created > settled {
            // A gap under a recent row: possibly an insert still to commit.
            return false;
        }
        if queued {
            if state.below.len() >= BELOW_MAX {
                state.frontier = id;
                return false;
            }
            state.below.insert(id);
        }
        state.frontier = id.saturating_add(1);
    }
    true
}

/// `below` as the statement lists it: empty, or padded (repeating the
/// highest id) to the next power of two.
fn padded(below: &BTreeSet<u64>) -> Vec<u64> {
    let Some(&last) = below.last() else {
        return Vec::new();
    };
    let length = below.len().next_power_of_two().max(below.len());
    let mut ids: Vec<u64> = below.iter().copied().collect();
    ids.resize(length, last);
    ids
}

fn one_id(row: Row, statement: &'static str) -> Result<u64, MysqlError> {
    mysql_async::from_row_opt::<u64>(row).map_err(|err| MysqlError::UnexpectedResult {
        statement,
        detail: format!("not an id: {:?}", err.0),
    })
}

fn walk_row(row: Row) -> Result<WalkRow, MysqlError> {
    let (id, queued, created) =
        mysql_async::from_row_opt::<(u64, u64, u64)>(row).map_err(|err| {
            MysqlError::UnexpectedResult {
                statement: "scan floor walk",
                detail: format!("not (id, queued, dateCreated): {:?}", err.0),
            }
        })?;
    Ok((id, queued == 1, created))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: UnixTime = 1_700_000_000;
    const OLD: UnixTime = NOW - GAP_GRACE;
    const FRESH: UnixTime = NOW - GAP_GRACE + 1;

    fn at(frontier: u64, below: &[u64]) -> FloorState {
        FloorState {
            frontier,
            below: below.iter().copied().collect(),
            ..FloorState::default()
        }
    }

    #[test]
    fn the_walk_moves_past_contiguous_rows_whatever_their_age() {
        let mut state = at(10, &[3]);
        let rows = [(10, false, FRESH), (11, true, FRESH), (12, false, NOW)];
        assert!(apply_walk_page(&mut state, &rows, NOW));
        assert_eq!(state, at(13, &[3, 11]));
    }

    #[test]
    fn a_gap_is_stepped_over_only_under_a_row_created_a_grace_ago() {
        let mut state = at(10, &[]);
        assert!(apply_walk_page(&mut state, &[(12, false, OLD)], NOW));
        assert_eq!(state.frontier, 13);

        let mut state = at(10, &[]);
        let rows = [(10, false, OLD), (12, true, FRESH), (13, false, OLD)];
        assert!(!apply_walk_page(&mut state, &rows, NOW));
        assert_eq!(state, at(11, &[]), "stops at the missing id");
    }

    #[test]
    fn the_first_gap_from_zero_follows_the_same_rule() {
        let mut state = FloorState::default();
        assert!(!apply_walk_page(&mut state, &[(1, false, NOW)], NOW));
        assert_eq!(state.frontier, 0);
        assert!(apply_walk_page(&mut state, &[(1, false, OLD)], NOW));
        assert_eq!(state.frontier, 2);
    }

    #[test]
    fn a_full_below_stops_the_walk_at_the_queued_row_that_did_not_fit() {
        let full: Vec<u64> = (0..BELOW_MAX as u64).collect();
        let first = BELOW_MAX as u64;
        let mut state = at(first, &full);
        let rows = [
            (first, false, OLD),
            (first + 1, true, OLD),
            (first + 2, false, OLD),
        ];
        assert!(!apply_walk_page(&mut state, &rows, NOW));
        assert_eq!(state.frontier, first + 1);
        assert_eq!(state.below.len(), BELOW_MAX);
    }

    #[test]
    fn a_row_below_the_frontier_stops_the_walk() {
        let mut state = at(10, &[]);
        assert!(!apply_walk_page(&mut state, &[(9, true, OLD)], NOW));
        assert_eq!(state, at(10, &[]));
    }

    #[test]
    fn a_rescan_starts_above_the_safe_point_or_at_the_first_left_out() {
        assert_eq!(rescanned(500, &[3, 40]), at(501, &[3, 40]));
        assert_eq!(rescanned(500, &[]), at(501, &[]));
        let many: Vec<u64> = (1..=BELOW_MAX as u64 + 1).collect();
        let state = rescanned(5_000, &many);
        assert_eq!(state.frontier, BELOW_MAX as u64 + 1);
        assert_eq!(state.below.len(), BELOW_MAX);
    }

    #[test]
    fn below_is_listed_in_a_few_lengths() {
        assert!(padded(&BTreeSet::new()).is_empty());
        assert_eq!(padded(&[7].into_iter().collect()), vec![7]);
        assert_eq!(padded(&[2, 9, 4].into_iter().collect()), vec![2, 4, 9, 9]);
        let full: BTreeSet<u64> = (0..BELOW_MAX as u64).collect();
        assert_eq!(padded(&full).len(), BELOW_MAX);
    }
}
