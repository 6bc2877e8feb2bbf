//! The event plan: the events of an event list resolved into what the kernel opens. Perf-type events (software,
//! hardware, cache, raw) become attrs with their modifiers; tracepoints (globs allowed) become tracefs ids
//! with their formats; probe points (`u:BIN:FUNC`, `probe:FUNC` with `-x BIN`, `kprobe:FUNC` where the kernel
//! has kprobes) are created for the plan's lifetime, each with perf's `--filter` run in the kernel. Probe
//! points are tracefs probes of the group `rprof_<pid>`, removed when the plan is dropped (and by the
//! supervisor process when rprof is killed), so that a recording holds their format as perf's does.
use super::grammar::{self, EventSpec, Kind};
use super::group::{self, ProbeGroup};
use super::supervisor::Supervisor;
use super::EventError;
use crate::perf::Attr;
use crate::probe::TargetKind;
use crate::recording::TracingEvent;
use crate::symbols::DebugSources;
use crate::tracefs::{ProbeDef, ProbeLocation, Tracefs};
use std::path::{Path, PathBuf};

/// An event of the plan, resolved.
#[derive(Clone, Debug)]
pub struct PlannedEvent {
    /// Its name as perf prints it (`cs:u`, `sched:sched_switch`, `probe_prog:func_d`).
    pub name: String,
    pub kind: PlannedKind,
    /// The kernel's filter text (PERF_EVENT_IOC_SET_FILTER).
    pub filter: Option<String>,
}

/// What the kernel opens for a planned event.
#[derive(Clone, Debug)]
pub enum PlannedKind {
    /// A perf-type event: its counting attr with the modifiers written, and whether it needs the CPU's PMU.
    Perf { attr: Attr, clock: bool, pmu: bool },
    /// A tracefs event (a tracepoint or one of the plan's probes): its id, where it is in tracefs
    /// (`events/SYSTEM/EVENT`) and its format.
    Trace {
        id: u64,
        system: String,
        event: String,
        format: String,
    },
    /// A syscall as perf trace shows it, from its `syscalls:sys_enter_NAME` (id: counted there) to its
    /// `sys_exit_NAME`; only [`super::plan_trace`] plans them.
    Syscall { name: String, id: u64 },
}

impl PlannedEvent {
    /// The event's counting attr (a tracefs event counts every hit).
    pub fn attr(&self) -> Attr {
        match &self.kind {
            PlannedKind::Perf { attr, .. } => *attr,
            PlannedKind::Trace { id, .. } | PlannedKind::Syscall { id, .. } => {
                Attr::tracepoint(*id)
            }
        }
    }

    /// A software clock (`cpu-clock`, `task-clock`).
    pub fn is_clock(&self) -> bool {
        matches!(self.kind, PlannedKind::Perf { clock: true, .. })
    }

    /// A tracefs event (a tracepoint, a probe point, a syscall's pair).
    pub fn is_trace(&self) -> bool {
        matches!(
            self.kind,
            PlannedKind::Trace { .. } | PlannedKind::Syscall { .. }
        )
    }

    /// An event that needs the CPU's PMU on a machine that has none: the line that says so.
    pub fn pmu_missing(&self) -> Option<String> {
        match self.kind {
            PlannedKind::Perf { pmu: true, .. } if !super::hardware::pmu_present() => {
                Some(super::hardware::pmu_missing(&self.name))
            }
            _ => None,
        }
    }
}

/// The plan's probe points: removed (group first, then the supervisor told) when dropped, after the
/// events on them are closed.
struct Probes {
    _group: ProbeGroup,
    _supervisor: Option<Supervisor>,
}

/// The events of a plan, the probes created for them, and the tracefs their formats come from. Drop it after
/// the events opened on it are closed.
pub struct Plan {
    pub events: Vec<PlannedEvent>,
    _probes: Option<Probes>,
    pub tracefs: Option<Tracefs>,
}

impl Plan {
    /// Whether every event is a tracefs event.
    pub fn all_trace(&self) -> bool {
        !self.events.is_empty() && self.events.iter().all(PlannedEvent::is_trace)
    }

    /// The HEADER_TRACING_DATA section of a recording of the plan, when it has tracefs events.
    pub fn tracing_data(&self) -> Option<Vec<u8>> {
        let tracefs = self.tracefs.as_ref()?;
        let events: Vec<TracingEvent> = self
            .events
            .iter()
            .filter_map(|e| match &e.kind {
                PlannedKind::Trace { system, format, .. } => Some(TracingEvent {
                    system: system.clone(),
                    format: format.clone(),
                }),
                PlannedKind::Perf { .. } | PlannedKind::Syscall { .. } => None,
            })
            .collect();
        if events.is_empty() {
            return None;
        }
        let read = |name: &str| read_in_one(&tracefs.root().join("events").join(name));
        Some(crate::recording::encode_tracing_data(
            &read("header_page"),
            &read("header_event"),
            crate::perf::ring::page_size() as u32,
            &events,
        ))
    }
}

