//! The evaluator: semi-naive rounds per stratum with counting or DRed, memo passes, statistics,
//! and rollback. It mirrors `reopt/datalog/pycore.py` step for step (same rounds, same counts, same
//! statistics), so the two backends can be held equal by a differential test.

use std::cmp::Ordering;
use std::collections::hash_map::Entry as HashEntry;
use std::collections::BinaryHeap;
use std::hash::{BuildHasher, Hash};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use hashbrown::Equivalent;
use pyo3::prelude::*;
use pyo3::types::{PyAny, PyBool, PyList, PyTuple};
use rustc_hash::{FxHashMap, FxHashSet};
use smallvec::SmallVec;

use crate::convert::{repr_row, PyStrings};
use crate::program::{Cmp, Expr, Pattern, Plan, RelationInfo, Rule, Step, Stratum};
use crate::storage::{
    AggFunc, Aggregate, Bucket, Candidates, CountMap, Index, Journal, Key, Relation, Row, RowMap, RowOf, RowSet,
    SharedRows, Undo, Values,
};
use crate::value::{add_numbers, arithmetic, compare, fsum, negate, Interner, Ordered, Value, ValueError};

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
    fn is_empty(&self) -> bool {
        self.plus.is_empty() && self.minus.is_empty()
    }
}

type Changes = FxHashMap<usize, Change>;
/// Count changes of base relations: (relation, [(row, change)]).
pub type Pending = Vec<(usize, Vec<(Row, i64)>)>;
type Outputs = FxHashMap<usize, Out>;
/// A rule's derivations that wait (`until`): group -> key -> bound, the key being the values of
/// the variables the literals before `until` bind.
type Waiting = RowMap<RowMap<Value>>;
/// A round's changes to what waits, per (group, key): the sum of the signs, and the bound.
type WaitChanges = FxHashMap<(Row, Row), (i64, Value)>;

/// Results of recent function calls, by function and exact arguments (an int, a float and a bool
/// that Python deems equal are different arguments here). Functions are pure, and a stratum asks
/// for the same scalar call again soon after: the optimizer's cost of one join under each property
/// its parent may want, and a retraction recomputing what an insertion computed in the same round.
/// A fixed table of slots, each holding the last call whose key hashed there, so the memory is
/// bounded: keeping every call of a run held 22 MB of JOB 26a's 82 MB of growth. Only results of
/// at most one row are kept: a call returning many rows enumerates, its rows already live in the
/// relation they derive, and it is rarely asked twice.
///
/// The table outlives a run, for retractions: a run that changes statistics retracts what the
/// runs before it derived, asking each function what it was asked then, and finds the answer here
/// (JOB 1a's re-optimization: 0.63-0.65 ms to 0.56-0.59 ms). A derivation that
/// inserts uses only the current run's results, so a change made again is costed afresh, as a new
/// change would be.
struct CallMemo {
    slots: Vec<Option<MemoEntry>>, // allocated at the first insertion
    run: u64,                      // the current run: results of earlier runs serve retractions only
}

/// A call's key (its function and arguments), its result, and the run that asked for it.
struct MemoEntry {
    key: Box<[u64]>,
    rows: Arc<CallRows>,
    run: u64,
}

const CALL_MEMO_SLOTS: usize = 4096;

impl CallMemo {
    fn new() -> CallMemo {
        CallMemo { slots: Vec::new(), run: 0 }
    }

    fn slot(key: &[u64]) -> usize {
        (rustc_hash::FxBuildHasher.hash_one(key) as usize) % CALL_MEMO_SLOTS
    }

    /// The remembered result of the call `key`, if it was made in this run, or in any earlier run
    /// when `retracting`.
    fn get(&self, key: &[u64], retracting: bool) -> Option<Arc<CallRows>> {
        match self.slots.get(Self::slot(key)) {
            Some(Some(entry)) if &entry.key[..] == key && (retracting || entry.run == self.run) => {
                Some(entry.rows.clone())
            }
            _ => None,
        }
    }

    fn insert(&mut self, key: &[u64], rows: Arc<CallRows>) {
        if self.slots.is_empty() {
            self.slots.resize_with(CALL_MEMO_SLOTS, || None);
        }
        self.slots[Self::slot(key)] = Some(MemoEntry { key: key.into(), rows, run: self.run });
    }

    fn next_run(&mut self) {
        self.run += 1;
    }
}

/// A function call's result rows, their values laid end to end (one allocation per call, not per
/// row: the optimizer's split returns tens of rows per call).
struct CallRows {
    rows: usize,
    width: usize,
    values: Box<[Value]>,
}

impl CallRows {
    fn row(&self, i: usize) -> &[Value] {
        &self.values[i * self.width..(i + 1) * self.width]
    }
}

/// A call's memo key, built on the stack: a hit (most calls) allocates nothing.
type CallKey = SmallVec<[u64; 24]>;

fn call_key(function: usize, args: &[Value]) -> CallKey {
    let mut key = CallKey::new();
    key.push(function as u64);
    for value in args {
        let (kind, bits) = value.parts();
        key.push(kind as u64);
        key.push(bits);
    }
    key
}

/// Derivation-count changes of one head relation in one round.
#[derive(Default)]
struct Out {
    plain: RowMap<i64>,
    aggregate: FxHashMap<(Row, Value), i64>,
}

impl Out {
    fn is_empty(&self) -> bool {
        self.plain.is_empty() && self.aggregate.is_empty()
    }
}

/// Why a run failed; the state is rolled back before it reaches Python.
pub enum Failure {
    Rule { rule: usize, kind: String, message: String },
    RulePython { rule: usize, error: PyErr },
    Evaluation(String),
}

enum ExecError {
    Value(ValueError),
    Python(PyErr),
}

impl From<ValueError> for ExecError {
    fn from(e: ValueError) -> Self {
        ExecError::Value(e)
    }
}

pub struct Function {
    pub name: String,
    /// None once Python's cycle collector has cleared the core (`Core.__clear__`): the engine is
    /// then unreachable, so no run can call it, but a call would fail cleanly.
    pub callable: Option<Py<PyAny>>,
    pub outputs: usize,
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
    counted_once: Vec<bool>,
    pub aggregates: Vec<Option<Aggregate>>,
    pub strata: Arc<Vec<Stratum>>,
    pub functions: Vec<Function>,
    pub strings: Interner,
    pub pystrings: PyStrings,
    pub max_rounds: u64,
    pub max_passes: u64,
    pub stats_last: Vec<Counters>,
    pub stats_total: Vec<Counters>,
    stats_now: Vec<Counters>,
    touched: Vec<Touched>,
    pub last_touched: Vec<Touched>,
    pub last_changes: Changes,
    pub generation: u64,
    pub fail_after: Option<u64>, // test hook: the next run panics after this many state changes
    held: Vec<Option<Held>>,     // per stratum: .ordered group changes still held (kept across runs up to a goal)
    waiting: FxHashMap<usize, Waiting>, // per rule with `until` (by id): the derivations that wait
    calls: CallMemo,
    read_later: Vec<bool>, // per relation: whether a later stratum, a memo or a goal reads its changes
    journal_buffer: Vec<Undo>, // the first chunk of the last run's journal, emptied, kept for its room
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

    pub fn count(&self, rel: usize, row: &Row) -> i64 {
        match self.counts[rel].get(row) {
            Some(&count) => count,
            None if self.counted_once[rel] && self.relations[rel].rows.contains(row) => 1,
            None => 0,
        }
    }

