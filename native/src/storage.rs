//! Relation storage: visible rows with hash indexes on the bound positions plans look up,
//! derivation counts, aggregate candidates, and the journal that undoes a failed run.

use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;

use hashbrown::hash_table::{Entry, HashTable};
use hashbrown::Equivalent;
use rustc_hash::{FxBuildHasher, FxHashMap, FxHasher};
use smallvec::SmallVec;

use crate::value::{Ordered, Value};
use crate::words::Words;

/// A row, shared between the visible set, its index buckets, counts, changes and the journal.
///
/// A thin pointer (8 bytes) to the row's hash, computed once, and its values packed as 8-byte
/// words: each value's bits (an int, a float's bits, a bool, a string's id), then the values' kinds,
/// two bits each, 32 to a word. A value as `Value` holds its kind beside its bits in 16 bytes; rows
/// are most of what an engine holds, and packed they take a little over half that. Every map and
/// set a row enters reads the stored hash instead of hashing the values again, and rows with
/// different hashes compare unequal without reading them.
#[derive(Clone)]
pub struct Row(Words);

const KINDS_PER_WORD: usize = 32;

/// How many of a packed row's words are values: `words` is n values plus ceil(n / 32) kind words.
fn arity_of(words: usize) -> usize {
    words - words.div_ceil(KINDS_PER_WORD + 1)
}

impl Row {
    #[inline]
    pub fn new(values: &[Value]) -> Row {
        Row::with_hash(values, hash_values(values))
    }

    /// A row of `values`, whose hash (`hash_values`) the caller computed.
    #[inline]
    fn with_hash(values: &[Value], hash: u64) -> Row {
        // on the stack for rows of up to 15 values, which is nearly every row
        let mut words: SmallVec<[u64; 16]> = values.iter().map(|v| v.parts().1).collect();
        for chunk in values.chunks(KINDS_PER_WORD) {
            words.push(chunk.iter().enumerate().fold(0, |kinds, (i, v)| kinds | (v.parts().0 as u64) << (2 * i)));
        }
        Row(Words::new(hash, &words))
    }

    /// The number of values.
    pub fn arity(&self) -> usize {
        arity_of(self.0.words().len())
    }

    /// The value at `i`.
    #[inline]
    pub fn get(&self, i: usize) -> Value {
        let words = self.0.words();
        // rows of up to 32 values (all but the widest) keep their kinds in their last word
        let kinds = if words.len() <= KINDS_PER_WORD + 1 {
            words[words.len() - 1]
        } else {
            words[arity_of(words.len()) + i / KINDS_PER_WORD]
        };
        unpack(words, kinds, i)
    }

    /// The words read in place, for reading many of its values: `get` finds the kinds word again
    /// for each one.
    #[inline]
    pub fn packed(&self) -> Packed<'_> {
        let words = self.0.words();
        Packed { words, arity: arity_of(words.len()) }
    }

    /// The values, unpacked on the stack.
    pub fn values(&self) -> Key {
        (0..self.arity()).map(|i| self.get(i)).collect()
    }
}

impl PartialEq for Row {
    #[inline]
    fn eq(&self, other: &Row) -> bool {
        if self.0.same(&other.0) {
            return true;
        }
        if self.0.tag() != other.0.tag() {
            return false;
        }
        let (a, b) = (self.0.words(), other.0.words());
        // the same words are the same values (rows are a few words: a loop, not a memcmp call);
        // other words may still be values Python deems equal (1, 1.0 and True; 0.0 and -0.0)
        (a.len() == b.len() && a.iter().zip(b.iter()).all(|(x, y)| x == y))
            || (self.arity() == other.arity() && (0..self.arity()).all(|i| self.get(i) == other.get(i)))
    }
}

impl Eq for Row {}

impl Hash for Row {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.0.tag());
    }
}

/// The hash a row of these values has (`Row` and `RowOf` agree on it).
#[inline]
fn hash_values(values: &[Value]) -> u64 {
    FxBuildHasher.hash_one(values)
}

/// A set of rows; hashbrown's, so that a row can be looked up by values not yet packed (`RowOf`).
pub type RowSet = hashbrown::HashSet<Row, FxBuildHasher>;

/// A map keyed by rows, looked up the same way.
pub type RowMap<V> = hashbrown::HashMap<Row, V, FxBuildHasher>;

/// Values standing for the row they would make, with that row's hash: a lookup in a `RowSet` or a
/// `RowMap` by values allocates no row, as packing them (`Row::new`) would. Most lookups a rule makes
/// this way (a fully bound atom, a head row derived before in the same round) need none.
pub struct RowOf<'a> {
    values: &'a [Value],
    hash: u64,
}

