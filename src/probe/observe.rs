//! Every hit, one by one, in time order, for a caller that does its own work with events (`rprof bt`): the
//! session runs as it always does (plan, engines, merge, filters, context), and each hit that passes the
//! filters is handed to an [`Observer`] before it is paired or counted.
use super::target::{TargetId, Targets};
use super::value::Value;

/// What a hit is to its target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HitRole {
    /// A function entered (uprobe, kprobe).
    Entry,
    /// A function returned (uretprobe, kretprobe).
    Return,
    /// A tracepoint's or USDT probe's hit.
    Hit,
}

/// One frame of a stack at a hit, named as `rprof report` names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObservedFrame {
    pub addr: u64,
    /// The function, or None for code without a name.
    pub name: Option<String>,
    /// The address's offset in that function, where known.
    pub offset: u64,
    /// The module's path as the process mapped it (`[kernel.kallsyms]` for the kernel).
    pub module: String,
    pub kernel: bool,
}

/// One hit, as the session saw it.
#[derive(Clone, Debug)]
pub struct ObservedHit {
    pub target: TargetId,
    pub role: HitRole,
    /// CLOCK_MONOTONIC, ns.
    pub time: u64,
    /// The process and thread (None in an interrupt).
    pub pid: Option<u32>,
    pub tid: u32,
    pub cpu: Option<u32>,
    pub comm: Option<std::sync::Arc<str>>,
    /// The target's fetched values, indexed like its fetches (those of this event's end; others None).
    pub values: Vec<Option<Value>>,
    /// With [`super::ProbeOptions::stacks`]: the stack at the hit, leaf first (kernel frames, then user frames).
    pub stack: Option<Vec<ObservedFrame>>,
}

/// Names of other addresses than a hit's stack (`usym()`, `ksym()` in `rprof bt`), by the resolver and the
/// mappings that name the stacks. A process that exited in the round is still known while its hits are handed
/// over.
pub trait AddrNames {
    /// The function holding `addr` in process `pid` (None: no symbol covers it).
    fn user(&mut self, pid: u32, addr: u64) -> Option<ObservedFrame>;
    /// The kernel function holding `addr`.
    fn kernel(&mut self, addr: u64) -> Option<ObservedFrame>;
}

/// A caller of [`super::run_observed`]: told the targets, the start, every hit, and each reading round.
pub trait Observer {
    /// The session's targets, resolved from the patterns, before any probe exists.
    fn targets(&mut self, targets: &Targets);
    /// Probing has started (probes created and enabled); `command`: the launched command's pid, about to exec.
    fn started(&mut self, command: Option<u32>);
    /// One hit that passed the filters, in time order across CPUs (handed over at the end of the reading
    /// round that released it); `names` names other addresses of the hit's process. `false` ends the session.
    fn hit(&mut self, hit: &ObservedHit, names: &mut dyn AddrNames) -> bool;
    /// A reading round ended (at least every 100 ms): the hits read so far that are in order were handed
    /// over. `false` ends the session.
    fn round(&mut self) -> bool;
}
