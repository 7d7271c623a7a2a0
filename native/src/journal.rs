//! The undo journal: every state change a run makes, replayed backwards when the run fails.

use crate::aggregate::{Candidates, CountMap};
use crate::engine::Engine;
use crate::row::Row;
use crate::storage::SharedRows;
use crate::value::{Ordered, Value};
use crate::waits::forget;

/// One undo step; a failed run replays the journal backwards. Relations are numbered by `u32` and
/// a candidate is kept as its value, so that a step is 40 bytes: a re-optimization journals
/// several steps for every alternative it re-costs.
pub enum Undo {
    Shown(u32, Row),
    Hidden(u32, Row),
    Count(u32, Row, i64),
    Candidate(u32, Row, Value, i64),
    Current(u32, Row, Option<Value>),
    /// A rule's waiting derivation (rule, group, key) and the bound it had before (None: absent).
    Wait(u32, Row, Row, Option<Value>),
}

/// Steps per journal chunk (80 KB, under the allocator's threshold for mapping memory). A journal
/// of fixed chunks never copies itself to grow and never holds room for twice its steps, as one
/// doubling vector does, which at the peak of a large re-optimization was tens of megabytes.
pub(crate) const CHUNK: usize = 2048;

/// The undo steps of one run. A run that starts from an empty state keeps none: undoing it is
/// clearing everything, and an initial load journals as many steps as it derives rows.
///
/// `fail_after` injects a failure for tests: the journal panics once that many state changes have
/// been made, as a bug in the core would, so that rollback is tested at every step of a run.
pub struct Journal {
    pub(crate) chunks: Vec<Vec<Undo>>,
    pub(crate) enabled: bool,
    pub(crate) fail_after: Option<u64>,
}

impl Journal {
    /// A journal whose first chunk is `first` (empty; passing the last run's first chunk back saves
    /// allocating it again).
    pub fn new(first: Vec<Undo>, enabled: bool, fail_after: Option<u64>) -> Self {
        debug_assert!(first.is_empty());
        Journal { chunks: vec![first], enabled, fail_after }
    }

    /// Record one state change; the step is built only when journaling, since a run from an empty
    /// state changes as much but keeps nothing (building steps would clone every row it touches).
    pub fn record(&mut self, step: impl FnOnce() -> Undo) {
        if self.enabled {
            let last = self.chunks.last_mut().expect("a journal has a chunk");
            if last.len() < CHUNK {
                last.push(step());
            } else {
                let mut chunk = Vec::with_capacity(CHUNK);
                chunk.push(step());
                self.chunks.push(chunk);
            }
        }
        if let Some(left) = self.fail_after.as_mut() {
            if *left == 0 {
                panic!("failure injected after the requested number of state changes");
            }
            *left -= 1;
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The steps in the order they were made, in chunks.
    pub fn into_steps(self) -> Vec<Vec<Undo>> {
        self.chunks
    }
}

impl Engine {
    /// Whether nothing is stored (before the first successful run): then a failed run is undone by
    /// clearing, and needs no journal.
    pub(crate) fn is_empty(&self) -> bool {
        self.relations.iter().all(|r| r.rows.is_empty())
            && self.counts.iter().all(|c| c.is_empty())
            && self.aggregates.iter().flatten().all(|a| a.groups.is_empty())
    }

    pub(crate) fn clear(&mut self) {
        for relation in &mut self.relations {
            relation.rows = SharedRows::default();
            for index in &mut relation.indexes {
                index.clear();
            }
        }
        for counts in &mut self.counts {
            counts.clear();
        }
        for agg in self.aggregates.iter_mut().flatten() {
            agg.groups.clear();
        }
        self.waiting.clear();
    }

    pub(crate) fn rollback(&mut self, journal: Vec<Vec<Undo>>) {
        for undo in journal.into_iter().rev().flat_map(|chunk| chunk.into_iter().rev()) {
            match undo {
                Undo::Shown(rel, row) => self.relations[rel as usize].remove(&row),
                Undo::Hidden(rel, row) => self.relations[rel as usize].add(row),
                Undo::Count(rel, row, old) => self.counts[rel as usize].set_count(row, old),
                Undo::Candidate(rel, group, value, old) => {
                    let agg = self.aggregates[rel as usize].as_mut().expect("aggregate");
                    match &mut agg.group_mut(&group).candidates {
                        Candidates::Ordered(m) => m.set_count(Ordered::new(value, &self.strings), old),
                        Candidates::Counted(m) => m.set_count(value, old),
                    }
                    agg.tidy(&group);
                }
                Undo::Current(rel, group, old) => {
                    let agg = self.aggregates[rel as usize].as_mut().expect("aggregate");
                    agg.group_mut(&group).current = old;
                    agg.tidy(&group);
                }
                Undo::Wait(rule, group, key, old) => {
                    let waiting = self.waiting.entry(rule as usize).or_default();
                    match old {
                        Some(bound) => {
                            waiting.entry(group).or_default().insert(key, bound);
                        }
                        None => {
                            forget(waiting, &group, &key);
                        }
                    }
                }
            }
        }
    }
}
