//! The part of a filter the kernel cannot evaluate (the process id, values it does not hold, comparisons it does
//! not take), evaluated by rprof on each entry or hit that reaches it. A value that is missing (not fetched, or
//! the process of an event in an interrupt) satisfies no comparison.
use super::calls::Call;
use crate::probe::spec::fetch::Fetch;
use crate::probe::spec::filter::{CmpOp, Expr, Literal};
use crate::probe::value::Value;
use crate::resolve::FastMap;
use globset::GlobMatcher;

/// A filter expression with its globs compiled.
#[derive(Debug)]
pub struct UserFilter {
    expr: Expr,
    globs: FastMap<String, GlobMatcher>,
}

impl UserFilter {
    pub fn new(expr: &Expr) -> UserFilter {
        let mut globs = FastMap::default();
        for lit in expr.literals() {
            if let Literal::Str(s) = lit {
                if let Ok(g) = globset::Glob::new(s) {
                    globs.insert(s.clone(), g.compile_matcher());
                }
            }
        }
        UserFilter {
            expr: expr.clone(),
            globs,
        }
    }

    /// Whether a call (its values, named like `fetches`, and its context) passes.
    pub fn keeps(&self, fetches: &[Fetch], call: &Call) -> bool {
        let get = |name: &str| match fetches.iter().position(|f| f.label == name) {
            Some(i) => call.values.get(i).cloned().flatten(),
            None => call.ctx.value(name),
        };
        self.eval(&self.expr, &get)
    }

    /// Whether values named like `fetches` (one each), with this context, pass.
    pub fn keeps_values(
        &self,
        fetches: &[Fetch],
        values: &[Option<Value>],
        ctx: &super::context::Ctx,
    ) -> bool {
        let get = |name: &str| match fetches.iter().position(|f| f.label == name) {
            Some(i) => values.get(i).cloned().flatten(),
            None => ctx.value(name),
        };
        self.eval(&self.expr, &get)
    }

    /// Whether an event with only a context passes.
    #[cfg(test)]
    pub fn keeps_ctx(&self, ctx: &super::context::Ctx) -> bool {
        self.eval(&self.expr, &|n| ctx.value(n))
    }

    fn eval(&self, e: &Expr, get: &dyn Fn(&str) -> Option<Value>) -> bool {
        match e {
            Expr::Cmp { name, op, value } => {
                get(name).is_some_and(|v| self.compare(&v, *op, value))
            }
            Expr::Mask { name, mask } => get(name)
                .and_then(|v| number(&v))
                .is_some_and(|v| (v as u64) & mask != 0),
            Expr::Not(e) => !self.eval(e, get),
            Expr::And(a, b) => self.eval(a, get) && self.eval(b, get),
            Expr::Or(a, b) => self.eval(a, get) || self.eval(b, get),
        }
    }

    fn compare(&self, v: &Value, op: CmpOp, lit: &Literal) -> bool {
        use std::cmp::Ordering;
        let ord: Ordering = match (v, lit) {
            (Value::Str(s), Literal::Str(l)) => {
                if op == CmpOp::Glob {
                    return self.globs.get(l).is_some_and(|g| g.is_match(s.as_ref()));
                }
                s.as_ref().cmp(l.as_str())
            }
            (v, Literal::Int(l)) => match number(v) {
                Some(n) => n.cmp(l),
                None => return false,
            },
            _ => return false,
        };
        match op {
            CmpOp::Eq => ord.is_eq(),
            CmpOp::Ne => ord.is_ne(),
            CmpOp::Lt => ord.is_lt(),
            CmpOp::Le => ord.is_le(),
            CmpOp::Gt => ord.is_gt(),
            CmpOp::Ge => ord.is_ge(),
            CmpOp::Glob => false,
        }
    }
}

fn number(v: &Value) -> Option<i128> {
    match v {
        Value::Int(i) => Some((*i).into()),
        Value::UInt(u) | Value::Hex(u) | Value::Addr(u) => Some((*u).into()),
        Value::Dev(d) => Some((*d).into()),
        Value::Named { raw, .. } => Some((*raw).into()),
        Value::Signal(n) | Value::Errno(n) => Some((*n).into()),
        Value::Str(_) | Value::Ip(_) | Value::Sock(_) | Value::Bytes(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::context::Ctx;
    use super::*;
    use crate::probe::spec::filter::parse;

    /// Check comparisons, globs, masks and missing values on the process context.
    #[test]
    fn evaluates_on_the_context() {
        let ctx = Ctx {
            pid: Some(42),
            tid: Some(43),
            comm: Some("python3".into()),
            cpu: Some(1),
            ppid: Some(1),
        };
        let keeps = |text: &str| UserFilter::new(&parse(text).unwrap()).keeps_ctx(&ctx);
        assert!(keeps("pid == 42 && comm ~ \"py*\""));
        assert!(keeps("pid > 41 && pid <= 42 && !(tid < 43)"));
        assert!(keeps("cpu & 1 || pid == 0"));
        assert!(!keeps("comm == \"python\""));
        assert!(!keeps("comm < 3"));
        let irq = Ctx {
            cpu: Some(0),
            ..Ctx::default()
        };
        let f = UserFilter::new(&parse("pid != 42").unwrap());
        assert!(!f.keeps_ctx(&irq));
    }
}
