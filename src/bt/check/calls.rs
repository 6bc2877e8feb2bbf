//! bpftrace 0.17's functions: argument counts (`check_nargs`, `check_varargs`), argument types
//! (`check_arg`), where each may stand (`check_assignment`), and the ones this machine cannot run.
use super::expr::{Use, NO_KERNEL_MEMORY};
use super::Analyser;
use crate::bt::ast::{Expr, ExprKind};
use crate::bt::attach::ProbeType;
use crate::bt::diag::Span;
use crate::bt::types::{Space, Ty};

/// Where a function's value may go: `check_assignment(want_map, want_var, want_map_key)`.
#[derive(Clone, Copy)]
enum Place {
    /// Only directly into a map (aggregations).
    Map,
    /// Never assigned nor a key (printf, print, delete...).
    Nowhere,
}

/// x86-64's registers as `reg()` names them (bpftrace's `arch/x86_64.cpp`).
const REGISTERS: &[&str] = &[
    "r15", "r14", "r13", "r12", "bp", "bx", "r11", "r10", "r9", "r8", "ax", "cx", "dx", "si", "di",
    "orig_ax", "ip", "cs", "flags", "sp", "ss",
];

/// Functions this machine cannot run, with the reason.
const REFUSED: &[(&str, &str)] = &[
    ("kptr", "kptr() marks kernel memory for reading"),
    (
        "kaddr",
        "kaddr() is a kernel symbol's address, for reading kernel memory",
    ),
    ("path", "path() is the BPF helper bpf_d_path"),
    (
        "override",
        "override() changes a kernel function's return in BPF (bpf_override_return)",
    ),
    (
        "skboutput",
        "skboutput() copies a kernel skb out through BPF (bpf_skb_output)",
    ),
];

