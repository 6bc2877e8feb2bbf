//! `rprof stat`: count events as perf stat counts them, on a command (its children followed), processes or
//! the CPUs (system-wide), and print perf stat's rows: perf's default set without `-e` (the clock with "CPUs
//! utilized", context-switches, cpu-migrations and page-faults with their rates, the PMU's events
//! `<not supported>` where there is none), `-I` intervals, `-r` repeats with their noise, `-x` CSV, and the
//! aggregations `-A` (per CPU), `--per-core` and `--per-thread`. The events come from the event layer
//! ([`crate::events`]): software events, tracepoints and probe points mix in one list.
mod counters;
mod print;
mod run;

pub use print::{Label, Layout, Row, Value};

use crate::events::{self, EventSpec};
use crate::perf::{self, PerfError};
use std::time::Duration;

/// How counts are grouped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Aggr {
    /// One row per event (perf's default).
    Global,
    /// A row per CPU (`-A`, `--no-aggr`).
    PerCpu,
    /// A row per physical core (`--per-core`).
    PerCore,
    /// A row per thread (`--per-thread`).
    PerThread,
}

/// What is counted.
#[derive(Clone, Debug)]
pub enum StatTarget {
    /// A command, and its children.
    Command(perf::Command),
    /// These processes (their threads, and their children from now on).
    Pids(Vec<i32>),
    /// These threads (`-t`; and their children from now on).
    Tids(Vec<i32>),
    /// Every task on these CPUs (`-a`: all online; `-C LIST`: as written, for the title).
    Cpus {
        cpus: Vec<u32>,
        list: Option<String>,
    },
}

/// Everything `rprof stat` needs.
#[derive(Clone, Debug)]
pub struct StatConfig {
    /// The events; empty: perf's default set.
    pub events: Vec<EventSpec>,
    pub target: StatTarget,
    /// A command that bounds the count of a process or system target (`-p PID -- sleep 3`).
    pub companion: Option<perf::Command>,
    /// `-I`: print the counts of every interval.
    pub interval: Option<Duration>,
    /// `-r`: run the command this many times and print means with their noise.
    pub repeat: u32,
    pub aggr: Aggr,
    /// `-x SEP`: CSV.
    pub csv: Option<String>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Count user space only (the unprivileged fallback, or `--all-user`).
    pub user_only: bool,
    /// `--detailed`: perf's `-d` rows after the default set.
    pub detailed: bool,
}

/// Errors of `rprof stat`.
#[derive(Debug, thiserror::Error)]
pub enum StatError {
    #[error(transparent)]
    Perf(#[from] PerfError),
    #[error(transparent)]
    Event(#[from] events::EventError),
    #[error(transparent)]
    Process(#[from] crate::process::ProcessError),
    #[error("{0}")]
    Config(String),
    #[error("cannot write the counts: {0}")]
    Write(#[from] std::io::Error),
}

/// perf stat's default events, in its order (the clock is cpu-clock system-wide, task-clock otherwise), with
/// perf's `-d` rows when `detailed`.
pub fn default_events(system_wide: bool, detailed: bool) -> Vec<EventSpec> {
    let clock = match system_wide {
        true => "cpu-clock",
        false => "task-clock",
    };
    [
        clock,
        "context-switches",
        "cpu-migrations",
        "page-faults",
        "cycles",
        "instructions",
        "branches",
        "branch-misses",
    ]
    .iter()
    .chain(match detailed {
        true => DETAILED,
        false => &[],
    })
    .map(|n| EventSpec::new(n))
    .collect()
}

/// The rows perf stat's `-d` adds.
const DETAILED: &[&str] = &[
    "L1-dcache-loads",
    "L1-dcache-load-misses",
    "LLC-loads",
    "LLC-load-misses",
];

/// Count as `cfg` says, writing perf stat's output to `out`; returns the exit code of the command (or of the
/// companion command), to mirror.
pub fn stat(cfg: &StatConfig, out: &mut dyn std::io::Write) -> Result<Option<i32>, StatError> {
    check(cfg)?;
    let explicit = !cfg.events.is_empty();
    let specs = match explicit {
        true => cfg.events.clone(),
        false => default_events(matches!(cfg.target, StatTarget::Cpus { .. }), cfg.detailed),
    };
    let plan = events::plan::plan(&specs, None)?;
    if explicit {
        for line in plan
            .events
            .iter()
            .filter_map(events::PlannedEvent::pmu_missing)
        {
            writeln!(out, "rprof stat: {line}")?;
        }
    }
    run::run(cfg, &plan, out)
}

/// Refuse combinations perf refuses, each in one line.
fn check(cfg: &StatConfig) -> Result<(), StatError> {
    let system = matches!(cfg.target, StatTarget::Cpus { .. });
    let bad = |s: &str| Err(StatError::Config(format!("rprof stat: {s}")));
    match cfg.aggr {
        Aggr::PerCpu | Aggr::PerCore if !system => {
            return bad("-A/--no-aggr and --per-core count per CPU: add -a (or -C CPUS)")
        }
        Aggr::PerThread if !matches!(cfg.target, StatTarget::Pids(_) | StatTarget::Tids(_)) => {
            return bad("--per-thread counts the threads of processes: give them with -p PID (or the threads with -t TID)")
        }
        _ => {}
    }
    if cfg.repeat > 1 && !matches!(cfg.target, StatTarget::Command(_)) {
        return bad("-r repeats a command: give one after --, without -p, -t, -a or -C");
    }
    if cfg.repeat == 0 {
        return bad("-r takes a count of runs of at least 1");
    }
    Ok(())
}
