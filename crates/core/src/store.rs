//! The database ports, in the terms of protocol §4: `Store`, what the
//! dispatcher reads and writes to deliver (candidates, the claim, the
//! write-back, the hook, the breaker's count, claims in flight, the
//! per-hook lock), and `QueueCounts`, the counts the diagnostics API
//! reports (rows by status, hooks), which delivery never reads.
//! Implementations must obey the SQL's semantics exactly; the shared
//! conformance suite (`conformance` feature) holds them to it.

use std::fmt;

use async_trait::async_trait;

use crate::model::{Hook, RequestRow, UnixTime};
use crate::outcome::ResultWrite;
use crate::windows::Cutoffs;

/// Errors are boxed so each store keeps its own typed error as the source.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A store operation that did not complete.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The server could not be reached (or the connection broke). Shown
    /// with the source's text, a store's own error that says why (`ERROR
    /// 1040 (08004): Too many connections`, `connection error: Connection
    /// refused`) and carries no credentials: "database unavailable" alone
    /// told an operator nothing.
    #[error("database unavailable: {0}")]
    Unavailable(#[source] BoxError),
    /// The server answers but the database does not exist yet (Phorge has
    /// not run its storage upgrade).
    #[error("database {0} does not exist yet")]
    MissingDatabase(String),
    /// A statement failed. The source's text is shown (a store's own
    /// error, which names the server's error code and message and never
    /// carries credentials): "database query failed" alone left a failing
    /// write-back unexplained in the log.
    #[error("database query failed: {0}")]
    Query(#[source] BoxError),
    /// The server refused the database account something the operation
    /// needs: a privilege on a table, column, routine or database, or the
    /// login itself. Retrying cannot help until the grant is given (back);
    /// a store serves the next operation from a connection that sees the
    /// grants as they are then. Shown with the server's own words, the
    /// last link of the source chain ("UPDATE command denied to user …
    /// for table …"), which name what to grant and the account; a store
    /// leaves the client's host out of them, so they may reach an HTTP
    /// caller (the daemon's `/readyz` quotes them).
    #[error("database access denied: {}", innermost(.0))]
    Denied(#[source] BoxError),
    /// A row holds a value outside Phorge's domain.
    #[error("row {id} is malformed: {reason}")]
    MalformedRow {
        /// Row id.
        id: u64,
        /// What is wrong.
        reason: String,
    },
}

/// The last link of `err`'s source chain: a store's errors wrap the
/// driver's, whose innermost is what the server said.
fn innermost(err: &BoxError) -> &(dyn std::error::Error + 'static) {
    let mut deepest: &(dyn std::error::Error + 'static) = err.as_ref();
    while let Some(next) = deepest.source() {
        deepest = next;
    }
    deepest
}

/// The candidate query's parameters (protocol §4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CandidateQuery {
    /// Lease and retry cutoffs from one clock reading.
    pub cutoffs: Cutoffs,
    /// Rows to return at most, lowest id first.
    pub limit: usize,
    /// Hooks whose rows to leave out (their breaker is open or another
    /// deliverer holds them), so one stuck hook cannot fill every batch.
    pub exclude_hooks: Vec<String>,
}

/// Result of the compare-and-set claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Exactly one row changed: the caller owns the row, at this
    /// `dateModified` (the version the claim wrote), until someone else
    /// claims it after its lease. Every write of the claim's result is
    /// guarded by this version, so a deliverer paused past its lease can
    /// never write over a later claim's result.
    Won(UnixTime),
    /// Someone else changed the row first; send nothing.
    Lost,
}

/// Whether a guarded write landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// The row was updated.
    Yes,
    /// The guard (`status='queued' AND dateModified = expected`) did not
    /// match: someone else touched (or claimed) the row; nothing was
    /// written.
    Skipped,
}

/// Row counts by status, and hooks not `disabled` (the stats endpoint).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueStats {
    /// Rows with status `queued`.
    pub queued: u64,
    /// Rows with status `sent`.
    pub sent: u64,
    /// Rows with status `failed`.
    pub failed: u64,
    /// Hooks whose status is not exactly `disabled`.
    pub active_hooks: u64,
}

/// A due row and when it became due, for the lag gauge and the admin
/// tool's list of overdue rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueRow {
    /// The row's id.
    pub id: u64,
    /// The request's PHID.
    pub phid: String,
    /// Its hook's PHID.
    pub webhook_phid: String,
    /// When it became due ([`Cutoffs::due_since`](crate::windows::Cutoffs::due_since)).
    pub due_since: UnixTime,
}

