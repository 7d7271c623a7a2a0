//! The ordered release: group changes of `.ordered` aggregates held back and let go in value order,
//! up to a goal.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::convert::repr_row;
use crate::engine::{below, Change, Changes, Engine, Failure, UPDATED};
use crate::program::Stratum;
use crate::row::{Row, RowSet};
use crate::value::{add_numbers, Ordered, Value};

/// Makes the derivations waiting on a group (`StratumRun::wake`), for `Held::release`.
pub(crate) type Wake<'w> = dyn FnMut(&mut Engine, usize, &Row, Option<Value>) -> Result<bool, Failure> + 'w;

/// A held group's new minimum, in a min-heap (ties by arrival, which never decides what is released).
#[derive(Clone)]
pub(crate) struct HeldEntry {
    pub(crate) key: Ordered,
    pub(crate) sequence: u64,
    pub(crate) group: Row,
}

impl PartialEq for HeldEntry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for HeldEntry {}

impl PartialOrd for HeldEntry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for HeldEntry {
    fn cmp(&self, other: &Self) -> Ordering {
        (&other.key, other.sequence).cmp(&(&self.key, self.sequence))
    }
}

/// Group changes of a stratum's `.ordered` aggregates, held back while anything else is in flight
/// (see `pycore._Held`): a release lets go of every held group whose minimum vanished and of every
/// held group whose new minimum is the least of all held ones. An aggregate ordered `up to` a goal
/// is released only while its new minimum is at most the goals' value; the rest waits here across
/// runs. `frontier` is the last value released in this evaluation.
#[derive(Clone)]
pub(crate) struct Held {
    pub(crate) heaps: FxHashMap<usize, BinaryHeap<HeldEntry>>,
    /// Groups whose best rose while derivations waited on them (`until`), by the least bound that
    /// waits: the release order wakes them when it reaches that bound (see `pycore._Held`).
    pub(crate) wakes: FxHashMap<usize, BinaryHeap<HeldEntry>>,
    pub(crate) pending: FxHashMap<usize, FxHashMap<Row, Value>>,
    pub(crate) vanished: FxHashMap<usize, RowSet>,
    pub(crate) goals: FxHashMap<usize, usize>,
    pub(crate) frontier: FxHashMap<usize, Ordered>,
    pub(crate) order: Vec<usize>,
    pub(crate) sequence: u64,
    /// `plus h`: per aggregate, its heuristic relation and that relation's index on the group's
    /// columns (see `prepare`); each held group's key in the release order (its minimum plus its
    /// heuristic), and the least bound waiting on each group, to re-key both when `h` changes
    pub(crate) offsets: FxHashMap<usize, (usize, usize)>,
    pub(crate) keys: FxHashMap<usize, FxHashMap<Row, Value>>,
    pub(crate) wake_bounds: FxHashMap<usize, FxHashMap<Row, Value>>,
}

/// How far (relative) a release key summed with a heuristic may fall below the last one released
/// before it counts as a fall along a derivation, and rise above the goals' and still be released
/// (see `pycore.ROUNDING`).
pub(crate) const ROUNDING: f64 = 1e-12;

/// Whether `key` may be released under `bound` (None: no bound); with a heuristic (`offsets`),
/// within rounding above it too (see `pycore._Held.within`).
pub(crate) fn within(offsets: bool, key: &Ordered, bound: Option<&Ordered>) -> bool {
    let Some(bound) = bound else {
        return true;
    };
    if key <= bound {
        return true;
    }
    match (offsets, as_f64(key.value()), as_f64(bound.value())) {
        (true, Some(k), Some(b)) => k - b <= ROUNDING * b.abs(),
        _ => false,
    }
}

pub(crate) fn as_f64(v: Value) -> Option<f64> {
    match v {
        Value::Int(i) => Some(i as f64),
        Value::Float(f) => Some(f),
        _ => None,
    }
}

