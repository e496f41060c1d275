//! Group commit for the per-row writes: the claim and the write-back.
//!
//! Calls that arrive while earlier ones are on the server are sent together
//! as one transaction, in one round trip: `START TRANSACTION`, each call's
//! own statement (the same text as its prepared form, values inlined by
//! `sql::inline`: digits and hex only), `COMMIT`. A busy queue so pays
//! one commit, one pool checkout and one round trip per group instead of
//! per statement, and each call still gets its own affected-row count. A
//! lone call (the idle case) runs alone, prepared, in autocommit, with no
//! added wait.
//!
//! With an attempt history (`crate::history`), each worker wakes the
//! history's writer after a batch whose replies are sent, when attempts
//! are queued: the wake tells the writer delivery is at work (it writes
//! once delivery pauses), the history is written apart from the batch,
//! on the history's own pool, and no write waits on it.
//!
//! If a statement of a group fails, the server runs none after it; the
//! transaction is rolled back and every call of the group is run again on
//! its own, so one bad write never fails its neighbours. If the commit
//! fails, the outcome is unknown and every call gets the error (the
//! dispatcher treats it as a single statement whose answer was lost).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use mysql_async::prelude::Queryable;
use mysql_async::{Row, Value};
use tokio::sync::{mpsc, oneshot, Mutex};
use webhook_core::{ResultWrite, StoreError, UnixTime};

use crate::connector::Connector;
use crate::error::MysqlError;
use crate::history::HistoryQueue;
use crate::session::Session;
use crate::sql::{self, Literal};

/// Most calls in one transaction.
const MAX_BATCH: usize = 64;
/// Batches on the server at once, each on a pooled connection borrowed for
/// the batch (hook locks pin none: they live on the lock sessions, outside
/// the pool), so the default pool has room for all four at once.
const WORKERS: usize = 4;

/// One per-row write.
pub(crate) enum RowWrite {
    /// `sql::CLAIM`.
    Claim { id: u64, seen_version: UnixTime },
    /// `sql::WRITE_RESULT`.
    Result(ResultWrite),
}

impl RowWrite {
    /// The statement and its values, in placeholder order.
    fn parts(&self) -> (&'static str, Vec<Literal<'_>>) {
        use Literal::{Number, Text};
        match self {
            Self::Claim { id, seen_version } => {
                (sql::CLAIM, vec![Number(*id), Number(*seen_version)])
            }
            Self::Result(write) => {
                let values = vec![
                    Text(write.status.as_str()),
                    Text(write.last_request_result.as_str()),
                    Number(write.last_request_epoch),
                    Number(write.date_modified),
                    Text(&write.properties),
                    Number(write.id),
                    Number(write.expected_version),
                ];
                (sql::WRITE_RESULT, values)
            }
        }
    }

    /// The prepared statement and its parameters.
    fn statement(&self) -> (&'static str, Vec<Value>) {
        let (statement, values) = self.parts();
        let params = values
            .into_iter()
            .map(|value| match value {
                Literal::Number(n) => Value::from(n),
                Literal::Text(t) => Value::from(t),
            })
            .collect();
        (statement, params)
    }

    /// The statement with its values inlined, for a group.
    fn inlined(&self) -> Option<String> {
        let (statement, values) = self.parts();
        sql::inline(statement, &values)
    }
}

/// What one write did: rows matched (`CLIENT_FOUND_ROWS`) and the
/// statement's `LAST_INSERT_ID` (the version a claim wrote).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Applied {
    pub(crate) matched: u64,
    pub(crate) last_insert_id: Option<u64>,
}

/// A write waiting for its batch, and where its outcome goes.
struct Job {
    write: RowWrite,
    reply: oneshot::Sender<Result<Applied, StoreError>>,
}

/// Hands writes to the batch workers; they end when it is dropped.
pub(crate) struct WriteBatcher {
    jobs: mpsc::UnboundedSender<Job>,
    counts: Arc<BatchCounts>,
}

/// How much grouping happened (for tests and diagnostics).
#[derive(Default)]
struct BatchCounts {
    /// Transactions of two or more writes committed.
    transactions: AtomicU64,
    /// Writes committed in those transactions.
    grouped_writes: AtomicU64,
}

/// What a worker needs to run a batch.
struct Context {
    connector: Connector,
    counts: Arc<BatchCounts>,
    /// The attempt history to wake after each batch.
    history: Option<HistoryQueue>,
}

impl WriteBatcher {
    /// Starts the workers (and `history`'s writer, on the history's own
    /// pool) on the current tokio runtime.
    pub(crate) fn start(connector: Connector, history: Option<HistoryQueue>) -> Self {
        let (jobs, queue) = mpsc::unbounded_channel();
        let queue = Arc::new(Mutex::new(queue));
        let counts = Arc::new(BatchCounts::default());
        if let Some(history) = &history {
            history.attach();
        }
        let context = Arc::new(Context {
            connector,
            counts: Arc::clone(&counts),
            history,
        });
        for _ in 0..WORKERS {
            tokio::spawn(work(Arc::clone(&queue), Arc::clone(&context)));
        }
        Self { jobs, counts }
    }

