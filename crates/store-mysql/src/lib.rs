//! The `webhook_core::Store` on MySQL/MariaDB, through `mysql_async` over
//! rustls (ring). This is the only crate that speaks SQL.
//!
//! It runs exactly the statements of protocol §4 against Phorge's own
//! `{namespace}_herald` tables and never creates, alters or indexes
//! anything there: the table is the protocol, and Phorge owns its schema.
//!
//! * [`MysqlConfig`] / [`MysqlStore::new`]: validates settings and builds a
//!   bounded, lazy pool; nothing connects until the first statement, so a
//!   slow or absent database never blocks startup. Every connection and
//!   every statement is bounded in time (`session`): a half-open socket
//!   costs one statement timeout, then its connection is abandoned and
//!   the pool replaced. A connection the server refused a privilege is
//!   closed rather than pooled, and the refusal is
//!   [`webhook_core::StoreError::Denied`]: a grant given back is used by
//!   the next connection.
//! * [`MysqlStore`] implements [`webhook_core::Store`]; every statement is a
//!   prepared statement, cached per pooled connection. A poll's rows hold
//!   at most [`POLL_BYTES_MAX`] bytes of `properties` (long ones fetched
//!   alone), and a row the driver cannot read is skipped and counted
//!   (`candidates`). The candidate query reads only above a remembered
//!   scan floor (`queued_floor`), so it stays a short range on Phorge's
//!   stock schema too, which has no `key_status` index. Claims and
//!   write-backs that arrive together share one transaction (group
//!   commit, `batch`), each with its own statement and result.
//! * [`MysqlReader`] is the read-only side, and all the operator's tool
//!   gets: plain `SELECT`s ([`MysqlReader::request_by_id`],
//!   [`MysqlReader::hook_summaries`], [`HookSummary`], …), a ping and
//!   `IS_USED_LOCK`, with no method that writes, claims or locks. A
//!   [`MysqlStore`] is built on one ([`MysqlStore::reader`]).
//! * [`MysqlRequeue`] is the tool's one writer, for `webhook-admin
//!   requeue` alone: final failures a page at a time, and one
//!   compare-and-set `UPDATE` that puts a row back in the queue in
//!   Phorge's own values (`REQUEUE_STATEMENTS` in `sql`).
//! * [`MysqlReader::ready`] is the `/readyz` probe; [`MysqlReader::check_schema`]
//!   the startup check of the columns and of the `key_status` index;
//!   [`MysqlReader::delivery_grants_missing`] (and, with the named locks,
//!   [`MysqlStore::delivery_needs_missing`]) the check of the privileges
//!   delivery needs, its statements under `EXPLAIN`, which runs nothing;
//!   [`MysqlReader::server_time`] reads the server's clock, which the
//!   daemon's cutoffs run on.
//! * [`MysqlHookLock`] is Phorge's per-hook `GET_LOCK`, so a daemon and a
//!   leftover PHP worker exclude each other. Many locks share each of a few
//!   lock sessions outside the pool (`lock`): concurrency costs no
//!   connections, and a lock session that breaks loses all its locks at
//!   once.
//! * Phorge's application tables ([`webhook_core::PhorgeObjects`],
//!   [`OBJECT_TABLES`]): whether a request's object still exists and which
//!   of its listed transactions do, newest first, as Phorge's worker
//!   loads them before a call.
//! * Phorge's task queue ([`webhook_core::adoption::TaskQueue`], on
//!   `{namespace}_worker`): the operations task adoption performs, whose
//!   policy is the core's, and the check of the grants it needs
//!   ([`MysqlStore::adoption_grants_missing`], as delivery's are checked).
//! * The hand-off checks: Phorge's global silent mode
//!   ([`webhook_core::hold::PhorgeConfig`]) and leftover PHP delivery tasks
//!   ([`MysqlReader::php_delivery_tasks`]), read from Phorge's config and
//!   worker databases, and silent mode from Phorge's `conf/local/local.json`
//!   ([`LocalConfig`], the one file this crate reads).
//! * The attempt history ([`history`]): every delivery attempt, in a
//!   database of the daemon's own on the same server, never in Phorge's —
//!   [`MysqlHistory`] prepares and prunes it, its [`HistoryQueue`] is the
//!   dispatcher's `AttemptLog`, written by a store given it
//!   ([`MysqlStore::with_history`]) after its group commits, and
//!   [`HistoryReader`] ([`MysqlReader::history`]) reads it.
//! * [`bound_driver_buffers`]: the driver's global buffer pool, bounded
//!   from `main` before any thread starts (the driver reads its bounds
//!   from the environment once).
//!
//! Values read from the database are validated, never trusted. A request
//! row whose PHID columns are not UTF-8 or whose `lastRequestResult` is
//! unknown is returned read lossily with `RequestRow::defect` set (the
//! dispatcher fails it alone; PHID columns are never written back); any
//! other surprise — an unknown `status`, a NULL or a negative number —
//! becomes [`webhook_core::StoreError::MalformedRow`].

mod batch;
mod binlog;
mod candidates;
pub mod config;
mod connector;
mod driver_buffers;
mod error;
mod grants;
mod handoff;
pub mod history;
pub mod local_config;
mod lock;
mod object_tables;
mod objects;
mod queued_floor;
mod reader;
mod reads;
mod requeue;
mod rows;
mod schema;
mod server_time;
mod session;
#[cfg(feature = "statements")]
pub mod sql;
#[cfg(not(feature = "statements"))]
mod sql;
mod store;
mod task_queue;

pub use binlog::{BinlogFollower, NotFollowing, RequestInserts};
pub use candidates::POLL_BYTES_MAX;
pub use config::MysqlConfig;
pub use driver_buffers::bound_driver_buffers;
pub use error::{MysqlError, NotReady};
pub use handoff::{PhpDeliveryTasks, TaskRunners};
pub use history::{
    HistoryConfig, HistoryError, HistoryQueue, HistoryReader, HistoryTotals, MysqlHistory,
    RetentionPass, CHUNK_ROWS, HISTORY_SCHEMA_VERSION,
};
pub use local_config::{LocalConfig, LocalConfigError};
pub use lock::{KeptLocks, MysqlHookLock};
pub use object_tables::{object_tables, ObjectTables, OBJECT_TABLES};
pub use queued_floor::LOOK_EVERY;
/// The scan floor's windows, for tests that build rows around them.
#[cfg(feature = "statements")]
pub use queued_floor::{GAP_GRACE, LOOK_WINDOW, RESCAN_EVERY};
pub use reader::MysqlReader;
pub use reads::HookSummary;
pub use requeue::{MysqlRequeue, Requeued};
pub use schema::SchemaWarning;
pub use server_time::ServerTimeReading;
pub use store::MysqlStore;
