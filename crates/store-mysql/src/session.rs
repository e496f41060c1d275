//! Every database operation bounded in time: the pools ([`Pools`]), and
//! the pooled connection every statement runs on ([`Session`]).
//!
//! `mysql_async` has no statement timeout, and a half-open socket (a NAT
//! table flushed, a load balancer failed over, a frozen host) reports no
//! error, ever: a statement on it waits for a reply that never comes. So:
//!
//! * a connection is taken within the connect timeout, and every statement
//!   (the hook lock's `GET_LOCK`/`RELEASE_LOCK`, a group commit, the
//!   readiness ping) gets the statement timeout;
//! * a connection whose statement timed out — or whose caller went away
//!   mid-statement — is *abandoned*: never returned to the pool (its reply
//!   could still arrive and be read as the answer to someone else's
//!   statement, and the pool's own clean-up would wait on it for ever),
//!   closed without waiting, and its server session killed from a fresh
//!   connection (`KILL CONNECTION`, which a user may do to its own
//!   sessions), so a statement still running there stops and a hook lock
//!   it held is freed at once instead of after the server's `wait_timeout`;
//! * the timeout also retires the pool it came from: the faults that
//!   freeze one connection freeze all that were open, so every idle
//!   connection is suspect, and a new pool serves what comes next. Sessions
//!   still borrowed from the old pool (held hook locks) keep working if
//!   they can, and fail by their own timeout if they cannot;
//! * a connection the server refused a privilege is *retired*: closed
//!   instead of returned to the pool. A session keeps the database-level
//!   privileges it had when it selected its database, so it would go on
//!   refusing after the grant is given back; the next statement gets a
//!   new connection, which sees the grants as they are.
//!
//! Nothing here waits on the network without a bound; closing the pool at
//! shutdown is bounded too.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use mysql_async::prelude::{FromRow, Queryable, StatementLike};
use mysql_async::{Conn, Opts, Params, Pool};
use tokio::time::error::Elapsed;
use tracing::{debug, warn};

use crate::error::{is_privilege_error, MysqlError};

/// How long an abandoned connection gets to say `COM_QUIT` before its
/// socket is simply dropped.
const CLOSE_BOUND: Duration = Duration::from_secs(1);

/// How often, and how many times, killing an abandoned session is tried
/// while no connection can be had (30 minutes in all).
const KILL_RETRY: Duration = Duration::from_secs(10);
const KILL_TRIES: u32 = 180;

/// The server's "Unknown thread id": the session to kill is gone already.
const ER_NO_SUCH_THREAD: u16 = 1094;

/// The current pool and how to make the next one, with the bounds every
/// connection and statement gets. Cloned into every [`Session`] it hands
/// out, so a timed-out one can retire its pool and have its server
/// session killed; [`crate::connector::Connector`] wraps it.
#[derive(Clone)]
pub(crate) struct Pools {
    generations: Arc<Generations>,
    connect_timeout: Duration,
    statement_timeout: Duration,
}

struct Generations {
    opts: Opts,
    current: Mutex<Generation>,
}

/// A pool and its number; a timeout retires the generation it met.
struct Generation {
    number: u64,
    pool: Pool,
}

impl Pools {
    /// A lazy pool over `opts`: nothing connects yet.
    pub(crate) fn new(opts: Opts, connect_timeout: Duration, statement_timeout: Duration) -> Self {
        let pool = Pool::new(opts.clone());
        Self {
            generations: Arc::new(Generations {
                opts,
                current: Mutex::new(Generation { number: 0, pool }),
            }),
            connect_timeout,
            statement_timeout,
        }
    }

    fn current(&self) -> (u64, Pool) {
        let current = self
            .generations
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        (current.number, current.pool.clone())
    }

    /// Replaces the pool if `generation` is still the current one; whether
    /// it was.
    fn retire(&self, generation: u64) -> bool {
        let mut current = self
            .generations
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if current.number != generation {
            return false;
        }
        current.number += 1;
        // The old pool is only dropped: its idle connections are closed by
        // its own background task, and waiting for that is what must not
        // happen here.
        current.pool = Pool::new(self.generations.opts.clone());
        true
    }

    /// How many times the pool was replaced after a timeout.
    pub(crate) fn replacements(&self) -> u64 {
        self.current().0
    }

