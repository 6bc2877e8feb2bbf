//! The events `rprof record -e` samples: the software clocks, tracepoints (`sched:sched_switch`,
//! `syscalls:sys_enter_*`, globs allowed), and probe points created for the recording's lifetime (`u:BIN:FUNC`,
//! `probe:FUNC` with `-x BIN`, `kprobe:FUNC` where the kernel has kprobes), each with perf's `--filter` run in
//! the kernel. Probe points are tracefs probes of the group `rprof_<pid>`, removed when the recording ends (and
//! by the supervisor process when rprof is killed), so that the recording holds their format as perf's does.
use super::{RecordConfig, RecordError};
use crate::perf::Attr;
use crate::probe::group::{self, ProbeGroup};
use crate::probe::{Supervisor, TargetKind};
use crate::recording::TracingEvent;
use crate::symbols::DebugSources;
use crate::tracefs::{ProbeDef, ProbeLocation, Tracefs};
use std::path::{Path, PathBuf};

/// One `-e EVENT` as written, with the `--filter` that followed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventSpec {
    pub name: String,
    pub filter: Option<String>,
}

impl EventSpec {
    /// An event without a filter.
    pub fn new(name: &str) -> EventSpec {
        EventSpec {
            name: name.to_string(),
            filter: None,
        }
    }

    /// A software clock (`cpu-clock`, `task-clock`), which has no format and no filter.
    pub fn is_clock(&self) -> bool {
        matches!(self.name.as_str(), "cpu-clock" | "task-clock")
    }
}

/// An event of the session, resolved.
#[derive(Clone, Debug)]
pub(super) struct SessionEvent {
    /// Its name in the recording (`cpu-clock`, `sched:sched_switch`, `probe_prog:func_d`).
    pub(super) name: String,
    pub(super) kind: EventKind,
    /// The kernel's filter text (PERF_EVENT_IOC_SET_FILTER).
    pub(super) filter: Option<String>,
}

#[derive(Clone, Debug)]
pub(super) enum EventKind {
    Clock {
        task: bool,
    },
    /// A tracefs event (a tracepoint or one of the session's probes): its id and format.
    Trace {
        id: u64,
        system: String,
        format: String,
    },
}

impl SessionEvent {
    /// The event's attr before the session's sample fields: a clock at the recording's rate; a tracefs
    /// event at every hit unless -c or -F was given (as perf).
    pub(super) fn attr(&self, cfg: &RecordConfig) -> Attr {
        let (attr, rate) = match &self.kind {
            EventKind::Clock { task } => (Attr::software_clock(*task), Some(cfg.rate)),
            EventKind::Trace { id, .. } => {
                (Attr::tracepoint(*id), cfg.rate_given.then_some(cfg.rate))
            }
        };
        match rate {
            Some(super::Rate::Frequency(hz)) => attr.frequency(hz),
            Some(super::Rate::Period(p)) => attr.period(p),
            None => attr,
        }
    }
}

/// The session's probe points: removed (group first, then the supervisor told) when dropped, after the
/// events on them are closed.
pub(super) struct Probes {
    _group: ProbeGroup,
    _supervisor: Option<Supervisor>,
}

/// The session's events, the probes created for them, and the tracefs their formats come from.
pub(super) struct Resolved {
    pub(super) events: Vec<SessionEvent>,
    pub(super) _probes: Option<Probes>,
    pub(super) tracefs: Option<Tracefs>,
}

impl Resolved {
    /// Whether the session records every event rather than a sample: only tracefs events, at a fixed period
    /// (no -F). The kernel writes every hit of such an event whose samples carry their period (PERF_SAMPLE_PERIOD,
    /// which record always asks for), at any -c, as `perf record -e TRACEPOINT -c N` shows. A clock is sampled
    /// at any period.
    pub(super) fn every_event(&self, cfg: &RecordConfig) -> bool {
        let every_hit = !cfg.rate_given || matches!(cfg.rate, super::Rate::Period(_));
        every_hit
            && !self.events.is_empty()
            && self
                .events
                .iter()
                .all(|e| matches!(e.kind, EventKind::Trace { .. }))
    }

