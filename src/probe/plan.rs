//! The one place where a probe session is decided: the tracefs probes to create, the events to read and which
//! engine reads each (the tracefs instance ring, perf samples, counters; tracefs events or the uprobe PMU), and
//! how the probe's own cost is calibrated. [`plan`] is a pure function of the targets, the options and what the
//! kernel and the files offer ([`Capabilities`]); the session carries the plan out.
use super::engine::sharing::Sharing;
use super::spec::code::{gpr_bit, Emulation, FunctionCode, GoHead, Store};
use super::spec::go::GoFunction;
use super::spec::sysno::syscall_number;
use super::target::{PerTarget, Target, TargetId, TargetKind, Targets};
use super::{EngineChoice, ProbeOptions};
use crate::tracefs::{ProbeDef, ProbeLocation};
use std::path::{Path, PathBuf};

#[cfg(test)]
mod tests;

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
}

/// What a perf event is opened on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attach {
    /// The tracefs event `group/event` (its id).
    Tracefs,
    /// A uprobe of the `uprobe` PMU at this file and offset (no tracefs probe; no fetch arguments).
    Pmu { path: PathBuf, offset: u64 },
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
    pub source: Source,
}

impl PlannedEvent {
    /// Read through the tracefs instance's ring.
    pub fn ring(&self) -> bool {
        self.source == Source::Ring
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
}

impl Plan {
    /// Whether any event is read from the tracefs ring.
    pub fn uses_ring(&self) -> bool {
        self.events.iter().any(PlannedEvent::ring)
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
/// `syscall:*`. (The tracefs ring and counters keep an event per syscall.)
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
/// - Counted user functions, and those whose stacks are sampled (`-g`), use the uprobe PMU where the kernel has
///   it: those probes go with rprof's fds, even after a SIGKILL. Timing without `-g` keeps tracefs probes, whose
///   `sp` fetch argument is cheaper than the user registers a PMU probe needs.
/// - A sampled event is read from the tracefs ring where instances exist, unless perf is asked for, stacks are
///   wanted, or (auto) it probes a file other processes map: the ring's uprobe would trap in them too.
pub fn plan(group: &str, targets: &Targets, opts: &ProbeOptions, caps: &Capabilities) -> Plan {
    let values = opts.calls.any() || targets.iter().any(|(_, t)| !t.fetches.is_empty());
    let mode = if opts.count_only
        && !opts.stacks
        && !values
        && opts.engine == EngineChoice::Auto
        && targets.len() <= MAX_COUNTERS
    {
        Mode::Counters
    } else {
        Mode::Sampled
    };
    let pmu = caps.uprobe_pmu
        && (mode == Mode::Counters || (opts.stacks && opts.engine != EngineChoice::Tracefs));
    let placements = targets
        .iter()
        .map(|(_, t)| place(t, opts.at_entry, caps.emulates))
        .collect();
    let perf_read = opts.engine == EngineChoice::Perf || !caps.ring || opts.stacks;
    let syscalls = targets
        .iter()
        .filter(|(_, t)| matches!(t.kind, TargetKind::Syscall { .. }))
        .count();
    let points = Points {
        group,
        raw_syscalls: mode == Mode::Sampled && perf_read && syscalls > MAX_SYSCALL_EVENTS,
        count_only: opts.count_only,
        one_per_target: mode == Mode::Counters || pmu,
        pmu,
        placements: &placements,
    };
    let (mut defs, unplaced) = points.plan(targets);
    let mut forced_shared = Vec::new();
    let events: Vec<PlannedEvent> = unplaced
        .into_iter()
        .map(|e| {
            let source = source(&e, mode, targets, opts, caps, &mut forced_shared);
            e.with_source(source)
        })
        .collect();
    let (calibration, cal_defs) = calibration(group, mode, pmu, &events, &placements, opts, caps);
    defs.extend(cal_defs);
    Plan {
        mode,
        defs,
        events,
        calibration,
        forced_shared,
        placements,
    }
}

/// What the running kernel emulates (from `uname`; a release that cannot be read counts as the newest).
pub fn running_kernel_emulates() -> Emulates {
    let release = nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut parts = release.split(['.', '-']).map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => Emulates::for_kernel(major, minor),
        _ => Emulates::default(),
    }
}

/// How many instructions of a function's head a placement looks at (the head ends before, usually).
const PLACE_MAX: usize = 16;

/// Where a user function's probes go: on the first instruction the kernel emulates, when every instruction
/// before it is skippable (not a branch; `rsp`, `[rsp]` and memory unchanged; no register a fetch reads
/// written) and no direct branch of the function lands after its start, up to and including it; else at +0.
/// With `at_entry`, at +0 always.
pub fn place(t: &Target, at_entry: bool, emulates: Emulates) -> Option<Placement> {
    let TargetKind::User { .. } = t.kind else {
        return None;
    };
    let Some(code) = t.code.as_ref().filter(|c| !c.head.is_empty()) else {
        return Some(Placement {
            offset: 0,
            class: ProbeClass::SingleStepped,
            why: "code not read: assumed single-stepped".into(),
            returns: None,
        });
    };
    match (&t.go, &code.go) {
        (Some(GoFunction::Timed), Some(go)) => {
            // No SP fetch and no uretprobe for Go: the stack may move before the entry.
            let fetched = fetched_registers(t).0 & !gpr_bit("sp").unwrap_or(0);
            return Some(place_go(code, go, fetched, emulates));
        }
        (Some(GoFunction::CountOnly(why)), _) => {
            // Counted only: no uretprobe in a Go program (it would crash it).
            let mut p = place(
                &Target {
                    go: None,
                    ..t.clone()
                },
                at_entry,
                emulates,
            )?;
            p.why = format!("{}; counted only: {why}", p.why);
            p.returns = Some(Vec::new());
            return Some(p);
        }
        _ => {}
    }
    let first = &code.head[0];
    let class = |e| match emulates.emulates(e) {
        true => ProbeClass::Emulated,
        false => ProbeClass::SingleStepped,
    };
    let at_zero = |reason: String| Placement {
        offset: 0,
        class: class(first.emulation),
        why: format!("{}: {}{reason}", first.text, class(first.emulation).name()),
        returns: None,
    };
    if at_entry {
        return Some(at_zero(" (--at-entry)".into()));
    }
    if emulates.emulates(first.emulation) {
        return Some(at_zero(String::new()));
    }
    let (fetched, reads_memory) = fetched_registers(t);
    let mut skipped: Vec<&str> = Vec::new();
    for h in code.head.iter().take(PLACE_MAX) {
        if emulates.emulates(h.emulation) {
            return Some(placed_at(code, h.offset, &h.text, &skipped).unwrap_or_else(at_zero));
        }
        let blocker = if h.branches {
            Some("branches")
        } else if h.moves_stack {
            Some("moves the stack")
        } else if h.stores == Store::Anywhere || (h.stores == Store::Global && reads_memory) {
            Some("writes memory a fetch may read")
        } else if h.writes & fetched != 0 {
            Some("writes a fetched register")
        } else {
            None
        };
        if let Some(b) = blocker {
            return Some(at_zero(format!("; {} at +{:#x} {b}", h.text, h.offset)));
        }
        skipped.push(&h.text);
    }
    Some(at_zero("; no emulated instruction ahead".into()))
}

/// The placement on the emulated instruction at `offset`, unless a branch of the function lands after its
/// start, up to and including it (a loop back would fire the entry again): then why not.
fn placed_at(
    code: &FunctionCode,
    offset: u64,
    text: &str,
    skipped: &[&str],
) -> Result<Placement, String> {
    if let Some(t) = code.targets.range(1..=offset).next() {
        return Err(format!("; a branch of the function lands on +{t:#x}"));
    }
    Ok(Placement {
        offset,
        class: ProbeClass::Emulated,
        why: format!("{text}: emulated; skipped {}", skipped.join(", ")),
        returns: None,
    })
}

/// A Go function (register ABI): the entry on the first emulated instruction after the stack-growth check (so
/// that growing the stack, which runs the function again from its start, does not count it twice), unless a
/// branch lands between; the returns on each `ret` (single-stepped: the pair counts as such). No uretprobe, so
/// the stack may move and memory may be written before the entry.
fn place_go(code: &FunctionCode, go: &GoHead, fetched: u16, emulates: Emulates) -> Placement {
    let rets = code.rets.len();
    let returns = format!("; returns: {rets} ret(s), single-stepped; paired by goroutine");
    let mut skipped: Vec<&str> = Vec::new();
    for h in &go.head {
        if emulates.emulates(h.emulation) {
            let lands = code
                .targets
                .range(go.after_check + 1..=h.offset)
                .next()
                .is_some();
            if !lands {
                return Placement {
                    offset: h.offset,
                    class: ProbeClass::SingleStepped,
                    why: format!(
                        "{}: emulated, after the stack check; skipped {}{returns}",
                        h.text,
                        skipped.join(", ")
                    ),
                    returns: Some(code.rets.clone()),
                };
            }
            break;
        }
        if h.branches || h.writes & fetched != 0 {
            break;
        }
        skipped.push(&h.text);
    }
    let text = go.head.first().map_or("?", |h| h.text.as_str());
    Placement {
        offset: go.after_check,
        class: ProbeClass::SingleStepped,
        why: format!("{text}: after the stack check{returns}"),
        returns: Some(code.rets.clone()),
    }
}

/// The general-purpose registers the target's entry fetches read (`%di`, `+0(%si):string`, `%sp`), and
/// whether they read memory through a pointer (`+0(%si):string`; `[rsp]` is safe from global stores).
fn fetched_registers(t: &Target) -> (u16, bool) {
    let mut regs = gpr_bit("sp").unwrap_or(0);
    let mut memory = false;
    for f in t.fetches.iter().filter(|f| !f.on_return) {
        memory |= f.expr.contains('(') && !f.expr.starts_with("+0(%sp)");
        let exprs = std::iter::once(&f.expr).chain(&f.len);
        for part in exprs.flat_map(|e| e.split('%').skip(1)) {
            let name: String = part
                .chars()
                .take_while(char::is_ascii_alphanumeric)
                .collect();
            regs |= gpr_bit(&name).unwrap_or(0);
        }
    }
    (regs, memory)
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
    let attach = match &e.pmu_at {
        Some((path, offset)) => Attach::Pmu {
            path: path.clone(),
            offset: *offset,
        },
        None => Attach::Tracefs,
    };
    if mode == Mode::Counters {
        return Source::Counter(attach);
    }
    if attach != Attach::Tracefs || !caps.ring || opts.stacks {
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
    let &m = e.members.first()?;
    match &targets[m].kind {
        TargetKind::User { path, .. } => shared.iter().find(|s| &s.path == path),
        _ => None,
    }
}

/// The calibration probes on rprof's own functions of the classes the targets' probes have, read the way the
/// targets are (their definitions are added to `defs`, except for uprobe PMU probes, which need none).
fn calibration(
    group: &str,
    mode: Mode,
    pmu: bool,
    events: &[PlannedEvent],
    placements: &PerTarget<Option<Placement>>,
    opts: &ProbeOptions,
    caps: &Capabilities,
) -> (Option<Calibration>, Vec<ProbeDef>) {
    let mut defs = Vec::new();
    let timed = !opts.count_only;
    let method = match mode {
        Mode::Counters => Method::Counter,
        Mode::Sampled if events.iter().any(PlannedEvent::ring) => Method::Ring,
        Mode::Sampled => Method::Perf,
    };
    let used = |c: ProbeClass| placements.values().flatten().any(|p| p.class == c);
    let fetch = if mode == Mode::Counters || !timed {
        Vec::new()
    } else {
        vec![SP_FETCH.to_string()]
    };
    let mut sites = Vec::new();
    for (class, path, offset) in caps.calibration_sites.iter().filter(|s| used(s.0)) {
        let tag = match class {
            ProbeClass::Emulated => "e",
            ProbeClass::SingleStepped => "s",
        };
        let mut names = vec![format!("cal_{tag}")];
        if timed {
            names.push(format!("calr_{tag}"));
        }
        if pmu {
            names.clear();
        }
        for (i, name) in names.iter().enumerate() {
            defs.push(ProbeDef {
                group: group.to_string(),
                event: name.clone(),
                is_return: i == 1,
                location: ProbeLocation::User {
                    path: path.clone(),
                    offset: *offset,
                    ref_ctr: None,
                },
                fetch: fetch.clone(),
            });
        }
        sites.push(CalibrationSite {
            class: *class,
            path: path.clone(),
            offset: *offset,
            events: names,
        });
    }
    let cal = (!sites.is_empty()).then_some(Calibration {
        method,
        pmu,
        timed,
        sites,
    });
    (cal, defs)
}

/// An event before its engine is chosen.
struct Unplaced {
    group: String,
    event: String,
    role: Role,
    members: Vec<TargetId>,
    user: bool,
    /// The uprobe PMU probe it is, if any (no tracefs probe then).
    pmu_at: Option<(PathBuf, u64)>,
}

impl Unplaced {
    fn with_source(self, source: Source) -> PlannedEvent {
        PlannedEvent {
            group: self.group,
            event: self.event,
            role: self.role,
            members: self.members,
            user: self.user,
            source,
        }
    }
}

/// How probe points are grouped into tracefs events.
struct Points<'a> {
    group: &'a str,
    /// Syscalls are read from `raw_syscalls` (see [`MAX_SYSCALL_EVENTS`]).
    raw_syscalls: bool,
    count_only: bool,
    /// One event per target (counters, uprobe PMU probes).
    one_per_target: bool,
    /// User functions without values become uprobe PMU probes.
    pmu: bool,
    placements: &'a PerTarget<Option<Placement>>,
}

impl Points<'_> {
    /// The probe definitions and the events of `targets`, each event with its uprobe PMU probe if it is one.
    ///
    /// User functions of one binary share events `u<N>` (entries) and `ur<N>` (returns), up to
    /// [`POINTS_PER_EVENT`] functions each (one function per event with `one_per_target`, and for functions that
    /// fetch values); kernel function `i` gets `k<i>` and `kr<i>`, USDT probe `i` gets `s<i>`, a `--pair` `a<i>`
    /// (its start) and `ar<i>` (its done); syscalls and tracepoints use the kernel's own events. No return
    /// probes with `count_only`; timed user probes fetch the stack pointer ([`SP_FETCH`]) and every probe
    /// fetches its target's values.
    fn plan(&self, targets: &Targets) -> (Vec<ProbeDef>, Vec<Unplaced>) {
        let mut defs = Vec::new();
        let mut events = Vec::new();
        self.user_functions(targets, &mut defs, &mut events);
        let mut raw = Vec::new();
        for (id, t) in targets.iter() {
            match &t.kind {
                TargetKind::Syscall { name }
                    if self.raw_syscalls && syscall_number(name).is_some() =>
                {
                    raw.push(id)
                }
                _ => self.other(id, t, &mut defs, &mut events),
            }
        }
        if !raw.is_empty() {
            let ev = |e: &str, role| Unplaced {
                group: RAW_SYSCALLS.into(),
                ..self.event(e.into(), role, raw.clone(), false)
            };
            events.push(ev("sys_enter", Role::Entry));
            if !self.count_only {
                events.push(ev("sys_exit", Role::Return));
            }
        }
        (defs, events)
    }

