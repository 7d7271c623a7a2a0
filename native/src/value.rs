//! Values with Python's semantics: `1 == 1.0 == True` (and they hash alike), exact comparison
//! between integers and floats, true division, floor modulo, `str + str`. NaN is never stored:
//! arithmetic that yields it fails the rule, as in the Python backend.

use std::cmp::Ordering;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use rustc_hash::FxHashMap;

/// A value as the engine stores it. Strings are interned per engine (`Interner`), so a value is
/// 16 bytes, `Copy`, and string equality is an integer comparison.
#[derive(Clone, Copy, Debug)]
pub enum Value {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(u32),
}

/// Why an operation failed, named after the Python exception the Python backend raises.
#[derive(Debug, Clone, PartialEq)]
pub struct ValueError {
    pub kind: &'static str,
    pub message: String,
}

impl ValueError {
    pub fn new(kind: &'static str, message: impl Into<String>) -> Self {
        ValueError { kind, message: message.into() }
    }
}

#[derive(Clone, Copy, Debug)]
enum Num {
    I(i64),
    F(f64),
}

const TWO_63: f64 = 9_223_372_036_854_775_808.0;

impl Value {
    fn num(self) -> Option<Num> {
        match self {
            Value::Int(i) => Some(Num::I(i)),
            Value::Bool(b) => Some(Num::I(b as i64)),
            Value::Float(f) => Some(Num::F(f)),
            Value::Str(_) => None,
        }
    }

    pub fn type_name(self) -> &'static str {
        match self {
            Value::Int(_) => "int",
            Value::Float(_) => "float",
            Value::Bool(_) => "bool",
            Value::Str(_) => "str",
        }
    }

    /// The kind (two bits) and the 64 bits a row stores for the value (see `Row`); `from_parts`
    /// makes it whole again.
    #[inline]
    pub fn parts(self) -> (u8, u64) {
        match self {
            Value::Int(i) => (0, i as u64),
            Value::Float(f) => (1, f.to_bits()),
            Value::Bool(b) => (2, b as u64),
            Value::Str(s) => (3, s as u64),
        }
    }

    #[inline]
    pub fn from_parts(kind: u8, bits: u64) -> Value {
        match kind {
            0 => Value::Int(bits as i64),
            1 => Value::Float(f64::from_bits(bits)),
            2 => Value::Bool(bits != 0),
            _ => Value::Str(bits as u32),
        }
    }

    pub fn is_nan(self) -> bool {
        matches!(self, Value::Float(f) if f.is_nan())
    }
}

/// The float as an i64 when it is integral and in range (then it equals, and hashes as, that int).
fn integral(f: f64) -> Option<i64> {
    if f == f.trunc() && (-TWO_63..TWO_63).contains(&f) {
        Some(f as i64)
    } else {
        None
    }
}

/// Exact comparison of an integer with a (non-NaN) float, as Python does it.
fn cmp_int_float(a: i64, b: f64) -> Ordering {
    if b >= TWO_63 {
        return Ordering::Less;
    }
    if b < -TWO_63 {
        return Ordering::Greater;
    }
    let floor = b.floor();
    match a.cmp(&(floor as i64)) {
        Ordering::Equal if b > floor => Ordering::Less,
        other => other,
    }
}

fn num_cmp(a: Num, b: Num) -> Ordering {
    match (a, b) {
        (Num::I(x), Num::I(y)) => x.cmp(&y),
        (Num::F(x), Num::F(y)) => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
        (Num::I(x), Num::F(y)) => cmp_int_float(x, y),
        (Num::F(x), Num::I(y)) => cmp_int_float(y, x).reverse(),
    }
}

impl PartialEq for Value {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        // same-kind values (nearly every comparison an index or a join makes) compare directly;
        // f64's == is Python's for floats too (0.0 == -0.0, and NaN is never stored)
        match (*self, *other) {
            (Value::Int(a), Value::Int(b)) => return a == b,
            (Value::Str(a), Value::Str(b)) => return a == b,
            (Value::Float(a), Value::Float(b)) => return a == b,
            _ => {}
        }
        match (self.num(), other.num()) {
            (Some(a), Some(b)) => num_cmp(a, b) == Ordering::Equal,
            (None, None) => matches!((self, other), (Value::Str(a), Value::Str(b)) if a == b),
            _ => false,
        }
    }
}

