//! `rprof sched`: perf sched's `record`, `latency` and `timehist`, from the sched tracepoints.
use super::output::Stdout;
use super::record::{self, RecordArgs};
use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

/// Scheduler latencies, as perf sched: record the sched tracepoints, then per task its delays (`latency`) or
/// per context switch its wait, delay and run times (`timehist`).
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  rprof sched record -- ./prog\n  rprof sched latency\n  \
                        rprof sched timehist -i perf.data   (perf sched record's recordings too)"
)]
pub struct SchedArgs {
    #[command(subcommand)]
    pub command: SchedCommand,
}

#[derive(Subcommand, Debug)]
pub enum SchedCommand {
    /// Record the sched tracepoints on every CPU (sched_switch, sched_stat_runtime, sched_waking,
    /// sched_wakeup_new, sched_process_fork, sched_migrate_task) while the command runs, or for -d SECONDS.
    Record(SchedRecordArgs),
    /// Per task: its run time, how many times it was switched in after waiting, and its average and maximum
    /// scheduling delay (wakeup or preemption to running), as perf sched latency prints them.
    Latency(SchedReadArgs),
    /// Per context switch, for the task that leaves the CPU: how long it waited before it ran, its
    /// scheduling delay and its run time, as perf sched timehist prints them.
    Timehist(SchedReadArgs),
}

#[derive(Args, Debug)]
pub struct SchedRecordArgs {
    /// The recording to write.
    #[arg(short = 'o', long = "output", default_value = "rprof.data")]
    pub output: PathBuf,
    /// Stop after this many seconds.
    #[arg(short = 'd', long = "duration", value_name = "SECONDS")]
    pub duration: Option<String>,
    /// The command to run; recording stops when it exits.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

#[derive(Args, Debug)]
pub struct SchedReadArgs {
    /// The recording to read (rprof sched record's or perf sched record's).
    #[arg(short = 'i', long = "input", default_value = "rprof.data")]
    pub input: PathBuf,
    /// latency: a row per task, not per command (perf sched latency -p).
    #[arg(short = 'p', long = "pids")]
    pub pids: bool,
}

/// The tracepoints perf sched record records that this analysis reads, and the ones it names tasks by.
pub const SCHED_EVENTS: [&str; 6] = [
    "sched:sched_switch",
    "sched:sched_stat_runtime",
    "sched:sched_waking",
    "sched:sched_wakeup_new",
    "sched:sched_process_fork",
    "sched:sched_migrate_task",
];

/// `rprof record` with these words.
#[derive(Parser, Debug)]
#[command(name = "rprof record")]
struct AsRecord {
    #[command(flatten)]
    record: RecordArgs,
}

pub fn run(a: SchedArgs) -> anyhow::Result<u8> {
    match a.command {
        SchedCommand::Record(r) => {
            let mut argv: Vec<OsString> = vec!["record".into(), "-a".into(), "-o".into()];
            argv.push(r.output.into_os_string());
            for e in SCHED_EVENTS {
                argv.extend(["-e".into(), e.into()]);
            }
            if let Some(d) = r.duration {
                argv.extend(["-d".into(), d.into()]);
            }
            if !r.command.is_empty() {
                argv.push("--".into());
                argv.extend(r.command);
            }
            record::run(AsRecord::try_parse_from(argv)?.record)
        }
        SchedCommand::Latency(r) => {
            let rows = rprof::report::sched::latency(&r.input, r.pids)
                .with_context(|| format!("cannot read {}", r.input.display()))?;
            let mut out = std::io::BufWriter::new(Stdout::lock());
            rprof::report::sched::write_latency(&rows, &mut out)?;
            out.flush()?;
            Ok(0)
        }
        SchedCommand::Timehist(r) => {
            let mut out = std::io::BufWriter::new(Stdout::lock());
            rprof::report::sched::write_timehist(&r.input, &mut out)
                .with_context(|| format!("cannot read {}", r.input.display()))?;
            out.flush()?;
            Ok(0)
        }
    }
}
