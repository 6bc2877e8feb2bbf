//! The one place where a probe session is decided: the tracefs probes to create, the events to read and which
//! engine reads each (the tracefs instance ring, perf samples, counters; tracefs events or the uprobe PMU), and
//! how the probe's own cost is calibrated. [`plan`] is a pure function of the targets, the options and what the
//! kernel and the files offer ([`Capabilities`]); the session carries the plan out.
use super::engine::sharing::Sharing;
use super::spec::code::Emulation;
use super::spec::sysno::syscall_number;
use super::target::{PerTarget, Target, TargetId, TargetKind, Targets};
use super::{EngineChoice, ProbeOptions, TaskTarget};
use crate::perf::software::{Sample, SoftwareEvent};
use crate::probe::spec::register::SampledRegs;
use crate::tracefs::ProbeDef;
use calibrate::calibration;
use points::{Points, Unplaced};
use std::path::{Path, PathBuf};

mod calibrate;
mod place;
mod points;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_software;

pub use place::{place, running_kernel_emulates};

/// What the kernel and the files offer, found before planning.
#[derive(Clone, Debug, Default)]
pub struct Capabilities {
    /// The kernel's `uprobe` PMU (4.17 and later): fd-owned uprobes without fetch arguments.
    pub uprobe_pmu: bool,
    /// tracefs instances: the ring engine.
    pub ring: bool,
    /// Each probed user file, with how many processes other than the targets map it.
    pub sharing: Vec<Sharing>,
    /// Functions of rprof's own binary to calibrate the probe's cost on, one per class: their file and offset.
    pub calibration_sites: Vec<(ProbeClass, PathBuf, u64)>,
    /// Which instructions this kernel emulates at a uprobe (the others are single-stepped).
    pub emulates: Emulates,
    /// The kernel takes event probes (`e:`): tracepoint fields, and the strings they point to, read in the kernel.
    pub event_probes: bool,
    /// rprof's own threads (and its supervisor's): kept out of every event that watches every task, in the
    /// kernel, so that rprof never counts its own work.
    pub own_tasks: Vec<u32>,
    /// The fields naming a task of each tracepoint probed (`(category, event)`: `next_pid`...): an event of
    /// rprof's thread about another task is kept (see [`crate::probe::spec::filters::exclude_tasks`]).
    pub task_fields: std::collections::HashMap<(String, String), Vec<String>>,
}

/// The instructions a kernel emulates at a uprobe beyond relative branches and `nop` (0x90), which every
/// kernel rprof runs on emulates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Emulates {
    /// `push reg` (Linux 5.17 and later).
    pub push: bool,
    /// The kernel's own multi-byte nops (Linux 6.16 and later).
    pub long_nops: bool,
}

impl Default for Emulates {
    fn default() -> Self {
        Emulates::for_kernel(6, 18)
    }
}

impl Emulates {
    /// What Linux `major.minor` emulates.
    pub fn for_kernel(major: u32, minor: u32) -> Emulates {
        let at_least = |a: u32, b: u32| (major, minor) >= (a, b);
        Emulates {
            push: at_least(5, 17),
            long_nops: at_least(6, 16),
        }
    }

    fn emulates(&self, e: Emulation) -> bool {
        match e {
            Emulation::Branch | Emulation::Nop => true,
            Emulation::Push => self.push,
            Emulation::LongNop => self.long_nops,
            Emulation::Endbr | Emulation::Stepped => false,
        }
    }
}

/// How the kernel runs a probed instruction: what a probe there costs each call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProbeClass {
    /// Emulated in the trap (about 0.5 us).
    Emulated,
    /// Copied out of line and single-stepped: a second trap (about 9 us here).
    SingleStepped,
}

impl ProbeClass {
    pub fn name(self) -> &'static str {
        match self {
            ProbeClass::Emulated => "emulated",
            ProbeClass::SingleStepped => "single-stepped",
        }
    }
}

/// Where a function's probes go (its entry probe and its return probe, which takes the return address from
/// `[rsp]` and so works at any instruction before `rsp` changes), and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Bytes past the function's first instruction.
    pub offset: u64,
    pub class: ProbeClass,
    /// `je: emulated; skipped test`, `push: emulated`, `mov: single-stepped; sub at +0x3 moves the stack`.
    pub why: String,
    /// Go: the return probes are uprobes on these `ret` instructions (offsets from the function's start),
    /// paired with entries by goroutine (none: counted only); None for a uretprobe at the entry's place.
    pub returns: Option<Vec<u64>>,
}

