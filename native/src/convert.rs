//! Values across the boundary: Python objects in, Python objects out, and Python-like reprs for
//! error messages.

use pyo3::prelude::*;
use pyo3::types::{PyAny, PyBool, PyFloat, PyInt, PyString, PyTuple};

use smallvec::SmallVec;

use crate::row::Row;
use crate::value::{Interner, Value};

/// A Python object as a value; the error says what the native backend cannot hold.
pub fn value_from_py(obj: &Bound<'_, PyAny>, strings: &mut Interner) -> Result<Value, String> {
    if let Ok(b) = obj.downcast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if obj.is_instance_of::<PyInt>() {
        return obj
            .extract::<i64>()
            .map(Value::Int)
            .map_err(|_| "an integer that does not fit in 64 bits (the native backend's integers)".to_string());
    }
    if let Ok(f) = obj.downcast::<PyFloat>() {
        let v = f.value();
        if v.is_nan() {
            return Err("NaN, which no relation may hold".to_string());
        }
        return Ok(Value::Float(v));
    }
    if let Ok(s) = obj.downcast::<PyString>() {
        let text = s.to_str().map_err(|_| "a string that is not valid Unicode".to_string())?;
        return Ok(Value::Str(strings.intern(text)));
    }
    let type_name = obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".to_string());
    Err(format!("a value of type '{type_name}' (the native backend holds ints, floats, strings and bools)"))
}

pub fn row_from_py(obj: &Bound<'_, PyAny>, strings: &mut Interner, pystrings: &mut PyStrings) -> Result<Row, String> {
    let mut values: SmallVec<[Value; 8]> = SmallVec::new();
    // the engine hands over tuples; reading one needs no iterator object
    if let Ok(tuple) = obj.downcast::<PyTuple>() {
        for item in tuple.iter_borrowed() {
            values.push(pystrings.value(&item, strings)?);
        }
    } else {
        for item in obj.try_iter().map_err(|e| e.to_string())? {
            let item = item.map_err(|e| e.to_string())?;
            values.push(pystrings.value(&item, strings)?);
        }
    }
    Ok(Row::new(&values))
}

/// Slots of the cache of string objects already interned (a power of two).
const SEEN_SLOTS: usize = 256;

/// Strings both ways: Python string objects for interned strings, made once each, and the ids of
/// string objects seen coming in. Functions hand the same objects over again and again (the
/// optimizer's split returns its operators and properties as shared constants, thousands of times
/// a run), and a seen object's id is found by its address instead of by hashing its text.
#[derive(Default)]
pub struct PyStrings {
    cache: Vec<Option<Py<PyString>>>,
    seen: Vec<Option<(Py<PyString>, u32)>>,
}

impl PyStrings {
    /// A Python object as a value, as `value_from_py`, with strings looked up by object first. A slot
    /// holds a reference to its string, so the object outlives its entry and no other object can
    /// take its address while the entry stands.
    pub fn value(&mut self, obj: &Bound<'_, PyAny>, strings: &mut Interner) -> Result<Value, String> {
        let Ok(s) = obj.downcast::<PyString>() else {
            return value_from_py(obj, strings);
        };
        if self.seen.is_empty() {
            self.seen.resize_with(SEEN_SLOTS, || None);
        }
        let address = s.as_ptr() as usize;
        let slot = (address >> 4) & (SEEN_SLOTS - 1);
        if let Some((seen, id)) = &self.seen[slot] {
            if seen.as_ptr() as usize == address {
                return Ok(Value::Str(*id));
            }
        }
        let value = value_from_py(obj, strings)?;
        if let Value::Str(id) = value {
            self.seen[slot] = Some((s.clone().unbind(), id));
        }
        Ok(value)
    }

    pub fn object<'py>(&mut self, py: Python<'py>, v: Value, strings: &Interner) -> Bound<'py, PyAny> {
        match v {
            Value::Int(i) => i.into_pyobject(py).expect("an i64 converts").into_any(),
            Value::Float(f) => PyFloat::new(py, f).into_any(),
            Value::Bool(b) => PyBool::new(py, b).to_owned().into_any(),
            Value::Str(id) => {
                let i = id as usize;
                if self.cache.len() <= i {
                    self.cache.resize_with(strings.len().max(i + 1), || None);
                }
                match &self.cache[i] {
                    Some(s) => s.bind(py).clone().into_any(),
                    None => {
                        let s = PyString::new(py, strings.get(id));
                        self.cache[i] = Some(s.clone().unbind());
                        s.into_any()
                    }
                }
            }
        }
    }

    pub fn row<'py>(&mut self, py: Python<'py>, row: &[Value], strings: &Interner) -> PyResult<Bound<'py, PyTuple>> {
        let items: Vec<Bound<'py, PyAny>> = row.iter().map(|&v| self.object(py, v, strings)).collect();
        PyTuple::new(py, items)
    }
}

/// A value as Python's `repr` would show it (close enough for messages).
pub fn repr(v: Value, strings: &Interner) -> String {
    match v {
        Value::Int(i) => i.to_string(),
        Value::Float(f) => {
            if f.is_infinite() {
                if f > 0.0 {
                    "inf".into()
                } else {
                    "-inf".into()
                }
            } else if f == f.trunc() && f.abs() < 1e16 {
                format!("{f:.1}")
            } else {
                format!("{f}")
            }
        }
        Value::Bool(b) => {
            if b {
                "True".into()
            } else {
                "False".into()
            }
        }
        Value::Str(id) => format!("'{}'", strings.get(id).replace('\\', "\\\\").replace('\'', "\\'")),
    }
}

pub fn repr_row(row: &[Value], strings: &Interner) -> String {
    let items: Vec<String> = row.iter().map(|&v| repr(v, strings)).collect();
    if items.len() == 1 {
        format!("({},)", items[0])
    } else {
        format!("({})", items.join(", "))
    }
}
