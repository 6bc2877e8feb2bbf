//! `rprof trace` and `rprof stat`, perf's commands of those names as faces of `rprof probe`: each turns its
//! arguments into the `rprof probe` command line that does the same, and runs it (the same engines, the same
//! value formatting with errno and flag names, the same reports).
use super::probe::{self, ProbeArgs};
use clap::{Args, Parser};
use std::ffi::OsString;

/// Every system call of a command or process as it returns: name, return value (with its errno name) and
/// duration, as strace and perf trace show them (`rprof probe 'syscall:*(ret)' --trace`).
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  rprof trace -- ls /tmp\n  rprof trace -e openat,read -p 1234\n  \
                  rprof trace -s -- make          (a table per syscall: count, total, mean, ...)\n  \
                  rprof trace --no-syscalls --event 'sched:*' -- ./prog\n\n\
                  The same as `rprof probe 'syscall:GLOB(ret)' --trace`: see rprof probe --help for its other \
                  options (-d, --min-duration, --by, -g)."
)]
pub struct TraceArgs {
    /// Only these syscalls (comma-separated names or globs, e.g. openat,read or 'open*').
    #[arg(
        short = 'e',
        long = "expr",
        value_delimiter = ',',
        value_name = "SYSCALLS"
    )]
    pub syscalls: Vec<String>,
    /// Also trace these tracepoints (CATEGORY:EVENT, globs allowed, e.g. 'net:*'), each hit a line.
    #[arg(long = "event", value_name = "CAT:EVENT")]
    pub event: Vec<String>,
    /// No syscalls: only the tracepoints of --event.
    #[arg(long = "no-syscalls", requires = "event")]
    pub no_syscalls: bool,
    /// A summary table per syscall (count, total, mean, ... as perf trace -s) instead of a line per call.
    #[arg(short = 's', long = "summary")]
    pub summary: bool,
    /// Trace this process (and its threads) instead of a command.
    #[arg(short = 'p', long = "pid", conflicts_with = "command")]
    pub pid: Option<i32>,
    /// Stop after this many seconds (`--duration` is perf trace's filter).
    #[arg(short = 'd', long = "seconds", value_name = "SECONDS")]
    pub seconds: Option<String>,
    /// Show only the calls that took longer than this many milliseconds (perf trace's --duration; 0.5 is
    /// 500 us); calls that never returned (exit_group) are left out too.
    #[arg(long = "duration", visible_alias = "min-duration", value_name = "MSEC",
          value_parser = super::parse::msec)]
    pub min_ms: Option<f64>,
    /// The command to run and trace.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// Count events (tracepoints, syscalls, probe points) over a command, processes or the whole system, as perf
/// stat counts them (`rprof probe --count`).
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  rprof stat -e 'syscalls:sys_enter_*' -- ./prog\n  \
                  rprof stat -e sched:sched_switch,sched:sched_wakeup -a -d 5\n  \
                  rprof stat -e 'syscalls:*' -G system.slice/docker-ID.scope -a\n\n\
                  The same as `rprof probe --count t:CATEGORY:EVENT...`."
)]
pub struct StatArgs {
    /// The events: tracepoints CATEGORY:EVENT (globs allowed), comma-separated or repeated.
    #[arg(
        short = 'e',
        long = "event",
        value_delimiter = ',',
        required = true,
        value_name = "EVENTS"
    )]
    pub events: Vec<String>,
    /// Count in every process (the default without -p or a command).
    #[arg(short = 'a', long = "all-cpus")]
    pub all_cpus: bool,
    /// Count in this process.
    #[arg(short = 'p', long = "pid", conflicts_with = "command")]
    pub pid: Option<i32>,
    /// Count in the processes of this cgroup only (a path relative to the cgroup2 mount, as perf's -G).
    #[arg(short = 'G', long = "cgroup", value_name = "CGROUP")]
    pub cgroup: Option<String>,
    /// Stop after this many seconds.
    #[arg(short = 'd', long = "duration", value_name = "SECONDS")]
    pub duration: Option<String>,
    /// The command to run; counting stops when it exits.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// `rprof probe` with these words.
#[derive(Parser, Debug)]
#[command(name = "rprof probe")]
struct AsProbe {
    #[command(flatten)]
    probe: ProbeArgs,
}

/// The probe arguments of `words` (after `probe`), then the command after `--`.
fn probe_args(words: Vec<String>, command: Vec<OsString>) -> anyhow::Result<ProbeArgs> {
    let mut argv: Vec<OsString> = vec!["probe".into()];
    argv.extend(words.into_iter().map(OsString::from));
    if !command.is_empty() {
        argv.push("--".into());
        argv.extend(command);
    }
    Ok(AsProbe::try_parse_from(argv)?.probe)
}

/// `-p` and `-d` as probe takes them.
fn target_words(pid: Option<i32>, duration: Option<String>) -> Vec<String> {
    let mut words = Vec::new();
    if let Some(pid) = pid {
        words.extend(["-p".to_string(), pid.to_string()]);
    }
    if let Some(d) = duration {
        words.extend(["-d".to_string(), d]);
    }
    words
}

/// The `rprof probe` words of `rprof trace`.
fn trace_words(a: &TraceArgs) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    if !a.no_syscalls {
        match a.syscalls.is_empty() {
            true => words.push("syscall:*(ret)".into()),
            false => words.extend(a.syscalls.iter().map(|s| format!("syscall:{s}(ret)"))),
        }
    }
    words.extend(a.event.iter().map(|e| format!("t:{e}")));
    // -s: the traced calls make perf trace -s's summary.
    words.push("--trace".into());
    words
}

/// `rprof trace`: returns the command's exit status.
pub fn run_trace(a: TraceArgs) -> anyhow::Result<u8> {
    let mut words = trace_words(&a);
    words.extend(target_words(a.pid, a.seconds));
    let min_ns = a.min_ms.map(|ms| (ms * 1e6) as u64);
    let summary = a.summary;
    probe::run_with(probe_args(words, a.command)?, |o| {
        o.calls.style = rprof::probe::TraceStyle::PerfTrace;
        o.calls.perf_summary = summary;
        // perf trace -s counts every call; --duration chooses the lines.
        o.calls.min_duration = min_ns.filter(|_| !summary);
    })
}

/// `rprof stat`: returns the command's exit status.
pub fn run_stat(a: StatArgs) -> anyhow::Result<u8> {
    if a.cgroup.is_some() && (a.pid.is_some() || !a.command.is_empty()) {
        anyhow::bail!(
            "rprof stat -G counts the cgroup's tasks on every CPU (perf's system-wide mode): drop -p and the \
             command, and start the programs in the cgroup"
        );
    }
    if a.all_cpus && !a.command.is_empty() {
        anyhow::bail!(
            "rprof stat -a -- COMMAND: counting the whole system while a command runs is not built yet; count \
             the command (drop -a) or the whole system for a time (-a -d SECONDS)"
        );
    }
    let mut words: Vec<String> = vec!["--count".into()];
    for e in &a.events {
        words.push(match e.split(':').count() {
            2 => format!("t:{e}"),
            _ => e.clone(),
        });
    }
    words.extend(target_words(a.pid, a.duration));
    let cgroup = a.cgroup;
    probe::run_with(probe_args(words, a.command)?, |o| o.cgroup = cgroup)
}
