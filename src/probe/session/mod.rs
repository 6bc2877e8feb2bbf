//! Running a probe session: find what the kernel offers, plan, create the probes, open the engines the plan
//! names, run `perf`'s loop (the one `rprof record` uses) with the records of every engine decoded into the
//! time-ordered merge and applied in order, and write the reports (every `-i` and at the end). The probes and
//! the tracefs instance are removed on every way out.
use super::engine::cost::{calibration_sites, Calibrator, Costs, Measured};
use super::engine::sharing::sharing;
use super::engine::Refusal;
use super::plan::{self, Capabilities, Mode, Plan, ProbeClass};
use super::target::Targets;
use super::{DebugCost, Notice, Observer, ProbeError, ProbeOptions, RunSummary, TaskTarget};
use crate::events::group::{self, ProbeGroup};
use crate::events::supervisor::Supervisor;
use crate::perf::{PerfError, StopSignals, StopWhen, UprobePmu, Workload};
use crate::tracefs::Tracefs;
use std::io::Write;
use std::time::Instant;

mod counted;
mod ring;
mod sampled;
use counted::run_counters;
use sampled::run_sampled;

/// What every engine needs to run: the targets, the tasks, the launched command, where notices go.
struct Setup<'a> {
    opts: &'a ProbeOptions,
    tracefs: &'a Tracefs,
    targets: &'a Targets,
    tasks: Vec<i32>,
    workload: Option<Workload>,
    signals: StopSignals,
    group: String,
    caps: Capabilities,
    pmu: Option<UprobePmu>,
    started: Instant,
    notice: &'a mut dyn FnMut(Notice),
}

/// A `--trace-format` names only values some probe fetches (or the process context, or its own names).
fn check_trace_format(opts: &ProbeOptions, targets: &Targets) -> Result<(), ProbeError> {
    if let Some((first, then)) = &opts.calls.trace_join {
        if let Some(name) = [first, then]
            .into_iter()
            .find(|n| targets.named(n).is_empty())
        {
            return Err(ProbeError::Spec {
                spec: "--trace-join".into(),
                reason: format!(
                    "no probe is named `{name}`: give two targets' names as `-l` lists them \
                     (`--trace-join sched:sched_process_exec,_dl_start`)"
                ),
            });
        }
    }
    let Some(format) = &opts.calls.trace_format else {
        return Ok(());
    };
    let labels: Vec<&str> = targets
        .iter()
        .flat_map(|(_, t)| t.fetches.iter().map(|f| f.label.as_str()))
        .collect();
    match format.unknown(&labels) {
        None => Ok(()),
        Some(name) => Err(ProbeError::Spec {
            spec: "--trace-format".into(),
            reason: format!(
                "`{name}` is no value of the probes: name it in a pattern (`syscall:openat(filename:str) ret`), \
                 or use comm, pid, tid, cpu, ctx.NAME, time, clock, dur, dur_us, dur_ms or event"
            ),
        }),
    }
}

