//! The backlog: rows fetched but not finished, per hook and in id order;
//! which hooks are running, which are kept out of polls for a while, and
//! each hook's pace between its runs (see `claim_group`).
//!
//! Owned by the loop alone (no lock); it does no I/O.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use crate::model::RequestRow;

use super::hook_run::RunReport;

/// Rows fetched but not finished, per hook, and hooks kept out for a while.
#[derive(Default)]
pub(super) struct Backlog {
    waiting: HashMap<String, BTreeMap<u64, RequestRow>>,
    pending: HashSet<u64>,
    active: HashSet<String>,
    excluded: HashMap<String, Duration>,
    /// Rows per claim for each hook seen, as its last run left it; unknown
    /// hooks start at one. Only one run of a hook goes at a time, so the
    /// pace travels with it.
    paces: HashMap<String, usize>,
}

impl Backlog {
    /// Adds fetched rows; returns how many were new to this instance.
    pub(super) fn absorb(&mut self, rows: Vec<RequestRow>) -> usize {
        let mut new = 0;
        for row in rows {
            let waiting = self.waiting.entry(row.webhook_phid.clone()).or_default();
            if self.pending.insert(row.id) {
                new += 1;
                waiting.insert(row.id, row);
            } else if let Some(seen) = waiting.get_mut(&row.id) {
                // Still waiting here: keep the newest version for the claim.
                *seen = row;
            }
        }
        self.waiting.retain(|_, rows| !rows.is_empty());
        new
    }

    /// The idle hook that `may_start` allows whose oldest waiting row is
    /// oldest, with all its rows.
    pub(super) fn next_run(
        &mut self,
        may_start: impl Fn(&str) -> bool,
    ) -> Option<(String, Vec<RequestRow>)> {
        let hook = self
            .waiting
            .iter()
            .filter(|(hook, _)| !self.active.contains(*hook) && may_start(hook))
            .filter_map(|(hook, rows)| rows.keys().next().map(|first| (*first, hook)))
            .min()
            .map(|(_, hook)| hook.clone())?;
        let rows = self.waiting.remove(&hook)?.into_values().collect();
        self.active.insert(hook.clone());
        Some((hook, rows))
    }

    /// The hooks running now.
    pub(super) fn running(&self) -> impl Iterator<Item = &String> {
        self.active.iter()
    }

    /// The pace `hook`'s next run starts at.
    pub(super) fn pace(&self, hook: &str) -> usize {
        self.paces.get(hook).copied().unwrap_or(1)
    }

    pub(super) fn finish(&mut self, report: &RunReport, exclude_until: Duration) {
        self.active.remove(&report.hook);
        for id in &report.ids {
            self.pending.remove(id);
        }
        if report.exclude {
            self.excluded.insert(report.hook.clone(), exclude_until);
        }
        match self.paces.get_mut(&report.hook) {
            Some(pace) => *pace = report.pace,
            None if report.pace == 1 => {}
            None => {
                self.paces.insert(report.hook.clone(), report.pace);
            }
        }
    }

    /// Lets hooks kept out until `now` or before into polls again.
    pub(super) fn end_exclusions(&mut self, now: Duration) {
        self.excluded.retain(|_, until| *until > now);
    }

    /// Rows waiting for a hook that is not running and not `held_back`:
    /// what the next runs can start on. Rows a running (or held back)
    /// hook holds do not count, so a slow hook's queue never keeps the
    /// others from being polled.
    pub(super) fn startable(&self, held_back: impl Fn(&str) -> bool) -> usize {
        self.waiting
            .iter()
            .filter(|(hook, _)| !self.active.contains(*hook) && !held_back(hook))
            .map(|(_, rows)| rows.len())
            .sum()
    }

    /// Hooks to leave out of the next candidate query: those kept out for
    /// a while, those running now and those waiting but `held_back` (their
    /// rows are in hand; re-reading them would only crowd out other hooks'
    /// rows).
    pub(super) fn hooks_to_exclude(&self, held_back: impl Fn(&str) -> bool) -> Vec<String> {
        let waiting_held_back = self.waiting.keys().filter(|hook| held_back(hook));
        let mut hooks: Vec<String> = self
            .excluded
            .keys()
            .chain(self.active.iter())
            .chain(waiting_held_back)
            .cloned()
            .collect();
        hooks.sort();
        hooks.dedup();
        hooks
    }

    pub(super) fn drop_waiting(&mut self) {
        for rows in self.waiting.drain().map(|(_, rows)| rows) {
            for id in rows.keys() {
                self.pending.remove(id);
            }
        }
    }
}
