//! `rprof probe` arguments and their mapping onto [`rprof::probe::ProbeOptions`].
use super::debuginfod::DebuginfodArgs;
use super::output::Stdout;
use super::parse;
use clap::Args;
use rprof::probe::{self, Format, ProbeOptions, TaskTarget};
use std::path::PathBuf;
use std::time::Duration;

/// Count and time functions exactly with uprobes/uretprobes, kprobes and tracepoints.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  rprof probe -x ./app 'func_*' -- ./app\n  rprof probe c:malloc -p 1234 -d 10\n  \
                  rprof probe 'syscall:write' -- ./app\n  rprof probe 't:sched:sched_switch' -d 5\n\n\
                  Exit status: with -- COMMAND, the command's own (128+N when signal N killed it); otherwise 0. 1 \
                  when rprof itself fails, 2 for a usage error."
)]
pub struct ProbeArgs {
    /// Patterns: functions in -x BINARY (globs on mangled and demangled names), `LIB:PATTERN` (e.g. c:malloc),
    /// `syscall:GLOB`, `t:CATEGORY:EVENT`, or, without -x, kernel functions.
    /// A pattern may name values to fetch: `'parse_*(arg0, arg1:str)'`, `'read_block ret'`, `'f(len, name:str)'`
    /// (parameter names from DWARF), `usdt:PROVIDER:NAME` (USDT probes of -x BINARY or `lib:`), whose arguments are
    /// arg0.. .
    #[arg(required_unless_present = "pair", value_name = "PATTERN")]
    pub patterns: Vec<String>,
    /// The binary or shared library whose functions the patterns name.
    #[arg(short = 'x', long = "exe", value_name = "BINARY")]
    pub binary: Option<PathBuf>,
    /// Patterns are regular expressions (searched anywhere in the name; anchor with ^...$).
    #[arg(short = 'r', long)]
    pub regex: bool,
    /// Print what would be probed, and probe nothing.
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
    /// Split each function's row by a value: argN, ret, a parameter name (`NAME:str` for strings), or caller
    /// (argdist's -C). The top --top values are shown, the rest summed as `[other]`.
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
    /// Lines per second of the run --trace prints at most; the rest is counted ("... N more calls").
    #[arg(long, value_name = "N", default_value = "1000", requires = "trace")]
    pub trace_rate: u64,
    /// List only calls that take at least this long (5ms, 500us, 2s; a bare number is ms), each with its
    /// values and, with -g, its stack at entry (funcslower).
    #[arg(long, value_name = "DURATION", value_parser = parse::duration_ns, conflicts_with = "count")]
    pub min_duration: Option<u64>,
    /// Time from one probe to another on the same thread (`--pair START,DONE`, e.g. two USDT probes); their
    /// values are START's arguments.
    #[arg(long, value_name = "START,DONE", value_parser = parse::pair, conflicts_with = "count")]
    pub pair: Option<(String, String)>,
    /// Print CSV: function,count,total_us,self_us,avg_us,min_us,max_us.
    #[arg(long, conflicts_with = "json")]
    pub csv: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Also count the distinct user and kernel stacks at entry.
    #[arg(short = 'g', long)]
    pub stacks: bool,
    /// With -g, print the stacks folded for flame graphs.
    #[arg(long, requires = "stacks")]
    pub folded: bool,
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
    /// A directory searched for separate debug files (repeatable; default /usr/lib/debug).
    #[arg(long = "debug-dir", value_name = "DIR")]
    pub debug_dirs: Vec<PathBuf>,
    #[command(flatten)]
    pub debuginfod: DebuginfodArgs,
    /// Leave the launched COMMAND running when rprof ends or dies (by default it gets SIGTERM when rprof ends
    /// first, and SIGKILL when rprof is killed).
    #[arg(long = "keep-workload", requires = "command")]
    pub keep_workload: bool,
    /// The command to launch and follow, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

impl ProbeArgs {
    /// The library's options for these arguments.
    pub fn options(self) -> ProbeOptions {
        let target = match (self.pid, self.command.is_empty()) {
            (Some(pid), _) => TaskTarget::Pid(pid),
            (None, false) => TaskTarget::Command(self.command),
            (None, true) => TaskTarget::SystemWide,
        };
        let format = if self.csv {
            Format::Csv
        } else if self.json {
            Format::Json
        } else if self.hist.as_deref() == Some("") {
            Format::Hist
        } else {
            Format::Table
        };
        let mut opts = ProbeOptions {
            patterns: self.patterns,
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
            folded: self.folded,
            mmap_pages: self.mmap_pages,
            engine: self.engine,
            ring_read: self.ring_read,
            keep_workload: self.keep_workload,
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
            if let Ok(item) = probe::fetch::FetchItem::parse(v) {
                opts.values.push(item);
            }
        }
        let label = |v: Option<String>| v.map(|v| v.split(':').next().unwrap_or("").to_string());
        opts.calls.by = label(by);
        opts.calls.hist_of = label(hist_of);
        opts.calls.top = self.top;
        opts.calls.trace = self.trace;
        opts.calls.trace_rate = self.trace_rate;
        opts.calls.min_duration = self.min_duration;
        opts.pair = self.pair;
        opts
    }
}

/// Probe; returns the launched command's exit status (0 without one).
pub fn run(args: ProbeArgs) -> anyhow::Result<u8> {
    let debuginfod = args.debuginfod.clone();
    let mut opts = args.options();
    let (debug, _downloads) = debuginfod.sources(std::mem::take(&mut opts.debug.dirs), "probe")?;
    opts.debug = debug;
    let summary = probe::run(&opts, &mut Stdout::lock())?;
    Ok(super::exit_status(summary.exit_code))
}