/// How the events are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `--count` without values or stacks: one counting perf event per target, read with read(2).
    Counters,
    /// Every hit is a record: tracefs ring events and perf samples, merged by time.
    Sampled,
}

/// What a perf event on a planned event stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A function entry (uprobe, kprobe, sys_enter).
    Entry,
    /// A function return (uretprobe, kretprobe, sys_exit).
    Return,
    /// A counted hit (tracepoint, USDT probe).
    Hit,
    /// Values for the next entry of its target on the same thread (a syscall's strings, read at its `syscall`
    /// instruction).
    Value,
    /// Ends of a `--pair`: bit `i` START `i`, [`crate::probe::target::DONE_BIT`] the DONE (one event may be
    /// several ends, told apart by their filters and keys).
    Pair(u32),
}

/// What a perf event is opened on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attach {
    /// The tracefs event `group/event` (its id).
    Tracefs,
    /// A uprobe of the `uprobe` PMU at this file and offset (no tracefs probe; no fetch arguments).
    Pmu { path: PathBuf, offset: u64 },
    /// A perf software event (`profile:`, `software:`), sampled so (no tracefs probe; no data but the sample's).
    Software {
        event: &'static SoftwareEvent,
        sample: Sample,
        /// The registers its samples carry (REGS_INTR) for the target's fetches.
        regs: SampledRegs,
    },
}

/// Which engine reads an event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// Enabled in the session's tracefs instance and read from its ring.
    Ring,
    /// Per-task (or per-CPU) sampled perf events.
    Perf(Attach),
    /// Per-task (or per-CPU) counting perf events.
    Counter(Attach),
}

/// One event to read: a tracefs event (or a uprobe PMU probe) and the targets whose hits it carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedEvent {
    pub group: String,
    pub event: String,
    pub role: Role,
    /// The targets whose probe points this event holds. With more than one (user functions), a hit names its
    /// target by the runtime address in its raw data.
    pub members: Vec<TargetId>,
    /// A uprobe or uretprobe: its data holds the probed address and (timed) the user SP.
    pub user: bool,
    /// Read on every CPU for every task, whatever the session's tasks (a keyed pair's ends: a request's
    /// completion and a task's wakeup fire in other tasks' contexts, often interrupts).
    pub everywhere: bool,
    pub source: Source,
    /// The kernel's filter of the event (ftrace syntax): its target's filter, the part the kernel evaluates,
    /// and rprof's own threads kept out.
    pub filter: Option<String>,
}

impl PlannedEvent {
    /// Read through the tracefs instance's ring.
    pub fn ring(&self) -> bool {
        self.source == Source::Ring
    }

    /// The software event it is, and how it samples (no tracefs event).
    pub fn software(&self) -> Option<(&'static SoftwareEvent, Sample)> {
        match &self.source {
            Source::Perf(Attach::Software { event, sample, .. })
            | Source::Counter(Attach::Software { event, sample, .. }) => Some((event, *sample)),
            _ => None,
        }
    }

    /// The registers a software event's samples carry (none for other events).
    pub fn sampled_regs(&self) -> SampledRegs {
        match &self.source {
            Source::Perf(Attach::Software { regs, .. }) => *regs,
            _ => SampledRegs::default(),
        }
    }

    /// A tracefs event: it has an id and a format in tracefs (not a uprobe PMU probe or a software event).
    pub fn in_tracefs(&self) -> bool {
        matches!(
            self.source,
            Source::Ring | Source::Perf(Attach::Tracefs) | Source::Counter(Attach::Tracefs)
        )
    }

    /// The uprobe PMU probe's file and offset, for events without a tracefs event.
    pub fn pmu(&self) -> Option<(&Path, u64)> {
        match &self.source {
            Source::Perf(Attach::Pmu { path, offset })
            | Source::Counter(Attach::Pmu { path, offset }) => Some((path, *offset)),
            _ => None,
        }
    }
}

/// How the probe's own cost is measured at start: on functions of rprof's own binary, one per class of
/// probed instruction the targets have, read the way the targets are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Calibration {
    pub method: Method,
    /// Through uprobe PMU probes (no tracefs probes).
    pub pmu: bool,
    /// Entry and return probes (else the entry only).
    pub timed: bool,
    pub sites: Vec<CalibrationSite>,
}

/// The engine of a calibration: the targets' own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Counter,
    Ring,
    Perf,
}

/// One calibrated function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CalibrationSite {
    pub class: ProbeClass,
    pub path: PathBuf,
    pub offset: u64,
    /// Its tracefs events (entry, then return when timed) in the session's group; none on the uprobe PMU.
    pub events: Vec<String>,
}

