//! The perf_event_open layer: attrs, event fds and ioctls, mmap ring buffers, workload launch, the set of
//! events of a session and its run loop. This is the only module with `unsafe` code.
pub mod attr;
pub mod bpf_ids;
pub mod event;
pub mod event_set;
pub mod ftrace_ring;
pub mod probe_targets;
pub mod ring;
pub mod run_loop;
pub mod software;
pub mod uprobe_pmu;
pub mod workload;

pub use attr::Attr;
pub use event::PerfEvent;
pub use event_set::{close_all, EventInfos, EventSet, Refused};
pub use ftrace_ring::{FtraceRings, Gap, Lost, RingMode};
pub use ring::{RawRecord, Ring};
pub use run_loop::{Handler, StopSignals, StopWhen, Stopped};
pub use uprobe_pmu::UprobePmu;
pub use workload::{Command, Workload};

use std::path::PathBuf;

/// PERF_RECORD_* record types, as `u32` for matching on [`RawRecord::kind`].
pub mod record_type {
    use perf_event_open_sys::bindings as sys;
    pub const LOST: u32 = sys::PERF_RECORD_LOST;
    pub const COMM: u32 = sys::PERF_RECORD_COMM;
    pub const EXIT: u32 = sys::PERF_RECORD_EXIT;
    pub const THROTTLE: u32 = sys::PERF_RECORD_THROTTLE;
    pub const FORK: u32 = sys::PERF_RECORD_FORK;
    pub const SAMPLE: u32 = sys::PERF_RECORD_SAMPLE;
    pub const MMAP2: u32 = sys::PERF_RECORD_MMAP2;
    pub const LOST_SAMPLES: u32 = sys::PERF_RECORD_LOST_SAMPLES;
    pub const SWITCH: u32 = sys::PERF_RECORD_SWITCH;
    pub const SWITCH_CPU_WIDE: u32 = sys::PERF_RECORD_SWITCH_CPU_WIDE;
}

/// Header misc bits of records.
pub mod misc {
    use perf_event_open_sys::bindings as sys;
    /// A switch record of a thread leaving the CPU (else: coming back).
    pub const SWITCH_OUT: u16 = sys::PERF_RECORD_MISC_SWITCH_OUT as u16;
    /// A switch-out of a thread that was still runnable (preempted, not blocked).
    pub const SWITCH_OUT_PREEMPT: u16 = sys::PERF_RECORD_MISC_SWITCH_OUT_PREEMPT as u16;
}

/// Errors of the perf layer.
#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    #[error(
        "perf_event_open denied ({source}): kernel.perf_event_paranoid={paranoid}; run as root, grant CAP_PERFMON \
         (setcap cap_perfmon,cap_sys_ptrace+ep rprof), or lower it: sysctl kernel.perf_event_paranoid=1"
    )]
    Denied {
        paranoid: String,
        source: std::io::Error,
    },
    #[error("no such process or thread: {pid} (check the PID with `ps`)")]
    NoSuchProcess { pid: i32 },
    #[error("perf_event_open failed for {what}: {source}")]
    Open {
        what: String,
        source: std::io::Error,
    },
    #[error("perf ioctl {what} failed: {source}")]
    Ioctl {
        what: &'static str,
        source: std::io::Error,
    },
    #[error(
        "cannot mmap the perf ring buffer ({pages} pages): {source}; raise `ulimit -l` or \
         kernel.perf_event_mlock_kb, or ask for fewer pages"
    )]
    Mmap {
        pages: usize,
        source: std::io::Error,
    },
    #[error("poll on perf ring buffers failed: {0}")]
    Poll(std::io::Error),
    #[error("cannot execute {program}: {source}")]
    Exec {
        program: String,
        source: std::io::Error,
    },
    #[error("cannot install the handler of SIGINT, SIGTERM and SIGHUP: {0}")]
    Signal(std::io::Error),
    #[error("cannot start the workload: {0}")]
    Spawn(std::io::Error),
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot open {path}: {source}; the tracefs instance must exist, and reading its rings needs root")]
    TraceOpen {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("TRACE_MMAP_IOCTL_GET_READER on {path} failed: {source}; open the rings in read mode (force_read) instead")]
    TraceIoctl {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read ring-buffer pages from {path}: {source}; was the tracefs instance removed while being read?")]
    TraceRead {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The CPUs that are online now (from /sys/devices/system/cpu/online, e.g. "0-1,4").
pub fn online_cpus() -> Result<Vec<u32>, PerfError> {
    let path = PathBuf::from("/sys/devices/system/cpu/online");
    let text = std::fs::read_to_string(&path).map_err(|source| PerfError::Read { path, source })?;
    Ok(parse_cpu_list(&text).unwrap_or_default())
}

/// Parse a kernel CPU list such as "0-3,8,10-11". None when malformed.
pub fn parse_cpu_list(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if b < a {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.trim().parse().ok()?),
        }
    }
    Some(cpus)
}

/// The current kernel.perf_event_paranoid setting, for error messages.
pub fn paranoid_level() -> String {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that CPU lists in the kernel's format parse, and malformed ones are rejected.
    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-1\n"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0,2-4,7"), Some(vec![0, 2, 3, 4, 7]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }
}
