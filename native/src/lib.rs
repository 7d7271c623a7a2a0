//! reopt's native evaluation core: executes the compiled programs of `reopt.datalog` in Rust.
//!
//! Python keeps the front end (parser, checks, strata, planner) and the public API; this crate
//! keeps the state (relations, counts, aggregate candidates, memos) and runs the semi-naive rounds.
//! Every failure comes back as a Python exception with the state rolled back; a panic is caught
//! inside `Engine::run` and never unwinds into the interpreter.

mod aggregate;
mod call_memo;
mod convert;
mod counts;
mod dred;
mod engine;
mod exec;
mod index;
mod journal;
mod ordered;
mod program;
mod row;
mod settle;
mod storage;
mod stratum;
mod value;
mod waits;
mod words;

use std::sync::Arc;

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::{PyAny, PyDict, PySet, PyString};
use pyo3::PyTraverseError;
use rustc_hash::FxHashMap;

use convert::row_from_py;
use engine::{Engine, Failure};
use exec::Function;
use program::{read_relation, Compiled, Reader};
use row::Row;
use value::Interner;

/// Relation ids by name, as the engine's queued changes name them.
type Ids = Arc<FxHashMap<String, usize>>;

create_exception!(_native, CoreError, PyException, "A run failed; args: (message,).");
create_exception!(
    _native,
    RuleError,
    PyException,
    "A rule failed; args: (rule id, exception type name, message, Python exception or None)."
);

/// A compiled program, read once and shared by every core that runs it: an optimizer builds an
/// engine per query, and reading the program's plans took a fifth of TPC-H Q10's optimization.
#[pyclass(module = "reopt.datalog._native", frozen)]
struct Program {
    compiled: Compiled,
    ids: Ids,
}

#[pymethods]
impl Program {
    #[new]
    fn new(relations: &Bound<'_, PyAny>, strata: &Bound<'_, PyAny>) -> PyResult<Self> {
        let mut rels = Vec::new();
        for item in relations.try_iter()? {
            rels.push(read_relation(&item?)?);
        }
        let mut strings = Interner::default();
        let patterns: Vec<Vec<Vec<usize>>> = rels.iter().map(|r| r.patterns.clone()).collect();
        let index_of = move |rel: usize, positions: &[usize]| patterns.get(rel)?.iter().position(|p| p == positions);
        let mut reader = Reader { strings: &mut strings, index_of: &index_of };
        let mut compiled = Vec::new();
        for item in strata.try_iter()? {
            compiled.push(reader.stratum(&item?)?);
        }
        let ids = Arc::new(rels.iter().enumerate().map(|(i, r)| (r.name.clone(), i)).collect());
        Ok(Program { compiled: Compiled { rels: Arc::new(rels), strata: Arc::new(compiled), strings }, ids })
    }
}

/// One engine's state on the native backend.
#[pyclass(module = "reopt.datalog._native")]
struct Core {
    engine: Engine,
    ids: Ids,
}

fn to_pyerr(py: Python<'_>, failure: Failure) -> PyErr {
    match failure {
        Failure::Evaluation(message) => CoreError::new_err((message,)),
        Failure::Rule { rule, kind, message } => RuleError::new_err((rule, kind, message, py.None())),
        Failure::RulePython { rule, error } => {
            let kind = error.get_type(py).name().map(|n| n.to_string()).unwrap_or_default();
            let message = error.value(py).str().map(|s| s.to_string()).unwrap_or_default();
            RuleError::new_err((rule, kind, message, error.into_value(py)))
        }
    }
}

impl Core {
    fn row(&mut self, obj: &Bound<'_, PyAny>) -> PyResult<Row> {
        row_from_py(obj, &mut self.engine.strings, &mut self.engine.pystrings).map_err(PyValueError::new_err)
    }

    fn rows_to_set<'py>(&mut self, py: Python<'py>, rows: Vec<Row>) -> PyResult<Bound<'py, PySet>> {
        let engine = &mut self.engine;
        let tuples = rows
            .iter()
            .map(|r| engine.pystrings.row(py, &r.values(), &engine.strings))
            .collect::<PyResult<Vec<_>>>()?;
        PySet::new(py, tuples)
    }
}

#[pymethods]
impl Core {
    #[new]
    fn new(
        program: &Program,
        function_names: Vec<String>,
        callables: Vec<PyObject>,
        outputs: Vec<usize>,
        max_rounds: u64,
        max_passes: u64,
    ) -> PyResult<Self> {
        let compiled = &program.compiled;
        if function_names.len() != callables.len() || callables.len() != outputs.len() {
            return Err(PyValueError::new_err("one name, callable and output count per function"));
        }
        let functions = function_names
            .into_iter()
            .zip(callables)
            .zip(outputs)
            .map(|((name, callable), outputs)| Function { name, callable: Some(callable), outputs })
            .collect();
        Ok(Core {
            ids: program.ids.clone(),
            engine: Engine::new(
                compiled.rels.clone(),
                compiled.strata.clone(),
                functions,
                compiled.strings.clone(),
                max_rounds,
                max_passes,
            ),
        })
    }