/// Create the probes, run until the end of the duration, the target's exit or SIGINT/SIGTERM/SIGHUP, and write
/// reports.
pub fn run(
    opts: &ProbeOptions,
    tracefs: &Tracefs,
    targets: &Targets,
    out: &mut dyn Write,
    notice: &mut dyn FnMut(Notice),
    mut observer: Option<&mut dyn Observer>,
) -> Result<RunSummary, ProbeError> {
    check_trace_format(opts, targets)?;
    if let Some(o) = observer.as_mut() {
        o.targets(targets);
    }
    let signals = StopSignals::register()?;
    // Fork the command before anything else starts (the child waits for us before exec).
    let workload = match (&opts.target, &opts.launch) {
        (TaskTarget::Command(cmd), _) | (_, Some(cmd)) => {
            Some(Workload::prepare(cmd, opts.keep_workload)?)
        }
        _ => None,
    };
    let tasks: Vec<i32> = match &opts.target {
        TaskTarget::SystemWide => vec![-1],
        TaskTarget::Pid(p) => {
            crate::process::threads(*p).map_err(|_| PerfError::NoSuchProcess { pid: *p })?
        }
        TaskTarget::Command(_) => vec![workload.as_ref().map_or(-1, Workload::pid)],
    };
    let removed = group::remove_stale(tracefs)?;
    if !removed.is_empty() {
        notice(Notice::StaleRemoved(removed));
    }
    let pmu = opts.uprobe_pmu.then(UprobePmu::find).flatten();
    let group = group::group_name(std::process::id());
    // Started before the probes exist, and dropped (which ends it) after they are removed.
    let supervisor = match Supervisor::spawn(tracefs, &group) {
        Ok(sup) => Some(sup),
        Err(e) => {
            notice(Notice::NoSupervisor(e.to_string()));
            None
        }
    };
    let caps = Capabilities {
        uprobe_pmu: pmu.is_some(),
        ring: tracefs.instance_supported(),
        sharing: sharing(targets, &opts.target),
        calibration_sites: calibration_sites(),
        emulates: plan::running_kernel_emulates(),
        event_probes: false,
        own_tasks: own_tasks(supervisor.as_ref()),
        task_fields: plan::tracepoints(targets)
            .into_iter()
            .filter_map(|(c, e)| {
                let format = crate::tracefs::parse_format(&tracefs.event_format(&c, &e).ok()?);
                Some(((c, e), super::spec::filters::task_fields(&format)))
            })
            .collect(),
    };
    let mut s = Setup {
        opts,
        tracefs,
        targets,
        tasks,
        workload,
        signals,
        group,
        caps,
        pmu,
        started: Instant::now(),
        notice,
    };
    s.caps.event_probes = wants_strings(targets) && tracefs.event_probes_work(&s.group);
    let plan = plan::plan(&s.group, targets, opts, &s.caps);
    counted_only(&mut s);
    let _supervisor = supervisor;
    // Created before the events and the instance, removed after them (the kernel refuses to delete probes
    // that are open or enabled); dropped on errors and panics.
    let probes = ProbeGroup::create(tracefs, &s.group, &plan.defs)?;
    if opts.cgroup.is_some()
        && (plan.mode != Mode::Counters || opts.target != TaskTarget::SystemWide)
    {
        return Err(ProbeError::Spec {
            spec: "-G".into(),
            reason: "a cgroup is counted system-wide with counters only (rprof stat -G CGROUP -a -e EVENTS, \
                     without -p, a command, values or stacks)"
                .into(),
        });
    }
    let summary = match plan.mode {
        Mode::Counters => run_counters(&mut s, &plan, out),
        Mode::Sampled => run_sampled(&mut s, plan, out, observer),
    }?;
    if let Err(e) = probes.close() {
        (s.notice)(Notice::NotRemoved(e.to_string()));
    }
    (s.notice)(Notice::Removed);
    Ok(summary)
}

/// rprof's own threads and its supervisor: no event counts their work.
fn own_tasks(supervisor: Option<&Supervisor>) -> Vec<u32> {
    let me = std::process::id() as i32;
    let mut tids: Vec<u32> = crate::process::threads(me)
        .unwrap_or_else(|_| vec![me])
        .into_iter()
        .map(|t| t as u32)
        .collect();
    tids.extend(supervisor.map(Supervisor::pid));
    tids
}

/// Whether a target reads user strings its event does not hold (the kernel is asked whether it takes event
/// probes only then: the check writes to `dynamic_events`).
fn wants_strings(targets: &Targets) -> bool {
    use super::spec::fetch::FetchSource;
    targets.iter().any(|(_, t)| {
        t.fetches
            .iter()
            .any(|f| matches!(f.source, FetchSource::UserString { .. }))
    })
}

