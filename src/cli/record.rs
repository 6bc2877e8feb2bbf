//! `rprof record` arguments (perf record's spelling) and their mapping onto [`rprof::record::RecordConfig`].
use super::advice;
use super::parse;
use anyhow::Context;
use clap::{ArgGroup, Args};
use rprof::record::{self, CallGraph, EventSpec, RecordConfig, Target};
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// Sample CPU stacks of a command, processes, threads or the whole system.
#[derive(Args, Debug)]
#[command(
    args_override_self = true,
    group = ArgGroup::new("target").required(true).multiple(true).args(["pid", "tid", "all_cpus", "cpu", "cgroup", "command"]),
    override_usage = "rprof record [OPTIONS] <-p PID[,PID] | -t TID | -a | -C CPUS | -G CGROUP | [--] COMMAND [ARGS]...>\n       \
                      rprof record [OPTIONS] <-p PID[,PID] | -t TID | -a | -C CPUS | -G CGROUP> -- COMMAND [ARGS]...   \
                      (the target while COMMAND runs)",
    after_help = "Examples:\n  rprof record -F 99 -g -p 1234\n  rprof record -g -- ./prog args\n  \
                  rprof record -g -p 1234 -- sleep 3   (process 1234 for 3 seconds)\n  \
                  rprof record -a -g -d 5\n  rprof record -G system.slice/docker-ID.scope -g\n  \
                  rprof record --call-graph dwarf -- ./release-build\n\n\
                  If rprof is killed (SIGKILL, the OOM killer) the recording keeps everything but the last \
                  quarter second or so: records reach the file four times a second, and `rprof report` (or \
                  `perf report`) reads an unfinished file with a warning; it lacks build ids and the command \
                  line. SIGINT, SIGTERM and SIGHUP finish the file properly.\n\n\
                  Exit status: with -- COMMAND, the command's own (128+N when signal N killed it), as perf record \
                  does; otherwise 0. 1 when rprof itself fails, 2 for a usage error."
)]
pub struct RecordArgs {
    #[command(flatten)]
    pub rate: super::target::RateArgs,
    /// Refuse a frequency above the kernel's limit (kernel.perf_event_max_sample_rate) instead of sampling at
    /// the limit with a warning.
    #[arg(long = "strict-freq")]
    pub strict_freq: bool,
    /// Record call stacks by frame pointers (same as --call-graph fp).
    #[arg(short = 'g')]
    pub g: bool,
    /// Call stacks: fp, or dwarf[,STACK_SIZE] for programs without frame pointers (default size 16384, at most 65528).
    #[arg(long = "call-graph", value_name = "fp|dwarf[,SIZE]", value_parser = parse::call_graph)]
    pub call_graph: Option<CallGraph>,
    #[command(flatten)]
    pub target: super::target::TargetArgs,
    /// Sample the processes of this cgroup and its descendants, including ones started later (a container):
    /// a path relative to the cgroup2 mount, as perf's -G. Per CPU, like -a (or on the CPUs of -C).
    #[arg(short = 'G', long = "cgroup", value_name = "CGROUP",
          conflicts_with_all = ["pid", "tid"])]
    pub cgroup: Option<String>,
    /// The sampled event (repeat -e, or separate with commas, for several): cpu-clock (the default),
    /// task-clock, any software event (page-faults/faults, major-faults, context-switches/cs,
    /// cpu-migrations/migrations, ...), hardware and cache events where there is a PMU (cycles, ...), with
    /// perf's modifiers (:u, :k, :p), a tracepoint CATEGORY:EVENT (sched:sched_switch, globs allowed), a user
    /// function u:BINARY:FUNCTION (or probe:FUNCTION with -x BINARY) or a kernel function kprobe:FUNCTION,
    /// probed for the recording's lifetime. `rprof list` lists them. Every hit of a tracepoint or probe is a
    /// sample (period 1) unless -c or -F is given.
    #[arg(short = 'e', long = "event", value_name = "EVENT", value_delimiter = ',', value_parser = parse::record_event)]
    pub event: Vec<String>,
    /// A filter on the event of the -e before it, run in the kernel (perf's --filter; the language of
    /// `rprof probe`'s `if`): e.g. -e sched:sched_switch --filter 'prev_pid == 42'.
    #[arg(long = "filter", value_name = "EXPR")]
    pub filter: Vec<String>,
    /// Raw fields of the samples (PERF_SAMPLE_RAW) and their CPU, as perf's -R (tracepoints and probes have
    /// their fields anyway).
    #[arg(short = 'R', long = "raw-samples")]
    pub raw: bool,
    /// The binary whose functions -e probe:FUNCTION names.
    #[arg(short = 'x', long = "exec", value_name = "BINARY")]
    pub exec: Option<PathBuf>,
    /// The recording file (default rprof.data; with --push, none unless given).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Stop after this many seconds.
    #[arg(short = 'd', long = "duration", value_name = "SECONDS", value_parser = parse::seconds)]
    pub duration: Option<Duration>,
    /// Only user-mode samples and stacks.
    #[arg(
        long = "user-only",
        visible_alias = "all-user",
        conflicts_with = "kernel_only"
    )]
    pub user_only: bool,
    /// Only kernel-mode samples and stacks.
    #[arg(long = "kernel-only", visible_alias = "all-kernel")]
    pub kernel_only: bool,
    /// Ring buffer data pages per CPU (a power of two) [default: 128, as perf; with --call-graph dwarf, as many
    /// more as hold as many samples as perf's ring holds with its 8 KiB stack copies: 256 for dwarf,16384].
    #[arg(short = 'm', long = "mmap-pages", value_parser = parse::pages)]
    pub mmap_pages: Option<usize>,
    /// Root of separate debug files (for .debug_frame in DWARF mode).
    #[arg(long = "debug-dir", default_value = "/usr/lib/debug")]
    pub debug_dir: Vec<PathBuf>,
    /// Do not keep copies in the build-id cache ($PERF_BUILDID_DIR, else ~/.debug, in perf's layout): of
    /// /proc/kallsyms and the vDSO, which report and --push use to name kernel and vDSO frames, (when the
    /// recording ends) of the binaries its samples are in, which report and perf report use once a binary was
    /// rebuilt or deleted, and (--push) of compressed debug sections inflated, which later loads map instead of
    /// inflating them again.
    #[arg(short = 'N', long = "no-buildid-cache")]
    pub no_buildid_cache: bool,
    /// The bound on the bytes of rprof's copies in the build-id cache (K, M or G after the number): the ones
    /// recordings needed least recently are removed to make room; perf's copies are not counted and never
    /// removed.
    #[arg(long = "buildid-cache-size", value_name = "SIZE", default_value = "2G",
          env = "RPROF_BUILDID_CACHE_SIZE", value_parser = parse::bytes)]
    pub buildid_cache_size: u64,
    /// Leave the launched COMMAND running when rprof ends or dies (by default it gets SIGTERM when rprof ends
    /// first, and SIGKILL when rprof is killed).
    #[arg(long = "keep-workload", requires = "command")]
    pub keep_workload: bool,
    /// Also record where threads wait (off-CPU time): each blocked wait (sleep, lock, I/O) as time at the stack
    /// where the thread left the CPU; `rprof report` shows it beside the CPU time. Preempted time (runnable,
    /// waiting for a CPU) is counted in the summary, not as waiting.
    #[arg(long = "off-cpu")]
    pub off_cpu: bool,
    /// With --off-cpu: sample the stacks of switches at about this rate per thread instead of taking one at
    /// each switch (cheaper for programs that switch tens of thousands of times a second; waits between
    /// samples are charged to the thread's last sampled stack). Every wait is still timed.
    #[arg(long = "off-cpu-stack-hz", value_name = "HZ", requires = "off_cpu", value_parser = parse::above_zero)]
    pub off_cpu_stack_hz: Option<u64>,
    /// Print nothing but errors (no closing summary and verdict).
    #[arg(short = 'q', long = "quiet")]
    pub quiet: bool,
    /// The command to launch and sample (after `--`, or as the first argument that is not an option, as in perf). With -p, -t, -a, -C or -G it runs while that target is
    /// sampled and recording stops when it exits (`-a -- sleep 5`), as in perf.
    #[arg(last = true)]
    pub command: Vec<OsString>,
    #[command(flatten)]
    pub push: super::push::PushArgs,
}

