//! Relation storage: visible rows with hash indexes on the bound positions plans look up,
//! derivation counts, aggregate candidates, and the journal that undoes a failed run.

use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::ops::Deref;

use rustc_hash::{FxBuildHasher, FxHashMap, FxHashSet};
use smallvec::SmallVec;
use triomphe::ThinArc;

use crate::value::{Ordered, Value};

/// A row, shared between the visible set, its index buckets, counts, changes and the journal.
///
/// A thin pointer (8 bytes, not a slice's 16) to the values and their hash, computed once: every
/// map and set a row enters (and every rehash as they grow) reads the stored hash instead of
/// hashing the values again, and rows with different hashes compare unequal without reading them.
#[derive(Clone)]
pub struct Row(ThinArc<u64, Value>);

impl Row {
    pub fn new(values: &[Value]) -> Row {
        Row(ThinArc::from_header_and_slice(FxBuildHasher.hash_one(values), values))
    }
}

impl Deref for Row {
    type Target = [Value];

    fn deref(&self) -> &[Value] {
        &self.0.slice
    }
}

impl PartialEq for Row {
    fn eq(&self, other: &Row) -> bool {
        self.0.ptr() == other.0.ptr()
            || (self.0.header.header == other.0.header.header && self.0.slice == other.0.slice)
    }
}

impl Eq for Row {}

impl Hash for Row {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.0.header.header);
    }
}

impl std::fmt::Debug for Row {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.slice.fmt(f)
    }
}

/// Rows under one index key: a short vector (most keys), a set once it grows, so removal stays
/// constant time for the keys that hold thousands of rows.
pub enum Bucket {
    Few(Vec<Row>),
    Many(FxHashSet<Row>),
}

const FEW: usize = 16;

impl Bucket {
    fn insert(&mut self, row: Row) {
        match self {
            Bucket::Few(rows) => {
                if rows.len() < FEW {
                    rows.push(row);
                } else {
                    let mut set: FxHashSet<Row> = rows.drain(..).collect();
                    set.insert(row);
                    *self = Bucket::Many(set);
                }
            }
            Bucket::Many(set) => {
                set.insert(row);
            }
        }
    }

    fn remove(&mut self, row: &Row) {
        match self {
            Bucket::Few(rows) => {
                if let Some(i) = rows.iter().position(|r| r == row) {
                    rows.swap_remove(i);
                }
            }
            Bucket::Many(set) => {
                set.remove(row);
            }
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            Bucket::Few(rows) => rows.is_empty(),
            Bucket::Many(set) => set.is_empty(),
        }
    }

    pub fn for_each(&self, mut f: impl FnMut(&Row) -> bool) -> bool {
        match self {
            Bucket::Few(rows) => rows.iter().all(&mut f),
            Bucket::Many(set) => set.iter().all(f),
        }
    }

    pub fn rows(&self) -> Vec<Row> {
        match self {
            Bucket::Few(rows) => rows.clone(),
            Bucket::Many(set) => set.iter().cloned().collect(),
        }
    }
}

/// A hash index, built the first time a plan looks it up in a non-empty relation and maintained
/// from then on: an index no evaluation reads (a plan that only fires on a change that never comes,
/// or one that only ever met the relation empty) costs nothing when rows are added.
pub struct Index {
    pub positions: Box<[usize]>,
    pub map: FxHashMap<Box<[Value]>, Bucket>,
    pub built: bool,
}

impl Index {
    fn build(&mut self, rows: &FxHashSet<Row>) {
        for row in rows {
            self.insert(row);
        }
        self.built = true;
    }

    fn insert(&mut self, row: &Row) {
        let key = key_of(row, &self.positions);
        match self.map.get_mut(&key[..]) {
            Some(bucket) => bucket.insert(row.clone()),
            None => {
                self.map.insert(Box::from(&key[..]), Bucket::Few(vec![row.clone()]));
            }
        }
    }
}

