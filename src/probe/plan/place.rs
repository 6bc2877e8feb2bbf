//! Where a function's probes go: on the first instruction the kernel emulates when those before it can be
//! skipped; for Go, after the stack-growth check, with a probe on each `ret`.
use super::{Emulates, Placement, ProbeClass};
use crate::probe::spec::code::{gpr_bit, FunctionCode, GoHead, Store};
use crate::probe::spec::go::GoFunction;
use crate::probe::target::{Target, TargetKind};

/// What the running kernel emulates (from `uname`; a release that cannot be read counts as the newest).
pub fn running_kernel_emulates() -> Emulates {
    let release = nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut parts = release.split(['.', '-']).map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => Emulates::for_kernel(major, minor),
        _ => Emulates::default(),
    }
}

/// How many instructions of a function's head a placement looks at (the head ends before, usually).
const PLACE_MAX: usize = 16;

/// Where a user function's probes go: on the first instruction the kernel emulates, when every instruction
/// before it is skippable (not a branch; `rsp`, `[rsp]` and memory unchanged; no register a fetch reads
/// written) and no direct branch of the function lands after its start, up to and including it; else at +0.
/// With `at_entry`, at +0 always.
pub fn place(t: &Target, at_entry: bool, emulates: Emulates) -> Option<Placement> {
    let TargetKind::User { .. } = t.kind else {
        return None;
    };
    let Some(code) = t.code.as_ref().filter(|c| !c.head.is_empty()) else {
        return Some(Placement {
            offset: 0,
            class: ProbeClass::SingleStepped,
            why: "code not read: assumed single-stepped".into(),
            // Counted only (an address inside a function): no return probe.
            returns: matches!(t.go, Some(GoFunction::CountOnly(_))).then(Vec::new),
        });
    };
    match (&t.go, &code.go) {
        (Some(GoFunction::Timed), Some(go)) => {
            // No SP fetch and no uretprobe for Go: the stack may move before the entry.
            let fetched = fetched_registers(t).0 & !gpr_bit("sp").unwrap_or(0);
            return Some(place_go(code, go, fetched, emulates));
        }
        (Some(GoFunction::CountOnly(why)), _) => {
            // Counted only: no uretprobe in a Go program (it would crash it).
            let mut p = place(
                &Target {
                    go: None,
                    ..t.clone()
                },
                at_entry,
                emulates,
            )?;
            p.why = format!("{}; counted only: {why}", p.why);
            p.returns = Some(Vec::new());
            return Some(p);
        }
        _ => {}
    }
    let first = &code.head[0];
    let class = |e| match emulates.emulates(e) {
        true => ProbeClass::Emulated,
        false => ProbeClass::SingleStepped,
    };
    let at_zero = |reason: String| Placement {
        offset: 0,
        class: class(first.emulation),
        why: format!("{}: {}{reason}", first.text, class(first.emulation).name()),
        returns: None,
    };
    if at_entry {
        return Some(at_zero(" (--at-entry)".into()));
    }
    if emulates.emulates(first.emulation) {
        return Some(at_zero(String::new()));
    }
    let (fetched, reads_memory) = fetched_registers(t);
    let mut skipped: Vec<&str> = Vec::new();
    for h in code.head.iter().take(PLACE_MAX) {
        if emulates.emulates(h.emulation) {
            return Some(placed_at(code, h.offset, &h.text, &skipped).unwrap_or_else(at_zero));
        }
        let blocker = if h.branches {
            Some("branches")
        } else if h.moves_stack {
            Some("moves the stack")
        } else if h.stores == Store::Anywhere || (h.stores == Store::Global && reads_memory) {
            Some("writes memory a fetch may read")
        } else if h.writes & fetched != 0 {
            Some("writes a fetched register")
        } else {
            None
        };
        if let Some(b) = blocker {
            return Some(at_zero(format!("; {} at +{:#x} {b}", h.text, h.offset)));
        }
        skipped.push(&h.text);
    }
    Some(at_zero("; no emulated instruction ahead".into()))
}

/// The placement on the emulated instruction at `offset`, unless a branch of the function lands after its
/// start, up to and including it (a loop back would fire the entry again): then why not.
fn placed_at(
    code: &FunctionCode,
    offset: u64,
    text: &str,
    skipped: &[&str],
) -> Result<Placement, String> {
    if let Some(t) = code.targets.range(1..=offset).next() {
        return Err(format!("; a branch of the function lands on +{t:#x}"));
    }
    Ok(Placement {
        offset,
        class: ProbeClass::Emulated,
        why: format!("{text}: emulated; skipped {}", skipped.join(", ")),
        returns: None,
    })
}

/// A Go function (register ABI): the entry on the first emulated instruction after the stack-growth check (so
/// that growing the stack, which runs the function again from its start, does not count it twice), unless a
/// branch lands between; the returns on each `ret` (single-stepped: the pair counts as such). No uretprobe, so
/// the stack may move and memory may be written before the entry.
fn place_go(code: &FunctionCode, go: &GoHead, fetched: u16, emulates: Emulates) -> Placement {
    let rets = code.rets.len();
    let returns = format!("; returns: {rets} ret(s), single-stepped; paired by goroutine");
    let mut skipped: Vec<&str> = Vec::new();
    for h in &go.head {
        if emulates.emulates(h.emulation) {
            let lands = code
                .targets
                .range(go.after_check + 1..=h.offset)
                .next()
                .is_some();
            if !lands {
                return Placement {
                    offset: h.offset,
                    class: ProbeClass::SingleStepped,
                    why: format!(
                        "{}: emulated, after the stack check; skipped {}{returns}",
                        h.text,
                        skipped.join(", ")
                    ),
                    returns: Some(code.rets.clone()),
                };
            }
            break;
        }
        if h.branches || h.writes & fetched != 0 {
            break;
        }
        skipped.push(&h.text);
    }
    let text = go.head.first().map_or("?", |h| h.text.as_str());
    Placement {
        offset: go.after_check,
        class: ProbeClass::SingleStepped,
        why: format!("{text}: after the stack check{returns}"),
        returns: Some(code.rets.clone()),
    }
}

/// The general-purpose registers the target's entry fetches read (`%di`, `+0(%si):string`, `%sp`), and
/// whether they read memory through a pointer (`+0(%si):string`; `[rsp]` is safe from global stores).
fn fetched_registers(t: &Target) -> (u16, bool) {
    let mut regs = gpr_bit("sp").unwrap_or(0);
    let mut memory = false;
    for f in t.fetches.iter().filter(|f| !f.on_return) {
        memory |= f.expr.contains('(') && !f.expr.starts_with("+0(%sp)");
        let exprs = std::iter::once(&f.expr).chain(&f.len);
        for part in exprs.flat_map(|e| e.split('%').skip(1)) {
            let name: String = part
                .chars()
                .take_while(char::is_ascii_alphanumeric)
                .collect();
            regs |= gpr_bit(&name).unwrap_or(0);
        }
    }
    (regs, memory)
}