impl Eq for Value {}

impl Hash for Value {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match *self {
            Value::Int(i) => state.write_i64(i),
            Value::Bool(b) => state.write_i64(b as i64),
            Value::Float(f) => match integral(f) {
                Some(i) => state.write_i64(i),
                None => state.write_u64(f.to_bits() ^ 0x5bd1_e995_0000_0001),
            },
            Value::Str(s) => state.write_u64(s as u64 ^ 0x9e37_79b9_7f4a_7c15),
        }
    }
}

/// Per-engine string table; ids are never reused, so a `Value::Str` stays valid for the engine's life.
#[derive(Default, Clone)]
pub struct Interner {
    strings: Vec<Arc<str>>,
    ids: FxHashMap<Arc<str>, u32>,
}

impl Interner {
    pub fn intern(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        let id = self.strings.len() as u32;
        let shared: Arc<str> = Arc::from(s);
        self.strings.push(shared.clone());
        self.ids.insert(shared, id);
        id
    }

    pub fn get(&self, id: u32) -> &str {
        &self.strings[id as usize]
    }

    pub fn shared(&self, id: u32) -> Arc<str> {
        self.strings[id as usize].clone()
    }

    pub fn len(&self) -> usize {
        self.strings.len()
    }
}

/// Python's ordering (`<`): numbers numerically, strings by code point, anything else a TypeError.
pub fn compare(a: Value, b: Value, op: &str, strings: &Interner) -> Result<Ordering, ValueError> {
    match (a.num(), b.num(), a, b) {
        (Some(x), Some(y), _, _) => Ok(num_cmp(x, y)),
        (None, None, Value::Str(x), Value::Str(y)) => Ok(strings.get(x).cmp(strings.get(y))),
        _ => Err(ValueError::new(
            "TypeError",
            format!("'{op}' not supported between instances of '{}' and '{}'", a.type_name(), b.type_name()),
        )),
    }
}

fn overflow() -> ValueError {
    ValueError::new(
        "OverflowError",
        "integer result does not fit in 64 bits (the native backend's integers); use backend='python'",
    )
}

fn python_float_mod(x: f64, y: f64) -> f64 {
    let m = x % y;
    if m != 0.0 {
        if (y < 0.0) != (m < 0.0) {
            m + y
        } else {
            m
        }
    } else {
        0.0f64.copysign(y)
    }
}

/// `a op b` for `+ - * / %`, with Python's types and results.
pub fn arithmetic(op: u8, a: Value, b: Value, strings: &mut Interner) -> Result<Value, ValueError> {
    match (a.num(), b.num()) {
        (Some(p), Some(q)) => numeric(op, p, q),
        _ => match (op, a, b) {
            (b'+', Value::Str(x), Value::Str(y)) => {
                let joined = format!("{}{}", strings.get(x), strings.get(y));
                Ok(Value::Str(strings.intern(&joined)))
            }
            _ => Err(ValueError::new(
                "TypeError",
                format!("unsupported operand type(s) for {}: '{}' and '{}'", op as char, a.type_name(), b.type_name()),
            )),
        },
    }
}

pub fn negate(a: Value) -> Result<Value, ValueError> {
    match a {
        Value::Int(i) => i.checked_neg().map(Value::Int).ok_or_else(overflow),
        Value::Bool(b) => Ok(Value::Int(-(b as i64))),
        Value::Float(f) => Ok(Value::Float(-f)),
        Value::Str(_) => Err(ValueError::new("TypeError", "bad operand type for unary -: 'str'")),
    }
}

/// A value with a total order, for ordered aggregate candidates: numbers numerically, strings by
/// content. A group never mixes the two (checked before insertion, as Python would raise).
#[derive(Clone, Debug)]
pub enum Ordered {
    Num(Value),
    Str(Arc<str>, u32),
}

impl Ordered {
    pub fn new(v: Value, strings: &Interner) -> Ordered {
        match v {
            Value::Str(id) => Ordered::Str(strings.shared(id), id),
            other => Ordered::Num(other),
        }
    }

    pub fn value(&self) -> Value {
        match self {
            Ordered::Num(v) => *v,
            Ordered::Str(_, id) => Value::Str(*id),
        }
    }

