//! Waiting derivations (`until`): what waits on which aggregate group, and waking them when the
//! group's best reaches their bound.

use pyo3::prelude::*;
use rustc_hash::FxHashMap;

use crate::aggregate::Aggregate;
use crate::engine::{below, Changes, Engine, Failure, Out, FIRED};
use crate::exec::{rule_failure, Exec, ExecError, ExecState, View};
use crate::journal::{Journal, Undo};
use crate::program::{Plan, Rule, Step};
use crate::row::{Key, Row, RowMap, RowSet};
use crate::stratum::StratumRun;
use crate::value::Value;

/// A rule's derivations that wait (`until`): group -> key -> bound, the key being the values of
/// the variables the literals before `until` bind.
pub(crate) type Waiting = RowMap<RowMap<Value>>;

/// A round's changes to what waits, per (group, key): the sum of the signs, and the bound.
pub(crate) type WaitChanges = FxHashMap<(Row, Row), (i64, Value)>;

/// Forget a waiting derivation, and its group once nothing waits on it; the bound it had.
pub(crate) fn forget(waiting: &mut Waiting, group: &Row, key: &Row) -> Option<Value> {
    let keys = waiting.get_mut(group)?;
    let bound = keys.remove(key);
    if keys.is_empty() {
        waiting.remove(group);
    }
    bound
}

/// What a plan of a rule with `until` reads to decide whether a derivation waits: the aggregate it
/// waits on, what waits already, and, for each literal before `until` read in its new contents, the
/// rows entering its relation this round.
pub(crate) fn until_read<'a>(
    rule: &Rule,
    plan: &Plan,
    aggregates: &'a [Option<Aggregate>],
    waiting: &'a FxHashMap<usize, Waiting>,
    changes: &'a Changes,
) -> Option<UntilRead<'a>> {
    let deferral = rule.deferral.as_ref()?;
    let entering = plan
        .steps
        .iter()
        .find_map(|s| match s {
            Step::Until { entering, .. } => {
                Some(entering.iter().map(|(rel, _)| changes.get(rel).map(|c| &*c.plus)).collect())
            }
            _ => None,
        })
        .unwrap_or_default();
    Some(UntilRead {
        aggregate: aggregates[deferral.aggregate].as_ref().expect("aggregate"),
        waiting: waiting.get(&rule.id),
        entering,
    })
}

pub(crate) struct UntilRead<'a> {
    pub(crate) aggregate: &'a Aggregate,
    pub(crate) waiting: Option<&'a Waiting>,
    pub(crate) entering: Vec<Option<&'a RowSet>>,
}

impl StratumRun {
    /// Make this round's changes to what waits: a derivation that began to wait is recorded, one
    /// that waited and lost a row of its body is forgotten (cross terms of a round cancel).
    pub(crate) fn apply_wait_changes(&mut self, e: &mut Engine, journal: &mut Journal) -> Result<(), Failure> {
        for (rule, changed) in std::mem::take(&mut self.wait_changes) {
            let waiting = e.waiting.entry(rule).or_default();
            for ((group, key), (delta, bound)) in changed {
                let present = waiting.get(&group).is_some_and(|keys| keys.contains_key(&key));
                let count = present as i64 + delta;
                if count != 0 && count != 1 {
                    return Err(Failure::Evaluation(format!(
                        "internal inconsistency: a waiting derivation counted {count} times"
                    )));
                }
                if count == 1 && !present {
                    waiting.entry(group.clone()).or_default().insert(key.clone(), bound);
                    journal.record(|| Undo::Wait(rule as u32, group, key, None));
                } else if count == 0 && present {
                    let old = forget(waiting, &group, &key).expect("present");
                    journal.record(|| Undo::Wait(rule as u32, group, key, Some(old)));
                }
            }
        }
        Ok(())
    }

    /// Group `group` of `rel` rose to `best` (None: it has no candidate left): make the derivations
    /// that waited on it for a bound it now reaches, for the next round. Whether any did.
    pub(crate) fn wake(
        &mut self,
        e: &mut Engine,
        py: Python<'_>,
        rel: usize,
        group: &Row,
        best: Option<Value>,
        journal: &mut Journal,
    ) -> Result<bool, Failure> {
        let strata = e.strata.clone();
        let mut woke = false;
        for rule in strata[self.stratum].rules.iter() {
            let Some(deferral) = rule.deferral.as_ref().filter(|d| d.aggregate == rel) else {
                continue;
            };
            let Some(keys) = e.waiting.get(&rule.id).and_then(|w| w.get(group)) else {
                continue;
            };
            let mut ready: Vec<(Row, Value)> = Vec::new();
            for (key, &bound) in keys {
                let reached = match best {
                    None => true,
                    Some(best) => !below(best, bound, &e.strings)?,
                };
                if reached {
                    ready.push((key.clone(), bound));
                }
            }
            if ready.is_empty() {
                continue;
            }
            woke = true;
            let waiting = e.waiting.get_mut(&rule.id).expect("waiting");
            for (key, bound) in &ready {
                forget(waiting, group, key);
                journal.record(|| Undo::Wait(rule.id as u32, group.clone(), key.clone(), Some(*bound)));
            }
            let made = self.resume(e, py, rule, &ready)?;
            let resumed = self.resumed.get_or_insert_with(FxHashMap::default).entry(rule.head).or_default();
            for (row, count) in made.plain {
                let values = row.values();
                let group: Key = deferral.group_positions.iter().map(|&p| values[p]).collect();
                self.not_new.insert((rel, Row::new(&group), values[deferral.value_position]));
                *resumed.plain.entry(row).or_insert(0) += count;
            }
        }
        Ok(woke)
    }

    /// The derivations of `rule` from waiting keys, in the current contents (the rows the round
    /// treats as absent left out).
    pub(crate) fn resume(
        &self,
        e: &mut Engine,
        py: Python<'_>,
        rule: &Rule,
        ready: &[(Row, Value)],
    ) -> Result<Out, Failure> {
        let plan = &rule.deferral.as_ref().expect("deferral").resume;
        let Engine { relations, functions, strings, pystrings, calls, stats_now, .. } = e;
        for step in &plan.steps {
            if let Step::Lookup { view, index, .. } = step {
                relations[plan.views[*view].0].prepare(*index);
            }
        }
        let views: Vec<View> = plan
            .views
            .iter()
            .map(|&(rel, _old)| View {
                rel: &relations[rel],
                hidden: self.hidden.get(&rel).map(|rows| &**rows),
                entering: None,
                leaving: None,
                leaving_index: None,
            })
            .collect();
        let mut made = Out::default();
        let exec = Exec { plan, views, functions, py, until: None };
        let mut state = ExecState::new(strings, pystrings, calls, &mut made, plan.slots, None);
        let Step::Delta { pattern, .. } = &plan.steps[0] else { unreachable!("a resume plan starts with its key") };
        let mut run = || -> Result<(), ExecError> {
            for (key, _) in ready {
                if exec.bind(pattern, &key.packed(), &mut state)? {
                    exec.step(1, 1, &mut state)?;
                }
            }
            Ok(())
        };
        let result = run();
        stats_now[rule.head][FIRED] += state.fired;
        result.map_err(|err| rule_failure(rule.id, err))?;
        Ok(made)
    }
}
