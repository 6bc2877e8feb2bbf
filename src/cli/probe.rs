//! `rprof probe` arguments and their mapping onto [`rprof::probe::ProbeOptions`].
use super::debuginfod::DebuginfodArgs;
use super::output::Stdout;
use super::parse;
use anyhow::Context;
use clap::Args;
use rprof::probe::{self, Format, Notice, ProbeOptions, Started, TaskTarget};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Count and time functions exactly with uprobes/uretprobes, kprobes and tracepoints.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  rprof probe -x ./app 'func_*' -- ./app\n  rprof probe c:malloc -p 1234 -d 10\n  \
                  rprof probe -g --flamegraph malloc.svg c:malloc -- ./app\n  \
                  rprof probe 'syscall:write' -- ./app\n  rprof probe 't:sched:sched_switch' -d 5\n\n\
                  Exit status: with -- COMMAND, the command's own (128+N when signal N killed it); otherwise 0. 1 \
                  when rprof itself fails, 2 for a usage error."
)]
pub struct ProbeArgs {
    /// Patterns: functions in -x BINARY (globs on mangled and demangled names), `LIB:PATTERN` (e.g. c:malloc),
    /// `syscall:GLOB`, `t:CATEGORY:EVENT`, or, without -x, kernel functions.
    /// A pattern may name values to fetch: `'parse_*(arg0, arg1:str)'`, `'read_block ret'`, `'f(len, name:str)'`
    /// (parameter names from DWARF), `usdt:PROVIDER:NAME` (USDT probes of -x BINARY or `lib:`), whose arguments are
    /// arg0.. . bpftrace's probe names work too: uprobe:PATH:FUNC (u:, uretprobe:, ur:), tracepoint:CAT:EVENT,
    /// kprobe:FUNC (kretprobe:), and perf software events sampled: profile:hz:N (N samples a second of CPU time;
    /// profile:s|ms|us:N a period; p:hz:N), software:EVENT[:COUNT] (a hit every COUNT page-faults, cs, ...;
    /// s:EVENT:COUNT), whose COUNT in the table is samples, not calls.
    /// An address probe, as perf's: `0xADDR` (a file offset of -x BINARY, which perf writes into uprobe_events
    /// as it is) or `FUNC+OFF`, counted only (a return inside a function cannot be timed).
    #[arg(required_unless_present_any = ["pair", "add", "funcs", "list"], value_name = "PATTERN")]
    pub patterns: Vec<String>,
    /// A pattern or address to probe (perf's spelling; the same as giving it as PATTERN); repeatable.
    #[arg(short = 'a', long = "add", value_name = "PATTERN")]
    pub add: Vec<String>,
    /// List the functions that can be probed in -x BINARY (else the kernel's), those FILTER (a glob)
    /// matches, or without one all but `_*` and `*@plt` (as perf probe -F); probe nothing.
    #[arg(short = 'F', long = "funcs", value_name = "FILTER", num_args = 0..=1, default_missing_value = "")]
    pub funcs: Option<String>,
    /// The binary or shared library whose functions the patterns name.
    #[arg(short = 'x', long = "exe", value_name = "BINARY")]
    pub binary: Option<PathBuf>,
    /// Patterns are regular expressions (searched anywhere in the name; anchor with ^...$).
    #[arg(short = 'r', long)]
    pub regex: bool,
    /// Print what the patterns would probe, and probe nothing. Without a pattern: the probe groups that exist
    /// now (rprof's probes live only as long as their session).
    #[arg(short = 'l', long)]
    pub list: bool,
    /// Probe this process (all its threads, and those it creates later).
    #[arg(short = 'p', long, value_name = "PID", conflicts_with = "command")]
    pub pid: Option<i32>,
    /// Stop after this many seconds.
    #[arg(short = 'd', long, value_name = "SECONDS", value_parser = parse::seconds)]
    pub duration: Option<Duration>,
    /// Print a report every SECONDS, resetting the counts.
    #[arg(short = 'i', long, value_name = "SECONDS", value_parser = parse::seconds)]
    pub interval: Option<Duration>,
    /// Print a timestamp (UTC) with each report.
    #[arg(short = 'T', long = "timestamp")]
    pub timestamps: bool,
    /// Count entries only (no return probes, no durations), like funccount.
    #[arg(long)]
    pub count: bool,
    /// Also print a log2 histogram of durations per function (funclatency's layout); `--hist VALUE` (argN, ret,
    /// a parameter name) a histogram of that value instead. Give patterns before it, or use `--hist=VALUE`.
    #[arg(long, num_args = 0..=1, default_missing_value = "", value_name = "VALUE", conflicts_with_all = ["csv", "json"])]
    pub hist: Option<String>,
    /// The unit of the duration histograms: ns (default), us or ms (funclatency's -u and -m, biolatency's -m).
    #[arg(long, value_name = "UNIT", default_value = "ns", value_parser = parse::hist_unit, overrides_with = "hist_unit")]
    pub hist_unit: u64,
    /// Print the duration histograms without the table before them, as biolatency and runqlat do.
    #[arg(long, conflicts_with_all = ["csv", "json"])]
    pub hist_only: bool,
    /// Split each function's row by a value: argN, ret, a parameter name (`NAME:str` for strings), or caller
    /// (argdist's -C). The top --top values are shown, the rest summed as `[other: past --top N]`; values
    /// past the first 10000 distinct ones of a function are summed as `[other: past 10000 values]`.
    #[arg(long, value_name = "VALUE", value_parser = parse::value_name)]
    pub by: Option<String>,
    /// Split each function's row by its calling function (the same as --by caller).
    #[arg(long, conflicts_with = "by")]
    pub callers: bool,
    /// Values shown per function with --by or --callers.
    #[arg(long, value_name = "N", default_value = "10")]
    pub top: usize,
    /// Print one line per call as it returns: time, thread, function(arguments) = return value, duration.
    #[arg(long)]
    pub trace: bool,
    /// Print --trace's lines in these columns instead (implies --trace; no table after them), as bcc's tools
    /// do: `'{time:<9.3} {comm:<16} {pid:>7} {ret:>4|RET} {filename|PATH}'`. `{NAME[:<W|>W][.P][|HEADER]}` is a
    /// value named in a pattern, comm/pid/tid/cpu (an event's own field of that name first; `ctx.pid` is always
    /// the process's), time (s since the first event), clock (HH:MM:SS UTC), dur, dur_us, dur_ms, or event.
    #[arg(long, value_name = "FORMAT", value_parser = parse::trace_format)]
    pub trace_format: Option<probe::TraceFormat>,
    /// Lines per second of the run --trace prints at most; the rest is counted, in the trace ("--- N calls not
    /// shown ...") and at the end. Without it, every call is printed.
    #[arg(long, value_name = "N", requires = "trace", value_parser = clap::value_parser!(u64).range(1..))]
    pub trace_rate: Option<u64>,
    /// Join each --trace line of probe FIRST to the same thread's next line of probe THEN (names as -l lists
    /// them): one line with the values of both; a FIRST without its THEN is printed alone once its thread
    /// ends or 200 ms have passed (execsnoop: `sched:sched_process_exec,_dl_start`, the path and the argv).
    #[arg(long, value_name = "FIRST,THEN", value_parser = parse::name_pair)]
    pub trace_join: Option<(String, String)>,
    /// List only calls that take at least this long (5ms, 500us, 2s; a bare number is ms), each with its
    /// values and, with -g, its stack at entry (funcslower).
    #[arg(long, value_name = "DURATION", value_parser = parse::duration_ns, conflicts_with = "count")]
    pub min_duration: Option<u64>,
    /// Time from one probe point to another (`--pair START,DONE`: user functions, USDT probes, tracepoints,
    /// kernel functions; each may name its values, `t:block:block_rq_complete(error)`, and have a filter,
    /// `t:sock:inet_sock_set_state if newstate == TCP_CLOSE`): on the same thread, innermost first, or with
    /// --key by matching values on any thread or CPU. Several STARTs: `A | B if EXPR,DONE`.
    #[arg(long, value_name = "START,DONE", value_parser = parse::pair, conflicts_with = "count")]
    pub pair: Option<(Vec<String>, String)>,
    /// Pair START and DONE by these values instead of by thread: names present in both (`dev,sector`),
    /// `START_NAME=DONE_NAME` (`pid=next_pid`), or for several STARTs the names each may have, the first it has
    /// taken (`pid|prev_pid=next_pid`). Read on every CPU for every task.
    #[arg(long, value_name = "FIELDS", value_parser = parse::pair_key, requires = "pair")]
    pub key: Option<parse::KeyParts>,
    /// Of several STARTs of one key before its DONE, time from the latest (each replaces the open one, as
    /// bcc's maps do) or the first (later ones are dropped, counted).
    #[arg(
        long,
        value_enum,
        value_name = "WHICH",
        default_value = "latest",
        requires = "key"
    )]
    pub keep: KeepArg,
    /// Open STARTs a keyed pair keeps at most; a START beyond drops the oldest (counted).
    #[arg(long, value_name = "N", default_value = "10000", requires = "key")]
    pub max_open: usize,
    /// Open STARTs older than this are dropped, counted (5s, 500ms; a bare number is ms).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse::duration_ns, requires = "key")]
    pub max_age: u64,
    /// Write every call (with its values) as a slice on its thread's track, and keyed pairs on a track per key,
    /// in the Chrome trace-event format (Perfetto UI, chrome://tracing, speedscope).
    #[arg(long, value_name = "FILE.json", conflicts_with = "count")]
    pub trace_out: Option<PathBuf>,
    /// Print CSV: function,count,total_us,self_us,avg_us,min_us,max_us.
    #[arg(long, conflicts_with = "json")]
    pub csv: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Also count the distinct user and kernel stacks at entry.
    #[arg(short = 'g', long)]
    pub stacks: bool,
    /// With -g, print the stacks folded for flame graphs (`outer;...;leaf COUNT`): standard output then
    /// carries the folded lines alone, and the report goes to standard error.
    #[arg(long, requires = "stacks", conflicts_with = "flamegraph")]
    pub folded: bool,
    /// With -g, draw the stacks at entry as an SVG flame graph (as `rprof report --flamegraph` does).
    #[arg(long, value_name = "SVG", requires = "stacks")]
    pub flamegraph: Option<PathBuf>,
    /// Data pages per CPU ring buffer (a power of two).
    #[arg(long, value_name = "PAGES", default_value = "1024", value_parser = parse::pages)]
    pub mmap_pages: usize,
    /// Which engine reads the probe events: auto (the tracefs ring when only the targets map the probed file,
    /// perf events otherwise, counters for --count), perf, or tracefs.
    #[arg(
        long,
        value_name = "ENGINE",
        env = "RPROF_PROBE_ENGINE",
        default_value = "auto",
        hide = true
    )]
    pub engine: probe::EngineChoice,
    /// Read the tracefs ring with read(2) even where the kernel can map it.
    #[arg(long, env = "RPROF_RING_READ", hide = true, value_parser = clap::builder::BoolishValueParser::new())]
    pub ring_read: bool,
    /// Use the kernel's uprobe PMU where it helps (`0`: take the path of kernels before 4.17, for tests).
    #[arg(long, env = "RPROF_UPROBE_PMU", hide = true, default_value = "1", value_parser = clap::builder::BoolishValueParser::new())]
    pub uprobe_pmu: bool,
    /// Report the calibration's measurements (`1`), and the uprobe PMU's cost beside tracefs's (`pmu`).
    #[arg(long, env = "RPROF_DEBUG_COST", hide = true, value_parser = parse::debug_cost)]
    pub debug_cost: Option<probe::DebugCost>,
    /// A directory searched for separate debug files (repeatable; default /usr/lib/debug).
    #[arg(long = "debug-dir", value_name = "DIR")]
    pub debug_dirs: Vec<PathBuf>,
    /// Subtract from each duration the probe's own bias (the part of its cost inside every measured duration,
    /// measured at start per class of probed instruction), and from a caller's the whole cost of its probed
    /// callees; never below 0.
    #[arg(long, conflicts_with = "count")]
    pub net: bool,
    /// Probe each function at its first instruction, even where the kernel single-steps it (by default
    /// probes go on the first instruction the kernel emulates, when the ones before it can be skipped).
    #[arg(long)]
    pub at_entry: bool,
    #[command(flatten)]
    pub debuginfod: DebuginfodArgs,
    /// Leave the launched COMMAND running when rprof ends or dies (by default it gets SIGTERM when rprof ends
    /// first, and SIGKILL when rprof is killed).
    #[arg(long = "keep-workload", requires = "command")]
    pub keep_workload: bool,
    /// The command to launch and follow, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<std::ffi::OsString>,
}