impl<'a> RowOf<'a> {
    #[inline]
    pub fn new(values: &'a [Value]) -> Self {
        RowOf { values, hash: hash_values(values) }
    }

    /// The row itself, hashed once.
    pub fn to_row(&self) -> Row {
        Row::with_hash(self.values, self.hash)
    }
}

impl Hash for RowOf<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl Equivalent<Row> for RowOf<'_> {
    #[inline]
    fn equivalent(&self, row: &Row) -> bool {
        row.0.tag() == self.hash
            && row.arity() == self.values.len()
            && self.values.iter().enumerate().all(|(i, v)| row.get(i) == *v)
    }
}

impl std::fmt::Debug for Row {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.values().fmt(f)
    }
}

/// Values read by position: a stored row, or values at hand (a function call's result rows).
pub trait Values {
    fn at(&self, i: usize) -> Value;
}

impl Values for Row {
    #[inline]
    fn at(&self, i: usize) -> Value {
        self.get(i)
    }
}

/// A row's words with its arity (`Row::packed`).
pub struct Packed<'a> {
    words: &'a [u64],
    arity: usize,
}

impl Values for Packed<'_> {
    #[inline]
    fn at(&self, i: usize) -> Value {
        unpack(self.words, self.words[self.arity + i / KINDS_PER_WORD], i)
    }
}

/// Value `i` of a packed row, whose kind is in `kinds` (the row's kinds word that holds it).
#[inline]
fn unpack(words: &[u64], kinds: u64, i: usize) -> Value {
    Value::from_parts(((kinds >> (2 * (i % KINDS_PER_WORD))) & 3) as u8, words[i])
}

impl Values for [Value] {
    #[inline]
    fn at(&self, i: usize) -> Value {
        self[i]
    }
}

/// Rows under one index key: one row (a key of a unique index), a short vector (most keys), a set
/// once it grows, so removal stays constant time for the keys that hold thousands of rows. Never
/// empty: the index drops a key with its last row.
pub enum Bucket {
    One(Row),
    Few(Vec<Row>),
    Many(Box<RowSet>),
}

const FEW: usize = 16;

impl Bucket {
    fn insert(&mut self, row: Row) {
        match self {
            Bucket::One(first) => *self = Bucket::Few(vec![first.clone(), row]),
            Bucket::Few(rows) => {
                if rows.len() < FEW {
                    rows.push(row);
                } else {
                    let mut set: RowSet = rows.drain(..).collect();
                    set.insert(row);
                    *self = Bucket::Many(Box::new(set));
                }
            }
            Bucket::Many(set) => {
                set.insert(row);
            }
        }
    }

    /// Remove `row`; whether the bucket is now empty.
    fn remove(&mut self, row: &Row) -> bool {
        match self {
            Bucket::One(only) => only == row,
            Bucket::Few(rows) => {
                if let Some(i) = rows.iter().position(|r| r == row) {
                    rows.swap_remove(i);
                }
                rows.is_empty()
            }
            Bucket::Many(set) => {
                set.remove(row);
                set.is_empty()
            }
        }
    }

    /// A row of the bucket: all its rows share their key, so this one stands for it.
    fn first(&self) -> &Row {
        match self {
            Bucket::One(row) => row,
            Bucket::Few(rows) => &rows[0],
            Bucket::Many(set) => set.iter().next().expect("buckets are never empty"),
        }
    }

    pub fn try_for_each<E>(&self, mut f: impl FnMut(&Row) -> Result<(), E>) -> Result<(), E> {
        match self {
            Bucket::One(row) => f(row),
            Bucket::Few(rows) => rows.iter().try_for_each(f),
            Bucket::Many(set) => set.iter().try_for_each(f),
        }
    }

    pub fn rows(&self) -> Vec<Row> {
        match self {
            Bucket::One(row) => vec![row.clone()],
            Bucket::Few(rows) => rows.clone(),
            Bucket::Many(set) => set.iter().cloned().collect(),
        }
    }
}

/// The hash of an index key, the same whether its values come from a stored row or a lookup.
fn key_hash(values: impl Iterator<Item = Value>) -> u64 {
    let mut hasher = FxHasher::default();
    for value in values {
        value.hash(&mut hasher);
    }
    hasher.finish()
}