    pub fn is_str(&self) -> bool {
        matches!(self, Ordered::Str(..))
    }
}

impl PartialEq for Ordered {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Ordered {}

impl PartialOrd for Ordered {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Ordered {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Ordered::Num(a), Ordered::Num(b)) => num_cmp(a.num().unwrap(), b.num().unwrap()),
            (Ordered::Str(a, _), Ordered::Str(b, _)) => a.cmp(b),
            (Ordered::Num(_), Ordered::Str(..)) => Ordering::Less,
            (Ordered::Str(..), Ordered::Num(_)) => Ordering::Greater,
        }
    }
}

/// Python's `math.fsum`: the correctly rounded sum of floats (Shewchuk's exact partials).
pub fn fsum(values: impl IntoIterator<Item = f64>) -> Result<f64, ValueError> {
    let mut partials: Vec<f64> = Vec::new();
    let mut special = 0.0f64;
    let mut inf_sum = 0.0f64;
    for mut x in values {
        if !x.is_finite() {
            if x.is_infinite() {
                inf_sum += x;
            }
            special += x;
            continue;
        }
        let mut kept = 0;
        for i in 0..partials.len() {
            let mut y = partials[i];
            if x.abs() < y.abs() {
                std::mem::swap(&mut x, &mut y);
            }
            let hi = x + y;
            let lo = y - (hi - x);
            if lo != 0.0 {
                partials[kept] = lo;
                kept += 1;
            }
            x = hi;
        }
        partials.truncate(kept);
        if !x.is_finite() {
            return Err(ValueError::new("OverflowError", "intermediate overflow in fsum"));
        }
        partials.push(x);
    }
    if special != 0.0 {
        if inf_sum.is_nan() {
            return Err(ValueError::new("ValueError", "-inf + inf in fsum"));
        }
        return Ok(special);
    }
    let mut n = partials.len();
    if n == 0 {
        return Ok(0.0);
    }
    n -= 1;
    let mut hi = partials[n];
    let mut lo = 0.0;
    while n > 0 {
        let x = hi;
        n -= 1;
        let y = partials[n];
        hi = x + y;
        let yr = hi - x;
        lo = y - yr;
        if lo != 0.0 {
            break;
        }
    }
    if n > 0 && ((lo < 0.0 && partials[n - 1] < 0.0) || (lo > 0.0 && partials[n - 1] > 0.0)) {
        let y = lo * 2.0;
        let x = hi + y;
        if y == x - hi {
            hi = x;
        }
    }
    Ok(hi)
}

/// Python's arithmetic on two numbers: ints stay ints (overflow is an error, as the core holds
/// 64-bit ints), anything with a float is a float.
fn numeric(op: u8, p: Num, q: Num) -> Result<Value, ValueError> {
    match (p, q) {
        (Num::I(x), Num::I(y)) => match op {
            b'+' => x.checked_add(y).map(Value::Int).ok_or_else(overflow),
            b'-' => x.checked_sub(y).map(Value::Int).ok_or_else(overflow),
            b'*' => x.checked_mul(y).map(Value::Int).ok_or_else(overflow),
            b'/' => {
                if y == 0 {
                    Err(ValueError::new("ZeroDivisionError", "division by zero"))
                } else {
                    Ok(Value::Float(x as f64 / y as f64))
                }
            }
            _ => {
                if y == 0 {
                    return Err(ValueError::new("ZeroDivisionError", "integer modulo by zero"));
                }
                let r = x.checked_rem(y).ok_or_else(overflow)?;
                Ok(Value::Int(if r != 0 && ((r < 0) != (y < 0)) { r + y } else { r }))
            }
        },
        (p, q) => {
            let x = match p {
                Num::I(i) => i as f64,
                Num::F(f) => f,
            };
            let y = match q {
                Num::I(i) => i as f64,
                Num::F(f) => f,
            };
            match op {
                b'+' => Ok(Value::Float(x + y)),
                b'-' => Ok(Value::Float(x - y)),
                b'*' => Ok(Value::Float(x * y)),
                b'/' => {
                    if y == 0.0 {
                        Err(ValueError::new("ZeroDivisionError", "float division by zero"))
                    } else {
                        Ok(Value::Float(x / y))
                    }
                }
                _ => {
                    if y == 0.0 {
                        Err(ValueError::new("ZeroDivisionError", "float modulo by zero"))
                    } else {
                        Ok(Value::Float(python_float_mod(x, y)))
                    }
                }
            }
        }
    }
}