    /// User functions, chunked per binary (alone when they fetch values).
    fn user_functions(
        &self,
        targets: &Targets,
        defs: &mut Vec<ProbeDef>,
        events: &mut Vec<Unplaced>,
    ) {
        let per_event = if self.one_per_target {
            1
        } else {
            POINTS_PER_EVENT
        };
        let mut chunks: Vec<(PathBuf, Vec<TargetId>)> = Vec::new();
        for (id, t) in targets.iter() {
            let TargetKind::User { path, .. } = &t.kind else {
                continue;
            };
            let joins = |(p, m): &&mut (PathBuf, Vec<TargetId>)| {
                p == path
                    && m.len() < per_event
                    && t.fetches.is_empty()
                    && targets[m[0]].fetches.is_empty()
                    && self.go_returns(id) == self.go_returns(m[0])
            };
            match chunks.iter_mut().rev().find(joins) {
                Some((_, m)) => m.push(id),
                None => chunks.push((path.clone(), vec![id])),
            }
        }
        for (n, (_, members)) in chunks.into_iter().enumerate() {
            let (entry, ret) = (format!("u{n}"), format!("ur{n}"));
            let mut pmu_at = None;
            for &m in &members {
                let t = &targets[m];
                let TargetKind::User { path, offset, .. } = &t.kind else {
                    continue;
                };
                let placed = self.placements[m].as_ref();
                let offset = offset.0 + placed.map_or(0, |p| p.offset);
                let go = self.go_returns(m);
                if self.pmu && self.one_per_target && t.fetches.is_empty() && !go {
                    pmu_at = Some((path.clone(), offset));
                    continue;
                }
                let loc = |offset| ProbeLocation::User {
                    path: path.clone(),
                    offset,
                    ref_ctr: None,
                };
                if go {
                    let with_g = |mut args: Vec<String>| {
                        args.insert(0, G_FETCH.to_string());
                        args
                    };
                    let start = offset - placed.map_or(0, |p| p.offset);
                    defs.push(self.def(
                        &entry,
                        false,
                        &loc(offset),
                        with_g(fetch_args(t, false, false)),
                    ));
                    for r in placed.and_then(|p| p.returns.as_deref()).unwrap_or(&[]) {
                        let args = with_g(fetch_args(t, true, false));
                        defs.push(self.def(&ret, false, &loc(start + r), args));
                    }
                    continue;
                }
                defs.push(self.def(
                    &entry,
                    false,
                    &loc(offset),
                    fetch_args(t, false, !self.count_only),
                ));
                if !self.count_only {
                    defs.push(self.def(&ret, true, &loc(offset), fetch_args(t, true, true)));
                }
            }
            let event = |name: String, role| Unplaced {
                pmu_at: pmu_at.clone(),
                ..self.event(name, role, members.clone(), true)
            };
            // No return event when no member has a return probe (Go functions counted only).
            let returns = pmu_at.is_some() || defs.iter().any(|d| d.event == ret);
            events.push(event(entry, Role::Entry));
            if !self.count_only && returns {
                events.push(event(ret, Role::Return));
            }
        }
    }