/// Values on the stack: index keys (one to three values) and head rows (up to ten).
pub type Key = SmallVec<[Value; 10]>;

fn key_of(row: &[Value], positions: &[usize]) -> Key {
    positions.iter().map(|&p| row[p]).collect()
}

/// The visible rows of one relation.
pub struct Relation {
    pub arity: usize,
    pub rows: FxHashSet<Row>,
    pub indexes: Vec<Index>,
}

impl Relation {
    pub fn new(arity: usize, patterns: &[Vec<usize>]) -> Self {
        let indexes = patterns
            .iter()
            .map(|p| Index { positions: p.clone().into_boxed_slice(), map: FxHashMap::default(), built: false })
            .collect();
        Relation { arity, rows: FxHashSet::default(), indexes }
    }

    pub fn index_id(&self, positions: &[usize]) -> Option<usize> {
        self.indexes.iter().position(|i| &*i.positions == positions)
    }

    /// The index on `positions`, built from the current rows if it is not yet.
    pub fn ensure_index(&mut self, positions: &[usize]) -> usize {
        let id = match self.index_id(positions) {
            Some(id) => id,
            None => {
                let positions = positions.to_vec().into_boxed_slice();
                self.indexes.push(Index { positions, map: FxHashMap::default(), built: false });
                self.indexes.len() - 1
            }
        };
        if !self.indexes[id].built {
            self.indexes[id].build(&self.rows);
        }
        id
    }

    /// Make `index` ready for lookups: built, unless the relation is empty (then lookups find nothing
    /// without it, and rows added later do not pay for it until a lookup needs it).
    pub fn prepare(&mut self, index: usize) {
        if !self.indexes[index].built && !self.rows.is_empty() {
            self.indexes[index].build(&self.rows);
        }
    }

    /// Rows under `key`; `index` must have been prepared since the relation last changed.
    pub fn get(&self, index: usize, key: &[Value]) -> Option<&Bucket> {
        let index = &self.indexes[index];
        debug_assert!(index.built || self.rows.is_empty(), "lookup on an index that was not prepared");
        index.map.get(key)
    }

    pub fn add(&mut self, row: Row) {
        if self.rows.contains(&row) {
            return;
        }
        for index in self.indexes.iter_mut().filter(|i| i.built) {
            index.insert(&row);
        }
        self.rows.insert(row);
    }

