//! The plan executor: runs one compiled rule plan over the rows a round hands it, binding registers,
//! looking up indexes, calling functions and emitting head rows with their signs.

use std::cmp::Ordering;
use std::hash::Hash;
use std::sync::Arc;

use hashbrown::Equivalent;
use pyo3::prelude::*;
use pyo3::types::{PyAny, PyBool, PyList, PyTuple};

use crate::aggregate::Candidates;
use crate::call_memo::{call_key, CallMemo, CallRows};
use crate::convert::{repr_row, PyStrings};
use crate::engine::{Failure, Out};
use crate::index::Index;
use crate::program::{Cmp, Expr, Pattern, Plan, Step};
use crate::row::{Key, Row, RowOf, RowSet, Values};
use crate::storage::Relation;
use crate::value::{arithmetic, compare, negate, Interner, Ordered, Value, ValueError};
use crate::waits::{UntilRead, WaitChanges};

pub(crate) enum ExecError {
    Value(ValueError),
    Python(PyErr),
}

impl From<ValueError> for ExecError {
    fn from(e: ValueError) -> Self {
        ExecError::Value(e)
    }
}

pub struct Function {
    pub name: String,
    /// None once Python's cycle collector has cleared the core (`Core.__clear__`): the engine is
    /// then unreachable, so no run can call it, but a call would fail cleanly.
    pub callable: Option<Py<PyAny>>,
    pub outputs: usize,
}

pub(crate) fn rule_failure(rule: usize, err: ExecError) -> Failure {
    match err {
        ExecError::Value(v) => Failure::Rule { rule, kind: v.kind.to_string(), message: v.message },
        ExecError::Python(error) => Failure::RulePython { rule, error },
    }
}

/// A relation as one plan step reads it: new contents, or old ones (its rows minus those entering
/// this round plus those leaving it), minus DRed's hidden rows.
pub(crate) struct View<'a> {
    pub(crate) rel: &'a Relation,
    pub(crate) hidden: Option<&'a RowSet>,
    pub(crate) entering: Option<&'a RowSet>,
    pub(crate) leaving: Option<&'a RowSet>,
    pub(crate) leaving_index: Option<&'a Index>,
}

impl View<'_> {
    /// Whether `row` (a stored row, or values standing for one) is left out of this view.
    pub(crate) fn excluded<R: Hash + Equivalent<Row> + ?Sized>(&self, row: &R) -> bool {
        self.hidden.is_some_and(|h| h.contains(row)) || self.entering.is_some_and(|h| h.contains(row))
    }

    pub(crate) fn has(&self, row: &RowOf) -> bool {
        (self.rel.rows.contains(row) && !self.excluded(row)) || self.leaving.is_some_and(|s| s.contains(row))
    }
}

pub(crate) struct Exec<'a, 'py> {
    pub(crate) plan: &'a Plan,
    pub(crate) views: Vec<View<'a>>,
    pub(crate) functions: &'a [Function],
    pub(crate) py: Python<'py>,
    pub(crate) until: Option<UntilRead<'a>>,
}

pub(crate) struct ExecState<'a> {
    pub(crate) strings: &'a mut Interner,
    pub(crate) pystrings: &'a mut PyStrings,
    pub(crate) calls: &'a mut CallMemo,
    pub(crate) out: &'a mut Out,
    pub(crate) fired: u64,
    pub(crate) regs: Vec<Value>,
    pub(crate) waits: Option<&'a mut WaitChanges>,
}

impl<'a> ExecState<'a> {
    pub(crate) fn new(
        strings: &'a mut Interner,
        pystrings: &'a mut PyStrings,
        calls: &'a mut CallMemo,
        out: &'a mut Out,
        slots: usize,
        waits: Option<&'a mut WaitChanges>,
    ) -> Self {
        ExecState { strings, pystrings, calls, out, fired: 0, regs: vec![Value::Int(0); slots], waits }
    }
}

impl Exec<'_, '_> {
    pub(crate) fn eval(&self, expr: &Expr, st: &mut ExecState) -> Result<Value, ValueError> {
        match expr {
            Expr::Var(slot) => Ok(st.regs[*slot]),
            Expr::Const(v) => Ok(*v),
            Expr::Bin(op, l, r) => {
                let a = self.eval(l, st)?;
                let b = self.eval(r, st)?;
                arithmetic(*op, a, b, st.strings)
            }
            Expr::Neg(x) => negate(self.eval(x, st)?),
        }
    }

