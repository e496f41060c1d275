//! The exact statement texts the store prepares (protocol §4 and §8). Public so
//! tests and the admin tool can `EXPLAIN` precisely what runs; nothing else
//! in the crate writes SQL against Phorge's tables.
//!
//! Every value is a `?` placeholder; the only text ever assembled at run
//! time is the number of placeholders in a list (excluded hooks, listed
//! transactions), the validated namespace and the constant application
//! names and tables of the statements that reach Phorge's other
//! databases, and
//! [`inline`], which the group commit uses to send several of these
//! statements in one round trip: it puts numbers as digits and text as hex
//! literals in place of the `?`s, so no byte of a value is ever read as SQL.

use webhook_core::adoption::YIELD_OWNER;
/// The task class and the owner prefix the task statements name.
pub use webhook_core::adoption::{DAEMON_LEASE_PREFIX, WEBHOOK_TASK_CLASS};
use webhook_core::windows::Cutoffs;

use crate::object_tables::ObjectTables;

#[cfg(feature = "statements")]
/// The columns of a request row, in the order the row mapping reads them.
pub const REQUEST_SELECT_LIST: &str = "id, phid, webhookPHID, objectPHID, status, properties, \
     lastRequestResult, lastRequestEpoch, dateCreated, dateModified";

/// The candidate query's columns: [`REQUEST_SELECT_LIST`]'s, except that
/// `properties` comes only when its length is within the inline limit (the
/// first parameter; NULL otherwise), and `LENGTH(properties)` last, so a
/// poll can bound its bytes and fetch larger rows one at a time
/// ([`CANDIDATE_PROPERTIES`]).
pub const CANDIDATE_SELECT_LIST: &str = "id, phid, webhookPHID, objectPHID, status, \
     IF(LENGTH(properties) <= ?, properties, NULL), \
     lastRequestResult, lastRequestEpoch, dateCreated, dateModified, LENGTH(properties)";

#[cfg(feature = "statements")]
/// The candidate query for a given number of excluded hooks, exactly as
/// protocol §4 writes it. Parameters: the inline limit of
/// [`CANDIDATE_SELECT_LIST`], `lease_cutoff`, `retry_cutoff`, then one
/// hook PHID per exclusion, then the limit.
///
/// `dateModified = dateCreated` lets a fresh row through at once;
/// `key_status (status, id)` serves both the filter and the order. The
/// store runs [`candidate_sql_above_floor`]; this form is what `EXPLAIN`s,
/// the bench and the admin tool compare it with.
pub fn candidate_sql(excluded_hooks: usize) -> String {
    candidate_statement(excluded_hooks, None, 0)
}

/// The candidate query the store runs: [`candidate_sql`]'s predicate,
/// only over ids at or above the scan floor's frontier or among the
/// `below` ids it remembers as queued (`queued_floor`), so
/// without `key_status` it is a primary-key range from the frontier
/// instead of a walk over every retained row. Parameters: the inline
/// limit, the frontier, `below` ids (none when `below` is 0), then as
/// [`candidate_sql`]: `lease_cutoff`, `retry_cutoff`, the excluded hooks,
/// then `excluded_rows` row ids to leave out (rows task adoption leaves to
/// PHP for now, [`webhook_core::adoption`]), the limit.
pub fn candidate_sql_above_floor(
    excluded_hooks: usize,
    below: usize,
    excluded_rows: usize,
) -> String {
    candidate_statement(excluded_hooks, Some(below), excluded_rows)
}

/// The one text of the candidate predicate; `floor` adds the scan floor's
/// restriction with that many `below` placeholders, `excluded_rows` that
/// many row ids left out.
fn candidate_statement(
    excluded_hooks: usize,
    floor: Option<usize>,
    excluded_rows: usize,
) -> String {
    let predicate = candidate_predicate(excluded_hooks, floor, excluded_rows);
    format!(
        "SELECT {CANDIDATE_SELECT_LIST}\n  FROM herald_webhookrequest\n WHERE {predicate}\n \
         ORDER BY id ASC\n LIMIT ?"
    )
}

/// The `WHERE` clause of [`candidate_statement`]. Parameters: the floor's
/// (if any), `lease_cutoff`, `retry_cutoff`, the excluded hooks, the
/// excluded rows.
fn candidate_predicate(
    excluded_hooks: usize,
    floor: Option<usize>,
    excluded_rows: usize,
) -> String {
    let mut exclusion = if excluded_hooks == 0 {
        String::new()
    } else {
        format!("\n   AND webhookPHID NOT IN ({})", marks(excluded_hooks))
    };
    if excluded_rows > 0 {
        exclusion.push_str(&format!("\n   AND id NOT IN ({})", marks(excluded_rows)));
    }
    let floor = match floor {
        None => String::new(),
        Some(0) => "id >= ?\n   AND ".to_owned(),
        Some(below) => format!("(id >= ? OR id IN ({}))\n   AND ", marks(below)),
    };
    format!(
        "{floor}status = 'queued'\n   \
         AND (dateModified = dateCreated OR dateModified <= ?)\n   \
         AND (lastRequestResult <> 'fail' OR lastRequestEpoch <= ?){exclusion}"
    )
}

/// [`candidate_predicate`]'s parameters, in its placeholders' order: the
/// scan floor's frontier and `below` ids, the cutoffs, the excluded hooks
/// and rows.
pub(crate) fn candidate_predicate_params(
    frontier: u64,
    below: &[u64],
    cutoffs: &Cutoffs,
    exclude_hooks: &[String],
    exclude_rows: &[u64],
) -> Vec<mysql_async::Value> {
    use mysql_async::Value;
    let mut params = Vec::with_capacity(below.len() + exclude_hooks.len() + exclude_rows.len() + 3);
    params.push(Value::from(frontier));
    params.extend(below.iter().map(|id| Value::from(*id)));
    params.push(cutoffs.lease_cutoff.into());
    params.push(cutoffs.retry_cutoff.into());
    params.extend(exclude_hooks.iter().map(|h| Value::from(h.as_str())));
    params.extend(exclude_rows.iter().map(|id| Value::from(*id)));
    params
}

