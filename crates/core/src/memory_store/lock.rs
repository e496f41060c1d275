//! `MemoryHookLock`: the in-memory stand-in for Phorge's per-hook
//! `GET_LOCK`, held by a numbered "session" so a broken session can be
//! simulated (`MemoryStore::lose_lock_sessions`).

use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;

use super::{Inner, MemoryStore, StoreOp};
use crate::store::{HookLock, StoreError};

/// A held per-hook lock: the "session" that holds it, freed on release or
/// drop, and no longer held once that session is lost.
#[derive(Debug)]
pub(super) struct MemoryHookLock {
    store: Arc<Mutex<Inner>>,
    hook_phid: String,
    session: u64,
    released: bool,
}

impl MemoryHookLock {
    /// The lock `session` has just taken on `hook_phid` in `store`.
    pub(super) fn new(store: Arc<Mutex<Inner>>, hook_phid: String, session: u64) -> Self {
        Self {
            store,
            hook_phid,
            session,
            released: false,
        }
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn ours(&self, inner: &Inner) -> bool {
        inner.held_locks.get(&self.hook_phid) == Some(&self.session)
    }

    fn free(&mut self) {
        if !self.released {
            self.released = true;
            let mut inner = self.inner();
            if self.ours(&inner) {
                inner.held_locks.remove(&self.hook_phid);
            }
        }
    }
}

#[async_trait]
impl HookLock for MemoryHookLock {
    async fn release(mut self: Box<Self>) -> Result<(), StoreError> {
        self.free();
        Ok(())
    }

    async fn still_held(&mut self) -> Result<bool, StoreError> {
        let mut inner = self.inner();
        MemoryStore::check_fault(&mut inner, StoreOp::LockCheck)?;
        Ok(!self.released && self.ours(&inner))
    }
}

impl Drop for MemoryHookLock {
    fn drop(&mut self) {
        self.free();
    }
}