    /// The statement timeout.
    pub(crate) fn statement_timeout(&self) -> Duration {
        self.statement_timeout
    }

    /// A pooled connection within the connect timeout (the pool's own
    /// wait is unbounded). A timeout retires the pool: a generation that
    /// cannot hand out a connection in time is no use to anyone.
    pub(crate) async fn connect(&self) -> Result<Session, MysqlError> {
        let (generation, pool) = self.current();
        match tokio::time::timeout(self.connect_timeout, pool.get_conn()).await {
            Ok(Ok(conn)) => Ok(self.session(conn, generation)),
            Ok(Err(err)) => Err(MysqlError::Connect(err)),
            Err(_elapsed) => {
                if self.retire(generation) {
                    warn!(
                        event = "database_timeout",
                        operation = "connect",
                        timeout_ms = millis(self.connect_timeout),
                        "no database connection in time; the connection pool is replaced"
                    );
                }
                Err(MysqlError::ConnectTimeout(self.connect_timeout))
            }
        }
    }

    /// A connection of its own, outside the pool, within the connect
    /// timeout: a hook-lock session (`crate::lock`), which is held for as
    /// long as its locks are and so must not take a slot the statements
    /// are sized for. Dropped, it is closed (which frees its locks).
    pub(crate) async fn connect_standalone(&self) -> Result<Session, MysqlError> {
        let (generation, _) = self.current();
        let opts = self.generations.opts.clone();
        match tokio::time::timeout(self.connect_timeout, Conn::new(opts)).await {
            Ok(Ok(conn)) => Ok(self.session(conn, generation)),
            Ok(Err(err)) => Err(MysqlError::Connect(err)),
            Err(_elapsed) => Err(MysqlError::ConnectTimeout(self.connect_timeout)),
        }
    }

    /// `conn`, opened under pool `generation`, bounded as every session.
    fn session(&self, conn: Conn, generation: u64) -> Session {
        Session {
            conn: Some(conn),
            generation,
            pools: self.clone(),
            busy: false,
            retired: false,
        }
    }

    /// Closes the current pool once every borrowed connection is back, or
    /// gives up after `bound` (a connection that never comes back must not
    /// keep the process from exiting).
    pub(crate) async fn disconnect(&self, bound: Duration) -> Result<(), MysqlError> {
        let (_, pool) = self.current();
        match tokio::time::timeout(bound, pool.disconnect()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(err)) => Err(MysqlError::Statement(err)),
            Err(_elapsed) => Err(MysqlError::Timeout {
                operation: "closing the connection pool",
                after: bound,
            }),
        }
    }

    /// Kills server session `id` from a fresh connection, in the
    /// background, everything bounded. While no connection can be had (a
    /// blackhole), it tries again every [`KILL_RETRY`] for a while: a
    /// session left alive keeps any hook lock it held until the server's
    /// `wait_timeout`, as the server never hears that its client is gone.
    /// Failures only go to the debug log.
    fn kill_later(&self, id: u32) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let pools = self.clone();
        runtime.spawn(async move {
            for _ in 0..KILL_TRIES {
                if pools.kill(id).await {
                    return;
                }
                tokio::time::sleep(KILL_RETRY).await;
            }
        });
    }

    /// One try of [`Self::kill_later`]; whether it is settled (killed, or
    /// gone already).
    async fn kill(&self, id: u32) -> bool {
        let (_, pool) = self.current();
        let conn = tokio::time::timeout(self.connect_timeout, pool.get_conn()).await;
        let Ok(Ok(mut conn)) = conn else {
            debug!(
                event = "database_session_kill_failed",
                connection_id = id,
                reason = "no connection"
            );
            return false;
        };
        // An integer, not a placeholder: KILL is not preparable everywhere.
        let kill = conn.query_drop(format!("KILL CONNECTION {id}"));
        match tokio::time::timeout(self.statement_timeout, kill).await {
            Ok(Ok(())) => {
                debug!(event = "database_session_killed", connection_id = id);
                true
            }
            Ok(Err(mysql_async::Error::Server(err))) if err.code == ER_NO_SUCH_THREAD => true,
            Ok(Err(err)) => {
                debug!(event = "database_session_kill_failed", connection_id = id, error = %err);
                // Refused for good (a privilege): trying again cannot help.
                matches!(err, mysql_async::Error::Server(_))
            }
            Err(_elapsed) => {
                debug!(
                    event = "database_session_kill_failed",
                    connection_id = id,
                    reason = "timeout"
                );
                // Cancelled mid-statement: this one must not go back to
                // the pool either.
                discard(conn);
                false
            }
        }
    }
}

