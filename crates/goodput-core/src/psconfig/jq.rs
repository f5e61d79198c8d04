//! pSConfig's `{% jq EXPR %}` template variables. pSConfig runs the
//! expression (with pyjq) on an object it builds for each address
//! combination of a task — `addresses` (the combination's address
//! objects, in order), `archives`, `contexts`, `hosts`, `task`, `test`
//! and `schedule` — wants exactly one output and puts it, as text, where
//! the variable stood (`null` gives the empty text).
//!
//! A template comes from whoever publishes it, so the expression is
//! treated as hostile: jaq parses it, and goodput evaluates only a subset
//! that cannot loop on its own — paths, literals, `|`, `,`, `//`,
//! comparisons, arithmetic, `and`/`or`, `if`, `try`, `as $x`, array and
//! object construction, string interpolation and a short list of
//! builtins that each do one bounded step (`ALLOWED`). `def`, `reduce`,
//! `foreach`, `..`, `label`, assignment and every other builtin (`range`,
//! `repeat`, `recurse`, `until`, `while`, `limit`, `input`, `env`, …) are
//! refused by name before anything runs. On top of that every evaluation
//! has a budget of steps and of bytes built, so even the allowed subset
//! stops (with the reason) long before it could take noticeable time or
//! memory, and nothing is left running.

use jaq_core::load::lex::StrPart;
use jaq_core::load::parse::{BinaryOp, Pattern, Term};
use jaq_core::ops::{Cmp, Math};
use jaq_core::path::{Opt, Part};
use serde_json::{Map, Number, Value};
use std::borrow::Cow;
use std::cmp::Ordering;

/// The longest expression accepted, bytes (it also bounds how deep the
/// parser and the evaluator recurse).
pub(super) const MAX_LEN: usize = 512;
/// How deep an expression may nest (parentheses, pipes, calls).
const MAX_DEPTH: usize = 64;
/// Steps one evaluation may take (each value produced or visited is one).
pub(super) const MAX_STEPS: u64 = 200_000;
/// Bytes one evaluation may build (strings, arrays, objects), counted as
/// their JSON text.
pub(super) const MAX_BYTES: u64 = 1 << 20;
/// The longest result inserted into a test spec, bytes.
pub(super) const MAX_RESULT: usize = 4096;

/// The builtins an expression may call (name, arity); each does one
/// bounded step on its input.
const ALLOWED: [(&str, usize); 29] = [
    ("null", 0),
    ("true", 0),
    ("false", 0),
    ("empty", 0),
    ("not", 0),
    ("length", 0),
    ("tostring", 0),
    ("tonumber", 0),
    ("tojson", 0),
    ("type", 0),
    ("keys", 0),
    ("first", 0),
    ("last", 0),
    ("add", 0),
    ("ascii_downcase", 0),
    ("ascii_upcase", 0),
    ("split", 1),
    ("join", 1),
    ("select", 1),
    ("map", 1),
    ("has", 1),
    ("startswith", 1),
    ("endswith", 1),
    ("ltrimstr", 1),
    ("rtrimstr", 1),
    ("contains", 1),
    ("first", 1),
    ("values", 0),
    ("ascii", 0),
];

/// A parsed expression, checked against the allowed subset.
pub(crate) struct Expr<'s> {
    term: Term<&'s str>,
}

/// Parses `code` and checks that it uses only the allowed subset.
pub(crate) fn parse(code: &str) -> Result<Expr<'_>, String> {
    if code.len() > MAX_LEN {
        return Err(format!("{} bytes long, {MAX_LEN} allowed", code.len()));
    }
    // The parser recurses once per bracket: bound the nesting first.
    let mut depth = 0usize;
    for c in code.chars() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth > MAX_DEPTH {
            return Err(format!("nested more than {MAX_DEPTH} deep"));
        }
    }
    let term = jaq_core::load::parse(code, |p| p.term()).ok_or("not a jq expression jaq can parse")?;
    check(&term, 0)?;
    Ok(Expr { term })
}

fn check(t: &Term<&str>, depth: usize) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err(format!("nested more than {MAX_DEPTH} deep"));
    }
    let d = depth + 1;
    match t {
        Term::Id | Term::Num(_) | Term::Var(_) => Ok(()),
        Term::Recurse => Err("`..` (recursion) is not allowed".into()),
        Term::Str(fmt, parts) => {
            if let Some(f) = fmt {
                return Err(format!("the format {f} is not allowed"));
            }
            parts.iter().try_for_each(|p| match p {
                StrPart::Term(t) => check(t, d),
                _ => Ok(()),
            })
        }
        Term::Arr(a) => a.as_deref().map_or(Ok(()), |a| check(a, d)),
        Term::Obj(kvs) => kvs.iter().try_for_each(|(k, v)| {
            check(k, d)?;
            v.as_ref().map_or(Ok(()), |v| check(v, d))
        }),
        Term::Neg(a) => check(a, d),
        Term::BinOp(l, op, r) => {
            match op {
                BinaryOp::Pipe(Some(Pattern::Var(_))) | BinaryOp::Pipe(None) => {}
                BinaryOp::Pipe(Some(_)) => return Err("destructuring `as` patterns are not allowed".into()),
                BinaryOp::Comma
                | BinaryOp::Alt
                | BinaryOp::Or
                | BinaryOp::And
                | BinaryOp::Math(_)
                | BinaryOp::Cmp(_) => {}
                _ => return Err("assignment and update are not allowed".into()),
            }
            check(l, d)?;
            check(r, d)
        }
        Term::Label(..) | Term::Break(_) => Err("`label` and `break` are not allowed".into()),
        Term::Fold(name, ..) => Err(format!("`{name}` is not allowed")),
        Term::TryCatch(a, b) => {
            check(a, d)?;
            b.as_deref().map_or(Ok(()), |b| check(b, d))
        }
        Term::IfThenElse(arms, other) => {
            for (c, x) in arms {
                check(c, d)?;
                check(x, d)?;
            }
            other.as_deref().map_or(Ok(()), |o| check(o, d))
        }
        Term::Def(..) => Err("`def` is not allowed".into()),
        Term::Call(name, args) => {
            if !ALLOWED.contains(&(*name, args.len())) {
                return Err(format!(
                    "`{name}/{}` is not one of the builtins allowed in a template variable",
                    args.len()
                ));
            }
            args.iter().try_for_each(|a| check(a, d))
        }
        Term::Path(base, path) => {
            check(base, d)?;
            path.0.iter().try_for_each(|(p, _)| match p {
                Part::Index(i) => check(i, d),
                Part::Range(a, b) => {
                    a.as_ref().map_or(Ok(()), |a| check(a, d))?;
                    b.as_ref().map_or(Ok(()), |b| check(b, d))
                }
            })
        }
    }
}

