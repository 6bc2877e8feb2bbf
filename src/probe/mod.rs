//! `rprof probe`: exact per-function counts and durations with uprobes/uretprobes, kprobes and tracepoints.
//!
//! Stages: [`pattern`] classifies and matches patterns; [`resolve`] turns them into [`resolve::Target`]s (one per
//! address); [`group`] creates the tracefs probes in the group `rprof_<pid>` and guarantees their removal;
//! [`engine`] chooses per probe event between the tracefs instance ring ([`ring`]) and per-task perf events
//! ([`events`]), or counters for `--count` ([`count`]); [`cost`] measures the probe's own cost per call;
//! [`session`] runs them in `perf`'s loop (shared with `rprof record`); [`live`] decodes perf samples and ring
//! events alike into the time-ordered merge and feeds the [`pairing`] shadow stacks, which fill [`stats`];
//! [`output`] prints tables, histograms, CSV and JSON; [`stacks`] counts the distinct stacks at entry (`-g`).
pub mod addrmap;
pub mod args;
pub mod calls;
pub mod cost;
pub mod count;
pub mod engine;
pub mod events;
pub mod fetch;
pub mod group;
pub mod listing;
pub mod live;
pub mod output;
pub mod pairing;
pub mod pattern;
pub mod resolve;
pub mod ring;
pub mod session;
pub mod stacks;
pub mod stats;
pub mod usdt;

pub use engine::EngineChoice;
pub use output::Format;
pub use pattern::Spec;
pub use resolve::{Target, TargetKind};

use crate::perf::PerfError;
use crate::symbols::{DebugSources, SymbolError};
use crate::tracefs::TracefsError;
use std::path::PathBuf;
use std::time::Duration;

