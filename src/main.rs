//! The rprof binary: parses the command line, runs the command, maps errors to messages and exit codes.
#![deny(unsafe_code)]
use std::process::ExitCode;

mod cli;

/// The launched workload's exit status when rprof succeeded (0 without one), 1 when rprof failed, 2 for a
/// usage error (clap's, and a tool's flags or name).
fn main() -> ExitCode {
    match cli::run() {
        Ok(status) => ExitCode::from(status),
        // The reader of stdout went away (`rprof report --folded | head -1`): a normal way for output to end.
        // Broken pipes elsewhere (a file, a FIFO) are errors like any other.
        Err(err) if cli::is_stdout_closed(&err) => ExitCode::SUCCESS,
        // A usage error of rprof's own (a tool's flags), as clap's are.
        Err(err) if cli::is_usage_error(&err) => {
            eprintln!("rprof: {}", one_line(&err));
            ExitCode::from(2)
        }
        Err(err) => {
            eprintln!("rprof: {}", one_line(&err));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line, each cause once: library errors already quote their source.
fn one_line(err: &anyhow::Error) -> String {
    let mut msg = err.to_string();
    for cause in err.chain().skip(1) {
        let cause = cause.to_string();
        if !msg.contains(&cause) {
            msg.push_str(": ");
            msg.push_str(&cause);
        }
    }
    msg.replace('\n', " ")
}