impl Expr<'_> {
    /// The one output on `input`, as pSConfig inserts it: a string as it
    /// is, `null` as nothing. Anything else, no output, several, or a
    /// budget spent is the reason it is refused.
    /// `left` is what remains of a budget shared by several
    /// evaluations; the steps taken are subtracted from it.
    pub(super) fn text(&self, input: &Value, left: &mut u64) -> Result<String, String> {
        let mut ev = Eval {
            steps: 0,
            max_steps: MAX_STEPS.min(*left),
            bytes: 0,
            vars: Vec::new(),
        };
        let got = ev.run(&self.term, Cow::Borrowed(input), 0);
        *left = left.saturating_sub(ev.steps);
        let out = got?;
        match out.as_slice() {
            [v] => match v.as_ref() {
                Value::String(s) if s.len() > MAX_RESULT => Err(format!(
                    "its output is {} bytes long, {MAX_RESULT} allowed",
                    s.len()
                )),
                Value::String(s) => Ok(s.clone()),
                Value::Null => Ok(String::new()),
                v => Err(format!(
                    "its output is {} {}, and pSConfig inserts only a string",
                    article(v),
                    type_name(v)
                )),
            },
            [] => Err("it gives no output (pSConfig wants exactly one)".into()),
            _ => Err("it gives more than one output (pSConfig wants exactly one)".into()),
        }
    }
}

/// Whether filter `code` holds on `input`: its one output is neither
/// `false` nor `null`. The same subset and budgets as a template variable
/// (a body checked by `goodput http` comes from a server, as hostile as a
/// template).
pub(crate) fn holds(code: &str, input: &Value) -> Result<bool, String> {
    let expr = parse(code)?;
    let mut ev = Eval {
        steps: 0,
        max_steps: MAX_STEPS,
        bytes: 0,
        vars: Vec::new(),
    };
    let out = ev.run(&expr.term, Cow::Borrowed(input), 0)?;
    match out.as_slice() {
        [v] => Ok(!matches!(v.as_ref(), Value::Null | Value::Bool(false))),
        [] => Err("it gives no output".into()),
        _ => Err("it gives more than one output".into()),
    }
}

fn article(v: &Value) -> &'static str {
    if matches!(v, Value::Array(_) | Value::Object(_)) {
        "an"
    } else {
        "a"
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

type V<'a> = Cow<'a, Value>;

struct Eval<'a> {
    steps: u64,
    max_steps: u64,
    bytes: u64,
    vars: Vec<(String, V<'a>)>,
}

/// The size of `v` as JSON text, counted no further than `limit`.
fn size(v: &Value, limit: u64) -> u64 {
    let mut n = 0u64;
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        n += match v {
            Value::String(s) => s.len() as u64 + 2,
            Value::Array(a) => {
                stack.extend(a.iter());
                2 + a.len() as u64
            }
            Value::Object(m) => {
                for (k, x) in m {
                    n += k.len() as u64 + 3;
                    stack.push(x);
                }
                2
            }
            _ => 8,
        };
        if n > limit {
            break;
        }
    }
    n
}

fn num(f: f64) -> Result<Value, String> {
    if f.fract() == 0.0 && f.abs() < 9.0e15 {
        Ok(Value::from(f as i64))
    } else {
        Number::from_f64(f)
            .map(Value::Number)
            .ok_or_else(|| "a number that is not finite".to_owned())
    }
}

fn truthy(v: &Value) -> bool {
    !matches!(v, Value::Null | Value::Bool(false))
}

fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

/// jq's order of values: null < false < true < numbers < strings <
/// arrays < objects.
fn order(a: &Value, b: &Value) -> Ordering {
    fn rank(v: &Value) -> u8 {
        match v {
            Value::Null => 0,
            Value::Bool(false) => 1,
            Value::Bool(true) => 2,
            Value::Number(_) => 3,
            Value::String(_) => 4,
            Value::Array(_) => 5,
            Value::Object(_) => 6,
        }
    }
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
            x.partial_cmp(&y).unwrap_or(Ordering::Equal)
        }
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Array(x), Value::Array(y)) => {
            for (p, q) in x.iter().zip(y) {
                let o = order(p, q);
                if o != Ordering::Equal {
                    return o;
                }
            }
            x.len().cmp(&y.len())
        }
        (Value::Object(x), Value::Object(y)) => {
            let kx: Vec<_> = x.keys().collect();
            let ky: Vec<_> = y.keys().collect();
            kx.cmp(&ky).then_with(|| {
                x.values()
                    .zip(y.values())
                    .map(|(p, q)| order(p, q))
                    .find(|o| *o != Ordering::Equal)
                    .unwrap_or(Ordering::Equal)
            })
        }
        _ => rank(a).cmp(&rank(b)),
    }
}

impl<'a> Eval<'a> {
    fn step(&mut self, n: u64) -> Result<(), String> {
        self.steps = self.steps.saturating_add(n);
        if self.steps > self.max_steps {
            return Err(format!("it took more than {} steps", self.max_steps));
        }
        Ok(())
    }

    /// Charges `n` bytes about to be copied or built against the byte
    /// budget, before they are.
    fn charge(&mut self, n: u64) -> Result<(), String> {
        self.bytes = self.bytes.saturating_add(n);
        self.step(1 + n / 64)?;
        if self.bytes > MAX_BYTES {
            return Err(format!("it built more than {MAX_BYTES} bytes"));
        }
        Ok(())
    }

    /// Charges a copy of `v` (a value the expression copies out of its
    /// input or another value), before it is made.
    fn copy(&mut self, v: V<'a>) -> Result<Value, String> {
        if let Cow::Borrowed(x) = &v {
            let left = MAX_BYTES.saturating_sub(self.bytes);
            self.charge(size(x, left))?;
        }
        Ok(v.into_owned())
    }

