//! `rprof report` arguments and their mapping onto the report library.
use super::advice;
use super::debuginfod::DebuginfodArgs;
use super::output::Stdout;
use super::parse::{self, GraphSpec, SortKeys};
use super::report_events::{self, events_of};
use anyhow::Context;
use clap::Args;
use rprof::report::{
    self, CallGraph, CallOrder, Filter, FirefoxOptions, Profile, ReportError, SampleKinds, SortKey,
    TableOptions,
};
use rprof::symbols::SymbolizerOptions;
use rprof::text::thousands;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Read a recording (rprof's or `perf record`'s) and print a top table, folded stacks or a flame graph.
#[derive(Args, Debug)]
#[command(
    args_override_self = true,
    after_help = "Examples:\n  rprof report\n  rprof report --folded | inferno-flamegraph > out.svg\n  \
                        rprof report -i perf.data --flamegraph out.svg\n  \
                        rprof report --pprof out.pb.gz && go tool pprof -top out.pb.gz\n  \
                        rprof report --firefox out.json.gz   (open it at https://profiler.firefox.com)\n  \
                        rprof report --sort comm,pid -n 10\n  \
                        rprof report -g caller --children -n 5"
)]
pub struct ReportArgs {
    /// The recording to read.
    #[arg(short = 'i', long = "input", default_value = "rprof.data")]
    pub input: PathBuf,
    /// Print folded stacks (`comm;outer;...;leaf COUNT`) for flamegraph.pl / inferno-flamegraph.
    #[arg(long = "folded", conflicts_with_all = ["flamegraph", "pprof", "firefox", "otlp"])]
    pub folded: bool,
    /// Write an SVG flame graph to this file.
    #[arg(long = "flamegraph", value_name = "SVG", conflicts_with_all = ["pprof", "firefox", "otlp"])]
    pub flamegraph: Option<PathBuf>,
    /// Write a gzipped pprof profile (profile.proto) to this file, for `go tool pprof` and its viewers.
    #[arg(long = "pprof", value_name = "FILE", conflicts_with_all = ["firefox", "otlp"])]
    pub pprof: Option<PathBuf>,
    /// Write an OpenTelemetry profiles request (OTLP protobuf, profiles v1development as PyPI's
    /// opentelemetry-proto 1.45.2 has it) to this file: one profile per sample type, labelled by pid, tid and
    /// comm, for `curl --data-binary @FILE -H 'Content-Type: application/x-protobuf'
    /// http://COLLECTOR:4318/v1development/profiles`.
    #[arg(long = "otlp", value_name = "FILE", conflicts_with = "firefox")]
    pub otlp: Option<PathBuf>,
    /// Write a Firefox Profiler profile to this file (gzipped when it ends in .gz), with each thread's
    /// samples on a timeline; open it at https://profiler.firefox.com.
    #[arg(long = "firefox", value_name = "FILE")]
    pub firefox: Option<PathBuf>,
    /// Sort the table by total (children) time instead of self time; with -g, graph the samples through each
    /// function.
    #[arg(long = "children", overrides_with = "no_children")]
    pub children: bool,
    /// Sort the table by self time (the default; perf's spelling).
    #[arg(long = "no-children", overrides_with = "children")]
    pub no_children: bool,
    /// What makes a row, as perf's --sort: comm, pid (PID:COMMAND), tid (TID:COMMAND), dso, sym; `event`
    /// alone: a row per event; `event` with other keys: a section per event (what a recording of several
    /// events gets anyway).
    #[arg(short = 's', long = "sort", value_name = "KEYS", default_value = "comm,dso,sym",
          value_parser = parse::sort_keys)]
    pub sort: SortKeys,
    /// Print each row's call graph, in perf report's layout: `caller` (from the outermost caller down, the
    /// default with --children) or `callee` (from the function up through its callers), with perf's threshold
    /// (`-g caller,0.5`); `none` for none.
    #[arg(short = 'g', long = "call-graph", value_name = "ORDER", num_args = 0..=1,
          default_missing_value = "graph", value_parser = parse::graph_spec)]
    pub call_graph: Option<GraphSpec>,
    /// Print to standard output as text (the table is the default; accepted for perf's spelling).
    #[arg(long = "stdio")]
    pub stdio: bool,
    /// Print each row's number of samples (perf report's Samples column; perf's `-n`, which in rprof is the
    /// row limit).
    #[arg(long = "show-nr-samples")]
    pub show_nr_samples: bool,
    /// Print only the recording's header (host, command line, events, first and last sample), as perf
    /// report --header-only.
    #[arg(long = "header-only")]
    pub header_only: bool,
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
    #[arg(
        short = 'c',
        long = "comm",
        visible_alias = "comms",
        value_delimiter = ','
    )]
    pub comm: Vec<String>,
    /// Leave out rows under this share of the samples (in percent; of the total column with --children).
    #[arg(long = "percent-limit", value_name = "PERCENT", default_value_t = 0.0, value_parser = parse::percent)]
    pub percent_limit: f64,
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
    /// Compare with this base recording: a table of each row's self share in the base, in this recording and
    /// the change (perf diff's Baseline and Delta Abs), largest change first; with --folded, differential
    /// folded stacks (`STACK BASE NEW`); with --flamegraph, a differential flame graph (red: grew, blue:
    /// shrank). The base is scaled to the new run's total, so shares are compared, not lengths.
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
    if a.header_only {
        return super::recording_info::header_only(&a.input);
    }
    let filter = filter(&a);
    let (debug, downloads) = a.debuginfod.sources(a.debug_dir.clone(), "report")?;
    let opts = SymbolizerOptions {
        debug,
        inlines: !a.no_inline,
        lines: a.lines,
        demangle: true,
    };
    let base = match &a.diff {
        Some(base) => Some(report::load(base, &filter, opts.clone())?),
        None => None,
    };
    let profile = report::load(&a.input, &filter, opts.clone())?;
    if let Some(downloads) = &downloads {
        downloads.finish();
    }
    if let Some(salvaged) = &profile.salvaged {
        salvaged.check()?;
        eprintln!("rprof report: warning: {}", salvaged.warning());
    }
    let nothing = nothing_kept(&a, &profile);
    if let (Some(nothing), true) = (&nothing, a.folded || table(&a)) {
        eprintln!("rprof report: {nothing}");
    }
    if let Some(svg) = &a.flamegraph {
        if profile.stacks.is_empty() {
            let why = nothing.unwrap_or_else(|| "no samples (check the filters)".into());
            anyhow::bail!("{}: nothing to draw: {why}", a.input.display());
        }
        write_flamegraph(&a, svg, &profile, base.as_ref())?;
        verdict(&a, &profile);
        return Ok(0);
    }
    if let Some(path) = &a.pprof {
        write_export(&a, &profile, path, |out| report::write_pprof(&profile, out))?;
        verdict(&a, &profile);
        return Ok(0);
    }
    if let Some(path) = &a.otlp {
        let start = started(&a.input, &profile);
        write_export(&a, &profile, path, |out| {
            report::write_otlp(&profile, start, out)
        })?;
        verdict(&a, &profile);
        return Ok(0);
    }
    if let Some(path) = &a.firefox {
        write_firefox(&a, &profile, path)?;
        verdict(&a, &profile);
        return Ok(0);
    }
    let mut out = std::io::BufWriter::with_capacity(1 << 16, Stdout::lock());
    let events = events_of(&profile);
    if base.is_none() && !a.folded && a.sort.1 && a.sort.0.is_empty() {
        report_events::write_event_table(&profile, &events, a.show_nr_samples, &mut out)?;
    } else if base.is_none() && !a.folded && (events.len() > 1 || a.sort.1) {
        let options = table_options(&a);
        report_events::write_sections(&filter, &events, &options, &mut out, |f| {
            report::load(&a.input, f, opts.clone())
        })?;
    } else if let (true, Some(base)) = (a.folded, &base) {
        report::write_diff_folded(base, &profile, &mut out)?;
    } else if a.folded {
        report::write_folded(&profile, &mut out)?;
    } else if let Some(base) = &base {
        report::write_diff_table(base, &profile, &table_options(&a), &mut out)?;
    } else {
        report::write_table(&profile, &table_options(&a), &mut out)?;
    }
    out.flush()?;
    verdict(&a, &profile);
    Ok(0)
}