    /// Propagate the engine's queued changes ({relation name: {row: count change}}); the ids of
    /// the relations that changed and the new generation. Taken as the engine queues them: a stream
    /// of single-row updates pays for every object built per run. The net changes are kept for
    /// `changes` only if asked for.
    fn run(
        &mut self,
        py: Python<'_>,
        deltas: &Bound<'_, PyDict>,
        seeding: bool,
        keep_changes: bool,
    ) -> PyResult<(Vec<usize>, u64)> {
        let mut pending = Vec::with_capacity(deltas.len());
        for (name, rows) in deltas.iter() {
            let name = name.downcast::<PyString>()?.to_str()?;
            let Some(&rel) = self.ids.get(name) else {
                return Err(PyValueError::new_err(format!("unknown relation '{name}'")));
            };
            let rows = rows.downcast::<PyDict>()?;
            let mut converted = Vec::with_capacity(rows.len());
            for (row, n) in rows.iter() {
                converted.push((self.row(&row)?, n.extract::<i64>()?));
            }
            pending.push((rel, converted));
        }
        let changed = self.engine.run(py, pending, seeding, keep_changes).map_err(|f| to_pyerr(py, f))?;
        Ok((changed, self.engine.generation))
    }

    fn generation(&self) -> u64 {
        self.engine.generation
    }

    /// The last run's net change of one relation: (rows made visible, rows made invisible).
    fn changes<'py>(&mut self, py: Python<'py>, rel: usize) -> PyResult<(Bound<'py, PySet>, Bound<'py, PySet>)> {
        let (plus, minus) = match self.engine.last_changes.get(&rel) {
            Some(c) => (c.plus.iter().cloned().collect(), c.minus.iter().cloned().collect()),
            None => (Vec::new(), Vec::new()),
        };
        Ok((self.rows_to_set(py, plus)?, self.rows_to_set(py, minus)?))
    }

    fn rows<'py>(&mut self, py: Python<'py>, rel: usize) -> PyResult<Bound<'py, PySet>> {
        let rows = self.engine.relations[rel].rows.iter().cloned().collect();
        self.rows_to_set(py, rows)
    }

    fn touched_rows<'py>(&mut self, py: Python<'py>, rel: usize) -> PyResult<Bound<'py, PySet>> {
        let touched = &self.engine.last_touched[rel];
        let mut rows = touched.rows.clone();
        if touched.every_visible {
            rows.extend(self.engine.relations[rel].rows.iter().cloned());
        }
        self.rows_to_set(py, rows)
    }

    fn lookup<'py>(
        &mut self,
        py: Python<'py>,
        rel: usize,
        positions: Vec<usize>,
        key: &Bound<'_, PyAny>,
    ) -> PyResult<Bound<'py, PySet>> {
        let key = self.row(key)?;
        let relation = &mut self.engine.relations[rel];
        let index = relation.ensure_index(&positions);
        let rows = relation.get(index, &key.values()).map(|b| b.rows()).unwrap_or_default();
        self.rows_to_set(py, rows)
    }

    fn count(&mut self, rel: usize, row: &Bound<'_, PyAny>) -> PyResult<i64> {
        let row = self.row(row)?;
        Ok(self.engine.count(rel, &row))
    }

    fn counts<'py>(&mut self, py: Python<'py>, rel: usize) -> PyResult<Bound<'py, PyDict>> {
        let engine = &mut self.engine;
        let dict = PyDict::new(py);
        match &engine.aggregates[rel] {
            Some(agg) => {
                for (group, g) in &agg.groups {
                    if let Some(value) = g.current {
                        let count = Engine::candidate_count(agg, group, value, &engine.strings);
                        let row = agg.row(group, value);
                        dict.set_item(engine.pystrings.row(py, &row.values(), &engine.strings)?, count)?;
                    }
                }
            }
            None => {
                let counted: Vec<(Row, i64)> =
                    engine.each_count(rel).map(|(row, count)| (row.clone(), count)).collect();
                for (row, count) in counted {
                    dict.set_item(engine.pystrings.row(py, &row.values(), &engine.strings)?, count)?;
                }
            }
        }
        Ok(dict)
    }

    fn candidates<'py>(
        &mut self,
        py: Python<'py>,
        rel: usize,
        group: &Bound<'_, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let group = self.row(group)?;
        let engine = &mut self.engine;
        let dict = PyDict::new(py);
        let Some(agg) = &engine.aggregates[rel] else {
            return Ok(dict);
        };
        if let Some(g) = agg.groups.get(&group) {
            match &g.candidates {
                aggregate::Candidates::Ordered(m) => {
                    for (k, c) in m.iter() {
                        dict.set_item(engine.pystrings.object(py, k.value(), &engine.strings), c)?;
                    }
                }
                aggregate::Candidates::Counted(m) => {
                    for (v, c) in m {
                        dict.set_item(engine.pystrings.object(py, *v, &engine.strings), *c)?;
                    }
                }
            }
        }
        Ok(dict)
    }

    /// The core holds the functions' callables, which may hold the engine's owner (the optimizer's
    /// bound methods do): Python's cycle collector must see them, or every such owner leaks.
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        for function in &self.engine.functions {
            if let Some(callable) = &function.callable {
                visit.call(callable)?;
            }
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        for function in &mut self.engine.functions {
            function.callable = None;
        }
    }

    /// Test hook: the next run panics inside the core after `changes` state changes (None: never).
    #[pyo3(signature = (changes))]
    fn fail_after(&mut self, changes: Option<u64>) {
        self.engine.fail_after = changes;
    }

    fn state_size(&self) -> u64 {
        self.engine.state_size()
    }

    /// Per relation (inserted, deleted, updated, fired, touched), for the last run and in total.
    fn stats(&self) -> (Vec<[u64; 5]>, Vec<[u64; 5]>) {
        (self.engine.stats_last.clone(), self.engine.stats_total.clone())
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<Program>()?;
    m.add_class::<Core>()?;
    m.add("CoreError", py.get_type::<CoreError>())?;
    m.add("RuleError", py.get_type::<RuleError>())?;
    m.add("PanicException", py.get_type::<pyo3::panic::PanicException>())?;
    Ok(())
}