/// Turn the arguments into a config. clap has checked each value and that one target was given.
pub fn config(a: &RecordArgs) -> RecordConfig {
    let target = if let Some(tasks) = a.target.tasks() {
        tasks
    } else if let Some(cg) = &a.cgroup {
        Target::Cgroup(cg.clone())
    } else if a.target.system() || a.command.is_empty() {
        Target::System
    } else {
        Target::Command(super::command(&a.command))
    };
    // A command beside another target only times the recording.
    let companion = match &target {
        Target::Command(_) => None,
        _ => (!a.command.is_empty()).then(|| super::command(&a.command)),
    };
    let call_graph = match (a.g, a.call_graph) {
        (_, Some(cg)) => cg,
        (true, None) => CallGraph::Fp,
        (false, None) => CallGraph::None,
    };
    let rate = a.rate.rate();
    RecordConfig {
        target,
        cpus: a.target.cpus(),
        rate,
        task_clock: a.event.iter().all(|e| e == "task-clock") && !a.event.is_empty(),
        call_graph,
        output: a
            .output
            .clone()
            .unwrap_or_else(|| PathBuf::from("rprof.data")),
        user_only: a.user_only,
        kernel_only: a.kernel_only,
        duration: a.duration,
        mmap_pages: a
            .mmap_pages
            .unwrap_or_else(|| record::default_mmap_pages(call_graph)),
        cmdline: std::env::args().collect(),
        debug_dirs: a.debug_dir.clone(),
        no_buildid_cache: a.no_buildid_cache,
        buildid_cache_size: a.buildid_cache_size,
        keep_workload: a.keep_workload,
        off_cpu: a.off_cpu,
        off_cpu_stack_hz: a.off_cpu_stack_hz,
        strict_freq: a.strict_freq,
        companion,
        events: event_specs(a, &std::env::args().collect::<Vec<_>>()),
        rate_given: a.rate.given(),
        raw: a.raw,
        binary: a.exec.clone(),
        write_file: (a.push.push.is_none() && a.push.push_otlp.is_none()) || a.output.is_some(),
        clock_monotonic: a.push.push.is_some(),
    }
}