    /// Every row with a positive count, with its count.
    pub fn each_count(&self, rel: usize) -> Box<dyn Iterator<Item = (&Row, i64)> + '_> {
        if self.counted_once[rel] {
            Box::new(self.relations[rel].rows.iter().map(move |row| (row, self.count(rel, row))))
        } else {
            Box::new(self.counts[rel].iter().map(|(row, &count)| (row, count)))
        }
    }

    pub fn candidate_count(agg: &Aggregate, group: &Row, value: Value, strings: &Interner) -> i64 {
        match agg.groups.get(group).map(|g| &g.candidates) {
            Some(Candidates::Ordered(m)) => m.get(&Ordered::new(value, strings)).unwrap_or(0),
            Some(Candidates::Counted(m)) => m.get(&value).copied().unwrap_or(0),
            None => 0,
        }
    }

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

    /// Whether nothing is stored (before the first successful run): then a failed run is undone by
    /// clearing, and needs no journal.
    fn is_empty(&self) -> bool {
        self.relations.iter().all(|r| r.rows.is_empty())
            && self.counts.iter().all(|c| c.is_empty())
            && self.aggregates.iter().flatten().all(|a| a.groups.is_empty())
    }

    fn clear(&mut self) {
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

    fn rollback(&mut self, journal: Vec<Vec<Undo>>) {
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

    fn passes(
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
    fn memo_deltas(&mut self, changes: &Changes) -> Result<Pending, Failure> {
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
    fn evaluate(
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

    /// Add `delta` (non-zero) to a row's derivation count; the count before, or `None`, with nothing
    /// changed, if the count would go negative. Called before the round's visibility changes are
    /// shown, so a row counted once is still visible exactly while its count is positive.
    fn add_count(&mut self, rel: usize, row: &Row, delta: i64, journal: &mut Journal) -> Option<i64> {
        if self.counted_once[rel] {
            let stored = self.counts[rel].get(row).copied();
            let old = stored.unwrap_or_else(|| i64::from(self.relations[rel].rows.contains(row)));
            let count = old + delta;
            if count < 0 {
                return None;
            }
            match (stored, count) {
                (None, 0 | 1) => return Some(old),
                (_, 0 | 1) => self.counts[rel].remove(row),
                (_, count) => self.counts[rel].insert(row.clone(), count),
            };
            journal.record(|| Undo::Count(rel as u32, row.clone(), stored.unwrap_or(0)));
            return Some(old);
        }
        let old = match self.counts[rel].entry(row.clone()) {
            HashEntry::Occupied(mut entry) => {
                let old = *entry.get();
                match old + delta {
                    n if n < 0 => return None,
                    0 => {
                        entry.remove();
                    }
                    n => *entry.get_mut() = n,
                }
                old
            }
            HashEntry::Vacant(entry) => {
                if delta < 0 {
                    return None;
                }
                entry.insert(delta);
                0
            }
        };
        journal.record(|| Undo::Count(rel as u32, row.clone(), old));
        Some(old)
    }

    fn set_count(&mut self, rel: usize, row: Row, value: i64, journal: &mut Journal) {
        let old = if value != 0 { self.counts[rel].insert(row.clone(), value) } else { self.counts[rel].remove(&row) };
        journal.record(|| Undo::Count(rel as u32, row, old.unwrap_or(0)));
    }

    fn add_candidate(
        &mut self,
        rel: usize,
        group: &Row,
        value: Value,
        delta: i64,
        journal: &mut Journal,
    ) -> Result<(), Failure> {
        let agg = self.aggregates[rel].as_mut().expect("aggregate");
        match &mut agg.group_mut(group).candidates {
            Candidates::Ordered(m) => {
                let key = Ordered::new(value, &self.strings);
                if let Some(first) = m.first() {
                    if first.is_str() != key.is_str() {
                        let (a, b) = (value.type_name(), first.value().type_name());
                        return Err(Failure::Evaluation(format!(
                            "evaluation failed: TypeError: '<' not supported between instances of '{a}' and '{b}'"
                        )));
                    }
                }
                let old = m.add(key, delta);
                journal.record(|| Undo::Candidate(rel as u32, group.clone(), value, old));
            }
            Candidates::Counted(m) => {
                let old = m.get(&value).copied().unwrap_or(0);
                m.set_count(value, old + delta);
                journal.record(|| Undo::Candidate(rel as u32, group.clone(), value, old));
            }
        }
        agg.tidy(group);
        Ok(())
    }

    /// The aggregate of a group's current candidates, or `None` if it has none.
    fn best(&self, rel: usize, group: &Row) -> Result<Option<Value>, Failure> {
        let agg = self.aggregates[rel].as_ref().expect("aggregate");
        let Some(g) = agg.groups.get(group) else {
            return Ok(None);
        };
        match (&g.candidates, agg.func) {
            (Candidates::Ordered(m), AggFunc::Min) => Ok(m.first().map(Ordered::value)),
            (Candidates::Ordered(m), _) => Ok(m.last().map(Ordered::value)),
            (Candidates::Counted(m), _) if m.is_empty() => Ok(None),
            (Candidates::Counted(m), AggFunc::Count) => Ok(Some(Value::Int(m.values().sum()))),
            (Candidates::Counted(m), _) => sum_of(m)
                .map(Some)
                .map_err(|e| Failure::Evaluation(format!("evaluation failed: {}: {}", e.kind, e.message))),
        }
    }

    fn show_value(&mut self, rel: usize, group: &Row, value: Value, journal: &mut Journal) {
        let agg = self.aggregates[rel].as_mut().expect("aggregate");
        let row = agg.row(group, value);
        let old = agg.group_mut(group).current.replace(value);
        journal.record(|| Undo::Current(rel as u32, group.clone(), old));
        self.relations[rel].add(row.clone());
        journal.record(|| Undo::Shown(rel as u32, row));
    }

    fn hide_value(&mut self, rel: usize, group: &Row, journal: &mut Journal) {
        let agg = self.aggregates[rel].as_mut().expect("aggregate");
        let Some(g) = agg.groups.get_mut(group) else {
            return;
        };
        let Some(value) = g.current.take() else {
            return;
        };
        journal.record(|| Undo::Current(rel as u32, group.clone(), Some(value)));
        let row = agg.row(group, value);
        agg.tidy(group);
        self.relations[rel].remove(&row);
        journal.record(|| Undo::Hidden(rel as u32, row));
    }

    fn current(&self, rel: usize, group: &Row) -> Option<Value> {
        self.aggregates[rel].as_ref().and_then(|a| a.groups.get(group)).and_then(|g| g.current)
    }
}

fn sum_of(m: &FxHashMap<Value, i64>) -> Result<Value, ValueError> {
    if m.keys().any(|v| matches!(v, Value::Float(_))) {
        let mut terms = Vec::with_capacity(m.len());
        for (v, c) in m {
            terms.push(match *v {
                Value::Float(f) => f * *c as f64,
                Value::Int(i) => (i as f64) * *c as f64,
                Value::Bool(b) => (b as i64 * *c) as f64,
                Value::Str(_) => return Err(type_error_sum(*v)),
            });
        }
        return fsum(terms).map(Value::Float);
    }
    let mut total: i64 = 0;
    for (v, c) in m {
        let term = match *v {
            Value::Int(i) => i.checked_mul(*c),
            Value::Bool(b) => Some(b as i64 * *c),
            _ => return Err(type_error_sum(*v)),
        };
        total = term.and_then(|t| total.checked_add(t)).ok_or_else(|| {
            ValueError::new("OverflowError", "sum does not fit in 64 bits (the native backend's integers)")
        })?;
    }
    Ok(Value::Int(total))
}

fn type_error_sum(v: Value) -> ValueError {
    ValueError::new("TypeError", format!("unsupported operand type(s) for +: 'int' and '{}'", v.type_name()))
}

/// Fold a later pass's visibility changes into `changes`, so that it stays the net change.
fn compose(changes: &mut Changes, later: Changes) {
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

/// What a stratum's run remembers of one relation to report its net change and its touched rows.
enum Seen {
    /// Each row whose visibility changed, with whether it was visible before the run.
    Original(FxHashMap<Row, bool>),
    /// The relation held nothing before the run, so every row it touched was shown at some point:
    /// the touched rows are those visible at the end and those hidden on the way, and only the latter
    /// are kept. An initial optimization shows millions of rows, which a map of originals would copy.
    FromEmpty(RowSet),
}

/// The evaluation of one stratum for one batch of incoming changes.
struct StratumRun {
    stratum: usize,
    seen: FxHashMap<usize, Seen>,
    /// The aggregates some rule's derivations wait on (`until`).
    waited: Vec<usize>,
    /// This round's changes to what waits, per rule.
    wait_changes: FxHashMap<usize, WaitChanges>,
    /// Derivations made because their group rose, for the next round.
    resumed: Option<Outputs>,
    /// Their candidates, (aggregate, group, value): not new (an unpruned evaluation held them all
    /// along), so they never fail the release order's check.
    not_new: FxHashSet<(usize, Row, Value)>,
    /// The rows the current round treats as absent.
    hidden: Hidden,
    /// The derivation counts a round makes, kept emptied between rounds: a fresh map per round
    /// grows by doubling, rehashing every entry each time.
    outputs: Outputs,
}

impl StratumRun {
    fn new(e: &Engine, stratum: usize) -> Self {
        let seen = e.strata[stratum]
            .relations
            .iter()
            .map(|&r| {
                let empty = e.relations[r].rows.is_empty()
                    && e.counts[r].is_empty()
                    && e.aggregates[r].as_ref().is_none_or(|a| a.groups.is_empty());
                (r, if empty { Seen::FromEmpty(RowSet::default()) } else { Seen::Original(FxHashMap::default()) })
            })
            .collect();
        let mut waited: Vec<usize> =
            e.strata[stratum].rules.iter().filter_map(|r| r.deferral.as_ref().map(|d| d.aggregate)).collect();
        waited.sort_unstable();
        waited.dedup();
        StratumRun {
            stratum,
            seen,
            waited,
            wait_changes: FxHashMap::default(),
            resumed: None,
            not_new: FxHashSet::default(),
            hidden: FxHashMap::default(),
            outputs: FxHashMap::default(),
        }
    }

    fn counting(
        &mut self,
        e: &mut Engine,
        py: Python<'_>,
        incoming: &Changes,
        seeding: bool,
        monotone: bool,
        journal: &mut Journal,
    ) -> Result<(), Failure> {
        let stratum = &e.strata[self.stratum];
        let mut held = if monotone || stratum.ordered.is_empty() {
            None
        } else {
            Some(e.held[self.stratum].take().unwrap_or_else(|| Held::new(stratum)))
        };
        if let Some(held) = held.as_mut() {
            held.frontier.clear();
            held.prepare(e);
            held.reorder(e, incoming)?;
        }
        // On failure the held changes stay taken: `Engine::run` restores them with the rest.
        let mut changes: Option<Changes> = None; // none yet: the first round reads `incoming`

        // Where a goal bounds an ordered aggregate, a batch that both deletes and inserts is evaluated
        // deletions first, its insertions hidden until they settle: a group whose minimum the
        // deletions change is hidden before the insertions reach the rules that read it, so those
        // derivations wait for its release at its final value instead of being made at its old one
        // and retracted (on TPC-H Q5 this halves the plan costs a selectivity change derives).
        let mut hidden: Hidden = FxHashMap::default();
        let mut insertions = None;
        if held.as_ref().is_some_and(|h| !h.goals.is_empty())
            && incoming.values().any(|c| !c.minus.is_empty())
            && incoming.values().any(|c| !c.plus.is_empty())
        {
            let (deletions, later, inserted) = split(incoming.clone());
            changes = Some(deletions);
            insertions = Some(later);
            hidden = inserted;
        }
        let mut extra = if seeding { Some(self.seed_outputs(e, py)?) } else { None };
        let mut rounds: u64 = 0;
        loop {
            if extra.is_none() && changes.as_ref().is_some_and(|c| c.is_empty()) && insertions.is_some() {
                changes = insertions.take();
                hidden.clear();
            }
            let current = changes.as_ref().unwrap_or(incoming);
            if !current.is_empty() || extra.is_some() {
                let mut outputs = self.round(e, py, current, &hidden)?;
                if let Some(extra) = extra.take() {
                    for (rel, out) in extra {
                        let target = outputs.entry(rel).or_default();
                        for (k, c) in out.plain {
                            *target.plain.entry(k).or_insert(0) += c;
                        }
                        for (k, c) in out.aggregate {
                            *target.aggregate.entry(k).or_insert(0) += c;
                        }
                    }
                }
                changes = Some(self.settle(e, py, outputs, monotone, held.as_mut(), journal)?);
                extra = self.resumed.take();
            } else if let Some(held) = held.as_mut() {
                let waits = !self.waited.is_empty();
                let mut wake = |e: &mut Engine, rel: usize, group: &Row, best: Option<Value>| {
                    self.wake(e, py, rel, group, best, journal)
                };
                let released = held.release(e, if waits { Some(&mut wake) } else { None })?;
                extra = self.resumed.take();
                if released.is_empty() && extra.is_none() {
                    break;
                }
                changes = Some(released);
            } else {
                break;
            }
            self.show(e, changes.as_ref().expect("settled or released"), journal);
            rounds += 1;
            if rounds > e.max_rounds {
                let mut names: Vec<&str> =
                    e.strata[self.stratum].relations.iter().map(|r| e.rels[*r].name.as_str()).collect();
                names.sort_unstable();
                return Err(Failure::Evaluation(format!(
                    "no fixpoint after {} rounds for {}; is the recursion well-founded?",
                    rounds,
                    names.join(", ")
                )));
            }
        }
        e.held[self.stratum] = held;
        Ok(())
    }

    fn dred(
        &mut self,
        e: &mut Engine,
        py: Python<'_>,
        incoming: Changes,
        seeding: bool,
        journal: &mut Journal,
    ) -> Result<(), Failure> {
        let (deletions, mut insertions, hidden) = split(incoming);
        if !deletions.is_empty() {
            let mut overdeleted: FxHashMap<usize, RowSet> =
                e.strata[self.stratum].relations.iter().map(|r| (*r, RowSet::default())).collect();
            let mut changes = deletions;
            while !changes.is_empty() {
                let outputs = self.round(e, py, &changes, &hidden)?;
                changes = overdelete(e, outputs, &mut overdeleted, journal)?;
                self.show(e, &changes, journal);
            }
            let rederived = rederive(e, &overdeleted)?;
            self.show(e, &rederived, journal);
            insertions.extend(rederived);
        }
        self.counting(e, py, &insertions, seeding, true, journal)
    }

    /// Derivation-count changes of the stratum's heads caused by `changes` (already visible);
    /// `hidden` rows count as absent in both the old and the new state.
    fn round(
        &mut self,
        e: &mut Engine,
        py: Python<'_>,
        changes: &Changes,
        hidden: &Hidden,
    ) -> Result<Outputs, Failure> {
        let mut outputs = std::mem::take(&mut self.outputs);
        if !self.waited.is_empty() {
            self.hidden = hidden.clone(); // what a wake at the round's settling must also leave out
        }
        let Engine { relations, strata, functions, strings, pystrings, calls, stats_now, aggregates, waiting, .. } = e;
        let stratum = &strata[self.stratum];
        let mut show_indexes: FxHashMap<(usize, usize), Index> = FxHashMap::default();
        for rule in &stratum.rules {
            for plan in &rule.plans {
                let delta_rel = plan.delta.expect("delta plan");
                let Some(change) = changes.get(&delta_rel) else {
                    continue;
                };
                if change.is_empty() || reads_an_empty_view(plan, relations, changes) {
                    continue;
                }
                for step in &plan.steps {
                    if let Step::Lookup { view, index, .. } = step {
                        let (rel, old) = plan.views[*view];
                        relations[rel].prepare(*index);
                        if let (true, Some(c)) = (old, changes.get(&rel)) {
                            if !c.minus.is_empty() {
                                let positions = &relations[rel].indexes[*index].positions;
                                show_indexes.entry((rel, *index)).or_insert_with(|| {
                                    let mut leaving = Index::new(positions.clone());
                                    leaving.build(&c.minus);
                                    leaving
                                });
                            }
                        }
                    }
                }
                let views: Vec<View> = plan
                    .views
                    .iter()
                    .enumerate()
                    .map(|(i, &(rel, old))| {
                        let change = if old { changes.get(&rel) } else { None };
                        let show_index = plan.steps.iter().find_map(|s| match s {
                            Step::Lookup { view, index, .. } if old && *view == i => show_indexes.get(&(rel, *index)),
                            _ => None,
                        });
                        View {
                            rel: &relations[rel],
                            hidden: hidden.get(&rel).map(|rows| &**rows),
                            entering: change.map(|c| &*c.plus),
                            leaving: change.map(|c| &c.minus),
                            leaving_index: show_index,
                        }
                    })
                    .collect();
                let out = outputs.entry(rule.head).or_default();
                let until = until_read(rule, plan, aggregates, waiting, changes);
                let waits = rule.deferral.as_ref().map(|_| self.wait_changes.entry(rule.id).or_default());
                let exec = Exec { plan, views, functions, py, until };
                let mut state = ExecState::new(strings, pystrings, calls, out, plan.slots, waits);
                let Step::Delta { negated, pattern } = &plan.steps[0] else {
                    unreachable!("a delta plan starts with its delta")
                };
                let mut run = || -> Result<(), ExecError> {
                    for (rows, sign) in [(&*change.plus, 1i64), (&change.minus, -1i64)] {
                        let sign = if *negated { -sign } else { sign };
                        for row in rows {
                            if exec.bind(pattern, &row.packed(), &mut state)? {
                                exec.step(1, sign, &mut state)?;
                            }
                        }
                    }
                    Ok(())
                };
                let result = run();
                stats_now[rule.head][FIRED] += state.fired;
                result.map_err(|err| rule_failure(rule.id, err))?;
            }
        }
        Ok(outputs)
    }

    fn seed_outputs(&self, e: &mut Engine, py: Python<'_>) -> Result<Outputs, Failure> {
        let mut outputs: Outputs = FxHashMap::default();
        let Engine { strata, functions, strings, pystrings, calls, stats_now, .. } = e;
        for &rel in &strata[self.stratum].relations {
            outputs.entry(rel).or_default();
        }
        for rule in &strata[self.stratum].rules {
            let Some(plan) = &rule.seed else { continue };
            let out = outputs.entry(rule.head).or_default();
            let exec = Exec { plan, views: Vec::new(), functions, py, until: None };
            let mut state = ExecState::new(strings, pystrings, calls, out, plan.slots, None);
            let result = exec.step(0, 1, &mut state);
            stats_now[rule.head][FIRED] += state.fired;
            result.map_err(|err| rule_failure(rule.id, err))?;
        }
        Ok(outputs)
    }

    /// Apply derivation-count changes; return the visibility changes they imply.
    fn settle(
        &mut self,
        e: &mut Engine,
        py: Python<'_>,
        mut outputs: Outputs,
        monotone: bool,
        mut held: Option<&mut Held>,
        journal: &mut Journal,
    ) -> Result<Changes, Failure> {
        let mut changes: Changes = FxHashMap::default();
        self.apply_wait_changes(e, journal)?;
        // the best of each group some derivations wait on, before this round's candidates
        let mut before: Vec<(usize, Row, Value)> = Vec::new();
        for (&rel, out) in outputs.iter_mut() {
            if out.is_empty() {
                continue;
            }
            if self.waited.contains(&rel) {
                let mut groups: RowSet = RowSet::default();
                for (group, _) in out.aggregate.keys() {
                    if groups.insert(group.clone()) {
                        if let Some(best) = e.best(rel, group)? {
                            before.push((rel, group.clone(), best));
                        }
                    }
                }
            }
            let mut change = Change::default();
            if e.aggregates[rel].is_none() {
                for (row, delta) in out.plain.drain() {
                    if delta == 0 {
                        continue;
                    }
                    let Some(old) = e.add_count(rel, &row, delta, journal) else {
                        return Err(Failure::Evaluation(format!(
                            "internal inconsistency: negative derivation count for {}{}",
                            e.rels[rel].name,
                            repr_row(&row.values(), &e.strings)
                        )));
                    };
                    let count = old + delta;
                    let visible = e.relations[rel].rows.contains(&row);
                    if count != 0 && !visible {
                        Arc::make_mut(&mut change.plus).insert(row);
                    } else if count == 0 && visible {
                        if monotone {
                            return Err(Failure::Evaluation(format!(
                                "'{}{}' lost its last derivation while insertions were propagated; the recursion is not monotone",
                                e.rels[rel].name,
                                repr_row(&row.values(), &e.strings)
                            )));
                        }
                        change.minus.insert(row);
                    }
                }
            } else {
                let mut touched: RowSet = RowSet::default();
                let bounded = held.as_deref().is_some_and(|h| h.goals.contains_key(&rel));
                for ((group, value), delta) in out.aggregate.drain() {
                    if delta != 0 {
                        if bounded && delta > 0 && !self.not_new.contains(&(rel, group.clone(), value)) {
                            held.as_deref().expect("held").check_candidate(e, rel, &group, value)?;
                        }
                        e.add_candidate(rel, &group, value, delta, journal)?;
                        touched.insert(group);
                    }
                }
                if let Some(held) = held.as_deref_mut() {
                    if held.holds(rel) {
                        for group in touched {
                            if bounded {
                                if let Some(current) = e.current(rel, &group) {
                                    if e.best(rel, &group)? == Some(current) {
                                        continue;
                                    }
                                    let agg = e.aggregates[rel].as_ref().expect("aggregate");
                                    change.minus.insert(agg.row(&group, current));
                                    // hidden until released again
                                }
                            }
                            held.hold(e, rel, group)?;
                        }
                        if !change.is_empty() {
                            changes.insert(rel, change);
                        }
                        continue;
                    }
                }
                let mut updates = 0;
                for group in touched {
                    let best = e.best(rel, &group)?;
                    let agg = e.aggregates[rel].as_ref().expect("aggregate");
                    let Some(current) = e.current(rel, &group) else {
                        if let Some(best) = best {
                            Arc::make_mut(&mut change.plus).insert(agg.row(&group, best));
                        }
                        continue;
                    };
                    if best == Some(current) {
                        continue;
                    }
                    if monotone {
                        let improves = match best {
                            None => false,
                            Some(b) => {
                                let order = compare(b, current, "<", &e.strings).map_err(|err| {
                                    Failure::Evaluation(format!("evaluation failed: {}: {}", err.kind, err.message))
                                })?;
                                if agg.func == AggFunc::Min {
                                    order == Ordering::Less
                                } else {
                                    order == Ordering::Greater
                                }
                            }
                        };
                        if !improves {
                            let shown =
                                best.map(|b| crate::convert::repr(b, &e.strings)).unwrap_or_else(|| "None".into());
                            return Err(Failure::Evaluation(format!(
                                "aggregate '{}' group {} went from {} to {} while insertions were propagated; recursion \
                                 through min/max needs inputs that only improve it (for example positive weights)",
                                e.rels[rel].name,
                                repr_row(&group.values(), &e.strings),
                                crate::convert::repr(current, &e.strings),
                                shown
                            )));
                        }
                    }
                    change.minus.insert(agg.row(&group, current));
                    if let Some(best) = best {
                        Arc::make_mut(&mut change.plus).insert(agg.row(&group, best));
                        updates += 1;
                    }
                }
                e.stats_now[rel][UPDATED] += updates;
            }
            if !change.is_empty() {
                changes.insert(rel, change);
            }
        }
        self.outputs = outputs;
        for (rel, group, old) in before {
            let new = e.best(rel, &group)?;
            if let Some(new) = new {
                if !below(old, new, &e.strings)? {
                    continue;
                }
            }
            if let Some(held) = held.as_deref_mut().filter(|h| h.holds(rel)) {
                let mut least: Option<Value> = None;
                for rule in e.strata[self.stratum].rules.iter() {
                    if rule.deferral.as_ref().is_none_or(|d| d.aggregate != rel) {
                        continue;
                    }
                    let keys = e.waiting.get(&rule.id).and_then(|w| w.get(&group));
                    for &bound in keys.into_iter().flat_map(|k| k.values()) {
                        let lower = match least {
                            None => true,
                            Some(least) => below(bound, least, &e.strings)?,
                        };
                        if lower {
                            least = Some(bound);
                        }
                    }
                }
                if let Some(least) = least {
                    held.wake_at(e, rel, group, least)?;
                }
            } else {
                self.wake(e, py, rel, &group, new, journal)?;
            }
        }
        Ok(changes)
    }

    /// Make this round's changes to what waits: a derivation that began to wait is recorded, one
    /// that waited and lost a row of its body is forgotten (cross terms of a round cancel).
    fn apply_wait_changes(&mut self, e: &mut Engine, journal: &mut Journal) -> Result<(), Failure> {
        for (rule, changed) in std::mem::take(&mut self.wait_changes) {
            let waiting = e.waiting.entry(rule).or_default();
            for ((group, key), (delta, bound)) in changed {
                let present = waiting.get(&group).is_some_and(|keys| keys.contains_key(&key));
                let count = present as i64 + delta;
                if count != 0 && count != 1 {
                    return Err(Failure::Evaluation(format!(
                        "internal inconsistency: a waiting derivation counted {count} times"
                    )));
                }
                if count == 1 && !present {
                    waiting.entry(group.clone()).or_default().insert(key.clone(), bound);
                    journal.record(|| Undo::Wait(rule as u32, group, key, None));
                } else if count == 0 && present {
                    let old = forget(waiting, &group, &key).expect("present");
                    journal.record(|| Undo::Wait(rule as u32, group, key, Some(old)));
                }
            }
        }
        Ok(())
    }

    /// Group `group` of `rel` rose to `best` (None: it has no candidate left): make the derivations
    /// that waited on it for a bound it now reaches, for the next round. Whether any did.
    fn wake(
        &mut self,
        e: &mut Engine,
        py: Python<'_>,
        rel: usize,
        group: &Row,
        best: Option<Value>,
        journal: &mut Journal,
    ) -> Result<bool, Failure> {
        let strata = e.strata.clone();
        let mut woke = false;
        for rule in strata[self.stratum].rules.iter() {
            let Some(deferral) = rule.deferral.as_ref().filter(|d| d.aggregate == rel) else {
                continue;
            };
            let Some(keys) = e.waiting.get(&rule.id).and_then(|w| w.get(group)) else {
                continue;
            };
            let mut ready: Vec<(Row, Value)> = Vec::new();
            for (key, &bound) in keys {
                let reached = match best {
                    None => true,
                    Some(best) => !below(best, bound, &e.strings)?,
                };
                if reached {
                    ready.push((key.clone(), bound));
                }
            }
            if ready.is_empty() {
                continue;
            }
            woke = true;
            let waiting = e.waiting.get_mut(&rule.id).expect("waiting");
            for (key, bound) in &ready {
                forget(waiting, group, key);
                journal.record(|| Undo::Wait(rule.id as u32, group.clone(), key.clone(), Some(*bound)));
            }
            let made = self.resume(e, py, rule, &ready)?;
            let resumed = self.resumed.get_or_insert_with(FxHashMap::default).entry(rule.head).or_default();
            for (row, count) in made.plain {
                let values = row.values();
                let group: Key = deferral.group_positions.iter().map(|&p| values[p]).collect();
                self.not_new.insert((rel, Row::new(&group), values[deferral.value_position]));
                *resumed.plain.entry(row).or_insert(0) += count;
            }
        }
        Ok(woke)
    }

    /// The derivations of `rule` from waiting keys, in the current contents (the rows the round
    /// treats as absent left out).
    fn resume(&self, e: &mut Engine, py: Python<'_>, rule: &Rule, ready: &[(Row, Value)]) -> Result<Out, Failure> {
        let plan = &rule.deferral.as_ref().expect("deferral").resume;
        let Engine { relations, functions, strings, pystrings, calls, stats_now, .. } = e;
        for step in &plan.steps {
            if let Step::Lookup { view, index, .. } = step {
                relations[plan.views[*view].0].prepare(*index);
            }
        }
        let views: Vec<View> = plan
            .views
            .iter()
            .map(|&(rel, _old)| View {
                rel: &relations[rel],
                hidden: self.hidden.get(&rel).map(|rows| &**rows),
                entering: None,
                leaving: None,
                leaving_index: None,
            })
            .collect();
        let mut made = Out::default();
        let exec = Exec { plan, views, functions, py, until: None };
        let mut state = ExecState::new(strings, pystrings, calls, &mut made, plan.slots, None);
        let Step::Delta { pattern, .. } = &plan.steps[0] else { unreachable!("a resume plan starts with its key") };
        let mut run = || -> Result<(), ExecError> {
            for (key, _) in ready {
                if exec.bind(pattern, &key.packed(), &mut state)? {
                    exec.step(1, 1, &mut state)?;
                }
            }
            Ok(())
        };
        let result = run();
        stats_now[rule.head][FIRED] += state.fired;
        result.map_err(|err| rule_failure(rule.id, err))?;
        Ok(made)
    }

    /// Make visibility changes of the stratum's relations take effect.
    fn show(&mut self, e: &mut Engine, changes: &Changes, journal: &mut Journal) {
        for (&rel, change) in changes {
            let seen = self.seen.entry(rel).or_insert_with(|| Seen::Original(FxHashMap::default()));
            let is_aggregate = e.aggregates[rel].is_some();
            for row in &change.minus {
                match seen {
                    Seen::Original(original) => {
                        original.entry(row.clone()).or_insert(true);
                    }
                    Seen::FromEmpty(hidden) => {
                        hidden.insert(row.clone());
                    }
                }
                if is_aggregate {
                    let (group, _) = e.aggregates[rel].as_ref().expect("aggregate").split(row);
                    e.hide_value(rel, &group, journal);
                } else {
                    e.relations[rel].remove(row);
                    journal.record(|| Undo::Hidden(rel as u32, row.clone()));
                }
            }
            for row in change.plus.iter() {
                if let Seen::Original(original) = seen {
                    original.entry(row.clone()).or_insert(false);
                }
                if is_aggregate {
                    let (group, value) = e.aggregates[rel].as_ref().expect("aggregate").split(row);
                    e.show_value(rel, &group, value, journal);
                } else {
                    e.relations[rel].add(row.clone());
                    journal.record(|| Undo::Shown(rel as u32, row.clone()));
                }
            }
            e.stats_now[rel][INSERTED] += change.plus.len() as u64;
            e.stats_now[rel][DELETED] += change.minus.len() as u64;
        }
    }

    fn net_changes(self, e: &mut Engine, keep_all: bool) -> Changes {
        let mut changes: Changes = FxHashMap::default();
        for (rel, seen) in self.seen {
            let keep = keep_all || e.read_later[rel];
            let mut change = Change::default();
            let touched = &mut e.touched[rel];
            let rows = &e.relations[rel].rows;
            let listed = touched.rows.len();
            let from_empty = matches!(seen, Seen::FromEmpty(_));
            match seen {
                Seen::Original(original) => {
                    for (row, was) in &original {
                        if keep {
                            let now = rows.contains(row);
                            if !was && now {
                                Arc::make_mut(&mut change.plus).insert(row.clone());
                            } else if *was && !now {
                                change.minus.insert(row.clone());
                            }
                        }
                    }
                    touched.rows.extend(original.into_keys());
                }
                Seen::FromEmpty(hidden) => {
                    if keep {
                        change.plus = rows.clone();
                    }
                    touched.every_visible = true;
                    touched.rows.extend(hidden.into_iter().filter(|row| !rows.contains(row)));
                }
            }
            let added = &touched.rows[listed..];
            let visible = if from_empty { rows.len() } else { 0 };
            let count = match &e.aggregates[rel] {
                Some(agg) => {
                    let shown = rows.iter().take(visible);
                    shown.chain(added).map(|r| agg.split(r).0).collect::<RowSet>().len()
                }
                None => visible + added.len(),
            };
            e.stats_now[rel][TOUCHED] += count as u64;
            if !change.is_empty() {
                changes.insert(rel, change);
            }
        }
        changes
    }
}

/// Makes the derivations waiting on a group (`StratumRun::wake`), for `Held::release`.
type Wake<'w> = dyn FnMut(&mut Engine, usize, &Row, Option<Value>) -> Result<bool, Failure> + 'w;

/// A held group's new minimum, in a min-heap (ties by arrival, which never decides what is released).
#[derive(Clone)]
struct HeldEntry {
    key: Ordered,
    sequence: u64,
    group: Row,
}

impl PartialEq for HeldEntry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for HeldEntry {}

impl PartialOrd for HeldEntry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for HeldEntry {
    fn cmp(&self, other: &Self) -> Ordering {
        (&other.key, other.sequence).cmp(&(&self.key, self.sequence))
    }
}

/// Group changes of a stratum's `.ordered` aggregates, held back while anything else is in flight
/// (see `pycore._Held`): a release lets go of every held group whose minimum vanished and of every
/// held group whose new minimum is the least of all held ones. An aggregate ordered `up to` a goal
/// is released only while its new minimum is at most the goals' value; the rest waits here across
/// runs. `frontier` is the last value released in this evaluation.
#[derive(Clone)]
struct Held {
    heaps: FxHashMap<usize, BinaryHeap<HeldEntry>>,
    /// Groups whose best rose while derivations waited on them (`until`), by the least bound that
    /// waits: the release order wakes them when it reaches that bound (see `pycore._Held`).
    wakes: FxHashMap<usize, BinaryHeap<HeldEntry>>,
    pending: FxHashMap<usize, FxHashMap<Row, Value>>,
    vanished: FxHashMap<usize, RowSet>,
    goals: FxHashMap<usize, usize>,
    frontier: FxHashMap<usize, Ordered>,
    order: Vec<usize>,
    sequence: u64,
    /// `plus h`: per aggregate, its heuristic relation and that relation's index on the group's
    /// columns (see `prepare`); each held group's key in the release order (its minimum plus its
    /// heuristic), and the least bound waiting on each group, to re-key both when `h` changes
    offsets: FxHashMap<usize, (usize, usize)>,
    keys: FxHashMap<usize, FxHashMap<Row, Value>>,
    wake_bounds: FxHashMap<usize, FxHashMap<Row, Value>>,
}

/// How far (relative) a release key summed with a heuristic may fall below the last one released
/// before it counts as a fall along a derivation, and rise above the goals' and still be released
/// (see `pycore.ROUNDING`).
const ROUNDING: f64 = 1e-12;

/// Whether `key` may be released under `bound` (None: no bound); with a heuristic (`offsets`),
/// within rounding above it too (see `pycore._Held.within`).
fn within(offsets: bool, key: &Ordered, bound: Option<&Ordered>) -> bool {
    let Some(bound) = bound else {
        return true;
    };
    if key <= bound {
        return true;
    }
    match (offsets, as_f64(key.value()), as_f64(bound.value())) {
        (true, Some(k), Some(b)) => k - b <= ROUNDING * b.abs(),
        _ => false,
    }
}

fn as_f64(v: Value) -> Option<f64> {
    match v {
        Value::Int(i) => Some(i as f64),
        Value::Float(f) => Some(f),
        _ => None,
    }
}

impl Held {
    fn new(stratum: &Stratum) -> Self {
        let relations = &stratum.ordered;
        Held {
            heaps: relations.iter().map(|r| (*r, BinaryHeap::new())).collect(),
            wakes: relations.iter().map(|r| (*r, BinaryHeap::new())).collect(),
            pending: relations.iter().map(|r| (*r, FxHashMap::default())).collect(),
            vanished: relations.iter().map(|r| (*r, RowSet::default())).collect(),
            goals: stratum.goals.iter().copied().collect(),
            frontier: FxHashMap::default(),
            order: relations.to_vec(),
            sequence: 0,
            offsets: stratum.offsets.iter().map(|&(r, h)| (r, (h, usize::MAX))).collect(),
            keys: relations.iter().map(|r| (*r, FxHashMap::default())).collect(),
            wake_bounds: stratum.offsets.iter().map(|&(r, _)| (r, FxHashMap::default())).collect(),
        }
    }

    /// Index each heuristic on its group's columns, so that a key is one lookup.
    fn prepare(&mut self, e: &mut Engine) {
        for (h, index) in self.offsets.values_mut() {
            let relation = &mut e.relations[*h];
            let positions: Vec<usize> = (0..relation.arity - 1).collect();
            *index = relation.ensure_index(&positions);
        }
    }

    /// Where `value` of `group` comes in the release order: the value itself, or with `plus h` the
    /// value plus h's least value for the group (0 if it has none).
    fn key(&self, e: &Engine, rel: usize, group: &Row, value: Value) -> Result<Value, Failure> {
        let Some(&(h, index)) = self.offsets.get(&rel) else {
            return Ok(value);
        };
        let relation = &e.relations[h];
        let last = relation.arity - 1;
        let mut least: Option<Ordered> = None;
        if let Some(bucket) = relation.get(index, &group.values()) {
            bucket
                .try_for_each(|row| {
                    let v = Ordered::new(row.get(last), &e.strings);
                    if least.as_ref().is_none_or(|l| v < *l) {
                        least = Some(v);
                    }
                    Ok::<(), ()>(())
                })
                .ok();
        }
        let offset = least.map_or(Value::Int(0), |l| l.value());
        match add_numbers(value, offset) {
            Some(Ok(key)) => Ok(key),
            Some(Err(err)) => Err(Failure::Evaluation(format!("{}: {}", err.kind, err.message))),
            None => Err(Failure::Evaluation(format!(
                "'.ordered {} up to {} plus {}' adds {}'s {} to {}'s {} for group {}: both must be numbers",
                e.rels[rel].name,
                e.rels[self.goals[&rel]].name,
                e.rels[h].name,
                e.rels[h].name,
                crate::convert::repr(offset, &e.strings),
                e.rels[rel].name,
                crate::convert::repr(value, &e.strings),
                repr_row(&group.values(), &e.strings)
            ))),
        }
    }

    /// Re-key the held groups, and the wakes waiting on groups, whose heuristic changed.
    fn reorder(&mut self, e: &Engine, changes: &Changes) -> Result<(), Failure> {
        let offsets: Vec<(usize, usize)> = self.offsets.iter().map(|(&r, &(h, _))| (r, h)).collect();
        for (rel, h) in offsets {
            let Some(change) = changes.get(&h) else {
                continue;
            };
            let last = e.relations[h].arity - 1;
            let groups: RowSet =
                change.plus.iter().chain(change.minus.iter()).map(|row| Row::new(&row.values()[..last])).collect();
            for group in groups {
                if let Some(&value) = self.pending[&rel].get(&group) {
                    let key = self.key(e, rel, &group, value)?;
                    if self.keys[&rel].get(&group) != Some(&key) {
                        self.push(e, rel, group.clone(), key);
                    }
                }
                if let Some(&bound) = self.wake_bounds[&rel].get(&group) {
                    let key = self.key(e, rel, &group, bound)?;
                    let wakes = self.wakes.get_mut(&rel).expect("held relation");
                    wakes.push(HeldEntry { key: Ordered::new(key, &e.strings), sequence: self.sequence, group });
                    self.sequence += 1;
                }
            }
        }
        Ok(())
    }

    fn push(&mut self, e: &Engine, rel: usize, group: Row, key: Value) {
        let keys = self.keys.get_mut(&rel).expect("held relation");
        keys.insert(group.clone(), key);
        let heap = self.heaps.get_mut(&rel).expect("held relation");
        heap.push(HeldEntry { key: Ordered::new(key, &e.strings), sequence: self.sequence, group });
        self.sequence += 1;
        if heap.len() > 2 * keys.len() + 64 {
            // drop stale entries left by groups that changed again
            let entries = std::mem::take(heap).into_vec();
            *heap = entries.into_iter().filter(|x| keys.get(&x.group) == Some(&x.key.value())).collect();
        }
    }

    fn holds(&self, rel: usize) -> bool {
        self.heaps.contains_key(&rel)
    }

    fn wake_at(&mut self, e: &Engine, rel: usize, group: Row, bound: Value) -> Result<(), Failure> {
        let key = self.key(e, rel, &group, bound)?;
        if let Some(bounds) = self.wake_bounds.get_mut(&rel) {
            let lower = match bounds.get(&group) {
                Some(&least) => below(bound, least, &e.strings)?,
                None => true,
            };
            if lower {
                bounds.insert(group.clone(), bound);
            }
        }
        let wakes = self.wakes.get_mut(&rel).expect("held relation");
        wakes.push(HeldEntry { key: Ordered::new(key, &e.strings), sequence: self.sequence, group });
        self.sequence += 1;
        Ok(())
    }

    /// A new candidate below the last released value means values fell along a derivation, which
    /// would make stopping at the goal inexact.
    fn check_candidate(&self, e: &Engine, rel: usize, group: &Row, value: Value) -> Result<(), Failure> {
        let Some(frontier) = self.frontier.get(&rel) else {
            return Ok(());
        };
        let key = self.key(e, rel, group, value)?;
        let ordered = Ordered::new(key, &e.strings);
        if frontier.is_str() != ordered.is_str() || ordered >= *frontier {
            return Ok(());
        }
        let plus = self.offsets.get(&rel).map(|&(h, _)| format!(" plus {}", e.rels[h].name));
        if plus.is_some() {
            // a heuristic's sums round: a fall within rounding is an order off by an ulp, which the
            // release corrects (the group is hidden and released again), not a fall along a derivation
            if let (Some(f), Some(k)) = (as_f64(frontier.value()), as_f64(key)) {
                if f - k <= ROUNDING * f.abs() {
                    return Ok(());
                }
            }
        }
        Err(Failure::Evaluation(format!(
            "'.ordered {} up to {}{}' needs values that never fall along derivations, but group {} received {} \
             (release key {}) after keys up to {} were released",
            e.rels[rel].name,
            e.rels[self.goals[&rel]].name,
            plus.unwrap_or_default(),
            repr_row(&group.values(), &e.strings),
            crate::convert::repr(value, &e.strings),
            crate::convert::repr(key, &e.strings),
            crate::convert::repr(frontier.value(), &e.strings)
        )))
    }

    fn hold(&mut self, e: &Engine, rel: usize, group: Row) -> Result<(), Failure> {
        let best = e.best(rel, &group)?;
        let Some(best) = best else {
            self.pending.get_mut(&rel).expect("held relation").remove(&group);
            self.keys.get_mut(&rel).expect("held relation").remove(&group);
            // A group ordered up to a goal was hidden when it changed, so only the others have a
            // vanished minimum left to release.
            if !self.goals.contains_key(&rel) {
                self.vanished.get_mut(&rel).expect("held relation").insert(group);
            }
            return Ok(());
        };
        let key = self.key(e, rel, &group, best)?;
        if self.pending[&rel].get(&group) == Some(&best) && self.keys[&rel].get(&group) == Some(&key) {
            return Ok(());
        }
        self.pending.get_mut(&rel).expect("held relation").insert(group.clone(), best);
        self.push(e, rel, group, key);
        Ok(())
    }

    /// The next visible changes: batches are released until one changes something or nothing more
    /// may be released. `wake(e, rel, group, best)` makes the derivations that wait on a group for a
    /// bound its best reaches (`until`); a batch that wakes any releases nothing more, since they
    /// may lower what it would release (the caller evaluates them first).
    fn release(&mut self, e: &mut Engine, mut wake: Option<&mut Wake>) -> Result<Changes, Failure> {
        loop {
            let (changes, released) = self.release_batch(e, wake.as_deref_mut())?;
            if !changes.is_empty() || !released {
                return Ok(changes);
            }
        }
    }

    /// The goals' largest key, or None (no bound) while there is no goal or one is not shown.
    fn bound(&self, e: &Engine, rel: usize) -> Result<Option<Ordered>, Failure> {
        let Some(&goal) = self.goals.get(&rel) else {
            return Ok(None);
        };
        let mut bound: Option<Ordered> = None;
        for group in e.relations[goal].rows.iter() {
            let Some(value) = e.current(rel, group) else {
                return Ok(None);
            };
            let key = Ordered::new(self.key(e, rel, group, value)?, &e.strings);
            if bound.as_ref().is_none_or(|b| key > *b) {
                bound = Some(key);
            }
        }
        Ok(bound)
    }

    fn release_batch(&mut self, e: &mut Engine, mut wake: Option<&mut Wake>) -> Result<(Changes, bool), Failure> {
        let mut changes: Changes = FxHashMap::default();
        let mut any_released = false;
        for &rel in &self.order {
            let bound = self.bound(e, rel)?;
            let offsets = self.offsets.contains_key(&rel);
            let pending = self.pending.get_mut(&rel).expect("held relation");
            let keys = self.keys.get_mut(&rel).expect("held relation");
            let heap = self.heaps.get_mut(&rel).expect("held relation");
            while heap.peek().is_some_and(|top| keys.get(&top.group) != Some(&top.key.value())) {
                heap.pop();
            }
            let wakes = self.wakes.get_mut(&rel).expect("held relation");
            if let Some(wake) = wake.as_deref_mut() {
                while let Some(top) = wakes.peek().filter(|top| {
                    heap.peek().is_none_or(|h| h.key >= top.key) && within(offsets, &top.key, bound.as_ref())
                }) {
                    let least = top.key.clone();
                    let mut woke = false;
                    while wakes.peek().is_some_and(|top| top.key == least) {
                        let group = wakes.pop().expect("peeked").group;
                        if let Some(bounds) = self.wake_bounds.get_mut(&rel) {
                            bounds.remove(&group);
                        }
                        let best = e.best(rel, &group)?;
                        woke |= wake(e, rel, &group, best)?;
                    }
                    if woke {
                        // the woken derivations go first: they may lower what would be released
                        return Ok((changes, false));
                    }
                }
            }
            let mut released: Vec<Row> = Vec::new();
            for group in std::mem::take(self.vanished.get_mut(&rel).expect("held relation")) {
                if !pending.contains_key(&group) && e.best(rel, &group)?.is_none() {
                    released.push(group);
                }
            }
            if let Some(top) = heap.peek() {
                if within(offsets, &top.key, bound.as_ref()) {
                    let least = top.key.clone();
                    while heap.peek().is_some_and(|top| top.key == least) {
                        let entry = heap.pop().expect("peeked");
                        if keys.get(&entry.group) == Some(&entry.key.value()) {
                            pending.remove(&entry.group);
                            keys.remove(&entry.group);
                            released.push(entry.group);
                        }
                    }
                    self.frontier.insert(rel, least);
                }
            }
            any_released |= !released.is_empty();
            let mut change = Change::default();
            let mut updates = 0;
            for group in released {
                let best = e.best(rel, &group)?;
                let current = e.current(rel, &group);
                if current.is_some() && best == current {
                    continue;
                }
                let agg = e.aggregates[rel].as_ref().expect("aggregate");
                if let Some(current) = current {
                    change.minus.insert(agg.row(&group, current));
                }
                if let Some(best) = best {
                    Arc::make_mut(&mut change.plus).insert(agg.row(&group, best));
                    updates += current.is_some() as u64;
                }
            }
            e.stats_now[rel][UPDATED] += updates;
            if !change.is_empty() {
                changes.insert(rel, change);
            }
        }
        Ok((changes, any_released))
    }
}

/// Apply lost derivations; every row that lost one is deleted for now (DRed's first phase).
fn overdelete(
    e: &mut Engine,
    outputs: Outputs,
    overdeleted: &mut FxHashMap<usize, RowSet>,
    journal: &mut Journal,
) -> Result<Changes, Failure> {
    let mut changes: Changes = FxHashMap::default();
    for (rel, out) in outputs {
        if out.is_empty() {
            continue;
        }
        let mut minus: RowSet = RowSet::default();
        if e.aggregates[rel].is_none() {
            for (row, delta) in out.plain {
                if delta == 0 {
                    continue;
                }
                let count = e.count(rel, &row) + delta;
                e.set_count(rel, row.clone(), count, journal);
                let gone = overdeleted.entry(rel).or_default();
                if delta < 0 && e.relations[rel].rows.contains(&row) && !gone.contains(&row) {
                    gone.insert(row.clone());
                    minus.insert(row);
                }
            }
        } else {
            for ((group, value), delta) in out.aggregate {
                if delta == 0 {
                    continue;
                }
                e.add_candidate(rel, &group, value, delta, journal)?;
                let gone = overdeleted.entry(rel).or_default();
                if delta < 0 && e.current(rel, &group) == Some(value) && !gone.contains(&group) {
                    gone.insert(group.clone());
                    minus.insert(e.aggregates[rel].as_ref().expect("aggregate").row(&group, value));
                }
            }
        }
        if !minus.is_empty() {
            changes.insert(rel, Change { plus: SharedRows::default(), minus });
        }
    }
    Ok(changes)
}

/// Rows deleted for now that still have a derivation from what remains (DRed's second phase).
fn rederive(e: &Engine, overdeleted: &FxHashMap<usize, RowSet>) -> Result<Changes, Failure> {
    let mut rederived: Changes = FxHashMap::default();
    for (&rel, gone) in overdeleted {
        let mut plus: RowSet = RowSet::default();
        match &e.aggregates[rel] {
            None => {
                for row in gone {
                    if e.count(rel, row) > 0 {
                        plus.insert(row.clone());
                    }
                }
            }
            Some(agg) => {
                for group in gone {
                    if let Some(best) = e.best(rel, group)? {
                        plus.insert(agg.row(group, best));
                    }
                }
            }
        }
        if !plus.is_empty() {
            rederived.insert(rel, Change { plus: Arc::new(plus), minus: RowSet::default() });
        }
    }
    Ok(rederived)
}

/// Whether a body atom the plan must match reads a view with no rows: then the plan derives
/// nothing, and is skipped before any lookup (or index) is made. An initial load meets this often:
/// every input changes in the first round, and the plans for most of them join relations the
/// recursion has not filled yet. Negated atoms hold on an empty view, so they never skip.
fn reads_an_empty_view(plan: &Plan, relations: &[Relation], changes: &Changes) -> bool {
    plan.steps.iter().any(|step| {
        let view = match step {
            Step::Lookup { view, .. } | Step::Scan { view, .. } | Step::Has { view, negated: false, .. } => *view,
            _ => return false,
        };
        let (rel, old) = plan.views[view];
        let rows = relations[rel].rows.len();
        match changes.get(&rel).filter(|_| old) {
            // the old contents: the rows minus those entering this round, plus those leaving it
            Some(change) => rows == change.plus.len() && change.minus.is_empty(),
            None => rows == 0,
        }
    })
}

/// Forget a waiting derivation, and its group once nothing waits on it; the bound it had.
fn forget(waiting: &mut Waiting, group: &Row, key: &Row) -> Option<Value> {
    let keys = waiting.get_mut(group)?;
    let bound = keys.remove(key);
    if keys.is_empty() {
        waiting.remove(group);
    }
    bound
}

/// Whether `a < b`, compared as Python compares them (a type error for values it cannot order).
fn below(a: Value, b: Value, strings: &Interner) -> Result<bool, Failure> {
    compare(a, b, "<", strings)
        .map(|order| order == Ordering::Less)
        .map_err(|err| Failure::Evaluation(format!("evaluation failed: {}: {}", err.kind, err.message)))
}

/// What a plan of a rule with `until` reads to decide whether a derivation waits: the aggregate it
/// waits on, what waits already, and, for each literal before `until` read in its new contents, the
/// rows entering its relation this round.
fn until_read<'a>(
    rule: &Rule,
    plan: &Plan,
    aggregates: &'a [Option<Aggregate>],
    waiting: &'a FxHashMap<usize, Waiting>,
    changes: &'a Changes,
) -> Option<UntilRead<'a>> {
    let deferral = rule.deferral.as_ref()?;
    let entering = plan
        .steps
        .iter()
        .find_map(|s| match s {
            Step::Until { entering, .. } => {
                Some(entering.iter().map(|(rel, _)| changes.get(rel).map(|c| &*c.plus)).collect())
            }
            _ => None,
        })
        .unwrap_or_default();
    Some(UntilRead {
        aggregate: aggregates[deferral.aggregate].as_ref().expect("aggregate"),
        waiting: waiting.get(&rule.id),
        entering,
    })
}

struct UntilRead<'a> {
    aggregate: &'a Aggregate,
    waiting: Option<&'a Waiting>,
    entering: Vec<Option<&'a RowSet>>,
}

fn rule_failure(rule: usize, err: ExecError) -> Failure {
    match err {
        ExecError::Value(v) => Failure::Rule { rule, kind: v.kind.to_string(), message: v.message },
        ExecError::Python(error) => Failure::RulePython { rule, error },
    }
}

/// A relation as one plan step reads it: new contents, or old ones (its rows minus those entering
/// this round plus those leaving it), minus DRed's hidden rows.
struct View<'a> {
    rel: &'a Relation,
    hidden: Option<&'a RowSet>,
    entering: Option<&'a RowSet>,
    leaving: Option<&'a RowSet>,
    leaving_index: Option<&'a Index>,
}

impl View<'_> {
    /// Whether `row` (a stored row, or values standing for one) is left out of this view.
    fn excluded<R: Hash + Equivalent<Row> + ?Sized>(&self, row: &R) -> bool {
        self.hidden.is_some_and(|h| h.contains(row)) || self.entering.is_some_and(|h| h.contains(row))
    }

    fn has(&self, row: &RowOf) -> bool {
        (self.rel.rows.contains(row) && !self.excluded(row)) || self.leaving.is_some_and(|s| s.contains(row))
    }
}

