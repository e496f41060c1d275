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
//!
//! Under task adoption the locks are also **kept** ([`LockSessions::keep`]):
//! the lock of every hook that is not disabled is taken and held between
//! deliveries, so a `phd` taskmaster that leases a webhook task first
//! finds the hook locked and yields it (Phorge's worker takes the same
//! lock, without waiting, before it calls), and the daemon adopts the
//! yielded task. A delivery borrows a kept lock ([`LockSessions::try_lock`]
//! lends it) and its release hands it back instead of freeing it; a lock
//! whose session broke is never handed back, and taken again by the next
//! [`LockSessions::keep`].

mod actor;

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

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

/// A kept lock's place: held here between deliveries, or lent to one.
enum Slot {
    Here(MysqlHookLock),
    Lent,
}

/// The locks kept between deliveries, by name.
#[derive(Default)]
struct Kept {
    /// Whether released locks are kept; off (the default), a release
    /// frees the lock.
    on: AtomicBool,
    slots: Mutex<HashMap<String, Slot>>,
}

impl Kept {
    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<String, Slot>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The kept lock of `name`, lent: `None` when none is kept here (or
    /// the one kept was lost with its session).
    fn lend(&self, name: &str) -> Option<MysqlHookLock> {
        let mut slots = self.slots();
        let slot = slots.get_mut(name)?;
        match std::mem::replace(slot, Slot::Lent) {
            Slot::Here(lock) if lock.epoch_is_live() => Some(lock),
            Slot::Here(lost) => {
                slots.remove(name);
                drop(slots);
                drop(lost.unkept());
                None
            }
            Slot::Lent => None,
        }
    }

    /// Takes `lock` back from a delivery; `Err` with it when it is not to
    /// be kept (keeping is off, its hook is no longer kept, or its session
    /// broke), for the caller to free.
    fn take_back(&self, mut lock: MysqlHookLock) -> Result<(), MysqlHookLock> {
        if !self.on.load(Ordering::Acquire) || !lock.epoch_is_live() {
            return Err(lock);
        }
        // A kept lock holds no reference to the keeper that holds it.
        lock.kept = None;
        let mut slots = self.slots();
        match slots.get_mut(&lock.name) {
            Some(slot @ Slot::Lent) => {
                *slot = Slot::Here(lock);
                Ok(())
            }
            None => {
                slots.insert(lock.name.clone(), Slot::Here(lock));
                Ok(())
            }
            Some(Slot::Here(_)) => Err(lock),
        }
    }
}

/// What one [`LockSessions::keep`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KeptLocks {
    /// Hooks whose lock this process holds now (kept or lent).
    pub held: usize,
    /// Hooks whose lock another session holds (another daemon instance,
    /// or a taskmaster in the middle of a call): taken when it is freed.
    pub elsewhere: usize,
}

/// The lock sessions of one store, started on first use (inside the
/// runtime), each opening its database session only when first needed.
#[derive(Clone)]
pub(crate) struct LockSessions {
    connector: Connector,
    count: usize,
    sessions: Arc<OnceLock<Vec<SessionHandle>>>,
    kept: Arc<Kept>,
}

impl LockSessions {
    /// `count` lock sessions over `connector` (at least one).
    pub(crate) fn new(connector: Connector, count: usize) -> Self {
        Self {
            connector,
            count: count.max(1),
            sessions: Arc::new(OnceLock::new()),
            kept: Arc::new(Kept::default()),
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

    /// The lock of `name`: the kept one, lent, when this process keeps
    /// it; otherwise `GET_LOCK(name, 0)` on the least busy lock session.
    /// `None` when another session (here or elsewhere) holds it.
    pub(crate) async fn try_lock(&self, name: String) -> Result<Option<MysqlHookLock>, StoreError> {
        if let Some(mut lent) = self.kept.lend(&name) {
            lent.kept = Some(Arc::clone(&self.kept));
            return Ok(Some(lent));
        }
        self.take(name).await
    }

    /// Keeps the locks of `names` and no others from now on (see the
    /// module's header): takes each one not held here yet, and frees the
    /// kept locks of names no longer listed. A lock another session holds
    /// is counted, and taken by a later call once it is free.
    pub(crate) async fn keep(&self, names: &[String]) -> Result<KeptLocks, StoreError> {
        self.kept.on.store(true, Ordering::Release);
        let wanted: std::collections::HashSet<&str> = names.iter().map(String::as_str).collect();
        let (unwanted, missing) = {
            let mut slots = self.kept.slots();
            let mut unwanted = Vec::new();
            slots.retain(|name, slot| {
                let keep = wanted.contains(name.as_str())
                    && match slot {
                        Slot::Here(lock) => lock.epoch_is_live(),
                        Slot::Lent => true,
                    };
                if !keep {
                    if let Slot::Here(lock) = std::mem::replace(slot, Slot::Lent) {
                        unwanted.push(lock);
                    }
                }
                keep
            });
            let missing: Vec<String> = names
                .iter()
                .filter(|name| !slots.contains_key(name.as_str()))
                .cloned()
                .collect();
            (unwanted, missing)
        };
        for lock in unwanted {
            Box::new(lock.unkept()).release().await?;
        }
        let mut found = KeptLocks {
            held: names.len() - missing.len(),
            elsewhere: 0,
        };
        for name in missing {
            match self.take(name).await? {
                Some(lock) => match self.kept.take_back(lock) {
                    Ok(()) => found.held += 1,
                    Err(lock) => Box::new(lock.unkept()).release().await?,
                },
                None => found.elsewhere += 1,
            }
        }
        Ok(found)
    }

    /// `GET_LOCK(name, 0)` on the least busy lock session.
    async fn take(&self, name: String) -> Result<Option<MysqlHookLock>, StoreError> {
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
                kept: Some(Arc::clone(&self.kept)),
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
    /// Where a release hands the lock back to, when locks are kept.
    kept: Option<Arc<Kept>>,
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
    /// This lock, to be freed by its release or drop even while locks are
    /// kept.
    fn unkept(mut self) -> Self {
        self.kept = None;
        self
    }

    /// Hands this lock back to the kept locks, when they keep it; `Err`
    /// with it otherwise, to be freed.
    fn hand_back(mut self) -> Result<(), Self> {
        match self.kept.take() {
            Some(kept) => kept.take_back(self).map_err(|mut lock| {
                lock.kept = None;
                lock
            }),
            None => Err(self),
        }
    }

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
    async fn release(self: Box<Self>) -> Result<(), StoreError> {
        let mut this = match (*self).hand_back() {
            Ok(()) => return Ok(()),
            Err(lock) => lock,
        };
        let Some(session) = this.session.take() else {
            return Ok(());
        };
        let (name, epoch) = (std::mem::take(&mut this.name), this.epoch);
        session
            .ask(&this.database, |reply| Command::Release {
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
        if let (Some(kept), true) = (self.kept.take(), self.session.is_some()) {
            let lock = Self {
                name: std::mem::take(&mut self.name),
                connection_id: self.connection_id,
                epoch: self.epoch,
                database: std::mem::take(&mut self.database),
                session: self.session.take(),
                kept: Some(kept),
            };
            // Not kept: dropped again, now without a keeper, and freed.
            let _ = lock.hand_back();
            return;
        }
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