/// A held per-hook lock. Release it explicitly; an implementation must also
/// free it when dropped unreleased (e.g. by closing its connection).
#[async_trait]
pub trait HookLock: Send + Sync + fmt::Debug {
    /// Frees the lock.
    async fn release(self: Box<Self>) -> Result<(), StoreError>;

    /// Whether this lock is still held by the session that took it. A
    /// named lock lives on one database session: if that session broke,
    /// the server freed the lock without telling anyone, and another
    /// deliverer may take it. Asked before every call, so a deliverer
    /// that lost its session stops calling the hook.
    async fn still_held(&mut self) -> Result<bool, StoreError>;
}

/// The queue table and hook table, as the dispatcher reads and writes
/// them to deliver.
#[async_trait]
pub trait Store: Send + Sync {
    /// Queued rows that are fresh or past their lease, and not waiting out a
    /// retry backoff, lowest id first (protocol §4's candidate query).
    async fn candidates(&self, query: &CandidateQuery) -> Result<Vec<RequestRow>, StoreError>;

    /// The table's highest id, 0 when it is empty: the wake-up probe the
    /// dispatcher reads between polls, so it must cost one primary-key
    /// entry. Phorge's `INSERT` raises it; a change is only a hint to poll
    /// now (an id committed after a higher one raises nothing, and waits
    /// for the next poll).
    async fn newest_id(&self) -> Result<u64, StoreError>;

    /// The compare-and-set claim: `dateModified = GREATEST(dateModified + 1,
    /// now)` where `id`, `status = 'queued'` and `dateModified = seen`;
    /// when won, the version it wrote.
    async fn claim(&self, id: u64, seen_version: UnixTime) -> Result<Claim, StoreError>;

    /// One UPDATE with the result of a processing step, setting
    /// `dateModified = GREATEST(dateModified + 1, write.date_modified)`,
    /// only onto a row still `queued` at `write.expected_version`.
    async fn write_result(&self, write: &ResultWrite) -> Result<Written, StoreError>;

    /// The hook row, if it exists.
    async fn hook(&self, phid: &str) -> Result<Option<Hook>, StoreError>;

    /// Rows of this hook with `lastRequestResult = 'fail'` and
    /// `lastRequestEpoch >= since` (rows, not attempts).
    async fn breaker_failures(&self, hook_phid: &str, since: UnixTime) -> Result<u64, StoreError>;

    /// Rows of this hook claimed within their lease (`dateModified >
    /// lease_cutoff`) whose result is not written yet: `queued`, moved from
    /// `dateCreated`, and `dateModified <> lastRequestEpoch` (an attempt's
    /// write-back stamps both alike). A deliverer that has just taken the
    /// hook's lock asks it before calling: if the last holder's session
    /// broke mid-call, its call may still be in flight, and the hook must
    /// wait for it.
    async fn claims_in_flight(
        &self,
        hook_phid: &str,
        lease_cutoff: UnixTime,
    ) -> Result<u64, StoreError>;

    /// Takes the per-hook serialisation without waiting; `None` when someone
    /// else (another daemon, a PHP worker) holds it.
    async fn lock_hook(&self, hook_phid: &str) -> Result<Option<Box<dyn HookLock>>, StoreError>;
}

/// The queue's and the hooks' counts, for the diagnostics API's stats
/// endpoint and `/metrics`: reads for people, which delivery never makes.
#[async_trait]
pub trait QueueCounts: Send + Sync {
    /// Rows by status, and hooks not `disabled`.
    async fn stats(&self) -> Result<QueueStats, StoreError>;

    /// All hooks, including disabled ones.
    async fn hook_count(&self) -> Result<u64, StoreError>;

    /// The rows [`Store::candidates`] would take for `query` (its limit
    /// and excluded hooks included, task adoption's gate left aside) that
    /// have been due longest: oldest [`DueRow::due_since`] first, then
    /// lowest id.
    async fn longest_due(&self, query: &CandidateQuery) -> Result<Vec<DueRow>, StoreError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot connect to the database server")]
    struct Wrapper(#[source] std::io::Error);

    /// A store's wrapper may keep the driver's text out of its own
    /// `Display`; the refusal still says what the server said.
    #[test]
    fn denied_shows_the_servers_words() {
        let err = StoreError::Denied(Box::new(Wrapper(std::io::Error::other(
            "ERROR 1044 (42000): Access denied for user 'wh'@'%' to database 'x_herald'",
        ))));
        assert_eq!(
            err.to_string(),
            "database access denied: ERROR 1044 (42000): Access denied for user 'wh'@'%' to \
             database 'x_herald'"
        );
        let alone = StoreError::Denied("UPDATE command denied".into());
        assert_eq!(
            alone.to_string(),
            "database access denied: UPDATE command denied"
        );
    }
}