impl Held {
    pub(crate) fn new(stratum: &Stratum) -> Self {
        let relations = &stratum.ordered;
        Held {
            heaps: relations.iter().map(|r| (*r, BinaryHeap::new())).collect(),
            wakes: relations.iter().map(|r| (*r, BinaryHeap::new())).collect(),
            pending: relations.iter().map(|r| (*r, FxHashMap::default())).collect(),
            vanished: relations.iter().map(|r| (*r, RowSet::default())).collect(),
            goals: stratum.goals.iter().copied().collect(),
            frontier: FxHashMap::default(),
            order: relations.to_vec(),
            sequence: 0,
            offsets: stratum.offsets.iter().map(|&(r, h)| (r, (h, usize::MAX))).collect(),
            keys: relations.iter().map(|r| (*r, FxHashMap::default())).collect(),
            wake_bounds: stratum.offsets.iter().map(|&(r, _)| (r, FxHashMap::default())).collect(),
        }
    }

    /// Index each heuristic on its group's columns, so that a key is one lookup.
    pub(crate) fn prepare(&mut self, e: &mut Engine) {
        for (h, index) in self.offsets.values_mut() {
            let relation = &mut e.relations[*h];
            let positions: Vec<usize> = (0..relation.arity - 1).collect();
            *index = relation.ensure_index(&positions);
        }
    }

    /// Where `value` of `group` comes in the release order: the value itself, or with `plus h` the
    /// value plus h's least value for the group (0 if it has none).
    pub(crate) fn key(&self, e: &Engine, rel: usize, group: &Row, value: Value) -> Result<Value, Failure> {
        let Some(&(h, index)) = self.offsets.get(&rel) else {
            return Ok(value);
        };
        let relation = &e.relations[h];
        let last = relation.arity - 1;
        let mut least: Option<Ordered> = None;
        if let Some(bucket) = relation.get(index, &group.values()) {
            bucket
                .try_for_each(|row| {
                    let v = Ordered::new(row.get(last), &e.strings);
                    if least.as_ref().is_none_or(|l| v < *l) {
                        least = Some(v);
                    }
                    Ok::<(), ()>(())
                })
                .ok();
        }
        let offset = least.map_or(Value::Int(0), |l| l.value());
        match add_numbers(value, offset) {
            Some(Ok(key)) => Ok(key),
            Some(Err(err)) => Err(Failure::Evaluation(format!("{}: {}", err.kind, err.message))),
            None => Err(Failure::Evaluation(format!(
                "'.ordered {} up to {} plus {}' adds {}'s {} to {}'s {} for group {}: both must be numbers",
                e.rels[rel].name,
                e.rels[self.goals[&rel]].name,
                e.rels[h].name,
                e.rels[h].name,
                crate::convert::repr(offset, &e.strings),
                e.rels[rel].name,
                crate::convert::repr(value, &e.strings),
                repr_row(&group.values(), &e.strings)
            ))),
        }
    }

    /// Re-key the held groups, and the wakes waiting on groups, whose heuristic changed.
    pub(crate) fn reorder(&mut self, e: &Engine, changes: &Changes) -> Result<(), Failure> {
        let offsets: Vec<(usize, usize)> = self.offsets.iter().map(|(&r, &(h, _))| (r, h)).collect();
        for (rel, h) in offsets {
            let Some(change) = changes.get(&h) else {
                continue;
            };
            let last = e.relations[h].arity - 1;
            let groups: RowSet =
                change.plus.iter().chain(change.minus.iter()).map(|row| Row::new(&row.values()[..last])).collect();
            for group in groups {
                if let Some(&value) = self.pending[&rel].get(&group) {
                    let key = self.key(e, rel, &group, value)?;
                    if self.keys[&rel].get(&group) != Some(&key) {
                        self.push(e, rel, group.clone(), key);
                    }
                }
                if let Some(&bound) = self.wake_bounds[&rel].get(&group) {
                    let key = self.key(e, rel, &group, bound)?;
                    let wakes = self.wakes.get_mut(&rel).expect("held relation");
                    wakes.push(HeldEntry { key: Ordered::new(key, &e.strings), sequence: self.sequence, group });
                    self.sequence += 1;
                }
            }
        }
        Ok(())
    }