/// The whole decision.
#[derive(Clone, Debug)]
pub struct Plan {
    pub mode: Mode,
    /// The tracefs probes to create (the targets' and the calibration's), all in the session's group.
    pub defs: Vec<ProbeDef>,
    pub events: Vec<PlannedEvent>,
    pub calibration: Option<Calibration>,
    /// Files other processes map on which the tracefs ring was forced (`--engine tracefs`): their calls to a
    /// probed function take the trap too.
    pub forced_shared: Vec<Sharing>,
    /// Where each user function is probed (None for other targets).
    pub placements: PerTarget<Option<Placement>>,
    /// How the strings of syscalls and tracepoints are read, said for each target that has some.
    pub value_ways: Vec<(TargetId, String)>,
}

impl Plan {
    /// Whether any event is read from the tracefs ring.
    pub fn uses_ring(&self) -> bool {
        self.events.iter().any(PlannedEvent::ring)
    }

    /// Whether the ring must be filtered by task in the kernel (`set_event_pid`): when one of its events fires
    /// in other processes too (a tracepoint or syscall, or a uprobe on a file others map, forced). Otherwise
    /// only the target maps the probed files, and rprof drops other tasks' hits itself (a process that maps
    /// a file later): the kernel's filter costs the target about 50 ns an event.
    pub fn ring_filter_in_kernel(&self) -> bool {
        !self.forced_shared.is_empty() || self.events.iter().any(|e| e.ring() && !e.user)
    }

    /// Whether any event is a uprobe PMU probe.
    pub fn uses_pmu(&self) -> bool {
        self.events.iter().any(|e| e.pmu().is_some())
    }

    /// Probe points: tracefs probes and uprobe PMU probes.
    pub fn probe_points(&self) -> usize {
        self.defs.len() + self.events.iter().filter(|e| e.pmu().is_some()).count()
    }
}

/// Targets counted with counters at most; more are counted from samples of shared events. A counter is one
/// event per target, and closing each costs the kernel RCU grace periods under a global mutex (`event_mutex`:
/// about 85 ms per uprobe and 36 ms per tracepoint here, one after the other), so 1,000 counters take 85 s to
/// close, against one grace period per [`POINTS_PER_EVENT`] functions for sampled events (which cost the
/// target a ring write more per call).
pub const MAX_COUNTERS: usize = 16;

/// Syscalls read through perf events at most as events of their own (`syscalls:sys_enter_NAME`); more are read
/// from `raw_syscalls:sys_enter`/`sys_exit`, shared by all and keyed by the syscall's number: closing the last
/// perf event of each tracepoint costs a grace period (36 ms here, one tracepoint after the other), 13 s for
/// `syscall:*`. (The tracefs ring and counters keep an event per syscall, and so does a syscall with values,
/// which are fields of its own events.)
pub const MAX_SYSCALL_EVENTS: usize = MAX_COUNTERS;

/// Probe points per tracefs event for user functions. Closing an event's last perf event costs an RCU grace
/// period (tens of ms on some machines) under a global mutex, so few events with many points each are fast.
pub const POINTS_PER_EVENT: usize = 1024;

/// The tracefs group of the events of every syscall, whose `id` field is the syscall's number.
pub const RAW_SYSCALLS: &str = "raw_syscalls";

/// The fetch argument that carries the user stack pointer, which pairing matches returns to entries by.
pub const SP_FETCH: &str = "sp=%sp";

/// The fetch argument that carries a Go function's goroutine (the g pointer in r14), which pairing matches its
/// returns to its entries by.
pub const G_FETCH: &str = "g=%r14:x64";