    /// Kernel functions, USDT probes, pairs, syscalls and tracepoints: an event (or two) each.
    fn other(
        &self,
        id: TargetId,
        t: &Target,
        defs: &mut Vec<ProbeDef>,
        events: &mut Vec<Unplaced>,
    ) {
        let i = id.index();
        let one = vec![id];
        let mut push = |e: Unplaced| events.push(e);
        match &t.kind {
            TargetKind::User { .. } => {}
            TargetKind::Kernel { symbol } => {
                let loc = ProbeLocation::Kernel {
                    symbol: symbol.clone(),
                };
                let (entry, ret) = (format!("k{i}"), format!("kr{i}"));
                defs.push(self.def(&entry, false, &loc, fetch_args(t, false, false)));
                push(self.event(entry, Role::Entry, one.clone(), false));
                if !self.count_only {
                    defs.push(self.def(&ret, true, &loc, fetch_args(t, true, false)));
                    push(self.event(ret, Role::Return, one, false));
                }
            }
            TargetKind::Usdt { .. } => {
                let name = format!("s{i}");
                let loc = uprobe_location(&t.kind);
                defs.push(self.def(&name, false, &loc, fetch_args(t, false, false)));
                push(self.event(name, Role::Hit, one, true));
            }
            TargetKind::Pair { start, done } => {
                let (entry, ret) = (format!("a{i}"), format!("ar{i}"));
                let (s, d) = (uprobe_location(start), uprobe_location(done));
                defs.push(self.def(&entry, false, &s, fetch_args(t, false, false)));
                defs.push(self.def(&ret, false, &d, fetch_args(t, true, false)));
                push(self.event(entry, Role::Entry, one.clone(), true));
                push(self.event(ret, Role::Return, one, true));
            }
            TargetKind::Syscall { name } => {
                let ev = |e: String, role| Unplaced {
                    group: "syscalls".into(),
                    ..self.event(e, role, one.clone(), false)
                };
                push(ev(format!("sys_enter_{name}"), Role::Entry));
                if !self.count_only {
                    push(ev(format!("sys_exit_{name}"), Role::Return));
                }
            }
            TargetKind::Tracepoint { category, event } => push(Unplaced {
                group: category.clone(),
                ..self.event(event.clone(), Role::Hit, one, false)
            }),
        }
    }

