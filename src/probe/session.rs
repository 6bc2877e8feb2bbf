//! Running `rprof probe`: create the probes, choose each event's engine, open the perf events and the tracefs
//! ring, synthesize the mappings of running processes, run `perf`'s loop (the one `rprof record` uses) with
//! the records of both decoded into the time-ordered merge and applied in order, and print the reports (every
//! `-i` and at the end). `--count` reads counters instead.
use super::addrmap::AddrMap;
use super::calls::Calls;
use super::count::Counters;
use super::engine::{self, EngineChoice};
use super::events::{event_types, open_events, Opened};
use super::fetch::Fetch;
use super::group::{self, PlannedEvent, ProbeGroup};
use super::listing::{self, fetch_lists, write_report, PerCall};
use super::live::{decode, EventTypes, FetchShape, Item, PerfParse, ProbeInfo, Sink};
use super::output;
use super::pairing::Pairer;
use super::resolve::Target;
use super::ring::RingEngine;
use super::stacks::StackCounter;
use super::stats::Stats;
use super::{cost, ProbeError, ProbeOptions, RunSummary, TaskTarget};
use crate::merge::OrderedMerge;
use crate::perf::{
    self, EventInfos, Handler, PerfError, RawRecord, StopSignals, StopWhen, Workload,
};
use crate::process::AddressSpaces;
use crate::tracefs::Tracefs;
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::os::fd::BorrowedFd;
use std::time::Instant;

/// What every engine needs to run: the targets, the tasks, the launched command.
struct Setup<'a> {
    opts: &'a ProbeOptions,
    tracefs: &'a Tracefs,
    targets: &'a [Target],
    names: Vec<String>,
    tasks: Vec<i32>,
    workload: Option<Workload>,
    signals: StopSignals,
    group_name: String,
    /// The uprobe PMU, when counted (`--count`) or stack-sampled (`-g`) user functions use it.
    pmu: Option<perf::UprobePmu>,
    started: Instant,
}

/// Create the probes, run until the end of the duration, the target's exit or SIGINT/SIGTERM/SIGHUP, and print
/// reports. The probes and the tracefs instance are removed on every way out.
pub fn run(
    opts: &ProbeOptions,
    tracefs: &Tracefs,
    targets: &[Target],
    out: &mut dyn Write,
) -> Result<RunSummary, ProbeError> {
    let signals = StopSignals::register()?;
    // Fork the command before anything else starts (the child waits for us before exec).
    let workload = match &opts.target {
        TaskTarget::Command(argv) => Some(Workload::prepare(argv, opts.keep_workload)?),
        _ => None,
    };
    let tasks: Vec<i32> = match &opts.target {
        TaskTarget::SystemWide => vec![-1],
        TaskTarget::Pid(p) => {
            crate::process::threads(*p).map_err(|_| PerfError::NoSuchProcess { pid: *p })?
        }
        TaskTarget::Command(_) => vec![workload.as_ref().map_or(-1, Workload::pid)],
    };
    let group_name = group::group_name(std::process::id());
    let removed = group::remove_stale(tracefs)?;
    if !removed.is_empty() {
        eprintln!(
            "rprof: removed probe groups and instances left by rprof processes that are gone: {}",
            removed.join(", ")
        );
    }
    // Counters carry no values: fetched arguments and per-call work need samples.
    let values = opts.calls.any() || targets.iter().any(|t| !t.fetches.is_empty());
    let counters = opts.count_only && !opts.stacks && !values && opts.engine == EngineChoice::Auto;
    // Counted user functions, and those whose stacks are sampled (-g), use the uprobe PMU where the kernel has
    // it: those probes go with rprof's fds, even when it is SIGKILLed. Timing without -g keeps tracefs probes,
    // whose `sp` fetch argument is cheaper than the user registers a PMU probe needs (see cost.rs).
    let stacks_pmu = opts.stacks && opts.engine != EngineChoice::Tracefs;
    // RPROF_UPROBE_PMU=0 takes the path of kernels without the PMU (before 4.17), for tests.
    let pmu_allowed = std::env::var("RPROF_UPROBE_PMU").as_deref() != Ok("0");
    let pmu = (pmu_allowed && (counters || stacks_pmu))
        .then(perf::UprobePmu::find)
        .flatten();
    let mut setup = Setup {
        opts,
        tracefs,
        targets,
        names: targets.iter().map(|t| t.name.clone()).collect(),
        tasks,
        workload,
        signals,
        group_name,
        pmu,
        started: Instant::now(),
    };
    let (defs, planned) = group::plan(
        &setup.group_name,
        targets,
        opts.count_only,
        counters || pmu.is_some(),
        pmu.is_some(),
    );
    let cal = cost::plan(&setup.group_name, opts.count_only, counters, pmu);
    let all_defs: Vec<_> = defs.iter().chain(cal.defs.iter()).cloned().collect();
    // Declared before the events and the instance: dropped after them (the kernel refuses to delete probes
    // that are open or enabled).
    let _group = ProbeGroup::create(tracefs, &setup.group_name, &all_defs)?;
    if counters {
        run_counters(&mut setup, &planned, &cal, out)
    } else {
        run_sampled(&mut setup, &defs, planned, &cal, out)
    }
}

