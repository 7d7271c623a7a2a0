//! Derivation counts: how many derivations each row has, kept only where the count is not one for
//! relations derived by counting.

use std::collections::hash_map::Entry as HashEntry;

use crate::engine::Engine;
use crate::journal::{Journal, Undo};
use crate::row::Row;

impl Engine {
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

    /// Add `delta` (non-zero) to a row's derivation count; the count before, or `None`, with nothing
    /// changed, if the count would go negative. Called before the round's visibility changes are
    /// shown, so a row counted once is still visible exactly while its count is positive.
    pub(crate) fn add_count(&mut self, rel: usize, row: &Row, delta: i64, journal: &mut Journal) -> Option<i64> {
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

    pub(crate) fn set_count(&mut self, rel: usize, row: Row, value: i64, journal: &mut Journal) {
        let old = if value != 0 { self.counts[rel].insert(row.clone(), value) } else { self.counts[rel].remove(&row) };
        journal.record(|| Undo::Count(rel as u32, row, old.unwrap_or(0)));
    }
}
