//! How probe points are grouped into tracefs events, and the probe definitions of each target.
#[cfg(doc)]
use super::MAX_SYSCALL_EVENTS;
use super::{
    shares_raw, Placement, PlannedEvent, Role, Source, G_FETCH, POINTS_PER_EVENT, RAW_SYSCALLS,
    SP_FETCH,
};
use crate::perf::software::{Sample, SoftwareEvent};
use crate::probe::spec::fetch::FetchSource;
use crate::probe::spec::register::SampledRegs;
use crate::probe::target::{PairSpec, PerTarget, Target, TargetId, TargetKind, Targets, DONE_BIT};
use crate::probe::value::ValueKind;
use crate::tracefs::{ProbeDef, ProbeLocation};
use std::path::PathBuf;

/// An event before its engine is chosen.
pub(super) struct Unplaced {
    pub(super) group: String,
    pub(super) event: String,
    pub(super) role: Role,
    pub(super) members: Vec<TargetId>,
    pub(super) user: bool,
    /// The uprobe PMU probe it is, if any (no tracefs probe then).
    pub(super) pmu_at: Option<(PathBuf, u64)>,
    /// The file its uprobes are in, when its targets are not user functions (syscall sites in libc).
    pub(super) file: Option<PathBuf>,
    /// Read on every CPU for every task (a keyed pair's ends fire in other tasks' contexts).
    pub(super) everywhere: bool,
    /// The software event it is (no tracefs probe then).
    pub(super) software: Option<(&'static SoftwareEvent, Sample)>,
    /// The registers a software event's samples carry for its fetches.
    pub(super) regs: SampledRegs,
}

impl Unplaced {
    pub(super) fn with_source(self, source: Source, filter: Option<String>) -> PlannedEvent {
        PlannedEvent {
            group: self.group,
            event: self.event,
            role: self.role,
            members: self.members,
            user: self.user,
            everywhere: self.everywhere,
            source,
            filter,
        }
    }
}

/// How probe points are grouped into tracefs events.
pub(super) struct Points<'a> {
    pub(super) group: &'a str,
    /// Syscalls without values are read from `raw_syscalls` (see [`MAX_SYSCALL_EVENTS`]).
    pub(super) raw_syscalls: bool,
    pub(super) count_only: bool,
    /// One event per target (counters, uprobe PMU probes).
    pub(super) one_per_target: bool,
    /// User functions without values become uprobe PMU probes.
    pub(super) pmu: bool,
    pub(super) placements: &'a PerTarget<Option<Placement>>,
    /// Event probes read tracepoint fields and their strings (else uprobes at syscall instructions).
    pub(super) event_probes: bool,
}