/// `--count`: counters only.
fn run_counters(
    s: &mut Setup<'_>,
    planned: &[PlannedEvent],
    cal: &cost::Calibration,
    out: &mut dyn Write,
) -> Result<RunSummary, ProbeError> {
    let mut counters = Counters::open(
        s.tracefs,
        planned,
        &s.names,
        &s.opts.target,
        &s.tasks,
        s.pmu,
    )?;
    if counters.targets() == 0 {
        return Err(no_usable(s.opts));
    }
    let probe_cost = cal.measure_counter(s.tracefs);
    start(s)?;
    if s.workload.is_none() {
        counters.enable()?;
    }
    // One write, as the timing header below: the workload already runs.
    let header = format!(
        "rprof: counting {} targets ({} perf events), engine: counters{}{}, set up in {:.2}s; Ctrl-C to end\n",
        counters.targets(),
        counters.len(),
        if s.pmu.is_some() && planned.iter().any(|p| p.pmu.is_some()) {
            " (uprobe PMU)"
        } else {
            ""
        },
        cost_note(probe_cost, "per counted call"),
        s.started.elapsed().as_secs_f64()
    );
    eprint!("{header}");
    let mut empty: perf::EventSet<()> =
        perf::EventSet::open(&[], &[], &[], 1, &mut |_, _| perf::Refused::Fail)?;
    let mut handler = CountLoop {
        counters: &mut counters,
        s_opts: s.opts,
        names: &s.names,
        out,
        cost: probe_cost,
    };
    let pid = pid_list(&s.opts.target);
    let when = StopWhen {
        flag: None,
        duration: s.opts.duration,
        workload: s.workload.as_mut(),
        pids: &pid,
        tick: s.opts.interval,
    };
    perf::run_loop::run(&mut empty, &s.signals, when, &mut handler)?;
    handler.counters.disable();
    let stats = handler.counters.take()?;
    write_report(
        handler.out,
        s.opts,
        &s.names,
        &stats,
        false,
        0,
        probe_cost,
        None,
    )?;
    Ok(RunSummary {
        exit_code: exit_code(s),
    })
}

struct CountLoop<'a> {
    counters: &'a mut Counters,
    s_opts: &'a ProbeOptions,
    names: &'a [String],
    out: &'a mut dyn Write,
    cost: Option<u64>,
}