/// A hash index on some positions of a relation's rows, built the first time a plan looks it up
/// in a non-empty relation and maintained from then on: an index no evaluation reads (a plan that
/// only fires on a change that never comes, or one that only ever met the relation empty) costs
/// nothing when rows are added. A key is not stored apart from its rows: the table hashes a
/// bucket's key from the positions of one of its rows, so a key costs no allocation of its own.
pub struct Index {
    pub positions: Box<[usize]>,
    table: HashTable<Bucket>,
    pub built: bool,
}

impl Index {
    pub fn new(positions: Box<[usize]>) -> Self {
        Index { positions, table: HashTable::new(), built: false }
    }

    pub fn build<'r>(&mut self, rows: impl IntoIterator<Item = &'r Row>) {
        for row in rows {
            self.insert(row);
        }
        self.built = true;
    }

    fn row_hash(positions: &[usize], row: &Row) -> u64 {
        key_hash(positions.iter().map(|&p| row.get(p)))
    }

    fn same_key(positions: &[usize], a: &Row, b: &Row) -> bool {
        positions.iter().all(|&p| a.get(p) == b.get(p))
    }

    pub fn insert(&mut self, row: &Row) {
        let positions = &self.positions;
        let hash = Self::row_hash(positions, row);
        match self.table.entry(
            hash,
            |bucket| Self::same_key(positions, bucket.first(), row),
            |bucket| Self::row_hash(positions, bucket.first()),
        ) {
            Entry::Occupied(mut entry) => entry.get_mut().insert(row.clone()),
            Entry::Vacant(entry) => {
                entry.insert(Bucket::One(row.clone()));
            }
        }
    }

    pub fn remove(&mut self, row: &Row) {
        let positions = &self.positions;
        let hash = Self::row_hash(positions, row);
        if let Ok(mut entry) = self.table.find_entry(hash, |bucket| Self::same_key(positions, bucket.first(), row)) {
            if entry.get_mut().remove(row) {
                entry.remove();
            }
        }
    }

    /// The rows whose values at the index's positions are `key`.
    pub fn get(&self, key: &[Value]) -> Option<&Bucket> {
        let positions = &self.positions;
        self.table.find(key_hash(key.iter().copied()), |bucket| {
            let row = bucket.first();
            positions.iter().zip(key).all(|(&p, value)| row.get(p) == *value)
        })
    }

    pub fn clear(&mut self) {
        self.table.clear();
    }
}

/// Values on the stack: index keys (one to three values) and head rows (up to ten).
pub type Key = SmallVec<[Value; 10]>;

/// A set of rows that a relation and the change listing all of its rows can share: a relation
/// derived from empty in one stratum is handed to the strata above as its own rows, not a copy of
/// them (JOB 26a's search space: 4.9 MB of its growth). Changed in place while held once, copied
/// only when changed while shared.
pub type SharedRows = Arc<RowSet>;

/// The visible rows of one relation.
pub struct Relation {
    pub arity: usize,
    pub rows: SharedRows,
    pub indexes: Vec<Index>,
}

impl Relation {
    pub fn new(arity: usize, patterns: &[Vec<usize>]) -> Self {
        let indexes = patterns.iter().map(|p| Index::new(p.clone().into_boxed_slice())).collect();
        Relation { arity, rows: SharedRows::default(), indexes }
    }

    pub fn index_id(&self, positions: &[usize]) -> Option<usize> {
        self.indexes.iter().position(|i| &*i.positions == positions)
    }

    /// The index on `positions`, built from the current rows if it is not yet.
    pub fn ensure_index(&mut self, positions: &[usize]) -> usize {
        let id = match self.index_id(positions) {
            Some(id) => id,
            None => {
                self.indexes.push(Index::new(positions.to_vec().into_boxed_slice()));
                self.indexes.len() - 1
            }
        };
        if !self.indexes[id].built {
            self.indexes[id].build(self.rows.iter());
        }
        id
    }

    /// Make `index` ready for lookups: built, unless the relation is empty (then lookups find nothing
    /// without it, and rows added later do not pay for it until a lookup needs it).
    pub fn prepare(&mut self, index: usize) {
        if !self.indexes[index].built && !self.rows.is_empty() {
            self.indexes[index].build(self.rows.iter());
        }
    }

    /// Rows under `key`; `index` must have been prepared since the relation last changed.
    pub fn get(&self, index: usize, key: &[Value]) -> Option<&Bucket> {
        let index = &self.indexes[index];
        debug_assert!(index.built || self.rows.is_empty(), "lookup on an index that was not prepared");
        index.get(key)
    }

    pub fn add(&mut self, row: Row) {
        if self.rows.contains(&row) {
            return;
        }
        for index in self.indexes.iter_mut().filter(|i| i.built) {
            index.insert(&row);
        }
        Arc::make_mut(&mut self.rows).insert(row);
    }

