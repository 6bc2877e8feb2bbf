//! The counters of `rprof stat`: one counting perf event per planned event and per task (a command or
//! process, followed into its children by `inherit`; each thread with `--per-thread`) or per CPU
//! (system-wide), read as perf stat reads them (count, time enabled, time running).
use super::{Aggr, StatError};
use crate::events::{Plan, PlannedEvent};
use crate::perf::{Attr, PerfError, PerfEvent};

/// Where one counter counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unit {
    Task(i32),
    Cpu(u32),
}

/// One counter: its event (index in the plan) and unit; None when the kernel does not support the event
/// (perf's `<not supported>`).
pub struct Counter {
    pub event: usize,
    pub unit: Unit,
    fd: Option<PerfEvent>,
}

/// A reading: count, nanoseconds enabled, nanoseconds running.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Reading {
    pub value: u64,
    pub enabled: u64,
    pub running: u64,
}

impl Reading {
    /// `self - earlier` (an interval's share).
    pub fn since(self, earlier: Reading) -> Reading {
        Reading {
            value: self.value.saturating_sub(earlier.value),
            enabled: self.enabled.saturating_sub(earlier.enabled),
            running: self.running.saturating_sub(earlier.running),
        }
    }

    /// The sum of two readings (an aggregate).
    pub fn add(self, o: Reading) -> Reading {
        Reading {
            value: self.value + o.value,
            enabled: self.enabled + o.enabled,
            running: self.running + o.running,
        }
    }
}

/// How the counters are opened.
pub struct Scope<'a> {
    /// The tasks (pid or tid) to count, or empty for the CPUs.
    pub tasks: &'a [i32],
    pub cpus: &'a [u32],
    /// Follow children (`inherit`); off for `--per-thread`.
    pub inherit: bool,
    /// Start at the command's exec (else enabled by [`Counters::enable`]).
    pub on_exec: bool,
    /// Exclude the kernel from every event (the unprivileged fallback).
    pub user_only: bool,
}

/// Every counter of a run.
pub struct Counters {
    pub counters: Vec<Counter>,
}

impl Counters {
    /// Open the plan's events on the scope's tasks or CPUs. An event the kernel does not have (a hardware
    /// event without a PMU) gets no counters, as perf's `<not supported>`; permission errors fail.
    pub fn open(plan: &Plan, scope: &Scope<'_>) -> Result<Counters, StatError> {
        let units: Vec<Unit> = match scope.tasks.is_empty() {
            true => scope.cpus.iter().map(|&c| Unit::Cpu(c)).collect(),
            false => scope.tasks.iter().map(|&t| Unit::Task(t)).collect(),
        };
        let mut counters = Vec::new();
        for (i, event) in plan.events.iter().enumerate() {
            let attr = counting_attr(event, scope);
            for &unit in &units {
                let (pid, cpu) = match unit {
                    Unit::Task(t) => (t, -1),
                    Unit::Cpu(c) => (-1, c as i32),
                };
                let fd = match PerfEvent::open(&attr, pid, cpu) {
                    Ok(fd) => Some(fd),
                    Err(PerfError::Open { source, .. }) if unsupported(&source) => None,
                    Err(e) => return Err(e.into()),
                };
                if let (Some(fd), Some(filter)) = (&fd, &event.filter) {
                    fd.set_filter(filter)?;
                }
                counters.push(Counter { event: i, unit, fd });
            }
        }
        Ok(Counters { counters })
    }

    /// Start every counter (those enabled on exec start by themselves).
    pub fn enable(&self) -> Result<(), StatError> {
        for fd in self.counters.iter().filter_map(|c| c.fd.as_ref()) {
            fd.enable()?;
        }
        Ok(())
    }

    /// Read every counter (None for the unsupported ones), in the order of `counters`.
    pub fn read(&self) -> Vec<Option<Reading>> {
        self.counters
            .iter()
            .map(|c| {
                let fd = c.fd.as_ref()?;
                let (value, enabled, running) = fd.read_timed().ok()?;
                Some(Reading {
                    value,
                    enabled,
                    running,
                })
            })
            .collect()
    }
}

/// The counting attr of `event` in `scope`, as perf stat opens it: read with its times, inherited by the
/// children and enabled at exec for a command.
fn counting_attr(event: &PlannedEvent, scope: &Scope<'_>) -> Attr {
    let mut attr = event.attr().period(0).read_times();
    if scope.user_only {
        attr = attr.exclude(false, true);
    }
    if scope.inherit && !scope.tasks.is_empty() {
        attr = attr.inherit();
    }
    if scope.on_exec {
        attr = attr.enable_on_exec();
    }
    attr
}

/// Whether an open error means the kernel has no such event here (no PMU, or the PMU lacks it).
fn unsupported(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOENT | libc::EOPNOTSUPP | libc::ENODEV | libc::EINVAL)
    )
}

/// The CPUs of each physical core (socket, die, core), from sysfs topology, for `--per-core`.
pub fn core_of(cpu: u32) -> (u32, u32, u32) {
    let read = |f: &str| {
        std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu{cpu}/topology/{f}"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    };
    (read("physical_package_id"), read("die_id"), read("core_id"))
}

/// The aggregate a counter's unit belongs to.
pub fn key_of(aggr: Aggr, unit: Unit) -> Unit {
    match (aggr, unit) {
        (Aggr::Global, _) => Unit::Task(0),
        (Aggr::PerCore, Unit::Cpu(c)) => {
            let (s, d, k) = core_of(c);
            Unit::Cpu(s << 20 | d << 10 | k)
        }
        (_, u) => u,
    }
}