/// Errors of `rprof probe`. Each is one line that names the thing and the fix.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("0 {what} matched '{pattern}' in {place}")]
    NoMatch {
        what: &'static str,
        pattern: String,
        place: String,
    },
    #[error(transparent)]
    Pattern(#[from] pattern::PatternError),
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
    #[error("library '{name}' not found (looked in the target's maps, `ldconfig -p`, LD_LIBRARY_PATH and /lib, /usr/lib); give its path with -x")]
    NoLibrary { name: String },
    #[error("no syscall tracepoints in tracefs events/syscalls (the kernel lacks CONFIG_FTRACE_SYSCALLS)")]
    NoSyscallTracepoints,
    #[error("tracefs is needed for these patterns but was not found")]
    NoTracefs,
    #[error("{path} is a Go binary: uretprobes crash Go programs (goroutine stacks move), so rprof cannot time its functions; use --count to count calls")]
    GoReturns { path: PathBuf },
    #[error("cannot write the report: {0}")]
    Output(#[from] std::io::Error),
    #[error("probe spec `{spec}`: {reason}")]
    Spec { spec: String, reason: String },
    #[error(transparent)]
    Usdt(#[from] usdt::UsdtError),
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
    Command(Vec<String>),
}

/// Everything `rprof probe` does, as plain data (the CLI maps its flags onto this).
#[derive(Clone, Debug)]
pub struct ProbeOptions {
    /// The patterns, in command-line order.
    pub patterns: Vec<String>,
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
    /// `--folded`: print those stacks folded for flame graphs.
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
    pub calls: calls::CallOptions,
    /// `--pair START,DONE`: time from one probe point to the other.
    pub pair: Option<(String, String)>,
    /// Values fetched from every target (those `--by` and `--hist VALUE` name).
    pub values: Vec<fetch::FetchItem>,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        ProbeOptions {
            patterns: Vec::new(),
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
            calls: calls::CallOptions {
                top: 10,
                trace_rate: 1000,
                ..calls::CallOptions::default()
            },
            pair: None,
            values: Vec::new(),
        }
    }
}

/// What a run ended with.
#[derive(Clone, Debug, Default)]
pub struct RunSummary {
    /// Exit code of the launched command, if any.
    pub exit_code: Option<i32>,
}

/// Run `rprof probe` and write its reports to `out` (warnings go to stderr).
pub fn run(opts: &ProbeOptions, out: &mut dyn std::io::Write) -> Result<RunSummary, ProbeError> {
    // Each pattern with the values it fetches (its own, then those of --by and --hist).
    let mut specs: Vec<(String, Spec, Vec<fetch::FetchItem>)> = Vec::new();
    for p in &opts.patterns {
        let split = fetch::split_spec(p)?;
        let spec = pattern::parse_spec(split.pattern, opts.binary.is_some())?;
        let mut items = split.items;
        items.extend(opts.values.iter().cloned());
        specs.push((p.clone(), spec, items));
    }
    if specs.is_empty() && opts.pair.is_none() {
        return Err(pattern::PatternError::Bad {
            pattern: String::new(),
            reason: "give at least one pattern, e.g. `rprof probe -x ./bin 'func_*'`".into(),
        }
        .into());
    }
    let needs_tracefs = !opts.list
        || specs
            .iter()
            .any(|(_, s, _)| !matches!(s, Spec::User { .. } | Spec::Usdt { .. }));
    let tracefs = if needs_tracefs {
        Some(crate::tracefs::Tracefs::find_or_mount()?)
    } else {
        None
    };
    let pid = match &opts.target {
        TaskTarget::Pid(p) => Some(*p as u32),
        _ => None,
    };
    let ropts = resolve::ResolveOptions {
        binary: opts.binary.clone(),
        pid,
        regex: opts.regex,
        debug: opts.debug.clone(),
    };
    let mut targets: Vec<Target> = Vec::new();
    let mut add = |found: Vec<Target>| {
        for t in found {
            if !targets.iter().any(|o| o.kind == t.kind) {
                targets.push(t);
            }
        }
    };
    for (text, spec, items) in &specs {
        let mut found = resolve::resolve(std::slice::from_ref(spec), &ropts, tracefs.as_ref())
            .map_err(|e| match e {
                ProbeError::Usdt(e) => ProbeError::Spec {
                    spec: text.clone(),
                    reason: e.to_string(),
                },
                e => e,
            })?;
        for t in &mut found {
            t.fetches = args::resolve_fetches(t, items, text, &opts.debug)?;
        }
        add(found);
    }
    if let Some((start, done)) = &opts.pair {
        let mut pair = resolve::resolve_pair(start, done, &ropts)?;
        let text = format!("--pair {start},{done}");
        let mut items = fetch::split_spec(start)?.items;
        items.extend(opts.values.iter().cloned());
        pair.fetches = args::resolve_fetches(&pair, &items, &text, &opts.debug)?;
        add(vec![pair]);
    }
    if opts.count_only
        && targets
            .iter()
            .any(|t| t.fetches.iter().any(|f| f.on_return))
    {
        return Err(ProbeError::Spec {
            spec: "ret".into(),
            reason: "return values need return probes: drop --count".into(),
        });
    }
    if !opts.count_only {
        let mut seen: Vec<&PathBuf> = Vec::new();
        for t in &targets {
            if let TargetKind::User { path, .. } = &t.kind {
                if !seen.contains(&path) {
                    seen.push(path);
                    if resolve::is_go_binary(path)? {
                        return Err(ProbeError::GoReturns { path: path.clone() });
                    }
                }
            }
        }
    }
    if opts.list {
        write_list(out, &targets)?;
        return Ok(RunSummary::default());
    }
    let tracefs = tracefs.ok_or(ProbeError::NoTracefs)?;
    session::run(opts, &tracefs, &targets, out)
}

/// `-l`: one line per target: name, where, aliases.
pub fn write_list(out: &mut dyn std::io::Write, targets: &[Target]) -> std::io::Result<()> {
    for t in targets {
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
