//! Relation storage: the visible rows of one relation with the indexes built on them.

use std::sync::Arc;

use crate::index::{Bucket, Index};
use crate::row::{Row, RowSet};
use crate::value::Value;

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