impl Handler<()> for CountLoop<'_> {
    type Error = ProbeError;
    fn record(&mut self, _: &EventInfos<()>, _: RawRecord<'_>) -> Result<(), ProbeError> {
        Ok(())
    }
    fn end_round(&mut self, _: usize, _: bool) -> Result<(), ProbeError> {
        Ok(())
    }
    fn tick(&mut self) -> Result<(), ProbeError> {
        let stats = self.counters.take()?;
        write_report(
            self.out,
            self.s_opts,
            self.names,
            &stats,
            false,
            0,
            self.cost,
            None,
        )
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

fn exit_code(s: &mut Setup<'_>) -> Option<i32> {
    s.workload.as_mut().and_then(|w| {
        w.try_wait();
        w.exit_code()
    })
}

/// Start the command (its events are enabled on exec).
fn start(s: &mut Setup<'_>) -> Result<(), ProbeError> {
    if let Some(w) = s.workload.as_mut() {
        w.start()?;
    }
    Ok(())
}

/// `, durations include about 2.10us of probe cost per call`, or nothing when it could not be measured.
fn cost_note(cost: Option<u64>, what: &str) -> String {
    match cost {
        Some(ns) => format!(", probe cost about {} {what}", output::human_ns(ns)),
        None => String::new(),
    }
}

/// Timing (or sampled counting): the tracefs ring and/or perf events.
fn run_sampled(
    s: &mut Setup<'_>,
    defs: &[crate::tracefs::ProbeDef],
    mut planned: Vec<PlannedEvent>,
    cal: &cost::Calibration,
    out: &mut dyn Write,
) -> Result<RunSummary, ProbeError> {
    let opts = s.opts;
    let want_ring = opts.engine != EngineChoice::Perf && !opts.stacks;
    let shared = if want_ring {
        engine::sharing(s.targets, &opts.target)
    } else {
        Vec::new()
    };
    let mut ring = None;
    if want_ring
        && !(opts.engine == EngineChoice::Auto
            && planned
                .iter()
                .all(|p| engine::shared_file(p, s.targets, &shared).is_some_and(|f| f.others > 0)))
    {
        match RingEngine::create(s.tracefs, &s.group_name, opts) {
            Ok(r) => ring = Some(r),
            Err(e) => eprintln!("rprof: the tracefs ring cannot be used ({e}); using perf events"),
        }
    }
    let forced = engine::assign(
        &mut planned,
        s.targets,
        &shared,
        opts.engine,
        ring.is_some(),
        opts.stacks,
    );
    for f in &forced {
        eprintln!(
            "rprof: warning: {} other processes map {}: with --engine tracefs, each of their calls to a probed \
             function takes the uprobe trap too",
            f.others,
            f.path.display()
        );
    }
    if !planned.iter().any(|p| p.ring) {
        ring = None;
    }
    let (types, ids) = event_types(s.tracefs, &planned, s.targets)?;
    // The ring's cost is measured before its tasks are set (the calibration runs on this thread).
    let ring_cost = ring.as_mut().and_then(|r| cal.measure_ring(s.tracefs, r));
    let Opened {
        mut events,
        parse,
        mut usable,
    } = open_events(opts, s.tracefs, &planned, &ids, s.targets, &s.tasks, s.pmu)?;
    if let Some(r) = ring.as_mut() {
        r.set_tasks(&opts.target, &s.tasks)?;
        for p in planned.iter().filter(|p| p.ring) {
            if let Err(e) = r.enable(&p.group, &p.event) {
                eprintln!(
                    "rprof: warning: skipping {} target(s): the kernel refused the event ({e})",
                    p.members.len()
                );
                for &m in &p.members {
                    usable[m as usize] = false;
                }
            }
        }
        r.open_rings()?;
    }
    let probed = usable.iter().filter(|u| **u).count();
    if probed == 0 {
        return Err(no_usable(opts));
    }
    let probe_cost = match &ring {
        Some(_) => ring_cost,
        None => cal.measure_perf(s.tracefs, &parse),
    };
    cal.debug_compare_pmu(s.tracefs, &parse);
    let timed = !opts.count_only && s.targets.iter().any(Target::can_time);
    let mut sink = Sink {
        stats: Stats::new(s.targets.len()),
        pairer: Pairer::new(),
        stacks: StackCounter::new(),
        addrs: AddrMap::new(s.targets),
        spaces: AddressSpaces::new(),
        synthesized: HashSet::new(),
        threads: HashMap::new(),
        timed,
        unresolved: 0,
        calls: opts
            .calls
            .any()
            .then(|| Calls::new(opts.calls.clone(), &fetch_lists(s.targets))),
        fetch_shape: s
            .targets
            .iter()
            .map(|t| FetchShape {
                count: t.fetches.len(),
                caller: t.fetches.iter().position(|f| f.label == "caller"),
                kernel: matches!(t.kind, super::TargetKind::Kernel { .. }),
            })
            .collect(),
    };
    // Processes that exist already: their mappings of the probed binaries come from /proc.
    if !sink.addrs.is_empty() || opts.stacks {
        match &opts.target {
            TaskTarget::Pid(p) => {
                sink.spaces.synthesize(*p as u32);
                for &t in &s.tasks {
                    sink.threads.insert(t as u32, *p as u32);
                }
            }
            TaskTarget::SystemWide => {
                for pid in crate::process::all_pids() {
                    sink.spaces.synthesize(pid as u32);
                }
            }
            TaskTarget::Command(_) => {}
        }
    }
    if let Some(w) = &s.workload {
        sink.threads.insert(w.pid() as u32, w.pid() as u32);
    }
    start(s)?;
    if s.workload.is_none() {
        events.enable()?;
    }
    let engine = engine::describe(&planned, ring.as_ref().map(RingEngine::mode));
    let header = format!(
        "rprof: probing {probed} targets ({} probe points, {} perf events), {engine}{}, set up in {:.2}s; \
         Ctrl-C to end\n",
        defs.len() + planned.iter().filter(|p| p.pmu.is_some()).count(),
        events.len(),
        cost_note(probe_cost, "per call"),
        s.started.elapsed().as_secs_f64()
    );
    // One write: the workload already runs, and its own stderr lines must not land inside this one (eprintln!
    // writes each formatted piece apart).
    eprint!("{header}");
    let mut live = Live {
        sink,
        merge: OrderedMerge::new(),
        parse,
        types,
        ring,
        opts,
        names: &s.names,
        fetches: fetch_lists(s.targets),
        out,
        cost: probe_cost,
    };
    let pid = pid_list(&opts.target);
    let when = StopWhen {
        flag: None,
        duration: opts.duration,
        workload: s.workload.as_mut(),
        pids: &pid,
        tick: opts.interval,
    };
    perf::run_loop::run(&mut events, &s.signals, when, &mut live)?;
    drop(events);
    let Live {
        mut sink,
        out,
        mut ring,
        fetches,
        ..
    } = live;
    if let Some(r) = ring.as_mut() {
        sink.stats.lost += r.take_lost();
    }
    drop(ring);
    let mut extra = sink.calls.as_mut().map(|c| PerCall {
        calls: c,
        stacks: &mut sink.stacks,
        fetches: &fetches,
    });
    if let Some(x) = extra.as_mut() {
        x.stacks.finish();
        listing::write_trace(out, x.calls, &s.names, x.fetches, x.stacks, true)?;
    }
    write_report(
        out,
        opts,
        &s.names,
        &sink.stats,
        sink.timed,
        sink.pairer.open_calls(),
        probe_cost,
        extra.as_mut(),
    )?;
    if sink.unresolved > 0 {
        eprintln!(
            "rprof: warning: {} hits in processes whose mappings were not seen were not counted",
            sink.unresolved
        );
    }
    if opts.stacks {
        sink.stacks.write(out, &s.names, opts.folded)?;
        out.flush()?;
    }
    Ok(RunSummary {
        exit_code: exit_code(s),
    })
}

/// The loop's handler: records are decoded into the merge, released in time order into the sink, and each
/// tick prints the interval's report.
struct Live<'a> {
    sink: Sink,
    merge: OrderedMerge<Item>,
    parse: PerfParse,
    types: EventTypes,
    ring: Option<RingEngine>,
    opts: &'a ProbeOptions,
    names: &'a [String],
    /// Each target's fetches.
    fetches: Vec<&'a [Fetch]>,
    out: &'a mut dyn Write,
    cost: Option<u64>,
}

