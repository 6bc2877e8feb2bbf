//! Timing (or sampled counting): probe events read from the tracefs ring and/or perf rings, merged in time
//! order and handed to the pairing sink; the report at each `-i` tick and at the end.
use super::ring::{enable_ring, open_ring, target_pids};
use super::{calibrate, exit_code, no_usable, pid_list, report_refused, start, stop_when, Setup};
use crate::merge::OrderedMerge;
use crate::perf::{self, EventInfos, Handler, RawRecord};
use crate::probe::analysis::{AddrMap, Calls, KeyedPairer, NetCost, Sink, Stats};
use crate::probe::engine::cost::Costs;
use crate::probe::engine::counters::Counters;
use crate::probe::engine::decode::{decode, event_types, EventTypes, Item, PerfParse, ProbeInfo};
use crate::probe::engine::holes::{Holes, LossSummary};
use crate::probe::engine::perf::{open_events, Opened};
use crate::probe::engine::ring::RingEngine;
use crate::probe::output::{self, ReportParts, TraceOut};
use crate::probe::plan::{Placement, Plan, PlannedEvent};
use crate::probe::target::{PerTarget, TargetId};
use crate::probe::{
    DebugCost, Format, Notice, Observer, ProbeError, ProbeOptions, RunSummary, Started, TaskTarget,
};
use std::collections::HashSet;
use std::io::Write;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// Timing (or sampled counting): the tracefs ring and/or perf events.
pub(super) fn run_sampled(
    s: &mut Setup<'_>,
    mut plan: Plan,
    out: &mut dyn Write,
    mut observer: Option<&mut dyn Observer>,
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
    if observer.is_some() {
        keep_for_observer(s, &mut sink);
    }
    if ring.is_some() && !in_kernel {
        sink.only_processes(target_pids(s));
    }
    // Enabled (the counters too) before a launched command execs: its execve is seen entering.
    let counters = exact_counters(s, &plan, in_kernel || ring.is_none())?;
    events.enable()?;
    start(s)?;
    let started = started(s, &plan, probed, events.len(), ring.as_ref(), costs);
    (s.notice)(Notice::Started(started));
    if let Some(o) = observer.as_mut() {
        o.started(s.workload.as_ref().map(|w| w.pid() as u32));
    }
    let stop = AtomicBool::new(false);
    let mut live = SampledLoop {
        sink,
        // Two rounds late: a hole is placed at the last event read before it, which a LOST record or a flagged
        // page announces a round or two later (see `engine::holes`).
        merge: OrderedMerge::with_lag(2),
        holes: Holes::default(),
        lost_synced: 0,
        round_started: None,
        positions: Positions::default(),
        parse,
        types,
        ring,
        opts: s.opts,
        placements: &plan.placements,
        out,
        costs,
        read: 0,
        ring_base,
        counters,
        observer,
        stop: &stop,
    };
    let pids = pid_list(s.opts);
    let mut when = stop_when(s.opts, s.workload.as_mut(), &pids);
    when.flag = Some(&stop);
    perf::run_loop::run(&mut events, &s.signals, when, &mut live)?;
    let summary = finish_sampled(s, live)?;
    drop(events);
    Ok(summary)
}

/// Keep every hit for an observer; where only the observer reads them, without what it does not read.
fn keep_for_observer(s: &Setup<'_>, sink: &mut Sink<'_>) {
    sink.observed = Some(Vec::new());
    let filtered = s.targets.iter().any(|(_, t)| {
        t.filter
            .as_ref()
            .is_some_and(|f| f.user.is_some() || f.at_return.is_some())
    });
    sink.observer_only =
        !s.opts.names_addresses && !filtered && sink.calls.is_none() && sink.trace_out.is_none();
}

/// What the header line says when probing starts.
fn started(
    s: &Setup<'_>,
    plan: &Plan,
    probed: usize,
    perf_events: usize,
    ring: Option<&RingEngine>,
    costs: Costs,
) -> Started {
    Started {
        targets: probed,
        probe_points: plan.probe_points(),
        perf_events,
        engine: describe_engine(plan, ring.map(RingEngine::mode)),
        counting: s.opts.count_only,
        costs,
        values: plan.value_ways.iter().map(|(_, w)| w.clone()).collect(),
        setup: s.started.elapsed(),
    }
}

/// The most events that [`exact_counters`] counts beside the rings.
const EXACT_EVENTS: usize = 8;