    pub fn remove(&mut self, row: &Row) {
        if !self.rows.contains(row) {
            return;
        }
        Arc::make_mut(&mut self.rows).remove(row);
        for index in self.indexes.iter_mut().filter(|i| i.built) {
            index.remove(row);
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
    Ordered(OrderedCounts),
    Counted(FxHashMap<Value, i64>),
}

/// Min/max candidates with their derivation counts, in order: a sorted vector while the group is
/// small, as most are (an optimizer's plan-table entry has tens of alternatives), a B-tree beyond,
/// where inserting into a vector would move too much. A B-tree's half-full nodes took 89 bytes a
/// candidate on JOB 26a, a tenth of its growth.
pub enum OrderedCounts {
    Few(Vec<(Ordered, i64)>),
    Many(BTreeMap<Ordered, i64>),
}

/// The most candidates kept in a sorted vector.
const FEW_CANDIDATES: usize = 64;

impl Default for OrderedCounts {
    fn default() -> Self {
        OrderedCounts::Few(Vec::new())
    }
}

impl OrderedCounts {
    pub fn len(&self) -> usize {
        match self {
            OrderedCounts::Few(v) => v.len(),
            OrderedCounts::Many(m) => m.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, key: &Ordered) -> Option<i64> {
        match self {
            OrderedCounts::Few(v) => v.binary_search_by(|(k, _)| k.cmp(key)).ok().map(|i| v[i].1),
            OrderedCounts::Many(m) => m.get(key).copied(),
        }
    }

    pub fn first(&self) -> Option<&Ordered> {
        match self {
            OrderedCounts::Few(v) => v.first().map(|(k, _)| k),
            OrderedCounts::Many(m) => m.keys().next(),
        }
    }

    pub fn last(&self) -> Option<&Ordered> {
        match self {
            OrderedCounts::Few(v) => v.last().map(|(k, _)| k),
            OrderedCounts::Many(m) => m.keys().next_back(),
        }
    }

    /// The candidates in order, with their counts.
    pub fn iter(&self) -> Box<dyn Iterator<Item = (&Ordered, i64)> + '_> {
        match self {
            OrderedCounts::Few(v) => Box::new(v.iter().map(|(k, c)| (k, *c))),
            OrderedCounts::Many(m) => Box::new(m.iter().map(|(k, c)| (k, *c))),
        }
    }

    /// Add `delta` to a candidate's count, dropping it at zero; the count before.
    pub fn add(&mut self, key: Ordered, delta: i64) -> i64 {
        let old = self.get(&key).unwrap_or(0);
        self.set_count(key, old + delta);
        old
    }
}

impl CountMap<Ordered> for OrderedCounts {
    fn set_count(&mut self, key: Ordered, count: i64) {
        match self {
            OrderedCounts::Few(v) => match (v.binary_search_by(|(k, _)| k.cmp(&key)), count) {
                (Ok(i), 0) => {
                    v.remove(i);
                }
                (Ok(i), count) => v[i].1 = count,
                (Err(_), 0) => {}
                (Err(i), count) => {
                    if v.len() < FEW_CANDIDATES {
                        if v.len() == v.capacity() {
                            v.reserve_exact(4); // not doubled: most groups stop growing early
                        }
                        v.insert(i, (key, count));
                    } else {
                        let mut many: BTreeMap<Ordered, i64> = v.drain(..).collect();
                        many.insert(key, count);
                        *self = OrderedCounts::Many(many);
                    }
                }
            },
            OrderedCounts::Many(m) => m.set_count(key, count),
        }
    }
}

impl Candidates {
    pub fn len(&self) -> usize {
        match self {
            Candidates::Ordered(m) => m.len(),
            Candidates::Counted(m) => m.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        match self {
            Candidates::Ordered(m) => m.is_empty(),
            Candidates::Counted(m) => m.is_empty(),
        }
    }
}

pub struct Group {
    pub candidates: Candidates,
    pub current: Option<Value>,
}

pub struct Aggregate {
    pub func: AggFunc,
    pub position: usize,
    pub groups: RowMap<Group>,
}

impl Aggregate {
    pub fn row(&self, group: &Row, value: Value) -> Row {
        let mut values = group.values();
        values.insert(self.position, value);
        Row::new(&values)
    }

    pub fn split(&self, row: &Row) -> (Row, Value) {
        let mut group = row.values();
        let value = group.remove(self.position);
        (Row::new(&group), value)
    }

    pub fn empty_candidates(&self) -> Candidates {
        match self.func {
            AggFunc::Min | AggFunc::Max => Candidates::Ordered(OrderedCounts::default()),
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
const CHUNK: usize = 2048;

/// The undo steps of one run. A run that starts from an empty state keeps none: undoing it is
/// clearing everything, and an initial load journals as many steps as it derives rows.
///
/// `fail_after` injects a failure for tests: the journal panics once that many state changes have
/// been made, as a bug in the core would, so that rollback is tested at every step of a run.
pub struct Journal {
    chunks: Vec<Vec<Undo>>,
    enabled: bool,
    fail_after: Option<u64>,
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
    fn a_row_is_found_by_its_values_and_by_values_python_deems_equal() {
        let mut set = RowSet::default();
        set.insert(Row::new(&[Value::Int(1), Value::Str(0)]));
        assert!(set.contains(&RowOf::new(&[Value::Int(1), Value::Str(0)])));
        assert!(set.contains(&RowOf::new(&[Value::Float(1.0), Value::Str(0)])));
        assert!(!set.contains(&RowOf::new(&[Value::Int(1), Value::Str(1)])));
        assert!(!set.contains(&RowOf::new(&[Value::Int(1)])));
        let found = RowOf::new(&[Value::Bool(true), Value::Str(0)]).to_row();
        assert!(set.contains(&found));
    }

    #[test]
    fn rows_with_different_values_differ() {
        let a = Row::new(&[Value::Int(1), Value::Int(2)]);
        let b = Row::new(&[Value::Int(2), Value::Int(1)]);
        assert!(a != b);
        assert_eq!(&a.values()[..], &[Value::Int(1), Value::Int(2)][..]);
    }

    #[test]
    fn a_packed_row_gives_back_every_value_with_its_kind() {
        let values = [Value::Int(-7), Value::Float(-0.5), Value::Bool(true), Value::Str(3), Value::Int(i64::MIN)];
        let row = Row::new(&values);
        assert_eq!(row.arity(), values.len());
        for (i, value) in values.iter().enumerate() {
            let back = row.get(i);
            assert_eq!(back.type_name(), value.type_name());
            assert_eq!(back.parts(), value.parts());
        }
    }

    #[test]
    fn rows_wider_than_one_word_of_kinds_keep_their_kinds() {
        for n in [0, 1, 31, 32, 33, 64, 65, 100] {
            let values: Vec<Value> =
                (0..n).map(|i| if i % 3 == 0 { Value::Float(i as f64 + 0.5) } else { Value::Str(i as u32) }).collect();
            let row = Row::new(&values);
            assert_eq!(row.arity(), n);
            assert!((0..n).all(|i| row.get(i).type_name() == values[i].type_name() && row.get(i) == values[i]));
        }
    }

    #[test]
    fn ordered_counts_stay_in_order_as_they_grow_from_a_vector_to_a_tree() {
        let mut counts = OrderedCounts::default();
        let n = 3 * FEW_CANDIDATES as i64;
        for i in (0..n).rev() {
            assert_eq!(counts.add(Ordered::Num(Value::Int(i)), 2), 0);
        }
        assert!(matches!(counts, OrderedCounts::Many(_)));
        assert_eq!(counts.len(), n as usize);
        assert_eq!(counts.add(Ordered::Num(Value::Int(0)), -2), 2);
        assert_eq!(counts.first().map(Ordered::value), Some(Value::Int(1)));
        assert_eq!(counts.last().map(Ordered::value), Some(Value::Int(n - 1)));
        let values: Vec<Value> = counts.iter().map(|(k, _)| k.value()).collect();
        assert_eq!(values, (1..n).map(Value::Int).collect::<Vec<_>>());
    }

    #[test]
    fn a_candidate_counted_to_zero_is_gone() {
        let mut counts = OrderedCounts::default();
        counts.add(Ordered::Num(Value::Float(2.5)), 1);
        counts.add(Ordered::Num(Value::Float(1.5)), 1);
        counts.set_count(Ordered::Num(Value::Float(1.5)), 0);
        assert_eq!(counts.get(&Ordered::Num(Value::Float(1.5))), None);
        assert_eq!(counts.first().map(Ordered::value), Some(Value::Float(2.5)));
        assert_eq!(counts.len(), 1);
    }

    #[test]
    fn zero_and_negative_zero_are_one_row() {
        let set: FxHashSet<Row> =
            [Row::new(&[Value::Float(0.0)]), Row::new(&[Value::Float(-0.0)]), Row::new(&[Value::Int(0)])]
                .into_iter()
                .collect();
        assert_eq!(set.len(), 1);
    }
}
