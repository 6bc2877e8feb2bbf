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
        let place = match (&t.kind, &placements[id]) {
            (TargetKind::User { path, addr, offset }, Some(p)) => format!(
                "{}:0x{:x} (addr 0x{:x}) at {}+{:#x} ({})",
                path.display(),
                offset.0 + p.offset,
                addr.0 + p.offset,
                t.name,
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
            (TargetKind::Usdt { .. } | TargetKind::Pair { .. }, _) => describe_uprobes(&t.kind),
        };
        let mut place = place;
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

/// Where a USDT probe or a pair of probe points is: `PATH:0xOFF (semaphore 0xREF)`.
fn describe_uprobes(kind: &TargetKind) -> String {
    let one = |k: &TargetKind| match k.uprobe_at() {
        Some((path, off, Some(sem))) => {
            format!("{}:0x{off:x} (semaphore 0x{sem:x})", path.display())
        }
        Some((path, off, None)) => format!("{}:0x{off:x}", path.display()),
        None => String::new(),
    };
    match kind {
        TargetKind::Pair { start, done } => format!("{} to {}", one(start), one(done)),
        k => one(k),
    }
}
