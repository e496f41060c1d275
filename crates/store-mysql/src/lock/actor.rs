//! One lock session's task: it owns a database session, runs the
//! `GET_LOCK` / `RELEASE_LOCK` / `IS_USED_LOCK` statements its handles
//! ask for, one at a time, and keeps the names it holds.
//!
//! Checks that arrive together share one statement: while the session
//! answers, every lock it holds is held. The first failure that means the
//! session is gone ends its epoch for every lock on it at once, drops the
//! connection and kills its server session; the next take opens a fresh
//! one, in a new epoch. While it holds locks and nobody asks, it checks
//! itself every [`KEEPALIVE`], so a session broken while idle is found
//! out then too; once it has held none for [`IDLE_CLOSE`], its connection
//! is closed (the next take opens one again).

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use mysql_async::Row;
use tokio::sync::{mpsc, oneshot};
use tracing::warn;
use webhook_core::StoreError;

use crate::connector::Connector;
use crate::error::MysqlError;
use crate::rows;
use crate::session::Session;
use crate::sql;

use super::{SessionHandle, SessionState};

/// A session holding locks checks itself when this long passes without a
/// statement.
const KEEPALIVE: Duration = Duration::from_secs(1);

/// A session holding no lock for this long is closed.
const IDLE_CLOSE: Duration = Duration::from_secs(60);

/// Commands handled in one round.
const ROUND_MAX: usize = 256;

/// What a handle asks its lock session.
pub(super) enum Command {
    /// `GET_LOCK(name, 0)`; `session` is the asker's handle of this
    /// session, for a grant nobody claims to release itself.
    Take {
        name: String,
        session: SessionHandle,
        reply: oneshot::Sender<Result<Option<Granted>, StoreError>>,
    },
    /// Whether `name`, taken in `epoch`, is still held.
    Check {
        name: String,
        epoch: u64,
        reply: oneshot::Sender<Result<bool, StoreError>>,
    },
    /// `RELEASE_LOCK(name)` if it is still `epoch`'s; no reply for a drop.
    Release {
        name: String,
        epoch: u64,
        reply: Option<oneshot::Sender<Result<(), StoreError>>>,
    },
    /// Close the session (shutdown).
    Close { reply: oneshot::Sender<()> },
}

/// A [`Command::Check`] waiting for the round's one statement.
struct Check {
    name: String,
    epoch: u64,
    reply: oneshot::Sender<Result<bool, StoreError>>,
}

/// A lock taken: the epoch and server session that hold it. Until its
/// asker turns it into a handle ([`Granted::into_parts`]), dropping it
/// releases the lock: an asker cancelled after the answer was sent (the
/// grant then dies in the reply channel) must not leave it held for the
/// session's life.
pub(super) struct Granted {
    epoch: u64,
    connection_id: u32,
    unclaimed: Option<(String, SessionHandle)>,
}

impl Granted {
    /// `(epoch, connection_id)`, and the lock is the caller's to release.
    pub(super) fn into_parts(mut self) -> (u64, u32) {
        self.unclaimed = None;
        (self.epoch, self.connection_id)
    }
}

impl Drop for Granted {
    fn drop(&mut self) {
        if let Some((name, session)) = self.unclaimed.take() {
            let _ = session.send(Command::Release {
                name,
                epoch: self.epoch,
                reply: None,
            });
        }
    }
}

/// Starts a lock session's task (inside the runtime); it opens its
/// database session on the first take.
pub(super) fn start(connector: Connector) -> SessionHandle {
    let (commands, inbox) = mpsc::unbounded_channel();
    let state = Arc::new(SessionState::default());
    let actor = Actor {
        connector,
        state: Arc::clone(&state),
        inbox,
        open: None,
        epochs: 0,
        held: HashSet::new(),
    };
    tokio::spawn(actor.run());
    SessionHandle { commands, state }
}

/// The open database session and the epoch it serves.
struct Open {
    session: Session,
    epoch: u64,
    connection_id: u32,
}

struct Actor {
    connector: Connector,
    state: Arc<SessionState>,
    inbox: mpsc::UnboundedReceiver<Command>,
    open: Option<Open>,
    /// Epochs started so far; the current one is `open`'s.
    epochs: u64,
    /// Names the open session holds.
    held: HashSet<String>,
}

impl Actor {
    async fn run(mut self) {
        let mut round = Vec::new();
        loop {
            let wait = if self.held.is_empty() {
                IDLE_CLOSE
            } else {
                KEEPALIVE
            };
            let first = match tokio::time::timeout(wait, self.inbox.recv()).await {
                Ok(Some(command)) => command,
                // Every handle and the store are gone: dropping the
                // session closes it, which frees anything it still held.
                Ok(None) => break,
                Err(_quiet) => {
                    self.quiet().await;
                    continue;
                }
            };
            round.push(first);
            while round.len() < ROUND_MAX {
                match self.inbox.try_recv() {
                    Ok(command) => round.push(command),
                    Err(_) => break,
                }
            }
            let handled = round.len();
            self.handle(&mut round).await;
            self.state.pending.fetch_sub(handled, Ordering::AcqRel);
        }
    }