    /// `v` as text (a string as it is, anything else as JSON), charged.
    fn text(&mut self, v: &Value) -> Result<String, String> {
        let left = MAX_BYTES.saturating_sub(self.bytes);
        self.charge(size(v, left))?;
        Ok(text_of(v))
    }

    /// Charges a value built by the expression against the byte budget.
    fn built(&mut self, v: Value) -> Result<V<'a>, String> {
        let left = MAX_BYTES.saturating_sub(self.bytes);
        let n = size(&v, left);
        self.bytes = self.bytes.saturating_add(n);
        self.step(1 + n / 64)?;
        if self.bytes > MAX_BYTES {
            return Err(format!("it built more than {MAX_BYTES} bytes"));
        }
        Ok(Cow::Owned(v))
    }

    fn run(&mut self, t: &Term<&str>, input: V<'a>, depth: usize) -> Result<Vec<V<'a>>, String> {
        self.step(1)?;
        let d = depth + 1;
        if d > MAX_DEPTH * 2 {
            return Err(format!("nested more than {MAX_DEPTH} deep"));
        }
        Ok(match t {
            Term::Id => vec![input],
            Term::Num(n) => {
                let f: f64 = n.parse().map_err(|_| format!("{n} is not a number"))?;
                vec![Cow::Owned(num(f)?)]
            }
            Term::Var(name) => {
                let v = self
                    .vars
                    .iter()
                    .rev()
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| v.clone())
                    .ok_or_else(|| format!("{name} is not defined"))?;
                vec![v]
            }
            Term::Str(_, parts) => {
                // Each interpolated part may give several outputs: jq
                // gives every combination; here the first part's
                // outputs vary slowest, as in jq.
                let mut texts = vec![String::new()];
                for p in parts {
                    let add: Vec<String> = match p {
                        StrPart::Str(s) => vec![(*s).to_owned()],
                        StrPart::Char(c) => vec![c.to_string()],
                        StrPart::Term(t) => {
                            let vs = self.run(t, input.clone(), d)?;
                            let mut ts = Vec::new();
                            for v in vs {
                                ts.push(self.text(&v)?);
                            }
                            ts
                        }
                    };
                    let mut next = Vec::new();
                    for a in &texts {
                        for b in &add {
                            self.charge((a.len() + b.len()) as u64)?;
                            next.push(format!("{a}{b}"));
                        }
                    }
                    texts = next;
                }
                let mut out = Vec::new();
                for s in texts {
                    out.push(self.built(Value::String(s))?);
                }
                out
            }
            Term::Arr(None) => vec![self.built(Value::Array(Vec::new()))?],
            Term::Arr(Some(a)) => {
                let mut items = Vec::new();
                for v in self.run(a, input, d)? {
                    items.push(self.copy(v)?);
                }
                vec![self.built(Value::Array(items))?]
            }
            Term::Obj(kvs) => {
                let mut objs = vec![(Map::new(), 2u64)];
                for (k, v) in kvs {
                    let (keys, vals) = match (k, v) {
                        (Term::Var(name), None) => {
                            let v = self.run(k, input.clone(), d)?;
                            (vec![name.trim_start_matches('$').to_owned()], v)
                        }
                        (k, None) => {
                            let keys = self.keys(k, input.clone(), d)?;
                            let mut vals = Vec::new();
                            for key in &keys {
                                vals.extend(self.index(
                                    input.clone(),
                                    &Value::String(key.clone()),
                                    Opt::Essential,
                                )?);
                            }
                            (keys, vals)
                        }
                        (k, Some(v)) => (self.keys(k, input.clone(), d)?, self.run(v, input.clone(), d)?),
                    };
                    let mut next = Vec::new();
                    for (o, n) in &objs {
                        for key in &keys {
                            for val in &vals {
                                // The copy of the object so far and of the
                                // value added are both charged.
                                let left = MAX_BYTES.saturating_sub(self.bytes);
                                let grown = n + key.len() as u64 + 3 + size(val, left);
                                self.charge(grown)?;
                                let mut o = o.clone();
                                o.insert(key.clone(), val.as_ref().clone());
                                next.push((o, grown));
                            }
                        }
                    }
                    objs = next;
                }
                let mut out = Vec::new();
                for (o, _) in objs {
                    out.push(self.built(Value::Object(o))?);
                }
                out
            }
            Term::Neg(a) => {
                let mut out = Vec::new();
                for v in self.run(a, input, d)? {
                    let f = v
                        .as_f64()
                        .ok_or_else(|| format!("cannot negate {}", type_name(&v)))?;
                    out.push(Cow::Owned(num(-f)?));
                }
                out
            }
            Term::BinOp(l, op, r) => self.binop(l, op, r, input, d)?,
            Term::TryCatch(a, catch) => match self.run(a, input, d) {
                Ok(v) => v,
                // A spent budget is not an error the expression may catch.
                Err(e) if e.starts_with("it ") => return Err(e),
                Err(e) => match catch {
                    Some(c) => self.run(c, Cow::Owned(Value::String(e)), d)?,
                    None => Vec::new(),
                },
            },
            Term::IfThenElse(arms, other) => self.ite(arms, other.as_deref(), input, d)?,
            Term::Call(name, args) => self.call(name, args, input, d)?,
            Term::Path(base, path) => {
                let mut cur = self.run(base, input.clone(), d)?;
                for (part, opt) in &path.0 {
                    let mut next = Vec::new();
                    for v in cur {
                        match part {
                            Part::Index(i) => {
                                for key in self.run(i, input.clone(), d)? {
                                    next.extend(self.index(v.clone(), &key, *opt)?);
                                }
                            }
                            Part::Range(None, None) => next.extend(self.each(v, *opt)?),
                            Part::Range(..) => return Err("slices are not allowed".into()),
                        }
                    }
                    cur = next;
                }
                cur
            }
            Term::Recurse | Term::Label(..) | Term::Break(_) | Term::Fold(..) | Term::Def(..) => {
                return Err("not allowed in a template variable".into())
            }
        })
    }

    fn keys(&mut self, k: &Term<&str>, input: V<'a>, d: usize) -> Result<Vec<String>, String> {
        self.run(k, input, d)?
            .into_iter()
            .map(|k| match k.as_ref() {
                Value::String(s) => Ok(s.clone()),
                v => Err(format!("an object key must be a string, not {}", type_name(v))),
            })
            .collect()
    }

    fn index(&mut self, v: V<'a>, key: &Value, opt: Opt) -> Result<Vec<V<'a>>, String> {
        self.step(1)?;
        let got: Result<Value, String> = match (v.as_ref(), key) {
            (Value::Null, _) => Ok(Value::Null),
            (Value::Object(_), Value::String(k)) => {
                return Ok(vec![match v {
                    Cow::Borrowed(Value::Object(m)) => {
                        m.get(k).map_or(Cow::Owned(Value::Null), Cow::Borrowed)
                    }
                    Cow::Owned(Value::Object(mut m)) => Cow::Owned(m.remove(k).unwrap_or(Value::Null)),
                    _ => Cow::Owned(Value::Null),
                }])
            }
            (Value::Array(a), Value::Number(n)) => {
                let f = n.as_f64().unwrap_or(0.0).floor();
                let len = a.len() as f64;
                let i = if f < 0.0 { len + f } else { f };
                if i < 0.0 || i >= len {
                    Ok(Value::Null)
                } else {
                    let i = i as usize;
                    return Ok(vec![match v {
                        Cow::Borrowed(Value::Array(a)) => Cow::Borrowed(&a[i]),
                        Cow::Owned(Value::Array(mut a)) => Cow::Owned(a.swap_remove(i)),
                        _ => Cow::Owned(Value::Null),
                    }]);
                }
            }
            (v, k) => Err(format!("cannot index {} with {}", type_name(v), type_name(k))),
        };
        match (got, opt) {
            (Ok(x), _) => Ok(vec![Cow::Owned(x)]),
            (Err(_), Opt::Optional) => Ok(Vec::new()),
            (Err(e), Opt::Essential) => Err(e),
        }
    }

    fn each(&mut self, v: V<'a>, opt: Opt) -> Result<Vec<V<'a>>, String> {
        let out: Vec<V<'a>> = match v {
            Cow::Borrowed(Value::Array(a)) => a.iter().map(Cow::Borrowed).collect(),
            Cow::Borrowed(Value::Object(m)) => m.values().map(Cow::Borrowed).collect(),
            Cow::Owned(Value::Array(a)) => a.into_iter().map(Cow::Owned).collect(),
            Cow::Owned(Value::Object(m)) => m.into_iter().map(|(_, x)| Cow::Owned(x)).collect(),
            v if matches!(opt, Opt::Optional) => {
                let _ = v;
                Vec::new()
            }
            v => return Err(format!("cannot iterate over {}", type_name(&v))),
        };
        self.step(out.len() as u64)?;
        Ok(out)
    }

    fn ite(
        &mut self,
        arms: &[(Term<&str>, Term<&str>)],
        other: Option<&Term<&str>>,
        input: V<'a>,
        d: usize,
    ) -> Result<Vec<V<'a>>, String> {
        let Some(((cond, then), rest)) = arms.split_first() else {
            return match other {
                Some(o) => self.run(o, input, d),
                None => Ok(vec![input]),
            };
        };
        let mut out = Vec::new();
        for c in self.run(cond, input.clone(), d)? {
            if truthy(&c) {
                out.extend(self.run(then, input.clone(), d)?);
            } else {
                out.extend(self.ite(rest, other, input.clone(), d)?);
            }
        }
        Ok(out)
    }

    fn binop(
        &mut self,
        l: &Term<&str>,
        op: &BinaryOp<&str>,
        r: &Term<&str>,
        input: V<'a>,
        d: usize,
    ) -> Result<Vec<V<'a>>, String> {
        Ok(match op {
            BinaryOp::Pipe(None) => {
                let mut out = Vec::new();
                for v in self.run(l, input, d)? {
                    out.extend(self.run(r, v, d)?);
                }
                out
            }
            BinaryOp::Pipe(Some(Pattern::Var(name))) => {
                let mut out = Vec::new();
                for v in self.run(l, input.clone(), d)? {
                    self.vars.push(((*name).to_owned(), v));
                    let got = self.run(r, input.clone(), d);
                    self.vars.pop();
                    out.extend(got?);
                }
                out
            }
            BinaryOp::Comma => {
                let mut out = self.run(l, input.clone(), d)?;
                out.extend(self.run(r, input, d)?);
                out
            }
            BinaryOp::Alt => {
                let left: Vec<V<'a>> = match self.run(l, input.clone(), d) {
                    Ok(v) => v.into_iter().filter(|v| truthy(v)).collect(),
                    Err(e) if e.starts_with("it ") => return Err(e),
                    Err(_) => Vec::new(),
                };
                if left.is_empty() {
                    self.run(r, input, d)?
                } else {
                    left
                }
            }
            BinaryOp::And | BinaryOp::Or => {
                let and = matches!(op, BinaryOp::And);
                let mut out = Vec::new();
                for a in self.run(l, input.clone(), d)? {
                    if truthy(&a) != and {
                        out.push(Cow::Owned(Value::Bool(!and)));
                        continue;
                    }
                    for b in self.run(r, input.clone(), d)? {
                        out.push(Cow::Owned(Value::Bool(truthy(&b))));
                    }
                }
                out
            }
            BinaryOp::Cmp(c) => {
                let mut out = Vec::new();
                // jq runs the right side first, then the left.
                for b in self.run(r, input.clone(), d)? {
                    for a in self.run(l, input.clone(), d)? {
                        self.step(1)?;
                        let o = order(&a, &b);
                        let yes = match c {
                            Cmp::Lt => o == Ordering::Less,
                            Cmp::Le => o != Ordering::Greater,
                            Cmp::Gt => o == Ordering::Greater,
                            Cmp::Ge => o != Ordering::Less,
                            Cmp::Eq => o == Ordering::Equal,
                            Cmp::Ne => o != Ordering::Equal,
                        };
                        out.push(Cow::Owned(Value::Bool(yes)));
                    }
                }
                out
            }
            BinaryOp::Math(m) => {
                let mut out = Vec::new();
                for b in self.run(r, input.clone(), d)? {
                    for a in self.run(l, input.clone(), d)? {
                        let v = self.math(m, &a, &b)?;
                        out.push(v);
                    }
                }
                out
            }
            _ => return Err("assignment and update are not allowed".into()),
        })
    }

    fn math(&mut self, m: &Math, a: &Value, b: &Value) -> Result<V<'a>, String> {
        self.step(1)?;
        if let (Some(x), Some(y)) = (a.as_f64(), b.as_f64()) {
            let v = match m {
                Math::Add => x + y,
                Math::Sub => x - y,
                Math::Mul => x * y,
                Math::Div if y == 0.0 => return Err("division by zero".into()),
                Math::Div => x / y,
                Math::Rem if y as i64 == 0 => return Err("remainder by zero".into()),
                Math::Rem => ((x as i64) % (y as i64)) as f64,
            };
            return Ok(Cow::Owned(num(v)?));
        }
        // Only `+` joins strings, arrays and objects; `null + x` is x.
        let joined = match (m, a, b) {
            (Math::Add, Value::Null, x) | (Math::Add, x, Value::Null) => x.clone(),
            (Math::Add, Value::String(x), Value::String(y)) => {
                if (x.len() + y.len()) as u64 > MAX_BYTES {
                    return Err(format!("it built more than {MAX_BYTES} bytes"));
                }
                Value::String(format!("{x}{y}"))
            }
            (Math::Add, Value::Array(_), Value::Array(_))
            | (Math::Add, Value::Object(_), Value::Object(_)) => {
                let left = MAX_BYTES.saturating_sub(self.bytes);
                self.charge(size(a, left).saturating_add(size(b, left)))?;
                match (a, b) {
                    (Value::Array(x), Value::Array(y)) => Value::Array(x.iter().chain(y).cloned().collect()),
                    (Value::Object(x), Value::Object(y)) => {
                        let mut o = x.clone();
                        o.extend(y.iter().map(|(k, v)| (k.clone(), v.clone())));
                        Value::Object(o)
                    }
                    _ => Value::Null,
                }
            }
            (Math::Div, Value::String(x), Value::String(y)) if !y.is_empty() => {
                self.step(x.len() as u64)?;
                Value::Array(x.split(y.as_str()).map(|s| Value::String(s.to_owned())).collect())
            }
            _ => {
                return Err(format!(
                    "{} and {} cannot be combined so",
                    type_name(a),
                    type_name(b)
                ))
            }
        };
        self.built(joined)
    }

    fn call(
        &mut self,
        name: &str,
        args: &[Term<&str>],
        input: V<'a>,
        d: usize,
    ) -> Result<Vec<V<'a>>, String> {
        let str_arg = |ev: &mut Self, input: &V<'a>| -> Result<Vec<String>, String> {
            ev.run(&args[0], input.clone(), d)?
                .into_iter()
                .map(|v| match v.as_ref() {
                    Value::String(s) => Ok(s.clone()),
                    v => Err(format!("{name} wants a string, not {}", type_name(v))),
                })
                .collect()
        };
        let s = input.as_str().map(str::to_owned);
        let want_str = || s.clone().ok_or_else(|| format!("{name} wants a string input"));
        let one = |v: Value| -> Result<Vec<V<'a>>, String> { Ok(vec![Cow::Owned(v)]) };
        match (name, args.len()) {
            ("null", 0) => one(Value::Null),
            ("true", 0) => one(Value::Bool(true)),
            ("false", 0) => one(Value::Bool(false)),
            ("empty", 0) => Ok(Vec::new()),
            ("not", 0) => one(Value::Bool(!truthy(&input))),
            ("length", 0) => {
                let n = match input.as_ref() {
                    Value::Null => 0.0,
                    Value::Bool(_) => return Err("a boolean has no length".into()),
                    Value::Number(n) => n.as_f64().unwrap_or(0.0).abs(),
                    Value::String(s) => s.chars().count() as f64,
                    Value::Array(a) => a.len() as f64,
                    Value::Object(m) => m.len() as f64,
                };
                one(num(n)?)
            }
            ("tostring", 0) => {
                let t = self.text(&input)?;
                Ok(vec![self.built(Value::String(t))?])
            }
            ("tojson", 0) => {
                if size(&input, MAX_BYTES) >= MAX_BYTES {
                    return Err(format!("it built more than {MAX_BYTES} bytes"));
                }
                let t = input.to_string();
                Ok(vec![self.built(Value::String(t))?])
            }
            ("tonumber", 0) => match input.as_ref() {
                Value::Number(_) => Ok(vec![input]),
                Value::String(s) => one(num(s
                    .trim()
                    .parse()
                    .map_err(|_| format!("{s:?} is not a number"))?)?),
                v => Err(format!("cannot make a number of {}", type_name(v))),
            },
            ("type", 0) => one(Value::String(type_name(&input).into())),
            ("keys", 0) => match input.as_ref() {
                Value::Object(m) => {
                    let mut k: Vec<Value> = m.keys().map(|k| Value::String(k.clone())).collect();
                    k.sort_by(order);
                    Ok(vec![self.built(Value::Array(k))?])
                }
                Value::Array(a) => Ok(vec![
                    self.built(Value::Array((0..a.len()).map(Value::from).collect()))?
                ]),
                v => Err(format!("{} has no keys", type_name(v))),
            },
            ("first", 0) => self.index(input, &Value::from(0), Opt::Essential),
            ("last", 0) => self.index(input, &Value::from(-1), Opt::Essential),
            ("first", 1) => Ok(self.run(&args[0], input, d)?.into_iter().take(1).collect()),
            ("values", 0) => Ok(if input.is_null() { Vec::new() } else { vec![input] }),
            ("add", 0) => {
                let items = self.each(input, Opt::Essential)?;
                let mut acc: V<'a> = Cow::Owned(Value::Null);
                for x in items {
                    acc = self.math(&Math::Add, &acc, &x)?;
                }
                Ok(vec![acc])
            }
            ("ascii_downcase", 0) => Ok(vec![self.built(Value::String(want_str()?.to_ascii_lowercase()))?]),
            ("ascii_upcase", 0) => Ok(vec![self.built(Value::String(want_str()?.to_ascii_uppercase()))?]),
            ("split", 1) => {
                let text = want_str()?;
                let mut out = Vec::new();
                for sep in str_arg(self, &input)? {
                    let parts: Vec<Value> = if sep.is_empty() {
                        text.chars().map(|c| Value::String(c.to_string())).collect()
                    } else {
                        text.split(sep.as_str())
                            .map(|p| Value::String(p.to_owned()))
                            .collect()
                    };
                    out.push(self.built(Value::Array(parts))?);
                }
                Ok(out)
            }
            ("join", 1) => {
                let items = self.each(input.clone(), Opt::Essential)?;
                let mut out = Vec::new();
                for sep in str_arg(self, &input)? {
                    let mut t = String::new();
                    for (i, x) in items.iter().enumerate() {
                        if i > 0 {
                            t.push_str(&sep);
                        }
                        match x.as_ref() {
                            Value::Null => {}
                            Value::String(s) => t.push_str(s),
                            v @ (Value::Number(_) | Value::Bool(_)) => t.push_str(&v.to_string()),
                            v => return Err(format!("cannot join {}", type_name(v))),
                        }
                        if t.len() as u64 > MAX_BYTES {
                            return Err(format!("it built more than {MAX_BYTES} bytes"));
                        }
                    }
                    out.push(self.built(Value::String(t))?);
                }
                Ok(out)
            }
            ("select", 1) => {
                let mut out = Vec::new();
                for c in self.run(&args[0], input.clone(), d)? {
                    if truthy(&c) {
                        out.push(input.clone());
                    }
                }
                Ok(out)
            }
            ("map", 1) => {
                let mut items = Vec::new();
                for x in self.each(input, Opt::Essential)? {
                    for v in self.run(&args[0], x, d)? {
                        items.push(self.copy(v)?);
                    }
                }
                Ok(vec![self.built(Value::Array(items))?])
            }
            ("has", 1) => {
                let mut out = Vec::new();
                for k in self.run(&args[0], input.clone(), d)? {
                    let yes = match (input.as_ref(), k.as_ref()) {
                        (Value::Object(m), Value::String(k)) => m.contains_key(k),
                        (Value::Array(a), Value::Number(n)) => {
                            n.as_f64().is_some_and(|i| i >= 0.0 && (i as usize) < a.len())
                        }
                        (v, k) => {
                            return Err(format!(
                                "cannot check whether {} has {}",
                                type_name(v),
                                type_name(k)
                            ))
                        }
                    };
                    out.push(Cow::Owned(Value::Bool(yes)));
                }
                Ok(out)
            }
            ("startswith" | "endswith" | "ltrimstr" | "rtrimstr" | "contains", 1)
                if name != "contains" || s.is_some() =>
            {
                let text = want_str();
                let mut out = Vec::new();
                for a in str_arg(self, &input)? {
                    let v = match (name, &text) {
                        ("startswith", Ok(t)) => Value::Bool(t.starts_with(&a)),
                        ("endswith", Ok(t)) => Value::Bool(t.ends_with(&a)),
                        ("contains", Ok(t)) => Value::Bool(t.contains(&a)),
                        ("ltrimstr", Ok(t)) => Value::String(t.strip_prefix(&a).unwrap_or(t).to_owned()),
                        ("rtrimstr", Ok(t)) => Value::String(t.strip_suffix(&a).unwrap_or(t).to_owned()),
                        // jq leaves what is not a string as it is.
                        ("ltrimstr" | "rtrimstr", Err(_)) => input.as_ref().clone(),
                        (_, Err(e)) => return Err(e.clone()),
                        _ => Value::Null,
                    };
                    out.push(self.built(v)?);
                }
                Ok(out)
            }
            _ => Err(format!("`{name}/{}` is not allowed here", args.len())),
        }
    }
}

