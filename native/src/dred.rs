//! Delete and re-derive, for strata whose recursion counting cannot maintain: over-delete what lost
//! a derivation, then re-derive what still has one.

use std::sync::Arc;

use pyo3::Python;

use rustc_hash::FxHashMap;

use crate::engine::{Change, Changes, Engine, Failure, Outputs};
use crate::journal::Journal;
use crate::row::RowSet;
use crate::storage::SharedRows;
use crate::stratum::{split, StratumRun};

impl StratumRun {
    pub(crate) fn dred(
        &mut self,
        e: &mut Engine,
        py: Python<'_>,
        incoming: Changes,
        seeding: bool,
        journal: &mut Journal,
    ) -> Result<(), Failure> {
        let (deletions, mut insertions, hidden) = split(incoming);
        if !deletions.is_empty() {
            let mut overdeleted: FxHashMap<usize, RowSet> =
                e.strata[self.stratum].relations.iter().map(|r| (*r, RowSet::default())).collect();
            let mut changes = deletions;
            while !changes.is_empty() {
                let outputs = self.round(e, py, &changes, &hidden)?;
                changes = overdelete(e, outputs, &mut overdeleted, journal)?;
                self.show(e, &changes, journal);
            }
            let rederived = rederive(e, &overdeleted)?;
            self.show(e, &rederived, journal);
            insertions.extend(rederived);
        }
        self.counting(e, py, &insertions, seeding, true, journal)
    }
}

/// Apply lost derivations; every row that lost one is deleted for now (DRed's first phase).
pub(crate) fn overdelete(
    e: &mut Engine,
    outputs: Outputs,
    overdeleted: &mut FxHashMap<usize, RowSet>,
    journal: &mut Journal,
) -> Result<Changes, Failure> {
    let mut changes: Changes = FxHashMap::default();
    for (rel, out) in outputs {
        if out.is_empty() {
            continue;
        }
        let mut minus: RowSet = RowSet::default();
        if e.aggregates[rel].is_none() {
            for (row, delta) in out.plain {
                if delta == 0 {
                    continue;
                }
                let count = e.count(rel, &row) + delta;
                e.set_count(rel, row.clone(), count, journal);
                let gone = overdeleted.entry(rel).or_default();
                if delta < 0 && e.relations[rel].rows.contains(&row) && !gone.contains(&row) {
                    gone.insert(row.clone());
                    minus.insert(row);
                }
            }
        } else {
            for ((group, value), delta) in out.aggregate {
                if delta == 0 {
                    continue;
                }
                e.add_candidate(rel, &group, value, delta, journal)?;
                let gone = overdeleted.entry(rel).or_default();
                if delta < 0 && e.current(rel, &group) == Some(value) && !gone.contains(&group) {
                    gone.insert(group.clone());
                    minus.insert(e.aggregates[rel].as_ref().expect("aggregate").row(&group, value));
                }
            }
        }
        if !minus.is_empty() {
            changes.insert(rel, Change { plus: SharedRows::default(), minus });
        }
    }
    Ok(changes)
}

/// Rows deleted for now that still have a derivation from what remains (DRed's second phase).
pub(crate) fn rederive(e: &Engine, overdeleted: &FxHashMap<usize, RowSet>) -> Result<Changes, Failure> {
    let mut rederived: Changes = FxHashMap::default();
    for (&rel, gone) in overdeleted {
        let mut plus: RowSet = RowSet::default();
        match &e.aggregates[rel] {
            None => {
                for row in gone {
                    if e.count(rel, row) > 0 {
                        plus.insert(row.clone());
                    }
                }
            }
            Some(agg) => {
                for group in gone {
                    if let Some(best) = e.best(rel, group)? {
                        plus.insert(agg.row(group, best));
                    }
                }
            }
        }
        if !plus.is_empty() {
            rederived.insert(rel, Change { plus: Arc::new(plus), minus: RowSet::default() });
        }
    }
    Ok(rederived)
}