    /// Nothing asked for a while: a session holding locks checks itself;
    /// one holding none is closed.
    async fn quiet(&mut self) {
        if self.held.is_empty() {
            if let Some(open) = self.open.take() {
                self.state.live_epoch.store(0, Ordering::Release);
                drop(open.session);
            }
            return;
        }
        self.check_session().await;
    }

    /// One round: the checks first (one statement for all), then the
    /// takes, releases and closes in the order they came.
    async fn handle(&mut self, round: &mut Vec<Command>) {
        let mut checks = Vec::new();
        let mut rest = Vec::new();
        for command in round.drain(..) {
            match command {
                Command::Check { name, epoch, reply } => checks.push(Check { name, epoch, reply }),
                other => rest.push(other),
            }
        }
        self.answer_checks(checks).await;
        // One failed open fails the round's other takes at once: each
        // would wait out the connect timeout again, one after another.
        let mut open_failed = false;
        for command in rest {
            match command {
                Command::Take {
                    name,
                    session,
                    reply,
                } => {
                    if open_failed {
                        let _ = reply.send(Err(MysqlError::LockSessionUnavailable
                            .into_store_error(&self.connector.database)));
                        continue;
                    }
                    open_failed = !self.take(name, session, reply).await;
                }
                Command::Release { name, epoch, reply } => {
                    let released = self.release(&name, epoch).await;
                    if let Some(reply) = reply {
                        let _ = reply.send(released);
                    }
                }
                Command::Close { reply } => {
                    self.close().await;
                    let _ = reply.send(());
                }
                Command::Check { .. } => {}
            }
        }
    }

    fn holds(&self, name: &str, epoch: u64) -> bool {
        self.open.as_ref().is_some_and(|open| open.epoch == epoch) && self.held.contains(name)
    }

    /// Every check of the round: one statement on the session if any of
    /// them is for a lock it holds; a session that failed it has lost them
    /// all, so each answer is then a certain no.
    async fn answer_checks(&mut self, checks: Vec<Check>) {
        if checks.iter().any(|c| self.holds(&c.name, c.epoch)) {
            self.check_session().await;
        }
        for check in checks {
            let _ = check.reply.send(Ok(self.holds(&check.name, check.epoch)));
        }
    }

    /// Asks the server whether the session still holds one of its locks:
    /// if it answers yes, it holds every lock it took (only the session
    /// itself, or its end, frees a named lock). A session that cannot
    /// answer, or says no, is lost with all its locks.
    async fn check_session(&mut self) {
        let (Some(open), Some(name)) = (self.open.as_mut(), self.held.iter().next()) else {
            return;
        };
        let answer = open
            .session
            .exec_first::<Row, _, _>(sql::LOCK_STILL_HELD, (name.as_str(),))
            .await;
        let failure = match answer.map(|row| rows::nullable_int(row, "IS_USED_LOCK")) {
            Ok(Ok(Some(1))) => return,
            Ok(Ok(other)) => MysqlError::UnexpectedResult {
                statement: "IS_USED_LOCK",
                detail: format!("{other:?} for a lock this session took"),
            },
            Ok(Err(detail)) => MysqlError::UnexpectedResult {
                statement: "IS_USED_LOCK",
                detail,
            },
            Err(err) => err,
        };
        let why = failure.into_store_error(&self.connector.database);
        self.lose(&why);
    }

    /// Opens a session (a new epoch) unless one is open.
    async fn ensure_open(&mut self) -> Result<(), StoreError> {
        if self.open.is_some() {
            return Ok(());
        }
        // Outside the pool: closing it (dropped, or at shutdown) frees
        // every lock it holds.
        let session = self.connector.standalone().await?;
        let version = session.server_version();
        if !holds_many_locks(version) {
            session.close().await;
            let (major, minor, patch) = version;
            return Err(MysqlError::ServerTooOldForLocks {
                version: format!("{major}.{minor}.{patch}"),
            }
            .into_store_error(&self.connector.database));
        }
        self.epochs += 1;
        let epoch = self.epochs;
        self.open = Some(Open {
            connection_id: session.id(),
            session,
            epoch,
        });
        self.held.clear();
        self.state.live_epoch.store(epoch, Ordering::Release);
        Ok(())
    }

    /// Answers a take; false when no session could be opened for it.
    async fn take(
        &mut self,
        name: String,
        session: SessionHandle,
        reply: oneshot::Sender<Result<Option<Granted>, StoreError>>,
    ) -> bool {
        if reply.is_closed() {
            return true;
        }
        if let Err(err) = self.ensure_open().await {
            let _ = reply.send(Err(err));
            return false;
        }
        // A grant the asker is no longer there to take is dropped, which
        // sends its release (see `Granted`).
        let _ = reply.send(self.try_take(&name, session).await);
        true
    }

