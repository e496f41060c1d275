//! Group commit for the per-row writes: the claim and the write-back.
//!
//! Calls that arrive while earlier ones are on the server are sent together
//! as one transaction on one connection, so a busy queue pays one commit
//! (one log flush) and one pool checkout per batch instead of per
//! statement. Each call still runs its own prepared statement, with its
//! own affected-row count, exactly as it would alone; a lone call (the
//! idle case) runs alone, in autocommit, with no added wait.
//!
//! If any statement of a batch fails, the transaction is rolled back and
//! every call of it is run again on its own, so one bad write never fails
//! its neighbours. If the commit itself fails, the outcome is unknown and
//! every call gets the error (the dispatcher treats it as for a single
//! statement whose answer was lost).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Pool, TxOpts, Value};
use tokio::sync::{mpsc, oneshot, Mutex};
use webhook_core::{ResultWrite, StoreError, UnixTime};

use crate::error::MysqlError;
use crate::sql;
use crate::store::connect;

/// Most calls in one transaction.
const MAX_BATCH: usize = 64;
/// Batches on the server at once, each on a pooled connection borrowed for
/// the batch. Hook locks pin at most `max_concurrent` connections and the
/// pool is larger than that, so a worker always gets one in the end; the
/// default pool (`2 × max_concurrent + 4`) has room for all four at once.
const WORKERS: usize = 4;

/// One per-row write.
#[derive(Debug, Clone)]
pub(crate) enum RowWrite {
    /// [`sql::CLAIM`].
    Claim { id: u64, seen_version: UnixTime },
    /// [`sql::WRITE_RESULT`] or [`sql::WRITE_RESULT_GUARDED`].
    Result(ResultWrite),
}

impl RowWrite {
    fn statement(&self) -> (&'static str, Vec<Value>) {
        match self {
            Self::Claim { id, seen_version } => {
                (sql::CLAIM, vec![(*id).into(), (*seen_version).into()])
            }
            Self::Result(write) => {
                let mut params: Vec<Value> = vec![
                    write.status.as_str().into(),
                    write.last_request_result.as_str().into(),
                    write.last_request_epoch.into(),
                    write.date_modified.into(),
                    write.properties.as_str().into(),
                    write.id.into(),
                ];
                match write.expected_version {
                    Some(version) => {
                        params.push(version.into());
                        (sql::WRITE_RESULT_GUARDED, params)
                    }
                    None => (sql::WRITE_RESULT, params),
                }
            }
        }
    }
}

/// A write waiting for its batch, and where its affected-row count goes.
struct Job {
    write: RowWrite,
    reply: oneshot::Sender<Result<u64, StoreError>>,
}

/// Hands writes to the batch workers. Cheap to clone; the workers end when
/// the last clone is dropped.
#[derive(Clone)]
pub(crate) struct WriteBatcher {
    jobs: mpsc::UnboundedSender<Job>,
    counts: Arc<BatchCounts>,
}

/// How much grouping happened (for tests and diagnostics).
#[derive(Debug, Default)]
pub(crate) struct BatchCounts {
    /// Transactions of two or more writes committed.
    pub(crate) transactions: AtomicU64,
    /// Writes committed in those transactions.
    pub(crate) grouped_writes: AtomicU64,
}

/// What a worker needs to run a batch.
struct Context {
    pool: Pool,
    database: String,
    connect_timeout: Duration,
    counts: Arc<BatchCounts>,
}

impl WriteBatcher {
    /// Starts the workers on the current tokio runtime.
    pub(crate) fn start(pool: Pool, database: String, connect_timeout: Duration) -> Self {
        let (jobs, queue) = mpsc::unbounded_channel();
        let queue = Arc::new(Mutex::new(queue));
        let counts = Arc::new(BatchCounts::default());
        let context = Arc::new(Context {
            pool,
            database,
            connect_timeout,
            counts: Arc::clone(&counts),
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

    /// Runs `write` in the next batch; its affected-row count
    /// (`CLIENT_FOUND_ROWS`: rows matched).
    pub(crate) async fn run(&self, write: RowWrite) -> Result<u64, StoreError> {
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
            for job in batch {
                let result = run_alone(&context, &job.write).await;
                let _ = job.reply.send(result);
            }
        } else {
            run_together(&context, batch).await;
        }
    }
}

/// One write in autocommit on a pooled connection.
async fn run_alone(context: &Context, write: &RowWrite) -> Result<u64, StoreError> {
    let mut conn = connect(&context.pool, context.connect_timeout)
        .await
        .map_err(|err| err.into_store_error(&context.database))?;
    let (statement, params) = write.statement();
    conn.exec_drop(statement, params)
        .await
        .map_err(|err| MysqlError::Statement(err).into_store_error(&context.database))?;
    Ok(conn.affected_rows())
}

/// Several writes in one transaction; on a statement error, each alone.
async fn run_together(context: &Context, batch: Vec<Job>) {
    let mut conn = match connect(&context.pool, context.connect_timeout).await {
        Ok(conn) => conn,
        Err(err) => return fail_all(context, batch, err),
    };
    let mut counts = Vec::with_capacity(batch.len());
    let statement_failed = {
        let mut tx = match conn.start_transaction(TxOpts::default()).await {
            Ok(tx) => tx,
            Err(err) => return fail_all(context, batch, MysqlError::Statement(err)),
        };
        let mut failed = false;
        for job in &batch {
            let (statement, params) = job.write.statement();
            if tx.exec_drop(statement, params).await.is_err() {
                failed = true;
                break;
            }
            counts.push(tx.affected_rows());
        }
        if failed {
            // Dropping the transaction rolls it back (or, if that fails,
            // keeps the connection out of the pool).
            drop(tx);
            true
        } else if let Err(err) = tx.commit().await {
            return fail_all(context, batch, MysqlError::Statement(err));
        } else {
            false
        }
    };
    drop(conn);
    if statement_failed {
        for job in batch {
            let result = run_alone(context, &job.write).await;
            let _ = job.reply.send(result);
        }
        return;
    }
    context.counts.transactions.fetch_add(1, Ordering::Relaxed);
    context
        .counts
        .grouped_writes
        .fetch_add(batch.len() as u64, Ordering::Relaxed);
    for (job, count) in batch.into_iter().zip(counts) {
        let _ = job.reply.send(Ok(count));
    }
}

/// The same failure for every write of a batch.
fn fail_all(context: &Context, batch: Vec<Job>, err: MysqlError) {
    let shared = Arc::new(err);
    for job in batch {
        let _ = job.reply.send(Err(MysqlError::shared_store_error(
            &shared,
            &context.database,
        )));
    }
}