    /// An expression as it is used: arithmetic that yields NaN fails the rule.
    pub(crate) fn top(&self, expr: &Expr, st: &mut ExecState) -> Result<Value, ValueError> {
        let v = self.eval(expr, st)?;
        if expr.computes() && v.is_nan() {
            return Err(ValueError::new("ValueError", "arithmetic produced NaN"));
        }
        Ok(v)
    }

    /// The values of `exprs`, written into `out` in place: a key returned by value is a
    /// 160-byte copy per lookup, and variables (nearly every key) need no evaluation.
    pub(crate) fn values(&self, exprs: &[Expr], st: &mut ExecState, out: &mut Key) -> Result<(), ValueError> {
        out.clear();
        for e in exprs {
            let value = match e {
                Expr::Var(slot) => st.regs[*slot],
                Expr::Const(v) => *v,
                _ => self.top(e, st)?,
            };
            out.push(value);
        }
        Ok(())
    }

    pub(crate) fn bind<R: Values + ?Sized>(
        &self,
        pattern: &Pattern,
        row: &R,
        st: &mut ExecState,
    ) -> Result<bool, ExecError> {
        for &(position, slot) in pattern.binds.iter() {
            st.regs[slot] = row.at(position);
        }
        for (position, expr) in pattern.tests.iter() {
            if row.at(*position) != self.top(expr, st)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    pub(crate) fn matched<R: Values + ?Sized>(
        &self,
        pattern: &Pattern,
        row: &R,
        i: usize,
        sign: i64,
        st: &mut ExecState,
    ) -> Result<(), ExecError> {
        if self.bind(pattern, row, st)? {
            self.step(i + 1, sign, st)?;
        }
        Ok(())
    }

    pub(crate) fn step(&self, i: usize, sign: i64, st: &mut ExecState) -> Result<(), ExecError> {
        let Some(step) = self.plan.steps.get(i) else {
            return self.emit(sign, st);
        };
        match step {
            Step::Delta { .. } => unreachable!("the delta is bound before the first step"),
            Step::Test { op, left, right } => {
                let a = self.top(left, st)?;
                let b = self.top(right, st)?;
                let holds = match op {
                    Cmp::Eq => a == b,
                    Cmp::Ne => a != b,
                    _ => {
                        let order = compare(a, b, op.symbol(), st.strings)?;
                        match op {
                            Cmp::Lt => order == Ordering::Less,
                            Cmp::Le => order != Ordering::Greater,
                            Cmp::Gt => order == Ordering::Greater,
                            _ => order != Ordering::Less,
                        }
                    }
                };
                if holds {
                    self.step(i + 1, sign, st)?;
                }
            }
            Step::Assign { slot, expr } => {
                st.regs[*slot] = self.top(expr, st)?;
                self.step(i + 1, sign, st)?;
            }
            Step::Has { view, args, negated } => {
                let mut values = Key::new();
                self.values(args, st, &mut values)?;
                if self.views[*view].has(&RowOf::new(&values)) != *negated {
                    self.step(i + 1, sign, st)?;
                }
            }
            Step::Lookup { view, index, key, pattern } => {
                let mut wanted = Key::new();
                self.values(key, st, &mut wanted)?;
                let v = &self.views[*view];
                if let Some(bucket) = v.rel.get(*index, &wanted) {
                    bucket.try_for_each(|row| {
                        if v.excluded(row) {
                            return Ok(());
                        }
                        self.matched(pattern, &row.packed(), i, sign, st)
                    })?;
                }
                if let Some(bucket) = v.leaving_index.and_then(|index| index.get(&wanted)) {
                    bucket.try_for_each(|row| self.matched(pattern, &row.packed(), i, sign, st))?;
                }
            }
            Step::Scan { view, pattern } => {
                let v = &self.views[*view];
                for row in v.rel.rows.iter() {
                    if !v.excluded(row) {
                        self.matched(pattern, &row.packed(), i, sign, st)?;
                    }
                }
                if let Some(rows) = v.leaving {
                    for row in rows {
                        self.matched(pattern, &row.packed(), i, sign, st)?;
                    }
                }
            }
            Step::Call { function, inputs, pattern } => {
                let mut args = Key::new();
                self.values(inputs, st, &mut args)?;
                let key = call_key(*function, &args);
                let rows = match st.calls.get(&key, sign < 0) {
                    Some(rows) => rows,
                    None => {
                        let rows = Arc::new(self.call(*function, &args, st)?);
                        if rows.rows <= 1 {
                            st.calls.insert(&key, rows.clone());
                        }
                        rows
                    }
                };
                for r in 0..rows.rows {
                    self.matched(pattern, rows.row(r), i, sign, st)?;
                }
            }
            Step::Until { group, bound, key, delta_before, entering } => {
                if !self.waits(group, bound, key, *delta_before, entering, sign, st)? {
                    self.step(i + 1, sign, st)?;
                }
            }
        }
        Ok(())
    }

    /// Whether a derivation waits (see `pycore._Waits`): a new one (made by a row entering this
    /// round) if its group's best candidate is below its bound, one that existed if it was waiting.
    /// Plans whose delta comes before `until` record what begins or stops waiting.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn waits(
        &self,
        group: &[Expr],
        bound: &Expr,
        key: &[Expr],
        delta_before: bool,
        entering: &[(usize, Vec<Expr>)],
        sign: i64,
        st: &mut ExecState,
    ) -> Result<bool, ExecError> {
        let until = self.until.as_ref().expect("a plan with until reads what waits");
        let mut g = Key::new();
        self.values(group, st, &mut g)?;
        let b = self.top(bound, st)?;
        // Whether the group's best is below the bound, and whether the binding is recorded waiting:
        // where they agree (nearly always; a program whose bound is 0 never waits) the answer needs
        // no look at whether the binding is new. A comparison error counts only where it decides.
        let below = match until.aggregate.groups.get(&RowOf::new(&g)).and_then(|x| match &x.candidates {
            Candidates::Ordered(m) => m.first().map(Ordered::value),
            Candidates::Counted(_) => None,
        }) {
            Some(best) => compare(best, b, "<", st.strings).map(|order| order == Ordering::Less),
            None => Ok(false),
        };
        let mut k = Key::new();
        let group_keys = until.waiting.and_then(|w| w.get(&RowOf::new(&g)));
        if group_keys.is_some() {
            self.values(key, st, &mut k)?;
        }
        let recorded = group_keys.is_some_and(|keys| keys.contains_key(&RowOf::new(&k)));
        let waits = if below.as_ref().is_ok_and(|&below| below == recorded) {
            recorded
        } else if self.is_new(delta_before, entering, sign, st)? {
            below?
        } else {
            recorded
        };
        if waits && delta_before {
            if group_keys.is_none() {
                self.values(key, st, &mut k)?;
            }
            let changes = st.waits.as_deref_mut().expect("a plan with until records what waits");
            let entry = changes.entry((Row::new(&g), Row::new(&k))).or_insert((0, b));
            entry.0 += sign;
        }
        Ok(waits)
    }

    /// Whether a binding is made by a row entering this round: the delta's, if it comes before
    /// `until`, or one read in its new contents there.
    pub(crate) fn is_new(
        &self,
        delta_before: bool,
        entering: &[(usize, Vec<Expr>)],
        sign: i64,
        st: &mut ExecState,
    ) -> Result<bool, ExecError> {
        if delta_before && sign > 0 {
            return Ok(true);
        }
        let until = self.until.as_ref().expect("a plan with until reads what waits");
        let mut values = Key::new();
        for ((_, args), plus) in entering.iter().zip(&until.entering) {
            if let Some(plus) = plus {
                self.values(args, st, &mut values)?;
                if plus.contains(&RowOf::new(&values)) {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    pub(crate) fn emit(&self, sign: i64, st: &mut ExecState) -> Result<(), ExecError> {
        let mut values = Key::new();
        self.values(&self.plan.group, st, &mut values)?;
        if let (Some((position, bound)), true) = (&self.plan.bounded, sign > 0) {
            let b = self.top(bound, st)?;
            if compare(values[*position], b, "<", st.strings)? == Ordering::Less {
                return Err(ExecError::Value(ValueError::new(
                    "ValueError",
                    format!(
                        "derived {} below its until bound {}; the bound must never exceed the value",
                        crate::convert::repr(values[*position], st.strings),
                        crate::convert::repr(b, st.strings)
                    ),
                )));
            }
        }
        match &self.plan.aggregate {
            None => {
                // a head row derived before in this round (most of a search space's inputs are
                // wanted by many parents) is counted again without packing it anew
                let row = RowOf::new(&values);
                match st.out.plain.get_mut(&row) {
                    Some(count) => *count += sign,
                    None => {
                        st.out.plain.insert(row.to_row(), sign);
                    }
                }
            }
            Some(expr) => {
                let value = self.top(expr, st)?;
                *st.out.aggregate.entry((Row::new(&values), value)).or_insert(0) += sign;
            }
        }
        st.fired += 1;
        Ok(())
    }

    pub(crate) fn call(&self, function: usize, args: &[Value], st: &mut ExecState) -> Result<CallRows, ExecError> {
        let f = &self.functions[function];
        let py = self.py;
        let Some(callable) = &f.callable else {
            return Err(ExecError::Value(ValueError::new(
                "RuntimeError",
                format!("function {} was released by the garbage collector", f.name),
            )));
        };
        let items: Vec<Bound<'_, PyAny>> = args.iter().map(|&v| st.pystrings.object(py, v, st.strings)).collect();
        let tuple = PyTuple::new(py, items).map_err(ExecError::Python)?;
        let result = callable.bind(py).call1(tuple).map_err(ExecError::Python)?;
        if f.outputs == 0 {
            if let Ok(b) = result.downcast::<PyBool>() {
                return Ok(CallRows { rows: b.is_true() as usize, width: 0, values: Box::new([]) });
            }
        }
        if result.is_none() {
            return Err(self.bad_result(function, args, st, "returned None; return an iterable of rows".into()));
        }
        let mut rows = 0;
        let mut values = Vec::new();
        if let Ok(list) = result.downcast::<PyList>() {
            values.reserve(list.len() * f.outputs);
            for item in list.iter() {
                self.result_row(function, args, &item, &mut values, st)?;
                rows += 1;
            }
        } else {
            for item in result.try_iter().map_err(ExecError::Python)? {
                let item = item.map_err(ExecError::Python)?;
                self.result_row(function, args, &item, &mut values, st)?;
                rows += 1;
            }
        }
        Ok(CallRows { rows, width: f.outputs, values: values.into_boxed_slice() })
    }

    /// Append one result row's values to `values`.
    pub(crate) fn result_row(
        &self,
        function: usize,
        args: &[Value],
        item: &Bound<'_, PyAny>,
        values: &mut Vec<Value>,
        st: &mut ExecState,
    ) -> Result<(), ExecError> {
        let outputs = self.functions[function].outputs;
        if let Ok(t) = item.downcast::<PyTuple>() {
            if t.len() == outputs {
                return self.push_values(function, args, t.iter(), values, st);
            }
        } else if let Ok(l) = item.downcast::<PyList>() {
            if l.len() == outputs {
                return self.push_values(function, args, l.iter(), values, st);
            }
        }
        let shown = item.repr().map(|r| r.to_string()).unwrap_or_default();
        let message = format!("produced {shown}; each row must be a tuple of {outputs} values");
        Err(self.bad_result(function, args, st, message))
    }

    pub(crate) fn push_values<'py>(
        &self,
        function: usize,
        args: &[Value],
        items: impl Iterator<Item = Bound<'py, PyAny>>,
        values: &mut Vec<Value>,
        st: &mut ExecState,
    ) -> Result<(), ExecError> {
        for v in items {
            match st.pystrings.value(&v, st.strings) {
                Ok(value) => values.push(value),
                Err(what) => return Err(self.bad_result(function, args, st, format!("produced {what}"))),
            }
        }
        Ok(())
    }

    pub(crate) fn bad_result(&self, function: usize, args: &[Value], st: &ExecState, message: String) -> ExecError {
        let name = &self.functions[function].name;
        ExecError::Value(ValueError::new(
            "EvaluationError",
            format!("function '{name}{}' {message}", repr_row(args, st.strings)),
        ))
    }
}
