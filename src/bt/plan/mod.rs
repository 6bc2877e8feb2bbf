//! The plan pass: a checked program into the probes `rprof probe` runs. Each distinct attach point becomes one
//! probe pattern in probe's own language (`t:sched:sched_switch(prev_pid:s32, next_comm)`,
//! `uprobe:/bin/bash:readline(ret:str)`), fetching exactly the values its blocks read ([`ValueRef`]), with the
//! part of a lone block's predicate that ftrace's event filter can take (`if args->pid > 100` becomes
//! `if pid > 100`, evaluated in the kernel). BEGIN, END and `interval` blocks are the runtime's; what this pass
//! cannot give yet is refused here with the attach point's span, never run wrong.
use super::ast::{BinOp, Expr, ExprKind, Program};
use super::attach::{ProbeSpec, ProbeType};
use super::check::{Checked, TpField, TracepointFields};
use super::diag::Diagnostic;
use super::types::{tracepoint_field_type, Ty};
use super::value::IntType;
use super::values::{args_kept_as_strings, refs_of_block, str_read_maps, ValueRef};
pub use tasks::OnlyProcess;

mod tasks;

/// One probe pattern of the session and the blocks it runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedProbe {
    /// Tracepoint, uprobe (a uretprobe's blocks share its function's pattern) or USDT.
    pub kind: ProbeType,
    /// The attach point as read (wildcards unexpanded).
    pub spec: ProbeSpec,
    /// The pattern in `rprof probe`'s language.
    pub pattern: String,
    /// Blocks run at its entry or hit, and (uprobes) at its return, in program order.
    pub blocks: Vec<usize>,
    pub return_blocks: Vec<usize>,
    /// The values fetched, in the pattern's fetch order, with the probe's label for each and the integer type
    /// the value has in bpftrace (None: a string).
    pub values: Vec<PlannedValue>,
}

/// One fetched value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedValue {
    pub r: ValueRef,
    /// The fetch's label in the probe's pattern (its value's name in a hit).
    pub label: String,
    /// How the pattern fetches it (`prev_pid:s32`, `filename:str`, `ret`).
    pub fetch: String,
    /// Its integer type, or None for text.
    pub int: Option<IntType>,
}

/// What the session runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BtPlan {
    pub probes: Vec<PlannedProbe>,
    /// Some block reads `kstack` or `ustack` at a probe: probes take callchains.
    pub stacks: bool,
    /// A uretprobe is planned: functions are probed at entry and return.
    pub returns: bool,
    /// `uid`, `gid` or `username` is read.
    pub uid: bool,
    /// `usym()` is read: user addresses are named (the processes' mappings are read from their first hit).
    pub usym: bool,
    /// Probes bpftrace would count in "Attaching N probes..." (wildcards expanded; BEGIN, END and intervals).
    pub attached: usize,
    /// The probe (an index of `probes`, with no blocks of its own) that reads execve's argv at libc's
    /// `execve`, for `args->argv` at `sys_enter_execve` ([`argv_probe`]).
    pub argv: Option<usize>,
    /// Attach points left out as bpftrace leaves them out, one line each (`WARNING: ...`).
    pub warnings: Vec<String>,
    /// Every probe's blocks test `pid == N` (or `pid == cpid`): the probes watch that process's tasks only
    /// (per-process events, [`tasks`]); the runtime still tests `pid` on each event.
    pub only: Option<OnlyProcess>,
}

impl BtPlan {
    /// The patterns, in order.
    pub fn patterns(&self) -> Vec<String> {
        self.probes.iter().map(|p| p.pattern.clone()).collect()
    }

    /// Leave probe `i` out (a uprobe of a function its binary lacks, which bpftrace 0.17 skips): its attach
    /// points are not counted in "Attaching N probes...".
    pub fn remove_probe(&mut self, i: usize) {
        let p = self.probes.remove(i);
        self.attached = self
            .attached
            .saturating_sub(p.blocks.len() + p.return_blocks.len());
        self.argv = match self.argv {
            Some(a) if a == i => None,
            Some(a) if a > i => Some(a - 1),
            a => a,
        };
    }
}