/// When a candidate became due, as `Cutoffs::due_since` works it out: the
/// later of its creation (fresh) or its claim's end (`dateModified` plus
/// the lease, the first parameter), and its failed attempt's backoff end
/// (`lastRequestEpoch` plus the backoff, the second).
const DUE_SINCE: &str = "GREATEST(IF(dateModified = dateCreated, dateCreated, dateModified + ?), \
     IF(lastRequestResult = 'fail', lastRequestEpoch + ?, 0))";

/// The candidates that have been due longest (`QueueCounts::longest_due`),
/// over the scan floor as the poll reads it: each row's id, PHID, hook and
/// when it became due, oldest first. Parameters: the lease and the backoff
/// (seconds), then [`candidate_predicate`]'s with the floor's `below`
/// count, then the limit.
pub fn longest_due_sql(excluded_hooks: usize, below: usize) -> String {
    let predicate = candidate_predicate(excluded_hooks, Some(below), 0);
    format!(
        "SELECT id, phid, webhookPHID, {DUE_SINCE} AS dueSince\n  FROM herald_webhookrequest\n \
         WHERE {predicate}\n ORDER BY dueSince ASC, id ASC\n LIMIT ?"
    )
}

/// `count` comma-separated placeholders.
fn marks(count: usize) -> String {
    vec!["?"; count].join(", ")
}

/// The scan floor's refresh: which of the `count` listed ids (ids below
/// the frontier last seen queued) are still `queued`. A primary-key
/// lookup per id. Parameters: the ids.
pub fn floor_still_queued_sql(count: usize) -> String {
    format!(
        "SELECT id FROM herald_webhookrequest WHERE id IN ({}) AND status = 'queued'",
        marks(count)
    )
}

/// One page of the scan floor's walk up the primary key: each row's id,
/// whether it is queued (1 or 0) and its `dateCreated`, lowest id first.
/// Parameters: the first id, the page size.
pub const FLOOR_WALK: &str = "SELECT id, status = 'queued', dateCreated \
     FROM herald_webhookrequest WHERE id >= ? ORDER BY id ASC LIMIT ?";

/// The scan floor's safe point: the row created last at or before the
/// cutoff (ties: the highest id), read backwards on `key_collect
/// (dateCreated)`, one entry. Parameter: the cutoff.
pub const FLOOR_SAFE_POINT: &str = "SELECT id FROM herald_webhookrequest \
     WHERE dateCreated <= ? ORDER BY dateCreated DESC, id DESC LIMIT 1";

/// The scan floor's full rescan: queued ids up to the safe point, lowest
/// first. Without `key_status` this one statement walks the primary key
/// over the retained rows (an old-style poll's cost), once per rescan
/// period. Parameters: the safe point, how many at most.
pub const FLOOR_RESCAN: &str = "SELECT id FROM herald_webhookrequest \
     WHERE id <= ? AND status = 'queued' ORDER BY id ASC LIMIT ?";

/// The hooks the scan floor's look ranges over ([`floor_requeued_sql`]).
pub const FLOOR_HOOKS: &str = "SELECT phid FROM herald_webhook ORDER BY id ASC";

/// The scan floor's look for rows set back to `queued` recently below the
/// frontier (`webhook-admin requeue` writes `none` and the server's now)
/// for `hooks` listed hooks: one short range of `key_ratelimit
/// (webhookPHID, lastRequestResult, lastRequestEpoch)` per hook, so it
/// reads the matching rows, not the table. (A join from `herald_webhook`
/// is a `ref` on the first two columns instead, and reads every `none`
/// row of the hook, its hook errors included.) A fresh row of PHP's
/// (`none`, epoch 0) is never in the range; a row whose hook is gone is
/// left to the rescan. Parameters: the hook PHIDs, the window's start,
/// the frontier, how many at most.
pub fn floor_requeued_sql(hooks: usize) -> String {
    format!(
        "SELECT id FROM herald_webhookrequest WHERE webhookPHID IN ({}) \
         AND lastRequestResult = 'none' AND lastRequestEpoch >= ? \
         AND status = 'queued' AND id < ? ORDER BY id ASC LIMIT ?",
        marks(hooks)
    )
}

/// The `properties` of one candidate too long to come inline, fetched
/// alone, only while the row is still at the version the candidate query
/// saw (no row: it changed since, and is no longer this poll's candidate).
/// Parameters: id, the version seen.
pub const CANDIDATE_PROPERTIES: &str =
    "SELECT properties FROM herald_webhookrequest WHERE id = ? AND dateModified = ?";

/// The compare-and-set claim. Parameters: `id`, the version seen.
///
/// `+ 1` is load-bearing: `dateModified` has one-second resolution, so a
/// claim in the insert's (or a previous claim's) second would otherwise
/// leave the version unchanged and let a second claimer win too.
///
/// `LAST_INSERT_ID(…)` hands the version written back in the statement's
/// own OK packet (no second round trip, and nothing else about the row
/// changes): every write of the claim's result is then guarded by it.
pub const CLAIM: &str = "UPDATE herald_webhookrequest \
     SET dateModified = LAST_INSERT_ID(GREATEST(dateModified + 1, UNIX_TIMESTAMP())) \
     WHERE id = ? AND status = 'queued' AND dateModified = ?";

/// The write-back of a processing step. Parameters: status,
/// lastRequestResult, lastRequestEpoch, the write's time, properties, id,
/// and the version the write expects.
///
/// `GREATEST(dateModified + 1, ?)`: a result written in the claim's second
/// must still move the version, or a failed row would look fresh again.
/// The guard lands it only on a row still queued at the version its
/// decision was based on — after a claim, the one the claim wrote — so a
/// result never overwrites a later claim's.
pub const WRITE_RESULT: &str = "UPDATE herald_webhookrequest \
     SET status = ?, lastRequestResult = ?, lastRequestEpoch = ?, \
     dateModified = GREATEST(dateModified + 1, ?), properties = ? \
     WHERE id = ? AND status = 'queued' AND dateModified = ?";

