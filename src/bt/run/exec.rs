//! One block's run: the predicate, then the statements (assignments, `if`, `unroll`, `while`, jumps), with
//! the block's variables, fresh for each run.
//!
//! Variables keep the type of their first assignment, and bpftrace 0.17 stores a later integer of another
//! width as its code does (checked on this machine): a narrower value overwrites only the low bytes
//! (`$a = 5; $a = (int8)-1` prints 255), a wider one is not stored at all (`$x = (uint8)250; $x += 10`
//! prints 250).
use super::runtime::Runtime;
use super::{Event, Flow, Io};
use crate::bt::ast::{BinOp, Expr, ExprKind, Jump, Param, Probe, Stmt, StmtKind};
use crate::bt::maps::{Key, MapKind, Update};
use crate::bt::types::Ty;
use crate::bt::value::{Int, IntType, Value};
use std::collections::HashMap;

/// What a statement asks of the statements around it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ctl {
    Next,
    Break,
    Continue,
    /// `return` or `exit()`: the block ends.
    Return,
}

/// The most iterations one `while` runs (bpftrace's verifier bounds loops; this only stops a runaway).
const WHILE_LIMIT: u64 = 1_000_000;

/// A block being run.
pub(super) struct Exec<'x, 'p, 'io> {
    pub(super) rt: &'x mut Runtime<'p>,
    pub(super) ev: Option<&'x Event<'x>>,
    pub(super) io: &'x mut Io<'io>,
    /// CLOCK_MONOTONIC now (the event's time where there is one).
    pub(super) now_ns: u64,
    pub(super) block: usize,
    pub(super) vars: HashMap<String, Value>,
    /// `exit()` ran in this block.
    pub(super) exited: bool,
}

impl<'x, 'p, 'io> Exec<'x, 'p, 'io> {
    pub(super) fn new(
        rt: &'x mut Runtime<'p>,
        ev: Option<&'x Event<'x>>,
        io: &'x mut Io<'io>,
        now_ns: u64,
        block: usize,
    ) -> Self {
        Exec {
            rt,
            ev,
            io,
            now_ns,
            block,
            vars: HashMap::new(),
            exited: false,
        }
    }

    /// The predicate (a non-zero integer lets the block run), then the statements.
    pub(super) fn run(&mut self, probe: &Probe) -> Flow {
        if let Some(pred) = &probe.pred {
            if !truthy(&self.eval(pred)) {
                return Flow::Continue;
            }
        }
        self.stmts(&probe.block);
        if self.exited {
            Flow::Exit
        } else {
            Flow::Continue
        }
    }

    fn stmts(&mut self, stmts: &[Stmt]) -> Ctl {
        for s in stmts {
            let ctl = self.stmt(s);
            if self.exited {
                return Ctl::Return;
            }
            if ctl != Ctl::Next {
                return ctl;
            }
        }
        Ctl::Next
    }

    fn stmt(&mut self, s: &Stmt) -> Ctl {
        match &s.kind {
            StmtKind::Expr(e) => {
                self.eval(e);
            }
            StmtKind::AssignMap {
                map,
                value,
                compound,
            } => self.assign_map(map, value, *compound),
            StmtKind::AssignVar {
                var,
                value,
                compound,
            } => self.assign_var(var, value, *compound),
            StmtKind::If {
                cond,
                then,
                otherwise,
            } => {
                if truthy(&self.eval(cond)) {
                    return self.stmts(then);
                } else if let Some(o) = otherwise {
                    return self.stmts(o);
                }
            }
            StmtKind::Unroll { count, body } => return self.unroll(count, body),
            StmtKind::While { cond, body } => return self.while_loop(cond, body),
            StmtKind::Jump(Jump::Break) => return Ctl::Break,
            StmtKind::Jump(Jump::Continue) => return Ctl::Continue,
            StmtKind::Jump(Jump::Return) => return Ctl::Return,
        }
        Ctl::Next
    }

    fn unroll(&mut self, count: &Expr, body: &[Stmt]) -> Ctl {
        let n = match &count.kind {
            ExprKind::Int(n) => *n,
            ExprKind::Param(Param::Count) => self.rt.opts.params.len() as i64,
            ExprKind::Param(Param::Positional(i)) => self
                .rt
                .opts
                .params
                .get((*i as usize).wrapping_sub(1))
                .and_then(|p| p.parse().ok())
                .unwrap_or(0),
            _ => 0,
        };
        for _ in 0..n.clamp(0, 100) {
            match self.stmts(body) {
                Ctl::Return => return Ctl::Return,
                Ctl::Break => break,
                Ctl::Next | Ctl::Continue => {}
            }
        }
        Ctl::Next
    }

    fn while_loop(&mut self, cond: &Expr, body: &[Stmt]) -> Ctl {
        let mut n = 0u64;
        while truthy(&self.eval(cond)) {
            n += 1;
            if n > WHILE_LIMIT {
                let text = format!("a while loop stopped after {WHILE_LIMIT} iterations");
                self.rt.warn_once(self.io, &text);
                break;
            }
            match self.stmts(body) {
                Ctl::Return => return Ctl::Return,
                Ctl::Break => break,
                Ctl::Next | Ctl::Continue => {}
            }
        }
        Ctl::Next
    }

    /// `@m[k] = v`, `@m[k] op= v`, and the aggregations (`@m[k] = count()`...).
    fn assign_map(&mut self, map: &Expr, value: &Expr, compound: Option<BinOp>) {
        let ExprKind::Map { name, keys } = &map.kind else {
            return;
        };
        if let (None, ExprKind::Call { name: f, args }) = (compound, &value.kind) {
            if is_aggregation(f) {
                let key = self.key(keys);
                return self.aggregate(name, key, f, args);
            }
        }
        // bpftrace reads `@m[k] op= v` as `@m[k] = @m[k] op v`: the key is evaluated twice, for the read and
        // for the store (`@[$i++] += 5` stores at 1).
        let v = match compound {
            Some(op) => {
                let old = self.map_read(name, keys);
                let new = self.eval(value);
                self.binop_values(op, &old, &new)
            }
            None => self.eval(value),
        };
        let key = self.key(keys);
        self.map_store(name, key, v);
    }

