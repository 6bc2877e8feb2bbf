//! `rprof list` (perf list): the events rprof can count and sample here, in perf list's layout; with `-x
//! BINARY`, the functions and USDT probes of a binary that `rprof probe` and `record -e u:BIN:FUNC` take.
use super::output::Stdout;
use clap::Args;
use rprof::events::catalog;
use std::io::Write;
use std::path::PathBuf;

/// List the events: software, hardware and cache (where there is a PMU), tracepoints; or a binary's probe
/// points.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  rprof list\n  rprof list sw\n  rprof list 'sched:*'\n  \
                        rprof list fault\n  rprof list -x /usr/bin/python3 'PyEval*'\n\n\
                        Tracepoints need tracefs, readable by root (or a group given access to it)."
)]
pub struct ListArgs {
    /// What to list: hw, sw, cache, tracepoint, or names by glob ('sched:*') or substring (fault).
    #[arg(value_name = "FILTER")]
    pub filters: Vec<String>,
    /// List this binary's probe-able functions (u:BINARY:FUNCTION) and USDT probes instead.
    #[arg(short = 'x', long = "exec", value_name = "BINARY")]
    pub binary: Option<PathBuf>,
}

pub fn run(a: ListArgs) -> anyhow::Result<u8> {
    let mut out = std::io::BufWriter::new(Stdout::lock());
    if let Some(bin) = &a.binary {
        return list_binary(bin, &a.filters, &mut out);
    }
    let (kinds, patterns) = catalog::wanted(&a.filters);
    let needs_tracefs = kinds.is_empty() || kinds.contains(&catalog::TRACEPOINT);
    let tracefs = match needs_tracefs {
        true => match rprof::tracefs::Tracefs::find_or_mount() {
            Ok(t) => Some(t),
            Err(e) => {
                eprintln!("rprof list: no tracepoints: {e}");
                None
            }
        },
        false => None,
    };
    for l in catalog::list(&kinds, &patterns, tracefs.as_ref()) {
        writeln!(out, "{}", catalog::line(&l))?;
    }
    if !rprof::events::hardware::pmu_present() && kinds.iter().any(|k| *k != catalog::SOFTWARE) {
        eprintln!(
            "rprof list: {}",
            rprof::events::hardware::pmu_missing("hardware and cache events")
        );
    }
    out.flush()?;
    Ok(0)
}

/// The functions (glob FILTER) and USDT probes of `bin`.
fn list_binary(
    bin: &std::path::Path,
    filters: &[String],
    out: &mut dyn Write,
) -> anyhow::Result<u8> {
    let debug = rprof::symbols::DebugSources::default();
    let filter = filters.first().map(String::as_str);
    let shown = bin.display();
    for f in rprof::probe::probeable_functions(Some(bin), filter, &debug)? {
        writeln!(
            out,
            "  {:<50} [Uprobe-able function]",
            format!("u:{shown}:{f}")
        )?;
    }
    for p in rprof::probe::usdt::read_probes(bin).unwrap_or_default() {
        writeln!(
            out,
            "  {:<50} [SDT event]",
            format!("usdt:{shown}:{}:{}", p.provider, p.name)
        )?;
    }
    out.flush()?;
    Ok(0)
}
