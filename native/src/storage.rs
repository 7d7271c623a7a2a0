//! Relation storage: a relation's rows end to end in one buffer, addressed by dense ids, with the
//! indexes built on them.
//!
//! A row is stored once, as its packed words (`row::Row`) at `id * stride` and its hash at `id`,
//! so an index holds 4-byte ids, a lookup reads rows that lie next to each other, and a stored row
//! costs no allocation of its own. Rows made invisible during a run stay stored (`Leaving`) until
//! the run ends: a round's old view reads the rows that left it from the relation's own indexes,
//! so no side index of them is built, and a row shown again keeps its id.

use std::sync::Arc;

use hashbrown::HashTable;

use crate::index::{Ids, Index};
use crate::row::{Probe, Row, RowRef, RowSet};
use crate::value::Value;

/// A set of shared rows that a run's change may hand to several strata without copying it.
pub type SharedRows = Arc<RowSet>;

/// A stored row's state, kept in the word after its hash.
#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Free = 0,
    Visible = 1,
    /// Made invisible in this run; kept until `purge`, for the old views that still read it.
    Leaving = 2,
}

/// The stored rows of one relation, each in a slot of `2 + stride` words: its hash, its state, then
/// its packed words. A slot is read whole when a lookup visits the row, so its parts lie together.
struct Rows {
    stride: usize,
    data: Vec<u64>,
    free: Vec<u32>,
    /// Every stored row's id, found by its hash.
    ids: HashTable<u32>,
    visible: usize,
    leaving: Vec<u32>,
}

impl Rows {
    fn new(arity: usize) -> Self {
        Rows {
            stride: arity + arity.div_ceil(crate::row::KINDS_PER_WORD),
            data: Vec::new(),
            free: Vec::new(),
            ids: HashTable::new(),
            visible: 0,
            leaving: Vec::new(),
        }
    }

    #[inline]
    fn base(&self, id: u32) -> usize {
        id as usize * (self.stride + 2)
    }

    /// How many slots there are, free or not.
    fn slots(&self) -> u32 {
        (self.data.len() / (self.stride + 2)) as u32
    }

    #[inline]
    fn hash(&self, id: u32) -> u64 {
        self.data[self.base(id)]
    }

    #[inline]
    fn state(&self, id: u32) -> State {
        match self.data[self.base(id) + 1] {
            0 => State::Free,
            1 => State::Visible,
            _ => State::Leaving,
        }
    }

    fn set_state(&mut self, id: u32, state: State) {
        let at = self.base(id) + 1;
        self.data[at] = state as u64;
    }

    #[inline]
    fn row(&self, id: u32) -> RowRef<'_> {
        let base = self.base(id);
        RowRef::new(self.data[base], &self.data[base + 2..base + 2 + self.stride])
    }

    fn find<P: Probe + ?Sized>(&self, probe: &P) -> Option<u32> {
        let hash = probe.probe_hash();
        self.ids.find(hash, |&id| self.hash(id) == hash && probe.matches_stored(&self.row(id))).copied()
    }

    /// Store `row` under a new id, in the state `Free` until the caller sets it.
    fn store(&mut self, row: &Row) -> u32 {
        let words = row.words();
        debug_assert_eq!(words.len(), self.stride, "a row of the relation's arity");
        let id = match self.free.pop() {
            Some(id) => {
                let base = self.base(id);
                self.data[base] = row.hash_code();
                self.data[base + 2..base + 2 + self.stride].copy_from_slice(words);
                id
            }
            None => {
                let id = self.slots();
                assert!(id < u32::MAX, "a relation holds fewer than 2^32 rows");
                self.data.extend_from_slice(&[row.hash_code(), State::Free as u64]);
                self.data.extend_from_slice(words);
                id
            }
        };
        let Rows { ids, data, stride, .. } = self;
        let slot = *stride + 2;
        ids.insert_unique(row.hash_code(), id, |&other| data[other as usize * slot]);
        id
    }

    /// Forget the stored row `id`, whose slot a later row may take.
    fn release(&mut self, id: u32) {
        let hash = self.hash(id);
        if let Ok(entry) = self.ids.find_entry(hash, |&other| other == id) {
            entry.remove();
        }
        self.set_state(id, State::Free);
        self.free.push(id);
    }
}

/// One relation: its stored rows and the indexes on them.
pub struct Relation {
    pub arity: usize,
    rows: Rows,
    pub indexes: Vec<Index>,
}

