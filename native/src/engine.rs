//! The engine: its state, a run's passes over the strata, memo passes, statistics, and rollback on
//! failure. `reopt/datalog/pycore.py` is the reference it is held equal to.

use std::cmp::Ordering;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use pyo3::prelude::*;
use rustc_hash::FxHashMap;

use crate::aggregate::Aggregate;
use crate::call_memo::CallMemo;
use crate::convert::{repr_row, PyStrings};
use crate::exec::Function;
use crate::index::Bucket;
use crate::journal::{Journal, Undo};
use crate::ordered::Held;
use crate::program::{RelationInfo, Stratum};
use crate::row::{Key, Row, RowMap, RowSet};
use crate::storage::{Relation, SharedRows};
use crate::stratum::StratumRun;
use crate::value::{compare, Interner, Value};
use crate::waits::Waiting;

pub const INSERTED: usize = 0;

pub const DELETED: usize = 1;

pub const UPDATED: usize = 2;

pub const FIRED: usize = 3;

pub const TOUCHED: usize = 4;

pub type Counters = [u64; 5];

/// Rows that became visible (plus) or invisible (minus) in one step.
#[derive(Default, Clone)]
pub struct Change {
    pub plus: SharedRows,
    pub minus: RowSet,
}

impl Change {
    pub(crate) fn is_empty(&self) -> bool {
        self.plus.is_empty() && self.minus.is_empty()
    }
}

pub(crate) type Changes = FxHashMap<usize, Change>;

/// Count changes of base relations: (relation, [(row, change)]).
pub type Pending = Vec<(usize, Vec<(Row, i64)>)>;

pub(crate) type Outputs = FxHashMap<usize, Out>;

/// Derivation-count changes of one head relation in one round.
#[derive(Default)]
pub(crate) struct Out {
    pub(crate) plain: RowMap<i64>,
    pub(crate) aggregate: FxHashMap<(Row, Value), i64>,
}

impl Out {
    pub(crate) fn is_empty(&self) -> bool {
        self.plain.is_empty() && self.aggregate.is_empty()
    }
}

/// Why a run failed; the state is rolled back before it reaches Python.
pub enum Failure {
    Rule { rule: usize, kind: String, message: String },
    RulePython { rule: usize, error: PyErr },
    Evaluation(String),
}

pub struct Engine {
    pub rels: Arc<Vec<RelationInfo>>,
    pub relations: Vec<Relation>,
    /// Derivation counts (insertion counts of base relations); see `counted_once` for what an
    /// absent row means.
    pub counts: Vec<FxHashMap<Row, i64>>,
    /// Per relation: derived by counting and not an aggregate, so that a row is visible exactly while
    /// its count is positive. Such a relation keeps in `counts` only the counts other than one (most
    /// rows are derived once): a visible row with no entry counts one. The counts of JOB 26a's search
    /// space took 9 MB of its 82 MB of growth.
    pub(crate) counted_once: Vec<bool>,
    pub aggregates: Vec<Option<Aggregate>>,
    pub strata: Arc<Vec<Stratum>>,
    pub functions: Vec<Function>,
    pub strings: Interner,
    pub pystrings: PyStrings,
    pub max_rounds: u64,
    pub max_passes: u64,
    pub stats_last: Vec<Counters>,
    pub stats_total: Vec<Counters>,
    pub(crate) stats_now: Vec<Counters>,
    pub(crate) touched: Vec<Touched>,
    pub last_touched: Vec<Touched>,
    pub last_changes: Changes,
    pub generation: u64,
    pub fail_after: Option<u64>, // test hook: the next run panics after this many state changes
    pub(crate) held: Vec<Option<Held>>, // per stratum: .ordered group changes still held (kept across runs up to a goal)
    pub(crate) waiting: FxHashMap<usize, Waiting>, // per rule with `until` (by id): the derivations that wait
    pub(crate) calls: CallMemo,
    pub(crate) read_later: Vec<bool>, // per relation: whether a later stratum, a memo or a goal reads its changes
    pub(crate) journal_buffer: Vec<Undo>, // the first chunk of the last run's journal, emptied, kept for its room
}