/// A tracefs file read with one large read: `events/header_page` answers a read at an offset with nothing,
/// so the small first read of `read_to_string` would cut it at 32 bytes.
fn read_in_one(path: &Path) -> String {
    use std::io::Read;
    let mut buf = vec![0u8; 64 << 10];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut buf))
        .unwrap_or(0);
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// Plan the events of `specs`, creating the probe points they need; `binary` is the `-x BINARY` that
/// `probe:FUNC` names a function of.
pub fn plan(specs: &[EventSpec], binary: Option<&Path>) -> Result<Plan, EventError> {
    let parsed: Vec<grammar::Event> = specs.iter().map(grammar::parse).collect::<Result<_, _>>()?;
    let tracefs = match parsed.iter().all(|e| !e.is_trace()) {
        true => None,
        false => Some(Tracefs::find_or_mount().map_err(probe_error)?),
    };
    let mut events = Vec::new();
    let mut defs: Vec<(usize, ProbeDef, String)> = Vec::new();
    let group = group::group_name(std::process::id());
    for (spec, event) in specs.iter().zip(&parsed) {
        match named(event, binary, tracefs.as_ref())? {
            Named::Perf(attr) => events.push(PlannedEvent {
                name: spec.name.clone(),
                kind: PlannedKind::Perf {
                    attr,
                    clock: matches!(event.kind, Kind::Software(s) if s.is_clock()),
                    pmu: event.needs_pmu(),
                },
                filter: None,
            }),
            Named::Tracepoints { system, event } => {
                let tracefs = tracefs.as_ref().expect("tracefs for tracepoints");
                for (system, event) in tracepoints(tracefs, &system, &event, spec)? {
                    let mut e =
                        trace_event(tracefs, &system, &event, &format!("{system}:{event}"))?;
                    e.filter = filter(spec, &e)?;
                    events.push(e);
                }
            }
            Named::User { binary, function } => {
                for (def, name) in user_probes(&binary, &function, &group, spec)? {
                    defs.push((events.len(), def, name));
                    events.push(placeholder(spec));
                }
            }
            Named::Kernel { function } => {
                let tracefs = tracefs.as_ref().expect("tracefs for kprobes");
                let def = kprobe_def(tracefs, spec, &function, &group, &defs)?;
                defs.push((events.len(), def, format!("probe:{function}")));
                events.push(placeholder(spec));
            }
        }
    }
    let probes = match defs.is_empty() {
        true => None,
        false => {
            let tracefs = tracefs.as_ref().expect("tracefs for probes");
            let probes = create_probes(tracefs, &group, &defs)?;
            for (at, def, name) in &defs {
                let spec = &events[*at].filter;
                let mut e = trace_event(tracefs, &group, &def.event, name)?;
                e.filter = filter(
                    &EventSpec {
                        name: name.clone(),
                        filter: spec.clone(),
                    },
                    &e,
                )?;
                events[*at] = e;
            }
            Some(probes)
        }
    };
    Ok(Plan {
        events,
        _probes: probes,
        tracefs,
    })
}

/// The kprobe of `function`, where the kernel has kprobes.
fn kprobe_def(
    tracefs: &Tracefs,
    spec: &EventSpec,
    function: &str,
    group: &str,
    defs: &[(usize, ProbeDef, String)],
) -> Result<ProbeDef, EventError> {
    if !tracefs.has_kprobes() {
        return Err(EventError::Config(format!(
            "-e {}: this kernel has no kprobes (tracefs has no kprobe_events: CONFIG_KPROBE_EVENTS is \
             off), so kernel function {function} cannot be probed; record a tracepoint instead \
             (`rprof probe -l 't:*:*'` lists them), or a user function with -e u:BINARY:FUNCTION",
            spec.name
        )));
    }
    Ok(ProbeDef {
        group: group.to_string(),
        event: unique_event(function, defs),
        is_return: false,
        location: ProbeLocation::Kernel {
            symbol: function.to_string(),
        },
        fetch: Vec::new(),
    })
}

/// A probe's event until the probe exists: its `--filter` text waits in `filter`.
fn placeholder(spec: &EventSpec) -> PlannedEvent {
    PlannedEvent {
        name: spec.name.clone(),
        kind: PlannedKind::Trace {
            id: 0,
            system: String::new(),
            event: String::new(),
            format: String::new(),
        },
        filter: spec.filter.clone(),
    }
}

/// What one event names, resolved against tracefs and `-x`.
enum Named {
    Perf(Attr),
    Tracepoints { system: String, event: String },
    User { binary: PathBuf, function: String },
    Kernel { function: String },
}

