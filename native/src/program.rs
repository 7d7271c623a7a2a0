//! The compiled program the Python front end hands over (see `reopt/datalog/planner.py` for the
//! tuple format), read once into Rust structures.

use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyAny, PyTuple};

use crate::aggregate::AggFunc;
use crate::convert::value_from_py;
use crate::value::{Interner, Value};

pub enum Expr {
    Var(usize),
    Const(Value),
    Bin(u8, Box<Expr>, Box<Expr>),
    Neg(Box<Expr>),
}

impl Expr {
    /// Whether the expression computes (its result must then pass the NaN check).
    pub fn computes(&self) -> bool {
        matches!(self, Expr::Bin(..) | Expr::Neg(_))
    }
}

/// How a step's row binds its atom: the registers its positions fill, then the positions that
/// must equal an expression. Binding all first keeps the meaning of the written order: a test reads
/// only variables bound before its position (a repeated variable is bound once and tested at its
/// other positions), and the tests still run in order. Positions a lookup matched are neither.
pub struct Pattern {
    pub binds: Box<[(usize, usize)]>,
    pub tests: Box<[(usize, Expr)]>,
}

#[derive(Clone, Copy)]
pub enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Cmp {
    pub fn symbol(self) -> &'static str {
        match self {
            Cmp::Eq => "==",
            Cmp::Ne => "!=",
            Cmp::Lt => "<",
            Cmp::Le => "<=",
            Cmp::Gt => ">",
            Cmp::Ge => ">=",
        }
    }
}

pub enum Step {
    Delta {
        negated: bool,
        pattern: Pattern,
    },
    Test {
        op: Cmp,
        left: Expr,
        right: Expr,
    },
    Assign {
        slot: usize,
        expr: Expr,
    },
    Has {
        view: usize,
        args: Vec<Expr>,
        negated: bool,
    },
    Lookup {
        view: usize,
        index: usize,
        key: Vec<Expr>,
        pattern: Pattern,
    },
    Scan {
        view: usize,
        pattern: Pattern,
    },
    Call {
        function: usize,
        inputs: Vec<Expr>,
        pattern: Pattern,
    },
    /// A rule's `until`: the derivation goes on unless it waits (see `reopt/datalog/planner.py`).
    /// `entering` lists the literals before `until` read in their new contents, as (relation, args).
    Until {
        group: Vec<Expr>,
        bound: Expr,
        key: Vec<Expr>,
        delta_before: bool,
        entering: Vec<(usize, Vec<Expr>)>,
    },
}

pub struct Plan {
    pub delta: Option<usize>,
    pub views: Vec<(usize, bool)>, // (relation, reads the old contents)
    pub steps: Vec<Step>,
    pub group: Vec<Expr>,
    pub aggregate: Option<Expr>,
    pub slots: usize,
    /// A rule with `until`: the head column its bound bounds from below, and the bound.
    pub bounded: Option<(usize, Expr)>,
}

/// What keeps a rule's `until` exact: the min aggregate its derivations wait on, where a head row
/// holds that aggregate's group and value, and the plan that makes a waiting derivation.
pub struct Deferral {
    pub aggregate: usize,
    pub group_positions: Vec<usize>,
    pub value_position: usize,
    pub resume: Plan,
}

pub struct Rule {
    pub id: usize,
    pub head: usize,
    pub plans: Vec<Plan>,
    pub seed: Option<Plan>,
    pub deferral: Option<Deferral>,
}

pub struct Stratum {
    pub relations: Vec<usize>,
    pub dred: bool,
    pub inputs: Vec<usize>,
    pub rules: Vec<Rule>,
    pub ordered: Vec<usize>, // .ordered min aggregates, whose group changes are held and released in value order
    pub goals: Vec<(usize, usize)>, // (.ordered aggregate, the relation listing its goal groups)
    pub offsets: Vec<(usize, usize)>, // (.ordered aggregate, its heuristic: `up to ... plus h`)
}

/// What the front end compiled, as the core reads it: relations, strata, and the strings their
/// constants name (each engine starts its own string table from these).
pub struct Compiled {
    pub rels: Arc<Vec<RelationInfo>>,
    pub strata: Arc<Vec<Stratum>>,
    pub strings: Interner,
}

pub struct RelationInfo {
    pub name: String,
    pub arity: usize,
    pub aggregate: Option<(AggFunc, usize)>,
    pub memo_of: Option<usize>,
    pub memo_keys: usize,
    pub patterns: Vec<Vec<usize>>,
}

fn bad(what: &str) -> PyErr {
    PyValueError::new_err(format!("malformed compiled program: {what}"))
}