impl Engine {
    pub fn new(
        rels: Arc<Vec<RelationInfo>>,
        strata: Arc<Vec<Stratum>>,
        functions: Vec<Function>,
        strings: Interner,
        max_rounds: u64,
        max_passes: u64,
    ) -> Self {
        let n = rels.len();
        let held = strata.iter().map(|_| None).collect();
        let mut read_later = vec![false; n];
        for stratum in strata.iter() {
            for &rel in &stratum.inputs {
                read_later[rel] = true;
            }
            for &(_, goal) in &stratum.goals {
                read_later[goal] = true;
            }
        }
        for info in rels.iter() {
            if let Some(source) = info.memo_of {
                read_later[source] = true;
            }
        }
        let mut counted_once = vec![false; n];
        for stratum in strata.iter().filter(|s| !s.dred) {
            for &rel in &stratum.relations {
                counted_once[rel] = rels[rel].aggregate.is_none();
            }
        }
        let relations = rels.iter().map(|r| Relation::new(r.arity, &r.patterns)).collect();
        let aggregates = rels
            .iter()
            .map(|r| r.aggregate.map(|(func, position)| Aggregate { func, position, groups: RowMap::default() }))
            .collect();
        Engine {
            rels,
            relations,
            counts: (0..n).map(|_| FxHashMap::default()).collect(),
            counted_once,
            aggregates,
            strata,
            functions,
            strings,
            pystrings: PyStrings::default(),
            max_rounds,
            max_passes,
            stats_last: vec![[0; 5]; n],
            stats_total: vec![[0; 5]; n],
            stats_now: vec![[0; 5]; n],
            touched: (0..n).map(|_| Touched::default()).collect(),
            last_touched: (0..n).map(|_| Touched::default()).collect(),
            last_changes: FxHashMap::default(),
            generation: 0,
            fail_after: None,
            held,
            waiting: FxHashMap::default(),
            calls: CallMemo::new(),
            read_later,
            journal_buffer: Vec::new(),
        }
    }

    // -- reading ---------------------------------------------------------------------------------

    pub fn state_size(&self) -> u64 {
        let mut size: u64 = self.relations.iter().map(|r| (r.rows.len() * r.arity.max(1)) as u64).sum();
        for (rel, counts) in self.counts.iter().enumerate() {
            if self.counted_once[rel] {
                size += 2 * self.relations[rel].rows.len() as u64;
            } else if self.aggregates[rel].is_none() {
                size += 2 * counts.len() as u64;
            }
        }
        for agg in self.aggregates.iter().flatten() {
            size += agg.groups.values().map(|g| 2 * g.candidates.len() as u64).sum::<u64>();
        }
        // a waiting derivation: its group, and its key with its bound
        for waiting in self.waiting.values() {
            for (group, keys) in waiting {
                size += group.values().len() as u64;
                size += keys.keys().map(|k| k.values().len() as u64 + 1).sum::<u64>();
            }
        }
        size
    }

    // -- evaluation ------------------------------------------------------------------------------