/// What `event` names: a perf-type event, tracepoints, a user function (`u:BIN:FUNC`, `uprobe:BIN:FUNC`,
/// `probe:FUNC` or `probe_X:FUNC` with -x), or a kernel function (`kprobe:FUNC`, `k:FUNC`, `probe:FUNC`
/// without -x).
fn named(
    event: &grammar::Event,
    binary: Option<&Path>,
    tracefs: Option<&Tracefs>,
) -> Result<Named, EventError> {
    if let Some(attr) = event.attr() {
        return Ok(Named::Perf(attr));
    }
    let text = &event.written;
    let exists = |system: &str, event: &str| {
        tracefs.is_some_and(|t| t.root().join("events").join(system).join(event).exists())
    };
    Ok(match &event.kind {
        Kind::UserProbe { binary, function } => Named::User {
            binary: binary_path(binary)?,
            function: function.clone(),
        },
        Kind::KernelProbe { function } => Named::Kernel {
            function: function.clone(),
        },
        Kind::ProbeNamed { system, event } if !exists(system, event) => match binary {
            Some(binary) => Named::User {
                binary: binary.to_path_buf(),
                function: event.clone(),
            },
            None if system == "probe" => Named::Kernel {
                function: event.clone(),
            },
            None => {
                return Err(EventError::Config(format!(
                    "-e {text}: there is no probe event {text} (rprof's probes live only as long as the \
                     session that made them, never made by an earlier `rprof probe`); record the function \
                     with -e u:BINARY:{event}, or -x BINARY -e {text}"
                )))
            }
        },
        Kind::ProbeNamed { system, event } | Kind::Tracepoint { system, event } => Named::Tracepoints {
            system: system.clone(),
            event: event.clone(),
        },
        _ => unreachable!("perf-type events have attrs"),
    })
}

/// The binary of `u:BIN:FUNC`: a path, or a library name found as `rprof probe` finds it (`u:c:malloc`).
fn binary_path(binary: &str) -> Result<PathBuf, EventError> {
    if binary.contains('/') || Path::new(binary).exists() {
        return Ok(PathBuf::from(binary));
    }
    crate::probe::find_library(binary, None).map_err(|e| EventError::Config(e.to_string()))
}

/// The tracepoints `system:event` names, each `(system, event)`: either part may be a glob (`sched:*`,
/// `*:sched_switch`), as perf takes them.
fn tracepoints(
    tracefs: &Tracefs,
    system: &str,
    event: &str,
    spec: &EventSpec,
) -> Result<Vec<(String, String)>, EventError> {
    let glob = |text: &str| {
        globset::Glob::new(text)
            .map(|g| g.compile_matcher())
            .map_err(|e| EventError::Config(format!("-e {}: {e}", spec.name)))
    };
    let (systems, events) = (glob(system)?, glob(event)?);
    let mut found = Vec::new();
    for s in tracefs.categories().unwrap_or_default() {
        if !systems.is_match(&s) {
            continue;
        }
        for e in tracefs.events(&s).unwrap_or_default() {
            if events.is_match(&e) {
                found.push((s.clone(), e));
            }
        }
    }
    if found.is_empty() {
        return Err(EventError::Config(format!(
            "-e {}: no tracepoint {system}:{event} in {} (`rprof probe -l 't:{system}:*'` lists the events of \
             {system}; a user function is u:BINARY:FUNCTION)",
            spec.name,
            tracefs.root().join("events").display()
        )));
    }
    Ok(found)
}

/// The tracefs event `system/event` (its id and format), named `name` in the recording.
fn trace_event(
    tracefs: &Tracefs,
    system: &str,
    event: &str,
    name: &str,
) -> Result<PlannedEvent, EventError> {
    Ok(PlannedEvent {
        name: name.to_string(),
        kind: PlannedKind::Trace {
            id: tracefs.event_id(system, event).map_err(probe_error)?,
            system: system.to_string(),
            event: event.to_string(),
            format: tracefs.event_format(system, event).map_err(probe_error)?,
        },
        filter: None,
    })
}

/// The kernel filter of `spec`'s `--filter` on event `e`.
fn filter(spec: &EventSpec, e: &PlannedEvent) -> Result<Option<String>, EventError> {
    let (Some(text), PlannedKind::Trace { format, .. }) = (&spec.filter, &e.kind) else {
        return Ok(None);
    };
    crate::probe::kernel_filter(text, format)
        .map(Some)
        .map_err(|why| EventError::Config(format!("--filter '{text}' on {}: {why}", e.name)))
}