    /// The HEADER_TRACING_DATA section of the recording, when it has tracefs events.
    pub(super) fn tracing_data(&self) -> Option<Vec<u8>> {
        let tracefs = self.tracefs.as_ref()?;
        let events: Vec<TracingEvent> = self
            .events
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::Trace { system, format, .. } => Some(TracingEvent {
                    system: system.clone(),
                    format: format.clone(),
                }),
                EventKind::Clock { .. } => None,
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

/// What one `-e` names.
enum Named {
    Clock { task: bool },
    Tracepoints { system: String, event: String },
    User { binary: PathBuf, function: String },
    Kernel { function: String },
}

/// Resolve the `-e` events of `cfg` (the clock of `cfg.task_clock` when there are none), creating the probe
/// points they need.
pub(super) fn resolve(cfg: &RecordConfig) -> Result<Resolved, RecordError> {
    if cfg.events.is_empty() {
        let name = if cfg.task_clock {
            "task-clock"
        } else {
            "cpu-clock"
        };
        return Ok(Resolved {
            events: vec![clock(name, cfg.task_clock)],
            _probes: None,
            tracefs: None,
        });
    }
    let tracefs = match cfg.events.iter().all(EventSpec::is_clock) {
        true => None,
        false => Some(Tracefs::find_or_mount().map_err(probe_error)?),
    };
    let mut events = Vec::new();
    let mut defs: Vec<(usize, ProbeDef, String)> = Vec::new();
    let group = group::group_name(std::process::id());
    for spec in &cfg.events {
        match name(spec, cfg, tracefs.as_ref())? {
            Named::Clock { task } => events.push(clock(&spec.name, task)),
            Named::Tracepoints { system, event } => {
                let tracefs = tracefs.as_ref().expect("tracefs for tracepoints");
                for event in tracepoints(tracefs, &system, &event, spec)? {
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
                if !tracefs.has_kprobes() {
                    return Err(RecordError::Config(format!(
                        "-e {}: this kernel has no kprobes (tracefs has no kprobe_events: CONFIG_KPROBE_EVENTS is \
                         off), so kernel function {function} cannot be probed; record a tracepoint instead \
                         (`rprof probe -l 't:*:*'` lists them), or a user function with -e u:BINARY:FUNCTION",
                        spec.name
                    )));
                }
                let def = ProbeDef {
                    group: group.clone(),
                    event: unique_event(&function, &defs),
                    is_return: false,
                    location: ProbeLocation::Kernel {
                        symbol: function.clone(),
                    },
                    fetch: Vec::new(),
                };
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
    Ok(Resolved {
        events,
        _probes: probes,
        tracefs,
    })
}

fn clock(name: &str, task: bool) -> SessionEvent {
    SessionEvent {
        name: name.to_string(),
        kind: EventKind::Clock { task },
        filter: None,
    }
}

/// A probe's event until the probe exists: its `--filter` text waits in `filter`.
fn placeholder(spec: &EventSpec) -> SessionEvent {
    SessionEvent {
        name: spec.name.clone(),
        kind: EventKind::Clock { task: false },
        filter: spec.filter.clone(),
    }
}

/// What `spec` names: a clock, tracepoints that exist, a user function (`u:BIN:FUNC`, `uprobe:BIN:FUNC`,
/// `probe:FUNC` or `probe_X:FUNC` with -x), or a kernel function (`kprobe:FUNC`, `k:FUNC`, `probe:FUNC`
/// without -x).
fn name(
    spec: &EventSpec,
    cfg: &RecordConfig,
    tracefs: Option<&Tracefs>,
) -> Result<Named, RecordError> {
    let text = spec.name.as_str();
    if spec.is_clock() {
        if spec.filter.is_some() {
            return Err(RecordError::Config(format!(
                "--filter applies to tracepoints and probes, not to {text}; put it after the -e it filters"
            )));
        }
        return Ok(Named::Clock {
            task: text == "task-clock",
        });
    }
    let parts: Vec<&str> = text.split(':').collect();
    let exists = |system: &str, event: &str| {
        tracefs.is_some_and(|t| t.root().join("events").join(system).join(event).exists())
    };
    Ok(match parts.as_slice() {
        ["u" | "uprobe", binary, function] if !binary.is_empty() && !function.is_empty() => Named::User {
            binary: binary_path(binary)?,
            function: function.to_string(),
        },
        ["k" | "kprobe", function] if !function.is_empty() => Named::Kernel {
            function: function.to_string(),
        },
        ["t" | "tracepoint", system, event] => Named::Tracepoints {
            system: system.to_string(),
            event: event.to_string(),
        },
        [system, event] if system.starts_with("probe") && !exists(system, event) => match &cfg.binary {
            Some(binary) => Named::User {
                binary: binary.clone(),
                function: event.to_string(),
            },
            None if *system == "probe" => Named::Kernel {
                function: event.to_string(),
            },
            None => {
                return Err(RecordError::Config(format!(
                    "-e {text}: there is no probe event {text} (rprof's probes live only as long as the \
                     session that made them, never made by an earlier `rprof probe`); record the function \
                     with -e u:BINARY:{event}, or -x BINARY -e {text}"
                )))
            }
        },
        [system, event] if !system.is_empty() && !event.is_empty() => Named::Tracepoints {
            system: system.to_string(),
            event: event.to_string(),
        },
        _ => {
            return Err(RecordError::Config(format!(
                "-e {text}: unknown event; rprof records cpu-clock, task-clock, a tracepoint CATEGORY:EVENT \
                 (e.g. sched:sched_switch, syscalls:sys_enter_openat), a user function u:BINARY:FUNCTION (or \
                 probe:FUNCTION with -x BINARY) and a kernel function kprobe:FUNCTION (hardware events need a PMU)"
            )))
        }
    })
}

/// The binary of `u:BIN:FUNC`: a path, or a library name found as `rprof probe` finds it (`u:c:malloc`).
fn binary_path(binary: &str) -> Result<PathBuf, RecordError> {
    if binary.contains('/') || Path::new(binary).exists() {
        return Ok(PathBuf::from(binary));
    }
    crate::probe::find_library(binary, None).map_err(|e| RecordError::Config(e.to_string()))
}

/// The events of `system` that `event` (a glob) names.
fn tracepoints(
    tracefs: &Tracefs,
    system: &str,
    event: &str,
    spec: &EventSpec,
) -> Result<Vec<String>, RecordError> {
    let matcher = globset::Glob::new(event)
        .map_err(|e| RecordError::Config(format!("-e {}: {e}", spec.name)))?
        .compile_matcher();
    let found: Vec<String> = tracefs
        .events(system)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| matcher.is_match(e))
        .collect();
    if found.is_empty() {
        return Err(RecordError::Config(format!(
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
) -> Result<SessionEvent, RecordError> {
    Ok(SessionEvent {
        name: name.to_string(),
        kind: EventKind::Trace {
            id: tracefs.event_id(system, event).map_err(probe_error)?,
            system: system.to_string(),
            format: tracefs.event_format(system, event).map_err(probe_error)?,
        },
        filter: None,
    })
}

/// The kernel filter of `spec`'s `--filter` on event `e`.
fn filter(spec: &EventSpec, e: &SessionEvent) -> Result<Option<String>, RecordError> {
    let (Some(text), EventKind::Trace { format, .. }) = (&spec.filter, &e.kind) else {
        return Ok(None);
    };
    crate::probe::kernel_filter(text, format)
        .map(Some)
        .map_err(|why| RecordError::Config(format!("--filter '{text}' on {}: {why}", e.name)))
}

/// The probe points of the functions of `binary` that `function` (a glob) names, each with its event name in
/// the recording (`probe_BINARY:FUNCTION`, as `perf probe -x` names them).
fn user_probes(
    binary: &Path,
    function: &str,
    group: &str,
    spec: &EventSpec,
) -> Result<Vec<(ProbeDef, String)>, RecordError> {
    let targets = crate::probe::resolve_user(binary, function, false, &DebugSources::default())
        .map_err(|e| RecordError::Config(format!("-e {}: {e}", spec.name)))?;
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
) -> Result<Probes, RecordError> {
    let _ = group::remove_stale(tracefs);
    let supervisor = Supervisor::spawn(tracefs, group).ok();
    let defs: Vec<ProbeDef> = defs.iter().map(|(_, d, _)| d.clone()).collect();
    let group = ProbeGroup::create(tracefs, group, &defs).map_err(probe_error)?;
    Ok(Probes {
        _group: group,
        _supervisor: supervisor,
    })
}

fn probe_error(e: crate::tracefs::TracefsError) -> RecordError {
    RecordError::Config(e.to_string())
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
}
