//! `rprof report` arguments and their mapping onto the report library.
use super::advice;
use super::debuginfod::DebuginfodArgs;
use super::output::Stdout;
use anyhow::Context;
use clap::Args;
use rprof::report::{
    self, Filter, FirefoxOptions, Profile, ReportError, SampleKinds, TableOptions,
};
use rprof::symbols::SymbolizerOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Read a recording (rprof's or `perf record`'s) and print a top table, folded stacks or a flame graph.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  rprof report\n  rprof report --folded | inferno-flamegraph > out.svg\n  \
                        rprof report -i perf.data --flamegraph out.svg\n  \
                        rprof report --pprof out.pb.gz && go tool pprof -top out.pb.gz\n  \
                        rprof report --firefox out.json.gz   (open it at https://profiler.firefox.com)"
)]
pub struct ReportArgs {
    /// The recording to read.
    #[arg(short = 'i', long = "input", default_value = "rprof.data")]
    pub input: PathBuf,
    /// Print folded stacks (`comm;outer;...;leaf COUNT`) for flamegraph.pl / inferno-flamegraph.
    #[arg(long = "folded", conflicts_with_all = ["flamegraph", "pprof", "firefox"])]
    pub folded: bool,
    /// Write an SVG flame graph to this file.
    #[arg(long = "flamegraph", value_name = "SVG", conflicts_with_all = ["pprof", "firefox"])]
    pub flamegraph: Option<PathBuf>,
    /// Write a gzipped pprof profile (profile.proto) to this file, for `go tool pprof` and its viewers.
    #[arg(long = "pprof", value_name = "FILE", conflicts_with = "firefox")]
    pub pprof: Option<PathBuf>,
    /// Write a Firefox Profiler profile to this file (gzipped when it ends in .gz), with each thread's
    /// samples on a timeline; open it at https://profiler.firefox.com.
    #[arg(long = "firefox", value_name = "FILE")]
    pub firefox: Option<PathBuf>,
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
    /// Compare with this base recording: with --folded, differential folded stacks (`STACK BASE NEW`); with
    /// --flamegraph, a differential flame graph (red: grew, blue: shrank). The base is scaled to the new run's
    /// total, so shares are compared, not lengths.
    #[arg(long = "diff", value_name = "BASE", conflicts_with_all = ["pprof", "firefox"])]
    pub diff: Option<PathBuf>,
    /// Root of separate debug files (searched by build-id and .gnu_debuglink); repeatable.
    #[arg(long = "debug-dir", default_value = "/usr/lib/debug")]
    pub debug_dir: Vec<PathBuf>,
    #[command(flatten)]
    pub debuginfod: DebuginfodArgs,
    /// Print no closing verdict (how far to trust the profile) on standard error.
    #[arg(short = 'q', long = "quiet")]
    pub quiet: bool,
}

/// The closing verdict on standard error, unless `-q`.
fn verdict(a: &ReportArgs, profile: &Profile) {
    if a.quiet {
        return;
    }
    let quality = report::Quality::of(profile);
    for line in advice::report_verdict(&quality, &profile.unwound, a.debuginfod.is_on()) {
        eprintln!("rprof report: {line}");
    }
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
        exports: a.pprof.is_some() || a.firefox.is_some(),
    };
    let (debug, downloads) = a.debuginfod.sources(a.debug_dir.clone(), "report")?;
    let opts = SymbolizerOptions {
        debug,
        inlines: !a.no_inline,
        lines: a.lines,
        demangle: true,
    };
    if a.diff.is_some() && !a.folded && a.flamegraph.is_none() {
        anyhow::bail!("--diff needs --folded or --flamegraph SVG to show the difference in");
    }
    let base = match &a.diff {
        Some(base) => Some(report::load(base, &filter, opts.clone())?),
        None => None,
    };
    let profile = report::load(&a.input, &filter, opts)?;
    if let Some(downloads) = &downloads {
        downloads.finish();
    }
    if let Some(salvaged) = &profile.salvaged {
        eprintln!("rprof report: warning: {}", salvaged.warning());
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
        match &base {
            Some(base) => {
                let title = format!(
                    "rprof: {} against {}",
                    a.input.display(),
                    a.diff.as_ref().expect("base given").display()
                );
                report::write_diff_flamegraph(base, &profile, &title, &mut w)
            }
            None => {
                report::write_flamegraph(&profile, &format!("rprof: {}", a.input.display()), &mut w)
            }
        }
        .and_then(|_| w.flush())
        .with_context(|| format!("cannot write {}", svg.display()))?;
        eprintln!(
            "rprof report: wrote {} ({} samples)",
            svg.display(),
            profile.samples
        );
        verdict(&a, &profile);
        return Ok(0);
    }
    if let Some(path) = &a.pprof {
        write_export(&a, &profile, path, |out| report::write_pprof(&profile, out))?;
        verdict(&a, &profile);
        return Ok(0);
    }
    if let Some(path) = &a.firefox {
        let opts = FirefoxOptions {
            product: format!("rprof: {}", a.input.display()),
            started: started(&a.input, &profile),
        };
        let gzip = path.extension().is_some_and(|e| e == "gz");
        write_export(&a, &profile, path, |out| {
            if gzip {
                let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
                report::write_firefox(&profile, &opts, &mut gz)?;
                gz.finish()?;
                Ok(())
            } else {
                report::write_firefox(&profile, &opts, out)
            }
        })?;
        verdict(&a, &profile);
        return Ok(0);
    }
    let mut out = std::io::BufWriter::with_capacity(1 << 16, Stdout::lock());
    if let (true, Some(base)) = (a.folded, &base) {
        report::write_diff_folded(base, &profile, &mut out)?;
    } else if a.folded {
        report::write_folded(&profile, &mut out)?;
    } else {
        let t = TableOptions {
            sort_by_total: a.children,
            limit: a.limit,
        };
        report::write_table(&profile, &t, &mut out)?;
    }
    out.flush()?;
    verdict(&a, &profile);
    Ok(0)
}

/// Write an exported profile to `path` with `write`, then say what was written.
fn write_export(
    a: &ReportArgs,
    profile: &Profile,
    path: &Path,
    write: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> Result<(), ReportError>,
) -> anyhow::Result<()> {
    let samples = profile.exports.as_ref().map_or(0, |e| e.samples.len());
    if samples == 0 {
        anyhow::bail!(
            "{}: no samples to export (check the filters)",
            a.input.display()
        );
    }
    let file =
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut w = std::io::BufWriter::new(file);
    write(&mut w)
        .map_err(anyhow::Error::from)
        .and_then(|_| w.flush().map_err(anyhow::Error::from))
        .with_context(|| format!("cannot write {}", path.display()))?;
    eprintln!("rprof report: wrote {} ({samples} samples)", path.display());
    Ok(())
}

/// The wall-clock time of the first sample: the recording's modification time (when its recorder wrote the
/// end) less the time its samples span.
fn started(input: &Path, profile: &Profile) -> Option<std::time::SystemTime> {
    let modified = std::fs::metadata(input).ok()?.modified().ok()?;
    let samples = &profile.exports.as_ref()?.samples;
    let first = samples.iter().map(|s| s.time).filter(|&t| t > 0).min()?;
    let last = samples.iter().map(|s| s.time).max()?;
    modified.checked_sub(std::time::Duration::from_nanos(last - first))
}