/// One hook by PHID.
pub const HOOK: &str = "SELECT id, phid, name, webhookURI, status, hmacKey \
     FROM herald_webhook WHERE phid = ?";

/// The circuit breaker's count: failed rows (not attempts) of one hook in
/// the window, served by `key_ratelimit`. Parameters: hook PHID, window start.
pub const BREAKER_FAILURES: &str = "SELECT COUNT(*) FROM herald_webhookrequest \
     WHERE webhookPHID = ? AND lastRequestResult = 'fail' AND lastRequestEpoch >= ?";

/// Rows of one hook claimed within their lease and not written since
/// (`Store::claims_in_flight`). Parameters: hook PHID, lease cutoff.
/// `lastRequestResult IN ('none', 'fail')` keeps the scan of `key_ratelimit`
/// to the hook's unsent and failed rows, never its delivered history.
pub const CLAIMS_IN_FLIGHT: &str = "SELECT COUNT(*) FROM herald_webhookrequest \
     WHERE webhookPHID = ? AND lastRequestResult IN ('none', 'fail') \
     AND status = 'queued' AND dateModified > ? \
     AND dateModified <> dateCreated AND dateModified <> lastRequestEpoch";

/// Row counts by status and hooks not `disabled`, in one round trip; each
/// status count is an index range count on `key_status`.
pub const STATS: &str = "SELECT \
     (SELECT COUNT(*) FROM herald_webhookrequest WHERE status = 'queued'), \
     (SELECT COUNT(*) FROM herald_webhookrequest WHERE status = 'sent'), \
     (SELECT COUNT(*) FROM herald_webhookrequest WHERE status = 'failed'), \
     (SELECT COUNT(*) FROM herald_webhook WHERE status <> 'disabled')";

/// The wake-up probe: the request table's highest id (0 when empty). The
/// server answers it from the primary key's last entry, whatever the
/// table's size.
pub const NEWEST_ID: &str = "SELECT COALESCE(MAX(id), 0) FROM herald_webhookrequest";

/// Every hook, disabled ones included.
pub const HOOK_COUNT: &str = "SELECT COUNT(*) FROM herald_webhook";

/// The hooks whose locks task adoption keeps: every hook Phorge's worker
/// would call (a disabled hook's requests it fails before its lock).
pub const CALLABLE_HOOKS: &str =
    "SELECT id, phid FROM herald_webhook WHERE status <> 'disabled' ORDER BY id ASC";

/// Takes the per-hook lock without waiting: 1 taken, 0 held elsewhere,
/// NULL on a server error. Parameter: the lock name.
pub const GET_LOCK: &str = "SELECT GET_LOCK(?, 0)";

/// Frees the per-hook lock: 1 freed, 0 held by another session, NULL not
/// held at all. Parameter: the lock name.
pub const RELEASE_LOCK: &str = "SELECT RELEASE_LOCK(?)";

/// Columns of the two tables. Parameter: the database.
pub const SCHEMA_COLUMNS: &str = "SELECT TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS \
     WHERE TABLE_SCHEMA = ? AND TABLE_NAME IN ('herald_webhookrequest', 'herald_webhook')";

/// The columns of `key_status`, in index order. Parameter: the database.
pub const STATUS_INDEX_COLUMNS: &str = "SELECT COLUMN_NAME FROM information_schema.STATISTICS \
     WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'herald_webhookrequest' \
     AND INDEX_NAME = 'key_status' ORDER BY SEQ_IN_INDEX";

// Read-only statements for the operator's tool (`webhook-admin`). None of
// them writes or locks anything: they answer "why is this row waiting?"
// with the same columns and windows the dispatcher judges by.

/// One request row by primary key, with [`REQUEST_SELECT_LIST`].
/// Parameter: the id.
pub const REQUEST_BY_ID: &str = "SELECT id, phid, webhookPHID, objectPHID, status, properties, \
     lastRequestResult, lastRequestEpoch, dateCreated, dateModified \
     FROM herald_webhookrequest WHERE id = ?";

/// One request row by its `PHID-HWBR-…` (unique `key_phid`), with
/// [`REQUEST_SELECT_LIST`]. Parameter: the PHID.
pub const REQUEST_BY_PHID: &str = "SELECT id, phid, webhookPHID, objectPHID, status, properties, \
     lastRequestResult, lastRequestEpoch, dateCreated, dateModified \
     FROM herald_webhookrequest WHERE phid = ?";

/// Every hook (no `hmacKey`: the tool never needs to show one) with its
/// queued and failed row counts and the breaker's count of failed rows in
/// the window, lowest id first. Each count is a prefix range on
/// `key_ratelimit (webhookPHID, …)`. Parameter: the window start, as for
/// [`BREAKER_FAILURES`].
pub const HOOK_SUMMARIES: &str = "SELECT h.id, h.phid, h.name, h.webhookURI, h.status, \
     (SELECT COUNT(*) FROM herald_webhookrequest r \
       WHERE r.webhookPHID = h.phid AND r.status = 'queued'), \
     (SELECT COUNT(*) FROM herald_webhookrequest r \
       WHERE r.webhookPHID = h.phid AND r.status = 'failed'), \
     (SELECT COUNT(*) FROM herald_webhookrequest r \
       WHERE r.webhookPHID = h.phid AND r.lastRequestResult = 'fail' \
       AND r.lastRequestEpoch >= ?) \
     FROM herald_webhook h ORDER BY h.id ASC";

/// The `lastRequestEpoch` of every row [`BREAKER_FAILURES`] counts, oldest
/// first (served by `key_ratelimit`), so the admin tool can say when enough
/// of them slide out of the window for the breaker to close. Parameters:
/// hook PHID, window start.
pub const BREAKER_FAILURE_EPOCHS: &str = "SELECT lastRequestEpoch FROM herald_webhookrequest \
     WHERE webhookPHID = ? AND lastRequestResult = 'fail' AND lastRequestEpoch >= ? \
     ORDER BY lastRequestEpoch ASC";

