//! `rprof trace` and `rprof stat`, perf's commands of those names as faces of `rprof probe`: each turns its
//! arguments into the `rprof probe` command line that does the same, and runs it (the same engines, the same
//! value formatting with errno and flag names, the same reports).
use super::probe::{self, ProbeArgs};
use clap::{Args, Parser};
use rprof::record::Target;
use rprof::stat::{Aggr, StatConfig, StatTarget};
use std::ffi::OsString;

/// Every system call of a command or process as it returns: name, return value (with its errno name) and
/// duration, as strace and perf trace show them (`rprof probe 'syscall:*(ret)' --trace`).
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  rprof trace -- ls /tmp\n  rprof trace -e openat,read -p 1234\n  \
                  rprof trace -e 'open*,sched:sched_process_exit' -- ./prog   (syscalls and tracepoints)\n  \
                  rprof trace -e '!futex,epoll_*' -p 1234   (every syscall but those)\n  \
                  rprof trace -s -- make          (a table per syscall: count, total, mean, ...)\n  \
                  rprof trace --no-syscalls --event 'sched:*' -- ./prog\n\n\
                  The same as `rprof probe 'syscall:GLOB(ret)' --trace`: see rprof probe --help for its other \
                  options (-d, --min-duration, --by, -g)."
)]
pub struct TraceArgs {
    /// What to show, as perf trace -e (comma-separated or repeated): syscall names or globs (openat,read or
    /// 'open*'), perf's strace groups (file, string), tracepoints CATEGORY:EVENT (globs allowed). A list of
    /// tracepoints only shows no syscalls; a `!` before the list shows every syscall but those named
    /// ('!futex,epoll_*').
    #[arg(
        short = 'e',
        long = "expr",
        value_delimiter = ',',
        value_name = "SYSCALLS,EVENTS"
    )]
    pub expr: Vec<String>,
    /// Also trace these tracepoints (CATEGORY:EVENT, comma-separated or repeated, globs allowed, e.g. 'net:*'),
    /// each hit a line, besides the syscalls.
    #[arg(long = "event", value_name = "CAT:EVENT")]
    pub event: Vec<String>,
    /// No syscalls: only the tracepoints of -e and --event.
    #[arg(long = "no-syscalls")]
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

/// Count events as perf stat counts them: software events, tracepoints and probe points over a command,
/// processes or the whole system.
#[derive(Args, Debug)]
#[command(
    mut_arg("pid", |a| a.help("Count in these processes (comma-separated); with -- COMMAND, the command bounds \
                                the count")),
    mut_arg("tid", |a| a.help("Count in these threads only (comma-separated); with -- COMMAND, the command \
                                bounds the count")),
    mut_arg("all_cpus", |a| a.help("Count on every CPU (system-wide)")),
    mut_arg("cpu", |a| a.help("Count on these CPUs only (system-wide on them), e.g. 0 or 0-1")),
    after_help = "Examples:\n  rprof stat -- ./prog                 (perf's default rows: task-clock, \
                  context-switches, ...)\n  \
                  rprof stat -e cs,faults,migrations -- ./prog\n  \
                  rprof stat -e 'syscalls:sys_enter_*' -- ./prog\n  \
                  rprof stat -I 1000 -a -- sleep 5      (every second, system-wide)\n  \
                  rprof stat -p 1234 -- sleep 3\n  rprof stat -r 5 -x, -- ./prog\n  \
                  rprof stat -e sched:sched_switch -a -G system.slice/docker-ID.scope\n\n\
                  The counts go to standard error, as perf stat's. Without -e: perf's default set; hardware \
                  events print <not supported> where the machine has no PMU. As an unprivileged user with \
                  kernel.perf_event_paranoid=2, only user space is counted (said in one line)."
)]
pub struct StatArgs {
    /// The events (comma-separated or repeated): software events (task-clock, cs, faults, migrations,
    /// ...), hardware events (cycles, ... where there is a PMU), with perf's modifiers (:u, :k), tracepoints
    /// CATEGORY:EVENT (globs allowed), probe points u:BINARY:FUNCTION. Default: perf stat's set.
    #[arg(short = 'e', long = "event", value_delimiter = ',', value_name = "EVENTS",
          value_parser = super::parse::event)]
    pub events: Vec<String>,
    /// A filter on the tracepoint of the -e before it, run in the kernel (perf's --filter).
    #[arg(long = "filter", value_name = "EXPR")]
    pub filter: Vec<String>,
    #[command(flatten)]
    pub target: super::target::TargetArgs,
    /// Count in the processes of this cgroup only (a path relative to the cgroup2 mount, as perf's -G):
    /// tracepoints, through `rprof probe --count`.
    #[arg(short = 'G', long = "cgroup", value_name = "CGROUP")]
    pub cgroup: Option<String>,
    /// Stop after this many seconds.
    #[arg(short = 'd', long = "duration", value_name = "SECONDS")]
    pub duration: Option<String>,
    /// Print the counts of every interval of MSEC milliseconds (perf's -I).
    #[arg(short = 'I', long = "interval-print", value_name = "MSEC",
          value_parser = super::parse::above_zero)]
    pub interval: Option<u64>,
    /// Run the command N times and print the means with their noise (+- x%).
    #[arg(short = 'r', long = "repeat", value_name = "N", default_value_t = 1)]
    pub repeat: u32,
    /// CSV output with this separator (perf's -x).
    #[arg(short = 'x', long = "field-separator", value_name = "SEP")]
    pub csv: Option<String>,
    /// A row per CPU (with -a or -C).
    #[arg(short = 'A', long = "no-aggr")]
    pub no_aggr: bool,
    /// A row per physical core (with -a or -C).
    #[arg(long = "per-core", conflicts_with = "no_aggr")]
    pub per_core: bool,
    /// A row per thread (with -p).
    #[arg(long = "per-thread", conflicts_with_all = ["no_aggr", "per_core"])]
    pub per_thread: bool,
    /// Add perf's detailed rows to the default set (L1-dcache-loads, L1-dcache-load-misses, LLC-loads,
    /// LLC-load-misses; perf's -d, which is rprof's duration).
    #[arg(long = "detailed")]
    pub detailed: bool,
    /// Count user space only (perf's --all-user; :u on every event).
    #[arg(long = "all-user")]
    pub all_user: bool,
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
    Ok(AsProbe::try_parse_from(probe_argv(words, command))?.probe)
}

