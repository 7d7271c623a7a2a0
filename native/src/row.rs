//! Rows: values packed into one shared allocation with their hash, the sets and maps keyed by
//! them, and lookups by values not yet packed.

use std::hash::{BuildHasher, Hash, Hasher};

use hashbrown::Equivalent;
use rustc_hash::FxBuildHasher;
use smallvec::SmallVec;

use crate::value::Value;
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

pub(crate) const KINDS_PER_WORD: usize = 32;

/// How many of a packed row's words are values: `words` is n values plus ceil(n / 32) kind words.
pub(crate) fn arity_of(words: usize) -> usize {
    words - words.div_ceil(KINDS_PER_WORD + 1)
}

impl Row {
    #[inline]
    pub fn new(values: &[Value]) -> Row {
        Row::with_hash(values, hash_values(values))
    }

    /// A row of `values`, whose hash (`hash_values`) the caller computed.
    #[inline]
    pub(crate) fn with_hash(values: &[Value], hash: u64) -> Row {
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
pub(crate) fn hash_values(values: &[Value]) -> u64 {
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
    pub(crate) values: &'a [Value],
    pub(crate) hash: u64,
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
    pub(crate) words: &'a [u64],
    pub(crate) arity: usize,
}

impl Values for Packed<'_> {
    #[inline]
    fn at(&self, i: usize) -> Value {
        unpack(self.words, self.words[self.arity + i / KINDS_PER_WORD], i)
    }
}

/// Value `i` of a packed row, whose kind is in `kinds` (the row's kinds word that holds it).
#[inline]
pub(crate) fn unpack(words: &[u64], kinds: u64, i: usize) -> Value {
    Value::from_parts(((kinds >> (2 * (i % KINDS_PER_WORD))) & 3) as u8, words[i])
}

impl Values for [Value] {
    #[inline]
    fn at(&self, i: usize) -> Value {
        self[i]
    }
}

/// Values on the stack: index keys (one to three values) and head rows (up to ten).
pub type Key = SmallVec<[Value; 10]>;

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
    fn zero_and_negative_zero_are_one_row() {
        let set: FxHashSet<Row> =
            [Row::new(&[Value::Float(0.0)]), Row::new(&[Value::Float(-0.0)]), Row::new(&[Value::Int(0)])]
                .into_iter()
                .collect();
        assert_eq!(set.len(), 1);
    }
}