    /// Store `v` at `key`: integers at 64 bits with the sign of the map's first value.
    pub(super) fn map_store(&mut self, name: &str, key: Key, v: Value) {
        let v = match (v, self.map_type(name)) {
            (Value::Int(i), Ty::Int { signed, .. }) => {
                Value::Int(Int::new(i.extended() as i64, IntType { bits: 64, signed }))
            }
            (v, _) => v,
        };
        let done = match self.rt.maps.get_mut(name) {
            Some(map) => map.set(&key, v),
            None => Ok(Update::Stored),
        };
        self.key_done(key);
        if let Err(e) = done {
            self.rt.warn_once(self.io, &e.to_string());
        }
    }

    /// The type the checker gave the map's values.
    pub(super) fn map_type(&self, name: &str) -> Ty {
        self.rt
            .checked
            .maps
            .get(name)
            .map(|(_, v)| v.clone())
            .unwrap_or(Ty::None)
    }

    /// `@m[k]` read: the value, or the type's zero when the key is absent.
    pub(super) fn map_read(&mut self, name: &str, keys: &[Expr]) -> Value {
        let key = self.key(keys);
        let v = self.map_get(name, &key);
        self.key_done(key);
        v
    }

    /// The value at `key`, or the type's zero.
    pub(super) fn map_get(&self, name: &str, key: &[Value]) -> Value {
        let found = self.rt.maps.get(name).and_then(|m| m.get(key));
        found.unwrap_or_else(|| super::setup::zero_of(&self.map_type(name)))
    }

    /// A map key: integers as 64 bits (bpftrace casts integer keys to 64 bits). Built in the runtime's
    /// buffer of the last key (a key used for one lookup allocates nothing): give it back with
    /// [`Exec::key_done`].
    pub(super) fn key(&mut self, keys: &[Expr]) -> Key {
        let mut key = std::mem::take(&mut self.rt.key_buf);
        key.clear();
        for k in keys {
            // A key inside a key (`@a[@b[1]]`) takes a buffer of its own.
            let v = match self.eval(k) {
                Value::Int(i) => Value::uint(i.extended()),
                v => v,
            };
            key.push(v);
        }
        key
    }

    /// A key's buffer, for the next key.
    pub(super) fn key_done(&mut self, mut key: Key) {
        key.clear();
        self.rt.key_buf = key;
    }

    fn aggregate(&mut self, name: &str, key: Key, f: &str, args: &[Expr]) {
        let v = match args.first() {
            Some(a) => as_int(&self.eval(a)),
            None => Int::i64(0),
        };
        let Some(map) = self.rt.maps.get_mut(name) else {
            return self.key_done(key);
        };
        if f == "sum"
            && map.is_empty()
            && map.kind()
                == (MapKind::Sum {
                    signed: !v.ty.signed,
                })
        {
            let kind = MapKind::Sum {
                signed: v.ty.signed,
            };
            *map = crate::bt::maps::Map::new(name, kind, map.keyed(), self.rt.opts.map_keys_max);
        }
        let done = match f {
            "count" => map.count(&key),
            "sum" => map.sum(&key, v),
            "min" => map.min(&key, v),
            "max" => map.max(&key, v),
            "avg" | "stats" => map.avg(&key, v),
            "hist" => map.hist(&key, v),
            _ => map.lhist(&key, v),
        };
        self.key_done(key);
        if let Err(e) = done {
            self.rt.warn_once(self.io, &e.to_string());
        }
    }

    /// `$v = e` and `$v op= e`, with bpftrace's stores of another width (see the module's notes).
    fn assign_var(&mut self, var: &Expr, value: &Expr, compound: Option<BinOp>) {
        let ExprKind::Var(name) = &var.kind else {
            return;
        };
        let v = match compound {
            Some(op) => {
                let old = self.eval(var);
                let new = self.eval(value);
                self.binop_values(op, &old, &new)
            }
            None => self.eval(value),
        };
        self.var_store(name, v);
    }

    /// Store `v` in `$name`, as bpftrace 0.17's code stores it.
    pub(super) fn var_store(&mut self, name: &str, v: Value) {
        let stored = match (self.vars.get(name), v) {
            (Some(Value::Int(old)), Value::Int(new)) => {
                if new.ty.bits > old.ty.bits {
                    return;
                }
                let mask = if new.ty.bits >= 64 {
                    u64::MAX
                } else {
                    (1u64 << new.ty.bits) - 1
                };
                let bits = (old.raw() & !mask) | (new.raw() & mask);
                Value::Int(Int::new(bits as i64, old.ty))
            }
            (_, v) => v,
        };
        self.vars.insert(name.to_string(), stored);
    }
}

/// A condition's truth: a non-zero integer.
pub(super) fn truthy(v: &Value) -> bool {
    match v {
        Value::Int(i) => i.raw() != 0,
        Value::Str(s) => !s.is_empty(),
        _ => true,
    }
}

/// An integer operand (0 for values that are not integers; the checker keeps those out).
pub(super) fn as_int(v: &Value) -> Int {
    match v {
        Value::Int(i) => *i,
        _ => Int::i64(0),
    }
}

fn is_aggregation(f: &str) -> bool {
    matches!(
        f,
        "count" | "sum" | "min" | "max" | "avg" | "stats" | "hist" | "lhist"
    )
}