/// Decide the session for `targets`, with probes in the tracefs group `group`.
///
/// - `--count` without values, stacks or a forced engine reads counters ([`Mode::Counters`]) for up to
///   [`MAX_COUNTERS`] targets.
/// - Counted user functions, and those whose stacks are sampled (`-g`), system-wide, use the uprobe PMU where the
///   kernel has it: those probes go with rprof's fds, even after a SIGKILL. Never on tasks (below). Timing without `-g` keeps tracefs probes, whose
///   `sp` fetch argument is cheaper than the user registers a PMU probe needs.
/// - A sampled event is read from the tracefs ring where instances exist, unless perf is asked for, stacks are
///   wanted, or (auto) it probes a file other processes map: the ring's uprobe would trap in them too.
pub fn plan(group: &str, targets: &Targets, opts: &ProbeOptions, caps: &Capabilities) -> Plan {
    let values = opts.calls.any() || targets.iter().any(|(_, t)| !t.fetches.is_empty());
    let mode = if opts.count_only
        && !opts.each_hit
        && !opts.stacks
        && !values
        && opts.engine == EngineChoice::Auto
        && targets.len() <= MAX_COUNTERS
        && !targets
            .iter()
            .any(|(_, t)| t.filter.as_ref().is_some_and(|f| f.user.is_some()))
        && targets.iter().all(|(_, t)| countable(t))
    {
        Mode::Counters
    } else {
        Mode::Sampled
    };
    // Never with `inherit` (every run but a system-wide one): the kernel sets an inherited event up again in each
    // new thread, and the uprobe PMU's init reads the probe's path from the attr's pointer in the memory of the
    // thread being created, not rprof's: EFAULT, and the target's pthread_create or clone fails.
    let pmu = caps.uprobe_pmu
        && opts.target == TaskTarget::SystemWide
        && (mode == Mode::Counters || (opts.stacks && opts.engine != EngineChoice::Tracefs));
    let placements = targets
        .iter()
        .map(|(_, t)| place(t, opts.at_entry, caps.emulates))
        .collect();
    let perf_read = opts.engine == EngineChoice::Perf || !caps.ring || opts.stacks;
    let syscalls = targets.iter().filter(|(_, t)| shares_raw(t)).count();
    let points = Points {
        group,
        raw_syscalls: mode == Mode::Sampled && perf_read && syscalls > MAX_SYSCALL_EVENTS,
        count_only: opts.count_only,
        one_per_target: mode == Mode::Counters || pmu,
        pmu,
        placements: &placements,
        event_probes: caps.event_probes,
    };
    let (mut defs, unplaced) = points.plan(targets);
    let mut forced_shared = Vec::new();
    let events: Vec<PlannedEvent> = unplaced
        .into_iter()
        .map(|e| {
            let source = source(&e, mode, targets, opts, caps, &mut forced_shared);
            let filter = event_filter(&e, targets, opts, caps);
            e.with_source(source, filter)
        })
        .collect();
    let (calibration, cal_defs) = calibration(group, mode, pmu, &events, &placements, opts, caps);
    defs.extend(cal_defs);
    let value_ways = value_ways(targets, caps);
    Plan {
        mode,
        defs,
        events,
        calibration,
        forced_shared,
        placements,
        value_ways,
    }
}

/// Whether a counter counts exactly what `t`'s hits would be: a software event sampled at every event (a
/// clock's counter counts nanoseconds, and a counter of `software:faults:100` a hundred per hit); every probe.
fn countable(t: &Target) -> bool {
    t.software()
        .is_none_or(|(event, sample)| !event.is_clock() && sample.every_event())
}

/// The kernel's filter of one event: its lone target's (the entry's part, or at a return the part on the task),
/// and, for an event that watches every task, rprof's own threads kept out.
fn event_filter(
    e: &Unplaced,
    targets: &Targets,
    opts: &ProbeOptions,
    caps: &Capabilities,
) -> Option<String> {
    use crate::probe::spec::filters::{and_text, exclude_tasks};
    // A software event takes no filter (its target's is rprof's alone).
    if e.software.is_some() {
        return None;
    }
    let own = match opts.target == TaskTarget::SystemWide || e.everywhere {
        true => {
            let fields = caps.task_fields.get(&(e.group.clone(), e.event.clone()));
            exclude_tasks(&caps.own_tasks, fields.map_or(&[], Vec::as_slice), e.user)
        }
        false => None,
    };
    let target = match e.members.as_slice() {
        [m] => targets[*m].filter.as_ref().and_then(|f| match e.role {
            // An event probe that reads the target's strings holds them as its own fields.
            Role::Entry | Role::Hit if caps.event_probes && f.kernel_probe.is_some() => {
                f.kernel_probe.clone()
            }
            Role::Entry | Role::Hit => f.kernel.clone(),
            Role::Value => f.kernel_sites.clone(),
            Role::Return => f.kernel_return.clone(),
            Role::Pair(_) => None,
        }),
        _ => None,
    };
    let target = match (e.role, e.members.as_slice()) {
        (Role::Pair(mask), [m]) => pair_filter(&targets[*m], mask),
        _ => target,
    };
    and_text(target.as_deref(), own.as_deref())
}