/// Whether the output is the table (no other output was asked for).
fn table(a: &ReportArgs) -> bool {
    !a.folded
        && a.flamegraph.is_none()
        && a.pprof.is_none()
        && a.firefox.is_none()
        && a.otlp.is_none()
}

fn filter(a: &ReportArgs) -> Filter {
    Filter {
        pids: a.pid.clone(),
        tids: a.tid.clone(),
        comms: a.comm.clone(),
        kinds: match (a.on_cpu_only, a.off_cpu_only) {
            (true, _) => SampleKinds::OnCpu,
            (_, true) => SampleKinds::OffCpu,
            _ => SampleKinds::Both,
        },
        exports: a.pprof.is_some() || a.firefox.is_some() || a.otlp.is_some(),
        threads: table(a)
            && a.sort
                .0
                .iter()
                .any(|k| matches!(k, SortKey::Pid | SortKey::Tid)),
        attrs: Vec::new(),
    }
}

fn table_options(a: &ReportArgs) -> TableOptions {
    let graph = a.call_graph.filter(|g| g.on).map(|g| CallGraph {
        order: g.order.unwrap_or(match a.children {
            true => CallOrder::Caller,
            false => CallOrder::Callee,
        }),
        threshold: g.threshold,
    });
    TableOptions {
        sort_by_total: a.children,
        limit: a.limit,
        keys: a.sort.0.clone(),
        off_cpu_only: a.off_cpu_only,
        call_graph: graph,
        percent_limit: a.percent_limit,
        show_samples: a.show_nr_samples,
    }
}