    async fn try_take(
        &mut self,
        name: &str,
        session: SessionHandle,
    ) -> Result<Option<Granted>, StoreError> {
        if self.held.contains(name) {
            // Ours already, for another delivery here: the server would
            // count a nested lock and say yes.
            return Ok(None);
        }
        let Some(open) = self.open.as_mut() else {
            return Ok(None);
        };
        let answer = open
            .session
            .exec_first::<Row, _, _>(sql::GET_LOCK, (name,))
            .await;
        let (epoch, connection_id) = (open.epoch, open.connection_id);
        match answer.map(|row| rows::nullable_int(row, "GET_LOCK")) {
            Ok(Ok(Some(1))) => {
                self.held.insert(name.to_owned());
                self.state.held.store(self.held.len(), Ordering::Release);
                Ok(Some(Granted {
                    epoch,
                    connection_id,
                    unclaimed: Some((name.to_owned(), session)),
                }))
            }
            Ok(Ok(Some(0))) => Ok(None),
            Ok(Ok(other)) => Err(self.unsure(MysqlError::UnexpectedResult {
                statement: "GET_LOCK",
                detail: format!("{other:?}"),
            })),
            Ok(Err(detail)) => Err(self.unsure(MysqlError::UnexpectedResult {
                statement: "GET_LOCK",
                detail,
            })),
            Err(err) => Err(self.unsure(err)),
        }
    }

    async fn release(&mut self, name: &str, epoch: u64) -> Result<(), StoreError> {
        if !self.holds(name, epoch) {
            // Lost with its epoch (the server freed it then), or never
            // taken: nothing of anyone else's may be freed in its name.
            return Err(MysqlError::LockNotHeld {
                name: name.to_owned(),
            }
            .into_store_error(&self.connector.database));
        }
        let Some(open) = self.open.as_mut() else {
            return Ok(());
        };
        let answer = open
            .session
            .exec_first::<Row, _, _>(sql::RELEASE_LOCK, (name,))
            .await;
        self.held.remove(name);
        self.state.held.store(self.held.len(), Ordering::Release);
        match answer.map(|row| rows::nullable_int(row, "RELEASE_LOCK")) {
            Ok(Ok(Some(1))) => Ok(()),
            // The server says this session did not hold it: it cannot be
            // trusted with the others either.
            Ok(Ok(_)) => {
                let why = MysqlError::LockNotHeld {
                    name: name.to_owned(),
                }
                .into_store_error(&self.connector.database);
                self.lose(&why);
                Err(why)
            }
            Ok(Err(detail)) => Err(self.unsure(MysqlError::UnexpectedResult {
                statement: "RELEASE_LOCK",
                detail,
            })),
            Err(err) => Err(self.unsure(err)),
        }
    }

    /// A `GET_LOCK` or `RELEASE_LOCK` without a clean answer, as the
    /// caller's error. Whatever it was (a broken connection, a timeout, a
    /// server error, an answer that does not decode), the server may now
    /// hold a lock this task does not know of, or not hold one it does:
    /// the session is lost, and killed, so the server's view ends with it.
    fn unsure(&mut self, err: MysqlError) -> StoreError {
        let store_error = err.into_store_error(&self.connector.database);
        self.lose(&store_error);
        store_error
    }

    /// Ends the epoch: every lock of it is lost, now, for every handle;
    /// the connection is dropped and its server session killed.
    fn lose(&mut self, why: &StoreError) {
        self.state.live_epoch.store(0, Ordering::Release);
        let lost = self.held.len();
        self.held.clear();
        self.state.held.store(0, Ordering::Release);
        let Some(open) = self.open.take() else {
            return;
        };
        warn!(
            event = "hook_lock_session_lost",
            connection_id = open.connection_id,
            locks_lost = lost,
            error = %webhook_core::error_chain(why),
            "a hook lock session failed: every lock it held is lost at once, and its server \
             session is killed"
        );
        open.session.kill();
    }

    /// Shutdown: `COM_QUIT` frees every lock the session still holds.
    async fn close(&mut self) {
        self.state.live_epoch.store(0, Ordering::Release);
        self.held.clear();
        self.state.held.store(0, Ordering::Release);
        if let Some(open) = self.open.take() {
            open.session.close().await;
        }
    }
}

/// Whether a server of this version keeps every named lock a session
/// takes: MySQL from 5.7, MariaDB from 10.0.2 (MariaDB numbers itself 10
/// and up; before that both took one lock per session, a second
/// `GET_LOCK` silently freeing the first).
fn holds_many_locks(version: (u16, u16, u16)) -> bool {
    version >= (5, 7, 0) && !((10, 0, 0)..(10, 0, 2)).contains(&version)
}

#[cfg(test)]
mod tests {
    use super::holds_many_locks;

    #[test]
    fn only_servers_that_keep_many_named_locks_per_session_are_used() {
        for old in [(5, 5, 62), (5, 6, 51), (10, 0, 1), (0, 0, 0)] {
            assert!(!holds_many_locks(old), "{old:?}");
        }
        for new in [
            (5, 7, 0),
            (8, 0, 36),
            (9, 1, 0),
            (10, 0, 2),
            (10, 11, 19),
            (11, 4, 2),
        ] {
            assert!(holds_many_locks(new), "{new:?}");
        }
    }
}