impl ProbeArgs {
    /// The library's options for these arguments.
    pub fn options(self) -> ProbeOptions {
        let target = match (self.pid, self.command.is_empty()) {
            (Some(pid), _) => TaskTarget::Pid(pid),
            (None, false) => TaskTarget::Command(super::command(&self.command)),
            (None, true) => TaskTarget::SystemWide,
        };
        let format = if self.csv {
            Format::Csv
        } else if self.json {
            Format::Json
        } else if self.hist_only {
            Format::HistOnly
        } else if self.hist.as_deref() == Some("") {
            Format::Hist
        } else {
            Format::Table
        };
        let mut opts = ProbeOptions {
            patterns: self.patterns.into_iter().chain(self.add).collect(),
            binary: self.binary,
            regex: self.regex,
            list: self.list,
            target,
            duration: self.duration,
            interval: self.interval,
            timestamps: self.timestamps,
            count_only: self.count,
            format,
            stacks: self.stacks,
            folded: self.folded || self.flamegraph.is_some(),
            mmap_pages: self.mmap_pages,
            engine: self.engine,
            ring_read: self.ring_read,
            keep_workload: self.keep_workload,
            uprobe_pmu: self.uprobe_pmu,
            at_entry: self.at_entry,
            net: self.net,
            debug_cost: self.debug_cost.unwrap_or_default(),
            ..ProbeOptions::default()
        };
        if !self.debug_dirs.is_empty() {
            opts.debug.dirs = self.debug_dirs;
        }
        let by = if self.callers {
            Some("caller".to_string())
        } else {
            self.by
        };
        let hist_of = self.hist.filter(|h| !h.is_empty());
        // Values named by --by and --hist are fetched from every target, with the type given there.
        for v in by.iter().chain(hist_of.iter()) {
            if let Ok(item) = probe::FetchItem::parse(v) {
                opts.values.push(item);
            }
        }
        let label = |v: Option<String>| v.map(|v| v.split(':').next().unwrap_or("").to_string());
        opts.calls.by = label(by);
        opts.calls.hist_of = label(hist_of);
        opts.calls.top = self.top;
        opts.calls.hist_unit = self.hist_unit;
        opts.calls.trace = self.trace || self.trace_format.is_some();
        opts.calls.trace_format = self.trace_format;
        opts.calls.trace_rate = self.trace_rate.unwrap_or(0);
        opts.calls.trace_join = self.trace_join;
        opts.calls.min_duration = self.min_duration;
        opts.pair = self.pair.map(|(starts, done)| probe::PairOptions {
            starts,
            key: self.key.map(|k| k.0).unwrap_or_default(),
            keep: match self.keep {
                KeepArg::Latest => probe::Keep::Latest,
                KeepArg::First => probe::Keep::First,
            },
            max_open: self.max_open.max(1),
            max_age: Duration::from_nanos(self.max_age),
            ..probe::PairOptions::new("", &done)
        });
        opts.trace_out = self.trace_out;
        opts
    }
}

