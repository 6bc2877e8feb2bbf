//! What a recording session produced, as `rprof record` prints it at the end.
use super::{OffCpuStats, PythonStats};
use crate::unwind::dwarf::DwarfStats;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// What a recording session produced.
#[derive(Clone, Debug, Default)]
pub struct RecordSummary {
    pub samples: u64,
    /// Every event of the recorded events was recorded, none sampled (tracepoints without -c or -F, or at
    /// -c 1): the shares have no sampling error.
    pub every_event: bool,
    /// Records the kernel could not write because the buffer was full (PERF_RECORD_LOST).
    pub lost: u64,
    /// Samples dropped inside the kernel (PERF_RECORD_LOST_SAMPLES).
    pub lost_samples: u64,
    /// Times the kernel throttled sampling (PERF_RECORD_THROTTLE).
    pub throttled: u64,
    pub output: PathBuf,
    pub bytes: u64,
    /// The launched command's exit code, when there was one.
    pub exit_code: Option<i32>,
    /// DWARF mode: how the unwinds ended.
    pub dwarf: Option<DwarfStats>,
    /// `--off-cpu`: the waits seen.
    pub off_cpu: Option<OffCpuStats>,
    /// `-G`: the processes of the cgroup that were met.
    pub cgroup: Option<CgroupSummary>,
    /// Host pid -> pid in its own pid namespace, for the recorded processes where they differ.
    pub ns_pids: BTreeMap<u32, u32>,
    /// Where the recording that was at the output before is now (`rprof.data.old`).
    pub previous: Option<PathBuf>,
    /// The samples of Python processes, when there were any.
    pub python: Option<PythonStats>,
}

/// The processes of a `-G` cgroup that a recording met.
#[derive(Clone, Debug, Default)]
pub struct CgroupSummary {
    /// The cgroup as given.
    pub name: String,
    /// Processes in it (or its descendants) when sampling started, or met in its records later.
    pub processes: usize,
    /// How many of them were described from /proc at their first sample (moved in while running).
    pub late: u64,
}

/// How many namespace pids the summary lists.
const NS_PIDS_SHOWN: usize = 8;

impl std::fmt::Display for RecordSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let wrote = match self.output.as_os_str().is_empty() {
            true => "no recording file (pushed only)".to_string(),
            false => format!(
                "wrote {} ({})",
                self.output.display(),
                human_size(self.bytes)
            ),
        };
        write!(
            f,
            "rprof record: {} samples, {} lost events, {} lost samples, throttled {} times; {wrote}",
            self.samples, self.lost, self.lost_samples, self.throttled,
        )?;
        if let Some(old) = &self.previous {
            write!(f, "; the previous recording is now {}", old.display())?;
        }
        if let Some(o) = &self.off_cpu {
            write!(
                f,
                "\nrprof record: off-CPU: {} blocked waits, {:.3} s, in {} samples; {} preempted waits ({:.3} s, \
                 runnable: not counted as waiting)",
                o.blocked,
                o.blocked_ns as f64 / 1e9,
                o.samples,
                o.preempted,
                o.preempted_ns as f64 / 1e9
            )?;
            if o.estimated > 0 {
                write!(
                    f,
                    "; {} waits charged to the thread's last sampled stack (--off-cpu-stack-hz)",
                    o.estimated
                )?;
            }
            if o.unattributed > 0 {
                write!(
                    f,
                    "; {} waits without a known stack (lost, or begun before recording)",
                    o.unattributed
                )?;
            }
        }
        if let Some(cg) = &self.cgroup {
            write!(
                f,
                "\nrprof record: cgroup '{}': {} processes seen",
                cg.name, cg.processes
            )?;
            if cg.late > 0 {
                write!(
                    f,
                    " ({} moved in while running, described from /proc)",
                    cg.late
                )?;
            }
        }
        if let Some(py) = &self.python {
            for line in py.lines() {
                write!(f, "\nrprof record: python: {line}")?;
            }
        }
        if !self.ns_pids.is_empty() {
            let shown: Vec<String> = self
                .ns_pids
                .iter()
                .take(NS_PIDS_SHOWN)
                .map(|(host, ns)| format!("{host} (ns {ns})"))
                .collect();
            let more = match self.ns_pids.len().saturating_sub(NS_PIDS_SHOWN) {
                0 => String::new(),
                n => format!(" and {n} more"),
            };
            write!(
                f,
                "\nrprof record: {} processes in another pid namespace, host pid (namespace pid): {}{more}",
                self.ns_pids.len(),
                shown.join(", ")
            )?;
        }
        Ok(())
    }
}

/// Format a byte count as B / KiB / MiB.
pub fn human_size(bytes: u64) -> String {
    match bytes {
        b if b < 1024 => format!("{b} B"),
        b if b < 1024 * 1024 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0)),
    }
}
