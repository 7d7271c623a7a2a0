//! Hash indexes on the bound positions plans look up, with their buckets of rows.

use std::hash::{Hash, Hasher};

use hashbrown::hash_table::{Entry, HashTable};
use rustc_hash::FxHasher;

use crate::row::{Row, RowSet};
use crate::value::Value;

/// Rows under one index key: one row (a key of a unique index), a short vector (most keys), a set
/// once it grows, so removal stays constant time for the keys that hold thousands of rows. Never
/// empty: the index drops a key with its last row.
pub enum Bucket {
    One(Row),
    Few(Vec<Row>),
    Many(Box<RowSet>),
}

pub(crate) const FEW: usize = 16;

impl Bucket {
    pub(crate) fn insert(&mut self, row: Row) {
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
    pub(crate) fn remove(&mut self, row: &Row) -> bool {
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
    pub(crate) fn first(&self) -> &Row {
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
pub(crate) fn key_hash(values: impl Iterator<Item = Value>) -> u64 {
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
    pub(crate) table: HashTable<Bucket>,
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

    pub(crate) fn row_hash(positions: &[usize], row: &Row) -> u64 {
        key_hash(positions.iter().map(|&p| row.get(p)))
    }

    pub(crate) fn same_key(positions: &[usize], a: &Row, b: &Row) -> bool {
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
