//! Phorge's per-hook named locks (`GET_LOCK(name, 0)`), many on each of a
//! few lock sessions ([`LockSessions`]), and the handle a delivery holds
//! ([`MysqlHookLock`]).
//!
//! A MySQL named lock belongs to a session, and one session may hold many
//! (MySQL ≥ 5.7, MariaDB ≥ 10.0.2). So a lock no longer pins a connection:
//! each lock session is owned by one task ([`actor`]) that takes, checks
//! and frees the locks its handles ask for, one statement at a time, and
//! knows which names it holds. Concurrency so costs no connections: the
//! pool is sized by what the queries need.
//!
//! The guarantees are the one-session-per-lock ones:
//!
//! * a lock is freed only by its holder: a handle names the session
//!   *epoch* it was taken in (a session replaced after a failure starts a
//!   new epoch), and its release or check never touches a later epoch's
//!   lock of the same name;
//! * a broken session's locks are known lost **at once**: the first
//!   statement that fails on it (a handle's check, a take, a release, or
//!   the session's own keep-alive check while it holds locks) ends its
//!   epoch for every handle together, and its server session is killed so
//!   the server frees them too;
//! * one name is held at most once in this process: a second take of a
//!   name the session holds is refused locally (the server would count it
//!   as a nested lock and grant it).

mod actor;

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use tokio::sync::{mpsc, oneshot};
use webhook_core::{HookLock, StoreError};

use crate::connector::Connector;
use crate::error::MysqlError;

use actor::Command;

/// What every handle of one lock session shares with its task.
#[derive(Debug, Default)]
struct SessionState {
    /// The epoch whose locks are held now; 0 while no session is open.
    /// A handle taken in another epoch has lost its lock.
    live_epoch: AtomicU64,
    /// Commands sent and not yet answered: new locks go to the session
    /// with the fewest.
    pending: AtomicUsize,
    /// Locks held now (diagnostics).
    held: AtomicUsize,
}

impl SessionState {
    fn is_live(&self, epoch: u64) -> bool {
        epoch != 0 && self.live_epoch.load(Ordering::Acquire) == epoch
    }
}

/// One lock session's task, as the handles see it.
#[derive(Clone)]
struct SessionHandle {
    commands: mpsc::UnboundedSender<Command>,
    state: Arc<SessionState>,
}

impl SessionHandle {
    /// Sends `command`; false when the task is gone (the runtime that ran
    /// it shut down).
    fn send(&self, command: Command) -> bool {
        self.state.pending.fetch_add(1, Ordering::AcqRel);
        if self.commands.send(command).is_ok() {
            return true;
        }
        self.state.pending.fetch_sub(1, Ordering::AcqRel);
        false
    }

    /// Sends what `command` builds around a fresh reply channel and waits
    /// for the answer.
    async fn ask<T>(
        &self,
        database: &str,
        command: impl FnOnce(oneshot::Sender<Result<T, StoreError>>) -> Command,
    ) -> Result<T, StoreError> {
        let (reply, answer) = oneshot::channel();
        if !self.send(command(reply)) {
            return Err(gone(database));
        }
        answer.await.unwrap_or_else(|_| Err(gone(database)))
    }
}

fn gone(database: &str) -> StoreError {
    MysqlError::LockSessionStopped.into_store_error(database)
}

/// The lock sessions of one store, started on first use (inside the
/// runtime), each opening its database session only when first needed.
#[derive(Clone)]
pub(crate) struct LockSessions {
    connector: Connector,
    count: usize,
    sessions: Arc<OnceLock<Vec<SessionHandle>>>,
}

impl LockSessions {
    /// `count` lock sessions over `connector` (at least one).
    pub(crate) fn new(connector: Connector, count: usize) -> Self {
        Self {
            connector,
            count: count.max(1),
            sessions: Arc::new(OnceLock::new()),
        }
    }

    fn sessions(&self) -> &[SessionHandle] {
        self.sessions.get_or_init(|| {
            (0..self.count)
                .map(|_| actor::start(self.connector.clone()))
                .collect()
        })
    }