/// When the filters kept no sample of a recording that has some: `0 of 11,985 samples after --pid 1`, and
/// the processes the recording has.
fn nothing_kept(a: &ReportArgs, p: &Profile) -> Option<String> {
    if p.samples + p.off_samples > 0 || p.read == 0 {
        return None;
    }
    let join = |v: &[String]| v.join(",");
    let list = |v: &[u32]| join(&v.iter().map(u32::to_string).collect::<Vec<_>>());
    let mut given = Vec::new();
    if !a.pid.is_empty() {
        given.push(format!("--pid {}", list(&a.pid)));
    }
    if !a.tid.is_empty() {
        given.push(format!("--tid {}", list(&a.tid)));
    }
    if !a.comm.is_empty() {
        given.push(format!("--comm {}", join(&a.comm)));
    }
    given.extend(
        a.off_cpu_only
            .then(|| "--off-cpu-only (record with --off-cpu for off-CPU samples)".into()),
    );
    given.extend(a.on_cpu_only.then(|| "--on-cpu-only".into()));
    let mut pids: Vec<(&u32, &(String, u64))> = p.read_by_pid.iter().collect();
    pids.sort_by(|x, y| y.1 .1.cmp(&x.1 .1).then(x.0.cmp(y.0)));
    let seen: Vec<String> = pids
        .iter()
        .take(5)
        .map(|(pid, (comm, n))| format!("{pid} ({comm}, {} samples)", thousands(*n)))
        .collect();
    let more = match pids.len() > 5 {
        true => format!(" and {} more", pids.len() - 5),
        false => String::new(),
    };
    Some(format!(
        "0 of {} samples after {}; the recording's processes are {}{more}",
        thousands(p.read),
        given.join(" "),
        seen.join(", ")
    ))
}

/// `--flamegraph SVG`: the flame graph, or with --diff the differential one.
fn write_flamegraph(
    a: &ReportArgs,
    svg: &Path,
    profile: &Profile,
    base: Option<&Profile>,
) -> anyhow::Result<()> {
    let file =
        std::fs::File::create(svg).with_context(|| format!("cannot create {}", svg.display()))?;
    let mut w = std::io::BufWriter::new(file);
    match base {
        Some(base) => {
            let title = format!(
                "rprof: {} against {}",
                a.input.display(),
                a.diff.as_ref().expect("base given").display()
            );
            report::write_diff_flamegraph(base, profile, &title, &mut w)
        }
        None => report::write_flamegraph(profile, &format!("rprof: {}", a.input.display()), &mut w),
    }
    .and_then(|_| w.flush())
    .with_context(|| format!("cannot write {}", svg.display()))?;
    eprintln!(
        "rprof report: wrote {} ({} samples)",
        svg.display(),
        profile.samples
    );
    Ok(())
}

/// `--firefox FILE`: the Firefox Profiler profile, gzipped when FILE ends in .gz.
fn write_firefox(a: &ReportArgs, profile: &Profile, path: &Path) -> anyhow::Result<()> {
    let opts = FirefoxOptions {
        product: format!("rprof: {}", a.input.display()),
        started: started(&a.input, profile),
    };
    let gzip = path.extension().is_some_and(|e| e == "gz");
    write_export(a, profile, path, |out| {
        if gzip {
            let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
            report::write_firefox(profile, &opts, &mut gz)?;
            gz.finish()?;
            Ok(())
        } else {
            report::write_firefox(profile, &opts, out)
        }
    })
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
        let why =
            nothing_kept(a, profile).unwrap_or_else(|| "no samples (check the filters)".into());
        anyhow::bail!("{}: nothing to export: {why}", a.input.display());
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
