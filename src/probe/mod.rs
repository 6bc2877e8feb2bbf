//! `rprof probe`: exact per-function counts and durations with uprobes/uretprobes, kprobes and tracepoints.
//!
//! The pipeline, one folder or file a stage: [`spec`] turns patterns into the session's [`target::Targets`]
//! (one per address or event, each named by a [`target::TargetId`]); [`plan`] decides, in one pure function,
//! the probes, the events and which engine reads each; [`engine`] carries the plan out (the tracefs group and
//! its removal, perf events, the tracefs instance ring, counters, decoding, the probe's cost); [`session`] runs
//! the engines in `perf`'s loop (shared with `rprof record`); [`analysis`] pairs entries and returns into calls
//! and keeps statistics, per-call work and stacks; [`output`] writes the reports. The library prints nothing:
//! it writes reports to the writer it is given, and tells the caller the rest through [`Notice`]s.
mod analysis;
mod engine;
mod listing;
mod observe;
mod output;
pub mod plan;
mod session;
mod spec;
pub mod target;
mod value;

pub use crate::events::group;
pub use crate::events::supervisor::{supervise, Supervisor, ARG as SUPERVISOR_ARG};
/// A command a session launches (`TaskTarget::Command`, `ProbeOptions::launch`).
pub use crate::perf::Command;
pub use analysis::{CallOptions, FoldedStacks, TraceStyle, MAX_STACKS};
pub use engine::cost::{ClassCost, Costs};
pub use engine::sharing::Sharing;
pub use listing::{groups_now, probeable_functions, ProbeGroupNow};
pub use observe::{AddrNames, HitRole, ObservedFrame, ObservedHit, Observer};
pub use output::trace_events::MAX_KEY_TRACKS;
pub use output::{human_ns, write_list, Format, TraceFormat};
pub use spec::fetch::FetchItem;
pub use spec::filters::kernel_filter;
pub use spec::library::find_library;
pub use spec::pattern::Spec;
pub use spec::register::AT_RETURN as REGISTER_AT_RETURN;
pub use spec::resolve::{resolve_kernel, resolve_syscalls, resolve_tracepoints, resolve_user};
pub use spec::usdt;
pub use target::{Keep, PairEnd, PairSpec, Target, TargetId, TargetKind, Targets};
pub use value::Value;

use crate::perf::PerfError;
use crate::symbols::{DebugSources, SymbolError};
use crate::tracefs::TracefsError;
use std::path::PathBuf;
use std::time::Duration;

/// The engine asked for (`--engine`, or the environment variable `RPROF_PROBE_ENGINE`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EngineChoice {
    /// Per event: the tracefs ring when only the targets map the probed file, else perf; counters for
    /// `--count`.
    #[default]
    Auto,
    /// Every event through perf.
    Perf,
    /// Every event through the tracefs ring (with a warning when other processes map a probed file).
    Tracefs,
}

impl std::str::FromStr for EngineChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(EngineChoice::Auto),
            "perf" => Ok(EngineChoice::Perf),
            "tracefs" | "ring" => Ok(EngineChoice::Tracefs),
            _ => Err(format!("unknown engine '{s}': use auto, perf or tracefs")),
        }
    }
}

/// What the calibration at start reports besides the cost (`RPROF_DEBUG_COST`, read by the CLI).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DebugCost {
    #[default]
    Off,
    /// Each measurement's bare and probed ns per call, and its mean duration (trimmed).
    On,
}

