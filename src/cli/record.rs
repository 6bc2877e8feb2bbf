//! `rprof record` arguments (perf record's spelling) and their mapping onto [`rprof::record::RecordConfig`].
use anyhow::{bail, Context};
use clap::Args;
use rprof::record::{self, CallGraph, Rate, RecordConfig, Target};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// Sample CPU stacks of a command, processes, threads or the whole system.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  rprof record -F 99 -g -p 1234\n  rprof record -g -- ./prog args\n  \
                        rprof record -a -g -d 5\n  rprof record --call-graph dwarf -- ./release-build"
)]
pub struct RecordArgs {
    /// Sampling frequency in Hz.
    #[arg(short = 'F', long = "freq", conflicts_with = "count")]
    pub freq: Option<u64>,
    /// Sample every PERIOD events (nanoseconds for cpu-clock/task-clock).
    #[arg(short = 'c', long = "count")]
    pub count: Option<u64>,
    /// Record call stacks by frame pointers (same as --call-graph fp).
    #[arg(short = 'g')]
    pub g: bool,
    /// Call stacks: fp, or dwarf[,STACK_SIZE] for programs without frame pointers (default size 16384).
    #[arg(long = "call-graph", value_name = "fp|dwarf[,SIZE]")]
    pub call_graph: Option<String>,
    /// Sample these processes (comma-separated), their threads now and later.
    #[arg(short = 'p', long = "pid", value_delimiter = ',')]
    pub pid: Vec<i32>,
    /// Sample only these threads (comma-separated).
    #[arg(short = 't', long = "tid", value_delimiter = ',')]
    pub tid: Vec<i32>,
    /// Sample the whole system.
    #[arg(short = 'a', long = "all-cpus")]
    pub all_cpus: bool,
    /// Only these CPUs, e.g. 0,1 or 0-3.
    #[arg(short = 'C', long = "cpu")]
    pub cpu: Option<String>,
    /// The sampling event: cpu-clock or task-clock.
    #[arg(short = 'e', long = "event", default_value = "cpu-clock")]
    pub event: String,
    /// The recording file.
    #[arg(short = 'o', long = "output", default_value = "rprof.data")]
    pub output: PathBuf,
    /// Stop after this many seconds.
    #[arg(short = 'd', long = "duration")]
    pub duration: Option<f64>,
    /// Only user-mode samples and stacks.
    #[arg(long = "user-only", conflicts_with = "kernel_only")]
    pub user_only: bool,
    /// Only kernel-mode samples and stacks.
    #[arg(long = "kernel-only")]
    pub kernel_only: bool,
    /// Ring buffer data pages per CPU (a power of two).
    #[arg(short = 'm', long = "mmap-pages", default_value_t = 128)]
    pub mmap_pages: usize,
    /// Root of separate debug files (for .debug_frame in DWARF mode).
    #[arg(long = "debug-dir", default_value = "/usr/lib/debug")]
    pub debug_dir: Vec<PathBuf>,
    /// Do not keep a copy of /proc/kallsyms in the build-id cache ($PERF_BUILDID_DIR, else ~/.debug), which
    /// report uses to name kernel frames.
    #[arg(short = 'N', long = "no-buildid-cache")]
    pub no_buildid_cache: bool,
    /// Print nothing but errors.
    #[arg(short = 'q', long = "quiet")]
    pub quiet: bool,
    /// The command to launch and sample.
    #[arg(last = true)]
    pub command: Vec<String>,
}