    /// `(transactions, writes in them)` of the grouped batches so far.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (
            self.counts.transactions.load(Ordering::Relaxed),
            self.counts.grouped_writes.load(Ordering::Relaxed),
        )
    }

    /// Runs `write` in the next batch; what it did (rows matched, as
    /// (`CLIENT_FOUND_ROWS`: rows matched).
    pub(crate) async fn run(&self, write: RowWrite) -> Result<Applied, StoreError> {
        let (reply, answer) = oneshot::channel();
        let stopped = || {
            StoreError::Unavailable(Box::new(MysqlError::UnexpectedResult {
                statement: "batched write",
                detail: "the write batcher has stopped".to_owned(),
            }))
        };
        self.jobs
            .send(Job { write, reply })
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

/// One worker: takes whatever is queued (at least one job, at most
/// [`MAX_BATCH`]) and runs it.
async fn work(queue: Arc<Mutex<mpsc::UnboundedReceiver<Job>>>, context: Arc<Context>) {
    loop {
        let batch = {
            let mut queue = queue.lock().await;
            let Some(first) = queue.recv().await else {
                return;
            };
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match queue.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
            batch
        };
        if batch.len() == 1 {
            run_each_alone(&context, batch).await;
        } else {
            run_together(&context, batch).await;
        }
        // Every reply is sent: the history's writer runs apart.
        if let Some(history) = &context.history {
            history.kick();
        }
    }
}

/// One write in autocommit on a pooled connection.
async fn run_alone(context: &Context, write: &RowWrite) -> Result<Applied, StoreError> {
    let mut conn = context.connector.conn().await?;
    let (statement, params) = write.statement();
    conn.exec_drop(statement, params)
        .await
        .map_err(|err| context.connector.statement_error(err))?;
    Ok(Applied {
        matched: conn.affected_rows(),
        last_insert_id: conn.last_insert_id(),
    })
}

/// [`run_group`] within the statement timeout; a timeout is a lost commit
/// (the outcome is unknown) and abandons the connection.
async fn run_group_bounded(
    conn: &mut Session,
    text: &str,
    statements: usize,
) -> Result<Vec<Applied>, GroupFailure> {
    let (raw, limit) = conn.start().map_err(GroupFailure::Lost)?;
    let outcome = tokio::time::timeout(limit, run_group(raw, text, statements)).await;
    conn.settle(outcome).await.map_err(GroupFailure::Lost)?
}

/// Several writes in one transaction and one round trip; on a statement
/// error, each alone.
async fn run_together(context: &Context, batch: Vec<Job>) {
    let Some(text) = group_sql(&batch) else {
        // Not reachable with this module's statements; run them alone.
        return run_each_alone(context, batch).await;
    };
    let mut conn = match context.connector.connect().await {
        Ok(conn) => conn,
        Err(err) => return fail_all(context, batch, err),
    };
    match run_group_bounded(&mut conn, &text, batch.len()).await {
        Ok(counts) => {
            drop(conn);
            context.counts.transactions.fetch_add(1, Ordering::Relaxed);
            context
                .counts
                .grouped_writes
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
            for (job, count) in batch.into_iter().zip(counts) {
                let _ = job.reply.send(Ok(count));
            }
        }
        Err(GroupFailure::Statement(err)) => {
            conn.retire_if_refused(&err);
            // The server stopped at the failed statement with the
            // transaction open: roll it back, or keep the session out of
            // the pool.
            if conn.query_drop("ROLLBACK").await.is_err() {
                conn.close().await;
            } else {
                drop(conn);
            }
            run_each_alone(context, batch).await;
        }
        Err(GroupFailure::Commit(err)) => {
            conn.close().await;
            fail_all(context, batch, MysqlError::Statement(err));
        }
        Err(GroupFailure::Lost(err)) => {
            // Already abandoned by the timeout.
            fail_all(context, batch, err);
        }
    }
}

/// Why a group did not complete.
enum GroupFailure {
    /// `START TRANSACTION` or one of the statements failed (why);
    /// nothing is committed.
    Statement(mysql_async::Error),
    /// The statements ran but the commit did not answer with success.
    Commit(mysql_async::Error),
    /// No answer within the statement timeout: whether anything committed
    /// is unknown, as with a failed commit.
    Lost(MysqlError),
}

/// `START TRANSACTION;` each statement `;COMMIT`, or `None` if a statement
/// could not be inlined.
fn group_sql(batch: &[Job]) -> Option<String> {
    let mut text = String::from("START TRANSACTION");
    for job in batch {
        text.push(';');
        text.push_str(&job.write.inlined()?);
    }
    text.push_str(";COMMIT");
    Some(text)
}

/// Sends the group and reads what each statement did.
async fn run_group(
    conn: &mut mysql_async::Conn,
    text: &str,
    statements: usize,
) -> Result<Vec<Applied>, GroupFailure> {
    let mut result = conn
        .query_iter(text)
        .await
        .map_err(GroupFailure::Statement)?;
    let mut counts = Vec::with_capacity(statements);
    for _ in 0..statements {
        // Moves past the previous statement's (empty) result to the next.
        result
            .collect::<Row>()
            .await
            .map_err(GroupFailure::Statement)?;
        counts.push(Applied {
            matched: result.affected_rows(),
            last_insert_id: result.last_insert_id(),
        });
    }
    match result.drop_result().await {
        Ok(()) => Ok(counts),
        // The server refused the last statement (its error surfaces only
        // here) or the COMMIT itself: either way nothing was committed,
        // so each write may be run again alone.
        Err(err @ mysql_async::Error::Server(_)) => Err(GroupFailure::Statement(err)),
        // The connection failed: the outcome is unknown.
        Err(err) => Err(GroupFailure::Commit(err)),
    }
}

async fn run_each_alone(context: &Context, batch: Vec<Job>) {
    for job in batch {
        let result = run_alone(context, &job.write).await;
        let _ = job.reply.send(result);
    }
}

/// The same failure for every write of a batch.
fn fail_all(context: &Context, batch: Vec<Job>, err: MysqlError) {
    let shared = Arc::new(err);
    for job in batch {
        let _ = job.reply.send(Err(MysqlError::shared_store_error(
            &shared,
            &context.connector.database,
        )));
    }
}
