//! The event layer, below `record`, `stat` (and later `top`, `trace`): one grammar for perf's event lists and
//! one plan of what the kernel opens for them.
//!
//! - [`grammar`]: `-e a,b -e c` with the `--filter` after an event ([`specs_from_args`], [`split_list`]);
//!   one event ([`parse`]) is a software event (`cs`, `faults`, `migrations`: perf's aliases), a hardware or
//!   cache event or a raw `rNNNN` (with perf's modifiers `:u` `:k` `:p`.. as attr bits), a tracepoint (globs
//!   allowed) or a probe point (`u:BIN:FUNC`, `probe:FUNC` with `-x`, `kprobe:FUNC`).
//! - [`plan`]: [`plan::plan`] resolves the specs into [`PlannedEvent`]s, each an attr to open (counting; the
//!   caller adds sampling and sample fields), creating probe points for the plan's lifetime.
//! - [`catalog`]: the events of this machine as `perf list` prints them.
//! - [`hardware`]: perf's hardware and cache names and configs, and whether this machine has a PMU.
//! - [`syscalls`]: perf trace's list (`-e openat,'open*',sched:*`, `!` first): syscalls and tracepoints in one
//!   plan ([`plan_trace`]).
//! - [`privilege`]: what an unprivileged user may open (perf's `:u` fallback at `perf_event_paranoid` 2).
//! - [`group`]: the tracefs probe group of one rprof (uprobes, kprobes, USDT points it creates for `record -e`,
//!   `stat -e`, `probe`, `trace` and `bt`), removed when it ends; [`supervisor`] removes it when rprof dies,
//!   even by SIGKILL.
//!
//! Use: `let specs = events::specs_from_args(&argv); let plan = events::plan::plan(&specs, None)?;` then open
//! `plan.events[i].attr()` (with the caller's sample fields) and set `plan.events[i].filter`; keep `plan`
//! alive until the events are closed.
pub mod catalog;
pub mod grammar;
pub mod group;
pub mod hardware;
pub mod plan;
pub mod privilege;
pub mod supervisor;
pub mod syscalls;

pub use grammar::{parse, specs_from_args, split_list, Event, EventSpec, Kind, Modifiers};
pub use plan::{Plan, PlannedEvent, PlannedKind};
pub use syscalls::{plan_trace, TraceRequest};

/// Errors of the event layer.
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    /// An event list that does not parse.
    #[error("{0}")]
    Parse(String),
    /// An event that cannot be resolved here (no such tracepoint, no kprobes, a probe that failed).
    #[error("{0}")]
    Config(String),
}
