//! From the command line's specs to the session's [`Targets`]: what each pattern names ([`pattern`]), the
//! values it fetches ([`fetch`]), the functions, syscalls, tracepoints, kernel functions and USDT probes it
//! matches ([`resolve`], [`library`], [`usdt`]), and each target's fetch arguments ([`args`]).
pub mod address;
pub mod args;
pub mod code;
pub mod deref;
pub mod fetch;
pub mod fields;
pub mod filter;
pub mod filters;
pub mod go;
pub mod ifuncs;
pub mod library;
pub mod pair;
pub mod pattern;
pub mod register;
pub mod resolve;
pub mod software;
pub mod syscall_sites;
pub mod sysno;
pub mod usdt;

use crate::probe::target::{TargetKind, Targets};
use crate::probe::{ProbeError, ProbeOptions, TaskTarget};
use crate::tracefs::Tracefs;
use pattern::Spec;
use std::path::PathBuf;

/// One pattern as written, what it names, the values it fetches (its own, then those of `--by` and `--hist`,
/// then those its filter reads) and its filter (`PATTERN if EXPR`).
pub type Parsed = (String, Spec, Vec<fetch::FetchItem>, Option<filter::Expr>);

/// Each pattern of `opts`, parsed.
pub fn parse(opts: &ProbeOptions) -> Result<Vec<Parsed>, ProbeError> {
    let mut specs = Vec::new();
    for p in &opts.patterns {
        let (head, cond) = filter::split_if(p);
        let cond =
            cond.map(filter::parse)
                .transpose()
                .map_err(|reason| pattern::PatternError::Bad {
                    pattern: p.clone(),
                    reason: format!("filter: {reason}"),
                })?;
        let split = fetch::split_spec(head)?;
        let spec = pattern::parse_spec(split.pattern, opts.binary.is_some())?;
        let mut items = split.items;
        items.extend(opts.values.iter().cloned());
        // The values the filter reads are fetched (the process context is every event's).
        for name in cond.iter().flat_map(filter::Expr::names) {
            if !filters::is_context(name) && !items.iter().any(|i| i.name == name) {
                items.push(fetch::FetchItem {
                    name: name.to_string(),
                    ty: None,
                    array: None,
                });
            }
        }
        specs.push((p.clone(), spec, items, cond));
    }
    if specs.is_empty() && opts.pair.is_none() && opts.planned.is_empty() {
        return Err(pattern::PatternError::Bad {
            pattern: String::new(),
            reason: "give at least one pattern, e.g. `rprof probe -x ./bin 'func_*'`".into(),
        }
        .into());
    }
    Ok(specs)
}

/// Whether resolving these specs (and `--pair`'s ends) needs tracefs (syscalls, tracepoints, kernel
/// functions).
pub fn needs_tracefs(opts: &ProbeOptions, specs: &[Parsed]) -> bool {
    let pair = opts
        .pair
        .iter()
        .flat_map(|p| p.starts.iter().chain([&p.done]))
        .any(|end| {
            let spec = fetch::split_spec(filter::split_if(end).0)
                .map(|s| pattern::parse_spec(s.pattern, opts.binary.is_some()));
            !matches!(spec, Ok(Ok(Spec::User { .. } | Spec::Usdt { .. })))
        });
    pair || !opts.planned.is_empty()
        || specs.iter().any(|(_, s, _, _)| {
            !matches!(
                s,
                Spec::User { .. } | Spec::Usdt { .. } | Spec::Software { .. }
            )
        })
}

