//! Maps and variables: key types kept the same across a map's uses, value types kept by the first assignment,
//! with bpftrace's messages ("Argument mismatch for @x", "Type mismatch for @x").
use super::expr::Use;
use super::Analyser;
use crate::bt::ast::{BinOp, Expr, ExprKind};
use crate::bt::diag::Span;
use crate::bt::types::{key_list, Ty};

impl Analyser<'_> {
    /// The key types of `@name[keys]`, checked against the map's earlier uses (from the second pass).
    pub(super) fn map_key(&mut self, span: Span, name: &str, keys: &[Expr]) -> Vec<Ty> {
        let mut types = Vec::new();
        for k in keys {
            let t = self.expr(k, Use::MapKey);
            if matches!(t, Ty::Tuple(_)) {
                self.err(span, "tuple cannot be used as a map key. Try a multi-key associative array instead (eg `@map[$1, $2] = ...)`.");
            }
            if t.is_aggregation() {
                self.err(span, format!("{} cannot be used as a map key", t.kind()));
            }
            types.push(t.as_key());
        }
        if types.contains(&Ty::None) {
            return types;
        }
        match self.map_keys.get(name) {
            None => {
                self.map_keys.insert(name.to_string(), types.clone());
            }
            Some(known) if self.pass > 1 && !same_keys(known, &types) => {
                let message = format!(
                    "Argument mismatch for {name}: trying to access with arguments: {} when map expects arguments: {}",
                    key_list(&types),
                    key_list(known)
                );
                self.err(span, message);
            }
            Some(_) => {}
        }
        types
    }

    /// A map read (or the map of an assignment, `read` false): its key checked, its value's type.
    pub(super) fn map(&mut self, span: Span, name: &str, keys: &[Expr], read: bool) -> Ty {
        self.map_key(span, name, keys);
        match self.map_vals.get(name) {
            Some(t) => t.clone(),
            None => {
                if read && self.is_final() {
                    self.err(span, format!("Undefined map: {name}"));
                }
                Ty::None
            }
        }
    }

    /// A map named whole (`print(@x)`, `clear(@x)`): its value's type, its keys not checked.
    pub(super) fn whole_map(&mut self, span: Span, name: &str) -> Ty {
        match self.map_vals.get(name) {
            Some(t) => t.clone(),
            None => {
                if self.is_final() {
                    self.err(span, format!("Undefined map: {name}"));
                }
                Ty::None
            }
        }
    }

    pub(super) fn assign_map(
        &mut self,
        stmt: Span,
        map: &Expr,
        value: &Expr,
        compound: Option<BinOp>,
    ) {
        let ExprKind::Map { name, keys } = &map.kind else {
            return;
        };
        let ty = match compound {
            Some(op) => {
                let old = self.map(map.span, name, keys, true);
                let new = self.expr(value, Use::Value);
                if self.is_final()
                    && (!old.is_int() || !new.is_int())
                    && old != Ty::None
                    && new != Ty::None
                {
                    self.err(
                        stmt,
                        format!(
                            "The {} operator can not be used on expressions of types {old}, {new}",
                            op.text()
                        ),
                    );
                }
                Ty::INT64
            }
            None => {
                self.map(map.span, name, keys, false);
                self.expr(value, Use::MapValue)
            }
        };
        if ty == Ty::None {
            // bpftrace keeps a map whose value has no type as undefined, and says so in its final pass.
            let untyped = self.map_vals.get(name).is_none_or(|t| *t == Ty::None);
            if self.is_final() && untyped {
                self.err(map.span, format!("Undefined map: {name}"));
            }
            self.final_err(value.span, "Invalid expression for assignment: none");
            return;
        }
        let stored = match ty {
            Ty::Int { signed, .. } => Ty::Int { bits: 64, signed },
            t => t,
        };
        match self.map_vals.get_mut(name) {
            None => {
                self.map_vals.insert(name.clone(), stored);
            }
            Some(known) if !known.same_kind(&stored) => {
                let known = known.to_string();
                // bpftrace's message ends without its closing quote.
                self.err(map.span, format!("Type mismatch for {name}: trying to assign value of type '{stored}' when map already contains a value of type '{known}"));
            }
            Some(known) => {
                if let (Ty::Str(a), Ty::Str(b)) = (&*known, &stored) {
                    *known = Ty::Str((*a).max(*b));
                }
            }
        }
    }

    pub(super) fn assign_var(
        &mut self,
        stmt: Span,
        var: &Expr,
        value: &Expr,
        compound: Option<BinOp>,
    ) {
        let ExprKind::Var(name) = &var.kind else {
            return;
        };
        let ty = match compound {
            Some(_) => {
                let old = self.expr(var, Use::Value);
                self.expr(value, Use::Value);
                old
            }
            None => self.expr(value, Use::VarValue),
        };
        if ty.is_aggregation() {
            return;
        }
        match self.vars.get_mut(name) {
            None => {
                self.vars.insert(name.clone(), ty);
            }
            Some(Ty::None) => *self.vars.get_mut(name).expect("present") = ty,
            Some(known) if ty != Ty::None && !known.same_kind(&ty) => {
                let known = known.to_string();
                self.err(stmt, format!("Type mismatch for {name}: trying to assign value of type '{ty}' when variable already contains a value of type '{known}'"));
            }
            Some(known) => {
                if let (Ty::Str(a), Ty::Str(b)) = (&*known, &ty) {
                    *known = Ty::Str((*a).max(*b));
                }
            }
        }
    }
}

/// Keys match when each has the same type; strings of any size match.
fn same_keys(a: &[Ty], b: &[Ty]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x == y || (x.is_str() && y.is_str()))
}