/// `--keep`: which START of a key a keyed pair times from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum KeepArg {
    Latest,
    First,
}

/// `-l 'sched:*'` as perf users write it: `CATEGORY:EVENT` names tracepoints (`t:sched:*`) when no library
/// CATEGORY exists and tracefs has that category; otherwise it stays LIBRARY:FUNCTION.
fn tracepoint_if_no_library(pattern: &str) -> String {
    let parts: Vec<&str> = pattern.split(':').collect();
    let [system, _] = parts.as_slice() else {
        return pattern.to_string();
    };
    let known = [
        "t",
        "u",
        "k",
        "uprobe",
        "kprobe",
        "tracepoint",
        "usdt",
        "syscall",
        "software",
        "profile",
    ];
    if known.contains(system)
        || system.contains('/')
        || rprof::probe::find_library(system, None).is_ok()
    {
        return pattern.to_string();
    }
    let category = rprof::tracefs::Tracefs::find_or_mount()
        .is_ok_and(|t| t.root().join("events").join(system).is_dir());
    match category {
        true => format!("t:{pattern}"),
        false => pattern.to_string(),
    }
}

/// Probe; returns the launched command's exit status (0 without one).
pub fn run(args: ProbeArgs) -> anyhow::Result<u8> {
    run_with(args, |_| {})
}