impl Relation {
    pub fn new(arity: usize, patterns: &[Vec<usize>]) -> Self {
        let indexes = patterns.iter().map(|p| Index::new(p.clone().into_boxed_slice())).collect();
        Relation { arity, rows: Rows::new(arity), indexes }
    }

    /// The number of visible rows.
    pub fn len(&self) -> usize {
        self.rows.visible
    }

    pub fn is_empty(&self) -> bool {
        self.rows.visible == 0
    }

    /// Whether `row` (a row, or values standing for one) is visible.
    pub fn contains<P: Probe + ?Sized>(&self, row: &P) -> bool {
        self.rows.find(row).is_some_and(|id| self.rows.state(id) == State::Visible)
    }

    /// The stored row `id`, and whether it is visible (if not, it left during this run).
    #[inline]
    pub fn stored(&self, id: u32) -> (RowRef<'_>, bool) {
        (self.rows.row(id), self.rows.state(id) == State::Visible)
    }

    /// The visible rows.
    pub fn iter(&self) -> impl Iterator<Item = RowRef<'_>> + '_ {
        self.stored_rows().filter(|(_, visible)| *visible).map(|(row, _)| row)
    }

    /// Every stored row, with whether it is visible.
    pub fn stored_rows(&self) -> impl Iterator<Item = (RowRef<'_>, bool)> + '_ {
        let rows = &self.rows;
        (0..rows.slots()).filter(|&id| rows.state(id) != State::Free).map(|id| self.stored(id))
    }

    /// The visible rows as shared rows.
    pub fn to_rows(&self) -> Vec<Row> {
        self.iter().map(|row| row.to_row()).collect()
    }

    pub fn index_id(&self, positions: &[usize]) -> Option<usize> {
        self.indexes.iter().position(|i| &*i.positions == positions)
    }

    /// The index on `positions`, built from the stored rows if it is not yet.
    pub fn ensure_index(&mut self, positions: &[usize]) -> usize {
        let id = match self.index_id(positions) {
            Some(id) => id,
            None => {
                self.indexes.push(Index::new(positions.to_vec().into_boxed_slice()));
                self.indexes.len() - 1
            }
        };
        self.build(id);
        id
    }

    /// Make `index` ready for lookups: built, unless nothing is stored (then lookups find nothing
    /// without it, and rows added later do not pay for it until a lookup needs it).
    pub fn prepare(&mut self, index: usize) {
        if !self.rows.ids.is_empty() {
            self.build(index);
        }
    }

    fn build(&mut self, index: usize) {
        if self.indexes[index].built {
            return;
        }
        let rows = &self.rows;
        let target = &mut self.indexes[index];
        for id in 0..rows.slots() {
            if rows.state(id) != State::Free {
                target.insert(id, |id| rows.row(id));
            }
        }
        target.built = true;
    }

    /// The ids of the stored rows under `key`, visible or not; `index` must have been prepared
    /// since the relation last changed.
    pub fn bucket(&self, index: usize, key: &[Value]) -> Option<&Ids> {
        let target = &self.indexes[index];
        debug_assert!(target.built || self.rows.ids.is_empty(), "lookup on an index that was not prepared");
        target.get(key, |id| self.rows.row(id))
    }

    /// The visible rows under `key` in `index`, which must have been prepared.
    pub fn visible_under(&self, index: usize, key: &[Value]) -> Vec<RowRef<'_>> {
        let mut found = Vec::new();
        if let Some(ids) = self.bucket(index, key) {
            ids.try_for_each(|id| {
                if let (row, true) = self.stored(id) {
                    found.push(row);
                }
                Ok::<(), ()>(())
            })
            .ok();
        }
        found
    }

    /// The visible rows under `key` in the index on `positions` (built if need be).
    pub fn lookup(&mut self, positions: &[usize], key: &[Value]) -> Vec<Row> {
        let index = self.ensure_index(positions);
        self.visible_under(index, key).into_iter().map(RowRef::to_row).collect()
    }

    pub fn add(&mut self, row: &Row) {
        let id = match self.rows.find(row) {
            Some(id) if self.rows.state(id) == State::Visible => return,
            Some(id) => id,
            None => {
                let id = self.rows.store(row);
                let rows = &self.rows;
                for index in self.indexes.iter_mut().filter(|i| i.built) {
                    index.insert(id, |id| rows.row(id));
                }
                id
            }
        };
        self.rows.set_state(id, State::Visible);
        self.rows.visible += 1;
    }