/// One pooled connection whose every statement is bounded by the
/// statement timeout. Dropped normally, the connection goes back to the
/// pool; dropped mid-statement (its caller cancelled), or after a timeout,
/// it is abandoned (see the module header).
pub(crate) struct Session {
    /// `None` once abandoned.
    conn: Option<Conn>,
    generation: u64,
    pools: Pools,
    /// A statement is on the wire: the connection's state is unknown until
    /// it answers.
    busy: bool,
    /// Closed when dropped instead of returned to the pool ([`Self::retire`]).
    retired: bool,
}

impl Session {
    /// The server's id of this session (`CONNECTION_ID()`), 0 once
    /// abandoned.
    pub(crate) fn id(&self) -> u32 {
        self.conn.as_ref().map_or(0, Conn::id)
    }

    /// The server's version as its handshake gave it (0.0.0 once
    /// abandoned).
    pub(crate) fn server_version(&self) -> (u16, u16, u16) {
        self.conn.as_ref().map_or((0, 0, 0), Conn::server_version)
    }

    /// Rows matched by the last statement.
    pub(crate) fn affected_rows(&self) -> u64 {
        self.conn.as_ref().map_or(0, Conn::affected_rows)
    }

    /// The id the last statement generated (`LAST_INSERT_ID(expr)`).
    pub(crate) fn last_insert_id(&self) -> Option<u64> {
        self.conn.as_ref().and_then(Conn::last_insert_id)
    }

    /// The connection for one bounded operation, and its bound. Call
    /// [`Self::settle`] with the outcome.
    pub(crate) fn start(&mut self) -> Result<(&mut Conn, Duration), MysqlError> {
        let limit = self.pools.statement_timeout;
        match self.conn.as_mut() {
            Some(conn) => {
                self.busy = true;
                Ok((conn, limit))
            }
            // Abandoned after an earlier timeout.
            None => Err(MysqlError::Timeout {
                operation: "database statement",
                after: limit,
            }),
        }
    }

    /// The outcome of an operation [`Self::start`] began under
    /// `tokio::time::timeout`: its value, or, when it timed out, the
    /// connection abandoned and a timeout error.
    pub(crate) async fn settle<T>(&mut self, outcome: Result<T, Elapsed>) -> Result<T, MysqlError> {
        self.busy = false;
        match outcome {
            Ok(value) => Ok(value),
            Err(_elapsed) => {
                let after = self.pools.statement_timeout;
                self.abandon(after).await;
                Err(MysqlError::Timeout {
                    operation: "database statement",
                    after,
                })
            }
        }
    }

    async fn settle_driver<T>(
        &mut self,
        outcome: Result<Result<T, mysql_async::Error>, Elapsed>,
    ) -> Result<T, MysqlError> {
        self.settle(outcome).await?.map_err(|err| {
            self.retire_if_refused(&err);
            MysqlError::Statement(err)
        })
    }

    /// [`Self::retire`] if the server refused `err`'s statement a
    /// privilege.
    pub(crate) fn retire_if_refused(&mut self, err: &mysql_async::Error) {
        if is_privilege_error(err) {
            self.retire();
        }
    }

    /// Closes the connection when this is dropped instead of returning it
    /// to the pool: the server refused it a privilege, which it would go on
    /// refusing after the grant is given back (see the module header).
    pub(crate) fn retire(&mut self) {
        self.retired = true;
    }

    /// Retires the pool this came from, closes the connection without
    /// waiting on it, and kills its server session.
    async fn abandon(&mut self, after: Duration) {
        self.busy = false;
        let Some(conn) = self.conn.take() else {
            return;
        };
        let id = conn.id();
        let replaced = self.pools.retire(self.generation);
        warn!(
            event = "database_timeout",
            operation = "statement",
            timeout_ms = millis(after),
            connection_id = id,
            pool_replaced = replaced,
            "a database statement did not answer in time; its connection is abandoned"
        );
        close(conn).await;
        self.pools.kill_later(id);
    }

