//! One stratum's evaluation for one batch of incoming changes: semi-naive rounds by counting, the
//! visibility changes they make, and the net change the strata above read.

use std::sync::Arc;

use pyo3::prelude::*;
use rustc_hash::{FxHashMap, FxHashSet};

use crate::engine::{Change, Changes, Engine, Failure, Outputs, DELETED, FIRED, INSERTED, TOUCHED};
use crate::exec::{rule_failure, Exec, ExecError, ExecState, View};
use crate::index::Index;
use crate::journal::{Journal, Undo};
use crate::ordered::Held;
use crate::program::{Plan, Step};
use crate::row::{Row, RowSet};
use crate::storage::{Relation, SharedRows};
use crate::value::Value;
use crate::waits::{until_read, WaitChanges};

/// What a stratum's run remembers of one relation to report its net change and its touched rows.
pub(crate) enum Seen {
    /// Each row whose visibility changed, with whether it was visible before the run.
    Original(FxHashMap<Row, bool>),
    /// The relation held nothing before the run, so every row it touched was shown at some point:
    /// the touched rows are those visible at the end and those hidden on the way, and only the latter
    /// are kept. An initial optimization shows millions of rows, which a map of originals would copy.
    FromEmpty(RowSet),
}

/// The evaluation of one stratum for one batch of incoming changes.
pub(crate) struct StratumRun {
    pub(crate) stratum: usize,
    pub(crate) seen: FxHashMap<usize, Seen>,
    /// The aggregates some rule's derivations wait on (`until`).
    pub(crate) waited: Vec<usize>,
    /// This round's changes to what waits, per rule.
    pub(crate) wait_changes: FxHashMap<usize, WaitChanges>,
    /// Derivations made because their group rose, for the next round.
    pub(crate) resumed: Option<Outputs>,
    /// Their candidates, (aggregate, group, value): not new (an unpruned evaluation held them all
    /// along), so they never fail the release order's check.
    pub(crate) not_new: FxHashSet<(usize, Row, Value)>,
    /// The rows the current round treats as absent.
    pub(crate) hidden: Hidden,
    /// The derivation counts a round makes, kept emptied between rounds: a fresh map per round
    /// grows by doubling, rehashing every entry each time.
    pub(crate) outputs: Outputs,
}

impl StratumRun {
    pub(crate) fn new(e: &Engine, stratum: usize) -> Self {
        let seen = e.strata[stratum]
            .relations
            .iter()
            .map(|&r| {
                let empty = e.relations[r].rows.is_empty()
                    && e.counts[r].is_empty()
                    && e.aggregates[r].as_ref().is_none_or(|a| a.groups.is_empty());
                (r, if empty { Seen::FromEmpty(RowSet::default()) } else { Seen::Original(FxHashMap::default()) })
            })
            .collect();
        let mut waited: Vec<usize> =
            e.strata[stratum].rules.iter().filter_map(|r| r.deferral.as_ref().map(|d| d.aggregate)).collect();
        waited.sort_unstable();
        waited.dedup();
        StratumRun {
            stratum,
            seen,
            waited,
            wait_changes: FxHashMap::default(),
            resumed: None,
            not_new: FxHashSet::default(),
            hidden: FxHashMap::default(),
            outputs: FxHashMap::default(),
        }
    }

