//! bcc's runqslower as a bpftrace program (`programs/runqslower.bt`) that `rprof bt` runs: this module reads
//! bcc's flags and fills the program's filters in.
use super::ToolError;

const PROGRAM: &str = include_str!("programs/runqslower.bt");

/// runqslower's flags, bcc's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunqslowerArgs {
    /// Waits longer than this are printed (0: every wait).
    pub min_us: u64,
    /// `-p PID`: the process's threads (the caller lists them: the tracepoints name threads).
    pub pid: Option<u32>,
    /// `-t TID`.
    pub tid: Option<u32>,
    /// `-P`: the task switched out as well.
    pub previous: bool,
}

pub const USAGE: &str = "\
  [min_us]        waits longer than this many microseconds (10000; 0: every wait)
  -p PID          this process's threads only (those it has when tracing starts)
  -t TID          this thread only
  -P              also the task that was switched out (PREV COMM, PREV TID)";

impl RunqslowerArgs {
    /// bcc's arguments: `[min_us]`, `-p PID`, `-t TID`, `-P`.
    pub fn parse(words: &[String]) -> Result<RunqslowerArgs, ToolError> {
        let bad = |reason: String| ToolError::Flag {
            tool: "runqslower".into(),
            reason,
        };
        let number = |flag: &str, v: Option<&String>| -> Result<u64, ToolError> {
            v.and_then(|v| v.parse().ok())
                .ok_or_else(|| bad(format!("{flag} takes a number")))
        };
        let mut a = RunqslowerArgs {
            min_us: 10_000,
            pid: None,
            tid: None,
            previous: false,
        };
        let mut min = None;
        let mut it = words.iter();
        while let Some(w) = it.next() {
            match w.as_str() {
                "-p" | "--pid" => a.pid = Some(number("-p", it.next())? as u32),
                "-t" | "--tid" => a.tid = Some(number("-t", it.next())? as u32),
                "-P" | "--previous" => a.previous = true,
                f if f.starts_with('-') => {
                    return Err(bad(format!("unknown or unsupported flag '{f}'")))
                }
                _ if min.is_none() => min = Some(number("min_us", Some(w))?),
                _ => return Err(bad(format!("one min_us only, not '{w}'"))),
            }
        }
        if a.pid.is_some() && a.tid.is_some() {
            return Err(bad("-p and -t exclude each other".into()));
        }
        a.min_us = min.unwrap_or(a.min_us);
        Ok(a)
    }

    /// The program, with the filters on `threads` (the thread of `-t`, or the threads of `-p`'s process;
    /// empty: every thread).
    pub fn program(&self, threads: &[u32]) -> String {
        let any = |field: &str| {
            let terms: Vec<String> = threads
                .iter()
                .map(|t| format!("args->{field} == {t}"))
                .collect();
            match terms.is_empty() {
                true => String::new(),
                false => format!(" && ({})", terms.join(" || ")),
            }
        };
        let (line, cols, line_d, args) = match self.previous {
            true => (
                " %-16s %-6s",
                ", \"PREV COMM\", \"PREV TID\"",
                " %-16s %-6d",
                ", args->prev_comm, args->prev_pid",
            ),
            false => ("", "", "", ""),
        };
        PROGRAM
            .replace("__WAKE_FILTER__", &any("pid"))
            .replace("__PREV_FILTER__", &any("prev_pid"))
            .replace("__PREV_LINE_D__", line_d)
            .replace("__PREV_LINE__", line)
            .replace("__PREV_COLS__", cols)
            .replace("__PREV_ARGS__", args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check the flags and the filters they put in the program.
    #[test]
    fn flags_and_program() {
        let w = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        let a = RunqslowerArgs::parse(&w("1000")).unwrap();
        assert_eq!((a.min_us, a.pid, a.tid), (1000, None, None));
        assert_eq!(RunqslowerArgs::parse(&w("")).unwrap().min_us, 10_000);
        assert!(RunqslowerArgs::parse(&w("-p 1 -t 2")).is_err());
        let p = a.program(&[]);
        assert!(p.contains("/args->pid != 0/"));
        assert!(!p.contains("__"));
        let a = RunqslowerArgs::parse(&w("-P -p 5 0")).unwrap();
        let p = a.program(&[5, 6]);
        assert!(p.contains("/args->pid != 0 && (args->pid == 5 || args->pid == 6)/"));
        assert!(p.contains("\"PREV COMM\", \"PREV TID\""));
        assert!(p.contains("args->prev_comm, args->prev_pid);"));
    }
}