    /// `Queryable::exec`, bounded.
    pub(crate) async fn exec<R, S, P>(
        &mut self,
        statement: S,
        params: P,
    ) -> Result<Vec<R>, MysqlError>
    where
        R: FromRow + Send + 'static,
        S: StatementLike,
        P: Into<Params> + Send,
    {
        let (conn, limit) = self.start()?;
        let outcome = tokio::time::timeout(limit, conn.exec(statement, params)).await;
        self.settle_driver(outcome).await
    }

    /// `Queryable::exec_first`, bounded.
    pub(crate) async fn exec_first<R, S, P>(
        &mut self,
        statement: S,
        params: P,
    ) -> Result<Option<R>, MysqlError>
    where
        R: FromRow + Send + 'static,
        S: StatementLike,
        P: Into<Params> + Send,
    {
        let (conn, limit) = self.start()?;
        let outcome = tokio::time::timeout(limit, conn.exec_first(statement, params)).await;
        self.settle_driver(outcome).await
    }

    /// `Queryable::exec_drop`, bounded.
    pub(crate) async fn exec_drop<S, P>(
        &mut self,
        statement: S,
        params: P,
    ) -> Result<(), MysqlError>
    where
        S: StatementLike,
        P: Into<Params> + Send,
    {
        let (conn, limit) = self.start()?;
        let outcome = tokio::time::timeout(limit, conn.exec_drop(statement, params)).await;
        self.settle_driver(outcome).await
    }

    /// `Queryable::query` (the text protocol: nothing prepared or cached),
    /// bounded.
    pub(crate) async fn query<R>(&mut self, query: &str) -> Result<Vec<R>, MysqlError>
    where
        R: FromRow + Send + 'static,
    {
        let (conn, limit) = self.start()?;
        let outcome = tokio::time::timeout(limit, conn.query(query)).await;
        self.settle_driver(outcome).await
    }

    /// `Queryable::query_drop`, bounded.
    pub(crate) async fn query_drop(&mut self, query: &str) -> Result<(), MysqlError> {
        let (conn, limit) = self.start()?;
        let outcome = tokio::time::timeout(limit, conn.query_drop(query)).await;
        self.settle_driver(outcome).await
    }

    /// `COM_PING`, bounded.
    pub(crate) async fn ping(&mut self) -> Result<(), MysqlError> {
        let (conn, limit) = self.start()?;
        let outcome = tokio::time::timeout(limit, conn.ping()).await;
        self.settle_driver(outcome).await
    }

    /// Drops the connection without waiting on it and kills its server
    /// session: a hook-lock session whose statement failed must not keep,
    /// on a server that still believes in it, the locks its holders were
    /// just told are lost. The pool stays (one connection broke, not the
    /// path to the server).
    pub(crate) fn kill(mut self) {
        self.busy = false;
        if let Some(conn) = self.conn.take() {
            let id = conn.id();
            discard(conn);
            self.pools.kill_later(id);
        }
    }

    /// Closes the connection instead of returning it to the pool (a
    /// transaction left open by a failed commit).
    pub(crate) async fn close(mut self) {
        if let Some(conn) = self.conn.take() {
            close(conn).await;
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        let id = conn.id();
        if self.busy {
            // Cancelled mid-statement: the reply may still come, so the
            // connection must not serve anyone else.
            discard(conn);
            self.pools.kill_later(id);
        } else if self.retired {
            debug!(event = "database_connection_retired", connection_id = id);
            discard(conn);
        }
        // Otherwise dropping `conn` returns it to its pool.
    }
}

/// `COM_QUIT` within [`CLOSE_BOUND`]. `disconnect` marks the connection
/// disconnected before it writes anything, so if the write hangs and is
/// cancelled, the pool drops the socket without trying to clean it.
async fn close(conn: Conn) {
    let _ = tokio::time::timeout(CLOSE_BOUND, conn.disconnect()).await;
}

/// [`close`] in the background, from a `Drop`.
fn discard(conn: Conn) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn(close(conn));
        }
        // No runtime, so no pool task to hand it to either: closing the
        // socket is all that can happen.
        Err(_) => drop(conn),
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
