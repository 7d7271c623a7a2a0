//! Aggregates: each group's candidates with their derivation counts, the value a group shows, and
//! the engine's operations on them.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use crate::engine::{Engine, Failure};
use crate::journal::{Journal, Undo};
use crate::row::{Row, RowMap};
use crate::value::{fsum, Interner, Ordered, Value, ValueError};

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
pub(crate) const FEW_CANDIDATES: usize = 64;

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

impl Engine {
    pub fn candidate_count(agg: &Aggregate, group: &Row, value: Value, strings: &Interner) -> i64 {
        match agg.groups.get(group).map(|g| &g.candidates) {
            Some(Candidates::Ordered(m)) => m.get(&Ordered::new(value, strings)).unwrap_or(0),
            Some(Candidates::Counted(m)) => m.get(&value).copied().unwrap_or(0),
            None => 0,
        }
    }

    pub(crate) fn add_candidate(
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
    pub(crate) fn best(&self, rel: usize, group: &Row) -> Result<Option<Value>, Failure> {
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

    pub(crate) fn show_value(&mut self, rel: usize, group: &Row, value: Value, journal: &mut Journal) {
        let agg = self.aggregates[rel].as_mut().expect("aggregate");
        let row = agg.row(group, value);
        let old = agg.group_mut(group).current.replace(value);
        journal.record(|| Undo::Current(rel as u32, group.clone(), old));
        self.relations[rel].add(row.clone());
        journal.record(|| Undo::Shown(rel as u32, row));
    }

    pub(crate) fn hide_value(&mut self, rel: usize, group: &Row, journal: &mut Journal) {
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

    pub(crate) fn current(&self, rel: usize, group: &Row) -> Option<Value> {
        self.aggregates[rel].as_ref().and_then(|a| a.groups.get(group)).and_then(|g| g.current)
    }
}

pub(crate) fn sum_of(m: &FxHashMap<Value, i64>) -> Result<Value, ValueError> {
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

pub(crate) fn type_error_sum(v: Value) -> ValueError {
    ValueError::new("TypeError", format!("unsupported operand type(s) for +: 'int' and '{}'", v.type_name()))
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