/// Resolve the specs (and `--pair`) into the session's targets, each address or event once, with their fetch
/// arguments; refuse what cannot be probed as asked (return values with `--count`).
pub fn targets(
    opts: &ProbeOptions,
    specs: &[Parsed],
    tracefs: Option<&Tracefs>,
) -> Result<Targets, ProbeError> {
    let ropts = resolve::ResolveOptions {
        binary: opts.binary.clone(),
        pid: match &opts.target {
            TaskTarget::Pid(p) => Some(*p as u32),
            _ => None,
        },
        regex: opts.regex,
        debug: opts.debug.clone(),
    };
    let formats = |category: &str, event: &str| tracefs?.event_format(category, event).ok();
    let mut targets = Targets::default();
    for (text, spec, items, cond) in specs {
        let found =
            resolve::resolve(std::slice::from_ref(spec), &ropts, tracefs).map_err(|e| match e {
                ProbeError::Usdt(e) => ProbeError::Spec {
                    spec: text.clone(),
                    reason: e.to_string(),
                },
                e => e,
            })?;
        for mut t in found {
            let perf_trace = opts.calls.style == crate::probe::TraceStyle::PerfTrace;
            let every = match (&t.kind, opts.calls.trace && items.is_empty()) {
                (TargetKind::Tracepoint { category, event }, true) => {
                    every_field(formats(category, event).as_deref(), false)
                }
                // perf trace's lines show a syscall's every argument, then what is asked for.
                (TargetKind::Syscall { name }, _) if perf_trace => {
                    let event = format!("sys_enter_{name}");
                    let mut all = every_field(formats("syscalls", &event).as_deref(), true);
                    all.extend(items.iter().cloned());
                    all
                }
                _ => Vec::new(),
            };
            let items = if every.is_empty() { items } else { &every };
            t.fetches = args::resolve_fetches(&t, items, text, &formats, &opts.debug)?;
            t.syscall_sites = syscall_sites(&t, opts, &ropts)?;
            if let Some(cond) = cond {
                t.filter = Some(target_filter(&t, cond, &formats, text)?);
            }
            targets.add(t);
        }
    }
    for t in planned(opts, &ropts, &formats)? {
        targets.add(t);
    }
    if let Some(pair) = &opts.pair {
        let pair = pair::pair_target(pair, &opts.values, &ropts, tracefs, &formats, &opts.debug)?;
        targets.add(pair);
    }
    check(opts, &targets)?;
    Ok(targets)
}

/// The targets of the event layer's planned tracefs events ([`ProbeOptions::planned`]): tracepoints named as
/// planned, with every field of their format when `--trace` shows them (as a `t:` pattern without values), and
/// syscalls as `syscall:NAME(ret)` patterns make them.
fn planned(
    opts: &ProbeOptions,
    ropts: &resolve::ResolveOptions,
    formats: args::Formats<'_>,
) -> Result<Vec<crate::probe::target::Target>, ProbeError> {
    use crate::events::PlannedKind;
    let mut out = Vec::new();
    for e in &opts.planned {
        if e.filter.is_some() {
            return Err(ProbeError::Spec {
                spec: e.name.clone(),
                reason:
                    "a planned event's kernel filter is not taken here: filter the pattern instead \
                         (`t:CATEGORY:EVENT if EXPR`)"
                        .into(),
            });
        }
        let (kind, items) = match &e.kind {
            PlannedKind::Trace { system, event, .. } => {
                let items = match opts.calls.trace && opts.values.is_empty() {
                    true => every_field(formats(system, event).as_deref(), false),
                    false => opts.values.clone(),
                };
                let kind = TargetKind::Tracepoint {
                    category: system.clone(),
                    event: event.clone(),
                };
                (kind, items)
            }
            PlannedKind::Syscall { name, .. } => (
                TargetKind::Syscall { name: name.clone() },
                syscall_items(opts, name, formats),
            ),
            PlannedKind::Perf { .. } => {
                return Err(ProbeError::Spec {
                    spec: e.name.clone(),
                    reason: "not a tracefs event: probe takes tracepoints and probe points here"
                        .into(),
                })
            }
        };
        let name = match &kind {
            TargetKind::Syscall { name } => format!("syscall:{name}"),
            TargetKind::Tracepoint { category, event } => format!("{category}:{event}"),
            _ => unreachable!("planned events are tracepoints or syscalls"),
        };
        let mut t = crate::probe::target::Target {
            name,
            aliases: Vec::new(),
            kind,
            fetches: Vec::new(),
            code: None,
            go: None,
            syscall_sites: Vec::new(),
            filter: None,
        };
        t.fetches = args::resolve_fetches(&t, &items, &e.name, &formats, &opts.debug)?;
        t.syscall_sites = syscall_sites(&t, opts, ropts)?;
        out.push(t);
    }
    Ok(out)
}