    /// Propagate count changes of base relations to the fixpoint; the ids of relations that
    /// changed. On failure, or a panic inside, the state is exactly as before.
    pub fn run(
        &mut self,
        py: Python<'_>,
        pending: Pending,
        seeding: bool,
        keep_changes: bool,
    ) -> Result<Vec<usize>, Failure> {
        let buffer = std::mem::take(&mut self.journal_buffer);
        let mut journal = Journal::new(buffer, !self.is_empty(), self.fail_after.take());
        for counters in &mut self.stats_now {
            *counters = [0; 5];
        }
        for touched in &mut self.touched {
            touched.rows.clear();
            touched.every_visible = false;
        }
        let held_before = self.held.clone();
        self.calls.next_run();
        let outcome = catch_unwind(AssertUnwindSafe(|| self.passes(py, pending, seeding, keep_changes, &mut journal)));
        let failure = match outcome {
            Ok(Ok(changes)) => {
                std::mem::swap(&mut self.last_touched, &mut self.touched);
                for (rel, counters) in self.stats_now.iter().enumerate() {
                    self.stats_last[rel] = *counters;
                    for (total, now) in self.stats_total[rel].iter_mut().zip(counters) {
                        *total += now;
                    }
                }
                let mut changed: Vec<usize> = changes.keys().copied().collect();
                changed.sort_unstable();
                self.last_changes = if keep_changes { changes } else { FxHashMap::default() };
                self.generation += 1;
                if let Some(mut chunk) = journal.into_steps().into_iter().next() {
                    chunk.clear();
                    self.journal_buffer = chunk;
                }
                return Ok(changed);
            }
            Ok(Err(failure)) => failure,
            Err(panic) => {
                let what = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "unknown panic".to_string());
                Failure::Evaluation(format!("internal error in the native core (state rolled back): {what}"))
            }
        };
        if journal.enabled() {
            self.rollback(journal.into_steps());
        } else {
            self.clear();
        }
        self.held = held_before;
        Err(failure)
    }

    pub(crate) fn passes(
        &mut self,
        py: Python<'_>,
        pending: Pending,
        seeding: bool,
        keep_changes: bool,
        journal: &mut Journal,
    ) -> Result<Changes, Failure> {
        let mut changes = self.evaluate(py, pending, journal, seeding, keep_changes)?;
        let mut memo = self.memo_deltas(&changes)?;
        let mut passes = 1;
        while !memo.is_empty() {
            passes += 1;
            if passes > self.max_passes {
                let mut names: Vec<&str> = memo.iter().map(|(rel, _)| self.rels[*rel].name.as_str()).collect();
                names.sort_unstable();
                return Err(Failure::Evaluation(format!(
                    "memos {} still changed after {} passes; the pruning they drive does not converge",
                    names.join(", "),
                    self.max_passes
                )));
            }
            let latest = self.evaluate(py, memo, journal, false, keep_changes)?;
            memo = self.memo_deltas(&latest)?;
            compose(&mut changes, latest);
        }
        Ok(changes)
    }

    /// Count changes that make each memo hold the rows its source showed in the last pass.
    pub(crate) fn memo_deltas(&mut self, changes: &Changes) -> Result<Pending, Failure> {
        let mut deltas = Vec::new();
        for memo in 0..self.rels.len() {
            let Some(source) = self.rels[memo].memo_of else {
                continue;
            };
            let Some(change) = changes.get(&source) else {
                continue;
            };
            if change.plus.is_empty() {
                continue;
            }
            let keys = self.rels[memo].memo_keys;
            let positions: Vec<usize> = (0..keys).collect();
            let index = self.relations[memo].ensure_index(&positions);
            let mut pending: FxHashMap<Row, i64> = FxHashMap::default();
            let mut seen: FxHashMap<Key, &Row> = FxHashMap::default();
            for row in change.plus.iter() {
                let key: Key = (0..keys).map(|i| row.get(i)).collect();
                if let Some(first) = seen.insert(key.clone(), row) {
                    return Err(Failure::Evaluation(format!(
                        "memo '{}' keeps one row per key, but '{}' shows both {} and {} for key {}",
                        self.rels[memo].name,
                        self.rels[source].name,
                        repr_row(&first.values(), &self.strings),
                        repr_row(&row.values(), &self.strings),
                        repr_row(&key, &self.strings)
                    )));
                }
                let stored = self.relations[memo].get(index, &key).map(Bucket::rows).unwrap_or_default();
                if stored.contains(row) {
                    continue;
                }
                for old in stored {
                    *pending.entry(old).or_insert(0) -= 1;
                }
                *pending.entry(row.clone()).or_insert(0) += 1;
            }
            if !pending.is_empty() {
                deltas.push((memo, pending.into_iter().collect()));
            }
        }
        Ok(deltas)
    }

    /// One pass over the strata. A derived relation's net change is kept if a later stratum, a memo
    /// or a goal reads it, or if the caller asked for every change (`keep_changes`); the others are
    /// not built at all (the optimizer's SearchSpace would be a set of every alternative).
    pub(crate) fn evaluate(
        &mut self,
        py: Python<'_>,
        pending: Pending,
        journal: &mut Journal,
        seeding: bool,
        keep_changes: bool,
    ) -> Result<Changes, Failure> {
        let mut changes: Changes = FxHashMap::default();
        for (rel, rows) in pending {
            let mut change = Change::default();
            for (row, delta) in rows {
                if delta == 0 {
                    continue;
                }
                let old = self.count(rel, &row);
                self.set_count(rel, row.clone(), old + delta, journal);
                if old <= 0 && 0 < old + delta {
                    self.relations[rel].add(row.clone());
                    journal.record(|| Undo::Shown(rel as u32, row.clone()));
                    Arc::make_mut(&mut change.plus).insert(row);
                } else if old + delta <= 0 && 0 < old {
                    self.relations[rel].remove(&row);
                    journal.record(|| Undo::Hidden(rel as u32, row.clone()));
                    change.minus.insert(row);
                }
            }
            self.stats_now[rel][INSERTED] += change.plus.len() as u64;
            self.stats_now[rel][DELETED] += change.minus.len() as u64;
            if !change.is_empty() {
                changes.insert(rel, change);
            }
        }
        for s in 0..self.strata.len() {
            let stratum = &self.strata[s];
            let has_incoming = stratum.inputs.iter().any(|r| changes.contains_key(r));
            let seed = seeding && stratum.rules.iter().any(|r| r.seed.is_some());
            let goal_moved = stratum.goals.iter().any(|(_, goal)| changes.contains_key(goal)); // may release what was held
            if !has_incoming && !seed && !goal_moved {
                continue;
            }
            let mut run = StratumRun::new(self, s);
            if stratum.dred {
                let incoming: Changes =
                    stratum.inputs.iter().filter_map(|r| changes.get(r).map(|c| (*r, c.clone()))).collect();
                run.dred(self, py, incoming, seed, journal)?;
            } else {
                // the stratum's plans read only its inputs' changes (its own relations have none yet)
                run.counting(self, py, &changes, seed, false, journal)?;
            }
            changes.extend(run.net_changes(self, keep_changes));
        }
        Ok(changes)
    }
}

