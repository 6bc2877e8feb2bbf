//! Standard output whose closing can be told apart from other broken pipes: `rprof report --folded | head -1`
//! ends normally, while a broken pipe anywhere else (a file, a FIFO) stays an error.
use std::io::{self, Write};

/// The reader of rprof's standard output went away (EPIPE on stdout).
#[derive(Debug)]
pub struct StdoutClosed;

impl std::fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("standard output was closed by its reader")
    }
}

impl std::error::Error for StdoutClosed {}

/// Locked standard output. A broken pipe on it comes back as an `io::Error` of kind `BrokenPipe` that carries
/// [`StdoutClosed`].
pub struct Stdout(io::StdoutLock<'static>);

impl Stdout {
    pub fn lock() -> Stdout {
        Stdout(io::stdout().lock())
    }
}

fn mark(err: io::Error) -> io::Error {
    if err.kind() == io::ErrorKind::BrokenPipe {
        io::Error::new(io::ErrorKind::BrokenPipe, StdoutClosed)
    } else {
        err
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf).map_err(mark)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush().map_err(mark)
    }
}

/// Whether `err` is (or was caused by) the closing of standard output.
pub fn is_stdout_closed(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.is::<StdoutClosed>()
            || e.downcast_ref::<io::Error>()
                .and_then(|io| io.get_ref())
                .is_some_and(|inner| inner.is::<StdoutClosed>())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_stdout_pipes_are_marked() {
        let ours = anyhow::Error::from(mark(io::Error::from(io::ErrorKind::BrokenPipe)))
            .context("cannot write the report");
        assert!(is_stdout_closed(&ours));
        let other = anyhow::Error::from(io::Error::from(io::ErrorKind::BrokenPipe))
            .context("cannot write out.svg");
        assert!(!is_stdout_closed(&other));
        let full = anyhow::Error::from(mark(io::Error::from_raw_os_error(libc::ENOSPC)));
        assert!(!is_stdout_closed(&full));
    }
}