/// The queued rows of one hook below a given id, lowest id first, with
/// [`REQUEST_SELECT_LIST`]: the rows a run of that hook reaches before
/// the given one, for `webhook-admin explain` (a run the hook's pause or
/// breaker stops at an earlier row never reaches it). Parameters: hook
/// PHID, the id, how many at most.
pub const QUEUED_BEFORE: &str = "SELECT id, phid, webhookPHID, objectPHID, status, properties, \
     lastRequestResult, lastRequestEpoch, dateCreated, dateModified \
     FROM herald_webhookrequest WHERE webhookPHID = ? AND status = 'queued' AND id < ? \
     ORDER BY id ASC LIMIT ?";

// `webhook-admin requeue`, the tool's one writing command: these are all
// `MysqlRequeue` runs ([`REQUEUE_STATEMENTS`]).

/// One page of final failures, lowest id first, with
/// [`REQUEST_SELECT_LIST`]. Parameters: the last id of the previous page
/// (0 at first), the page size. `key_status (status, id)` serves it where
/// the hand-off patch added it; on the stock schema it walks the primary
/// key a page at a time.
pub const FAILED_PAGE: &str = "SELECT id, phid, webhookPHID, objectPHID, status, properties, \
     lastRequestResult, lastRequestEpoch, dateCreated, dateModified \
     FROM herald_webhookrequest WHERE status = 'failed' AND id > ? ORDER BY id ASC LIMIT ?";

/// Puts a final failure back in the queue in Phorge's own values, as a
/// compare-and-set on the state it was read in: exactly one changed row is
/// a requeue, none a row that changed meanwhile (left alone). Parameters:
/// id, then the `dateModified`, `lastRequestResult` and
/// `lastRequestEpoch` read.
///
/// `properties` stay as the last attempt left them (errorType/errorCode),
/// as on a `retry=forever` row waiting for its retry. `lastRequestEpoch`
/// is the server's now, so the scan floor's look
/// finds the row below the frontier ([`floor_requeued_sql`]); with `dateModified` bumped as a
/// claim bumps it the row is not fresh, and the candidate query takes it
/// once the claim lease has passed.
pub const REQUEUE: &str = "UPDATE herald_webhookrequest \
     SET status = 'queued', lastRequestResult = 'none', lastRequestEpoch = UNIX_TIMESTAMP(), \
     dateModified = GREATEST(dateModified + 1, UNIX_TIMESTAMP()) \
     WHERE id = ? AND status = 'failed' AND dateModified = ? \
     AND lastRequestResult = ? AND lastRequestEpoch = ?";

#[cfg(feature = "statements")]
/// Every statement `MysqlRequeue` runs: its one write and the reads that
/// choose the rows.
pub const REQUEUE_STATEMENTS: [&str; 4] = [REQUEST_BY_ID, REQUEST_BY_PHID, FAILED_PAGE, REQUEUE];

/// The session holding a named lock, NULL when free; takes nothing.
/// Parameter: the lock name.
pub const IS_USED_LOCK: &str = "SELECT IS_USED_LOCK(?)";

/// Whether the asking session still holds a named lock (1), or not (0);
/// run on the holding connection before each call. Parameter: the name.
pub const LOCK_STILL_HELD: &str = "SELECT IS_USED_LOCK(?) <=> CONNECTION_ID()";

/// Where Phorge keeps its database-stored configuration, `database.table`
/// for `namespace`.
pub fn config_entry_table(namespace: &str) -> String {
    format!("{namespace}_config.config_entry")
}

/// Phorge's task queue (`worker_activetask`), `database.table` for
/// `namespace`.
pub fn task_queue_table(namespace: &str) -> String {
    format!("{namespace}_worker.worker_activetask")
}

/// Phorge's global silent mode from its database-stored configuration,
/// for `namespace` (validated: no quoting characters). No row = off.
pub fn silent_mode(namespace: &str) -> String {
    format!(
        "SELECT value FROM `{namespace}_config`.config_entry \
         WHERE namespace = 'default' AND configKey = 'phabricator.silent' AND isDeleted = 0"
    )
}

/// [`webhook_core::adoption::TaskLease::adoptable`] in SQL, on the
/// server's clock: no owner, a yield, or a lapsed lease.
const TASK_ADOPTABLE: &str =
    "(leaseOwner IS NULL OR leaseOwner = '(yield)' OR leaseExpires < UNIX_TIMESTAMP())";

/// [`webhook_core::adoption::TaskLease::runnable_by_php`] in SQL: what a
/// taskmaster's lease query could take now (no owner, or a lapsed lease).
const TASK_RUNNABLE_BY_PHP: &str = "(leaseOwner IS NULL OR leaseExpires < UNIX_TIMESTAMP())";

/// `HeraldWebhookWorker` tasks in Phorge's task queue for `namespace`
/// (validated: no quoting characters): runnable by PHP's taskmasters now,
/// leased on PHP's side (a taskmaster's lease, or a yield not yet due),
/// and leased by a daemon instance.
pub fn php_delivery_tasks(namespace: &str) -> String {
    format!(
        "SELECT COALESCE(SUM({TASK_RUNNABLE_BY_PHP}), 0), \
         COALESCE(SUM(NOT {TASK_RUNNABLE_BY_PHP} AND leaseOwner NOT LIKE '{DAEMON_LEASE_PREFIX}%'), 0), \
         COALESCE(SUM(NOT {TASK_RUNNABLE_BY_PHP} AND leaseOwner LIKE '{DAEMON_LEASE_PREFIX}%'), 0) \
         FROM `{namespace}_worker`.worker_activetask WHERE taskClass = '{WEBHOOK_TASK_CLASS}'"
    )
}

