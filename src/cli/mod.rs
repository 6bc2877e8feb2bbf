//! Command-line parsing (clap) and the mapping of arguments onto the library's plain config structs.
use clap::{Parser, Subcommand};

mod advice;
pub mod annotate;
pub mod bt;
mod debuginfod;
pub mod list;
mod man;
mod output;
mod parse;
mod perf_flags;
mod perf_table;
pub mod probe;
mod probe_list;
mod push;
pub mod record;
mod recording_info;
pub mod report;
mod report_events;
mod sched;
pub mod script;
mod target;
pub mod tool;
mod tool_memleak;
mod tool_multi;
mod tool_stacks;
mod top;
mod top_tui;
pub mod trace;

/// rprof: where a program spends its time. Sampled CPU stacks as flame graphs, and exact per-function counts and
/// durations through uprobes, kprobes and tracepoints.
#[derive(Parser, Debug)]
#[command(name = "rprof", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Sample CPU stacks of a command, a process or the whole system into a recording.
    Record(record::RecordArgs),
    /// Read a recording (rprof's or perf's) and print a table, folded stacks or a flame graph.
    Report(report::ReportArgs),
    /// Print every sample of a recording as text, in perf script's layout (for stackcollapse-perf.pl,
    /// inferno-collapse-perf and other readers of perf script's output).
    Script(script::ScriptArgs),
    /// Show which source lines and instructions of hot functions take their time (perf annotate's layout).
    Annotate(annotate::AnnotateArgs),
    /// Count and time functions exactly with uprobes/uretprobes, kprobes and tracepoints.
    Probe(probe::ProbeArgs),
    /// Every system call of a command or process with its return value and duration, as strace and perf trace
    /// show them (rprof probe's engines).
    Trace(trace::TraceArgs),
    /// Count events (software events, tracepoints, probe points) over a command, processes or the whole system,
    /// and print them as perf stat does.
    Stat(trace::StatArgs),
    /// List the events rprof can count and sample here (perf list), or a binary's probe points (-x).
    List(list::ListArgs),
    /// Scheduler latencies, as perf sched: `record` the sched tracepoints, then `latency` per task or
    /// `timehist` per context switch.
    Sched(sched::SchedArgs),
    /// Print the events of a recording (rprof's or perf's), one a line, as perf evlist does.
    Evlist(recording_info::EvlistArgs),
    /// Print the build-ids of the binaries a recording (rprof's or perf's) names, as perf buildid-list does.
    #[command(name = "buildid-list")]
    BuildidList(recording_info::BuildidListArgs),
    /// perf top's live view: the functions taking the CPU now (system-wide, -p, -C), refreshed every -d
    /// seconds, in a terminal UI or printed (--stdio).
    Top(top::TopArgs),
    /// Run one of bcc's classic tools (execsnoop, opensnoop, biolatency, tcpconnect...) as a probe recipe.
    Tool(tool::ToolArgs),
    /// Run a bpftrace program (bpftrace 0.17's language and flags) without BPF: probes through rprof's engines,
    /// maps in rprof, output and errors as bpftrace prints them.
    Bt(bt::BtArgs),
    /// Write the man pages (rprof.1, rprof-record.1, ...) into DIR, as docs/man/ keeps them.
    #[command(name = "generate-man", hide = true)]
    GenerateMan {
        /// The directory to write them in (created if missing).
        dir: std::path::PathBuf,
    },
}

pub use output::is_stdout_closed;
pub use tool::is_usage_error;

/// Parse the command line and run the chosen command. Returns rprof's exit status: the launched command's when
/// there was one, else 0.
pub fn run() -> anyhow::Result<u8> {
    // The probe session's supervisor (see rprof::probe::supervise): rprof itself, run by a probe session.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.len() == 4 && args[1] == rprof::probe::SUPERVISOR_ARG {
        rprof::probe::supervise(std::path::Path::new(&args[2]), &args[3].to_string_lossy())?;
        return Ok(0);
    }
    // The IFUNC helper (see rprof::symbols::ifunc): resolves a library's IFUNCs in a process of its own.
    if args
        .get(1)
        .is_some_and(|a| a == rprof::symbols::ifunc::HELPER_ARG)
    {
        print!("{}", rprof::symbols::ifunc::helper(&args[2..])?);
        return Ok(0);
    }
    if let Some(line) = trace::stat_d_without_number(&args) {
        eprintln!("{line}");
        return Ok(2);
    }
    // perf's flags that rprof does not define get rprof's answer before clap reads the rest.
    let (args, notes) = match perf_flags::rewrite(args) {
        Ok(rewritten) => rewritten,
        Err(perf_flags::Refusal(message)) => {
            eprintln!("{message}");
            return Ok(2);
        }
    };
    let cli = Cli::parse_from(args);
    for note in notes {
        eprintln!("{note}");
    }
    match cli.command {
        Command::Record(a) => record::run(a),
        Command::Report(a) => report::run(a),
        Command::Script(a) => script::run(a),
        Command::Annotate(a) => annotate::run(a),
        Command::Probe(a) => probe::run(a),
        Command::Trace(a) => trace::run_trace(a),
        Command::Stat(a) => trace::run_stat(a),
        Command::List(a) => list::run(a),
        Command::Sched(a) => sched::run(a),
        Command::Evlist(a) => recording_info::run_evlist(a),
        Command::BuildidList(a) => recording_info::run_buildid_list(a),
        Command::Top(a) => top::run(a),
        Command::Tool(a) => tool::run(a),
        Command::Bt(a) => bt::run(a),
        Command::GenerateMan { dir } => man::run(&dir),
    }
}

/// The command after `--`, its program found in PATH now, as the shell would (before the fork: see
/// [`rprof::perf::Command`]).
fn command(argv: &[std::ffi::OsString]) -> rprof::perf::Command {
    rprof::perf::Command::find(argv, std::env::var_os("PATH").as_deref())
}

/// rprof's exit status for a workload's: its exit code, or 128+N when signal N killed it (as the shell and
/// `perf record` report it); 0 when there was no workload or it was still running at the end.
fn exit_status(workload: Option<i32>) -> u8 {
    workload.map_or(0, |code| u8::try_from(code).unwrap_or(u8::MAX))
}

/// What this user may open for `command` ([`rprof::events::privilege::fallback`], the one decision of record,
/// stat, top and trace): `true` for user space only, after the line that says so; an error names the setting.
fn least_privilege(command: &str, needs: rprof::events::privilege::Needs) -> anyhow::Result<bool> {
    match rprof::events::privilege::fallback(command, needs).map_err(anyhow::Error::msg)? {
        Some(line) => {
            eprintln!("rprof {line}");
            Ok(true)
        }
        None => Ok(false),
    }
}