/// The values of a planned syscall, as the pattern `syscall:NAME(ret)` fetches them: its return value and
/// `--by`/`--hist`'s, after every argument where perf trace's lines show them.
fn syscall_items(
    opts: &ProbeOptions,
    name: &str,
    formats: args::Formats<'_>,
) -> Vec<fetch::FetchItem> {
    let mut items = vec![fetch::FetchItem::parse("ret").expect("ret is a fetch item")];
    items.extend(opts.values.iter().cloned());
    if opts.calls.style != crate::probe::TraceStyle::PerfTrace {
        return items;
    }
    let format = formats("syscalls", &format!("sys_enter_{name}"));
    let mut all = every_field(format.as_deref(), true);
    all.extend(items);
    all
}

/// Every value field of a tracepoint's `format` (what `--trace` shows of a tracepoint named without values).
fn every_field(format: Option<&str>, perf_trace: bool) -> Vec<fetch::FetchItem> {
    let fields = crate::tracefs::parse_format(format.unwrap_or(""));
    fields::value_fields(&fields)
        .into_iter()
        .map(|f| fetch::FetchItem {
            name: f.name.clone(),
            ty: perf_trace
                .then(|| perf_trace_type(&f.name, &f.ty))
                .flatten(),
            array: None,
        })
        .collect()
}

/// How perf trace shows a syscall argument where its C type says otherwise: a file descriptor as a signed
/// int (`fd: -1`, where the kernel declares `unsigned int fd`), an address held in an `unsigned long` in hex
/// (`brk: 0x55d0c8a4e000`).
fn perf_trace_type(name: &str, ty: &str) -> Option<fetch::FetchType> {
    const ADDRESSES: [&str; 7] = [
        "brk", "addr", "start", "new_addr", "old_addr", "shmaddr", "mm",
    ];
    if name == "fd" || name.ends_with("fd") && ty.contains("int") {
        return Some(fetch::FetchType::Int {
            size: 4,
            signed: true,
        });
    }
    (ty == "unsigned long" && ADDRESSES.contains(&name))
        .then_some(fetch::FetchType::Hex { size: 8 })
}

/// Where the parts of `cond` run for target `t` (the event's format gives its fields' signedness).
pub(super) fn target_filter(
    t: &crate::probe::target::Target,
    cond: &filter::Expr,
    formats: args::Formats<'_>,
    text: &str,
) -> Result<filters::TargetFilter, ProbeError> {
    use crate::probe::target::TargetKind;
    let format = match &t.kind {
        TargetKind::Syscall { name } => formats("syscalls", &format!("sys_enter_{name}")),
        TargetKind::Tracepoint { category, event } => formats(category, event),
        _ => None,
    };
    let named = crate::tracefs::symbolic_names(format.as_deref().unwrap_or(""));
    let cond = cond
        .resolve_names(&|field, name| enum_value(&named, field, name))
        .map_err(|reason| ProbeError::Spec {
            spec: text.to_string(),
            reason: format!("filter: {reason}"),
        })?;
    filters::check_numbers(&cond, &t.fetches).map_err(|reason| ProbeError::Spec {
        spec: text.to_string(),
        reason: format!("filter: {reason}"),
    })?;
    let fields = format
        .map(|f| crate::tracefs::parse_format(&f))
        .unwrap_or_default();
    let placed = match t.kind {
        // A software event takes no filter in the kernel: rprof tests it all (`comm`, `pid`, `cpu`...).
        TargetKind::Software { .. } => filters::TargetFilter::in_rprof(cond),
        _ => filters::TargetFilter::place(cond, &t.fetches, &fields),
    };
    filters::check_strings(placed.user.iter().chain(&placed.at_return), &t.fetches).map_err(
        |reason| ProbeError::Spec {
            spec: text.to_string(),
            reason: format!("filter: {reason}"),
        },
    )?;
    Ok(placed)
}