/// The tracepoints that `targets` probe, as counted targets or a pair's ends: `(category, event)`, each once.
pub fn tracepoints(targets: &Targets) -> Vec<(String, String)> {
    let mut all = Vec::new();
    for (_, t) in targets.iter() {
        let kinds: Vec<&TargetKind> = match t.pair() {
            Some(p) => p.ends().map(|(_, e)| &e.kind).collect(),
            None => vec![&t.kind],
        };
        for kind in kinds {
            if let TargetKind::Tracepoint { category, event } = kind {
                all.push((category.clone(), event.clone()));
            }
        }
    }
    all.sort();
    all.dedup();
    all
}

/// The kernel's filter of an event that is these ends of a pair: any of their kernel parts (none where an end
/// takes every event, or has no part the kernel evaluates).
fn pair_filter(t: &Target, mask: u32) -> Option<String> {
    let pair = t.pair()?;
    let parts: Option<Vec<&str>> = pair
        .ends()
        .filter(|(bit, _)| mask & bit != 0)
        .map(|(_, e)| e.filter.as_ref()?.kernel.as_deref())
        .collect();
    match parts?.as_slice() {
        [one] => Some(one.to_string()),
        many => Some(
            many.iter()
                .map(|p| format!("({p})"))
                .collect::<Vec<_>>()
                .join(" || "),
        ),
    }
}

/// Whether `t` is a syscall that can be read from [`RAW_SYSCALLS`] with the others: one with a number and no
/// values (those are fields of its own events).
fn shares_raw(t: &Target) -> bool {
    match &t.kind {
        TargetKind::Syscall { name } => {
            t.fetches.is_empty() && t.filter.is_none() && syscall_number(name).is_some()
        }
        _ => false,
    }
}

/// How each target's user strings are read: in the kernel by an event probe, at the `syscall` instructions of
/// the files that make the syscall, or not at all.
fn value_ways(targets: &Targets, caps: &Capabilities) -> Vec<(TargetId, String)> {
    use crate::probe::spec::fetch::FetchSource;
    let mut ways = Vec::new();
    for (id, t) in targets.iter() {
        let strings: Vec<&str> = t
            .fetches
            .iter()
            .filter(|f| matches!(f.source, FetchSource::UserString { .. }))
            .map(|f| f.label.as_str())
            .collect();
        if strings.is_empty() {
            continue;
        }
        let how = if caps.event_probes {
            "read in the kernel by an event probe".to_string()
        } else if !t.syscall_sites.is_empty() {
            let files: Vec<String> = t
                .syscall_sites
                .iter()
                .map(|(p, o)| format!("{} syscall instruction(s) of {}", o.len(), p.display()))
                .collect();
            format!(
                "read at {} (uprobes: calls made elsewhere are not seen)",
                files.join(", ")
            )
        } else {
            "not read: this kernel takes no event probes and no syscall instruction makes it".into()
        };
        ways.push((id, format!("{} {}: {how}", t.name, strings.join(", "))));
    }
    ways
}

/// The engine of one event (see [`plan`]); a forced ring on a shared file is noted in `forced`.
fn source(
    e: &Unplaced,
    mode: Mode,
    targets: &Targets,
    opts: &ProbeOptions,
    caps: &Capabilities,
    forced: &mut Vec<Sharing>,
) -> Source {
    let attach = match (&e.pmu_at, e.software) {
        (_, Some((event, sample))) => Attach::Software {
            event,
            sample,
            regs: e.regs,
        },
        (Some((path, offset)), None) => Attach::Pmu {
            path: path.clone(),
            offset: *offset,
        },
        (None, None) => Attach::Tracefs,
    };
    if mode == Mode::Counters {
        return Source::Counter(attach);
    }
    // The ring follows the session's tasks (`set_event_pid`), which a keyed pair's events must not.
    if attach != Attach::Tracefs || !caps.ring || opts.stacks || e.everywhere {
        return Source::Perf(attach);
    }
    let shared = shared_file(e, targets, &caps.sharing).filter(|s| s.others > 0);
    match (opts.engine, shared) {
        (EngineChoice::Perf, _) | (EngineChoice::Auto, Some(_)) => Source::Perf(attach),
        (EngineChoice::Tracefs, Some(s)) => {
            if !forced.contains(s) {
                forced.push(s.clone());
            }
            Source::Ring
        }
        _ => Source::Ring,
    }
}

/// The probed file of a user event, with how many other processes map it (None for other events).
fn shared_file<'a>(e: &Unplaced, targets: &Targets, shared: &'a [Sharing]) -> Option<&'a Sharing> {
    if let Some(file) = &e.file {
        return shared.iter().find(|s| &s.path == file);
    }
    let &m = e.members.first()?;
    match &targets[m].kind {
        TargetKind::User { path, .. } => shared.iter().find(|s| &s.path == path),
        _ => None,
    }
}