    /// The session with the fewest commands waiting, and among those the
    /// one holding fewest locks, so locks spread over the sessions (one
    /// failure loses fewer of them) and a quiet daemon opens only as many
    /// sessions as it holds locks, up to the count.
    fn least_busy(&self) -> Option<&SessionHandle> {
        self.sessions().iter().min_by_key(|s| {
            (
                s.state.pending.load(Ordering::Acquire),
                s.state.held.load(Ordering::Acquire),
            )
        })
    }

    /// `GET_LOCK(name, 0)` on the least busy lock session: the lock when
    /// taken, `None` when another session (here or elsewhere) holds it.
    pub(crate) async fn try_lock(&self, name: String) -> Result<Option<MysqlHookLock>, StoreError> {
        let database = &self.connector.database;
        let Some(session) = self.least_busy() else {
            return Err(gone(database));
        };
        let asked = name.clone();
        let granted = session
            .ask(database, |reply| Command::Take {
                name: asked,
                session: session.clone(),
                reply,
            })
            .await?;
        Ok(granted.map(|granted| {
            let (epoch, connection_id) = granted.into_parts();
            MysqlHookLock {
                name,
                connection_id,
                epoch,
                database: database.clone(),
                session: Some(session.clone()),
            }
        }))
    }

    /// Locks held now, over all lock sessions.
    pub(crate) fn held(&self) -> usize {
        self.sessions.get().map_or(0, |all| {
            all.iter()
                .map(|s| s.state.held.load(Ordering::Acquire))
                .sum()
        })
    }

    /// Closes every lock session at once (shutdown): `COM_QUIT` frees
    /// its locks, and its connection, standalone, is gone.
    pub(crate) async fn close(&self) {
        let Some(all) = self.sessions.get() else {
            return;
        };
        // All asked first, so they close side by side.
        let closing: Vec<_> = all
            .iter()
            .filter_map(|session| {
                let (reply, closed) = oneshot::channel();
                session.send(Command::Close { reply }).then_some(closed)
            })
            .collect();
        for closed in closing {
            let _ = closed.await;
        }
    }
}

/// A held per-hook lock: its name, and the lock session and epoch that
/// hold it. Released explicitly, or when dropped (the release is sent to
/// the session's task, which needs no runtime on the dropping thread).
pub struct MysqlHookLock {
    name: String,
    connection_id: u32,
    epoch: u64,
    database: String,
    /// `None` once released.
    session: Option<SessionHandle>,
}

impl fmt::Debug for MysqlHookLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlHookLock")
            .field("name", &self.name)
            .field("connection_id", &self.connection_id)
            .field("epoch", &self.epoch)
            .field("released", &self.session.is_none())
            .finish()
    }
}

impl MysqlHookLock {
    /// The `GET_LOCK` name (Phorge's, see `webhook_core::hook_lock_name`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The server's id of the holding session, as `IS_USED_LOCK` reports it.
    pub fn connection_id(&self) -> u32 {
        self.connection_id
    }

    /// Whether the session that took the lock is still the live one,
    /// without asking the server (see [`HookLock::still_held`] for the
    /// check that does).
    pub fn epoch_is_live(&self) -> bool {
        self.session
            .as_ref()
            .is_some_and(|s| s.state.is_live(self.epoch))
    }
}

#[async_trait]
impl HookLock for MysqlHookLock {
    async fn release(mut self: Box<Self>) -> Result<(), StoreError> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        let (name, epoch) = (std::mem::take(&mut self.name), self.epoch);
        session
            .ask(&self.database, |reply| Command::Release {
                name,
                epoch,
                reply: Some(reply),
            })
            .await
    }

    /// A lost epoch answers at once; otherwise the holding session is
    /// asked (with every other check waiting on it, in one statement), so
    /// a session killed since its last statement is found out here.
    async fn still_held(&mut self) -> Result<bool, StoreError> {
        let Some(session) = self.session.as_ref() else {
            return Ok(false);
        };
        if !session.state.is_live(self.epoch) {
            return Ok(false);
        }
        let (name, epoch) = (self.name.clone(), self.epoch);
        session
            .ask(&self.database, |reply| Command::Check {
                name,
                epoch,
                reply,
            })
            .await
    }
}

impl Drop for MysqlHookLock {
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            // If the task is gone, so is its session, and with it the lock.
            let _ = session.send(Command::Release {
                name: std::mem::take(&mut self.name),
                epoch: self.epoch,
                reply: None,
            });
        }
    }
}