/// `--count` read from rings (`--by`, or a tracepoint system-wide): a counter beside each target's events, so
/// that the report can say how many events the kernel counted whatever the rings lost. Only where every event
/// the counter counts reaches the sink (the kernel filters by task, nothing is filtered in rprof) and the
/// report covers the whole run (no `-i`): else the difference would not be a loss.
fn exact_counters(
    s: &Setup<'_>,
    plan: &Plan,
    filtered_in_kernel: bool,
) -> Result<Option<Counters>, ProbeError> {
    let in_kernel_only = s.targets.iter().all(|(_, t)| {
        t.filter
            .as_ref()
            .is_none_or(|f| f.user.is_none() && f.at_return.is_none())
    });
    // One target per event (an event standing for several, as raw_syscalls' for `syscall:*`, is sorted out in
    // rprof), and few of them: closing a tracepoint's last perf event costs an RCU grace period (~36 ms here),
    // one tracepoint after the other, which `syscall:*`'s hundreds would pay at the end.
    // Kernel events only: beside a uprobe a counter is one more consumer of every hit, which the target pays;
    // in tracefs only: a sampled software event's counter counts events (or nanoseconds), not samples.
    let one = |p: &PlannedEvent| p.members.len() == 1 && !p.user && p.in_tracefs();
    let few = plan.events.len() <= EXACT_EVENTS && plan.events.iter().all(one);
    if !s.opts.count_only
        || s.opts.interval.is_some()
        || !filtered_in_kernel
        || !in_kernel_only
        || !few
    {
        return Ok(None);
    }
    let (counters, refused) = Counters::open(
        s.tracefs,
        &plan.events,
        s.targets.len(),
        (&s.opts.target, None),
        &s.tasks,
        s.pmu,
    )?;
    // A target the counters cannot count leaves the total short: no exact total then.
    if !refused.is_empty() || counters.targets() != plan.events.len() {
        return Ok(None);
    }
    counters.enable()?;
    Ok(Some(counters))
}

