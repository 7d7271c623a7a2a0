//! Indexes on the bound positions plans look up: open-addressed tables from a key to the ids of
//! the stored rows that hold it.

use std::hash::{Hash, Hasher};

use hashbrown::hash_table::{Entry, HashTable};
use rustc_hash::{FxHashSet, FxHasher};
use smallvec::SmallVec;

use crate::row::RowRef;
use crate::value::Value;

/// The ids of the rows under one key: inline while few (most keys hold one to four rows), a set
/// once it grows, so that removal stays constant time for the keys that hold thousands of rows.
/// Never empty: the index drops a key with its last row.
pub enum Ids {
    Few(SmallVec<[u32; 4]>),
    Many(Box<FxHashSet<u32>>),
}

/// The most ids kept in a vector before the bucket becomes a set.
const FEW: usize = 16;

impl Ids {
    fn insert(&mut self, id: u32) {
        match self {
            Ids::Few(ids) if ids.len() < FEW => ids.push(id),
            Ids::Few(ids) => {
                let mut set: FxHashSet<u32> = ids.drain(..).collect();
                set.insert(id);
                *self = Ids::Many(Box::new(set));
            }
            Ids::Many(set) => {
                set.insert(id);
            }
        }
    }

    /// Remove `id`; whether the bucket is now empty.
    fn remove(&mut self, id: u32) -> bool {
        match self {
            Ids::Few(ids) => {
                if let Some(i) = ids.iter().position(|&x| x == id) {
                    ids.swap_remove(i);
                }
                ids.is_empty()
            }
            Ids::Many(set) => {
                set.remove(&id);
                set.is_empty()
            }
        }
    }

    /// An id of the bucket: all its rows share their key, so this one stands for it.
    fn first(&self) -> u32 {
        match self {
            Ids::Few(ids) => ids[0],
            Ids::Many(set) => *set.iter().next().expect("buckets are never empty"),
        }
    }

    pub fn try_for_each<E>(&self, mut f: impl FnMut(u32) -> Result<(), E>) -> Result<(), E> {
        match self {
            Ids::Few(ids) => ids.iter().try_for_each(|&id| f(id)),
            Ids::Many(set) => set.iter().try_for_each(|&id| f(id)),
        }
    }
}

/// One key of an index: its hash, kept so that probing and growing the table never read a row,
/// and the ids under it.
struct Bucket {
    hash: u64,
    ids: Ids,
}

/// The hash of an index key, the same whether its values come from a stored row or a lookup.
fn key_hash(values: impl Iterator<Item = Value>) -> u64 {
    let mut hasher = FxHasher::default();
    for value in values {
        value.hash(&mut hasher);
    }
    hasher.finish()
}

/// An index on some positions of a relation's rows, built the first time a plan looks it up in a
/// non-empty relation and maintained from then on: an index no evaluation reads (a plan that only
/// fires on a change that never comes, or one that only ever met the relation empty) costs nothing
/// when rows are added. A key is not stored apart from its rows: a bucket's key is read from its
/// first row when a probe meets a bucket with the same hash.
pub struct Index {
    pub positions: Box<[usize]>,
    table: HashTable<Bucket>,
    pub built: bool,
}

impl Index {
    pub fn new(positions: Box<[usize]>) -> Self {
        Index { positions, table: HashTable::new(), built: false }
    }

    fn row_hash(&self, row: &RowRef) -> u64 {
        key_hash(self.positions.iter().map(|&p| row.get(p)))
    }

    /// Add the stored row `id`; `row(id)` reads any stored row.
    pub fn insert<'r>(&mut self, id: u32, row: impl Fn(u32) -> RowRef<'r>) {
        let stored = row(id);
        let hash = self.row_hash(&stored);
        let positions = &self.positions;
        let same_key = |bucket: &Bucket| {
            bucket.hash == hash && {
                let first = row(bucket.ids.first());
                positions.iter().all(|&p| first.get(p) == stored.get(p))
            }
        };
        match self.table.entry(hash, same_key, |bucket| bucket.hash) {
            Entry::Occupied(mut entry) => entry.get_mut().ids.insert(id),
            Entry::Vacant(entry) => {
                entry.insert(Bucket { hash, ids: Ids::Few(SmallVec::from_slice(&[id])) });
            }
        }
    }

    /// Remove the stored row `id`, which the index holds.
    pub fn remove<'r>(&mut self, id: u32, row: impl Fn(u32) -> RowRef<'r>) {
        let stored = row(id);
        let hash = self.row_hash(&stored);
        let positions = &self.positions;
        let same_key = |bucket: &Bucket| {
            bucket.hash == hash && {
                let first = row(bucket.ids.first());
                positions.iter().all(|&p| first.get(p) == stored.get(p))
            }
        };
        if let Ok(mut entry) = self.table.find_entry(hash, same_key) {
            if entry.get_mut().ids.remove(id) {
                entry.remove();
            }
        }
    }

    /// The ids of the rows whose values at the index's positions are `key`.
    pub fn get<'r>(&self, key: &[Value], row: impl Fn(u32) -> RowRef<'r>) -> Option<&Ids> {
        let hash = key_hash(key.iter().copied());
        let positions = &self.positions;
        self.table
            .find(hash, |bucket| {
                bucket.hash == hash && {
                    let first = row(bucket.ids.first());
                    positions.iter().zip(key).all(|(&p, value)| first.get(p) == *value)
                }
            })
            .map(|bucket| &bucket.ids)
    }

    pub fn clear(&mut self) {
        self.table.clear();
        self.built = false;
    }
}