/// Fold a later pass's visibility changes into `changes`, so that it stays the net change.
pub(crate) fn compose(changes: &mut Changes, later: Changes) {
    for (rel, change) in later {
        let net = changes.entry(rel).or_default();
        for row in Arc::unwrap_or_clone(change.plus) {
            if !net.minus.remove(&row) {
                Arc::make_mut(&mut net.plus).insert(row);
            }
        }
        for row in change.minus {
            if !(net.plus.contains(&row) && Arc::make_mut(&mut net.plus).remove(&row)) {
                net.minus.insert(row);
            }
        }
        if net.is_empty() {
            changes.remove(&rel);
        }
    }
}

/// The rows of one relation whose visibility changed in the last run: those listed (a row may be
/// listed more than once, once per pass that touched it; readers take the set), and, when the
/// relation held nothing before the run, every row visible after it. Those are not copied: nothing
/// changes a relation between runs (a failed run restores it), and on JOB 29a they are millions.
#[derive(Default)]
pub struct Touched {
    pub rows: Vec<Row>,
    pub every_visible: bool,
}

/// Whether `a < b`, compared as Python compares them (a type error for values it cannot order).
pub(crate) fn below(a: Value, b: Value, strings: &Interner) -> Result<bool, Failure> {
    compare(a, b, "<", strings)
        .map(|order| order == Ordering::Less)
        .map_err(|err| Failure::Evaluation(format!("evaluation failed: {}: {}", err.kind, err.message)))
}
