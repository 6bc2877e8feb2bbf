//! The rprof binary: parses the command line, runs the command, maps errors to messages and exit codes.
#![deny(unsafe_code)]
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