/// Say what is known against a target's probe ([`super::spec::pair::known_issue`]), and which functions of a Go
/// binary are counted and not timed, and why.
fn counted_only(s: &mut Setup<'_>) {
    use super::spec::go::GoFunction;
    let mut known: Vec<String> = s
        .targets
        .iter()
        .filter_map(|(_, t)| crate::probe::spec::pair::known_issue(t))
        .collect();
    known.dedup();
    for text in known {
        (s.notice)(Notice::KnownIssue(text));
    }
    if s.opts.count_only {
        return;
    }
    let mut by_reason: Vec<(String, Vec<String>)> = Vec::new();
    for (_, t) in s.targets.iter() {
        if let Some(GoFunction::CountOnly(reason)) = &t.go {
            match by_reason.iter_mut().find(|(r, _)| r == reason) {
                Some((_, names)) => names.push(t.name.clone()),
                None => by_reason.push((reason.clone(), vec![t.name.clone()])),
            }
        }
    }
    for (reason, names) in by_reason {
        let count = names.len();
        let names = names.into_iter().take(3).collect();
        (s.notice)(Notice::CountedOnly {
            count,
            names,
            reason,
        });
    }
}

fn no_usable(opts: &ProbeOptions) -> ProbeError {
    ProbeError::NoMatch {
        what: "probeable functions",
        pattern: opts.patterns.join(" "),
        place: "the kernel's view (every probe was refused)".into(),
    }
}

/// The processes whose end ends the session.
fn pid_list(opts: &ProbeOptions) -> Vec<i32> {
    match &opts.target {
        TaskTarget::Pid(p) if !opts.outlive_target => vec![*p],
        _ => vec![],
    }
}

fn stop_when<'a>(
    opts: &ProbeOptions,
    workload: Option<&'a mut Workload>,
    pids: &'a [i32],
) -> StopWhen<'a> {
    StopWhen {
        flag: None,
        duration: opts.duration,
        workload,
        pids,
        tick: opts.interval,
    }
}

/// The launched command's exit code, once it is ended (see [`Workload::end`]).
fn exit_code(s: &mut Setup<'_>) -> Option<i32> {
    let grace = s.signals.grace();
    s.workload.as_mut().and_then(|w| w.end(grace))
}

/// Start the command (its events are enabled on exec).
fn start(s: &mut Setup<'_>) -> Result<(), ProbeError> {
    if let Some(w) = s.workload.as_mut() {
        w.start()?;
    }
    Ok(())
}

/// Tell the caller which targets the kernel refused to probe.
fn report_refused(s: &mut Setup<'_>, refused: &[Refusal]) {
    for r in refused {
        let names = r
            .targets
            .iter()
            .take(3)
            .map(|&t| s.targets.name(t).to_string())
            .collect();
        (s.notice)(Notice::Refused {
            count: r.targets.len(),
            names,
            reason: r.reason.clone(),
        });
    }
}

/// The probe's cost per call, per class of probed instruction, by the plan's calibration measured with
/// `how`; each measurement reported with `RPROF_DEBUG_COST`.
fn calibrate(
    s: &mut Setup<'_>,
    plan: &Plan,
    how: impl FnOnce(&Calibrator<'_>, &mut dyn FnMut(ProbeClass, &Measured)) -> Costs,
) -> Costs {
    let Some(cal) = plan.calibration.as_ref() else {
        return Costs::default();
    };
    let calibrator = Calibrator {
        tracefs: s.tracefs,
        group: &s.group,
        cal,
        pmu: s.pmu,
    };
    let debug = s.opts.debug_cost != DebugCost::Off;
    let notice = &mut s.notice;
    how(&calibrator, &mut |class, m| {
        if debug {
            notice(Notice::Calibration(format!(
                "{}: {:.1} ns per call bare, {:.1} probed, mean duration {:?} ns of {} calls",
                class.name(),
                m.bare_ns,
                m.probed_ns,
                m.bias_ns(),
                m.durations.len()
            )));
        }
    })
}