/// `rprof probe` with its options adjusted by `adjust` (the faces over it: `rprof trace`).
pub fn run_with(mut args: ProbeArgs, adjust: impl FnOnce(&mut ProbeOptions)) -> anyhow::Result<u8> {
    if args.list {
        args.patterns = args
            .patterns
            .iter()
            .map(|p| tracepoint_if_no_library(p))
            .collect();
    }
    if args.funcs.is_some() || (args.list && args.patterns.is_empty() && args.add.is_empty()) {
        return super::probe_list::run(&args);
    }
    let debuginfod = args.debuginfod.clone();
    let (folded, svg) = (args.folded, args.flamegraph.clone());
    let title = format!("rprof probe {}", args.patterns.join(" "));
    let mut opts = args.options();
    adjust(&mut opts);
    let (debug, _downloads) = debuginfod.sources(std::mem::take(&mut opts.debug.dirs), "probe")?;
    opts.debug = debug;
    // With --folded, standard output carries the folded stacks alone (what flamegraph.pl and inferno read, as
    // after `perf script | stackcollapse-perf.pl` or bcc's `stackcount -f`): the report goes to standard error.
    // `rprof trace`'s lines and summary go to standard error, among none of the command's output, as perf
    // trace's and strace's do.
    let perf_trace = opts.calls.style == probe::TraceStyle::PerfTrace;
    let mut report: Box<dyn Write> = match folded || perf_trace {
        true => Box::new(std::io::LineWriter::new(std::io::stderr())),
        false => Box::new(Stdout::lock()),
    };
    let mut removal = None;
    let summary = probe::run(&opts, &mut *report, &mut |n| match n {
        Notice::Removing => removal = RemovalWatch::start(),
        Notice::Removed => removal = None,
        n => say(&notice(&n)),
    })?;
    drop(report);
    if let Some(stacks) = &summary.folded {
        write_stacks(stacks, svg.as_deref(), &title)?;
    }
    Ok(super::exit_status(summary.exit_code))
}