/// Plan `program` as checked, with its positional parameters `params` (`$1` is the first); tracepoints' fields
/// come from `fields`. Errors are bpftrace-format diagnostics.
pub fn plan(
    program: &Program,
    checked: &Checked,
    fields: &dyn TracepointFields,
    params: &[String],
) -> Result<BtPlan, Vec<Diagnostic>> {
    let mut plan = BtPlan::default();
    let mut errors = Vec::new();
    let str_maps = str_read_maps(program);
    for (block, (probe, specs)) in program.probes.iter().zip(&checked.probes).enumerate() {
        let mut refs = refs_of_block(probe.pred.as_ref(), &probe.block);
        for r in args_kept_as_strings(&probe.block, &str_maps) {
            if !refs.contains(&r) {
                refs.push(r);
            }
        }
        plan.stacks |= reads_builtin(probe, &["kstack", "ustack"]);
        plan.uid |= reads_builtin(probe, &["uid", "gid", "username"]);
        plan.usym |= reads_builtin(probe, &["usym"]);
        for (spec, ap) in specs.iter().zip(&probe.attach_points) {
            if let Some(why) = register_refusal(spec.kind, &refs) {
                errors.push(Diagnostic::error(ap.span, why));
                continue;
            }
            match spec.kind {
                ProbeType::Begin | ProbeType::End | ProbeType::Interval => plan.attached += 1,
                ProbeType::Tracepoint => {
                    plan.attached += fields.expand(&spec.target, &spec.func).len().max(1);
                    add(&mut plan, spec, block, &refs, fields, false);
                }
                ProbeType::Kprobe if spec.offset != 0 => errors.push(Diagnostic::error(
                    ap.span,
                    "kprobe offsets (FUNC+OFFSET) are not run by rprof bt: attach to the function",
                )),
                ProbeType::Kprobe | ProbeType::Kretprobe
                    if !spec.wildcard && !fields.kernel_function(&spec.func) =>
                {
                    // bpftrace warns and goes on where a block has other attach points (tools name each
                    // kernel version's function: biolatency's `blk_account_io_start, __blk_account_io_start`).
                    let what = format!("{}:{}", spec.kind, spec.func);
                    match probe.attach_points.len() > 1 {
                        true => plan
                            .warnings
                            .push(format!("WARNING: Unable to attach probe: {what}. Skipping.")),
                        false => errors.push(Diagnostic::error(
                            ap.span,
                            format!(
                                "Error attaching probe: '{what}': no such kernel function in \
                                 available_filter_functions (non-existing, inlined, or marked notrace)"
                            ),
                        )),
                    }
                }
                ProbeType::Kprobe if spec.wildcard => {
                    plan.attached += fields.kernel_functions_matching(&spec.func).max(1);
                    add(&mut plan, spec, block, &refs, fields, false);
                }
                ProbeType::Uprobe
                | ProbeType::Kprobe
                | ProbeType::Usdt
                | ProbeType::Profile
                | ProbeType::Software => {
                    plan.attached += 1;
                    add(&mut plan, spec, block, &refs, fields, false);
                }
                ProbeType::Uretprobe | ProbeType::Kretprobe => {
                    plan.attached += 1;
                    plan.returns = true;
                    add(&mut plan, spec, block, &refs, fields, true);
                }
                other => errors.push(Diagnostic::error(
                    ap.span,
                    format!(
                        "{other} probes are not run by rprof bt yet (parsed and checked; \
                         `rprof record -F HZ -g` samples stacks)"
                    ),
                )),
            }
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    for p in &mut plan.probes {
        p.pattern = pattern(p, program);
    }
    plan.only = tasks::only_process(&plan.probes, program, params);
    if let Some(p) = argv_probe(&plan) {
        plan.argv = Some(plan.probes.len());
        plan.probes.push(p);
    }
    Ok(plan)
}

/// How many of execve's arguments `join()` prints (bpftrace 0.17's `join` reads 16).
pub const ARGV_STRINGS: usize = 16;

/// Where a block reads `args->argv` at `sys_enter_execve`: a tracepoint holds only the pointer, and without
/// BPF the strings behind it cannot be read in the kernel, so a uprobe at libc's `execve` (which `execv`,
/// `execvp`, `posix_spawn` and `system` call too) reads them just before the syscall, from the same thread
/// (`arg1:str[16]`); the session hands them to the thread's next `sys_enter_execve`. Programs that exec
/// without libc (static binaries, Go) show no arguments.
fn argv_probe(plan: &BtPlan) -> Option<PlannedProbe> {
    let execve = |p: &PlannedProbe| {
        let matches = globset::Glob::new(&p.spec.func)
            .map(|g| g.compile_matcher().is_match("sys_enter_execve"))
            .unwrap_or(false);
        p.kind == ProbeType::Tracepoint
            && p.spec.target == "syscalls"
            && matches
            && p.values
                .iter()
                .any(|v| v.r == ValueRef::Field("argv".into()))
    };
    plan.probes.iter().find(|p| execve(p))?;
    let spec = ProbeSpec {
        kind: ProbeType::Uprobe,
        target: "libc".into(),
        ns: String::new(),
        func: "execve".into(),
        freq: 0,
        offset: 0,
        address: 0,
        wildcard: false,
    };
    Some(PlannedProbe {
        kind: ProbeType::Uprobe,
        pattern: format!("uprobe:libc:execve(arg1:str[{ARGV_STRINGS}])"),
        spec,
        blocks: Vec::new(),
        return_blocks: Vec::new(),
        values: Vec::new(),
    })
}

/// Whether the block's predicate or statements name one of `builtins`.
fn reads_builtin(probe: &super::ast::Probe, builtins: &[&str]) -> bool {
    let mut found = false;
    let stmts = [super::ast::Stmt {
        kind: super::ast::StmtKind::Expr(
            probe
                .pred
                .clone()
                .unwrap_or(Expr::new(ExprKind::Int(0), probe.pred_span)),
        ),
        span: probe.pred_span,
    }];
    let mut visit = |e: &Expr| {
        if let ExprKind::Builtin(b) | ExprKind::Call { name: b, .. } = &e.kind {
            found |= builtins.contains(&b.as_str());
        }
    };
    super::ast::walk_exprs(&stmts, &mut visit);
    super::ast::walk_exprs(&probe.block, &mut visit);
    found
}

/// Why `reg()` cannot be read at a probe of `kind` where bpftrace reads it (the checker refuses it where
/// bpftrace does): rprof's interval is its own timer, in no task; a perf sample carries no `orig_ax`.
fn register_refusal(kind: ProbeType, refs: &[ValueRef]) -> Option<String> {
    let regs = refs.iter().filter_map(|r| match r {
        ValueRef::Reg(name) => Some(name.as_str()),
        _ => None,
    });
    for name in regs {
        match kind {
            ProbeType::Interval => {
                return Some(format!(
                    "reg(\"{name}\") is not read at interval probes here: rprof runs them from its own timer, \
                     in no task (profile:hz:N reads the registers of the tasks it interrupts)"
                ))
            }
            ProbeType::Profile | ProbeType::Software if name == "orig_ax" => {
                return Some(format!(
                    "reg(\"orig_ax\") is not read at {kind} probes here: a perf sample carries no orig_ax \
                     (a syscall's number is args->id at tracepoint:raw_syscalls:sys_enter)"
                ))
            }
            _ => {}
        }
    }
    None
}

/// Add block `block` at attach point `spec` to the plan: to the probe of the same point, or a new one.
fn add(
    plan: &mut BtPlan,
    spec: &ProbeSpec,
    block: usize,
    refs: &[ValueRef],
    fields: &dyn TracepointFields,
    at_return: bool,
) {
    let kind = match spec.kind {
        ProbeType::Uretprobe => ProbeType::Uprobe,
        ProbeType::Kretprobe => ProbeType::Kprobe,
        k => k,
    };
    let same = |p: &PlannedProbe| {
        p.kind == kind
            && p.spec.target == spec.target
            && p.spec.func == spec.func
            && p.spec.ns == spec.ns
            && p.spec.offset == spec.offset
            && p.spec.address == spec.address
    };
    let at = match plan.probes.iter().position(same) {
        Some(i) => i,
        None => {
            plan.probes.push(PlannedProbe {
                kind,
                spec: ProbeSpec {
                    kind,
                    ..spec.clone()
                },
                pattern: String::new(),
                blocks: Vec::new(),
                return_blocks: Vec::new(),
                values: Vec::new(),
            });
            plan.probes.len() - 1
        }
    };
    let p = &mut plan.probes[at];
    match at_return {
        true => p.return_blocks.push(block),
        false => p.blocks.push(block),
    }
    let tp_fields = match kind {
        ProbeType::Tracepoint => first_fields(fields, &spec.target, &spec.func),
        _ => Vec::new(),
    };
    let user_strings = kind == ProbeType::Tracepoint && spec.target == "syscalls";
    // A register is read where the probe fires, as bpftrace's `reg()` reads its context's: at a function's entry
    // or return (`%ip@ret`: the return address, `%ax@ret`: the return value), at a USDT probe, and where a
    // profile: or software: event interrupted (the sample's registers, kernel or user).
    let registers = matches!(kind, ProbeType::Uprobe | ProbeType::Kprobe)
        || (!at_return
            && matches!(
                kind,
                ProbeType::Usdt | ProbeType::Profile | ProbeType::Software
            ));
    for r in refs {
        if matches!(r, ValueRef::Reg(_)) && !registers {
            continue;
        }
        if let Some(mut v) = planned_value(r, &tp_fields, user_strings) {
            if let (ValueRef::Reg(name), true) = (r, at_return) {
                v.label = format!("%{name}{}", crate::probe::REGISTER_AT_RETURN);
                v.fetch = format!("{}:u64", v.label);
            }
            if p.values.iter().any(|o| o.r == v.r && o.label == v.label) {
                continue;
            }
            // A USDT argument is read as its note declares it (`-4@%eax`: 32 bits, sign-extended), as bcc does.
            if kind == ProbeType::Usdt && matches!(r, ValueRef::Arg(_)) {
                v.fetch = v.label.clone();
            }
            // One fetch per label: a string read of a value wins over the bare pointer, for every value of it.
            for o in p.values.iter_mut().filter(|o| o.label == v.label) {
                match v.int {
                    None => (o.fetch, o.int) = (v.fetch.clone(), None),
                    Some(_) => (v.fetch, v.int) = (o.fetch.clone(), o.int),
                }
            }
            p.values.push(v);
        }
    }
}

/// The fields of the first tracepoint the globs match.
fn first_fields(fields: &dyn TracepointFields, category: &str, event: &str) -> Vec<TpField> {
    let (c, e) = fields
        .expand(category, event)
        .into_iter()
        .next()
        .unwrap_or((category.to_string(), event.to_string()));
    fields.fields(&c, &e).unwrap_or_default()
}

/// How a value is fetched: its label and type. A syscall's `char *` field (`user_strings`) is fetched as the
/// string it points to even where the program reads the pointer: programs keep it to read it later
/// (opensnoop.bt's `@filename[tid] = args->filename`, `str(@filename[tid])` at the exit), which without BPF can
/// only be read at the entry; the value is then that text.
fn planned_value(r: &ValueRef, fields: &[TpField], user_strings: bool) -> Option<PlannedValue> {
    let (label, int) = match r {
        ValueRef::Field(name) => {
            let f = fields.iter().find(|f| &f.name == name)?;
            let int = match tracepoint_field_type(&f.decl, f.size, f.signed, user_strings) {
                Ty::Int { bits, signed } => Some(IntType { bits, signed }),
                Ty::Ptr { to, .. }
                    if user_strings
                        && *to
                            == Ty::Int {
                                bits: 8,
                                signed: true,
                            } =>
                {
                    return Some(PlannedValue {
                        r: r.clone(),
                        label: name.clone(),
                        fetch: format!("{name}:str"),
                        int: None,
                    })
                }
                Ty::Ptr { .. } => Some(IntType::U64),
                Ty::Str(_) => None,
                _ => return None,
            };
            (name.clone(), int)
        }
        ValueRef::FieldStr(name) => (name.clone(), None),
        ValueRef::Arg(n) => (format!("arg{n}"), Some(IntType::U64)),
        ValueRef::ArgStr(n) => (format!("arg{n}"), None),
        ValueRef::Retval => ("ret".into(), Some(IntType::U64)),
        ValueRef::RetvalStr => ("ret".into(), None),
        ValueRef::Reg(name) => (format!("%{name}"), Some(IntType::U64)),
    };
    let fetch = match int {
        Some(t) => format!("{label}:{}{}", if t.signed { 's' } else { 'u' }, t.bits),
        None if matches!(r, ValueRef::Field(_)) => label.clone(),
        None => format!("{label}:str"),
    };
    Some(PlannedValue {
        r: r.clone(),
        label,
        fetch,
        int,
    })
}

/// The pattern of a planned probe: the point, its fetches, and where only one block runs at it, the part of
/// its predicate the kernel's filter takes.
fn pattern(p: &PlannedProbe, program: &Program) -> String {
    let s = &p.spec;
    let point = match p.kind {
        ProbeType::Tracepoint => format!("t:{}:{}", s.target, s.func),
        ProbeType::Profile | ProbeType::Software => software_name(s),
        ProbeType::Usdt if s.ns.is_empty() => format!("usdt:{}:*:{}", s.target, s.func),
        ProbeType::Usdt => format!("usdt:{}:{}:{}", s.target, s.ns, s.func),
        ProbeType::Kprobe => format!("kprobe:{}", s.func),
        _ if s.address != 0 => format!("uprobe:{}:{:#x}", s.target, s.address),
        _ if s.offset != 0 => format!("uprobe:{}:{}+{}", s.target, s.func, s.offset),
        _ => format!("uprobe:{}:{}", s.target, s.func),
    };
    let mut fetches: Vec<String> = Vec::new();
    for v in &p.values {
        if !fetches.contains(&v.fetch) {
            fetches.push(v.fetch.clone());
        }
    }
    let mut text = point;
    if !fetches.is_empty() {
        text += &format!("({})", fetches.join(", "));
    }
    let lone = p.blocks.len() + p.return_blocks.len() == 1 && p.return_blocks.is_empty();
    let filter = match (lone, p.kind) {
        (true, ProbeType::Tracepoint) => program.probes[p.blocks[0]]
            .pred
            .as_ref()
            .and_then(|e| kernel_filter(e, p)),
        _ => None,
    };
    if let Some(f) = filter {
        text += &format!(" if {f}");
    }
    text
}

/// A `profile:` or `software:` attach point as bpftrace names it (`profile:hz:99`, `software:faults:100`),
/// which is also its pattern in probe's language.
pub fn software_name(s: &ProbeSpec) -> String {
    match (s.kind, s.freq) {
        (ProbeType::Software, 0) => format!("software:{}", s.target),
        (ProbeType::Software, n) => format!("software:{}:{n}", s.target),
        (_, n) => format!("profile:{}:{n}", s.target),
    }
}

/// The part of predicate `e` that ftrace's event filter evaluates the same way: `&&` of comparisons of a
/// fetched field (or `comm`) with a constant, and `||` of such wholes. The runtime evaluates the whole
/// predicate again, so a part left out only costs events.
pub fn kernel_filter(e: &Expr, p: &PlannedProbe) -> Option<String> {
    match &e.kind {
        ExprKind::Binop {
            op: BinOp::LAnd,
            left,
            right,
        } => match (kernel_filter(left, p), kernel_filter(right, p)) {
            (Some(l), Some(r)) => Some(format!("({l}) && ({r})")),
            (one, other) => one.or(other),
        },
        ExprKind::Binop {
            op: BinOp::LOr,
            left,
            right,
        } => Some(format!(
            "({}) || ({})",
            kernel_filter(left, p)?,
            kernel_filter(right, p)?
        )),
        ExprKind::Binop { op, left, right } if op.is_comparison() => {
            let (name, constant, op) = match (operand(left, p), constant(right)) {
                (Some(n), Some(c)) => (n, c, *op),
                _ => (operand(right, p)?, constant(left)?, flip(*op)),
            };
            Some(format!("{name} {} {constant}", op.text()))
        }
        _ => None,
    }
}

/// A field (by its fetch label), `comm` or `tid` (the event's `common_pid`, a thread id). bpftrace's `pid` (the
/// process) has no field in the event: it stays in rprof's evaluation (and where every probe tests it, the
/// events are opened for that process only: [`tasks`]).
fn operand(e: &Expr, p: &PlannedProbe) -> Option<String> {
    if let ExprKind::Builtin(b) = &e.kind {
        if b == "comm" || b == "tid" {
            return Some(b.clone());
        }
    }
    // A register is no field of the event for the kernel's filter.
    let r = ValueRef::of(e).filter(|r| !matches!(r, ValueRef::Reg(_)))?;
    let v = p.values.iter().find(|v| v.r == r)?;
    Some(v.label.clone())
}

/// An integer or string literal, as the filter writes it.
fn constant(e: &Expr) -> Option<String> {
    match &e.kind {
        ExprKind::Int(v) => Some(v.to_string()),
        ExprKind::Str(s) => {
            let s = std::str::from_utf8(s).ok()?;
            (!s.contains(['"', '\\', '*', '?', '['])).then(|| format!("\"{s}\""))
        }
        _ => None,
    }
}

/// `a OP b` as `b OP' a`.
fn flip(op: BinOp) -> BinOp {
    match op {
        BinOp::Lt => BinOp::Gt,
        BinOp::Le => BinOp::Ge,
        BinOp::Gt => BinOp::Lt,
        BinOp::Ge => BinOp::Le,
        o => o,
    }
}

#[cfg(test)]
mod tests;