pub fn read_relation(item: &Bound<'_, PyAny>) -> PyResult<RelationInfo> {
    let (name, arity, func, position, memo_of, memo_keys, patterns): (
        String,
        usize,
        String,
        i64,
        i64,
        usize,
        Vec<Vec<usize>>,
    ) = item.extract()?;
    let aggregate = match func.as_str() {
        "" => None,
        "min" => Some((AggFunc::Min, position as usize)),
        "max" => Some((AggFunc::Max, position as usize)),
        "count" => Some((AggFunc::Count, position as usize)),
        "sum" => Some((AggFunc::Sum, position as usize)),
        other => return Err(bad(&format!("aggregate {other}"))),
    };
    Ok(RelationInfo {
        name,
        arity,
        aggregate,
        memo_of: (memo_of >= 0).then_some(memo_of as usize),
        memo_keys,
        patterns,
    })
}

/// Reads compiled strata; `index_of(relation, positions)` resolves a lookup to its index.
pub struct Reader<'a> {
    pub strings: &'a mut Interner,
    pub index_of: &'a dyn Fn(usize, &[usize]) -> Option<usize>,
}

impl Reader<'_> {
    pub fn stratum(&mut self, item: &Bound<'_, PyAny>) -> PyResult<Stratum> {
        let t = item.downcast::<PyTuple>()?;
        let relations: Vec<usize> = t.get_item(0)?.extract()?;
        let method: String = t.get_item(1)?.extract()?;
        let inputs: Vec<usize> = t.get_item(2)?.extract()?;
        let ordered: Vec<usize> = t.get_item(4)?.extract()?;
        let goals: Vec<(usize, usize)> = t.get_item(5)?.extract()?;
        let offsets: Vec<(usize, usize)> = t.get_item(6)?.extract()?;
        let mut rules = Vec::new();
        for rule in t.get_item(3)?.try_iter()? {
            let rule = rule?;
            let r = rule.downcast::<PyTuple>()?;
            let id: usize = r.get_item(0)?.extract()?;
            let head: usize = r.get_item(1)?.extract()?;
            let mut plans = Vec::new();
            for plan in r.get_item(2)?.try_iter()? {
                plans.push(self.plan(&plan?)?);
            }
            let seed_item = r.get_item(3)?;
            let seed = if seed_item.is_none() { None } else { Some(self.plan(&seed_item)?) };
            let deferral_item = r.get_item(4)?;
            let deferral = if deferral_item.is_none() {
                None
            } else {
                let d = deferral_item.downcast::<PyTuple>()?;
                Some(Deferral {
                    aggregate: d.get_item(0)?.extract()?,
                    group_positions: d.get_item(1)?.extract()?,
                    value_position: d.get_item(2)?.extract()?,
                    resume: self.plan(&d.get_item(3)?)?,
                })
            };
            rules.push(Rule { id, head, plans, seed, deferral });
        }
        Ok(Stratum { relations, dred: method == "dred", inputs, rules, ordered, goals, offsets })
    }

    fn plan(&mut self, item: &Bound<'_, PyAny>) -> PyResult<Plan> {
        let t = item.downcast::<PyTuple>()?;
        let delta: i64 = t.get_item(0)?.extract()?;
        let views: Vec<(usize, bool)> = t.get_item(1)?.extract()?;
        let functions: Vec<usize> = t.get_item(2)?.extract()?;
        let mut steps = Vec::new();
        for step in t.get_item(3)?.try_iter()? {
            steps.push(self.step(&step?, &views, &functions)?);
        }
        let group = self.exprs(&t.get_item(4)?)?;
        let aggregate_item = t.get_item(5)?;
        let aggregate = if aggregate_item.is_none() { None } else { Some(self.expr(&aggregate_item)?) };
        let slots: usize = t.get_item(6)?.extract()?;
        let bounded_item = t.get_item(7)?;
        let bounded = if bounded_item.is_none() {
            None
        } else {
            let b = bounded_item.downcast::<PyTuple>()?;
            Some((b.get_item(0)?.extract()?, self.expr(&b.get_item(1)?)?))
        };
        Ok(Plan { delta: (delta >= 0).then_some(delta as usize), views, steps, group, aggregate, slots, bounded })
    }

    fn step(&mut self, item: &Bound<'_, PyAny>, views: &[(usize, bool)], functions: &[usize]) -> PyResult<Step> {
        let t = item.downcast::<PyTuple>()?;
        let kind: String = t.get_item(0)?.extract()?;
        Ok(match kind.as_str() {
            "delta" => Step::Delta { negated: t.get_item(1)?.extract()?, pattern: self.pattern(&t.get_item(2)?)? },
            "test" => {
                let op: String = t.get_item(1)?.extract()?;
                let op = match op.as_str() {
                    "=" => Cmp::Eq,
                    "!=" => Cmp::Ne,
                    "<" => Cmp::Lt,
                    "<=" => Cmp::Le,
                    ">" => Cmp::Gt,
                    ">=" => Cmp::Ge,
                    other => return Err(bad(&format!("comparison {other}"))),
                };
                Step::Test { op, left: self.expr(&t.get_item(2)?)?, right: self.expr(&t.get_item(3)?)? }
            }
            "assign" => Step::Assign { slot: t.get_item(1)?.extract()?, expr: self.expr(&t.get_item(2)?)? },
            "has" => Step::Has {
                view: t.get_item(1)?.extract()?,
                args: self.exprs(&t.get_item(2)?)?,
                negated: t.get_item(3)?.extract()?,
            },
            "lookup" => {
                let view: usize = t.get_item(1)?.extract()?;
                let positions: Vec<usize> = t.get_item(2)?.extract()?;
                let relation = views.get(view).ok_or_else(|| bad("view"))?.0;
                let index = (self.index_of)(relation, &positions).ok_or_else(|| bad("lookup without an index"))?;
                Step::Lookup { view, index, key: self.exprs(&t.get_item(3)?)?, pattern: self.pattern(&t.get_item(4)?)? }
            }
            "scan" => Step::Scan { view: t.get_item(1)?.extract()?, pattern: self.pattern(&t.get_item(2)?)? },
            "call" => {
                let local: usize = t.get_item(1)?.extract()?;
                Step::Call {
                    function: *functions.get(local).ok_or_else(|| bad("function"))?,
                    inputs: self.exprs(&t.get_item(2)?)?,
                    pattern: self.pattern(&t.get_item(3)?)?,
                }
            }
            "until" => {
                let flags = t.get_item(4)?;
                let flags = flags.downcast::<PyTuple>()?;
                let mut entering = Vec::new();
                for atom in flags.get_item(1)?.try_iter()? {
                    let atom = atom?;
                    let a = atom.downcast::<PyTuple>()?;
                    entering.push((a.get_item(0)?.extract()?, self.exprs(&a.get_item(1)?)?));
                }
                Step::Until {
                    group: self.exprs(&t.get_item(1)?)?,
                    bound: self.expr(&t.get_item(2)?)?,
                    key: self.exprs(&t.get_item(3)?)?,
                    delta_before: flags.get_item(0)?.extract()?,
                    entering,
                }
            }
            other => return Err(bad(&format!("step {other}"))),
        })
    }

    fn pattern(&mut self, item: &Bound<'_, PyAny>) -> PyResult<Pattern> {
        let (mut binds, mut tests) = (Vec::new(), Vec::new());
        for (position, entry) in item.try_iter()?.enumerate() {
            let entry = entry?;
            let t = entry.downcast::<PyTuple>()?;
            let kind: String = t.get_item(0)?.extract()?;
            match kind.as_str() {
                "bind" => binds.push((position, t.get_item(1)?.extract()?)),
                "test" => tests.push((position, self.expr(&t.get_item(1)?)?)),
                "skip" => {}
                other => return Err(bad(&format!("pattern {other}"))),
            }
        }
        Ok(Pattern { binds: binds.into(), tests: tests.into() })
    }

    fn exprs(&mut self, item: &Bound<'_, PyAny>) -> PyResult<Vec<Expr>> {
        let mut out = Vec::new();
        for e in item.try_iter()? {
            out.push(self.expr(&e?)?);
        }
        Ok(out)
    }

    fn expr(&mut self, item: &Bound<'_, PyAny>) -> PyResult<Expr> {
        let t = item.downcast::<PyTuple>()?;
        let kind: String = t.get_item(0)?.extract()?;
        Ok(match kind.as_str() {
            "var" => Expr::Var(t.get_item(1)?.extract()?),
            "const" => {
                let value = value_from_py(&t.get_item(1)?, self.strings)
                    .map_err(|e| PyValueError::new_err(format!("a constant of the program: {e}")))?;
                Expr::Const(value)
            }
            "bin" => {
                let op: String = t.get_item(1)?.extract()?;
                let op = match op.as_str() {
                    "+" | "-" | "*" | "/" | "%" => op.as_bytes()[0],
                    other => return Err(bad(&format!("operator {other}"))),
                };
                Expr::Bin(op, Box::new(self.expr(&t.get_item(2)?)?), Box::new(self.expr(&t.get_item(3)?)?))
            }
            "neg" => Expr::Neg(Box::new(self.expr(&t.get_item(1)?)?)),
            other => return Err(bad(&format!("expression {other}"))),
        })
    }
}
