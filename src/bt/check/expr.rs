//! Types of expressions: literals, builtins, maps and variables, operators, fields, casts; assignments.
use super::Analyser;
use crate::bt::ast::{BinOp, Expr, ExprKind, Param, UnOp};
use crate::bt::attach::ProbeType;
use crate::bt::consts;
use crate::bt::diag::Span;
use crate::bt::types::{int_cast, tracepoint_field_type, Space, Ty};

/// Where an expression stands, for the functions that must (or must not) be assigned (`check_assignment`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Use {
    /// A statement of its own.
    Statement,
    /// Directly assigned to a map.
    MapValue,
    /// Directly assigned to a variable.
    VarValue,
    /// Directly a map's key.
    MapKey,
    /// Anywhere else.
    Value,
}

/// Why a kernel memory read cannot run here.
pub(super) const NO_KERNEL_MEMORY: &str =
    "rprof runs no BPF and reads kernel memory only through a kprobe's fetch arguments";

impl Analyser<'_> {
    pub(super) fn expr(&mut self, e: &Expr, at: Use) -> Ty {
        match &e.kind {
            ExprKind::Int(_) => Ty::INT64,
            ExprKind::Str(s) => Ty::Str(s.len() + 1),
            ExprKind::Ident(name) => self.ident(e.span, name),
            ExprKind::Builtin(name) => self.builtin(e.span, name),
            ExprKind::StackMode(_) => Ty::StackMode,
            ExprKind::Param(Param::Count) => Ty::INT64,
            ExprKind::Param(Param::Positional(n)) => {
                let value = self.env.params.get(*n as usize - 1);
                match value {
                    Some(v) if v.parse::<i64>().is_err() && !v.starts_with("0x") => {
                        Ty::Str(v.len() + 1)
                    }
                    _ => Ty::INT64,
                }
            }
            ExprKind::Map { name, keys } => self.map(e.span, name, keys, true),
            ExprKind::Var(name) => match self.vars.get(name) {
                Some(t) => t.clone(),
                None => {
                    self.err(e.span, format!("Undefined or undeclared variable: {name}"));
                    Ty::None
                }
            },
            ExprKind::Call { name, args } => self.call(e.span, name, args, at),
            ExprKind::Binop { op, left, right } => self.binop(e.span, *op, left, right),
            ExprKind::Unop { op, expr, .. } => self.unop(e.span, *op, expr),
            ExprKind::Ternary {
                cond,
                then,
                otherwise,
            } => self.ternary(e.span, cond, then, otherwise),
            ExprKind::Field { expr, field, arrow } => self.field(e.span, expr, field, *arrow),
            ExprKind::TupleIndex { expr, index } => self.tuple_index(e.span, expr, *index),
            ExprKind::Index { expr, index } => self.index(e.span, expr, index),
            ExprKind::Cast {
                ty,
                pointer_depth,
                expr,
            } => self.cast(e.span, ty, *pointer_depth, expr),
            ExprKind::Tuple(items) => {
                Ty::Tuple(items.iter().map(|i| self.expr(i, Use::Value)).collect())
            }
        }
    }

    fn ternary(&mut self, span: Span, cond: &Expr, then: &Expr, otherwise: &Expr) -> Ty {
        let c = self.expr(cond, Use::Value);
        let l = self.expr(then, Use::Value);
        let r = self.expr(otherwise, Use::Value);
        if self.is_final() {
            if !l.same_kind(&r) {
                self.err(
                    span,
                    format!(
                        "Ternary operator must return the same type: have '{}' and '{}'",
                        l.kind(),
                        r.kind()
                    ),
                );
            }
            if !c.is_int() {
                self.err(span, format!("Invalid condition in ternary: {}", c.kind()));
            }
        }
        match l {
            Ty::Str(_) => Ty::Str(self.env.strlen),
            Ty::Int { signed, .. } => Ty::Int { bits: 64, signed },
            t => t,
        }
    }

    fn tuple_index(&mut self, span: Span, expr: &Expr, index: i64) -> Ty {
        match self.expr(expr, Use::Value) {
            Ty::Tuple(items) => match items.get(index as usize) {
                Some(t) => t.clone(),
                None => {
                    self.final_err(
                        span,
                        format!(
                            "Invalid tuple index: {index}. Found {} elements in tuple.",
                            items.len()
                        ),
                    );
                    Ty::None
                }
            },
            Ty::None => Ty::None,
            t => {
                self.final_err(
                    span,
                    format!("Can not access index '{index}' on expression of type '{t}'"),
                );
                Ty::None
            }
        }
    }

    fn index(&mut self, span: Span, expr: &Expr, index: &Expr) -> Ty {
        let base = self.expr(expr, Use::Value);
        self.expr(index, Use::Value);
        match base {
            Ty::Array { elem, .. } => *elem,
            Ty::Str(_) => Ty::Int {
                bits: 8,
                signed: true,
            },
            Ty::Ptr { to, space, .. } => {
                self.memory_read(span, space, "an index through a pointer");
                *to
            }
            Ty::None => Ty::None,
            t => {
                self.final_err(span, format!("The array index operator [] can only be used on arrays and pointers, found {}.",
                        t.kind()));
                Ty::None
            }
        }
    }

    fn ident(&mut self, span: Span, name: &str) -> Ty {
        if self.has_includes && consts::lookup(name).is_some() {
            return Ty::INT64;
        }
        if self.has_includes {
            // bpftrace would find it in the included headers or the kernel's BTF; rprof reads neither.
            self.err(span, format!("Unknown identifier: '{name}': not in rprof's table of kernel constants \
                                    (src/bt/consts.rs), and rprof bt reads neither kernel headers nor BTF enums"));
        } else {
            self.err(span, format!("Unknown identifier: '{name}'"));
        }
        Ty::None
    }

    fn builtin(&mut self, span: Span, name: &str) -> Ty {
        let kind = self.probe_type();
        match name {
            "nsecs" | "elapsed" | "pid" | "tid" | "cgroup" | "uid" | "gid" | "cpu" | "rand"
            | "numaid" => Ty::UINT64,
            "comm" => Ty::Str(16),
            "kstack" => Ty::KStack,
            "ustack" => Ty::UStack,
            "probe" => Ty::Probe,
            "username" => Ty::Username,
            "cpid" => {
                if !self.env.has_child {
                    self.err(span, "cpid cannot be used without child command");
                }
                Ty::Int {
                    bits: 32,
                    signed: false,
                }
            }
            "retval" => {
                if !matches!(kind, Some(ProbeType::Kretprobe | ProbeType::Uretprobe)) {
                    let hint = if kind == Some(ProbeType::Tracepoint) {
                        " (try to use args->ret instead)"
                    } else {
                        ""
                    };
                    self.err(span, format!("The retval builtin can only be used with 'kretprobe' and 'uretprobe' and 'kfunc' probes{hint}"));
                }
                Ty::UINT64
            }
            "func" => {
                let mut ty = Ty::None;
                for spec in self.specs.clone() {
                    match spec.kind {
                        ProbeType::Kprobe | ProbeType::Kretprobe => ty = Ty::KSym,
                        ProbeType::Uprobe | ProbeType::Uretprobe => ty = Ty::USym,
                        k => self.err(
                            span,
                            format!("The func builtin can not be used with '{k}' probes"),
                        ),
                    }
                }
                ty
            }
            "args" => self.args_builtin(span),
            "curtask" => {
                self.err(span, format!("curtask is the kernel's task_struct: {NO_KERNEL_MEMORY}; comm, pid, tid, uid and cgroup give what programs read from it"));
                Ty::None
            }
            "ctx" => {
                self.err(span, "ctx is a BPF program's context, and rprof runs no BPF: use args (tracepoints) or arg0.. (kprobes, uprobes)");
                Ty::None
            }
            _ => self.numbered_arg(span, name),
        }
    }

    /// `arg0`..`arg9` and `sarg0`..`sarg9`.
    fn numbered_arg(&mut self, span: Span, name: &str) -> Ty {
        let stack = name.starts_with("sarg");
        for spec in self.specs.clone() {
            let ok = matches!(spec.kind, ProbeType::Kprobe | ProbeType::Uprobe)
                || (!stack && spec.kind == ProbeType::Usdt);
            if !ok {
                let which = if stack {
                    "'kprobes' and 'uprobes' probes"
                } else {
                    "'kprobes', 'uprobes' and 'usdt' probes"
                };
                self.err(
                    span,
                    format!("The {name} builtin can only be used with {which}"),
                );
            }
        }
        if !stack && name[3..].parse::<u32>().is_ok_and(|n| n > 5) {
            self.err(span, format!("x86_64 doesn't support {name}"));
        }
        Ty::UINT64
    }

    fn args_builtin(&mut self, span: Span) -> Ty {
        match self.probe_type() {
            Some(ProbeType::Tracepoint) => {
                let spec = &self.specs[0];
                Ty::Ptr {
                    to: Box::new(Ty::Record(format!(
                        "struct _tracepoint_{}_{}",
                        spec.target, spec.func
                    ))),
                    space: Space::Kernel,
                    ctx: true,
                }
            }
            Some(ProbeType::Uprobe) => Ty::Ptr {
                to: Box::new(Ty::Record("struct uprobe_args".into())),
                space: Space::User,
                ctx: true,
            },
            kind => {
                let name = match kind {
                    Some(ProbeType::Begin | ProbeType::End) => "special",
                    Some(k) => k.name(),
                    None => "invalid",
                };
                self.err(span, format!("The args builtin can only be used with tracepoint/kfunc/uprobeprobes ({name} used here)"));
                Ty::None
            }
        }
    }

    /// `args->f` (and `e.f`, `e->f` on other records).
    fn field(&mut self, span: Span, base: &Expr, field: &str, arrow: bool) -> Ty {
        let ty = self.expr(base, Use::Value);
        let record = match (&ty, arrow) {
            (Ty::Ptr { to, ctx: true, .. }, true) => match &**to {
                Ty::Record(name) => name.clone(),
                _ => return Ty::None,
            },
            (Ty::Ptr { ctx: true, .. }, false) => {
                self.err(span, format!("Can not access field '{field}' on type '{ty}'. Try dereferencing it first, or using '->'"));
                return Ty::None;
            }
            (Ty::None, _) => return Ty::None,
            (Ty::Ptr { to, .. }, true) if !matches!(**to, Ty::Record(_)) => {
                let message =
                    format!("Can not access field '{field}' on expression of type '{to}'");
                self.final_err(span, message);
                return Ty::None;
            }
            (Ty::Record(_) | Ty::Ptr { .. }, _) => {
                self.err(span, format!("the fields of '{ty}' need its C layout from headers or BTF: {NO_KERNEL_MEMORY}"));
                return Ty::None;
            }
            _ => {
                let what = if arrow {
                    "dereferencing it"
                } else {
                    "accessing it"
                };
                self.err(
                    span,
                    format!("Can not access field '{field}' on expression of type '{ty}' ({what})"),
                );
                return Ty::None;
            }
        };
        if record == "struct uprobe_args" {
            self.err(span, format!("args->{field} of a uprobe needs the function's DWARF parameters: parsed, not run yet by rprof bt (use arg0..arg5)"));
            return Ty::None;
        }
        let spec = self.specs[0].clone();
        let found = if spec.wildcard {
            self.env
                .tracepoints
                .expand(&spec.target, &spec.func)
                .into_iter()
                .next()
        } else {
            Some((spec.target.clone(), spec.func.clone()))
        };
        let fields = found.and_then(|(c, e)| self.env.tracepoints.fields(&c, &e).map(|f| (c, f)));
        let Some((category, fields)) = fields else {
            return Ty::None;
        };
        match fields.iter().find(|f| f.name == field) {
            Some(f) => tracepoint_field_type(&f.decl, f.size, f.signed, category == "syscalls"),
            None => {
                self.err(
                    span,
                    format!(
                        "Struct/union of type '{record}' does not contain a field named '{field}'"
                    ),
                );
                Ty::None
            }
        }
    }

    /// Refuse a read of memory that is not a user process's.
    pub(super) fn memory_read(&mut self, span: Span, space: Space, what: &str) {
        let kprobe = matches!(
            self.probe_type(),
            Some(ProbeType::Kprobe | ProbeType::Kretprobe)
        );
        if space != Space::User && !kprobe {
            self.final_err(
                span,
                format!("{what} reads kernel memory here: {NO_KERNEL_MEMORY}"),
            );
        }
    }

    /// The address space a pointer made from an integer points into: the probed process's at uprobes and USDT.
    pub(super) fn int_space(&self) -> Space {
        match self.probe_type() {
            Some(ProbeType::Uprobe | ProbeType::Uretprobe | ProbeType::Usdt) => Space::User,
            Some(ProbeType::Kprobe | ProbeType::Kretprobe) => Space::Kernel,
            _ => Space::Unknown,
        }
    }

    fn cast(&mut self, span: Span, ty: &str, depth: u8, inner: &Expr) -> Ty {
        let from = self.expr(inner, Use::Value);
        if let Ty::Record(_) = from {
            self.err(span, format!("Cannot cast from struct type \"{from}\""));
        }
        if let Some(int) = int_cast(ty) {
            if depth == 0 {
                if !from.is_int() && !from.is_ptr() && from != Ty::None {
                    self.err(
                        span,
                        format!("Casts are not supported for type: \"{from}\""),
                    );
                }
                return int;
            }
            let mut t = int;
            for _ in 0..depth {
                t = Ty::Ptr {
                    to: Box::new(t),
                    space: self.int_space(),
                    ctx: false,
                };
            }
            return t;
        }
        if ty.starts_with("struct ") || ty.starts_with("union ") || ty.starts_with("enum ") {
            let place = if self.int_space() == Space::User {
                "the program's C headers"
            } else {
                "the kernel's BTF"
            };
            self.err(span, format!("casting to '{ty}{}' needs the type's layout from {place}: parsed, not run yet by rprof bt ({NO_KERNEL_MEMORY})", " *".repeat(depth as usize)));
            return Ty::None;
        }
        self.err(span, format!("Unknown struct/union: '{ty}'"));
        Ty::None
    }

    fn unop(&mut self, span: Span, op: UnOp, inner: &Expr) -> Ty {
        if matches!(op, UnOp::Increment | UnOp::Decrement) {
            let text = if op == UnOp::Increment { "++" } else { "--" };
            return self.step(span, text, inner);
        }
        let ty = self.expr(inner, Use::Value);
        match op {
            UnOp::Deref => match ty {
                Ty::Ptr { to, space, .. } => {
                    self.memory_read(span, space, "'*' (a memory read)");
                    *to
                }
                Ty::Int { .. } => {
                    let space = self.int_space();
                    self.memory_read(span, space, "'*' (a memory read)");
                    Ty::UINT64
                }
                Ty::None => Ty::None,
                t => {
                    self.err(span, format!("Can not dereference type '{t}'"));
                    Ty::None
                }
            },
            _ => {
                if self.is_final() && !ty.is_int() && !ty.is_ptr() && ty != Ty::None {
                    let text = match op {
                        UnOp::LNot => "!",
                        UnOp::BNot => "~",
                        _ => "-",
                    };
                    self.err(
                        span,
                        format!(
                            "The {text} operator can not be used on expressions of type '{ty}'"
                        ),
                    );
                }
                match op {
                    UnOp::LNot => Ty::UINT64,
                    _ => Ty::INT64,
                }
            }
        }
    }

    /// `@x++`, `--$x`: the map or variable becomes an integer when it was nothing yet.
    fn step(&mut self, span: Span, text: &str, target: &Expr) -> Ty {
        match &target.kind {
            ExprKind::Map { name, keys } => {
                self.map_key(target.span, name, keys);
                let v = self
                    .map_vals
                    .entry(name.clone())
                    .or_insert(Ty::INT64)
                    .clone();
                if !v.is_int() && self.is_final() {
                    let message =
                        format!("The {text} operator can not be used on expressions of type '{v}'");
                    self.err(span, message);
                }
                v
            }
            ExprKind::Var(name) => match self.vars.get(name) {
                Some(t) => t.clone(),
                None => {
                    self.err(
                        target.span,
                        format!("Undefined or undeclared variable: {name}"),
                    );
                    Ty::None
                }
            },
            _ => Ty::None,
        }
    }

    fn binop(&mut self, span: Span, op: BinOp, left: &Expr, right: &Expr) -> Ty {
        let l = self.expr(left, Use::Value);
        let r = self.expr(right, Use::Value);
        if !self.is_final() || l == Ty::None || r == Ty::None {
            return Ty::INT64;
        }
        let int_like = |t: &Ty| t.is_int() || t.is_ptr();
        if int_like(&l) && int_like(&r) {
            let signed = matches!(l, Ty::Int { signed: true, .. })
                || matches!(r, Ty::Int { signed: true, .. });
            return if op.is_comparison() || matches!(op, BinOp::LAnd | BinOp::LOr) {
                Ty::UINT64
            } else {
                Ty::Int { bits: 64, signed }
            };
        }
        if !l.same_kind(&r) {
            self.err(
                left.span.to(right.span),
                format!(
                    "Type mismatch for '{}': comparing '{l}' with '{r}'",
                    op.text()
                ),
            );
        } else if op != BinOp::Eq && op != BinOp::Ne {
            self.err(
                span,
                format!(
                    "The {} operator can not be used on expressions of types {l}, {r}",
                    op.text()
                ),
            );
        }
        Ty::UINT64
    }
}
