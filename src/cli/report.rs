//! `rprof report` arguments and their mapping onto the report library.
use super::advice;
use super::output::Stdout;
use anyhow::Context;
use clap::Args;
use rprof::report::{self, Filter, SampleKinds, TableOptions};
use rprof::symbols::SymbolizerOptions;
use std::io::Write;
use std::path::PathBuf;

/// Read a recording (rprof's or `perf record`'s) and print a top table, folded stacks or a flame graph.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  rprof report\n  rprof report --folded | inferno-flamegraph > out.svg\n  \
                        rprof report -i perf.data --flamegraph out.svg"
)]
pub struct ReportArgs {
    /// The recording to read.
    #[arg(short = 'i', long = "input", default_value = "rprof.data")]
    pub input: PathBuf,
    /// Print folded stacks (`comm;outer;...;leaf COUNT`) for flamegraph.pl / inferno-flamegraph.
    #[arg(long = "folded", conflicts_with = "flamegraph")]
    pub folded: bool,
    /// Write an SVG flame graph to this file.
    #[arg(long = "flamegraph", value_name = "SVG")]
    pub flamegraph: Option<PathBuf>,
    /// Sort the table by total (children) time instead of self time.
    #[arg(long = "children")]
    pub children: bool,
    /// Print at most this many table rows (0: all).
    #[arg(short = 'n', long = "limit", default_value_t = 0)]
    pub limit: usize,
    /// Only samples of these processes (comma-separated).
    #[arg(long = "pid", value_delimiter = ',')]
    pub pid: Vec<u32>,
    /// Only samples of these threads (comma-separated).
    #[arg(long = "tid", value_delimiter = ',')]
    pub tid: Vec<u32>,
    /// Only samples of these commands (comma-separated).
    #[arg(long = "comm", value_delimiter = ',')]
    pub comm: Vec<String>,
    /// Append file:line to user frames (from DWARF).
    #[arg(long = "lines")]
    pub lines: bool,
    /// Do not show inlined functions as frames of their own.
    #[arg(long = "no-inline")]
    pub no_inline: bool,
    /// Only off-CPU time (recorded with `rprof record --off-cpu`): where threads waited.
    #[arg(long = "off-cpu-only", conflicts_with = "on_cpu_only")]
    pub off_cpu_only: bool,
    /// Only CPU time, leaving out the off-CPU samples of a `--off-cpu` recording.
    #[arg(long = "on-cpu-only")]
    pub on_cpu_only: bool,
    /// Root of separate debug files (searched by build-id and .gnu_debuglink); repeatable.
    #[arg(long = "debug-dir", default_value = "/usr/lib/debug")]
    pub debug_dir: Vec<PathBuf>,
}

pub fn run(a: ReportArgs) -> anyhow::Result<u8> {
    let filter = Filter {
        pids: a.pid.clone(),
        tids: a.tid.clone(),
        comms: a.comm.clone(),
        kinds: match (a.on_cpu_only, a.off_cpu_only) {
            (true, _) => SampleKinds::OnCpu,
            (_, true) => SampleKinds::OffCpu,
            _ => SampleKinds::Both,
        },
        exports: false,
    };
    let opts = SymbolizerOptions {
        debug_dirs: a.debug_dir.clone(),
        inlines: !a.no_inline,
        lines: a.lines,
        demangle: true,
    };
    let profile = report::load(&a.input, &filter, opts)?;
    if let Some(salvaged) = &profile.salvaged {
        eprintln!("rprof report: warning: {}", salvaged.warning());
    }
    if profile.unwound.unwound > 0 {
        eprintln!("rprof report: {}", advice::dwarf_summary(&profile.unwound));
    }
    if let Some(svg) = &a.flamegraph {
        if profile.stacks.is_empty() {
            anyhow::bail!(
                "{}: no samples to draw (check the filters)",
                a.input.display()
            );
        }
        let file = std::fs::File::create(svg)
            .with_context(|| format!("cannot create {}", svg.display()))?;
        let mut w = std::io::BufWriter::new(file);
        report::write_flamegraph(&profile, &format!("rprof: {}", a.input.display()), &mut w)
            .and_then(|_| w.flush())
            .with_context(|| format!("cannot write {}", svg.display()))?;
        eprintln!(
            "rprof report: wrote {} ({} samples)",
            svg.display(),
            profile.samples
        );
        return Ok(0);
    }
    let mut out = std::io::BufWriter::with_capacity(1 << 16, Stdout::lock());
    if a.folded {
        report::write_folded(&profile, &mut out)?;
    } else {
        let t = TableOptions {
            sort_by_total: a.children,
            limit: a.limit,
        };
        report::write_table(&profile, &t, &mut out)?;
    }
    out.flush()?;
    Ok(0)
}
