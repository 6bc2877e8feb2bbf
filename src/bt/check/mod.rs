//! The checker: bpftrace 0.17's semantic analysis (`semantic_analyser.cpp`) over a parsed [`Program`], with
//! its messages: attach points read ([`attach`](super::attach)), builtins and functions with their argument
//! counts and types, map key and value types kept consistent across probes, variables per probe, printf
//! formats. Then what this machine cannot run is refused in the same format, naming the construct and what
//! would give it: kprobes on a kernel without them, BPF-only probe types and helpers, kernel memory reads.
//!
//! Like bpftrace it runs twice over the program: the first pass learns the maps' types wherever they are
//! assigned, the second (final) pass makes the checks that need them. It is pure: the kernel's facts come in
//! as [`Kernel`], tracepoint fields through a [`TracepointFields`] source (the plan reads format files).
mod assign;
mod calls;
mod expr;
mod printf;
#[cfg(test)]
pub(crate) mod tests;

use super::ast::{Program, Stmt, StmtKind};
use super::attach::{self, Attach, ProbeSpec, ProbeType};
use super::diag::{Diagnostic, Span};
use super::types::Ty;
use std::collections::BTreeMap;
use std::path::Path;

/// What the running kernel and machine offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kernel {
    /// kprobe_events exists in tracefs (CONFIG_KPROBE_EVENTS).
    pub kprobes: bool,
    /// A hardware PMU (hardware:* events).
    pub hardware_pmu: bool,
}

impl Kernel {
    /// The facts of this machine: `kprobe_events` under the tracefs root `tracefs`, and a CPU PMU as the event
    /// layer finds it (`cpu`, or a hybrid CPU's `cpu_core`/`cpu_atom`), as record, stat and top decide.
    pub fn detect(tracefs: &Path) -> Kernel {
        Kernel {
            kprobes: tracefs.join("kprobe_events").exists(),
            hardware_pmu: crate::events::hardware::pmu_present(),
        }
    }
}

/// One field of a tracepoint, from its `format` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TpField {
    pub name: String,
    /// The declaration as the format file gives it (`const char * filename`, `char comm[16]`).
    pub decl: String,
    pub size: usize,
    pub signed: bool,
}

/// Where the checker learns tracepoints and their fields.
pub trait TracepointFields {
    /// The fields of `category:event` (common_* fields left out), or None when there is no such tracepoint.
    fn fields(&self, category: &str, event: &str) -> Option<Vec<TpField>>;
    /// The tracepoints matching the globs `category:event`, as (category, event).
    fn expand(&self, category: &str, event: &str) -> Vec<(String, String)>;
    /// Whether kernel function `name` can take a kprobe (it is in `available_filter_functions`).
    fn kernel_function(&self, _name: &str) -> bool {
        true
    }
    /// How many kernel functions kprobes can take match glob `pattern` (bpftrace counts each one it attaches).
    fn kernel_functions_matching(&self, _pattern: &str) -> usize {
        1
    }
}

/// Everything the checker takes besides the program.
pub struct Env<'a> {
    pub kernel: Kernel,
    pub tracepoints: &'a dyn TracepointFields,
    /// Positional parameters: `$1` is `params[0]`.
    pub params: Vec<String>,
    /// Whether `-c CMD` gives a child (for `cpid`).
    pub has_child: bool,
    /// `--unsafe` (for `system()`).
    pub unsafe_ok: bool,
    /// `BPFTRACE_STRLEN`.
    pub strlen: usize,
}

/// What the checker found.
#[derive(Debug, Default)]
pub struct Checked {
    /// The probes of each block of the program, read (wildcards not yet expanded).
    pub probes: Vec<Vec<ProbeSpec>>,
    /// The headers the program includes; none is read (their constants come from [`super::consts`]).
    pub includes: Vec<String>,
    /// Each map's key types and value type.
    pub maps: BTreeMap<String, (Vec<Ty>, Ty)>,
    /// Errors and warnings, in bpftrace's order.
    pub diagnostics: Vec<Diagnostic>,
}

impl Checked {
    pub fn has_errors(&self) -> bool {
        self.diagnostics.iter().any(|d| d.is_error())
    }
}

