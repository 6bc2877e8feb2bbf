//! What a runtime learns from the checked program before it runs: its maps (each with the kind its value
//! type gives, `lhist`'s constant arguments read from the program) and which blocks are BEGIN, END and
//! `interval` blocks.
use crate::bt::ast::{ExprKind, Program, Stmt, StmtKind};
use crate::bt::attach::{ProbeSpec, ProbeType};
use crate::bt::check::Checked;
use crate::bt::maps::{Linear, Map, MapKind};
use crate::bt::types::Ty;
use crate::bt::value::{Int, IntType, Stack, StackKind, StackMode, Value, DEFAULT_STACK_LIMIT};
use std::collections::BTreeMap;

/// Every map of the program, empty, as bpftrace creates them all before the first probe fires.
pub(super) fn maps(
    program: &Program,
    checked: &Checked,
    max_entries: usize,
) -> BTreeMap<String, Map> {
    let linear = lhist_args(program);
    checked
        .maps
        .iter()
        .map(|(name, (keys, value))| {
            let kind = kind_of(value, linear.get(name).copied());
            let map = Map::new(name, kind, !keys.is_empty(), max_entries);
            (name.clone(), map)
        })
        .collect()
}

/// The map kind of a value type. `sum()` maps start signed; the first `sum()` of an unsigned value makes an
/// empty map unsigned (the runtime sees the value's type where the checker kept only `sum`).
fn kind_of(value: &Ty, linear: Option<Linear>) -> MapKind {
    match value {
        Ty::Count => MapKind::Count,
        Ty::Sum => MapKind::Sum { signed: true },
        Ty::Min => MapKind::Min,
        Ty::Max => MapKind::Max,
        Ty::Avg => MapKind::Avg,
        Ty::Stats => MapKind::Stats,
        Ty::Hist => MapKind::Hist,
        Ty::Lhist => MapKind::Lhist(linear.unwrap_or(Linear {
            min: 0,
            max: 1,
            step: 1,
        })),
        _ => MapKind::Plain,
    }
}

/// `@m = lhist(v, MIN, MAX, STEP)`: the constant arguments of each map's first `lhist()` call.
fn lhist_args(program: &Program) -> BTreeMap<String, Linear> {
    let mut out = BTreeMap::new();
    for probe in &program.probes {
        lhist_in(&probe.block, &mut out);
    }
    out
}

fn lhist_in(stmts: &[Stmt], out: &mut BTreeMap<String, Linear>) {
    for s in stmts {
        match &s.kind {
            StmtKind::AssignMap { map, value, .. } => {
                let (ExprKind::Map { name, .. }, ExprKind::Call { name: f, args }) =
                    (&map.kind, &value.kind)
                else {
                    continue;
                };
                let int = |i: usize| match args.get(i).map(|a| &a.kind) {
                    Some(ExprKind::Int(n)) => Some(*n),
                    _ => None,
                };
                if let (true, Some(min), Some(max), Some(step)) =
                    (f == "lhist", int(1), int(2), int(3))
                {
                    out.entry(name.clone()).or_insert(Linear { min, max, step });
                }
            }
            StmtKind::If {
                then, otherwise, ..
            } => {
                lhist_in(then, out);
                lhist_in(otherwise.as_deref().unwrap_or(&[]), out);
            }
            StmtKind::Unroll { body, .. } | StmtKind::While { body, .. } => lhist_in(body, out),
            _ => {}
        }
    }
}

/// The value a program reads from a map without the key (or a variable never set), by the map's type: 0 of
/// the type for integers, an empty string, an empty stack.
pub(super) fn zero_of(ty: &Ty) -> Value {
    match ty {
        Ty::Int { signed, .. } => Value::Int(Int::new(
            0,
            IntType {
                bits: 64,
                signed: *signed,
            },
        )),
        Ty::Str(_)
        | Ty::Buffer(_)
        | Ty::Username
        | Ty::Probe
        | Ty::MacAddr
        | Ty::CgroupPath
        | Ty::Strerror => Value::Str(Vec::new()),
        Ty::Tuple(items) => Value::Tuple(items.iter().map(zero_of).collect()),
        Ty::KStack | Ty::UStack => {
            let kind = if *ty == Ty::KStack {
                StackKind::Kernel
            } else {
                StackKind::User
            };
            Value::Stack(Stack::new(
                kind,
                StackMode::Bpftrace,
                DEFAULT_STACK_LIMIT,
                0,
                Vec::new(),
            ))
        }
        Ty::Count => Value::uint(0),
        _ => Value::int(0),
    }
}

/// Indices of the blocks with an attach point of `kind`.
pub(super) fn blocks_of(checked: &Checked, kind: ProbeType) -> Vec<usize> {
    checked
        .probes
        .iter()
        .enumerate()
        .filter(|(_, specs)| specs.iter().any(|s| s.kind == kind))
        .map(|(i, _)| i)
        .collect()
}

/// An `interval:UNIT:N` probe's period in ns (0 when it has none: the checker refuses those).
pub(super) fn interval_ns(spec: &ProbeSpec) -> u64 {
    let n = spec.freq;
    match spec.target.as_str() {
        "s" => n.saturating_mul(1_000_000_000),
        "ms" => n.saturating_mul(1_000_000),
        "us" => n.saturating_mul(1_000),
        "hz" if n > 0 => 1_000_000_000 / n,
        _ => 0,
    }
}

/// `probe` in a block run without an event: the attach point as bpftrace names it.
pub(super) fn probe_name(specs: &[ProbeSpec]) -> String {
    let Some(spec) = specs.first() else {
        return String::new();
    };
    match spec.kind {
        ProbeType::Begin => "BEGIN".to_string(),
        ProbeType::End => "END".to_string(),
        ProbeType::Interval | ProbeType::Profile => {
            format!("{}:{}:{}", spec.kind.name(), spec.target, spec.freq)
        }
        k => format!("{}:{}:{}", k.name(), spec.target, spec.func),
    }
}
