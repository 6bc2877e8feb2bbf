//! Running a probe session: find what the kernel offers, plan, create the probes, open the engines the plan
//! names, run `perf`'s loop (the one `rprof record` uses) with the records of every engine decoded into the
//! time-ordered merge and applied in order, and write the reports (every `-i` and at the end). The probes and
//! the tracefs instance are removed on every way out.
use super::analysis::{AddrMap, Calls, KeyedPairer, NetCost, Sink};
use super::engine::cost::{calibration_sites, Calibrator, Costs, Measured};
use super::engine::decode::{decode, event_types, EventTypes, Item, PerfParse, ProbeInfo};
use super::engine::group::{self, ProbeGroup};
use super::engine::holes::Holes;
use super::engine::perf::{open_events, Opened};
use super::engine::ring::RingEngine;
use super::engine::sharing::sharing;
use super::engine::supervisor::Supervisor;
use super::engine::Refusal;
use super::output::{self, ReportParts, TraceOut};
use super::plan::{self, Capabilities, Mode, Placement, Plan, ProbeClass};
use super::target::{PerTarget, TargetId, Targets};
use super::{DebugCost, Format, Notice, ProbeError, ProbeOptions, RunSummary, Started, TaskTarget};
use crate::merge::OrderedMerge;
use crate::perf::{
    self, EventInfos, Handler, PerfError, RawRecord, StopSignals, StopWhen, UprobePmu, Workload,
};
use crate::tracefs::Tracefs;
use std::collections::HashSet;
use std::io::Write;
use std::os::fd::BorrowedFd;
use std::time::Instant;