/// Steps all the `{% jq %}` variables of one test may take together,
/// over all their combinations.
pub(super) const TEMPLATE_STEPS: u64 = 4_000_000;
/// The most combinations a test with `{% jq %}` variables is evaluated
/// over; a test run by more is refused with the reason.
pub(super) const MAX_COMBOS: usize = 4096;
/// The most bytes (as JSON text) those combinations' objects may come to
/// together.
pub(super) const MAX_INPUT_BYTES: u64 = 64 << 20;

/// One combination's object as pSConfig gives it to jq, with the
/// addresses the combination uses and which end schedules.
pub(super) struct Input {
    pub object: Value,
    pub ends: Vec<String>,
    pub sched: usize,
}

/// Whether a template string holds a `{% jq … %}` variable.
pub(super) fn has_jq(s: &str) -> bool {
    vars(s).any(|(_, v)| {
        v.strip_prefix("jq")
            .is_some_and(|r| r.starts_with(char::is_whitespace))
    })
}

/// Each `{% … %}` in `s`: its byte range and its trimmed content.
fn vars(s: &str) -> impl Iterator<Item = (std::ops::Range<usize>, &str)> {
    let mut from = 0;
    std::iter::from_fn(move || {
        let at = s[from..].find("{%")? + from;
        let end = s[at..].find("%}")? + at;
        from = end + 2;
        Some((at..end + 2, s[at + 2..end].trim()))
    })
}