/// The -e events with the --filter that follows each, as perf pairs them: from the command line `argv` as
/// written (clap keeps no order between two options); with no filter, or when the order cannot be read,
/// the events of clap with the filters given to the last one.
fn event_specs(a: &RecordArgs, argv: &[String]) -> Vec<EventSpec> {
    let specs = rprof::events::specs_from_args(argv.get(1..).unwrap_or_default());
    if specs.iter().map(|s| &s.name).eq(a.event.iter()) {
        return specs;
    }
    let mut specs: Vec<EventSpec> = a.event.iter().map(|e| EventSpec::new(e)).collect();
    if let (Some(f), Some(last)) = (a.filter.last(), specs.last_mut()) {
        last.filter = Some(f.clone());
    }
    specs
}

/// What this user may record: with kernel.perf_event_paranoid=2 and no CAP_PERFMON, its own processes' user
/// space only (perf's `:u` fallback), said in one line; at 3 and above nothing (the line names the sysctl);
/// system-wide targets need CAP_PERFMON or paranoid <= 0.
fn least_privilege(cfg: &mut RecordConfig) -> anyhow::Result<()> {
    let needs = rprof::events::privilege::Needs {
        system_wide: matches!(
            cfg.target,
            record::Target::System | record::Target::Cgroup(_)
        ),
        kernel: cfg.kernel_only.then_some("--kernel-only"),
    };
    // --all-user asks for what the fallback gives: no line then.
    if cfg.user_only {
        if let Err(line) = rprof::events::privilege::fallback("record", needs) {
            anyhow::bail!(line);
        }
        return Ok(());
    }
    cfg.user_only = super::least_privilege("record", needs)?;
    Ok(())
}

fn join(ids: &[i32]) -> String {
    ids.iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// The warning for a frequency lowered to the kernel's limit (perf gives the same one), as one line.
fn lowered_warning(l: &record::LoweredRate) -> String {
    format!(
        "rprof record: warning: {} {} Hz is above the kernel's limit kernel.perf_event_max_sample_rate = {} \
         Hz ({}): sampling at {} Hz. Raise the limit with `sysctl -w kernel.perf_event_max_sample_rate={}` (the \
         kernel lowers it again when sampling interrupts take too long), or use --strict-freq to refuse \
         instead\n",
        l.option,
        l.asked,
        l.max,
        record::MAX_SAMPLE_RATE_PATH,
        l.max,
        l.asked
    )
}

/// Record; returns the launched command's exit status (0 without one).
pub fn run(args: RecordArgs) -> anyhow::Result<u8> {
    if args.output.as_deref() == Some(std::path::Path::new("-")) {
        // A pipe-mode stream on stdout: everything else written there goes to stderr, as with perf.
        rprof::recording::claim_stdout()?;
    }
    let mut cfg = config(&args);
    least_privilege(&mut cfg)?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .context("cannot install the signal handler")?;
    }
    let quiet = args.quiet;
    let target = match &cfg.target {
        Target::Command(cmd) => format!("'{cmd}'"),
        Target::Pids(p) => format!("process {}", join(p)),
        Target::Tids(t) => format!("thread {}", join(t)),
        Target::System => "the whole system".to_string(),
        Target::Cgroup(name) => format!("cgroup '{name}'"),
    };
    let until = match &cfg.companion {
        Some(cmd) => format!(" while '{cmd}' runs"),
        None => String::new(),
    };
    let mut on_start = |started: &record::Started| {
        // Said even with -q: the recording is not what was asked for.
        for l in &started.lowered {
            eprint!("{}", lowered_warning(l));
        }
        if !quiet {
            // One write: the workload may already write to the same stderr (eprintln! writes each piece apart).
            let line = format!(
                "rprof record: sampling {target} with {} events{until}; Ctrl-C to stop\n",
                started.events
            );
            eprint!("{line}");
        }
    };
    let mut pusher = match super::push::config(&args.push, &cfg)? {
        Some(push) => Some(rprof::push::Pusher::start(push)?),
        None => None,
    };
    // Said even with -q: profiles on disk that this run will not send.
    for notice in pusher.iter().flat_map(|p| p.notices()) {
        eprintln!("rprof record: push: {notice}");
    }
    let tap = pusher.as_mut().and_then(|p| p.tap());
    let summary = record::record_with_tap(&cfg, &stop, &mut on_start, tap);
    let pushed = pusher.map(|p| p.finish()).transpose()?;
    let summary = summary?;
    if !args.quiet {
        eprintln!("{summary}");
        if let Some(p) = &pushed {
            eprintln!("{p}");
        }
        for line in advice::record_verdict(&summary) {
            eprintln!("rprof record: {line}");
        }
    }
    Ok(super::exit_status(summary.exit_code))
}
