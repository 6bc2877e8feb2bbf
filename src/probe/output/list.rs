//! `-l`: what would be probed, one line per target.
use crate::probe::plan::Placement;
use crate::probe::target::{PerTarget, TargetKind, Targets};

/// `-l`: one line per target: name, where, aliases.
pub fn write_list(
    out: &mut dyn std::io::Write,
    targets: &Targets,
    placements: &PerTarget<Option<Placement>>,
) -> std::io::Result<()> {
    for (id, t) in targets.iter() {
        let mut place = describe(&t.kind, placements[id].as_ref(), &t.name);
        if let TargetKind::Pair(p) = &t.kind {
            place = format!("{place}{}", pair_details(t, p));
        }
        if !t.fetches.is_empty() {
            let args: Vec<String> = t
                .fetches
                .iter()
                .map(|f| match &f.len {
                    Some(len) => format!("{}={} (length {len})", f.label, f.expr),
                    None => format!("{}={}", f.label, f.expr),
                })
                .collect();
            place = format!("{place}\tfetch: {}", args.join(" "));
        }
        if let Some(f) = &t.filter {
            place = format!("{place}\t{}", f.describe());
        }
        if t.aliases.is_empty() {
            writeln!(out, "{}\t{place}", t.name)?;
        } else {
            writeln!(
                out,
                "{}\t{place}\taliases: {}",
                t.name,
                t.aliases.join(", ")
            )?;
        }
    }
    let n = targets.len() as u64;
    writeln!(out, "{n} probe {}", super::table::plural(n, "target"))
}

/// Where a target is probed: `PATH:0xOFF (addr 0xADDR) at f+0x3 (why)`, `kernel FUNC`, `tracepoint CAT:EV`,
/// a USDT probe's `PATH:0xOFF (semaphore 0xREF)`, a software event's rate, a pair's two ends.
fn describe(kind: &TargetKind, placement: Option<&Placement>, name: &str) -> String {
    match (kind, placement) {
        (TargetKind::User { path, addr, offset }, Some(p)) => format!(
            "{}:0x{:x} (addr 0x{:x}) at {}+{:#x} ({})",
            path.display(),
            offset.0 + p.offset,
            addr.0 + p.offset,
            name,
            p.offset,
            p.why
        ),
        (TargetKind::User { path, addr, offset }, None) => {
            format!("{}:0x{:x} (addr 0x{:x})", path.display(), offset.0, addr.0)
        }
        (TargetKind::Kernel { symbol }, _) => format!("kernel {symbol}"),
        (TargetKind::Syscall { name }, _) => {
            format!("syscalls:sys_enter_{name} + syscalls:sys_exit_{name}")
        }
        (TargetKind::Tracepoint { category, event }, _) => {
            format!("tracepoint {category}:{event}")
        }
        (
            TargetKind::Usdt {
                path,
                offset,
                semaphore,
                ..
            },
            _,
        ) => match semaphore {
            Some(sem) => format!("{}:0x{:x} (semaphore 0x{sem:x})", path.display(), offset.0),
            None => format!("{}:0x{:x}", path.display(), offset.0),
        },
        (TargetKind::Software { event, sample }, _) => {
            let rate = crate::perf::software::rate_text(event, *sample);
            match event.is_clock() {
                true => format!(
                    "perf software {}, {rate} (COUNT: samples of CPU time, not calls)",
                    event.name
                ),
                false => format!("perf software {}, {rate} (COUNT: hits)", event.name),
            }
        }
        (TargetKind::Pair(p), _) => {
            let starts: Vec<String> = p
                .starts
                .iter()
                .map(|s| describe(&s.kind, None, name))
                .collect();
            format!(
                "{} to {}",
                starts.join(" or "),
                describe(&p.done.kind, None, name)
            )
        }
    }
}

/// A pair's key (`, keyed by pid|prev_pid=next_pid, keep latest`) and its ends' filters.
fn pair_details(t: &crate::probe::target::Target, p: &crate::probe::target::PairSpec) -> String {
    let mut out = String::new();
    if p.keyed {
        let parts: Vec<String> = (0..p.done.key.len())
            .map(|k| {
                let mut starts: Vec<&str> = p
                    .starts
                    .iter()
                    .map(|s| t.fetches[s.key[k]].label.as_str())
                    .collect();
                starts.dedup();
                format!("{}={}", starts.join("|"), t.fetches[p.done.key[k]].label)
            })
            .collect();
        let keep = match p.keep {
            crate::probe::target::Keep::Latest => "latest",
            crate::probe::target::Keep::First => "first",
        };
        out = format!(", keyed by {}, keep {keep}", parts.join(","));
    }
    let ends = p
        .starts
        .iter()
        .enumerate()
        .map(|(i, e)| (format!("START {}", i + 1), e));
    for (which, e) in ends.chain(std::iter::once(("DONE".to_string(), &p.done))) {
        if let Some(f) = &e.filter {
            out = format!("{out}\t{which} {}", f.describe());
        }
    }
    out
}