struct Exec<'a, 'py> {
    plan: &'a Plan,
    views: Vec<View<'a>>,
    functions: &'a [Function],
    py: Python<'py>,
    until: Option<UntilRead<'a>>,
}

struct ExecState<'a> {
    strings: &'a mut Interner,
    pystrings: &'a mut PyStrings,
    calls: &'a mut CallMemo,
    out: &'a mut Out,
    fired: u64,
    regs: Vec<Value>,
    waits: Option<&'a mut WaitChanges>,
}

impl<'a> ExecState<'a> {
    fn new(
        strings: &'a mut Interner,
        pystrings: &'a mut PyStrings,
        calls: &'a mut CallMemo,
        out: &'a mut Out,
        slots: usize,
        waits: Option<&'a mut WaitChanges>,
    ) -> Self {
        ExecState { strings, pystrings, calls, out, fired: 0, regs: vec![Value::Int(0); slots], waits }
    }
}

impl Exec<'_, '_> {
    fn eval(&self, expr: &Expr, st: &mut ExecState) -> Result<Value, ValueError> {
        match expr {
            Expr::Var(slot) => Ok(st.regs[*slot]),
            Expr::Const(v) => Ok(*v),
            Expr::Bin(op, l, r) => {
                let a = self.eval(l, st)?;
                let b = self.eval(r, st)?;
                arithmetic(*op, a, b, st.strings)
            }
            Expr::Neg(x) => negate(self.eval(x, st)?),
        }
    }