impl Analyser<'_> {
    pub(super) fn call(&mut self, span: Span, name: &str, args: &[Expr], at: Use) -> Ty {
        if matches!(name, "system" | "signal") && !self.env.unsafe_ok {
            self.err(
                span,
                format!("{name}() is an unsafe function being used in safe mode"),
            );
        }
        let arg_use = if matches!(name, "print" | "clear" | "zero" | "delete") {
            Use::Statement
        } else {
            Use::Value
        };
        let types: Vec<Ty> = args
            .iter()
            .map(|a| match (&a.kind, arg_use) {
                // `sizeof(uint32)`: a type name, not an identifier to look up.
                (ExprKind::Ident(t), _)
                    if name == "sizeof" && crate::bt::types::int_cast(t).is_some() =>
                {
                    Ty::UINT64
                }
                // A whole map given to print/clear/zero is not looked up by key (bpftrace's
                // skip_key_validation); delete's key is checked as any other.
                (ExprKind::Map { name: map, keys }, Use::Statement)
                    if keys.is_empty() && name != "delete" =>
                {
                    self.whole_map(a.span, map)
                }
                (ExprKind::Map { name: map, keys }, Use::Statement) => {
                    self.map(a.span, map, keys, true)
                }
                _ => self.expr(a, Use::Value),
            })
            .collect();
        self.available(span, name);
        if let Some((_, why)) = REFUSED.iter().find(|(n, _)| *n == name) {
            self.err(span, format!("{why}: {NO_KERNEL_MEMORY}"));
            return Ty::None;
        }
        let c = CallCheck {
            span,
            name,
            args,
            types: &types,
        };
        match name {
            "hist" | "count" | "sum" | "min" | "max" | "avg" | "stats" | "lhist" => {
                self.aggregation(&c, at)
            }
            "print" => self.print_call(&c, at),
            "printf" | "system" | "cat" | "debugf" => self.printf_call(&c, at),
            "delete" | "clear" | "zero" | "exit" | "time" | "join" | "signal" => {
                self.statement_call(&c, at);
                Ty::None
            }
            _ => self.value_call(&c),
        }
    }

    /// The functions that are statements: they give no value.
    fn statement_call(&mut self, c: &CallCheck, at: Use) {
        let (span, name, args, types) = (c.span, c.name, c.args, c.types);
        match name {
            "delete" | "clear" | "zero" => {
                self.place(c, at, Place::Nowhere);
                if self.nargs(c, 1) {
                    match &args[0].kind {
                        ExprKind::Map { keys, .. } if name != "delete" && !keys.is_empty() => self
                            .err(
                                span,
                                format!(
                                    "The map passed to {name}() should not be indexed by a key"
                                ),
                            ),
                        ExprKind::Map { .. } => {}
                        _ => self.err(span, format!("{name}() expects a map to be provided")),
                    }
                }
            }
            "exit" => {
                self.place(c, at, Place::Nowhere);
                self.nargs(c, 0);
            }
            "time" => {
                self.place(c, at, Place::Nowhere);
                if self.varargs(c, 0, 1) && !args.is_empty() && self.is_final() {
                    self.arg(c, 0, "string", true);
                }
            }
            "join" => {
                self.place(c, at, Place::Nowhere);
                if self.varargs(c, 1, 2) && self.is_final() {
                    if !types[0].is_int() && !types[0].is_ptr() {
                        self.err(
                            span,
                            format!(
                                "() only supports int or pointer arguments ({} provided)",
                                types[0].kind()
                            ),
                        );
                    }
                    if args.len() > 1 {
                        self.arg(c, 1, "string", true);
                    }
                }
            }
            "signal" => {
                self.place(c, at, Place::Nowhere);
                self.nargs(c, 1);
                if let Some(a) = args.first() {
                    match &a.kind {
                        ExprKind::Str(_) | ExprKind::Int(_) => {}
                        _ => self.err(span, "signal only accepts string literals or integers"),
                    }
                }
            }
            _ => {}
        }
    }

    /// The functions that give a value.
    fn value_call(&mut self, c: &CallCheck) -> Ty {
        let (span, name, types) = (c.span, c.name, c.types);
        match name {
            "str" => {
                let length_ok =
                    c.args.len() != 2 || !self.is_final() || self.arg(c, 1, "integer", false);
                if length_ok && self.varargs(c, 1, 2) {
                    match &types[0] {
                        Ty::Ptr { space, .. } => self.memory_read(span, *space, "str() of this pointer"),
                        Ty::Int { .. } => {
                            let literal = matches!(c.args[0].kind, ExprKind::Param(_));
                            if !literal {
                                let space = self.int_space();
                                self.memory_read(span, space, "str() of this address");
                            }
                        }
                        Ty::None => {}
                        // `str($1)` of a parameter given as text.
                        Ty::Str(_) if matches!(c.args[0].kind, ExprKind::Param(_)) => {}
                        t => self.err(span, format!("str() expects an integer or a pointer type as first argument ({t} provided)")),
                    }
                }
                Ty::Str(self.env.strlen)
            }
            "buf" => {
                if self.varargs(c, 1, 2)
                    && c.args.len() == 1
                    && !matches!(types[0], Ty::Array { .. })
                    && self.is_final()
                {
                    self.err(
                        span,
                        format!(
                            "buf() expects a length argument for non-array type {}",
                            types[0].kind()
                        ),
                    );
                }
                Ty::Buffer(self.env.strlen + 1)
            }
            "ksym" | "usym" => {
                if self.nargs(c, 1)
                    && !types[0].is_int()
                    && !types[0].is_ptr()
                    && types[0] != Ty::None
                {
                    self.err(
                        span,
                        format!("{name}() expects an integer or pointer argument"),
                    );
                }
                if name == "ksym" {
                    Ty::KSym
                } else {
                    Ty::USym
                }
            }
            "kstack" | "ustack" => {
                self.varargs(c, 0, 2);
                if name == "kstack" {
                    Ty::KStack
                } else {
                    Ty::UStack
                }
            }
            "ntop" => {
                if self.varargs(c, 1, 2) {
                    let t = types.last().cloned().unwrap_or(Ty::None);
                    if !t.is_int() && !t.is_str() && !matches!(t, Ty::Array { .. } | Ty::None) {
                        self.err(
                            span,
                            format!(
                                "ntop() expects an integer or array argument, got {}",
                                t.kind()
                            ),
                        );
                    }
                }
                Ty::Inet
            }
            "pton" => {
                self.nargs(c, 1);
                Ty::Array {
                    elem: Box::new(Ty::Int {
                        bits: 8,
                        signed: false,
                    }),
                    len: 16,
                }
            }
            "reg" | "uaddr" | "cgroupid" => self.address_call(c),
            _ => self.more_value_call(c),
        }
    }

    /// `reg("NAME")`, `uaddr("SYMBOL")`, `cgroupid("PATH")`: a literal string in, a number out.
    fn address_call(&mut self, c: &CallCheck) -> Ty {
        let (span, name) = (c.span, c.name);
        if self.nargs(c, 1) && self.arg(c, 0, "string", true) && name == "reg" {
            if let ExprKind::Str(reg) = &c.args[0].kind {
                let reg = String::from_utf8_lossy(reg);
                if !REGISTERS.contains(&reg.as_ref()) {
                    self.err(
                        span,
                        format!("'{reg}' is not a valid register on this architecture (x86_64)"),
                    );
                }
            }
        }
        if name == "uaddr" {
            Ty::Ptr {
                to: Box::new(Ty::INT64),
                space: Space::User,
                ctx: false,
            }
        } else {
            Ty::UINT64
        }
    }

    /// The rest of the functions that give a value.
    fn more_value_call(&mut self, c: &CallCheck) -> Ty {
        let (span, name, types) = (c.span, c.name, c.types);
        match name {
            "strftime" => {
                if self.varargs(c, 2, 2) && self.is_final() && self.arg(c, 0, "string", true) {
                    self.arg(c, 1, "integer", false);
                }
                Ty::Timestamp
            }
            "strncmp" => {
                if self.nargs(c, 3) && self.is_final() {
                    self.arg(c, 2, "integer", true);
                }
                Ty::UINT64
            }
            "strcontains" => {
                self.nargs(c, 2);
                Ty::UINT64
            }
            "sizeof" => {
                self.nargs(c, 1);
                Ty::UINT64
            }
            "cgroup_path" => {
                self.varargs(c, 1, 2);
                Ty::CgroupPath
            }
            "strerror" => {
                if self.nargs(c, 1) {
                    self.arg(c, 0, "integer", false);
                }
                Ty::Strerror
            }
            "macaddr" => {
                self.nargs(c, 1);
                Ty::MacAddr
            }
            "bswap" => {
                if self.nargs(c, 1) {
                    self.arg(c, 0, "integer", false);
                }
                types.first().cloned().unwrap_or(Ty::UINT64)
            }
            "uptr" => {
                self.nargs(c, 1);
                Ty::Ptr {
                    to: Box::new(Ty::UINT64),
                    space: Space::User,
                    ctx: false,
                }
            }
            "unwatch" => {
                self.nargs(c, 1);
                self.err(
                    span,
                    "unwatch() goes with watchpoint probes: parsed, not run yet by rprof bt",
                );
                Ty::None
            }
            _ => {
                self.err(span, format!("Unknown function: {name}"));
                Ty::None
            }
        }
    }
    /// `print(@map[, top[, div]])` or `print(value)`.
    fn print_call(&mut self, c: &CallCheck, at: Use) -> Ty {
        self.place(c, at, Place::Nowhere);
        if self.varargs(c, 1, 3) {
            match &c.args[0].kind {
                ExprKind::Map { keys, .. } if !keys.is_empty() => self.err(
                    c.span,
                    "The map passed to print() should not be indexed by a key",
                ),
                ExprKind::Map { .. } => {
                    for i in 1..c.args.len() {
                        self.arg(c, i, "integer", true);
                    }
                }
                _ if c.args.len() != 1 => self.err(
                    c.span,
                    format!(
                        "Non-map print() only takes 1 argument, {} found",
                        c.args.len()
                    ),
                ),
                _ => {}
            }
        }
        Ty::None
    }

    /// `printf`, `system`, `cat`, `debugf`: a format literal and its arguments.
    fn printf_call(&mut self, c: &CallCheck, at: Use) -> Ty {
        self.place(c, at, Place::Nowhere);
        if self.varargs(c, 1, 128) && self.arg(c, 0, "string", true) && self.is_final() {
            if let ExprKind::Str(fmt) = &c.args[0].kind {
                let fmt = String::from_utf8_lossy(fmt).into_owned();
                if let Err(message) = super::printf::validate(&fmt, &c.types[1..], c.name) {
                    self.err(c.span, message);
                }
            }
        }
        Ty::None
    }

    fn aggregation(&mut self, c: &CallCheck, at: Use) -> Ty {
        self.place(c, at, Place::Map);
        let ty = match c.name {
            "count" => {
                self.nargs(c, 0);
                return Ty::Count;
            }
            "lhist" => {
                if self.nargs(c, 4) {
                    self.arg(c, 0, "integer", false);
                    for i in 1..4 {
                        self.arg(c, i, "integer", true);
                    }
                    self.lhist_bounds(c);
                }
                return Ty::Lhist;
            }
            "hist" => Ty::Hist,
            "sum" => Ty::Sum,
            "min" => Ty::Min,
            "max" => Ty::Max,
            "avg" => Ty::Avg,
            _ => Ty::Stats,
        };
        if self.nargs(c, 1) {
            self.arg(c, 0, "integer", false);
        }
        ty
    }

    fn lhist_bounds(&mut self, c: &CallCheck) {
        let int = |e: &Expr| match e.kind {
            ExprKind::Int(n) => Some(n),
            _ => None,
        };
        let (Some(min), Some(max), Some(step)) =
            (int(&c.args[1]), int(&c.args[2]), int(&c.args[3]))
        else {
            return;
        };
        if !self.is_final() {
            return;
        }
        if step <= 0 {
            self.err(
                c.span,
                format!("lhist() step must be >= 1 ({step} provided)"),
            );
        } else if (max - min) / step > 1000 {
            self.err(
                c.span,
                format!(
                    "lhist() too many buckets, must be <= 1000 (would need {})",
                    (max - min) / step
                ),
            );
        }
        if min < 0 {
            self.err(
                c.span,
                format!("lhist() min must be non-negative (provided min {min})"),
            );
        }
        if min > max {
            self.err(
                c.span,
                format!("lhist() min must be less than max (provided min {min} and max {max})"),
            );
        }
        if max - min < step {
            self.err(c.span, format!("lhist() step is too large for the given range (provided step {step} for range {})", max - min));
        }
    }

    /// bpftrace's `check_available`: `reg()` and `uaddr()` only where registers and user symbols exist.
    fn available(&mut self, span: Span, name: &str) {
        for spec in self.specs.clone() {
            let ok = match name {
                "reg" => !matches!(
                    spec.kind,
                    ProbeType::Begin
                        | ProbeType::End
                        | ProbeType::Tracepoint
                        | ProbeType::Kfunc
                        | ProbeType::Kretfunc
                        | ProbeType::Iter
                ),
                "signal" => matches!(
                    spec.kind,
                    ProbeType::Kprobe
                        | ProbeType::Kretprobe
                        | ProbeType::Uprobe
                        | ProbeType::Uretprobe
                        | ProbeType::Usdt
                        | ProbeType::Tracepoint
                        | ProbeType::Profile
                        | ProbeType::Kfunc
                        | ProbeType::Kretfunc
                ),
                "uaddr" => matches!(
                    spec.kind,
                    ProbeType::Usdt | ProbeType::Uprobe | ProbeType::Uretprobe
                ),
                _ => true,
            };
            if !ok {
                let provider = match spec.kind {
                    ProbeType::Begin => "BEGIN",
                    ProbeType::End => "END",
                    k => k.name(),
                };
                self.err(
                    span,
                    format!("{name} can not be used with \"{provider}\" probes"),
                );
            }
        }
    }

    fn place(&mut self, c: &CallCheck, at: Use, want: Place) {
        let message = match (want, at) {
            (Place::Map, Use::MapValue) => return,
            (Place::Map, _) => "should be directly assigned to a map",
            (Place::Nowhere, Use::MapValue | Use::VarValue | Use::MapKey) => {
                "should not be used in an assignment or as a map key"
            }
            (Place::Nowhere, _) => return,
        };
        self.err(c.span, format!("{}() {message}", c.name));
    }

    fn nargs(&mut self, c: &CallCheck, n: usize) -> bool {
        let got = c.args.len();
        if got == n {
            return true;
        }
        let need = match n {
            0 => "requires no arguments".to_string(),
            1 => "requires one argument".to_string(),
            n => format!("requires {n} arguments"),
        };
        self.err(c.span, format!("{}() {need} ({got} provided)", c.name));
        false
    }

    fn varargs(&mut self, c: &CallCheck, min: usize, max: usize) -> bool {
        let got = c.args.len();
        let need = if got < min {
            match min {
                1 => "requires at least one argument".to_string(),
                n => format!("requires at least {n} arguments"),
            }
        } else if got > max {
            match max {
                0 => "requires no arguments".to_string(),
                1 => "takes up to one argument".to_string(),
                n => format!("takes up to {n} arguments"),
            }
        } else {
            return true;
        };
        self.err(c.span, format!("{}() {need} ({got} provided)", c.name));
        false
    }

    /// bpftrace's `check_arg`: argument `i` of kind `kind` ("integer", "string"), a literal when `literal`.
    fn arg(&mut self, c: &CallCheck, i: usize, kind: &str, literal: bool) -> bool {
        let ty = &c.types[i];
        let is_literal = matches!(c.args[i].kind, ExprKind::Int(_) | ExprKind::Str(_));
        if literal && (!is_literal || ty.kind() != kind) {
            self.err(
                c.span,
                format!(
                    "{}() expects a {kind} literal ({} provided)",
                    c.name,
                    ty.kind()
                ),
            );
            return false;
        }
        if self.is_final() && ty.kind() != kind && *ty != Ty::None {
            self.err(
                c.span,
                format!(
                    "{}() only supports {kind} arguments ({} provided)",
                    c.name,
                    ty.kind()
                ),
            );
            return false;
        }
        true
    }
}

struct CallCheck<'c> {
    span: Span,
    name: &'c str,
    args: &'c [Expr],
    types: &'c [Ty],
}
