//! `--count` on counters: one counting perf event per target, read at each `-i` tick and at the end; no
//! samples, nothing to read in the loop.
use super::{calibrate, exit_code, no_usable, pid_list, report_refused, start, stop_when, Setup};
use crate::perf::{self, EventInfos, Handler, RawRecord};
use crate::probe::engine::cost::Costs;
use crate::probe::engine::counters::Counters;
use crate::probe::output::{self, ReportParts};
use crate::probe::plan::{Placement, Plan};
use crate::probe::target::{PerTarget, Targets};
use crate::probe::{Notice, ProbeError, ProbeOptions, RunSummary, Started};
use std::io::Write;

/// `--count`: counters only.
pub(super) fn run_counters(
    s: &mut Setup<'_>,
    plan: &Plan,
    out: &mut dyn Write,
) -> Result<RunSummary, ProbeError> {
    let cgroup = s
        .opts
        .cgroup
        .as_deref()
        .map(crate::process::Cgroup::open)
        .transpose()?;
    let (mut counters, refused) = Counters::open(
        s.tracefs,
        &plan.events,
        s.targets.len(),
        (&s.opts.target, cgroup.as_ref()),
        &s.tasks,
        s.pmu,
    )?;
    report_refused(s, &refused);
    if counters.targets() == 0 {
        return Err(no_usable(s.opts));
    }
    let costs = calibrate(s, plan, |c, report| c.counters(report));
    // Enabled before a launched command execs: its execve is counted.
    counters.enable()?;
    start(s)?;
    let engine = if plan.uses_pmu() {
        "engine: counters (uprobe PMU)"
    } else {
        "engine: counters"
    };
    let started = Started {
        targets: counters.targets(),
        probe_points: plan.probe_points(),
        perf_events: counters.len(),
        engine: engine.into(),
        counting: true,
        costs,
        values: Vec::new(),
        setup: s.started.elapsed(),
    };
    (s.notice)(Notice::Started(started));
    let mut empty: perf::EventSet<()> =
        perf::EventSet::open(&[], &[], &[], 1, &mut |_, _| perf::Refused::Fail)?;
    let mut handler = CountLoop {
        counters: &mut counters,
        opts: s.opts,
        targets: s.targets,
        placements: &plan.placements,
        out,
        costs,
    };
    let pids = pid_list(s.opts);
    perf::run_loop::run(
        &mut empty,
        &s.signals,
        stop_when(s.opts, s.workload.as_mut(), &pids),
        &mut handler,
    )?;
    handler.counters.disable();
    handler.tick()?;
    (s.notice)(Notice::Removing);
    counters.close();
    Ok(RunSummary {
        exit_code: exit_code(s),
        folded: None,
    })
}

/// The loop's handler for counters: nothing to read, a report at each tick.
struct CountLoop<'a> {
    counters: &'a mut Counters,
    opts: &'a ProbeOptions,
    targets: &'a Targets,
    placements: &'a PerTarget<Option<Placement>>,
    out: &'a mut dyn Write,
    costs: Costs,
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
        let stacks = Default::default();
        let parts = ReportParts {
            targets: self.targets,
            stats: &stats,
            timed: false,
            open_calls: 0,
            costs: self.costs,
            placements: self.placements,
            calls: None,
            stacks: &stacks,
            loss: None,
        };
        Ok(output::write_report(self.out, self.opts, &parts)?)
    }
}