    /// An expression as it is used: arithmetic that yields NaN fails the rule.
    fn top(&self, expr: &Expr, st: &mut ExecState) -> Result<Value, ValueError> {
        let v = self.eval(expr, st)?;
        if expr.computes() && v.is_nan() {
            return Err(ValueError::new("ValueError", "arithmetic produced NaN"));
        }
        Ok(v)
    }

    /// The values of `exprs`, written into `out` in place: a key returned by value is a
    /// 160-byte copy per lookup, and variables (nearly every key) need no evaluation.
    fn values(&self, exprs: &[Expr], st: &mut ExecState, out: &mut Key) -> Result<(), ValueError> {
        out.clear();
        for e in exprs {
            let value = match e {
                Expr::Var(slot) => st.regs[*slot],
                Expr::Const(v) => *v,
                _ => self.top(e, st)?,
            };
            out.push(value);
        }
        Ok(())
    }

    fn bind<R: Values + ?Sized>(&self, pattern: &Pattern, row: &R, st: &mut ExecState) -> Result<bool, ExecError> {
        for &(position, slot) in pattern.binds.iter() {
            st.regs[slot] = row.at(position);
        }
        for (position, expr) in pattern.tests.iter() {
            if row.at(*position) != self.top(expr, st)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn matched<R: Values + ?Sized>(
        &self,
        pattern: &Pattern,
        row: &R,
        i: usize,
        sign: i64,
        st: &mut ExecState,
    ) -> Result<(), ExecError> {
        if self.bind(pattern, row, st)? {
            self.step(i + 1, sign, st)?;
        }
        Ok(())
    }

    fn step(&self, i: usize, sign: i64, st: &mut ExecState) -> Result<(), ExecError> {
        let Some(step) = self.plan.steps.get(i) else {
            return self.emit(sign, st);
        };
        match step {
            Step::Delta { .. } => unreachable!("the delta is bound before the first step"),
            Step::Test { op, left, right } => {
                let a = self.top(left, st)?;
                let b = self.top(right, st)?;
                let holds = match op {
                    Cmp::Eq => a == b,
                    Cmp::Ne => a != b,
                    _ => {
                        let order = compare(a, b, op.symbol(), st.strings)?;
                        match op {
                            Cmp::Lt => order == Ordering::Less,
                            Cmp::Le => order != Ordering::Greater,
                            Cmp::Gt => order == Ordering::Greater,
                            _ => order != Ordering::Less,
                        }
                    }
                };
                if holds {
                    self.step(i + 1, sign, st)?;
                }
            }
            Step::Assign { slot, expr } => {
                st.regs[*slot] = self.top(expr, st)?;
                self.step(i + 1, sign, st)?;
            }
            Step::Has { view, args, negated } => {
                let mut values = Key::new();
                self.values(args, st, &mut values)?;
                if self.views[*view].has(&RowOf::new(&values)) != *negated {
                    self.step(i + 1, sign, st)?;
                }
            }
            Step::Lookup { view, index, key, pattern } => {
                let mut wanted = Key::new();
                self.values(key, st, &mut wanted)?;
                let v = &self.views[*view];
                if let Some(bucket) = v.rel.get(*index, &wanted) {
                    bucket.try_for_each(|row| {
                        if v.excluded(row) {
                            return Ok(());
                        }
                        self.matched(pattern, &row.packed(), i, sign, st)
                    })?;
                }
                if let Some(bucket) = v.leaving_index.and_then(|index| index.get(&wanted)) {
                    bucket.try_for_each(|row| self.matched(pattern, &row.packed(), i, sign, st))?;
                }
            }
            Step::Scan { view, pattern } => {
                let v = &self.views[*view];
                for row in v.rel.rows.iter() {
                    if !v.excluded(row) {
                        self.matched(pattern, &row.packed(), i, sign, st)?;
                    }
                }
                if let Some(rows) = v.leaving {
                    for row in rows {
                        self.matched(pattern, &row.packed(), i, sign, st)?;
                    }
                }
            }
            Step::Call { function, inputs, pattern } => {
                let mut args = Key::new();
                self.values(inputs, st, &mut args)?;
                let key = call_key(*function, &args);
                let rows = match st.calls.get(&key, sign < 0) {
                    Some(rows) => rows,
                    None => {
                        let rows = Arc::new(self.call(*function, &args, st)?);
                        if rows.rows <= 1 {
                            st.calls.insert(&key, rows.clone());
                        }
                        rows
                    }
                };
                for r in 0..rows.rows {
                    self.matched(pattern, rows.row(r), i, sign, st)?;
                }
            }
            Step::Until { group, bound, key, delta_before, entering } => {
                if !self.waits(group, bound, key, *delta_before, entering, sign, st)? {
                    self.step(i + 1, sign, st)?;
                }
            }
        }
        Ok(())
    }

    /// Whether a derivation waits (see `pycore._Waits`): a new one (made by a row entering this
    /// round) if its group's best candidate is below its bound, one that existed if it was waiting.
    /// Plans whose delta comes before `until` record what begins or stops waiting.
    #[allow(clippy::too_many_arguments)]
    fn waits(
        &self,
        group: &[Expr],
        bound: &Expr,
        key: &[Expr],
        delta_before: bool,
        entering: &[(usize, Vec<Expr>)],
        sign: i64,
        st: &mut ExecState,
    ) -> Result<bool, ExecError> {
        let until = self.until.as_ref().expect("a plan with until reads what waits");
        let mut g = Key::new();
        self.values(group, st, &mut g)?;
        let b = self.top(bound, st)?;
        // Whether the group's best is below the bound, and whether the binding is recorded waiting:
        // where they agree (nearly always; a program whose bound is 0 never waits) the answer needs
        // no look at whether the binding is new. A comparison error counts only where it decides.
        let below = match until.aggregate.groups.get(&RowOf::new(&g)).and_then(|x| match &x.candidates {
            Candidates::Ordered(m) => m.first().map(Ordered::value),
            Candidates::Counted(_) => None,
        }) {
            Some(best) => compare(best, b, "<", st.strings).map(|order| order == Ordering::Less),
            None => Ok(false),
        };
        let mut k = Key::new();
        let group_keys = until.waiting.and_then(|w| w.get(&RowOf::new(&g)));
        if group_keys.is_some() {
            self.values(key, st, &mut k)?;
        }
        let recorded = group_keys.is_some_and(|keys| keys.contains_key(&RowOf::new(&k)));
        let waits = if below.as_ref().is_ok_and(|&below| below == recorded) {
            recorded
        } else if self.is_new(delta_before, entering, sign, st)? {
            below?
        } else {
            recorded
        };
        if waits && delta_before {
            if group_keys.is_none() {
                self.values(key, st, &mut k)?;
            }
            let changes = st.waits.as_deref_mut().expect("a plan with until records what waits");
            let entry = changes.entry((Row::new(&g), Row::new(&k))).or_insert((0, b));
            entry.0 += sign;
        }
        Ok(waits)
    }

    /// Whether a binding is made by a row entering this round: the delta's, if it comes before
    /// `until`, or one read in its new contents there.
    fn is_new(
        &self,
        delta_before: bool,
        entering: &[(usize, Vec<Expr>)],
        sign: i64,
        st: &mut ExecState,
    ) -> Result<bool, ExecError> {
        if delta_before && sign > 0 {
            return Ok(true);
        }
        let until = self.until.as_ref().expect("a plan with until reads what waits");
        let mut values = Key::new();
        for ((_, args), plus) in entering.iter().zip(&until.entering) {
            if let Some(plus) = plus {
                self.values(args, st, &mut values)?;
                if plus.contains(&RowOf::new(&values)) {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    fn emit(&self, sign: i64, st: &mut ExecState) -> Result<(), ExecError> {
        let mut values = Key::new();
        self.values(&self.plan.group, st, &mut values)?;
        if let (Some((position, bound)), true) = (&self.plan.bounded, sign > 0) {
            let b = self.top(bound, st)?;
            if compare(values[*position], b, "<", st.strings)? == Ordering::Less {
                return Err(ExecError::Value(ValueError::new(
                    "ValueError",
                    format!(
                        "derived {} below its until bound {}; the bound must never exceed the value",
                        crate::convert::repr(values[*position], st.strings),
                        crate::convert::repr(b, st.strings)
                    ),
                )));
            }
        }
        match &self.plan.aggregate {
            None => {
                // a head row derived before in this round (most of a search space's inputs are
                // wanted by many parents) is counted again without packing it anew
                let row = RowOf::new(&values);
                match st.out.plain.get_mut(&row) {
                    Some(count) => *count += sign,
                    None => {
                        st.out.plain.insert(row.to_row(), sign);
                    }
                }
            }
            Some(expr) => {
                let value = self.top(expr, st)?;
                *st.out.aggregate.entry((Row::new(&values), value)).or_insert(0) += sign;
            }
        }
        st.fired += 1;
        Ok(())
    }

    fn call(&self, function: usize, args: &[Value], st: &mut ExecState) -> Result<CallRows, ExecError> {
        let f = &self.functions[function];
        let py = self.py;
        let Some(callable) = &f.callable else {
            return Err(ExecError::Value(ValueError::new(
                "RuntimeError",
                format!("function {} was released by the garbage collector", f.name),
            )));
        };
        let items: Vec<Bound<'_, PyAny>> = args.iter().map(|&v| st.pystrings.object(py, v, st.strings)).collect();
        let tuple = PyTuple::new(py, items).map_err(ExecError::Python)?;
        let result = callable.bind(py).call1(tuple).map_err(ExecError::Python)?;
        if f.outputs == 0 {
            if let Ok(b) = result.downcast::<PyBool>() {
                return Ok(CallRows { rows: b.is_true() as usize, width: 0, values: Box::new([]) });
            }
        }
        if result.is_none() {
            return Err(self.bad_result(function, args, st, "returned None; return an iterable of rows".into()));
        }
        let mut rows = 0;
        let mut values = Vec::new();
        if let Ok(list) = result.downcast::<PyList>() {
            values.reserve(list.len() * f.outputs);
            for item in list.iter() {
                self.result_row(function, args, &item, &mut values, st)?;
                rows += 1;
            }
        } else {
            for item in result.try_iter().map_err(ExecError::Python)? {
                let item = item.map_err(ExecError::Python)?;
                self.result_row(function, args, &item, &mut values, st)?;
                rows += 1;
            }
        }
        Ok(CallRows { rows, width: f.outputs, values: values.into_boxed_slice() })
    }

    /// Append one result row's values to `values`.
    fn result_row(
        &self,
        function: usize,
        args: &[Value],
        item: &Bound<'_, PyAny>,
        values: &mut Vec<Value>,
        st: &mut ExecState,
    ) -> Result<(), ExecError> {
        let outputs = self.functions[function].outputs;
        if let Ok(t) = item.downcast::<PyTuple>() {
            if t.len() == outputs {
                return self.push_values(function, args, t.iter(), values, st);
            }
        } else if let Ok(l) = item.downcast::<PyList>() {
            if l.len() == outputs {
                return self.push_values(function, args, l.iter(), values, st);
            }
        }
        let shown = item.repr().map(|r| r.to_string()).unwrap_or_default();
        let message = format!("produced {shown}; each row must be a tuple of {outputs} values");
        Err(self.bad_result(function, args, st, message))
    }

    fn push_values<'py>(
        &self,
        function: usize,
        args: &[Value],
        items: impl Iterator<Item = Bound<'py, PyAny>>,
        values: &mut Vec<Value>,
        st: &mut ExecState,
    ) -> Result<(), ExecError> {
        for v in items {
            match st.pystrings.value(&v, st.strings) {
                Ok(value) => values.push(value),
                Err(what) => return Err(self.bad_result(function, args, st, format!("produced {what}"))),
            }
        }
        Ok(())
    }

    fn bad_result(&self, function: usize, args: &[Value], st: &ExecState, message: String) -> ExecError {
        let name = &self.functions[function].name;
        ExecError::Value(ValueError::new(
            "EvaluationError",
            format!("function '{name}{}' {message}", repr_row(args, st.strings)),
        ))
    }
}

/// Rows that count as absent in both the old and the new state of a round, by relation.
type Hidden = FxHashMap<usize, SharedRows>;

/// A batch's deletions and its insertions, to evaluate one after the other, and the inserted rows,
/// hidden while the deletions are evaluated.
fn split(incoming: Changes) -> (Changes, Changes, Hidden) {
    let mut deletions: Changes = FxHashMap::default();
    let mut insertions: Changes = FxHashMap::default();
    let mut hidden: Hidden = FxHashMap::default();
    for (rel, change) in incoming {
        if !change.minus.is_empty() {
            deletions.insert(rel, Change { plus: SharedRows::default(), minus: change.minus });
        }
        if !change.plus.is_empty() {
            hidden.insert(rel, change.plus.clone());
            insertions.insert(rel, Change { plus: change.plus, minus: RowSet::default() });
        }
    }
    (deletions, insertions, hidden)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one_row(value: i64) -> Arc<CallRows> {
        Arc::new(CallRows { rows: 1, width: 1, values: Box::new([Value::Int(value)]) })
    }

    #[test]
    fn the_call_memo_returns_a_result_only_for_its_exact_key() {
        let mut memo = CallMemo::new();
        memo.insert(&[1, 10, 20], one_row(7));
        assert_eq!(memo.get(&[1, 10, 20], false).map(|rows| rows.row(0)[0]), Some(Value::Int(7)));
        assert!(memo.get(&[1, 10, 21], false).is_none());
        assert!(memo.get(&[2, 10, 20], false).is_none());
    }

    #[test]
    fn the_call_memo_holds_a_bounded_number_of_results() {
        let mut memo = CallMemo::new();
        for key in 0..(3 * CALL_MEMO_SLOTS as u64) {
            memo.insert(&[0, key], one_row(key as i64));
        }
        assert_eq!(memo.slots.len(), CALL_MEMO_SLOTS);
        assert!(memo.slots.iter().flatten().count() <= CALL_MEMO_SLOTS);
        let last = 3 * CALL_MEMO_SLOTS as u64 - 1;
        assert_eq!(memo.get(&[0, last], false).map(|rows| rows.row(0)[0]), Some(Value::Int(last as i64)));
    }

    #[test]
    fn a_result_of_an_earlier_run_serves_retractions_only() {
        let mut memo = CallMemo::new();
        memo.insert(&[1, 10], one_row(7));
        memo.next_run();
        assert!(memo.get(&[1, 10], false).is_none());
        assert_eq!(memo.get(&[1, 10], true).map(|rows| rows.row(0)[0]), Some(Value::Int(7)));
        memo.insert(&[1, 10], one_row(7));
        assert!(memo.get(&[1, 10], false).is_some());
    }
}