/// The probe points of the functions of `binary` that `function` (a glob) names, each with its event name in
/// the recording (`probe_BINARY:FUNCTION`, as `perf probe -x` names them).
fn user_probes(
    binary: &Path,
    function: &str,
    group: &str,
    spec: &EventSpec,
) -> Result<Vec<(ProbeDef, String)>, EventError> {
    let targets = crate::probe::resolve_user(binary, function, false, &DebugSources::default())
        .map_err(|e| EventError::Config(format!("-e {}: {e}", spec.name)))?;
    let stem = sanitize(
        &binary
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    );
    let mut out: Vec<(ProbeDef, String)> = Vec::new();
    for t in targets {
        let TargetKind::User { path, offset, .. } = &t.kind else {
            continue;
        };
        let event = sanitize(&t.name);
        let event = match out.iter().any(|(d, _)| d.event == event) {
            true => format!("{event}_{}", out.len()),
            false => event,
        };
        let def = ProbeDef {
            group: group.to_string(),
            event: event.clone(),
            is_return: false,
            location: ProbeLocation::User {
                path: path.clone(),
                offset: offset.0 + after_frame_setup(path, offset.0),
                ref_ctr: None,
            },
            fetch: Vec::new(),
        };
        out.push((def, format!("probe_{stem}:{event}")));
    }
    Ok(out)
}

/// How many bytes of a function's start set up its frame (`endbr64`, `push %rbp`, `mov %rsp,%rbp`), 0 when
/// it does not start so. The probe goes after them, where `perf probe` puts it from the debug info's end of
/// the prologue: there the frame-pointer walk finds the caller's frame (at the first instruction it would
/// skip the direct caller), and the sample is still in the function.
fn after_frame_setup(path: &Path, offset: u64) -> u64 {
    use std::os::unix::fs::FileExt;
    let mut code = [0u8; 8];
    let read = std::fs::File::open(path).and_then(|f| f.read_at(&mut code, offset));
    if read.map_or(true, |n| n < code.len()) {
        return 0;
    }
    let start = if code.starts_with(&[0xf3, 0x0f, 0x1e, 0xfa]) {
        4
    } else {
        0
    };
    match code[start..] {
        [0x55, 0x48, 0x89, 0xe5, ..] => start as u64 + 4,
        _ => 0,
    }
}

/// `name` in tracefs's event-name alphabet `[A-Za-z0-9_]`, starting with a letter or `_`.
fn sanitize(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .take(64)
        .collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, '_');
    }
    s
}

/// A kprobe event name not yet taken.
fn unique_event(function: &str, defs: &[(usize, ProbeDef, String)]) -> String {
    let event = sanitize(function);
    match defs.iter().any(|(_, d, _)| d.event == event) {
        true => format!("{event}_{}", defs.len()),
        false => event,
    }
}

/// Create the probe points (after removing those of rprof processes that are gone), with the supervisor that
/// removes them if rprof is killed.
fn create_probes(
    tracefs: &Tracefs,
    group: &str,
    defs: &[(usize, ProbeDef, String)],
) -> Result<Probes, EventError> {
    let _ = group::remove_stale(tracefs);
    let supervisor = Supervisor::spawn(tracefs, group).ok();
    let defs: Vec<ProbeDef> = defs.iter().map(|(_, d, _)| d.clone()).collect();
    let group = ProbeGroup::create(tracefs, group, &defs).map_err(probe_error)?;
    Ok(Probes {
        _group: group,
        _supervisor: supervisor,
    })
}

fn probe_error(e: crate::tracefs::TracefsError) -> EventError {
    EventError::Config(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that event names keep to tracefs's alphabet.
    #[test]
    fn names_are_sanitized() {
        assert_eq!(sanitize("func_d"), "func_d");
        assert_eq!(sanitize("ns::f<int>"), "ns__f_int_");
        assert_eq!(sanitize("1x"), "_1x");
    }

    /// Check that either part of a tracepoint may be a glob, as perf takes them, and that none found is an
    /// error naming the place looked in.
    #[test]
    fn tracepoint_globs_in_system_and_event() {
        let dir = tempfile::tempdir().unwrap();
        for e in [
            "sched/sched_switch",
            "sched/sched_wakeup",
            "irq/irq_handler_entry",
        ] {
            std::fs::create_dir_all(dir.path().join("events").join(e)).unwrap();
        }
        let t = Tracefs::at(dir.path());
        let found = |s: &str, e: &str| tracepoints(&t, s, e, &EventSpec::new(&format!("{s}:{e}")));
        let pair = |s: &str, e: &str| (s.to_string(), e.to_string());
        assert_eq!(
            found("*", "sched_switch").unwrap(),
            [pair("sched", "sched_switch")]
        );
        assert_eq!(
            found("sched", "sched_*").unwrap(),
            [pair("sched", "sched_switch"), pair("sched", "sched_wakeup")]
        );
        assert_eq!(found("*", "*").unwrap().len(), 3);
        let none = found("sched", "nope").unwrap_err().to_string();
        assert!(none.contains("no tracepoint sched:nope in"), "{none}");
    }
}