/// `--folded`: the folded stacks alone on standard output; `--flamegraph SVG`: drawn into SVG by the same
/// inferno path as `rprof report --flamegraph`.
fn write_stacks(
    stacks: &probe::FoldedStacks,
    svg: Option<&Path>,
    title: &str,
) -> anyhow::Result<()> {
    if stacks.dropped > 0 {
        say(&format!(
            "warning: {} hits are in no stack: more than {} distinct stacks",
            stacks.dropped,
            probe::MAX_STACKS
        ));
    }
    let Some(svg) = svg else {
        let mut out = std::io::BufWriter::new(Stdout::lock());
        for line in &stacks.lines {
            writeln!(out, "{line}")?;
        }
        out.flush()?;
        return Ok(());
    };
    if stacks.lines.is_empty() {
        say(&format!(
            "warning: {} not written: no stacks to draw (no probed function was called)",
            svg.display()
        ));
        return Ok(());
    }
    let file =
        std::fs::File::create(svg).with_context(|| format!("cannot create {}", svg.display()))?;
    let mut w = std::io::BufWriter::new(file);
    let lines = stacks.lines.iter().map(String::as_str);
    rprof::report::write_flamegraph_lines(lines, title, "calls", &mut w)
        .and_then(|_| w.flush())
        .with_context(|| format!("cannot write {}", svg.display()))?;
    let n = stacks.lines.len();
    say(&format!(
        "wrote {} ({n} stack{} of {} calls)",
        svg.display(),
        if n == 1 { "" } else { "s" },
        stacks.calls
    ));
    Ok(())
}

/// Print `rprof: TEXT` on stderr in one write (the workload may be writing to the same stderr).
fn say(text: &str) {
    let line = format!("rprof: {text}\n");
    eprint!("{line}");
}

/// How long removing the probes may take before "removing the probes..." is said.
const REMOVAL_QUIET: Duration = Duration::from_millis(500);

/// Says "removing the probes..." on a terminal when the removal takes longer than [`REMOVAL_QUIET`]; dropping
/// it (when the probes are removed) ends it.
struct RemovalWatch {
    done: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RemovalWatch {
    /// None when stderr is not a terminal.
    fn start() -> Option<RemovalWatch> {
        use std::io::IsTerminal;
        if !std::io::stderr().is_terminal() {
            return None;
        }
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let waited = wait.recv_timeout(REMOVAL_QUIET);
            if matches!(waited, Err(std::sync::mpsc::RecvTimeoutError::Timeout)) {
                say(&notice(&Notice::Removing));
            }
        });
        Some(RemovalWatch {
            done: Some(done),
            thread: Some(thread),
        })
    }
}

