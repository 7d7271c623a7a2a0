//! The call memo: recent results of the program's functions, by function and exact arguments.

use std::hash::BuildHasher;
use std::sync::Arc;

use smallvec::SmallVec;

use crate::value::Value;

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
pub(crate) struct CallMemo {
    pub(crate) slots: Vec<Option<MemoEntry>>, // allocated at the first insertion
    pub(crate) run: u64,                      // the current run: results of earlier runs serve retractions only
}

/// A call's key (its function and arguments), its result, and the run that asked for it.
pub(crate) struct MemoEntry {
    pub(crate) key: Box<[u64]>,
    pub(crate) rows: Arc<CallRows>,
    pub(crate) run: u64,
}

pub(crate) const CALL_MEMO_SLOTS: usize = 4096;

impl CallMemo {
    pub(crate) fn new() -> CallMemo {
        CallMemo { slots: Vec::new(), run: 0 }
    }

    pub(crate) fn slot(key: &[u64]) -> usize {
        (rustc_hash::FxBuildHasher.hash_one(key) as usize) % CALL_MEMO_SLOTS
    }

    /// The remembered result of the call `key`, if it was made in this run, or in any earlier run
    /// when `retracting`.
    pub(crate) fn get(&self, key: &[u64], retracting: bool) -> Option<Arc<CallRows>> {
        match self.slots.get(Self::slot(key)) {
            Some(Some(entry)) if &entry.key[..] == key && (retracting || entry.run == self.run) => {
                Some(entry.rows.clone())
            }
            _ => None,
        }
    }

    pub(crate) fn insert(&mut self, key: &[u64], rows: Arc<CallRows>) {
        if self.slots.is_empty() {
            self.slots.resize_with(CALL_MEMO_SLOTS, || None);
        }
        self.slots[Self::slot(key)] = Some(MemoEntry { key: key.into(), rows, run: self.run });
    }

    pub(crate) fn next_run(&mut self) {
        self.run += 1;
    }
}

/// A function call's result rows, their values laid end to end (one allocation per call, not per
/// row: the optimizer's split returns tens of rows per call).
pub(crate) struct CallRows {
    pub(crate) rows: usize,
    pub(crate) width: usize,
    pub(crate) values: Box<[Value]>,
}

impl CallRows {
    pub(crate) fn row(&self, i: usize) -> &[Value] {
        &self.values[i * self.width..(i + 1) * self.width]
    }
}

/// A call's memo key, built on the stack: a hit (most calls) allocates nothing.
pub(crate) type CallKey = SmallVec<[u64; 24]>;

pub(crate) fn call_key(function: usize, args: &[Value]) -> CallKey {
    let mut key = CallKey::new();
    key.push(function as u64);
    for value in args {
        let (kind, bits) = value.parts();
        key.push(kind as u64);
        key.push(bits);
    }
    key
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