impl Handler<ProbeInfo> for Live<'_> {
    type Error = ProbeError;

    fn record(
        &mut self,
        infos: &EventInfos<ProbeInfo>,
        rec: RawRecord<'_>,
    ) -> Result<(), ProbeError> {
        decode(
            rec,
            infos,
            &self.parse,
            &self.types,
            &mut self.merge,
            &mut self.sink.stats,
        );
        Ok(())
    }

    fn extra_fds(&self) -> Vec<BorrowedFd<'_>> {
        self.ring.as_ref().map(RingEngine::fds).unwrap_or_default()
    }

    /// Read the tracefs ring (the perf rings were read), then release what is in order.
    fn end_round(&mut self, _records: usize, last: bool) -> Result<(), ProbeError> {
        if let Some(r) = self.ring.as_mut() {
            if last {
                r.disable();
            }
            r.read(&self.types, &mut self.merge)?;
        }
        self.sink.release(&mut self.merge, last);
        if let Some(calls) = self.sink.calls.as_mut() {
            if !calls.trace_lines.is_empty() && !last {
                self.sink.stacks.finish();
                listing::write_trace(
                    self.out,
                    calls,
                    self.names,
                    &self.fetches,
                    &self.sink.stacks,
                    false,
                )?;
                self.out.flush()?;
            }
        }
        Ok(())
    }

    /// The `-i` report of the interval that ended (the last one is reported at the end, with everything still
    /// in the buffers).
    fn tick(&mut self) -> Result<(), ProbeError> {
        if let Some(r) = self.ring.as_mut() {
            self.sink.stats.lost += r.take_lost();
        }
        let interval = self.sink.stats.take();
        let mut calls = self.sink.calls.as_mut().map(Calls::take);
        if calls.is_some() {
            self.sink.stacks.finish();
        }
        write_report(
            self.out,
            self.opts,
            self.names,
            &interval,
            self.sink.timed,
            self.sink.pairer.open_calls(),
            self.cost,
            calls
                .as_mut()
                .map(|c| PerCall {
                    calls: c,
                    stacks: &mut self.sink.stacks,
                    fetches: &self.fetches,
                })
                .as_mut(),
        )
    }
}