/// Of the last `?` archived webhook tasks, how many ended under a daemon's
/// lease, and how many in all (the rest a taskmaster ran).
pub fn recent_task_runners(namespace: &str) -> String {
    format!(
        "SELECT COALESCE(SUM(leaseOwner LIKE '{DAEMON_LEASE_PREFIX}%'), 0), COUNT(*) \
         FROM (SELECT leaseOwner FROM `{namespace}_worker`.worker_archivetask \
         WHERE taskClass = '{WEBHOOK_TASK_CLASS}' ORDER BY id DESC LIMIT ?) recent"
    )
}

/// Up to `?` adoptable webhook tasks, lowest id first, each with whether
/// it is a yield (1 or 0). Parameters: the
/// limit.
pub fn tasks_adoptable(namespace: &str) -> String {
    format!(
        "SELECT id, leaseOwner <=> '{YIELD_OWNER}' AS yielded \
         FROM `{namespace}_worker`.worker_activetask \
         WHERE taskClass = '{WEBHOOK_TASK_CLASS}' AND {TASK_ADOPTABLE} ORDER BY id LIMIT ?"
    )
}

/// The server's clock, which Phorge's task protocol runs on.
pub const SERVER_NOW: &str = "SELECT UNIX_TIMESTAMP()";

/// The server's clock to the microsecond: `UNIX_TIMESTAMP()` and the
/// microseconds of `NOW(6)`. The server takes both from the statement's
/// start time (the instant a claim's `UNIX_TIMESTAMP()` reads too), so
/// they name one instant however long the statement runs; neither depends
/// on the session's time zone (`UNIX_TIMESTAMP()` is UTC, and no zone's
/// offset has a fraction of a second). `UNIX_TIMESTAMP(NOW(6))` would
/// convert a local time back through the zone, which is ambiguous in the
/// hour a daylight-saving change repeats.
pub const SERVER_TIME: &str = "SELECT UNIX_TIMESTAMP(), MICROSECOND(NOW(6))";

/// Up to `?` webhook tasks with no owner at all, lowest id first: what
/// Phorge queues, found through `key_owner` without reading the leased
/// ones, for the frequent sweep. Parameters: the limit.
pub fn tasks_unleased(namespace: &str) -> String {
    format!(
        "SELECT id FROM `{namespace}_worker`.worker_activetask \
         WHERE leaseOwner IS NULL AND taskClass = '{WEBHOOK_TASK_CLASS}' ORDER BY id LIMIT ?"
    )
}

/// Leases the listed tasks that are still adoptable: the compare-and-set
/// against Phorge's taskmasters, whose own lease re-checks the owner it
/// saw. Parameters: the owner, the lease in seconds, then `count` ids.
pub fn tasks_adopt(namespace: &str, count: usize) -> String {
    format!(
        "UPDATE `{namespace}_worker`.worker_activetask \
         SET leaseOwner = ?, leaseExpires = UNIX_TIMESTAMP() + ? \
         WHERE id IN ({}) AND taskClass = '{WEBHOOK_TASK_CLASS}' AND {TASK_ADOPTABLE}",
        marks(count)
    )
}

/// Hands back one instance's leases: no owner (what a taskmaster's lease
/// query takes first), expiring now. Parameter: the owner pattern
/// (`prefix%`; an instance's prefix holds no `LIKE` wildcard).
pub fn tasks_release(namespace: &str) -> String {
    format!(
        "UPDATE `{namespace}_worker`.worker_activetask \
         SET leaseOwner = NULL, leaseExpires = UNIX_TIMESTAMP() \
         WHERE leaseOwner LIKE ? AND taskClass = '{WEBHOOK_TASK_CLASS}'"
    )
}

/// Extends the daemon leases (every instance's: the owner pattern) that
/// end within the renewal window and have not ended: a lapsed lease is never extended (it is adopted again,
/// under a new owner). Parameters: the lease in seconds, the owner
/// pattern (`prefix%`), the renewal window in seconds.
pub fn tasks_renew(namespace: &str) -> String {
    format!(
        "UPDATE `{namespace}_worker`.worker_activetask \
         SET leaseExpires = UNIX_TIMESTAMP() + ? \
         WHERE leaseOwner LIKE ? AND taskClass = '{WEBHOOK_TASK_CLASS}' \
         AND leaseExpires >= UNIX_TIMESTAMP() AND leaseExpires < UNIX_TIMESTAMP() + ?"
    )
}

/// Daemon-leased tasks whose request is no longer queued (or gone),
/// with the request's status and `properties` (NULL when gone), lowest
/// task id first. Runs in the herald database. Parameters: the owner
/// pattern (`prefix%`), the limit.
pub fn tasks_ended(namespace: &str) -> String {
    format!(
        "SELECT t.id, r.status, r.properties FROM `{namespace}_worker`.worker_activetask t \
         LEFT JOIN herald_webhookrequest r ON r.phid = t.objectPHID \
         WHERE t.leaseOwner LIKE ? AND t.taskClass = '{WEBHOOK_TASK_CLASS}' \
         AND (r.id IS NULL OR r.status <> 'queued') ORDER BY t.id LIMIT ?"
    )
}

/// The webhook tasks of the listed requests: the request's PHID, the
/// task's id, its `leaseOwner` and the seconds left of its lease (its
/// `leaseExpires` minus the server's now). Parameters: `count` request
/// PHIDs.
pub fn tasks_of_requests(namespace: &str, count: usize) -> String {
    format!(
        "SELECT objectPHID, id, leaseOwner, CAST(leaseExpires AS SIGNED) - UNIX_TIMESTAMP() \
         FROM `{namespace}_worker`.worker_activetask \
         WHERE objectPHID IN ({}) AND taskClass = '{WEBHOOK_TASK_CLASS}'",
        marks(count)
    )
}

