//! Expressions: values fetched by the probe, literals, maps and variables, operators, casts, tuples.
//!
//! Integer arithmetic as bpftrace 0.17's code does it, checked on this machine with BEGIN programs:
//! operands are widened to 64 bits by their own sign; the result is signed only when both operands are
//! (`(uint64)1 - 2` prints 18446744073709551615); comparisons are signed only when both operands are (`-1 <
//! (uint32)5` is false); `/`, `%` and `>>` are unsigned whatever the signs (`-7 / 2` is
//! 9223372036854775804, `-7 % 2` is 1), and a zero divisor gives 0; `~`, `-` and `!` keep their operand's
//! type (`~(uint8)5` prints 250).
use super::exec::{as_int, truthy, Exec};
use crate::bt::ast::{BinOp, Expr, ExprKind, Param, UnOp};
use crate::bt::types::int_cast;
use crate::bt::value::{Int, IntType, Value};
use crate::bt::values::ValueRef;

impl Exec<'_, '_, '_> {
    /// The value of `e`.
    pub(super) fn eval(&mut self, e: &Expr) -> Value {
        if let Some(r) = ValueRef::of(e) {
            return self.fetched(&r, e);
        }
        match &e.kind {
            ExprKind::Int(n) => Value::int(*n),
            ExprKind::Str(s) => Value::Str(s.clone()),
            ExprKind::Ident(name) => match crate::bt::consts::lookup(name) {
                Some((v, _)) => Value::int(v),
                None => Value::int(0),
            },
            ExprKind::Builtin(name) => self.builtin(name),
            ExprKind::StackMode(m) => Value::str(m),
            ExprKind::Param(p) => self.param(*p),
            ExprKind::Map { name, keys } => self.map_read(name, keys),
            ExprKind::Var(name) => self.vars.get(name).cloned().unwrap_or(Value::int(0)),
            ExprKind::Call { name, args } => self.call(name, args),
            ExprKind::Binop { op, left, right } => self.binop(*op, left, right),
            ExprKind::Unop { op, expr, postfix } => self.unop(*op, expr, *postfix),
            ExprKind::Ternary {
                cond,
                then,
                otherwise,
            } => {
                let v = if truthy(&self.eval(cond)) {
                    self.eval(then)
                } else {
                    self.eval(otherwise)
                };
                widen(v)
            }
            ExprKind::TupleIndex { expr, index } => match self.eval(expr) {
                Value::Tuple(items) => items.get(*index as usize).cloned().unwrap_or(Value::int(0)),
                _ => Value::int(0),
            },
            ExprKind::Index { expr, index } => self.index(expr, index),
            ExprKind::Cast {
                ty,
                pointer_depth,
                expr,
            } => self.cast(ty, *pointer_depth, expr),
            ExprKind::Tuple(items) => Value::Tuple(items.iter().map(|i| self.eval(i)).collect()),
            ExprKind::Field { field, .. } => {
                let text = format!("the field {field} of this value is not read here (read as 0)");
                self.unsupported(&text)
            }
        }
    }

    /// A value the probe fetched (`args->f`, `argN`, `retval`, `str()` of them); 0 or "" when this event
    /// could not read it. `str(x, n)` keeps at most `n` bytes.
    fn fetched(&mut self, r: &ValueRef, e: &Expr) -> Value {
        let string = matches!(
            r,
            ValueRef::FieldStr(_) | ValueRef::ArgStr(_) | ValueRef::RetvalStr
        );
        let found = self.ev.and_then(|ev| ev.value(r)).cloned();
        let v = match found {
            Some(v) => v,
            None if matches!(r, ValueRef::Reg(_)) => {
                return self.unsupported("reg(): this event carried no registers (read as 0)")
            }
            None if string => Value::Str(Vec::new()),
            None => match r {
                ValueRef::Field(_) => Value::int(0),
                _ => Value::uint(0),
            },
        };
        if !string {
            // A `char[N]` field ends at its first NUL.
            return match v {
                Value::Str(b) => Value::Str(until_nul(&b).to_vec()),
                v => v,
            };
        }
        let limit = match &e.kind {
            ExprKind::Call { args, .. } if args.len() > 1 => {
                let n = as_int(&self.eval(&args[1])).extended() as usize;
                (n + 1).min(self.rt.opts.strlen)
            }
            _ => self.rt.opts.strlen,
        };
        match v {
            Value::Str(b) => Value::str_bytes(&b, limit),
            v => v,
        }
    }

    /// `$N` (a number where it reads as one, else its text) and `$#`.
    pub(super) fn param(&self, p: Param) -> Value {
        let params = &self.rt.opts.params;
        match p {
            Param::Count => Value::int(params.len() as i64),
            Param::Positional(n) => match params.get((n as usize).wrapping_sub(1)) {
                None => Value::int(0),
                Some(text) => match parse_number(text) {
                    Some(v) => Value::int(v),
                    None => Value::Str(text.as_bytes().to_vec()),
                },
            },
        }
    }

    fn binop(&mut self, op: BinOp, left: &Expr, right: &Expr) -> Value {
        match op {
            BinOp::LAnd => {
                let v = truthy(&self.eval(left)) && truthy(&self.eval(right));
                Value::uint(u64::from(v))
            }
            BinOp::LOr => {
                let v = truthy(&self.eval(left)) || truthy(&self.eval(right));
                Value::uint(u64::from(v))
            }
            _ => {
                let l = self.eval(left);
                let r = self.eval(right);
                self.binop_values(op, &l, &r)
            }
        }
    }

    /// `l op r` on values already computed (also `op=`).
    pub(super) fn binop_values(&mut self, op: BinOp, l: &Value, r: &Value) -> Value {
        let (Value::Int(a), Value::Int(b)) = (l, r) else {
            let equal = match (l, r) {
                (Value::Str(a), Value::Str(b)) => until_nul(a) == until_nul(b),
                _ => l == r,
            };
            return match op {
                BinOp::Eq => Value::uint(u64::from(equal)),
                BinOp::Ne => Value::uint(u64::from(!equal)),
                _ => self.unsupported("an operator on values that are not integers (read as 0)"),
            };
        };
        let signed = a.ty.signed && b.ty.signed;
        let (x, y) = (a.extended(), b.extended());
        if op.is_comparison() {
            return Value::uint(u64::from(compare(op, x, y, signed)));
        }
        let v = match op {
            BinOp::Plus => x.wrapping_add(y),
            BinOp::Minus => x.wrapping_sub(y),
            BinOp::Mul => x.wrapping_mul(y),
            BinOp::Div => x.checked_div(y).unwrap_or(0),
            BinOp::Mod => x.checked_rem(y).unwrap_or(0),
            BinOp::BAnd => x & y,
            BinOp::BOr => x | y,
            BinOp::BXor => x ^ y,
            BinOp::Left => x.wrapping_shl(y as u32),
            _ => x.wrapping_shr(y as u32),
        };
        Value::Int(Int::new(v as i64, IntType { bits: 64, signed }))
    }

    fn unop(&mut self, op: UnOp, inner: &Expr, postfix: bool) -> Value {
        match op {
            UnOp::Increment | UnOp::Decrement => {
                let step = if op == UnOp::Increment { 1 } else { -1 };
                self.step(inner, step, postfix)
            }
            UnOp::Deref => {
                self.eval(inner);
                self.unsupported("'*' (a memory read) is not run here (read as 0)")
            }
            _ => {
                let i = as_int(&self.eval(inner));
                let x = i.extended() as i64;
                let v = match op {
                    UnOp::LNot => i64::from(x == 0),
                    UnOp::BNot => !x,
                    _ => x.wrapping_neg(),
                };
                Value::Int(Int::new(v, i.ty))
            }
        }
    }

    /// `$x++`, `--@m[k]`: the old value (postfix) or the new one.
    fn step(&mut self, target: &Expr, step: i64, postfix: bool) -> Value {
        let key = match &target.kind {
            ExprKind::Map { keys, .. } => self.key(keys),
            _ => Vec::new(),
        };
        let old = match &target.kind {
            ExprKind::Map { name, .. } => self.map_get(name, &key),
            _ => self.eval(target),
        };
        let o = as_int(&old);
        let new = Value::Int(Int::new((o.extended() as i64).wrapping_add(step), o.ty));
        match &target.kind {
            ExprKind::Map { name, .. } => self.map_store(name, key, new.clone()),
            ExprKind::Var(name) => {
                let name = name.clone();
                self.var_store(&name, new.clone());
            }
            _ => {}
        }
        if postfix {
            old
        } else {
            new
        }
    }

    /// `(uint8)x` truncates; a cast to a pointer keeps the address as an unsigned 64-bit value.
    fn cast(&mut self, ty: &str, depth: u8, inner: &Expr) -> Value {
        let v = as_int(&self.eval(inner));
        match int_cast(ty) {
            Some(crate::bt::types::Ty::Int { bits, signed }) if depth == 0 => {
                Value::Int(Int::new(v.extended() as i64, IntType { bits, signed }))
            }
            _ => Value::uint(v.extended()),
        }
    }

    /// `s[i]` of a string: its byte (an `int8`); other bases are memory reads.
    fn index(&mut self, base: &Expr, index: &Expr) -> Value {
        let b = self.eval(base);
        let i = as_int(&self.eval(index)).extended() as usize;
        match b {
            Value::Str(s) => Value::Int(Int::new(
                i64::from(s.get(i).copied().unwrap_or(0) as i8),
                IntType {
                    bits: 8,
                    signed: true,
                },
            )),
            Value::Tuple(items) => items.get(i).cloned().unwrap_or(Value::int(0)),
            _ => self
                .unsupported("'[]' through a pointer (a memory read) is not run here (read as 0)"),
        }
    }

    /// Something this runtime cannot give: 0, and one line on stderr the first time.
    pub(super) fn unsupported(&mut self, what: &str) -> Value {
        self.rt.warn_once(self.io, &format!("rprof bt: {what}"));
        Value::int(0)
    }
}

