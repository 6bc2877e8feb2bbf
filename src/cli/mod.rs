//! Command-line parsing (clap) and the mapping of arguments onto the library's plain config structs.
use clap::{Parser, Subcommand};

pub mod probe;
pub mod record;
pub mod report;

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
    /// Count and time functions exactly with uprobes/uretprobes, kprobes and tracepoints.
    Probe(probe::ProbeArgs),
}

/// Parse the command line and run the chosen command.
pub fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Record(a) => record::run(a),
        Command::Report(a) => report::run(a),
        Command::Probe(a) => probe::run(a),
    }
}