/// `a + b` for two numbers as Python adds them; None where either is not a number.
pub fn add_numbers(a: Value, b: Value) -> Option<Result<Value, ValueError>> {
    Some(numeric(b'+', a.num()?, b.num()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::hash_map::DefaultHasher;

    fn hash_of(v: Value) -> u64 {
        let mut h = DefaultHasher::new();
        v.hash(&mut h);
        h.finish()
    }

    #[test]
    fn ints_floats_and_bools_are_equal_and_hash_alike_as_in_python() {
        assert_eq!(Value::Int(1), Value::Float(1.0));
        assert_eq!(Value::Bool(true), Value::Int(1));
        assert_eq!(hash_of(Value::Int(1)), hash_of(Value::Float(1.0)));
        assert_eq!(hash_of(Value::Bool(true)), hash_of(Value::Float(1.0)));
        assert_eq!(Value::Float(-0.0), Value::Int(0));
        assert_ne!(Value::Int(1), Value::Float(1.5));
    }

    #[test]
    fn integer_float_comparison_is_exact() {
        let strings = Interner::default();
        let big = (1i64 << 53) + 1;
        assert_eq!(compare(Value::Int(big), Value::Float((1i64 << 53) as f64), "<", &strings), Ok(Ordering::Greater));
        assert_ne!(Value::Int(big), Value::Float(big as f64));
        assert_eq!(compare(Value::Int(i64::MAX), Value::Float(f64::INFINITY), "<", &strings), Ok(Ordering::Less));
        assert_eq!(compare(Value::Int(-3), Value::Float(-2.5), "<", &strings), Ok(Ordering::Less));
    }

    #[test]
    fn strings_do_not_order_against_numbers() {
        let mut strings = Interner::default();
        let s = Value::Str(strings.intern("a"));
        let err = compare(s, Value::Int(1), "<", &strings).unwrap_err();
        assert_eq!(err.kind, "TypeError");
    }

    #[test]
    fn modulo_and_division_follow_python() {
        let mut strings = Interner::default();
        assert_eq!(arithmetic(b'%', Value::Int(-7), Value::Int(3), &mut strings), Ok(Value::Int(2)));
        assert_eq!(arithmetic(b'%', Value::Int(7), Value::Int(-3), &mut strings), Ok(Value::Int(-2)));
        assert!(
            matches!(arithmetic(b'%', Value::Float(-7.0), Value::Int(3), &mut strings), Ok(Value::Float(f)) if f == 2.0)
        );
        assert!(
            matches!(arithmetic(b'/', Value::Int(7), Value::Int(2), &mut strings), Ok(Value::Float(f)) if f == 3.5)
        );
        assert_eq!(arithmetic(b'/', Value::Int(1), Value::Int(0), &mut strings).unwrap_err().kind, "ZeroDivisionError");
        assert_eq!(
            arithmetic(b'*', Value::Int(i64::MAX), Value::Int(2), &mut strings).unwrap_err().kind,
            "OverflowError"
        );
    }

    #[test]
    fn strings_concatenate() {
        let mut strings = Interner::default();
        let a = Value::Str(strings.intern("ab"));
        let b = Value::Str(strings.intern("c"));
        let joined = arithmetic(b'+', a, b, &mut strings).unwrap();
        assert_eq!(joined, Value::Str(strings.intern("abc")));
    }

    #[test]
    fn fsum_is_correctly_rounded() {
        assert_eq!(fsum(vec![0.1; 10]).unwrap(), 1.0);
        assert_eq!(fsum(vec![1e100, 1.0, -1e100, 1e-100, 1e50, -1.0, -1e50]).unwrap(), 1e-100);
        assert_eq!(fsum(vec![f64::INFINITY, 1.0]).unwrap(), f64::INFINITY);
        assert_eq!(fsum(vec![f64::INFINITY, f64::NEG_INFINITY]).unwrap_err().kind, "ValueError");
    }
}