impl Drop for RemovalWatch {
    fn drop(&mut self) {
        drop(self.done.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A notice of the probe session as one line.
pub(crate) fn notice(n: &Notice) -> String {
    match n {
        Notice::StaleRemoved(what) => format!(
            "removed probe groups and instances left by rprof processes that are gone: {}",
            what.join(", ")
        ),
        Notice::RingUnavailable(why) => format!("the tracefs ring cannot be used ({why}); using perf events"),
        Notice::SharedFileForced { path, others } => format!(
            "warning: {others} other processes map {}: with --engine tracefs, each of their calls to a probed \
             function takes the uprobe trap too",
            path.display()
        ),
        Notice::Refused { count, names, reason } => format!(
            "warning: skipping {count} target(s) ({}{}): the kernel refused the probe ({reason})",
            names.join(", "),
            if *count > names.len() { ", ..." } else { "" }
        ),
        Notice::Started(s) => started(s),
        Notice::TraceWritten {
            path,
            calls,
            overflowed,
        } => {
            let shared = match overflowed {
                0 => String::new(),
                n => format!(
                    "; {n} keyed calls of keys past the first {} share tracks",
                    probe::MAX_KEY_TRACKS
                ),
            };
            format!("wrote {} ({calls} calls){shared}", path.display())
        }
        Notice::Removing => "removing the probes...".into(),
        Notice::Removed => "the probes are removed".into(),
        Notice::Unresolved(n) => {
            format!("warning: {n} hits in processes whose mappings were not seen were not counted")
        }
        Notice::OtherProcesses { hits, processes } => format!(
            "note: {hits} events in {processes} other process(es) that mapped a probed file after the start were \
             read and not counted (those processes take the probes' traps too)"
        ),
        Notice::Lost(n) => format!("warning: {n} events were lost (the ring buffers overflowed)"),
        Notice::TraceLimited { skipped, rate } => format!(
            "warning: --trace did not print {skipped} calls (over --trace-rate {rate} lines per second); \
             without --trace-rate every call is printed"
        ),
        Notice::NotRemoved(e) => format!("warning: could not remove the probes: {e}"),
        Notice::NoSupervisor(e) => format!(
            "warning: cannot start the supervisor that removes the probes if rprof is killed ({e}); after a \
             SIGKILL they stay until the next rprof starts"
        ),
        Notice::Calibration(text) => format!("calibration: {text}"),
        Notice::KnownIssue(text) => format!("note: {text}"),
        Notice::Delivered { read, written } => match written {
            Some(w) => format!("{read} probe events read from the rings; the tracefs ring's counters: {w} written"),
            None => format!("{read} probe events read from the rings"),
        },
        Notice::CountedOnly {
            count,
            names,
            reason,
        } => format!(
            "{count} function(s) ({}{}) are counted, not timed: {reason}",
            names.join(", "),
            if *count > names.len() { ", ..." } else { "" }
        ),
    }
}

/// The header line: `probing 3 targets (6 probe points, 3 perf events), engine: perf, probe cost about 1.2us
/// per call, set up in 0.05s; Ctrl-C to end`.
fn started(s: &Started) -> String {
    let classes: Vec<String> = [("emul", s.costs.emulated), ("step", s.costs.stepped)]
        .into_iter()
        .filter_map(|(tag, c)| Some(format!("{} ({tag})", probe::human_ns(c?.cost_ns))))
        .collect();
    let cost = match (classes.is_empty(), s.counting) {
        (true, _) => String::new(),
        (false, true) => format!(", probe cost about {} per counted call", classes.join(", ")),
        (false, false) => format!(", probe cost about {} per call", classes.join(", ")),
    };
    let count = |n: usize, word: &str| match n {
        1 => format!("1 {word}"),
        n => format!("{n} {word}s"),
    };
    let points: Vec<String> = [
        (s.probe_points, "probe point"),
        (s.perf_events, "perf event"),
    ]
    .into_iter()
    .filter(|&(n, _)| n > 0)
    .map(|(n, word)| count(n, word))
    .collect();
    let points = match points.is_empty() {
        true => String::new(),
        false => format!(" ({})", points.join(", ")),
    };
    let verb = if s.counting { "counting" } else { "probing" };
    let values = if s.values.is_empty() {
        String::new()
    } else {
        format!("; values: {}", s.values.join("; "))
    };
    format!(
        "{verb} {}{points}, {}{cost}, set up in {:.2}s{values}; Ctrl-C to end",
        count(s.targets, "target"),
        s.engine,
        s.setup.as_secs_f64()
    )
}