    pub(crate) fn push(&mut self, e: &Engine, rel: usize, group: Row, key: Value) {
        let keys = self.keys.get_mut(&rel).expect("held relation");
        keys.insert(group.clone(), key);
        let heap = self.heaps.get_mut(&rel).expect("held relation");
        heap.push(HeldEntry { key: Ordered::new(key, &e.strings), sequence: self.sequence, group });
        self.sequence += 1;
        if heap.len() > 2 * keys.len() + 64 {
            // drop stale entries left by groups that changed again
            let entries = std::mem::take(heap).into_vec();
            *heap = entries.into_iter().filter(|x| keys.get(&x.group) == Some(&x.key.value())).collect();
        }
    }

    pub(crate) fn holds(&self, rel: usize) -> bool {
        self.heaps.contains_key(&rel)
    }

    pub(crate) fn wake_at(&mut self, e: &Engine, rel: usize, group: Row, bound: Value) -> Result<(), Failure> {
        let key = self.key(e, rel, &group, bound)?;
        if let Some(bounds) = self.wake_bounds.get_mut(&rel) {
            let lower = match bounds.get(&group) {
                Some(&least) => below(bound, least, &e.strings)?,
                None => true,
            };
            if lower {
                bounds.insert(group.clone(), bound);
            }
        }
        let wakes = self.wakes.get_mut(&rel).expect("held relation");
        wakes.push(HeldEntry { key: Ordered::new(key, &e.strings), sequence: self.sequence, group });
        self.sequence += 1;
        Ok(())
    }

    /// A new candidate below the last released value means values fell along a derivation, which
    /// would make stopping at the goal inexact.
    pub(crate) fn check_candidate(&self, e: &Engine, rel: usize, group: &Row, value: Value) -> Result<(), Failure> {
        let Some(frontier) = self.frontier.get(&rel) else {
            return Ok(());
        };
        let key = self.key(e, rel, group, value)?;
        let ordered = Ordered::new(key, &e.strings);
        if frontier.is_str() != ordered.is_str() || ordered >= *frontier {
            return Ok(());
        }
        let plus = self.offsets.get(&rel).map(|&(h, _)| format!(" plus {}", e.rels[h].name));
        if plus.is_some() {
            // a heuristic's sums round: a fall within rounding is an order off by an ulp, which the
            // release corrects (the group is hidden and released again), not a fall along a derivation
            if let (Some(f), Some(k)) = (as_f64(frontier.value()), as_f64(key)) {
                if f - k <= ROUNDING * f.abs() {
                    return Ok(());
                }
            }
        }
        Err(Failure::Evaluation(format!(
            "'.ordered {} up to {}{}' needs values that never fall along derivations, but group {} received {} \
             (release key {}) after keys up to {} were released",
            e.rels[rel].name,
            e.rels[self.goals[&rel]].name,
            plus.unwrap_or_default(),
            repr_row(&group.values(), &e.strings),
            crate::convert::repr(value, &e.strings),
            crate::convert::repr(key, &e.strings),
            crate::convert::repr(frontier.value(), &e.strings)
        )))
    }

    pub(crate) fn hold(&mut self, e: &Engine, rel: usize, group: Row) -> Result<(), Failure> {
        let best = e.best(rel, &group)?;
        let Some(best) = best else {
            self.pending.get_mut(&rel).expect("held relation").remove(&group);
            self.keys.get_mut(&rel).expect("held relation").remove(&group);
            // A group ordered up to a goal was hidden when it changed, so only the others have a
            // vanished minimum left to release.
            if !self.goals.contains_key(&rel) {
                self.vanished.get_mut(&rel).expect("held relation").insert(group);
            }
            return Ok(());
        };
        let key = self.key(e, rel, &group, best)?;
        if self.pending[&rel].get(&group) == Some(&best) && self.keys[&rel].get(&group) == Some(&key) {
            return Ok(());
        }
        self.pending.get_mut(&rel).expect("held relation").insert(group.clone(), best);
        self.push(e, rel, group, key);
        Ok(())
    }