/// `rprof probe WORDS -- COMMAND` as argv.
fn probe_argv(words: Vec<String>, command: Vec<OsString>) -> Vec<OsString> {
    let mut argv: Vec<OsString> = vec!["probe".into()];
    argv.extend(words.into_iter().map(OsString::from));
    if !command.is_empty() {
        argv.push("--".into());
        argv.extend(command);
    }
    argv
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

/// `rprof trace`: returns the command's exit status.
pub fn run_trace(a: TraceArgs) -> anyhow::Result<u8> {
    let needs = rprof::events::privilege::Needs {
        system_wide: a.pid.is_none() && a.command.is_empty(),
        kernel: Some("tracing syscalls and tracepoints (they happen in the kernel)"),
    };
    super::least_privilege("trace", needs)?;
    // The event layer plans the syscalls and tracepoints; probe shows each call (-s: the traced calls make
    // perf trace -s's summary).
    let plan = rprof::events::plan_trace(&rprof::events::TraceRequest {
        expr: a.expr.clone(),
        event: a
            .event
            .iter()
            .flat_map(|e| rprof::events::split_list(e))
            .collect(),
        no_syscalls: a.no_syscalls,
    })?;
    let mut words = vec!["--trace".to_string()];
    words.extend(target_words(a.pid, a.seconds));
    let min_ns = a.min_ms.map(|ms| (ms * 1e6) as u64);
    let summary = a.summary;
    let args = planned_probe_args(words, a.command)?;
    // `plan` lives until the session has ended (the probe points it made, if any, with it).
    let planned = plan.events.clone();
    probe::run_with(args, |o| {
        o.planned = planned;
        o.calls.style = rprof::probe::TraceStyle::PerfTrace;
        o.calls.perf_summary = summary;
        // perf trace -s counts every call; --duration chooses the lines.
        o.calls.min_duration = min_ns.filter(|_| !summary);
    })
}

/// The probe arguments of `words` where the event plan gives the events: `--trace` stands for the patterns
/// probe's own command line requires.
fn planned_probe_args(words: Vec<String>, command: Vec<OsString>) -> anyhow::Result<ProbeArgs> {
    use clap::{CommandFactory, FromArgMatches};
    // In place (`mut_arg` would move the positional after the command's).
    let matches = AsProbe::command()
        .mut_args(|a| match a.get_id() == "patterns" {
            true => a.required_unless_present("trace"),
            false => a,
        })
        .try_get_matches_from(probe_argv(words, command))?;
    Ok(AsProbe::from_arg_matches(&matches)?.probe)
}

/// `rprof stat`: returns the command's exit status.
pub fn run_stat(a: StatArgs) -> anyhow::Result<u8> {
    if let Some(cgroup) = a.cgroup.clone() {
        return run_stat_cgroup(a, cgroup);
    }
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut events = rprof::events::specs_from_args(&argv);
    if !events.iter().map(|s| &s.name).eq(a.events.iter()) {
        events = a
            .events
            .iter()
            .map(|e| rprof::events::EventSpec::new(e))
            .collect();
    }
    let command = (!a.command.is_empty()).then(|| super::command(&a.command));
    let target = match (a.target.tasks(), a.target.system(), &command) {
        (Some(Target::Tids(tids)), _, _) => StatTarget::Tids(tids),
        (Some(Target::Pids(pids)), _, _) => StatTarget::Pids(pids),
        (_, true, _) => StatTarget::Cpus {
            cpus: match a.target.cpus() {
                Some(c) => c,
                None => rprof::perf::online_cpus()?,
            },
            list: a.target.cpu.as_ref().map(|_| cpu_list_text(&argv)),
        },
        (_, false, Some(cmd)) => StatTarget::Command(cmd.clone()),
        (_, false, None) => StatTarget::Cpus {
            cpus: rprof::perf::online_cpus()?,
            list: None,
        },
    };
    let needs = rprof::events::privilege::Needs {
        system_wide: matches!(target, StatTarget::Cpus { .. }),
        kernel: None,
    };
    let user_only = a.all_user || super::least_privilege("stat", needs)?;
    let cfg = StatConfig {
        events,
        companion: command.filter(|_| !matches!(target, StatTarget::Command(_))),
        target,
        interval: a.interval.map(std::time::Duration::from_millis),
        repeat: a.repeat,
        aggr: match (a.no_aggr, a.per_core, a.per_thread) {
            (true, _, _) => Aggr::PerCpu,
            (_, true, _) => Aggr::PerCore,
            (_, _, true) => Aggr::PerThread,
            _ => Aggr::Global,
        },
        csv: a.csv,
        duration: a
            .duration
            .as_deref()
            .map(super::parse::seconds)
            .transpose()
            .map_err(anyhow::Error::msg)?,
        user_only,
        detailed: a.detailed,
    };
    let code = rprof::stat::stat(&cfg, &mut std::io::stderr())?;
    Ok(code.map_or(0, |c| c.clamp(0, 255) as u8))
}

/// `rprof stat -d` without a number of seconds (perf's `-d`, detailed): the one line that says what -d is here.
pub fn stat_d_without_number(args: &[OsString]) -> Option<String> {
    if args.get(1).is_none_or(|a| a != "stat") {
        return None;
    }
    let words: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let before: Vec<&String> = words.iter().skip(2).take_while(|w| *w != "--").collect();
    let at = before
        .iter()
        .position(|w| *w == "-d" || *w == "--duration")?;
    let number = before.get(at + 1).is_some_and(|n| n.parse::<f64>().is_ok());
    (!number).then(|| {
        "rprof stat: -d is rprof's duration and takes a number of seconds (-d 5); perf's -d (detailed rows) \
         is --detailed here"
            .to_string()
    })
}

/// The -C list as written, for perf's title `'CPU(s) 0-1'`.
fn cpu_list_text(argv: &[String]) -> String {
    let mut words = argv.iter();
    while let Some(w) = words.next() {
        match w.as_str() {
            "-C" | "--cpu" => return words.next().cloned().unwrap_or_default(),
            w if w.starts_with("--cpu=") => return w["--cpu=".len()..].to_string(),
            w if w.starts_with("-C") && w.len() > 2 => return w[2..].to_string(),
            _ => {}
        }
    }
    String::new()
}

/// `rprof stat -G CGROUP`: the cgroup's tracepoint counts through `rprof probe --count`.
fn run_stat_cgroup(a: StatArgs, cgroup: String) -> anyhow::Result<u8> {
    if a.target.tasks().is_some() || !a.command.is_empty() {
        anyhow::bail!(
            "rprof stat -G counts the cgroup's tasks on every CPU (perf's system-wide mode): drop -p or -t and the \
             command, and start the programs in the cgroup"
        );
    }
    let mut words: Vec<String> = vec!["--count".into()];
    for e in &a.events {
        words.push(match e.split(':').count() {
            2 => format!("t:{e}"),
            _ => e.clone(),
        });
    }
    words.extend(target_words(None, a.duration));
    probe::run_with(probe_args(words, a.command)?, |o| o.cgroup = Some(cgroup))
}
