//! `rprof probe` arguments. OWNER: probe helper.
use clap::Args;

/// Count and time functions exactly with uprobes/uretprobes, kprobes and tracepoints.
#[derive(Args, Debug)]
pub struct ProbeArgs {
    /// Patterns: functions in -x BINARY, `lib:PATTERN`, `syscall:GLOB`, `t:CATEGORY:EVENT`, or kernel functions.
    pub patterns: Vec<String>,
}

pub fn run(_args: ProbeArgs) -> anyhow::Result<()> {
    anyhow::bail!("rprof probe is not built yet")
}