    pub(crate) fn counting(
        &mut self,
        e: &mut Engine,
        py: Python<'_>,
        incoming: &Changes,
        seeding: bool,
        monotone: bool,
        journal: &mut Journal,
    ) -> Result<(), Failure> {
        let stratum = &e.strata[self.stratum];
        let mut held = if monotone || stratum.ordered.is_empty() {
            None
        } else {
            Some(e.held[self.stratum].take().unwrap_or_else(|| Held::new(stratum)))
        };
        if let Some(held) = held.as_mut() {
            held.frontier.clear();
            held.prepare(e);
            held.reorder(e, incoming)?;
        }
        // On failure the held changes stay taken: `Engine::run` restores them with the rest.
        let mut changes: Option<Changes> = None; // none yet: the first round reads `incoming`

        // Where a goal bounds an ordered aggregate, a batch that both deletes and inserts is evaluated
        // deletions first, its insertions hidden until they settle: a group whose minimum the
        // deletions change is hidden before the insertions reach the rules that read it, so those
        // derivations wait for its release at its final value instead of being made at its old one
        // and retracted (on TPC-H Q5 this halves the plan costs a selectivity change derives).
        let mut hidden: Hidden = FxHashMap::default();
        let mut insertions = None;
        if held.as_ref().is_some_and(|h| !h.goals.is_empty())
            && incoming.values().any(|c| !c.minus.is_empty())
            && incoming.values().any(|c| !c.plus.is_empty())
        {
            let (deletions, later, inserted) = split(incoming.clone());
            changes = Some(deletions);
            insertions = Some(later);
            hidden = inserted;
        }
        let mut extra = if seeding { Some(self.seed_outputs(e, py)?) } else { None };
        let mut rounds: u64 = 0;
        loop {
            if extra.is_none() && changes.as_ref().is_some_and(|c| c.is_empty()) && insertions.is_some() {
                changes = insertions.take();
                hidden.clear();
            }
            let current = changes.as_ref().unwrap_or(incoming);
            if !current.is_empty() || extra.is_some() {
                let mut outputs = self.round(e, py, current, &hidden)?;
                if let Some(extra) = extra.take() {
                    for (rel, out) in extra {
                        let target = outputs.entry(rel).or_default();
                        for (k, c) in out.plain {
                            *target.plain.entry(k).or_insert(0) += c;
                        }
                        for (k, c) in out.aggregate {
                            *target.aggregate.entry(k).or_insert(0) += c;
                        }
                    }
                }
                changes = Some(self.settle(e, py, outputs, monotone, held.as_mut(), journal)?);
                extra = self.resumed.take();
            } else if let Some(held) = held.as_mut() {
                let waits = !self.waited.is_empty();
                let mut wake = |e: &mut Engine, rel: usize, group: &Row, best: Option<Value>| {
                    self.wake(e, py, rel, group, best, journal)
                };
                let released = held.release(e, if waits { Some(&mut wake) } else { None })?;
                extra = self.resumed.take();
                if released.is_empty() && extra.is_none() {
                    break;
                }
                changes = Some(released);
            } else {
                break;
            }
            self.show(e, changes.as_ref().expect("settled or released"), journal);
            rounds += 1;
            if rounds > e.max_rounds {
                let mut names: Vec<&str> =
                    e.strata[self.stratum].relations.iter().map(|r| e.rels[*r].name.as_str()).collect();
                names.sort_unstable();
                return Err(Failure::Evaluation(format!(
                    "no fixpoint after {} rounds for {}; is the recursion well-founded?",
                    rounds,
                    names.join(", ")
                )));
            }
        }
        e.held[self.stratum] = held;
        Ok(())
    }