mod counted;
mod ring;
use counted::run_counters;
use ring::{enable_ring, open_ring, target_pids};

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
) -> Result<RunSummary, ProbeError> {
    check_trace_format(opts, targets)?;
    let signals = StopSignals::register()?;
    // Fork the command before anything else starts (the child waits for us before exec).
    let workload = match &opts.target {
        TaskTarget::Command(cmd) => Some(Workload::prepare(cmd, opts.keep_workload)?),
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
        Mode::Sampled => run_sampled(&mut s, plan, out),
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

/// Say which functions of a Go binary are counted and not timed, and why.
fn counted_only(s: &mut Setup<'_>) {
    use super::spec::go::GoFunction;
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

fn pid_list(target: &TaskTarget) -> Vec<i32> {
    match target {
        TaskTarget::Pid(p) => vec![*p],
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

/// Timing (or sampled counting): the tracefs ring and/or perf events.
fn run_sampled(
    s: &mut Setup<'_>,
    mut plan: Plan,
    out: &mut dyn Write,
) -> Result<RunSummary, ProbeError> {
    let mut ring = open_ring(s, &mut plan);
    for f in &plan.forced_shared {
        (s.notice)(Notice::SharedFileForced {
            path: f.path.clone(),
            others: f.others,
        });
    }
    let (types, ids) = event_types(s.tracefs, &plan.events, s.targets)?;
    // Who filters the ring by task: the kernel, or (only the target maps the probed files) the sink.
    let in_kernel = plan.ring_filter_in_kernel();
    // The ring's cost is measured before its tasks are set (the calibration runs on this thread).
    let ring_costs = match ring.as_mut() {
        Some(r) => {
            r.open_rings()?;
            Some(calibrate(s, &plan, |c, report| {
                c.ring(r, in_kernel, report)
            }))
        }
        None => None,
    };
    let Opened {
        mut events,
        parse,
        mut refused,
    } = open_events(s.opts, s.tracefs, &plan.events, &ids, &s.tasks, s.pmu)?;
    let ring_base = ring.as_ref().map(RingEngine::written);
    if let Some(r) = ring.as_mut() {
        // What the calibration overwrote is not the target's loss.
        r.take_lost(&mut Holes::default());
    }
    if let Some(r) = ring.as_mut() {
        refused.extend(enable_ring(s, &plan, r, in_kernel)?);
    }
    report_refused(s, &refused);
    let refused: HashSet<TargetId> = refused
        .iter()
        .flat_map(|r| r.targets.iter().copied())
        .collect();
    let probed = s.targets.len() - refused.len();
    if probed == 0 {
        return Err(no_usable(s.opts));
    }
    let costs = match ring_costs {
        Some(c) => c,
        None => calibrate(s, &plan, |c, report| c.perf(parse.by_id, report)),
    };
    let mut sink = new_sink(s, &plan.placements, &costs)?;
    if ring.is_some() && !in_kernel {
        sink.only_processes(target_pids(s));
    }
    // Enabled before a launched command execs: its execve is seen entering.
    events.enable()?;
    start(s)?;
    let engine = describe_engine(&plan, ring.as_ref().map(RingEngine::mode));
    let started = Started {
        targets: probed,
        probe_points: plan.probe_points(),
        perf_events: events.len(),
        engine,
        counting: s.opts.count_only,
        costs,
        values: plan.value_ways.iter().map(|(_, w)| w.clone()).collect(),
        setup: s.started.elapsed(),
    };
    (s.notice)(Notice::Started(started));
    let mut live = SampledLoop {
        sink,
        // Two rounds late: a hole is placed at the last event read before it, which a LOST record or a flagged
        // page announces a round or two later (see `engine::holes`).
        merge: OrderedMerge::with_lag(2),
        holes: Holes::default(),
        lost_synced: 0,
        round_started: None,
        parse,
        types,
        ring,
        opts: s.opts,
        placements: &plan.placements,
        out,
        costs,
        read: 0,
        ring_base,
    };
    let pids = pid_list(&s.opts.target);
    perf::run_loop::run(
        &mut events,
        &s.signals,
        stop_when(s.opts, s.workload.as_mut(), &pids),
        &mut live,
    )?;
    let summary = finish_sampled(s, live)?;
    drop(events);
    Ok(summary)
}

/// The sink of a session, with the mappings of the processes that exist already (from /proc).
fn new_sink<'a>(
    s: &Setup<'a>,
    placements: &PerTarget<Option<Placement>>,
    costs: &Costs,
) -> Result<Sink<'a>, ProbeError> {
    let opts = s.opts;
    let net = opts.net.then(|| {
        placements.map(|p| {
            let cost = p
                .as_ref()
                .and_then(|p| costs.of(p.class))
                .unwrap_or_default();
            NetCost {
                bias_ns: cost.bias_ns.unwrap_or(0),
                cost_ns: cost.cost_ns,
            }
        })
    });
    let timed = !opts.count_only && s.targets.iter().any(|(_, t)| t.can_time());
    let calls = opts.calls.any().then(|| {
        let fetches = s
            .targets
            .iter()
            .map(|(_, t)| t.fetches.as_slice())
            .collect();
        Calls::new(opts.calls.clone(), &fetches)
    });
    let keyed = match &opts.pair {
        Some(p) => KeyedPairer::new(p.max_open, p.max_age.as_nanos() as u64),
        None => KeyedPairer::new(1, u64::MAX),
    };
    let mut sink = Sink::new(
        s.targets,
        AddrMap::new(s.targets, placements),
        timed,
        net,
        keyed,
        calls,
    );
    sink.stats.set_hist_unit(opts.calls.hist_unit.max(1));
    // The process's threads at start (a thread that ends before its hits are read is still the target's).
    if let TaskTarget::Pid(p) = &opts.target {
        for &t in &s.tasks {
            sink.add_thread(t as u32, *p as u32);
        }
    }
    if sink.needs_mappings() || opts.stacks {
        match &opts.target {
            TaskTarget::Pid(p) => sink.spaces.synthesize(*p as u32),
            TaskTarget::SystemWide => {
                for pid in crate::process::all_pids() {
                    sink.spaces.synthesize(pid as u32);
                }
            }
            TaskTarget::Command(_) => {}
        }
    }
    if let Some(w) = &s.workload {
        sink.add_thread(w.pid() as u32, w.pid() as u32);
        sink.launcher = Some(w.pid() as u32);
    }
    if let Some(path) = &opts.trace_out {
        let out = TraceOut::create(path).map_err(|error| ProbeError::TraceOut {
            path: path.clone(),
            error,
        })?;
        sink.trace_out = Some(out);
    }
    Ok(sink)
}

/// The header line's engine part: `engine: tracefs ring (mapped)`, `engine: perf`, or both with what each reads.
fn describe_engine(plan: &Plan, ring_mode: Option<&str>) -> String {
    let ring = plan.events.iter().filter(|p| p.ring()).count();
    let perf = plan.events.len() - ring;
    let ring_name = format!("tracefs ring ({})", ring_mode.unwrap_or("read"));
    let perf_name = if plan.uses_pmu() {
        "perf (uprobe PMU)"
    } else {
        "perf"
    };
    match (ring, perf) {
        (0, _) => format!("engine: {perf_name}"),
        (_, 0) => format!("engine: {ring_name}"),
        _ => format!("engines: {ring_name} for {ring} events, {perf_name} for {perf} (files other processes map)"),
    }
}

/// The end of a sampled session: what the ring lost, the last trace lines, the report, the stacks; then the
/// removal begins (the ring first).
fn finish_sampled(s: &mut Setup<'_>, live: SampledLoop<'_>) -> Result<RunSummary, ProbeError> {
    let SampledLoop {
        mut sink,
        out,
        mut ring,
        costs,
        placements,
        read,
        ring_base,
        mut holes,
        lost_synced,
        ..
    } = live;
    if let Some(r) = ring.as_mut() {
        r.take_lost(&mut holes);
    }
    sink.stats.lost += holes.lost - lost_synced;
    if s.opts.debug_cost != DebugCost::Off {
        let written = ring
            .as_ref()
            .zip(ring_base)
            .map(|(r, base)| r.written().saturating_sub(base));
        (s.notice)(Notice::Delivered { read, written });
    }
    if let Some(calls) = sink.calls.as_mut() {
        sink.stacks.finish();
        output::write_trace(out, calls, s.targets, &sink.stacks, true)?;
        if calls.trace_skipped_total > 0 {
            (s.notice)(Notice::TraceLimited {
                skipped: calls.trace_skipped_total,
                rate: calls.opts.trace_rate,
            });
        }
    }
    sink.pairer.count_open(&mut sink.stats);
    sink.keyed.count_open(&mut sink.stats);
    let parts = ReportParts {
        targets: s.targets,
        stats: &sink.stats,
        timed: sink.timed,
        open_calls: sink.pairer.open_calls() + sink.keyed.open_calls(),
        costs,
        placements,
        calls: sink.calls.as_ref(),
        stacks: &sink.stacks,
        loss: Some(holes.summary(crate::perf::ring::page_size())),
    };
    output::write_report(out, s.opts, &parts)?;
    if sink.stats.lost > 0 && matches!(s.opts.format, Format::Csv | Format::Json) {
        (s.notice)(Notice::Lost(sink.stats.lost));
    }
    if sink.unresolved > 0 {
        (s.notice)(Notice::Unresolved(sink.unresolved));
    }
    if sink.foreign.hits > 0 {
        (s.notice)(Notice::OtherProcesses {
            hits: sink.foreign.hits,
            processes: sink.foreign.processes(),
        });
    }
    if let Some(trace) = sink.trace_out.take() {
        let (path, calls, overflowed) =
            (trace.path().to_path_buf(), trace.written, trace.overflowed);
        trace.finish().map_err(|error| ProbeError::TraceOut {
            path: path.clone(),
            error,
        })?;
        (s.notice)(Notice::TraceWritten {
            path,
            calls,
            overflowed,
        });
    }
    let folded = match (s.opts.stacks, s.opts.folded) {
        (true, true) => Some(sink.stacks.folded(s.targets)),
        (true, false) => {
            sink.stacks.write(out, s.targets)?;
            out.flush()?;
            None
        }
        (false, _) => None,
    };
    (s.notice)(Notice::Removing);
    if let Some(r) = ring {
        if let Err(e) = r.close() {
            (s.notice)(Notice::NotRemoved(e.to_string()));
        }
    }
    Ok(RunSummary {
        exit_code: exit_code(s),
        folded,
    })
}

/// The loop's handler for sampled events: records are decoded into the merge, released in time order into
/// the sink, and each tick writes the interval's report.
struct SampledLoop<'a> {
    sink: Sink<'a>,
    merge: OrderedMerge<Item>,
    parse: PerfParse,
    types: EventTypes,
    ring: Option<RingEngine>,
    opts: &'a ProbeOptions,
    placements: &'a PerTarget<Option<Placement>>,
    out: &'a mut dyn Write,
    costs: Costs,
    /// Probe events read from the rings (perf samples and tracefs ring events).
    read: u64,
    /// The tracefs ring's count of events written when the targets' events were enabled.
    ring_base: Option<u64>,
    /// Where the streams had holes, and the rates read.
    holes: Holes,
    /// The part of `holes.lost` already added to the sink's statistics.
    lost_synced: u64,
    /// When the round's first record was read (rprof's time reading, for its reading rate).
    round_started: Option<Instant>,
}

impl SampledLoop<'_> {
    /// Add the events lost since the last call to the sink's statistics.
    fn sync_lost(&mut self) {
        if let Some(r) = self.ring.as_mut() {
            r.take_lost(&mut self.holes);
        }
        self.sink.stats.lost += self.holes.lost - self.lost_synced;
        self.lost_synced = self.holes.lost;
    }
}

impl Handler<ProbeInfo> for SampledLoop<'_> {
    type Error = ProbeError;

    fn record(
        &mut self,
        infos: &EventInfos<ProbeInfo>,
        rec: RawRecord<'_>,
    ) -> Result<(), ProbeError> {
        if rec.kind == crate::perf::record_type::SAMPLE {
            self.read += 1;
        }
        if self.round_started.is_none() {
            self.round_started = Some(Instant::now());
        }
        let holes = &mut self.holes;
        decode(rec, infos, &self.parse, &self.types, &mut self.merge, holes);
        Ok(())
    }

    fn extra_fds(&self) -> Vec<BorrowedFd<'_>> {
        self.ring.as_ref().map(RingEngine::fds).unwrap_or_default()
    }

    /// Read the tracefs ring (the perf rings were read), then release what is in order.
    fn end_round(&mut self, _records: usize, last: bool) -> Result<(), ProbeError> {
        let started = Instant::now();
        if let Some(r) = self.ring.as_mut() {
            if last {
                r.disable();
            }
            self.read += r.read(&self.types, &mut self.merge, &mut self.holes)? as u64;
            if r.gaps_seen() {
                self.sync_lost();
            }
        }
        self.sink.release(&mut self.merge, last);
        let started = self.round_started.take().unwrap_or(started);
        self.holes.end_round(started.elapsed());
        if let Some(calls) = self.sink.calls.as_mut() {
            if !calls.trace_lines.is_empty() && !last {
                self.sink.stacks.finish();
                output::write_trace(self.out, calls, self.sink.targets, &self.sink.stacks, false)?;
                self.out.flush()?;
            }
        }
        Ok(())
    }

    /// The `-i` report of the interval that ended (the last one is reported at the end, with everything still
    /// in the buffers).
    fn tick(&mut self) -> Result<(), ProbeError> {
        self.sync_lost();
        let interval = self.sink.stats.take();
        let calls = self.sink.calls.as_mut().map(Calls::take);
        if calls.is_some() {
            self.sink.stacks.finish();
        }
        let parts = ReportParts {
            targets: self.sink.targets,
            stats: &interval,
            timed: self.sink.timed,
            open_calls: self.sink.pairer.open_calls() + self.sink.keyed.open_calls(),
            costs: self.costs,
            placements: self.placements,
            calls: calls.as_ref(),
            stacks: &self.sink.stacks,
            loss: None,
        };
        Ok(output::write_report(self.out, self.opts, &parts)?)
    }
}