    pub fn remove(&mut self, row: &Row) {
        if !self.rows.remove(row) {
            return;
        }
        for index in self.indexes.iter_mut().filter(|i| i.built) {
            let key = key_of(row, &index.positions);
            if let Some(bucket) = index.map.get_mut(&key[..]) {
                bucket.remove(row);
                if bucket.is_empty() {
                    index.map.remove(&key[..]);
                }
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AggFunc {
    Min,
    Max,
    Count,
    Sum,
}

/// A group's candidates with their derivation counts: ordered for min/max (the next best is at
/// hand when the best goes), hashed for count/sum.
pub enum Candidates {
    Ordered(BTreeMap<Ordered, i64>),
    Counted(FxHashMap<Value, i64>),
}

impl Candidates {
    pub fn len(&self) -> usize {
        match self {
            Candidates::Ordered(m) => m.len(),
            Candidates::Counted(m) => m.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

pub struct Group {
    pub candidates: Candidates,
    pub current: Option<Value>,
}

pub struct Aggregate {
    pub func: AggFunc,
    pub position: usize,
    pub groups: FxHashMap<Row, Group>,
}

impl Aggregate {
    pub fn row(&self, group: &[Value], value: Value) -> Row {
        let p = self.position;
        let mut values = Vec::with_capacity(group.len() + 1);
        values.extend_from_slice(&group[..p]);
        values.push(value);
        values.extend_from_slice(&group[p..]);
        Row::new(&values)
    }

    pub fn split(&self, row: &[Value]) -> (Row, Value) {
        let p = self.position;
        let mut group = Vec::with_capacity(row.len() - 1);
        group.extend_from_slice(&row[..p]);
        group.extend_from_slice(&row[p + 1..]);
        (Row::new(&group), row[p])
    }

    pub fn empty_candidates(&self) -> Candidates {
        match self.func {
            AggFunc::Min | AggFunc::Max => Candidates::Ordered(BTreeMap::new()),
            _ => Candidates::Counted(FxHashMap::default()),
        }
    }

    /// The group, made empty if it is not there.
    pub fn group_mut(&mut self, group: &Row) -> &mut Group {
        let empty = self.empty_candidates();
        self.groups.entry(group.clone()).or_insert(Group { candidates: empty, current: None })
    }

    /// Drop a group that holds nothing any more (no candidates, nothing shown).
    pub fn tidy(&mut self, group: &Row) {
        if let Some(g) = self.groups.get(group) {
            if g.candidates.is_empty() && g.current.is_none() {
                self.groups.remove(group);
            }
        }
    }
}

/// A map from keys to derivation counts, where a count of zero is no entry.
pub trait CountMap<K> {
    fn set_count(&mut self, key: K, count: i64);
}

impl<K: Ord> CountMap<K> for BTreeMap<K, i64> {
    fn set_count(&mut self, key: K, count: i64) {
        if count != 0 {
            self.insert(key, count);
        } else {
            self.remove(&key);
        }
    }
}

impl<K: std::hash::Hash + Eq> CountMap<K> for FxHashMap<K, i64> {
    fn set_count(&mut self, key: K, count: i64) {
        if count != 0 {
            self.insert(key, count);
        } else {
            self.remove(&key);
        }
    }
}

/// One undo step; a failed run replays the journal backwards.
pub enum Undo {
    Shown(usize, Row),
    Hidden(usize, Row),
    Count(usize, Row, i64),
    Candidate(usize, Row, Ordered, i64),
    Counted(usize, Row, Value, i64),
    Current(usize, Row, Option<Value>),
}

/// The undo steps of one run. A run that starts from an empty state keeps none: undoing it is
/// clearing everything, and an initial load journals as many steps as it derives rows.
///
/// `fail_after` injects a failure for tests: the journal panics once that many state changes have
/// been made, as a bug in the core would, so that rollback is tested at every step of a run.
pub struct Journal {
    steps: Vec<Undo>,
    enabled: bool,
    fail_after: Option<u64>,
}

impl Journal {
    /// A journal writing into `steps` (empty; passing the last run's buffer back saves growing
    /// it again, since a re-evaluation journals thousands of steps).
    pub fn new(steps: Vec<Undo>, enabled: bool, fail_after: Option<u64>) -> Self {
        debug_assert!(steps.is_empty());
        Journal { steps, enabled, fail_after }
    }

    /// Record one state change; the step is built only when journaling, since a run from an empty
    /// state changes as much but keeps nothing (building steps would clone every row it touches).
    pub fn record(&mut self, step: impl FnOnce() -> Undo) {
        if self.enabled {
            self.steps.push(step());
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

    pub fn into_steps(self) -> Vec<Undo> {
        self.steps
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustc_hash::FxHashSet;

    #[test]
    fn rows_python_deems_equal_are_one_row() {
        let int = Row::new(&[Value::Int(1), Value::Str(0)]);
        let float = Row::new(&[Value::Float(1.0), Value::Str(0)]);
        let boolean = Row::new(&[Value::Bool(true), Value::Str(0)]);
        assert!(int == float && float == boolean);
        let set: FxHashSet<Row> = [int, float, boolean].into_iter().collect();
        assert_eq!(set.len(), 1);
    }

    #[test]
    fn rows_with_different_values_differ() {
        let a = Row::new(&[Value::Int(1), Value::Int(2)]);
        let b = Row::new(&[Value::Int(2), Value::Int(1)]);
        assert!(a != b);
        assert_eq!(&a[..], &[Value::Int(1), Value::Int(2)][..]);
    }
}