/// The number that `name` stands for in `field`'s values, as the event's `print fmt` names them
/// (`newstate == TCP_SYN_SENT`).
fn enum_value(
    named: &std::collections::HashMap<String, Vec<(u64, String)>>,
    field: &str,
    name: &str,
) -> Result<i128, String> {
    let Some(values) = named.get(field) else {
        return Err(format!(
            "`{name}` is a name, and the event's format names no values of `{field}`; compare it with a number or a \"string\""
        ));
    };
    match values.iter().find(|(_, n)| n == name) {
        Some((v, _)) => Ok(i128::from(*v)),
        None => {
            let known: Vec<&str> = values.iter().map(|(_, n)| n.as_str()).collect();
            Err(format!(
                "`{name}` is not a name of `{field}`'s values; the event's format names {}",
                known.join(", ")
            ))
        }
    }
}

/// For a syscall (or its `sys_enter_NAME` tracepoint) whose user strings are asked for, the `syscall`
/// instructions of its number in the target's libc, its dynamic loader (which opens the libraries) and the `-x`
/// binary (a static one makes its syscalls itself).
fn syscall_sites(
    t: &crate::probe::target::Target,
    opts: &ProbeOptions,
    ropts: &resolve::ResolveOptions,
) -> Result<Vec<(PathBuf, Vec<u64>)>, ProbeError> {
    let name = match &t.kind {
        TargetKind::Syscall { name } => name.as_str(),
        TargetKind::Tracepoint { category, event } => {
            match sysno::tracepoint_syscall(category, event) {
                Some((name, false)) => name,
                _ => return Ok(Vec::new()),
            }
        }
        _ => return Ok(Vec::new()),
    };
    let wants = t
        .fetches
        .iter()
        .any(|f| matches!(f.source, fetch::FetchSource::UserString { arg: Some(_) }));
    let nr = sysno::syscall_number(name).and_then(|nr| u32::try_from(nr).ok());
    let Some(nr) = nr.filter(|_| wants) else {
        return Ok(Vec::new());
    };
    let mut files = Vec::new();
    if let Ok(libc) = library::find_library("c", ropts.pid) {
        files.push(libc);
    }
    files.extend(library::dynamic_loader(ropts.pid));
    files.extend(opts.binary.iter().cloned());
    let mut sites = Vec::new();
    for path in files {
        let path = std::fs::canonicalize(&path).unwrap_or(path);
        let found = syscall_sites::find(&path).map_err(|reason| ProbeError::Spec {
            spec: format!("syscall:{name}"),
            reason,
        })?;
        if let Some(offsets) = found.get(&nr).filter(|o| !o.is_empty()) {
            sites.push((path, offsets.clone()));
        }
    }
    Ok(sites)
}