    /// Derivation-count changes of the stratum's heads caused by `changes` (already visible);
    /// `hidden` rows count as absent in both the old and the new state.
    pub(crate) fn round(
        &mut self,
        e: &mut Engine,
        py: Python<'_>,
        changes: &Changes,
        hidden: &Hidden,
    ) -> Result<Outputs, Failure> {
        let mut outputs = std::mem::take(&mut self.outputs);
        if !self.waited.is_empty() {
            self.hidden = hidden.clone(); // what a wake at the round's settling must also leave out
        }
        let Engine { relations, strata, functions, strings, pystrings, calls, stats_now, aggregates, waiting, .. } = e;
        let stratum = &strata[self.stratum];
        let mut show_indexes: FxHashMap<(usize, usize), Index> = FxHashMap::default();
        for rule in &stratum.rules {
            for plan in &rule.plans {
                let delta_rel = plan.delta.expect("delta plan");
                let Some(change) = changes.get(&delta_rel) else {
                    continue;
                };
                if change.is_empty() || reads_an_empty_view(plan, relations, changes) {
                    continue;
                }
                for step in &plan.steps {
                    if let Step::Lookup { view, index, .. } = step {
                        let (rel, old) = plan.views[*view];
                        relations[rel].prepare(*index);
                        if let (true, Some(c)) = (old, changes.get(&rel)) {
                            if !c.minus.is_empty() {
                                let positions = &relations[rel].indexes[*index].positions;
                                show_indexes.entry((rel, *index)).or_insert_with(|| {
                                    let mut leaving = Index::new(positions.clone());
                                    leaving.build(&c.minus);
                                    leaving
                                });
                            }
                        }
                    }
                }
                let views: Vec<View> = plan
                    .views
                    .iter()
                    .enumerate()
                    .map(|(i, &(rel, old))| {
                        let change = if old { changes.get(&rel) } else { None };
                        let show_index = plan.steps.iter().find_map(|s| match s {
                            Step::Lookup { view, index, .. } if old && *view == i => show_indexes.get(&(rel, *index)),
                            _ => None,
                        });
                        View {
                            rel: &relations[rel],
                            hidden: hidden.get(&rel).map(|rows| &**rows),
                            entering: change.map(|c| &*c.plus),
                            leaving: change.map(|c| &c.minus),
                            leaving_index: show_index,
                        }
                    })
                    .collect();
                let out = outputs.entry(rule.head).or_default();
                let until = until_read(rule, plan, aggregates, waiting, changes);
                let waits = rule.deferral.as_ref().map(|_| self.wait_changes.entry(rule.id).or_default());
                let exec = Exec { plan, views, functions, py, until };
                let mut state = ExecState::new(strings, pystrings, calls, out, plan.slots, waits);
                let Step::Delta { negated, pattern } = &plan.steps[0] else {
                    unreachable!("a delta plan starts with its delta")
                };
                let mut run = || -> Result<(), ExecError> {
                    for (rows, sign) in [(&*change.plus, 1i64), (&change.minus, -1i64)] {
                        let sign = if *negated { -sign } else { sign };
                        for row in rows {
                            if exec.bind(pattern, &row.packed(), &mut state)? {
                                exec.step(1, sign, &mut state)?;
                            }
                        }
                    }
                    Ok(())
                };
                let result = run();
                stats_now[rule.head][FIRED] += state.fired;
                result.map_err(|err| rule_failure(rule.id, err))?;
            }
        }
        Ok(outputs)
    }

    pub(crate) fn seed_outputs(&self, e: &mut Engine, py: Python<'_>) -> Result<Outputs, Failure> {
        let mut outputs: Outputs = FxHashMap::default();
        let Engine { strata, functions, strings, pystrings, calls, stats_now, .. } = e;
        for &rel in &strata[self.stratum].relations {
            outputs.entry(rel).or_default();
        }
        for rule in &strata[self.stratum].rules {
            let Some(plan) = &rule.seed else { continue };
            let out = outputs.entry(rule.head).or_default();
            let exec = Exec { plan, views: Vec::new(), functions, py, until: None };
            let mut state = ExecState::new(strings, pystrings, calls, out, plan.slots, None);
            let result = exec.step(0, 1, &mut state);
            stats_now[rule.head][FIRED] += state.fired;
            result.map_err(|err| rule_failure(rule.id, err))?;
        }
        Ok(outputs)
    }

    /// Make visibility changes of the stratum's relations take effect.
    pub(crate) fn show(&mut self, e: &mut Engine, changes: &Changes, journal: &mut Journal) {
        for (&rel, change) in changes {
            let seen = self.seen.entry(rel).or_insert_with(|| Seen::Original(FxHashMap::default()));
            let is_aggregate = e.aggregates[rel].is_some();
            for row in &change.minus {
                match seen {
                    Seen::Original(original) => {
                        original.entry(row.clone()).or_insert(true);
                    }
                    Seen::FromEmpty(hidden) => {
                        hidden.insert(row.clone());
                    }
                }
                if is_aggregate {
                    let (group, _) = e.aggregates[rel].as_ref().expect("aggregate").split(row);
                    e.hide_value(rel, &group, journal);
                } else {
                    e.relations[rel].remove(row);
                    journal.record(|| Undo::Hidden(rel as u32, row.clone()));
                }
            }
            for row in change.plus.iter() {
                if let Seen::Original(original) = seen {
                    original.entry(row.clone()).or_insert(false);
                }
                if is_aggregate {
                    let (group, value) = e.aggregates[rel].as_ref().expect("aggregate").split(row);
                    e.show_value(rel, &group, value, journal);
                } else {
                    e.relations[rel].add(row.clone());
                    journal.record(|| Undo::Shown(rel as u32, row.clone()));
                }
            }
            e.stats_now[rel][INSERTED] += change.plus.len() as u64;
            e.stats_now[rel][DELETED] += change.minus.len() as u64;
        }
    }

