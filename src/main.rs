//! The rprof binary: parses the command line, runs the command, maps errors to messages and exit codes.
use std::process::ExitCode;

mod cli;

fn main() -> ExitCode {
    match cli::run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // A closed pipe (`rprof report --folded | head`) is a normal way for output to end.
            if err.chain().any(|e| {
                e.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                return ExitCode::SUCCESS;
            }
            eprintln!("rprof: {err:#}");
            ExitCode::FAILURE
        }
    }
}