    /// The next visible changes: batches are released until one changes something or nothing more
    /// may be released. `wake(e, rel, group, best)` makes the derivations that wait on a group for a
    /// bound its best reaches (`until`); a batch that wakes any releases nothing more, since they
    /// may lower what it would release (the caller evaluates them first).
    pub(crate) fn release(&mut self, e: &mut Engine, mut wake: Option<&mut Wake>) -> Result<Changes, Failure> {
        loop {
            let (changes, released) = self.release_batch(e, wake.as_deref_mut())?;
            if !changes.is_empty() || !released {
                return Ok(changes);
            }
        }
    }

    /// The goals' largest key, or None (no bound) while there is no goal or one is not shown.
    pub(crate) fn bound(&self, e: &Engine, rel: usize) -> Result<Option<Ordered>, Failure> {
        let Some(&goal) = self.goals.get(&rel) else {
            return Ok(None);
        };
        let mut bound: Option<Ordered> = None;
        for group in e.relations[goal].rows.iter() {
            let Some(value) = e.current(rel, group) else {
                return Ok(None);
            };
            let key = Ordered::new(self.key(e, rel, group, value)?, &e.strings);
            if bound.as_ref().is_none_or(|b| key > *b) {
                bound = Some(key);
            }
        }
        Ok(bound)
    }

    pub(crate) fn release_batch(
        &mut self,
        e: &mut Engine,
        mut wake: Option<&mut Wake>,
    ) -> Result<(Changes, bool), Failure> {
        let mut changes: Changes = FxHashMap::default();
        let mut any_released = false;
        for &rel in &self.order {
            let bound = self.bound(e, rel)?;
            let offsets = self.offsets.contains_key(&rel);
            let pending = self.pending.get_mut(&rel).expect("held relation");
            let keys = self.keys.get_mut(&rel).expect("held relation");
            let heap = self.heaps.get_mut(&rel).expect("held relation");
            while heap.peek().is_some_and(|top| keys.get(&top.group) != Some(&top.key.value())) {
                heap.pop();
            }
            let wakes = self.wakes.get_mut(&rel).expect("held relation");
            if let Some(wake) = wake.as_deref_mut() {
                while let Some(top) = wakes.peek().filter(|top| {
                    heap.peek().is_none_or(|h| h.key >= top.key) && within(offsets, &top.key, bound.as_ref())
                }) {
                    let least = top.key.clone();
                    let mut woke = false;
                    while wakes.peek().is_some_and(|top| top.key == least) {
                        let group = wakes.pop().expect("peeked").group;
                        if let Some(bounds) = self.wake_bounds.get_mut(&rel) {
                            bounds.remove(&group);
                        }
                        let best = e.best(rel, &group)?;
                        woke |= wake(e, rel, &group, best)?;
                    }
                    if woke {
                        // the woken derivations go first: they may lower what would be released
                        return Ok((changes, false));
                    }
                }
            }
            let mut released: Vec<Row> = Vec::new();
            for group in std::mem::take(self.vanished.get_mut(&rel).expect("held relation")) {
                if !pending.contains_key(&group) && e.best(rel, &group)?.is_none() {
                    released.push(group);
                }
            }
            if let Some(top) = heap.peek() {
                if within(offsets, &top.key, bound.as_ref()) {
                    let least = top.key.clone();
                    while heap.peek().is_some_and(|top| top.key == least) {
                        let entry = heap.pop().expect("peeked");
                        if keys.get(&entry.group) == Some(&entry.key.value()) {
                            pending.remove(&entry.group);
                            keys.remove(&entry.group);
                            released.push(entry.group);
                        }
                    }
                    self.frontier.insert(rel, least);
                }
            }
            any_released |= !released.is_empty();
            let mut change = Change::default();
            let mut updates = 0;
            for group in released {
                let best = e.best(rel, &group)?;
                let current = e.current(rel, &group);
                if current.is_some() && best == current {
                    continue;
                }
                let agg = e.aggregates[rel].as_ref().expect("aggregate");
                if let Some(current) = current {
                    change.minus.insert(agg.row(&group, current));
                }
                if let Some(best) = best {
                    Arc::make_mut(&mut change.plus).insert(agg.row(&group, best));
                    updates += current.is_some() as u64;
                }
            }
            e.stats_now[rel][UPDATED] += updates;
            if !change.is_empty() {
                changes.insert(rel, change);
            }
        }
        Ok((changes, any_released))
    }
}
