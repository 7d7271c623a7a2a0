//! Settling a round: derivation-count changes applied to counts and aggregate candidates, and the
//! visibility changes they imply.

use std::cmp::Ordering;
use std::sync::Arc;

use pyo3::prelude::*;
use rustc_hash::FxHashMap;

use crate::aggregate::AggFunc;
use crate::convert::{repr, repr_row};
use crate::engine::{below, Change, Changes, Engine, Failure, Out, Outputs, UPDATED};
use crate::journal::Journal;
use crate::ordered::Held;
use crate::row::{Row, RowSet};
use crate::stratum::StratumRun;
use crate::value::{compare, Value};

impl StratumRun {
    /// Apply derivation-count changes; return the visibility changes they imply.
    pub(crate) fn settle(
        &mut self,
        e: &mut Engine,
        py: Python<'_>,
        mut outputs: Outputs,
        monotone: bool,
        mut held: Option<&mut Held>,
        journal: &mut Journal,
    ) -> Result<Changes, Failure> {
        let mut changes: Changes = FxHashMap::default();
        self.apply_wait_changes(e, journal)?;
        let before = self.bests_waited_on(e, &outputs)?;
        for (&rel, out) in outputs.iter_mut() {
            if out.is_empty() {
                continue;
            }
            let change = if e.aggregates[rel].is_none() {
                settle_counts(e, rel, out, monotone, journal)?
            } else {
                self.settle_candidates(e, rel, out, monotone, held.as_deref_mut(), journal)?
            };
            if !change.is_empty() {
                changes.insert(rel, change);
            }
        }
        self.outputs = outputs;
        self.wake_risen(e, py, before, held, journal)?;
        Ok(changes)
    }

    /// The best of each group this round's candidates touch that some derivations wait on, before
    /// the candidates are applied.
    fn bests_waited_on(&self, e: &Engine, outputs: &Outputs) -> Result<Vec<(usize, Row, Value)>, Failure> {
        let mut before = Vec::new();
        for (&rel, out) in outputs.iter().filter(|(rel, _)| self.waited.contains(rel)) {
            let mut groups: RowSet = RowSet::default();
            for (group, _) in out.aggregate.keys() {
                if groups.insert(group.clone()) {
                    if let Some(best) = e.best(rel, group)? {
                        before.push((rel, group.clone(), best));
                    }
                }
            }
        }
        Ok(before)
    }

    /// Apply an aggregate's candidate changes. A group held for the ordered release is handed to it
    /// (hidden meanwhile, where a goal bounds the release); any other shows its new best at once.
    fn settle_candidates(
        &mut self,
        e: &mut Engine,
        rel: usize,
        out: &mut Out,
        monotone: bool,
        held: Option<&mut Held>,
        journal: &mut Journal,
    ) -> Result<Change, Failure> {
        let mut touched: RowSet = RowSet::default();
        let bounded = held.as_deref().is_some_and(|h| h.goals.contains_key(&rel));
        for ((group, value), delta) in out.aggregate.drain() {
            if delta != 0 {
                if bounded && delta > 0 && !self.not_new.contains(&(rel, group.clone(), value)) {
                    held.as_deref().expect("held").check_candidate(e, rel, &group, value)?;
                }
                e.add_candidate(rel, &group, value, delta, journal)?;
                touched.insert(group);
            }
        }
        match held.filter(|h| h.holds(rel)) {
            Some(held) => hold_groups(e, rel, touched, bounded, held),
            None => show_bests(e, rel, touched, monotone),
        }
    }

    /// Wake the derivations waiting on groups whose best rose this round: at once, or, for a group
    /// the ordered release holds, when the release reaches the least bound that waits on it.
    fn wake_risen(
        &mut self,
        e: &mut Engine,
        py: Python<'_>,
        before: Vec<(usize, Row, Value)>,
        mut held: Option<&mut Held>,
        journal: &mut Journal,
    ) -> Result<(), Failure> {
        for (rel, group, old) in before {
            let new = e.best(rel, &group)?;
            if let Some(new) = new {
                if !below(old, new, &e.strings)? {
                    continue;
                }
            }
            if let Some(held) = held.as_deref_mut().filter(|h| h.holds(rel)) {
                if let Some(least) = self.least_waiting_bound(e, rel, &group)? {
                    held.wake_at(e, rel, group, least)?;
                }
            } else {
                self.wake(e, py, rel, &group, new, journal)?;
            }
        }
        Ok(())
    }