/// What the kernel counted beside the rings ([`exact_counters`]) into the loss: the count less the events
/// read, exactly, where the rings' own counts of what they dropped or overwrote differ from it (by 1.4% in a
/// run that lost half its events). The counters count only while the rings run (enabled after them, disabled
/// before), so an event of those instants is read but not counted: never a loss that was not.
fn exact_loss(
    mut counters: Counters,
    stats: &mut Stats,
    loss: &mut LossSummary,
) -> Result<(), ProbeError> {
    let counted: u64 = counters.take()?.funcs.iter().map(|(_, f)| f.count).sum();
    let read: u64 = stats.funcs.iter().map(|(_, f)| f.count).sum();
    stats.lost = counted.saturating_sub(read);
    loss.counted = Some(counted);
    counters.close();
    Ok(())
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
        let mut calls = Calls::new(opts.calls.clone(), &fetches);
        if let Some((first, then)) = &opts.calls.trace_join {
            let named = |name: &str| s.targets.named(name);
            calls.join(named(first), named(then));
        }
        calls
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

/// The notices of what the report may lack: events lost (said here where the report cannot show it: CSV,
/// JSON, or an observer such as `rprof bt`), addresses left unresolved, hits of other processes.
fn what_was_missed(s: &mut Setup<'_>, sink: &Sink<'_>, observed: bool) {
    if sink.stats.lost > 0 && (observed || matches!(s.opts.format, Format::Csv | Format::Json)) {
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
}

/// The end of a sampled session: what the ring lost, the last trace lines, the report, the stacks; then the
/// removal begins (the ring first).
fn finish_sampled(s: &mut Setup<'_>, live: SampledLoop<'_, '_>) -> Result<RunSummary, ProbeError> {
    // An observer (`rprof bt`) has no report to show the loss in.
    let observed = live.observer.is_some();
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
        counters,
        ..
    } = live;
    if let Some(r) = ring.as_mut() {
        r.take_lost(&mut holes);
    }
    sink.stats.lost += holes.lost - lost_synced;
    let mut loss = holes.summary(crate::perf::ring::page_size());
    if let Some(c) = counters {
        exact_loss(c, &mut sink.stats, &mut loss)?;
    }
    if s.opts.debug_cost != DebugCost::Off {
        let written = ring
            .as_ref()
            .zip(ring_base)
            .map(|(r, base)| r.written().saturating_sub(base));
        (s.notice)(Notice::Delivered { read, written });
    }
    if let Some(calls) = sink.calls.as_mut() {
        sink.stacks.finish();
        calls.release_joins(true);
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
        loss: Some(loss),
    };
    output::write_report(out, s.opts, &parts)?;
    what_was_missed(s, &sink, observed);
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
struct SampledLoop<'a, 'o> {
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
    /// `--count`: the kernel's own count of every counted event beside the rings (see [`exact_counters`]).
    counters: Option<Counters>,
    /// When the round's first record was read (rprof's time reading, for its reading rate).
    round_started: Option<Instant>,
    /// Where the bounded rounds left each ring.
    positions: Positions,
    /// Handed every hit the sink kept for it, and told each round's end ([`crate::probe::run_observed`]);
    /// it ends the session through `stop`.
    observer: Option<&'o mut dyn Observer>,
    stop: &'a AtomicBool,
}

/// Where bounded reading rounds left the rings.
#[derive(Default)]
struct Positions {
    /// The time of the last item each perf ring gave (by ring index; 0: none yet).
    ring_last: Vec<u64>,
    /// The time of the last item the ring being read gave in this round.
    ring_pushed: Option<u64>,
    /// The tracefs ring had events left at the end of the round.
    behind: bool,
}

/// Records of each ring read per round. A round's items wait in the merge for up to three rounds (two of
/// lag), about 120 bytes each: a round after rprof was held up (a busy CPU, a stopped terminal) would
/// otherwise hold all that the rings had gathered (4 MiB a ring by default: 60 MB of items were seen at
/// 100,000 events a second under a slow reader). In rounds of this size, a full ring of 40-byte records takes
/// about a hundred rounds (they do not wait in poll).
const ROUND_RECORDS: usize = 1024;

/// Items the merge may hold before rings ahead of a lagging one wait in the kernel: when rings are read a
/// bound at a time, the items of a ring that covers more time per round pile up behind the one that covers
/// less (11.8 MB were seen with two CPUs' rings full).
const MERGE_ITEMS: usize = 8192;

/// What to read of a ring whose last item read is at `last`, when the merge holds back what is past `held`
/// ([`OrderedMerge::held_back`]): nothing while the merge is crowded behind a lagging ring and this one is
/// ahead of it, else a round's bound.
fn round_bound(held: Option<u64>, last: u64) -> usize {
    match held {
        Some(cap) if last > cap => 0,
        _ => ROUND_RECORDS,
    }
}

impl SampledLoop<'_, '_> {
    /// Hand the observer the hits released in this round, then the round's end.
    fn observe(&mut self) {
        let Some(o) = self.observer.as_mut() else {
            return;
        };
        let mut hits = self
            .sink
            .observed
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default();
        let mut go = true;
        for hit in hits.drain(..) {
            go = go && o.hit(&hit, &mut self.sink);
        }
        // The room is kept for the next round's hits.
        if let Some(kept) = self.sink.observed.as_mut() {
            *kept = hits;
        }
        self.sink.forget_exited();
        if !(go && o.round()) {
            self.stop.store(true, Ordering::Relaxed);
        }
    }

    /// Add the events lost since the last call to the sink's statistics.
    fn sync_lost(&mut self) {
        if let Some(r) = self.ring.as_mut() {
            r.take_lost(&mut self.holes);
        }
        self.sink.stats.lost += self.holes.lost - self.lost_synced;
        self.lost_synced = self.holes.lost;
    }
}

impl Handler<ProbeInfo> for SampledLoop<'_, '_> {
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
        let (holes, queued) = (&mut self.holes, self.merge.len());
        decode(rec, infos, &self.parse, &self.types, &mut self.merge, holes);
        if self.merge.len() > queued {
            self.positions.ring_pushed = self.merge.last_pushed();
        }
        Ok(())
    }

    fn round_records(&self, ring: usize) -> Option<usize> {
        let last = self.positions.ring_last.get(ring).copied().unwrap_or(0);
        Some(round_bound(self.merge.held_back(MERGE_ITEMS), last))
    }

    /// Keep the ring's last time; when it has records left, the round releases nothing after that time.
    fn ring_read(&mut self, ring: usize, more: bool) {
        let p = &mut self.positions;
        if p.ring_last.len() <= ring {
            p.ring_last.resize(ring + 1, 0);
        }
        if let Some(last) = p.ring_pushed.take() {
            p.ring_last[ring] = last;
        }
        if more {
            self.merge.cap_round(p.ring_last[ring]);
            self.holes.left_behind();
        }
    }

    fn behind(&self) -> bool {
        self.positions.behind
    }

    fn disable(&mut self) {
        // The counters first: an event between the two is read but not counted, never counted as lost.
        if let Some(c) = &self.counters {
            c.disable();
        }
        if let Some(r) = &self.ring {
            r.disable();
        }
    }

    fn extra_fds(&self) -> Vec<BorrowedFd<'_>> {
        self.ring.as_ref().map(RingEngine::fds).unwrap_or_default()
    }

    /// Read the tracefs ring (the perf rings were read), then release what is in order.
    fn end_round(&mut self, _records: usize, last: bool) -> Result<(), ProbeError> {
        let started = Instant::now();
        if let Some(r) = self.ring.as_mut() {
            let held = self.merge.held_back(MERGE_ITEMS);
            let bound = |at| match last {
                true => usize::MAX,
                false => round_bound(held, at),
            };
            let (read, behind) = r.read(&self.types, &mut self.merge, &mut self.holes, bound)?;
            (self.read, self.positions.behind) = (self.read + read as u64, behind);
            if behind {
                self.holes.left_behind();
            }
            if r.gaps_seen() {
                self.sync_lost();
            }
        }
        self.sink.release(&mut self.merge, last);
        self.observe();
        let started = self.round_started.take().unwrap_or(started);
        self.holes.end_round(started.elapsed());
        if let Some(calls) = self.sink.calls.as_mut() {
            calls.release_joins(false);
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
