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
        if let TargetKind::Pair { key, .. } = &t.kind {
            if !key.is_empty() {
                let parts: Vec<String> = key
                    .iter()
                    .map(|k| format!("{}={}", t.fetches[k.start].label, t.fetches[k.done].label))
                    .collect();
                place = format!("{place}, keyed by {}", parts.join(","));
            }
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
/// a USDT probe's `PATH:0xOFF (semaphore 0xREF)`, a pair's two ends.
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
        (TargetKind::Pair { start, done, .. }, _) => format!(
            "{} to {}",
            describe(start, None, name),
            describe(done, None, name)
        ),
    }
}