    /// Whether target `id` is timed the Go way: uprobes on its `ret`s, paired by goroutine.
    fn go_returns(&self, id: TargetId) -> bool {
        !self.count_only
            && self.placements[id]
                .as_ref()
                .is_some_and(|p| p.returns.is_some())
    }

    fn def(
        &self,
        event: &str,
        is_return: bool,
        location: &ProbeLocation,
        fetch: Vec<String>,
    ) -> ProbeDef {
        ProbeDef {
            group: self.group.to_string(),
            event: event.to_string(),
            is_return,
            location: location.clone(),
            fetch,
        }
    }

    fn event(&self, event: String, role: Role, members: Vec<TargetId>, user: bool) -> Unplaced {
        Unplaced {
            group: self.group.into(),
            event,
            role,
            members,
            user,
            pmu_at: None,
        }
    }
}

/// The fetch arguments of a target's entry or return probe: the stack pointer first when `sp`.
fn fetch_args(t: &Target, is_return: bool, sp: bool) -> Vec<String> {
    let mut args = Vec::new();
    if sp {
        args.push(SP_FETCH.to_string());
    }
    args.extend(
        t.fetches
            .iter()
            .filter(|f| f.on_return == is_return)
            .flat_map(|f| std::iter::once(f.arg()).chain(f.len_arg())),
    );
    args
}

/// The uprobe location of a user function or USDT probe (with its semaphore).
fn uprobe_location(kind: &TargetKind) -> ProbeLocation {
    let (path, offset, ref_ctr) = kind
        .uprobe_at()
        .expect("pairs and USDT targets are uprobes");
    ProbeLocation::User {
        path: path.to_path_buf(),
        offset,
        ref_ctr,
    }
}