/// pSConfig's object for each combination of each enabled task that
/// runs `test_name` (pSConfig evaluates only those): the combination's
/// address objects, their hosts (`{}` for none), the task's and the
/// scheduling host's archives, the addresses' contexts, the task, the
/// test and the task's schedule. Refused when more than `MAX_COMBOS`,
/// or more than `MAX_INPUT_BYTES` in all.
pub(super) fn inputs(
    top: &Map<String, Value>,
    tpl: &super::Template,
    test_name: &str,
    test: &Value,
) -> Result<Vec<Input>, String> {
    let section = |k: &str, name: &str| top.get(k).and_then(|m| m.get(name)).cloned();
    let refs = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .take(64)
            .map(str::to_owned)
            .collect()
    };
    let mut out = Vec::new();
    let mut built = 0u64;
    let tasks = top.get("tasks").and_then(Value::as_object).into_iter().flatten();
    for (_, task) in tasks {
        if task.get("test").and_then(Value::as_str) != Some(test_name) || super::disabled(task) {
            continue;
        }
        let Some(g) = task
            .get("group")
            .and_then(Value::as_str)
            .and_then(|g| section("groups", g))
        else {
            continue;
        };
        let Ok(combos) = tpl.expand(&g, "", &mut Vec::new()) else {
            continue;
        };
        let k = task.get("scheduled-by").and_then(Value::as_u64).unwrap_or(0) as usize;
        let schedule = task
            .get("schedule")
            .and_then(Value::as_str)
            .and_then(|s| section("schedules", s));
        for c in combos.iter().filter(|c| c.iter().all(|e| !e.disabled)) {
            if out.len() >= MAX_COMBOS {
                return Err(format!(
                    "its test is run by more than {MAX_COMBOS} combinations, more than goodput evaluates {{% jq %}} over"
                ));
            }
            let Some(sched) = (k < c.len() && !c[k].no_agent)
                .then_some(k)
                .or_else(|| c.iter().position(|e| !e.no_agent))
            else {
                continue;
            };
            let host = |e: &super::expand::End| e.host.as_deref().and_then(|h| section("hosts", h));
            let addresses: Vec<Value> = c
                .iter()
                .map(|e| {
                    let mut a = section("addresses", &e.name).unwrap_or_else(|| Value::Object(Map::new()));
                    if let Some(m) = a.as_object_mut() {
                        m.insert("address".into(), Value::String(e.address.clone()));
                    }
                    a
                })
                .collect();
            let hosts: Vec<Value> = c
                .iter()
                .map(|e| host(e).unwrap_or_else(|| Value::Object(Map::new())))
                .collect();
            let mut archive_names = refs(task.get("archives"));
            archive_names.extend(refs(host(&c[sched]).as_ref().and_then(|h| h.get("archives"))));
            let mut archives = Vec::new();
            for (i, a) in archive_names.iter().enumerate() {
                if !archive_names[..i].contains(a) {
                    archives.extend(section("archives", a));
                }
            }
            let contexts: Vec<Value> = c
                .iter()
                .flat_map(|e| {
                    refs(
                        section("addresses", &e.name)
                            .as_ref()
                            .and_then(|a| a.get("contexts")),
                    )
                })
                .filter_map(|x| section("contexts", &x))
                .collect();
            let mut object = serde_json::json!({
                "addresses": addresses,
                "archives": archives,
                "contexts": contexts,
                "hosts": hosts,
                "task": task,
                "test": test,
            });
            if let Some(s) = schedule.clone() {
                object["schedule"] = s;
            }
            built = built.saturating_add(size(&object, MAX_INPUT_BYTES));
            if built > MAX_INPUT_BYTES {
                return Err(format!(
                    "pSConfig's objects for its combinations come to more than {} MiB, more than goodput evaluates {{% jq %}} over",
                    MAX_INPUT_BYTES >> 20
                ));
            }
            out.push(Input {
                object,
                ends: c.iter().map(|e| e.address.clone()).collect(),
                sched,
            });
        }
    }
    Ok(out)
}

