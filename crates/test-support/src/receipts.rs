//! Counting receipts per object: the receiver's cheap layer, kept for every
//! request whether or not the request itself is recorded. Per object PHID
//! (read from the payload), how many times it arrived and when it first
//! did; how many distinct objects arrived; how many bodies had no object
//! PHID. Cheap enough for the bench's thousands of requests a second.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

/// The first receipt of an object PHID and how often it arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Receipt {
    /// Requests that carried the object.
    pub count: u32,
    /// When the first of them arrived.
    pub first: Instant,
}

/// Receipts by object PHID.
#[derive(Debug, Default)]
pub(crate) struct Receipts {
    by_object: Mutex<HashMap<String, Receipt>>,
    distinct: AtomicU64,
    unparsed: AtomicU64,
}

impl Receipts {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Receipt>> {
        self.by_object.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts a request whose head arrived `at` with this body.
    pub(crate) fn count(&self, body: &[u8], at: Instant) {
        let Some(object) = object_phid(body) else {
            self.unparsed.fetch_add(1, Ordering::Relaxed);
            return;
        };
        self.lock()
            .entry(object)
            .and_modify(|r| r.count += 1)
            .or_insert_with(|| {
                self.distinct.fetch_add(1, Ordering::Relaxed);
                Receipt {
                    count: 1,
                    first: at,
                }
            });
    }

    pub(crate) fn distinct(&self) -> u64 {
        self.distinct.load(Ordering::Relaxed)
    }

    pub(crate) fn unparsed(&self) -> u64 {
        self.unparsed.load(Ordering::Relaxed)
    }

    pub(crate) fn snapshot(&self) -> HashMap<String, Receipt> {
        self.lock().clone()
    }

    /// First receipts of the objects `keep` selects, in time order.
    pub(crate) fn first_receipts(&self, keep: impl Fn(&str) -> bool) -> Vec<Instant> {
        let mut firsts: Vec<Instant> = self
            .lock()
            .iter()
            .filter(|(object, _)| keep(object))
            .map(|(_, r)| r.first)
            .collect();
        firsts.sort();
        firsts
    }
}

/// The object's PHID: the payload's first `"phid"` is `object.phid`
/// (protocol §7 fixes the key order).
pub fn object_phid(body: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    let start = text.find("\"phid\": \"")? + "\"phid\": \"".len();
    let len = text[start..].find('"')?;
    Some(text[start..start + len].to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receipts_count_objects_and_bodies_without_one() {
        let receipts = Receipts::default();
        let first = Instant::now();
        receipts.count(b"{\"object\": {\"phid\": \"PHID-TASK-a\"}}", first);
        receipts.count(b"{\"object\": {\"phid\": \"PHID-TASK-a\"}}", Instant::now());
        receipts.count(b"{\"object\": {\"phid\": \"PHID-TASK-b\"}}", Instant::now());
        receipts.count(b"not a payload", Instant::now());
        assert_eq!(receipts.distinct(), 2);
        assert_eq!(receipts.unparsed(), 1);
        let a = receipts.snapshot()["PHID-TASK-a"];
        assert_eq!((a.count, a.first), (2, first));
        assert_eq!(receipts.first_receipts(|o| o.ends_with('b')).len(), 1);
    }
}