/// Refuse return values with `--count`.
fn check(opts: &ProbeOptions, targets: &Targets) -> Result<(), ProbeError> {
    if opts.count_only
        && targets
            .iter()
            .any(|(_, t)| t.fetches.iter().any(|f| f.on_return))
    {
        return Err(ProbeError::Spec {
            spec: "ret".into(),
            reason: "return values need return probes: drop --count".into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{PlannedEvent, PlannedKind};

    /// Check that the event layer's planned tracepoints become tracepoint targets named as planned, with
    /// every value field of their format when `--trace` shows them (what a `t:` pattern gives), and that no
    /// pattern is needed beside them.
    #[test]
    fn planned_tracepoints_are_targets() {
        let dir = tempfile::tempdir().unwrap();
        let event = dir.path().join("events/sched/sched_switch");
        std::fs::create_dir_all(&event).unwrap();
        let format = "name: sched_switch\nID: 7\nformat:\n\
             \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
             \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
             \tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
             \tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n";
        std::fs::write(event.join("format"), format).unwrap();
        let mut opts = ProbeOptions {
            planned: vec![PlannedEvent {
                name: "sched:sched_switch".into(),
                kind: PlannedKind::Trace {
                    id: 7,
                    system: "sched".into(),
                    event: "sched_switch".into(),
                    format: format.into(),
                },
                filter: None,
            }],
            ..ProbeOptions::default()
        };
        opts.calls.trace = true;
        let specs = parse(&opts).unwrap();
        assert!(specs.is_empty() && needs_tracefs(&opts, &specs));
        let tracefs = Tracefs::at(dir.path());
        let targets = targets(&opts, &specs, Some(&tracefs)).unwrap();
        let all: Vec<_> = targets.iter().map(|(_, t)| t).collect();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].name, "sched:sched_switch");
        assert_eq!(
            all[0].kind,
            TargetKind::Tracepoint {
                category: "sched".into(),
                event: "sched_switch".into()
            }
        );
        let labels: Vec<&str> = all[0].fetches.iter().map(|f| f.label.as_str()).collect();
        assert_eq!(labels, ["prev_comm", "prev_pid"]);
        opts.planned[0].filter = Some("prev_pid == 1".into());
        assert!(targets_of(&opts, &tracefs).is_err());
    }

    /// Check that a planned syscall (trace's `-e close`) is the target the pattern `syscall:close(ret)` makes
    /// in perf trace's style: the same name, kind and fetches (every argument, then the return value).
    #[test]
    fn planned_syscalls_are_the_patterns_targets() {
        let dir = tempfile::tempdir().unwrap();
        let head =
            "format:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\n\
                    \tfield:int __syscall_nr;\toffset:8;\tsize:4;\tsigned:1;\n";
        for (event, id, field) in [
            ("sys_enter_close", 10, "unsigned int fd"),
            ("sys_exit_close", 11, "long ret"),
        ] {
            let at = dir.path().join("events/syscalls").join(event);
            std::fs::create_dir_all(&at).unwrap();
            let format = format!(
                "name: {event}\nID: {id}\n{head}\tfield:{field};\toffset:16;\tsize:8;\tsigned:0;\n"
            );
            std::fs::write(at.join("format"), format).unwrap();
        }
        let tracefs = Tracefs::at(dir.path());
        let mut opts = ProbeOptions {
            planned: vec![PlannedEvent {
                name: "close".into(),
                kind: PlannedKind::Syscall {
                    name: "close".into(),
                    id: 10,
                },
                filter: None,
            }],
            ..ProbeOptions::default()
        };
        opts.calls.trace = true;
        opts.calls.style = crate::probe::TraceStyle::PerfTrace;
        let planned = targets_of(&opts, &tracefs).unwrap();
        opts.planned.clear();
        opts.patterns = vec!["syscall:close(ret)".into()];
        let pattern = targets_of(&opts, &tracefs).unwrap();
        let debug =
            |t: &Targets| -> Vec<String> { t.iter().map(|(_, t)| format!("{t:?}")).collect() };
        assert_eq!(debug(&planned), debug(&pattern));
        let all: Vec<_> = planned.iter().map(|(_, t)| t).collect();
        assert_eq!(all.len(), 1);
        let labels: Vec<&str> = all[0].fetches.iter().map(|f| f.label.as_str()).collect();
        assert_eq!(labels, ["fd", "ret"]);
    }

    fn targets_of(opts: &ProbeOptions, tracefs: &Tracefs) -> Result<Targets, ProbeError> {
        targets(opts, &parse(opts)?, Some(tracefs))
    }
}
