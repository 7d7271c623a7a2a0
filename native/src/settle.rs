//! Settling a round: derivation-count changes applied to counts and aggregate candidates, and the
//! visibility changes they imply.

use std::cmp::Ordering;
use std::sync::Arc;

use pyo3::prelude::*;
use rustc_hash::FxHashMap;

use crate::aggregate::AggFunc;
use crate::convert::repr_row;
use crate::engine::{below, Change, Changes, Engine, Failure, Outputs, UPDATED};
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
        // the best of each group some derivations wait on, before this round's candidates
        let mut before: Vec<(usize, Row, Value)> = Vec::new();
        for (&rel, out) in outputs.iter_mut() {
            if out.is_empty() {
                continue;
            }
            if self.waited.contains(&rel) {
                let mut groups: RowSet = RowSet::default();
                for (group, _) in out.aggregate.keys() {
                    if groups.insert(group.clone()) {
                        if let Some(best) = e.best(rel, group)? {
                            before.push((rel, group.clone(), best));
                        }
                    }
                }
            }
            let mut change = Change::default();
            if e.aggregates[rel].is_none() {
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
            } else {
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
                if let Some(held) = held.as_deref_mut() {
                    if held.holds(rel) {
                        for group in touched {
                            if bounded {
                                if let Some(current) = e.current(rel, &group) {
                                    if e.best(rel, &group)? == Some(current) {
                                        continue;
                                    }
                                    let agg = e.aggregates[rel].as_ref().expect("aggregate");
                                    change.minus.insert(agg.row(&group, current));
                                    // hidden until released again
                                }
                            }
                            held.hold(e, rel, group)?;
                        }
                        if !change.is_empty() {
                            changes.insert(rel, change);
                        }
                        continue;
                    }
                }
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
                    if monotone {
                        let improves = match best {
                            None => false,
                            Some(b) => {
                                let order = compare(b, current, "<", &e.strings).map_err(|err| {
                                    Failure::Evaluation(format!("evaluation failed: {}: {}", err.kind, err.message))
                                })?;
                                if agg.func == AggFunc::Min {
                                    order == Ordering::Less
                                } else {
                                    order == Ordering::Greater
                                }
                            }
                        };
                        if !improves {
                            let shown =
                                best.map(|b| crate::convert::repr(b, &e.strings)).unwrap_or_else(|| "None".into());
                            return Err(Failure::Evaluation(format!(
                                "aggregate '{}' group {} went from {} to {} while insertions were propagated; recursion \
                                 through min/max needs inputs that only improve it (for example positive weights)",
                                e.rels[rel].name,
                                repr_row(&group.values(), &e.strings),
                                crate::convert::repr(current, &e.strings),
                                shown
                            )));
                        }
                    }
                    change.minus.insert(agg.row(&group, current));
                    if let Some(best) = best {
                        Arc::make_mut(&mut change.plus).insert(agg.row(&group, best));
                        updates += 1;
                    }
                }
                e.stats_now[rel][UPDATED] += updates;
            }
            if !change.is_empty() {
                changes.insert(rel, change);
            }
        }
        self.outputs = outputs;
        for (rel, group, old) in before {
            let new = e.best(rel, &group)?;
            if let Some(new) = new {
                if !below(old, new, &e.strings)? {
                    continue;
                }
            }
            if let Some(held) = held.as_deref_mut().filter(|h| h.holds(rel)) {
                let mut least: Option<Value> = None;
                for rule in e.strata[self.stratum].rules.iter() {
                    if rule.deferral.as_ref().is_none_or(|d| d.aggregate != rel) {
                        continue;
                    }
                    let keys = e.waiting.get(&rule.id).and_then(|w| w.get(&group));
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
                if let Some(least) = least {
                    held.wake_at(e, rel, group, least)?;
                }
            } else {
                self.wake(e, py, rel, &group, new, journal)?;
            }
        }
        Ok(changes)
    }
}