/// Check `program` for `env`.
pub fn check(program: &Program, env: &Env) -> Checked {
    let mut checked = Checked {
        includes: program.includes().into_iter().map(|(h, _)| h).collect(),
        ..Checked::default()
    };
    let mut a = Analyser::new(env, !checked.includes.is_empty());
    let probes = a.read_attach_points(program);
    if a.has_errors() {
        checked.diagnostics = a.diags;
        return checked;
    }
    a.refuse_unavailable(program, &probes);
    for pass in [1, 2] {
        a.pass = pass;
        for (probe, specs) in program.probes.iter().zip(&probes) {
            a.probe(probe, specs);
        }
        if a.has_errors() {
            break;
        }
    }
    checked.probes = probes;
    checked.maps = a
        .map_vals
        .iter()
        .map(|(name, ty)| {
            let keys = a.map_keys.get(name).cloned().unwrap_or_default();
            (name.clone(), (keys, ty.clone()))
        })
        .collect();
    checked.diagnostics = a.diags;
    checked
}

/// The location bpftrace gives nodes built without one (line 1, column 1, empty).
const DEFAULT_SPAN: Span = Span {
    begin: super::diag::Pos { line: 1, col: 1 },
    end: super::diag::Pos { line: 1, col: 1 },
};

/// The checker's state over both passes.
pub(super) struct Analyser<'a> {
    env: &'a Env<'a>,
    pass: u8,
    diags: Vec<Diagnostic>,
    /// Whether the program `#include`s headers (their constants then come from the table).
    has_includes: bool,
    map_vals: BTreeMap<String, Ty>,
    map_keys: BTreeMap<String, Vec<Ty>>,
    /// The variables of the probe being checked.
    vars: BTreeMap<String, Ty>,
    /// The probes of the block being checked.
    specs: Vec<ProbeSpec>,
    loop_depth: usize,
}