/// Turn the arguments into a config.
pub fn config(a: &RecordArgs) -> anyhow::Result<RecordConfig> {
    let targets = [!a.command.is_empty(), !a.pid.is_empty(), !a.tid.is_empty()]
        .iter()
        .filter(|x| **x)
        .count();
    if targets > 1 {
        bail!("give one target: -p PID, -t TID or -- COMMAND");
    }
    let target = if !a.command.is_empty() {
        Target::Command(a.command.clone())
    } else if !a.pid.is_empty() {
        Target::Pids(a.pid.clone())
    } else if !a.tid.is_empty() {
        Target::Tids(a.tid.clone())
    } else if a.all_cpus || a.cpu.is_some() {
        Target::System
    } else {
        bail!("nothing to record: give -p PID, -t TID, -a, or -- COMMAND");
    };
    let call_graph = match (a.g, a.call_graph.as_deref()) {
        (_, Some(cg)) => parse_call_graph(cg)?,
        (true, None) => CallGraph::Fp,
        (false, None) => CallGraph::None,
    };
    let task_clock = match a.event.as_str() {
        "cpu-clock" => false,
        "task-clock" => true,
        other => bail!(
            "unsupported event '{other}': rprof samples cpu-clock or task-clock (this machine has no hardware PMU \
             for cycles)"
        ),
    };
    let cpus = match &a.cpu {
        Some(list) => Some(
            rprof::perf::parse_cpu_list(list)
                .with_context(|| format!("bad CPU list '{list}': use a form like 0,1 or 0-3"))?,
        ),
        None => None,
    };
    if !a.mmap_pages.is_power_of_two() {
        bail!(
            "-m {}: the number of ring buffer pages must be a power of two",
            a.mmap_pages
        );
    }
    let rate = match (a.freq, a.count) {
        (_, Some(0)) | (Some(0), _) => bail!("the sampling frequency or period must be above 0"),
        (_, Some(p)) => Rate::Period(p),
        (Some(f), None) => Rate::Frequency(f),
        (None, None) => Rate::Frequency(4000),
    };
    let duration = match a.duration {
        Some(d) if d.is_finite() && d > 0.0 => Some(std::time::Duration::from_secs_f64(d)),
        Some(d) => bail!("-d {d}: the duration must be a positive number of seconds"),
        None => None,
    };
    Ok(RecordConfig {
        target,
        cpus,
        rate,
        task_clock,
        call_graph,
        output: a.output.clone(),
        user_only: a.user_only,
        kernel_only: a.kernel_only,
        duration,
        mmap_pages: a.mmap_pages,
        cmdline: std::env::args().collect(),
        debug_dirs: a.debug_dir.clone(),
        no_buildid_cache: a.no_buildid_cache,
    })
}

fn join(ids: &[i32]) -> String {
    ids.iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

fn parse_call_graph(s: &str) -> anyhow::Result<CallGraph> {
    let (mode, size) = match s.split_once(',') {
        Some((m, sz)) => (m, Some(sz)),
        None => (s, None),
    };
    match (mode, size) {
        ("fp", None) => Ok(CallGraph::Fp),
        ("dwarf", size) => {
            let stack_size = match size {
                Some(sz) => sz.parse::<u32>().with_context(|| {
                    format!("bad DWARF stack size '{sz}': give bytes, e.g. dwarf,16384")
                })?,
                None => 16384,
            };
            // The kernel caps the copy at 65528 bytes (a record is at most 64 KiB) and wants a multiple of 8.
            if !(8..=65528).contains(&stack_size) {
                bail!("DWARF stack size {stack_size} out of range: use 8..=65528 bytes");
            }
            Ok(CallGraph::Dwarf {
                stack_size: stack_size & !7,
            })
        }
        _ => bail!("unknown call graph mode '{s}': use fp or dwarf[,SIZE]"),
    }
}

pub fn run(args: RecordArgs) -> anyhow::Result<()> {
    let cfg = config(&args)?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .context("cannot install the signal handler")?;
    }
    let quiet = args.quiet;
    let target = match &cfg.target {
        Target::Command(argv) => format!("'{}'", argv.join(" ")),
        Target::Pids(p) => format!("process {}", join(p)),
        Target::Tids(t) => format!("thread {}", join(t)),
        Target::System => "the whole system".to_string(),
    };
    let mut on_start = |events: usize| {
        if !quiet {
            eprintln!("rprof record: sampling {target} with {events} events; Ctrl-C to stop");
        }
    };
    let summary = record::record(&cfg, &stop, &mut on_start)?;
    if !args.quiet {
        eprintln!("{summary}");
    }
    Ok(())
}
