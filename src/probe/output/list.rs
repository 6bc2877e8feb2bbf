//! `-l`: what would be probed, one line per target.
use crate::probe::target::{TargetKind, Targets};

/// `-l`: one line per target: name, where, aliases.
pub fn write_list(out: &mut dyn std::io::Write, targets: &Targets) -> std::io::Result<()> {
    for (_, t) in targets.iter() {
        let place = match &t.kind {
            TargetKind::User { path, addr, offset } => {
                format!("{}:0x{:x} (addr 0x{:x})", path.display(), offset.0, addr.0)
            }
            TargetKind::Kernel { symbol } => format!("kernel {symbol}"),
            TargetKind::Syscall { name } => {
                format!("syscalls:sys_enter_{name} + syscalls:sys_exit_{name}")
            }
            TargetKind::Tracepoint { category, event } => format!("tracepoint {category}:{event}"),
            TargetKind::Usdt { .. } | TargetKind::Pair { .. } => describe_uprobes(&t.kind),
        };
        let mut place = place;
        if !t.fetches.is_empty() {
            let args: Vec<String> = t
                .fetches
                .iter()
                .map(|f| format!("{}={}", f.label, f.expr))
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
    writeln!(out, "{} probe targets", targets.len())
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