/// Inside the archive's transaction: which listed tasks a daemon instance
/// still leases, locked until the commit. Parameters: the owner pattern,
/// then `count` ids.
pub fn tasks_lock_ours(namespace: &str, count: usize) -> String {
    format!(
        "SELECT id FROM `{namespace}_worker`.worker_activetask \
         WHERE leaseOwner LIKE ? AND taskClass = '{WEBHOOK_TASK_CLASS}' AND id IN ({}) FOR UPDATE",
        marks(count)
    )
}

/// Copies the listed tasks into the archive as Phorge archives a task:
/// the same id, the lease as it stood, the result, a duration (µs; the
/// call's own is not known here, so 0 as Phorge writes for a permanent
/// failure), `archivedEpoch` and `dateModified` now. Parameters: the
/// result, then `count` ids.
pub fn tasks_archive(namespace: &str, count: usize) -> String {
    format!(
        "INSERT INTO `{namespace}_worker`.worker_archivetask \
         (id, taskClass, leaseOwner, leaseExpires, failureCount, dataID, priority, objectPHID, \
         dateCreated, dateModified, result, duration, archivedEpoch) \
         SELECT id, taskClass, leaseOwner, leaseExpires, failureCount, dataID, priority, objectPHID, \
         dateCreated, UNIX_TIMESTAMP(), ?, 0, UNIX_TIMESTAMP() \
         FROM `{namespace}_worker`.worker_activetask WHERE id IN ({})",
        marks(count)
    )
}

/// Removes the listed (archived) tasks from the active queue.
/// Parameters: `count` ids.
pub fn tasks_remove(namespace: &str, count: usize) -> String {
    format!(
        "DELETE FROM `{namespace}_worker`.worker_activetask WHERE id IN ({})",
        marks(count)
    )
}

/// Removes one task a daemon instance leases from the active queue (its
/// archive row is there already). Parameters: the id, the owner pattern.
pub fn task_remove_if_daemon_leased(namespace: &str) -> String {
    format!(
        "DELETE FROM `{namespace}_worker`.worker_activetask \
         WHERE id = ? AND leaseOwner LIKE ? AND taskClass = '{WEBHOOK_TASK_CLASS}'"
    )
}

/// One privilege a statement the daemon runs needs: the statement itself,
/// with values that match no row, and what to name when the server
/// refuses it. The check runs it under `EXPLAIN` (`crate::grants`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantProbe {
    /// The privilege as `GRANT` names it: `SELECT`, `UPDATE`, …
    pub privilege: &'static str,
    /// `database.table`.
    pub table: String,
    /// The statement.
    pub statement: String,
}

impl GrantProbe {
    fn new(privilege: &'static str, table: String, statement: Option<String>) -> Self {
        Self {
            privilege,
            table,
            // `inline` fails only on a wrong count of values, which the
            // tests rule out; an empty statement would fail the check.
            statement: statement.unwrap_or_default(),
        }
    }
}

/// What delivery needs of the account, as the statements it runs on
/// `{namespace}_herald`: the candidate query (`SELECT` on every column of
/// the request table), the claim and the write-back (`UPDATE` on the
/// columns they set), the hook's lookup (`SELECT` on the hook table).
/// The values match no row: Phorge's ids start at 1 and no hook has an
/// empty PHID.
pub fn delivery_grant_probes(namespace: &str) -> Vec<GrantProbe> {
    use Literal::{Number, Text};
    let requests = format!("{namespace}_herald.herald_webhookrequest");
    let hooks = format!("{namespace}_herald.herald_webhook");
    vec![
        GrantProbe::new(
            "SELECT",
            requests.clone(),
            inline(&candidate_sql_above_floor(0, 0, 0), &[Number(0); 5]),
        ),
        GrantProbe::new("UPDATE", requests.clone(), inline(CLAIM, &[Number(0); 2])),
        GrantProbe::new(
            "UPDATE",
            requests,
            inline(
                WRITE_RESULT,
                &[
                    Text("sent"),
                    Text("pass"),
                    Number(0),
                    Number(0),
                    Text("{}"),
                    Number(0),
                    Number(0),
                ],
            ),
        ),
        GrantProbe::new("SELECT", hooks, inline(HOOK, &[Text("")])),
    ]
}

/// What task adoption needs of the account, as statements over ids and
/// conditions that match no task.
pub fn adoption_grant_probes(namespace: &str) -> Vec<GrantProbe> {
    let active = format!("`{namespace}_worker`.worker_activetask");
    let active_table = task_queue_table(namespace);
    // The archive statement itself, over an id Phorge never gives (its
    // counters start at 1): the columns it reads and writes are checked.
    let archive = inline(
        &tasks_archive(namespace, 1),
        &[Literal::Number(0), Literal::Number(0)],
    );
    vec![
        GrantProbe::new(
            "SELECT",
            active_table.clone(),
            Some(format!(
                "SELECT id, taskClass, leaseOwner, leaseExpires, failureCount, dataID, priority, \
                 objectPHID, dateCreated FROM {active} LIMIT 0"
            )),
        ),
        GrantProbe::new(
            "UPDATE",
            active_table.clone(),
            Some(format!(
                "UPDATE {active} SET leaseOwner = NULL, leaseExpires = NULL WHERE 1 = 0"
            )),
        ),
        GrantProbe::new(
            "DELETE",
            active_table,
            Some(format!("DELETE FROM {active} WHERE 1 = 0")),
        ),
        GrantProbe::new(
            "INSERT",
            format!("{namespace}_worker.worker_archivetask"),
            archive,
        ),
    ]
}

/// Whether a request's object exists, and which of the listed
/// transactions exist on it, newest first, for `namespace` (validated: no
/// quoting characters) and an object type's tables. Parameters: the
/// `listed` transaction PHIDs, then the object PHID. No row: the object is
/// gone; one row holding NULL: it exists with none of them.
pub fn object_transactions(namespace: &str, tables: &ObjectTables, listed: usize) -> String {
    let ObjectTables {
        object_application,
        object_table,
        transaction_application,
        transaction_table,
        ..
    } = tables;
    let objects = format!("`{namespace}_{object_application}`.`{object_table}`");
    if listed == 0 {
        return format!("SELECT NULL FROM {objects} WHERE phid = ?");
    }
    let marks = vec!["?"; listed].join(", ");
    format!(
        "SELECT x.phid FROM {objects} o \
         LEFT JOIN `{namespace}_{transaction_application}`.`{transaction_table}` x \
         ON x.objectPHID = o.phid AND x.phid IN ({marks}) \
         WHERE o.phid = ? ORDER BY x.id DESC"
    )
}