impl<'a> Analyser<'a> {
    fn new(env: &'a Env<'a>, has_includes: bool) -> Analyser<'a> {
        Analyser {
            env,
            pass: 1,
            diags: Vec::new(),
            has_includes,
            map_vals: BTreeMap::new(),
            map_keys: BTreeMap::new(),
            vars: BTreeMap::new(),
            specs: Vec::new(),
            loop_depth: 0,
        }
    }

    fn is_final(&self) -> bool {
        self.pass == 2
    }

    fn has_errors(&self) -> bool {
        self.diags.iter().any(|d| d.is_error())
    }

    /// An error, reported once: the first pass's errors stop the checker, so a message of both passes is kept
    /// from the pass that gave it.
    fn err(&mut self, span: Span, message: impl Into<String>) {
        let d = Diagnostic::error(span, message);
        if !self.diags.contains(&d) {
            self.diags.push(d);
        }
    }

    /// An error of bpftrace's final pass only (after the checks of the first pass have passed).
    pub(super) fn final_err(&mut self, span: Span, message: impl Into<String>) {
        if self.is_final() {
            self.err(span, message);
        }
    }

    /// The first attach point's type (bpftrace's `single_provider_type` for most checks).
    fn probe_type(&self) -> Option<ProbeType> {
        self.specs.first().map(|s| s.kind)
    }

    fn read_attach_points(&mut self, program: &Program) -> Vec<Vec<ProbeSpec>> {
        let default = DEFAULT_SPAN;
        let mut all = Vec::new();
        for probe in &program.probes {
            let mut specs = Vec::new();
            for ap in &probe.attach_points {
                match attach::read(&ap.raw, &self.env.params) {
                    Ok(Attach::Probe(spec)) => specs.push(spec),
                    Ok(Attach::Empty) => {}
                    Err(message) => self.err(ap.span, message),
                }
            }
            if specs.is_empty() && !self.has_errors() {
                self.err(default, "No attach points for probe");
            }
            all.push(specs);
        }
        let (mut begins, mut ends) = (0, 0);
        for (probe, specs) in program.probes.iter().zip(&all) {
            for (spec, ap) in specs.iter().zip(&probe.attach_points) {
                if spec.kind == ProbeType::Begin {
                    begins += 1;
                    if begins == 2 {
                        self.err(ap.span, "More than one BEGIN probe defined");
                    }
                } else if spec.kind == ProbeType::End {
                    ends += 1;
                    if ends == 2 {
                        self.err(ap.span, "More than one END probe defined");
                    }
                }
                self.check_spec(spec, ap.span);
            }
        }
        all
    }

    /// bpftrace's checks of each probe type's parts (`visit(AttachPoint)`).
    fn check_spec(&mut self, spec: &ProbeSpec, span: Span) {
        match spec.kind {
            ProbeType::Tracepoint => {
                if spec.target.is_empty() || spec.func.is_empty() {
                    return self.err(span, "tracepoint probe must have a target");
                }
                let found = if spec.wildcard {
                    !self
                        .env
                        .tracepoints
                        .expand(&spec.target, &spec.func)
                        .is_empty()
                } else {
                    self.env
                        .tracepoints
                        .fields(&spec.target, &spec.func)
                        .is_some()
                };
                if !found {
                    self.err(
                        span,
                        format!("tracepoint not found: {}:{}", spec.target, spec.func),
                    );
                }
            }
            ProbeType::Profile | ProbeType::Interval => {
                let kind = spec.kind.name();
                if spec.target.is_empty() {
                    self.err(span, format!("{kind} probe must have unit of time"));
                } else if !matches!(spec.target.as_str(), "hz" | "us" | "ms" | "s") {
                    self.err(
                        span,
                        format!("{} is not an accepted unit of time", spec.target),
                    );
                } else if spec.kind == ProbeType::Profile && spec.freq == 0 {
                    self.err(span, "profile frequency should be a positive integer");
                }
            }
            ProbeType::Software => {
                if spec.target.is_empty() {
                    self.err(span, "software probe must have a software event name");
                } else if !spec.wildcard && !SOFTWARE.contains(&spec.target.as_str()) {
                    self.err(span, format!("{} is not a software probe", spec.target));
                }
            }
            ProbeType::Hardware => {
                if spec.target.is_empty() {
                    self.err(span, "hardware probe must have a hardware event name");
                } else if !spec.wildcard && !HARDWARE.contains(&spec.target.as_str()) {
                    self.err(span, format!("{} is not a hardware probe", spec.target));
                }
            }
            ProbeType::Uprobe | ProbeType::Uretprobe | ProbeType::Usdt => {
                if spec.target.is_empty() {
                    self.err(span, format!("{} should have a target", spec.kind));
                } else if spec.kind != ProbeType::Usdt && spec.func.is_empty() && spec.address == 0
                {
                    self.err(
                        span,
                        format!(
                            "{} should be attached to a function and/or address",
                            spec.kind
                        ),
                    );
                }
            }
            ProbeType::Kprobe | ProbeType::Kretprobe if spec.func.is_empty() => {
                self.err(span, "kprobes should be attached to a function")
            }
            _ => {}
        }
    }

    /// Probe types this machine cannot run, refused at their attach points.
    fn refuse_unavailable(&mut self, program: &Program, probes: &[Vec<ProbeSpec>]) {
        for (probe, specs) in program.probes.iter().zip(probes) {
            for (spec, ap) in specs.iter().zip(&probe.attach_points) {
                if let Some(why) = unavailable(spec, self.env.kernel) {
                    self.err(ap.span, why);
                }
            }
        }
    }

    fn probe(&mut self, probe: &super::ast::Probe, specs: &[ProbeSpec]) {
        self.vars.clear();
        self.specs = specs.to_vec();
        if let Some(pred) = &probe.pred {
            let ty = self.expr(pred, expr::Use::Value);
            if self.is_final() && !ty.is_int() && !ty.is_ptr() && ty != Ty::None {
                self.err(
                    probe.pred_span,
                    format!("Invalid type for predicate: {}", ty.kind()),
                );
            }
        }
        self.stmts(&probe.block);
    }

    fn stmts(&mut self, stmts: &[Stmt]) {
        for s in stmts {
            self.stmt(s);
        }
    }

    fn stmt(&mut self, s: &Stmt) {
        match &s.kind {
            StmtKind::Expr(e) => {
                self.expr(e, expr::Use::Statement);
            }
            StmtKind::AssignMap {
                map,
                value,
                compound,
            } => self.assign_map(s.span, map, value, *compound),
            StmtKind::AssignVar {
                var,
                value,
                compound,
            } => self.assign_var(s.span, var, value, *compound),
            StmtKind::If {
                cond,
                then,
                otherwise,
            } => {
                let ty = self.expr(cond, expr::Use::Value);
                if self.is_final() && !ty.is_int() && !ty.is_ptr() && ty != Ty::None {
                    // bpftrace's If node has no location of its own: it prints 1:1-1.
                    self.err(
                        DEFAULT_SPAN,
                        format!("Invalid condition in if(): {}", ty.kind()),
                    );
                }
                self.stmts(then);
                if let Some(o) = otherwise {
                    self.stmts(o);
                }
            }
            StmtKind::Unroll { count, body } => {
                self.unroll(s.span, count);
                self.loop_depth += 1;
                self.stmts(body);
                self.loop_depth -= 1;
            }
            StmtKind::While { cond, body } => {
                self.expr(cond, expr::Use::Value);
                self.loop_depth += 1;
                self.stmts(body);
                self.loop_depth -= 1;
            }
            StmtKind::Jump(j) => {
                let name = match j {
                    super::ast::Jump::Break => "break",
                    super::ast::Jump::Continue => "continue",
                    super::ast::Jump::Return => return,
                };
                if self.loop_depth == 0 {
                    self.err(s.span, format!("{name} used outside of a loop"));
                }
            }
        }
    }

    fn unroll(&mut self, span: Span, count: &super::ast::Expr) {
        let n = match &count.kind {
            super::ast::ExprKind::Int(n) => Some(*n),
            super::ast::ExprKind::Param(super::ast::Param::Positional(i)) => self
                .env
                .params
                .get(*i as usize - 1)
                .and_then(|p| p.parse::<i64>().ok()),
            super::ast::ExprKind::Param(super::ast::Param::Count) => {
                Some(self.env.params.len() as i64)
            }
            _ => None,
        };
        match n {
            None => self.err(span, "invalid unroll value"),
            Some(n) if n > 100 => self.err(span, "unroll maximum value is 100"),
            Some(n) if n < 1 => self.err(span, "unroll minimum value is 1"),
            Some(_) => {}
        }
    }
}