impl Points<'_> {
    /// The probe definitions and the events of `targets`, each event with its uprobe PMU probe if it is one.
    ///
    /// User functions of one binary share events `u<N>` (entries) and `ur<N>` (returns), up to
    /// [`POINTS_PER_EVENT`] functions each (one function per event with `one_per_target`, and for functions that
    /// fetch values); kernel function `i` gets `k<i>` and `kr<i>`, USDT probe `i` gets `s<i>`, a `--pair` `a<i>`
    /// (its start) and `ar<i>` (its done); syscalls and tracepoints use the kernel's own events; a software
    /// event (`profile:hz:99`) is a perf event of its own, `software/NAME`, without a probe. No return
    /// probes with `count_only`; timed user probes fetch the stack pointer ([`SP_FETCH`]) and every probe
    /// fetches its target's values.
    pub(super) fn plan(&self, targets: &Targets) -> (Vec<ProbeDef>, Vec<Unplaced>) {
        let mut defs = Vec::new();
        let mut events = Vec::new();
        self.user_functions(targets, &mut defs, &mut events);
        let mut raw = Vec::new();
        for (id, t) in targets.iter() {
            match self.raw_syscalls && shares_raw(t) {
                true => raw.push(id),
                false => self.other(id, t, &mut defs, &mut events),
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
                    && t.filter.is_none()
                    && targets[m[0]].fetches.is_empty()
                    && targets[m[0]].filter.is_none()
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
                if self.pmu
                    && self.one_per_target
                    && t.fetches.is_empty()
                    && t.filter.is_none()
                    && !go
                {
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
            TargetKind::Pair(p) => self.pair(id, t, p, defs, events),
            // A perf event of its own, named for messages only.
            TargetKind::Software { event, sample } => push(Unplaced {
                group: "software".into(),
                software: Some((event, *sample)),
                regs: SampledRegs::of(&t.fetches),
                ..self.event(event.name.into(), Role::Hit, one, false)
            }),
            TargetKind::Syscall { name } => self.syscall(id, t, name, defs, events),
            TargetKind::Tracepoint { category, event } => {
                if self.event_probes && has_strings(t) {
                    let name = format!("y{i}");
                    defs.push(self.event_probe_def(&name, category, event, t));
                    push(self.event(name, Role::Hit, one, false));
                } else {
                    // A syscall's entry: its strings read at its `syscall` instructions.
                    self.site_events(id, t, defs, &mut push);
                    push(Unplaced {
                        group: category.clone(),
                        ..self.event(event.clone(), Role::Hit, one, false)
                    });
                }
            }
        }
    }

    /// A pair's ends: an event per user or kernel function and USDT probe (`a<i>` its first START, `a<i>s<k>`
    /// START k, `ar<i>` its DONE), and one per tracepoint, whatever ends it is (`sched_switch`: a START and the
    /// DONE), its role naming them.
    fn pair(
        &self,
        id: TargetId,
        t: &Target,
        p: &PairSpec,
        defs: &mut Vec<ProbeDef>,
        events: &mut Vec<Unplaced>,
    ) {
        let i = id.index();
        let one = vec![id];
        let mut tracepoints: Vec<(&str, &str, u32)> = Vec::new();
        for (bit, end) in p.ends() {
            let name = match (bit, bit.trailing_zeros()) {
                (DONE_BIT, _) => format!("ar{i}"),
                (_, 0) => format!("a{i}"),
                (_, k) => format!("a{i}s{k}"),
            };
            let fetch: Vec<String> = t.fetches[end.fetches.clone()]
                .iter()
                .flat_map(|f| std::iter::once(f.arg()).chain(f.len_arg()))
                .collect();
            let event = match &end.kind {
                TargetKind::Tracepoint { category, event } => {
                    match tracepoints
                        .iter_mut()
                        .find(|(c, e, _)| c == category && e == event)
                    {
                        Some((_, _, mask)) => *mask |= bit,
                        None => tracepoints.push((category, event, bit)),
                    }
                    continue;
                }
                TargetKind::Kernel { symbol } => {
                    let loc = ProbeLocation::Kernel {
                        symbol: symbol.clone(),
                    };
                    defs.push(self.def(&name, false, &loc, fetch));
                    self.event(name, Role::Pair(bit), one.clone(), false)
                }
                kind => {
                    defs.push(self.def(&name, false, &uprobe_location(kind), fetch));
                    self.event(name, Role::Pair(bit), one.clone(), true)
                }
            };
            events.push(Unplaced {
                everywhere: p.keyed,
                ..event
            });
        }
        for (category, event, mask) in tracepoints {
            events.push(Unplaced {
                group: category.to_string(),
                everywhere: p.keyed,
                ..self.event(event.to_string(), Role::Pair(mask), one.clone(), false)
            });
        }
    }

    /// A syscall: `sys_enter_NAME` (or, for its user strings, an event probe on it), `sys_exit_NAME`, and
    /// without event probes, uprobes at its `syscall` instructions for the strings.
    fn syscall(
        &self,
        id: TargetId,
        t: &Target,
        name: &str,
        defs: &mut Vec<ProbeDef>,
        events: &mut Vec<Unplaced>,
    ) {
        let one = vec![id];
        let enter = format!("sys_enter_{name}");
        let strings = format!("y{}", id.index());
        let kernel = |e: String, role| Unplaced {
            group: "syscalls".into(),
            ..self.event(e, role, one.clone(), false)
        };
        if self.event_probes && has_strings(t) {
            defs.push(self.event_probe_def(&strings, "syscalls", &enter, t));
            events.push(self.event(strings, Role::Entry, one.clone(), false));
        } else {
            events.push(kernel(enter, Role::Entry));
            self.site_events(id, t, defs, &mut |e| events.push(e));
        }
        if !self.count_only {
            events.push(kernel(format!("sys_exit_{name}"), Role::Return));
        }
    }

    /// The uprobes at the `syscall` instructions of `t`'s syscall that read its strings (event `yID` of each
    /// file, a [`Role::Value`] for the entry that follows).
    fn site_events(
        &self,
        id: TargetId,
        t: &Target,
        defs: &mut Vec<ProbeDef>,
        push: &mut dyn FnMut(Unplaced),
    ) {
        let strings = format!("y{}", id.index());
        let args = site_args(t);
        for (path, offsets) in t.syscall_sites.iter().filter(|_| !args.is_empty()) {
            for &offset in offsets {
                let loc = ProbeLocation::User {
                    path: path.clone(),
                    offset,
                    ref_ctr: None,
                };
                defs.push(self.def(&strings, false, &loc, args.clone()));
            }
            push(Unplaced {
                file: Some(path.clone()),
                ..self.event(strings.clone(), Role::Value, vec![id], true)
            });
        }
    }

    /// An event probe on `system.event` reading every entry value of `t` (its fields, and the user strings its
    /// pointer fields point to).
    fn event_probe_def(&self, name: &str, system: &str, event: &str, t: &Target) -> ProbeDef {
        let loc = ProbeLocation::Event {
            system: system.into(),
            event: event.into(),
        };
        self.def(name, false, &loc, event_probe_args(t))
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
            file: None,
            everywhere: false,
            software: None,
            regs: SampledRegs::default(),
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

/// Whether a target reads user strings that its event does not hold.
fn has_strings(t: &Target) -> bool {
    t.fetches
        .iter()
        .any(|f| matches!(f.source, FetchSource::UserString { .. }))
}

/// The arguments of an event probe for `t`'s entry values: `FIELD=$FIELD:TYPE`, strings of pointer fields
/// `FIELD=+0($FIELD):ustring`, char arrays `FIELD=$FIELD:string`.
fn event_probe_args(t: &Target) -> Vec<String> {
    t.fetches
        .iter()
        .filter(|f| !f.on_return)
        .filter_map(|f| {
            let field = &f.field;
            Some(match (&f.source, f.kind) {
                (FetchSource::UserString { .. }, _) => format!("{field}=+0(${field}):ustring"),
                (FetchSource::Field, ValueKind::Str | ValueKind::Chars { .. }) => {
                    format!("{field}=${field}:string")
                }
                (
                    FetchSource::Field,
                    ValueKind::Int { size, signed } | ValueKind::Named { size, signed },
                ) => {
                    format!(
                        "{field}=${field}:{}{}",
                        if signed { 's' } else { 'u' },
                        u32::from(size) * 8
                    )
                }
                (FetchSource::Field, ValueKind::Hex { size }) => {
                    format!("{field}=${field}:x{}", u32::from(size) * 8)
                }
                (FetchSource::Field, ValueKind::Dev) => format!("{field}=${field}:u32"),
                (FetchSource::Field, ValueKind::Signal { size } | ValueKind::Errno { size }) => {
                    format!("{field}=${field}:s{}", u32::from(size) * 8)
                }
                _ => return None,
            })
        })
        .collect()
}

/// The arguments of a uprobe at a `syscall` instruction: the user strings of `t`'s pointer arguments, from the
/// syscall argument registers.
fn site_args(t: &Target) -> Vec<String> {
    use crate::probe::spec::syscall_sites::SYSCALL_REGS;
    t.fetches
        .iter()
        .filter_map(|f| match f.source {
            FetchSource::UserString { arg: Some(n) } => {
                Some(format!("{}=+0(%{}):ustring", f.field, SYSCALL_REGS.get(n)?))
            }
            _ => None,
        })
        .collect()
}