    /// The least bound any derivation waits for on `group` of the aggregate `rel`.
    fn least_waiting_bound(&self, e: &Engine, rel: usize, group: &Row) -> Result<Option<Value>, Failure> {
        let mut least: Option<Value> = None;
        for rule in e.strata[self.stratum].rules.iter() {
            if rule.deferral.as_ref().is_none_or(|d| d.aggregate != rel) {
                continue;
            }
            let keys = e.waiting.get(&rule.id).and_then(|w| w.get(group));
            for &bound in keys.into_iter().flat_map(|k| k.values()) {
                let lower = match least {
                    None => true,
                    Some(least) => below(bound, least, &e.strings)?,
                };
                if lower {
                    least = Some(bound);
                }
            }
        }
        Ok(least)
    }
}

/// Apply a plain relation's derivation-count changes: a row shows while its count is positive.
fn settle_counts(
    e: &mut Engine,
    rel: usize,
    out: &mut Out,
    monotone: bool,
    journal: &mut Journal,
) -> Result<Change, Failure> {
    let mut change = Change::default();
    for (row, delta) in out.plain.drain() {
        if delta == 0 {
            continue;
        }
        let Some(old) = e.add_count(rel, &row, delta, journal) else {
            return Err(Failure::Evaluation(format!(
                "internal inconsistency: negative derivation count for {}{}",
                e.rels[rel].name,
                repr_row(&row.values(), &e.strings)
            )));
        };
        let count = old + delta;
        let visible = e.relations[rel].rows.contains(&row);
        if count != 0 && !visible {
            Arc::make_mut(&mut change.plus).insert(row);
        } else if count == 0 && visible {
            if monotone {
                return Err(Failure::Evaluation(format!(
                    "'{}{}' lost its last derivation while insertions were propagated; the recursion is not monotone",
                    e.rels[rel].name,
                    repr_row(&row.values(), &e.strings)
                )));
            }
            change.minus.insert(row);
        }
    }
    Ok(change)
}

/// Hand touched groups to the ordered release. Where a goal bounds it, a group whose best changed
/// is hidden until released again.
fn hold_groups(e: &mut Engine, rel: usize, touched: RowSet, bounded: bool, held: &mut Held) -> Result<Change, Failure> {
    let mut change = Change::default();
    for group in touched {
        if bounded {
            if let Some(current) = e.current(rel, &group) {
                if e.best(rel, &group)? == Some(current) {
                    continue;
                }
                let agg = e.aggregates[rel].as_ref().expect("aggregate");
                change.minus.insert(agg.row(&group, current));
            }
        }
        held.hold(e, rel, group)?;
    }
    Ok(change)
}

/// Show each touched group's new best in place of its current value. While insertions alone are
/// propagated (`monotone`), a best may only improve.
fn show_bests(e: &mut Engine, rel: usize, touched: RowSet, monotone: bool) -> Result<Change, Failure> {
    let mut change = Change::default();
    let mut updates = 0;
    for group in touched {
        let best = e.best(rel, &group)?;
        let agg = e.aggregates[rel].as_ref().expect("aggregate");
        let Some(current) = e.current(rel, &group) else {
            if let Some(best) = best {
                Arc::make_mut(&mut change.plus).insert(agg.row(&group, best));
            }
            continue;
        };
        if best == Some(current) {
            continue;
        }
        if monotone && !improves(e, agg.func, best, current)? {
            let shown = best.map(|b| repr(b, &e.strings)).unwrap_or_else(|| "None".into());
            return Err(Failure::Evaluation(format!(
                "aggregate '{}' group {} went from {} to {} while insertions were propagated; recursion \
                 through min/max needs inputs that only improve it (for example positive weights)",
                e.rels[rel].name,
                repr_row(&group.values(), &e.strings),
                repr(current, &e.strings),
                shown
            )));
        }
        change.minus.insert(agg.row(&group, current));
        if let Some(best) = best {
            Arc::make_mut(&mut change.plus).insert(agg.row(&group, best));
            updates += 1;
        }
    }
    e.stats_now[rel][UPDATED] += updates;
    Ok(change)
}

/// Whether `best` improves on `current` for a min (lower) or max (higher) aggregate.
fn improves(e: &Engine, func: AggFunc, best: Option<Value>, current: Value) -> Result<bool, Failure> {
    let Some(best) = best else {
        return Ok(false);
    };
    let order = compare(best, current, "<", &e.strings)
        .map_err(|err| Failure::Evaluation(format!("evaluation failed: {}: {}", err.kind, err.message)))?;
    Ok(if func == AggFunc::Min { order == Ordering::Less } else { order == Ordering::Greater })
}