/// bpftrace 0.17's software events (`SW_PROBE_LIST`), names and aliases.
const SOFTWARE: &[&str] = &[
    "cpu-clock",
    "cpu",
    "task-clock",
    "page-faults",
    "faults",
    "context-switches",
    "cs",
    "cpu-migrations",
    "migrations",
    "minor-faults",
    "major-faults",
    "alignment-faults",
    "emulation-faults",
    "dummy",
    "bpf-output",
];
/// bpftrace 0.17's hardware events (`HW_PROBE_LIST`), names and aliases.
const HARDWARE: &[&str] = &[
    "cpu-cycles",
    "cycles",
    "instructions",
    "cache-references",
    "cache-misses",
    "branch-instructions",
    "branches",
    "branch-misses",
    "bus-cycles",
    "frontend-stalls",
    "backend-stalls",
    "ref-cycles",
];

/// Why this machine cannot run a probe of this type, naming what would give it.
pub fn unavailable(spec: &ProbeSpec, kernel: Kernel) -> Option<String> {
    let kind = spec.kind;
    match kind {
        ProbeType::Kprobe | ProbeType::Kretprobe if !kernel.kprobes => Some(format!(
            "{kind}:{} needs kprobes, which this kernel does not have (no kprobe_events in tracefs): run it on a \
             kernel built with CONFIG_KPROBE_EVENTS",
            spec.func
        )),
        ProbeType::Kfunc | ProbeType::Kretfunc | ProbeType::Iter => Some(format!(
            "{kind} probes are BPF programs (BPF trampolines and iterators), and rprof runs no BPF: use \
             kprobe:/kretprobe: where the kernel has kprobes"
        )),
        ProbeType::Watchpoint | ProbeType::AsyncWatchpoint => Some(format!(
            "{kind} probes are parsed, not run yet by rprof bt (perf breakpoint events would give them)"
        )),
        ProbeType::Hardware if !kernel.hardware_pmu => Some(format!(
            "hardware:{} needs a hardware PMU, which this machine does not have: use software:cpu-clock or \
             profile:hz",
            spec.target
        )),
        _ => None,
    }
}