/// Errors of `rprof probe`. Each is one line that names the thing and the fix.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("0 {what} matched '{pattern}' in {place}")]
    NoMatch {
        what: &'static str,
        pattern: String,
        place: String,
    },
    #[error("0 functions matched in {path}: it exports {names}; probe an implementation by name (`-l '*strlen*'` lists them)")]
    IfuncUnresolved { names: String, path: PathBuf },
    #[error(transparent)]
    Pattern(#[from] spec::pattern::PatternError),
    #[error(transparent)]
    Symbols(#[from] SymbolError),
    #[error(transparent)]
    Tracefs(#[from] TracefsError),
    #[error(transparent)]
    Perf(#[from] PerfError),
    #[error("cannot open {path}: {error}")]
    Binary {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("pattern '{pattern}' names user functions but no binary was given; add -x BINARY or use LIB:{pattern}")]
    NoBinary { pattern: String },
    #[error("library '{name}' not found (looked in the target's maps, `ldconfig -p`, LD_LIBRARY_PATH and /lib, /usr/lib); give its path with -x{}", bpftrace_hint(name))]
    NoLibrary { name: String },
    #[error("no syscall tracepoints in tracefs events/syscalls (the kernel lacks CONFIG_FTRACE_SYSCALLS)")]
    NoSyscallTracepoints,
    #[error("tracefs is needed for these patterns but was not found")]
    NoTracefs,
    #[error("cannot write the report: {0}")]
    Output(#[from] std::io::Error),
    #[error("probe spec `{spec}`: {reason}")]
    Spec { spec: String, reason: String },
    #[error("cannot write the trace-event file {path}: {error}")]
    TraceOut {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error(transparent)]
    Usdt(#[from] spec::usdt::UsdtError),
    #[error(transparent)]
    Process(#[from] crate::process::ProcessError),
}

/// What a `LIB:` that is a bpftrace probe type's short name meant, for [`ProbeError::NoLibrary`].
fn bpftrace_hint(lib: &str) -> &'static str {
    match lib {
        "k" | "kr" => " (a kernel function is kprobe:FUNCTION, or the bare name)",
        "u" | "ur" => " (a function of a binary is uprobe:PATH:FUNCTION, or -x PATH FUNCTION)",
        "p" => " (a profile probe is profile:hz:N or p:hz:N, with its rate)",
        "s" => " (a software event is software:EVENT, or s:EVENT:COUNT with its count)",
        _ => "",
    }
}

/// Which tasks to probe.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum TaskTarget {
    /// Every process on the machine.
    #[default]
    SystemWide,
    /// One process, all its threads and those created later.
    Pid(i32),
    /// Launch this command and follow it.
    Command(crate::perf::Command),
}

/// Everything `rprof probe` does, as plain data (the CLI maps its flags onto this).
#[derive(Clone, Debug)]
pub struct ProbeOptions {
    /// The patterns, in command-line order.
    pub patterns: Vec<String>,
    /// tracefs events the event layer planned (`rprof trace --event`: [`crate::events::plan::plan`] parsed and
    /// resolved them), each probed as a tracepoint after the patterns' targets; perf-type events are not taken.
    pub planned: Vec<crate::events::PlannedEvent>,
    /// `-x`: the binary or library whose functions bare patterns name.
    pub binary: Option<PathBuf>,
    /// `-r`: patterns are regular expressions.
    pub regex: bool,
    /// `-l`: print what would be probed and stop.
    pub list: bool,
    pub target: TaskTarget,
    /// `-d`: stop after this long.
    pub duration: Option<Duration>,
    /// `-i`: print a report (and reset the counts) this often.
    pub interval: Option<Duration>,
    /// `-T`: print a timestamp with each report.
    pub timestamps: bool,
    /// `--count`: entries only, no return probes.
    pub count_only: bool,
    pub format: Format,
    /// `-g`: count the distinct stacks at entry.
    pub stacks: bool,
    /// `--folded` (and `--flamegraph`): those stacks come back folded, in [`RunSummary::folded`], instead of
    /// being written after the report (which then goes where the caller wants it, apart from the stacks).
    pub folded: bool,
    /// Data pages per CPU ring buffer (perf's and the tracefs instance's).
    pub mmap_pages: usize,
    /// Which engine reads the probe events.
    pub engine: EngineChoice,
    /// Read the tracefs ring with read(2) even where the kernel can map it.
    pub ring_read: bool,
    /// Where separate debug files are looked for.
    pub debug: DebugSources,
    /// Leave the launched command running when rprof ends or dies.
    pub keep_workload: bool,
    /// Per-call work: `--by`, `--hist VALUE`, `--trace`, `--min-duration`.
    pub calls: CallOptions,
    /// `--pair START,DONE [--key ...]`: time from one probe point to the other.
    pub pair: Option<PairOptions>,
    /// `--trace-out FILE`: every call as a slice in a Chrome trace-event file.
    pub trace_out: Option<PathBuf>,
    /// Values fetched from every target (those `--by` and `--hist VALUE` name).
    pub values: Vec<FetchItem>,
    /// Use the kernel's uprobe PMU where the plan wants it (off: the path of kernels before 4.17, for tests).
    pub uprobe_pmu: bool,
    /// Report the calibration's measurements.
    pub debug_cost: DebugCost,
    /// `--at-entry`: probe functions at their first instruction, even where the kernel single-steps it.
    pub at_entry: bool,
    /// `--net`: durations minus the probe's bias (never below 0), and minus probed callees' whole cost.
    pub net: bool,
    /// `rprof stat -G`: count only in the tasks of this cgroup (a path relative to the cgroup2 mount), on
    /// every CPU. Counting (`--count` on counters) system-wide only.
    pub cgroup: Option<String>,
    /// Every hit is read from a ring (never counters alone): an [`Observer`] sees each one.
    pub each_hit: bool,
    /// A command launched beside a session of other tasks (bpftrace's `-c` with system-wide probes): the
    /// session ends when it exits. (`TaskTarget::Command` probes the command's own tasks.)
    pub launch: Option<crate::perf::Command>,
    /// With `TaskTarget::Pid`: the session goes on when the process ends (rprof bt's `pid == N`: bpftrace's
    /// probes stay, matching nothing, until Ctrl-C or `exit()`).
    pub outlive_target: bool,
    /// The observer names addresses of the hits' processes besides their stacks (`usym()` in `rprof bt`): their
    /// mappings are read from /proc on their first hit.
    pub names_addresses: bool,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        ProbeOptions {
            patterns: Vec::new(),
            planned: Vec::new(),
            binary: None,
            regex: false,
            list: false,
            target: TaskTarget::SystemWide,
            duration: None,
            interval: None,
            timestamps: false,
            count_only: false,
            format: Format::Table,
            stacks: false,
            folded: false,
            mmap_pages: 1024,
            engine: EngineChoice::Auto,
            ring_read: false,
            debug: DebugSources::default(),
            keep_workload: false,
            calls: CallOptions {
                top: 10,
                ..CallOptions::default()
            },
            pair: None,
            trace_out: None,
            values: Vec::new(),
            uprobe_pmu: true,
            debug_cost: DebugCost::Off,
            at_entry: false,
            net: false,
            cgroup: None,
            each_hit: false,
            launch: None,
            outlive_target: false,
            names_addresses: false,
        }
    }
}

/// `--pair START,DONE`, and with `--key` how its open STARTs are matched and bounded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PairOptions {
    /// The STARTs (`A | B if EXPR`: any of them opens a call), each `SPEC [if EXPR]`.
    pub starts: Vec<String>,
    pub done: String,
    /// `--key`: for each part of the key, START's value (the first of these names that each START has) and
    /// DONE's; empty: DONE closes the innermost open START of its thread.
    pub key: Vec<(Vec<String>, String)>,
    /// `--keep`: a START of a key already open replaces it (latest) or is dropped (first).
    pub keep: Keep,
    /// Open STARTs kept at most (keyed); a START beyond it drops the oldest, counted.
    pub max_open: usize,
    /// Open STARTs older than this are dropped, counted (keyed).
    pub max_age: Duration,
}

impl PairOptions {
    /// The default bounds: 10,000 open STARTs, 10 s.
    pub fn new(start: &str, done: &str) -> PairOptions {
        PairOptions {
            starts: vec![start.to_string()],
            done: done.to_string(),
            key: Vec::new(),
            keep: Keep::Latest,
            max_open: 10_000,
            max_age: Duration::from_secs(10),
        }
    }

    /// As written: `--pair START | START,DONE --key A|B=C`.
    pub fn text(&self) -> String {
        let mut text = format!("--pair {},{}", self.starts.join(" | "), self.done);
        if !self.key.is_empty() {
            let parts: Vec<String> = self
                .key
                .iter()
                .map(|(s, d)| match s.as_slice() {
                    [one] if one == d => d.clone(),
                    _ => format!("{}={d}", s.join("|")),
                })
                .collect();
            text += &format!(" --key {}", parts.join(","));
        }
        text
    }
}

/// What a run ended with.
#[derive(Clone, Debug, Default)]
pub struct RunSummary {
    /// Exit code of the launched command, if any.
    pub exit_code: Option<i32>,
    /// With `-g` and [`ProbeOptions::folded`]: the stacks at entry, folded, for the caller to write.
    pub folded: Option<FoldedStacks>,
}

/// What a session tells its caller besides the reports, as it happens (the CLI prints these on stderr).
#[derive(Clone, Debug, PartialEq)]
pub enum Notice {
    /// Probe groups and instances of rprof processes that are gone were removed at start.
    StaleRemoved(Vec<String>),
    /// The tracefs ring cannot be used (why); perf events read every event.
    RingUnavailable(String),
    /// `--engine tracefs` on a file other processes map: each of their calls to a probed function traps too.
    SharedFileForced { path: PathBuf, others: usize },
    /// The kernel refused probes: their targets (the first few names) are skipped.
    Refused {
        count: usize,
        names: Vec<String>,
        reason: String,
    },
    /// Probing started.
    Started(Started),
    /// `--trace-out`: the file was written with this many calls; `overflowed` keyed calls went on shared
    /// tracks (keys past the cap).
    TraceWritten {
        path: PathBuf,
        calls: u64,
        overflowed: u64,
    },
    /// The report is written and the probes are being removed (which can take a while: the kernel waits for
    /// RCU grace periods); [`Notice::Removed`] follows.
    Removing,
    /// The probes are removed.
    Removed,
    /// Hits in processes whose mappings were not seen, not counted.
    Unresolved(u64),
    /// Ring hits of processes outside the target (which mapped a probed file after the start), dropped.
    OtherProcesses { hits: u64, processes: usize },
    /// Events lost (said here for CSV and JSON, whose reports have no line for it).
    Lost(u64),
    /// `--trace` left out this many calls, over `--trace-rate` (lines per second).
    TraceLimited { skipped: u64, rate: u64 },
    /// The probes or the instance could not be removed.
    NotRemoved(String),
    /// The supervisor that removes the probes if rprof is killed could not be started (why): a SIGKILL then
    /// leaves them until the next rprof starts.
    NoSupervisor(String),
    /// A measurement of the calibration (`RPROF_DEBUG_COST`).
    Calibration(String),
    /// The probe events that reached rprof (`RPROF_DEBUG_COST`): read from the rings (`read`), and, for the
    /// tracefs ring, what its own counters say the kernel wrote into it after the calibration (`written`).
    Delivered { read: u64, written: Option<u64> },
    /// A probe placed with a known report against it (what was measured of it).
    KnownIssue(String),
    /// Functions of a Go binary that are counted, not timed (the first few names), and why.
    CountedOnly {
        count: usize,
        names: Vec<String>,
        reason: String,
    },
}

/// What the header line says when probing starts.
#[derive(Clone, Debug, PartialEq)]
pub struct Started {
    /// Targets probed (or counted).
    pub targets: usize,
    /// Tracefs probes and uprobe PMU probes.
    pub probe_points: usize,
    pub perf_events: usize,
    /// `engine: tracefs ring (mapped)`, `engine: perf`, `engine: counters (uprobe PMU)`...
    pub engine: String,
    /// Counters: entries counted only.
    pub counting: bool,
    /// The probe's own cost per call, per class of probed instruction, measured at start.
    pub costs: Costs,
    /// How the user strings of syscalls and tracepoints are read (`syscall:openat filename: read at ...`).
    pub values: Vec<String>,
    pub setup: Duration,
}

/// Run `rprof probe`: write its reports to `out`, and tell `notice` the rest.
pub fn run(
    opts: &ProbeOptions,
    out: &mut dyn std::io::Write,
    notice: &mut dyn FnMut(Notice),
) -> Result<RunSummary, ProbeError> {
    run_with(opts, out, notice, None)
}

/// Run a session as [`run`] does, and hand `observer` every hit that passes the filters, in time order (with
/// [`ProbeOptions::each_hit`], so that no target is only counted).
pub fn run_observed(
    opts: &ProbeOptions,
    out: &mut dyn std::io::Write,
    notice: &mut dyn FnMut(Notice),
    observer: &mut dyn Observer,
) -> Result<RunSummary, ProbeError> {
    run_with(opts, out, notice, Some(observer))
}

fn run_with(
    opts: &ProbeOptions,
    out: &mut dyn std::io::Write,
    notice: &mut dyn FnMut(Notice),
    observer: Option<&mut dyn Observer>,
) -> Result<RunSummary, ProbeError> {
    let specs = spec::parse(opts)?;
    let tracefs = if !opts.list || spec::needs_tracefs(opts, &specs) {
        Some(crate::tracefs::Tracefs::find_or_mount()?)
    } else {
        None
    };
    let targets = spec::targets(opts, &specs, tracefs.as_ref())?;
    if opts.list {
        let emulates = plan::running_kernel_emulates();
        let placements = targets
            .iter()
            .map(|(_, t)| plan::place(t, opts.at_entry, emulates))
            .collect();
        write_list(out, &targets, &placements)?;
        return Ok(RunSummary::default());
    }
    let tracefs = tracefs.ok_or(ProbeError::NoTracefs)?;
    session::run(opts, &tracefs, &targets, out, notice, observer)
}