    pub fn remove<P: Probe + ?Sized>(&mut self, row: &P) {
        let Some(id) = self.rows.find(row) else {
            return;
        };
        if self.rows.state(id) != State::Visible {
            return;
        }
        self.rows.set_state(id, State::Leaving);
        self.rows.visible -= 1;
        self.rows.leaving.push(id);
    }

    /// Forget the rows that left during the run and were not shown again.
    pub fn purge(&mut self) {
        for id in std::mem::take(&mut self.rows.leaving) {
            if self.rows.state(id) != State::Leaving {
                continue;
            }
            let rows = &self.rows;
            for index in self.indexes.iter_mut().filter(|i| i.built) {
                index.remove(id, |id| rows.row(id));
            }
            self.rows.release(id);
        }
    }

    pub fn clear(&mut self) {
        self.rows = Rows::new(self.arity);
        for index in &mut self.indexes {
            index.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row::RowOf;

    fn row(values: &[i64]) -> Row {
        Row::new(&values.iter().map(|&v| Value::Int(v)).collect::<Vec<_>>())
    }

    fn keyed(relation: &mut Relation, key: i64) -> Vec<Vec<Value>> {
        let mut rows: Vec<Vec<Value>> =
            relation.lookup(&[0], &[Value::Int(key)]).iter().map(|r| r.values().to_vec()).collect();
        rows.sort_by_key(|r| format!("{r:?}"));
        rows
    }

    #[test]
    fn a_row_added_twice_is_stored_once() {
        let mut relation = Relation::new(2, &[]);
        relation.add(&row(&[1, 2]));
        relation.add(&row(&[1, 2]));
        assert_eq!(relation.len(), 1);
        assert!(relation.contains(&row(&[1, 2])));
        assert!(relation.contains(&RowOf::new(&[Value::Float(1.0), Value::Int(2)])));
    }

    #[test]
    fn a_removed_row_stays_readable_until_the_purge() {
        let mut relation = Relation::new(2, &[vec![0]]);
        relation.add(&row(&[1, 2]));
        relation.add(&row(&[1, 3]));
        relation.prepare(0);
        relation.remove(&row(&[1, 2]));
        assert!(!relation.contains(&row(&[1, 2])));
        assert_eq!(relation.len(), 1);
        let bucket = relation.bucket(0, &[Value::Int(1)]).expect("key 1");
        let mut seen = Vec::new();
        bucket
            .try_for_each(|id| {
                seen.push(relation.stored(id));
                Ok::<(), ()>(())
            })
            .unwrap();
        assert_eq!(seen.len(), 2);
        assert_eq!(seen.iter().filter(|(_, visible)| *visible).count(), 1);
        relation.purge();
        assert_eq!(keyed(&mut relation, 1), vec![vec![Value::Int(1), Value::Int(3)]]);
    }

    #[test]
    fn a_row_shown_again_before_the_purge_keeps_its_id_and_stays() {
        let mut relation = Relation::new(2, &[vec![0]]);
        relation.add(&row(&[1, 2]));
        relation.prepare(0);
        relation.remove(&row(&[1, 2]));
        relation.add(&row(&[1, 2]));
        relation.purge();
        assert!(relation.contains(&row(&[1, 2])));
        assert_eq!(keyed(&mut relation, 1).len(), 1);
    }

    #[test]
    fn freed_slots_are_reused_and_indexes_follow() {
        let mut relation = Relation::new(2, &[vec![0]]);
        for i in 0..100 {
            relation.add(&row(&[i % 7, i]));
        }
        relation.prepare(0);
        for i in (0..100).step_by(2) {
            relation.remove(&row(&[i % 7, i]));
        }
        relation.purge();
        for i in 100..150 {
            relation.add(&row(&[i % 7, i]));
        }
        assert_eq!(relation.len(), 100);
        assert_eq!(relation.rows.slots(), 100, "every freed slot was taken again");
        let expected = (0..150).filter(|i| (*i >= 100 || i % 2 == 1) && i % 7 == 3).count();
        assert_eq!(keyed(&mut relation, 3).len(), expected);
    }

    #[test]
    fn an_index_built_late_holds_the_rows_that_are_leaving() {
        let mut relation = Relation::new(1, &[]);
        relation.add(&row(&[5]));
        relation.remove(&row(&[5]));
        let index = relation.ensure_index(&[0]);
        assert!(relation.bucket(index, &[Value::Int(5)]).is_some());
        relation.purge();
        assert!(relation.bucket(index, &[Value::Int(5)]).is_none());
    }
}