/// `s` with each `{% jq … %}` replaced as pSConfig would for every
/// combination in `inputs`: by the text they all give, or, when it is
/// in every combination the address of the same end, by that end's
/// variable (`{% address[i] %}`, `{% scheduled_by_address %}`), which
/// the conversion then places as it places any. Other variables are
/// left as they are. The error is the reason the field cannot be
/// carried over.
pub(super) fn resolve(s: &str, inputs: Result<&[Input], &String>, steps: &mut u64) -> Result<String, String> {
    let inputs = inputs.map_err(Clone::clone)?;
    let mut out = String::new();
    let mut last = 0;
    for (range, var) in vars(s) {
        let Some(code) = var
            .strip_prefix("jq")
            .filter(|r| r.starts_with(char::is_whitespace))
        else {
            continue;
        };
        let code = code.trim();
        let expr = parse(code).map_err(|e| format!("{{% jq {code} %}} is refused: {e}"))?;
        if inputs.is_empty() {
            return Err(format!(
                "{{% jq {code} %}}: no enabled task runs this test, so pSConfig never evaluates it"
            ));
        }
        let mut texts = Vec::with_capacity(inputs.len());
        for i in inputs {
            let t = expr
                .text(&i.object, steps)
                .map_err(|e| format!("{{% jq {code} %}} is refused: {e}"))?;
            texts.push(t);
        }
        let end_is = |at: Option<usize>| {
            inputs
                .iter()
                .zip(&texts)
                .all(|(i, t)| i.ends.get(at.unwrap_or(i.sched)) == Some(t))
        };
        let width = inputs.iter().map(|i| i.ends.len()).min().unwrap_or(0);
        let text = if texts.iter().all(|t| *t == texts[0]) {
            texts[0].clone()
        } else if let Some(j) = (0..width).find(|j| end_is(Some(*j))) {
            format!("{{% address[{j}] %}}")
        } else if end_is(None) {
            "{% scheduled_by_address %}".to_owned()
        } else {
            return Err(format!(
                "{{% jq {code} %}} gives a different text for each combination (goodput runs one test document for all of a test's pairs, with only their addresses varying)"
            ));
        };
        out.push_str(&s[last..range.start]);
        out.push_str(&text);
        last = range.end;
    }
    out.push_str(&s[last..]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::{Duration, Instant};

    fn text(code: &str, input: &Value) -> Result<String, String> {
        parse(code)?.text(input, &mut TEMPLATE_STEPS.clone())
    }

    #[test]
    fn paths_strings_and_choices() {
        let obj = json!({
            "addresses": [
                {"address": "ps1.example.net", "_meta": {"display-set": "east", "site": "A"}},
                {"address": "ps2.example.net", "_meta": {"display-set": "west"}}
            ],
            "task": {"_meta": {"display-name": "Throughput"}},
            "test": {"spec": {"duration": "PT30S"}}
        });
        let t = |c: &str| text(c, &obj);
        assert_eq!(t(r#".addresses[0]._meta."display-set""#).as_deref(), Ok("east"));
        assert_eq!(t(".addresses[1].address").as_deref(), Ok("ps2.example.net"));
        assert_eq!(t(r#".task._meta."display-name""#).as_deref(), Ok("Throughput"));
        assert_eq!(t(".addresses[1]._meta.site").as_deref(), Ok(""));
        assert_eq!(
            t(r#".addresses[0].address | split(".") | .[0] | ascii_upcase"#).as_deref(),
            Ok("PS1")
        );
        assert_eq!(
            t(r#""\(.addresses[0]._meta.site)-\(.addresses[1]._meta.site // "none")""#).as_deref(),
            Ok("A-none")
        );
        assert_eq!(
            t(r#"if .addresses[0]._meta."display-set" == "east" then "e" else "w" end"#).as_deref(),
            Ok("e")
        );
        assert_eq!(
            t(r#".addresses | map(.address) | join(",")"#).as_deref(),
            Ok("ps1.example.net,ps2.example.net")
        );
        assert_eq!(
            t(r#".addresses[0] as $a | $a.address + ":" + (.addresses | length | tostring)"#).as_deref(),
            Ok("ps1.example.net:2")
        );
        assert!(t(r#"try error_x catch "c""#).unwrap_err().contains("error_x"));
        assert_eq!(
            t(r#"try (.addresses | .[0] | .[0]) catch "c""#).as_deref(),
            Ok("c")
        );
        // pSConfig inserts one string: other outputs are refused.
        assert!(t(".addresses | length").unwrap_err().contains("a number"));
        assert!(t(".addresses[].address")
            .unwrap_err()
            .contains("more than one output"));
        assert!(t("empty").unwrap_err().contains("no output"));
    }

    #[test]
    fn endless_and_huge_expressions_are_refused_quickly() {
        let obj = json!({"addresses": [{"address": "a"}], "hosts": {}});
        let started = Instant::now();
        for (code, why) in [
            ("def f: f; f", "`def` is not allowed"),
            ("repeat(.)", "`repeat/1` is not one of the builtins allowed"),
            ("[range(1e18)]", "`range/1` is not one"),
            ("until(false; .)", "`until/2` is not one"),
            ("[limit(5; repeat(1))]", "`limit/2` is not one"),
            ("recurse", "`recurse/0` is not one"),
            ("..", "`..` (recursion) is not allowed"),
            ("reduce .[] as $x (0; .)", "`reduce` is not allowed"),
            ("input", "`input/0` is not one"),
            ("$ENV", "$ENV is not defined"),
            ("env.HOME", "`env/0` is not one"),
            ("label $out | 1", "`label` and `break` are not allowed"),
            (".a = 1", "assignment and update are not allowed"),
        ] {
            let e = text(code, &obj).unwrap_err();
            assert!(e.contains(why), "{code}: {e}");
        }
        // Allowed pieces that would grow without bound hit the budgets.
        let doubling = format!("\"xxxxxxxxxxxxxxxx\"{}", " | . + .".repeat(40));
        let e = text(&doubling, &obj).unwrap_err();
        assert!(e.contains("bytes"), "{e}");
        let wide = format!("[{}]", ["(.,.,.,.,.,.,.,.)"; 12].join(" | "));
        let e = text(&wide, &obj).unwrap_err();
        assert!(e.contains("steps"), "{e}");
        let long = ".a".repeat(300);
        assert!(text(&long, &obj).unwrap_err().contains("allowed"));
        let deep = format!("{}.{}", "(".repeat(100), ")".repeat(100));
        assert!(text(&deep, &obj).unwrap_err().contains("deep"));
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
    }

    /// A template whose test is run by `n` addresses in a mesh, with
    /// `meta` bytes in the test's `_meta` and its dest from jq.
    fn mesh(n: usize, meta: usize) -> Value {
        let addresses: Map<String, Value> = (0..n)
            .map(|i| (format!("a{i}"), json!({ "address": format!("192.0.2.{i}") })))
            .collect();
        let names: Vec<Value> = (0..n).map(|i| json!({ "name": format!("a{i}") })).collect();
        json!({
            "addresses": addresses,
            "groups": { "g": { "type": "mesh", "addresses": names } },
            "tests": { "t": { "type": "rtt", "_meta": { "x": "y".repeat(meta) },
                "spec": { "dest": "{% jq .addresses[1].address %}" } } },
            "schedules": { "s": { "repeat": "PT1H" } },
            "tasks": { "k": { "group": "g", "test": "t", "schedule": "s" } }
        })
    }

    #[test]
    fn a_test_run_by_too_many_combinations_is_not_evaluated() {
        let started = Instant::now();
        let choices = super::super::ImportChoices::default();
        let ok = super::super::import_psconfig(&mesh(3, 0), choices).unwrap();
        assert_eq!(ok.config.tests["t"]["host"], json!("{{dest}}"));
        // 65 addresses: 4160 pairs.
        let many = super::super::import_psconfig(&mesh(65, 0), choices).unwrap();
        let note = many
            .notes
            .iter()
            .find(|n| n.starts_with("tests.t: spec.dest"))
            .unwrap();
        assert!(note.contains("more than 4096 combinations"), "{note}");
        assert!(!many.config.tests.contains_key("t"));
        // 9 addresses (72 pairs), each object carrying the 1 MB test.
        let big = super::super::import_psconfig(&mesh(9, 1 << 20), choices).unwrap();
        let note = big
            .notes
            .iter()
            .find(|n| n.starts_with("tests.t: spec.dest"))
            .unwrap();
        assert!(note.contains("more than 64 MiB"), "{note}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn copies_of_a_large_input_are_charged_before_they_are_made() {
        let obj = json!({ "big": "b".repeat(1 << 20) });
        let fan = "(.,.,.,.,.,.,.,.)";
        let started = Instant::now();
        for code in [
            format!("[{fan} | {fan} | {fan} | .big] | length | tostring"),
            format!("[{fan} | {fan} | {fan} | {{a: .big}}] | length | tostring"),
            format!("[{fan} | {fan} | {fan} | \"\\(.big)\"] | length | tostring"),
            format!("[{fan} | {fan} | {fan} | .big] | map(.) | length | tostring"),
        ] {
            let e = text(&code, &obj).unwrap_err();
            assert!(e.contains("bytes"), "{code}: {e}");
        }
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "{:?}",
            started.elapsed()
        );
        // Small copies are fine.
        let small = json!({ "big": "b" });
        let code = format!("[{fan} | .big] | length | tostring");
        assert_eq!(text(&code, &small).as_deref(), Ok("8"));
    }
}