    pub(crate) fn net_changes(self, e: &mut Engine, keep_all: bool) -> Changes {
        let mut changes: Changes = FxHashMap::default();
        for (rel, seen) in self.seen {
            let keep = keep_all || e.read_later[rel];
            let mut change = Change::default();
            let touched = &mut e.touched[rel];
            let rows = &e.relations[rel].rows;
            let listed = touched.rows.len();
            let from_empty = matches!(seen, Seen::FromEmpty(_));
            match seen {
                Seen::Original(original) => {
                    for (row, was) in &original {
                        if keep {
                            let now = rows.contains(row);
                            if !was && now {
                                Arc::make_mut(&mut change.plus).insert(row.clone());
                            } else if *was && !now {
                                change.minus.insert(row.clone());
                            }
                        }
                    }
                    touched.rows.extend(original.into_keys());
                }
                Seen::FromEmpty(hidden) => {
                    if keep {
                        change.plus = rows.clone();
                    }
                    touched.every_visible = true;
                    touched.rows.extend(hidden.into_iter().filter(|row| !rows.contains(row)));
                }
            }
            let added = &touched.rows[listed..];
            let visible = if from_empty { rows.len() } else { 0 };
            let count = match &e.aggregates[rel] {
                Some(agg) => {
                    let shown = rows.iter().take(visible);
                    shown.chain(added).map(|r| agg.split(r).0).collect::<RowSet>().len()
                }
                None => visible + added.len(),
            };
            e.stats_now[rel][TOUCHED] += count as u64;
            if !change.is_empty() {
                changes.insert(rel, change);
            }
        }
        changes
    }
}

/// Whether a body atom the plan must match reads a view with no rows: then the plan derives
/// nothing, and is skipped before any lookup (or index) is made. An initial load meets this often:
/// every input changes in the first round, and the plans for most of them join relations the
/// recursion has not filled yet. Negated atoms hold on an empty view, so they never skip.
pub(crate) fn reads_an_empty_view(plan: &Plan, relations: &[Relation], changes: &Changes) -> bool {
    plan.steps.iter().any(|step| {
        let view = match step {
            Step::Lookup { view, .. } | Step::Scan { view, .. } | Step::Has { view, negated: false, .. } => *view,
            _ => return false,
        };
        let (rel, old) = plan.views[view];
        let rows = relations[rel].rows.len();
        match changes.get(&rel).filter(|_| old) {
            // the old contents: the rows minus those entering this round, plus those leaving it
            Some(change) => rows == change.plus.len() && change.minus.is_empty(),
            None => rows == 0,
        }
    })
}

/// Rows that count as absent in both the old and the new state of a round, by relation.
pub(crate) type Hidden = FxHashMap<usize, SharedRows>;

/// A batch's deletions and its insertions, to evaluate one after the other, and the inserted rows,
/// hidden while the deletions are evaluated.
pub(crate) fn split(incoming: Changes) -> (Changes, Changes, Hidden) {
    let mut deletions: Changes = FxHashMap::default();
    let mut insertions: Changes = FxHashMap::default();
    let mut hidden: Hidden = FxHashMap::default();
    for (rel, change) in incoming {
        if !change.minus.is_empty() {
            deletions.insert(rel, Change { plus: SharedRows::default(), minus: change.minus });
        }
        if !change.plus.is_empty() {
            hidden.insert(rel, change.plus.clone());
            insertions.insert(rel, Change { plus: change.plus, minus: RowSet::default() });
        }
    }
    (deletions, insertions, hidden)
}