/// A string's bytes up to its first NUL.
pub(super) fn until_nul(s: &[u8]) -> &[u8] {
    &s[..s.iter().position(|&b| b == 0).unwrap_or(s.len())]
}

fn compare(op: BinOp, x: u64, y: u64, signed: bool) -> bool {
    let ord = if signed {
        (x as i64).cmp(&(y as i64))
    } else {
        x.cmp(&y)
    };
    match op {
        BinOp::Eq => ord.is_eq(),
        BinOp::Ne => ord.is_ne(),
        BinOp::Lt => ord.is_lt(),
        BinOp::Le => ord.is_le(),
        BinOp::Gt => ord.is_gt(),
        _ => ord.is_ge(),
    }
}

/// A ternary's integer result is 64 bits wide, with its branch's sign.
fn widen(v: Value) -> Value {
    match v {
        Value::Int(i) => Value::Int(Int::new(
            i.extended() as i64,
            IntType {
                bits: 64,
                signed: i.ty.signed,
            },
        )),
        v => v,
    }
}

/// A positional parameter that reads as a number (decimal, or hex with `0x`), as the checker decides.
fn parse_number(text: &str) -> Option<i64> {
    if let Ok(v) = text.parse::<i64>() {
        return Some(v);
    }
    let hex = text.strip_prefix("0x")?;
    u64::from_str_radix(hex, 16).ok().map(|v| v as i64)
}