/// Reads nothing, but fails as a read of `table` would when the account
/// cannot read it (`namespace` validated: no quoting characters).
pub fn table_probe(namespace: &str, application: &str, table: &str) -> String {
    format!("SELECT 1 FROM `{namespace}_{application}`.`{table}` LIMIT 0")
}

/// A value [`inline`] can write into a statement.
#[derive(Debug, Clone, Copy)]
pub enum Literal<'a> {
    /// Written as its decimal digits.
    Number(u64),
    /// Written as `_utf8mb4 X'…'`: hex digits only, whatever the text holds,
    /// so quotes, backslashes and `NO_BACKSLASH_ESCAPES` do not matter.
    Text(&'a str),
}

/// `statement` with its `?` placeholders replaced, in order, by `values`.
/// `None` when the counts differ. Used only with this module's constant
/// statements, whose text holds no `?` other than placeholders.
pub fn inline(statement: &str, values: &[Literal<'_>]) -> Option<String> {
    use std::fmt::Write as _;
    let mut parts = statement.split('?');
    let mut text = String::with_capacity(statement.len() + 16 * values.len());
    text.push_str(parts.next().unwrap_or_default());
    let mut values = values.iter();
    for part in parts {
        match values.next()? {
            Literal::Number(n) => {
                let _ = write!(text, "{n}");
            }
            Literal::Text(t) => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                text.push_str("_utf8mb4 X'");
                text.reserve(2 * t.len() + 1);
                for byte in t.bytes() {
                    text.push(char::from(HEX[usize::from(byte >> 4)]));
                    text.push(char::from(HEX[usize::from(byte & 0x0f)]));
                }
                text.push('\'');
            }
        }
        text.push_str(part);
    }
    values.next().is_none().then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidate_query_is_the_spec_statement() {
        assert_eq!(
            candidate_sql(0),
            "SELECT id, phid, webhookPHID, objectPHID, status, \
             IF(LENGTH(properties) <= ?, properties, NULL), \
             lastRequestResult, lastRequestEpoch, dateCreated, dateModified, LENGTH(properties)\n  \
             FROM herald_webhookrequest\n \
             WHERE status = 'queued'\n   \
             AND (dateModified = dateCreated OR dateModified <= ?)\n   \
             AND (lastRequestResult <> 'fail' OR lastRequestEpoch <= ?)\n \
             ORDER BY id ASC\n \
             LIMIT ?"
        );
    }

    #[test]
    fn the_store_runs_the_spec_predicate_above_its_scan_floor() {
        let spec = candidate_sql(0);
        let floored = candidate_sql_above_floor(0, 2, 0);
        assert_eq!(
            floored,
            spec.replacen(
                " WHERE status = 'queued'",
                " WHERE (id >= ? OR id IN (?, ?))\n   AND status = 'queued'",
                1
            )
        );
        assert_eq!(
            candidate_sql_above_floor(0, 0, 0),
            spec.replacen(
                " WHERE status = 'queued'",
                " WHERE id >= ?\n   AND status = 'queued'",
                1
            )
        );
        assert_eq!(
            candidate_sql_above_floor(2, 3, 0),
            candidate_sql(2).replacen(
                " WHERE status = 'queued'",
                " WHERE (id >= ? OR id IN (?, ?, ?))\n   AND status = 'queued'",
                1
            )
        );
        assert_eq!(candidate_sql_above_floor(0, 0, 0).matches('?').count(), 5);
        assert_eq!(candidate_sql_above_floor(1, 4, 0).matches('?').count(), 10);
        let without_rows = candidate_sql_above_floor(1, 0, 2);
        assert_eq!(without_rows.matches('?').count(), 8);
        assert!(
            without_rows.contains("AND id NOT IN (?, ?)\n ORDER BY id ASC"),
            "{without_rows}"
        );
    }

    #[test]
    fn floor_statements_read_only_ids_status_and_creation() {
        assert_eq!(
            floor_still_queued_sql(3),
            "SELECT id FROM herald_webhookrequest WHERE id IN (?, ?, ?) AND status = 'queued'"
        );
        assert_eq!(FLOOR_WALK.matches('?').count(), 2);
        assert_eq!(FLOOR_SAFE_POINT.matches('?').count(), 1);
        assert_eq!(FLOOR_RESCAN.matches('?').count(), 2);
        for statement in [FLOOR_WALK, FLOOR_SAFE_POINT, FLOOR_RESCAN] {
            assert!(statement.starts_with("SELECT id"), "{statement}");
        }
    }

    #[test]
    fn exclusions_add_one_placeholder_per_hook() {
        let sql = candidate_sql(3);
        assert!(
            sql.contains("\n   AND webhookPHID NOT IN (?, ?, ?)\n ORDER BY id ASC"),
            "{sql}"
        );
        assert_eq!(sql.matches('?').count(), 7);
        assert_eq!(candidate_sql(0).matches('?').count(), 4);
        assert_eq!(CANDIDATE_PROPERTIES.matches('?').count(), 2);
    }

    #[test]
    fn placeholder_counts_match_the_documented_parameters() {
        assert_eq!(CLAIM.matches('?').count(), 2);
        assert_eq!(WRITE_RESULT.matches('?').count(), 7);
        assert!(WRITE_RESULT.ends_with("AND status = 'queued' AND dateModified = ?"));
        assert_eq!(BREAKER_FAILURES.matches('?').count(), 2);
    }

    #[test]
    fn read_only_statements_select_the_request_columns() {
        assert_eq!(
            REQUEST_BY_ID,
            format!("SELECT {REQUEST_SELECT_LIST} FROM herald_webhookrequest WHERE id = ?")
        );
        assert_eq!(
            REQUEST_BY_PHID,
            format!("SELECT {REQUEST_SELECT_LIST} FROM herald_webhookrequest WHERE phid = ?")
        );
        for statement in [
            REQUEST_BY_ID,
            REQUEST_BY_PHID,
            HOOK_SUMMARIES,
            BREAKER_FAILURE_EPOCHS,
            QUEUED_BEFORE,
            IS_USED_LOCK,
        ] {
            assert!(statement.starts_with("SELECT "), "{statement}");
            assert!(!statement.contains("hmacKey"), "{statement}");
            assert!(!statement.contains("GET_LOCK"), "{statement}");
        }
        assert_eq!(
            QUEUED_BEFORE,
            format!(
                "SELECT {REQUEST_SELECT_LIST} FROM herald_webhookrequest \
                 WHERE webhookPHID = ? AND status = 'queued' AND id < ? ORDER BY id ASC LIMIT ?"
            )
        );
        assert_eq!(HOOK_SUMMARIES.matches('?').count(), 1);
        assert_eq!(BREAKER_FAILURE_EPOCHS.matches('?').count(), 2);
        assert!(BREAKER_FAILURE_EPOCHS.contains(
            "WHERE webhookPHID = ? AND lastRequestResult = 'fail' AND lastRequestEpoch >= ?"
        ));
        assert!(BREAKER_FAILURES.contains(
            "WHERE webhookPHID = ? AND lastRequestResult = 'fail' AND lastRequestEpoch >= ?"
        ));
    }

    #[test]
    fn the_requeue_writes_with_exactly_one_compare_and_set_update() {
        let writes: Vec<&str> = REQUEUE_STATEMENTS
            .into_iter()
            .filter(|statement| !statement.starts_with("SELECT "))
            .collect();
        assert_eq!(writes, [REQUEUE]);
        assert!(REQUEUE.starts_with("UPDATE herald_webhookrequest SET status = 'queued', "));
        assert!(REQUEUE.ends_with(
            "WHERE id = ? AND status = 'failed' AND dateModified = ? \
             AND lastRequestResult = ? AND lastRequestEpoch = ?"
        ));
        assert!(!REQUEUE.contains("properties"));
        assert_eq!(REQUEUE.matches('?').count(), 4);
        assert_eq!(
            FAILED_PAGE,
            format!(
                "SELECT {REQUEST_SELECT_LIST} FROM herald_webhookrequest \
                 WHERE status = 'failed' AND id > ? ORDER BY id ASC LIMIT ?"
            )
        );
        assert_eq!(floor_requeued_sql(2).matches('?').count(), 5);
        assert!(floor_requeued_sql(1).starts_with(
            "SELECT id FROM herald_webhookrequest WHERE webhookPHID IN (?) \
             AND lastRequestResult = 'none' AND lastRequestEpoch >= ? "
        ));
    }

    #[test]
    fn inline_puts_numbers_as_digits_and_text_as_hex() {
        assert_eq!(
            inline(CLAIM, &[Literal::Number(7), Literal::Number(1_700_000_001)]).as_deref(),
            Some(
                "UPDATE herald_webhookrequest \
                 SET dateModified = LAST_INSERT_ID(GREATEST(dateModified + 1, UNIX_TIMESTAMP())) \
                 WHERE id = 7 AND status = 'queued' AND dateModified = 1700000001"
            )
        );
        let hostile = "x'; DROP TABLE herald_webhook; -- \\ \u{e9}";
        let text = inline(
            WRITE_RESULT,
            &[
                Literal::Text("sent"),
                Literal::Text("pass"),
                Literal::Number(1),
                Literal::Number(2),
                Literal::Text(hostile),
                Literal::Number(3),
                Literal::Number(4),
            ],
        )
        .expect("seven values");
        assert!(
            text.starts_with("UPDATE herald_webhookrequest SET status = _utf8mb4 X'73656e74', ")
        );
        assert!(
            text.ends_with(" WHERE id = 3 AND status = 'queued' AND dateModified = 4"),
            "{text}"
        );
        assert!(!text.contains("DROP") && !text.contains('?'), "{text}");
        let hex: String = hostile.bytes().map(|b| format!("{b:02x}")).collect();
        assert!(
            text.contains(&format!("properties = _utf8mb4 X'{hex}' ")),
            "{text}"
        );
    }

    #[test]
    fn every_grant_probe_is_a_whole_statement_over_no_row() {
        let probes = delivery_grant_probes("ns");
        let named: Vec<(&str, &str)> = probes
            .iter()
            .map(|p| (p.privilege, p.table.as_str()))
            .collect();
        assert_eq!(
            named,
            [
                ("SELECT", "ns_herald.herald_webhookrequest"),
                ("UPDATE", "ns_herald.herald_webhookrequest"),
                ("UPDATE", "ns_herald.herald_webhookrequest"),
                ("SELECT", "ns_herald.herald_webhook"),
            ]
        );
        for probe in probes.iter().chain(&adoption_grant_probes("ns")) {
            assert!(!probe.statement.is_empty(), "{probe:?}");
            assert!(!probe.statement.contains('?'), "{probe:?}");
        }
        assert!(probes[1]
            .statement
            .ends_with("WHERE id = 0 AND status = 'queued' AND dateModified = 0"));
        assert!(probes[2].statement.contains("properties = "));
        assert!(probes[3]
            .statement
            .ends_with("FROM herald_webhook WHERE phid = _utf8mb4 X''"));
    }

    #[test]
    fn inline_refuses_a_wrong_number_of_values() {
        assert_eq!(inline(CLAIM, &[Literal::Number(1)]), None);
        assert_eq!(inline(CLAIM, &[Literal::Number(1); 3]), None);
    }
}
