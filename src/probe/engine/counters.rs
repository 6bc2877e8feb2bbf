//! The counting engine of `rprof probe --count`: one counting perf event per target (per task with
//! `inherit`, or per CPU system-wide), read with `read(2)` at each `-i` tick and at the end. No samples, no
//! return probes, nothing to lose: a probed call costs the uprobe trap and one counter increment. User
//! functions are counted on uprobes of the `uprobe` PMU where the kernel has it (nothing in tracefs, nothing
//! left after a SIGKILL).
use super::Refusal;
use crate::perf::{Attr, PerfError, PerfEvent, UprobePmu};
use crate::probe::analysis::Stats;
use crate::probe::plan::PlannedEvent;
use crate::probe::target::{PerTarget, TargetId};
use crate::probe::{ProbeError, TaskTarget};
use crate::process::Cgroup;
use crate::tracefs::Tracefs;
use std::os::fd::AsFd;

/// The counters of every target.
pub struct Counters {
    /// (target, its events on every task or CPU).
    events: Vec<(TargetId, Vec<PerfEvent>)>,
    /// Each target's count at the last read.
    last: PerTarget<u64>,
}

impl Counters {
    /// Open one counter per planned event (each stands for one target of the `targets` counted) on each task
    /// (`inherit`, any CPU) or, system-wide, on each CPU (only while the tasks of `cgroup` run there, when
    /// given). A probe the kernel refuses is skipped and returned.
    pub fn open(
        tracefs: &Tracefs,
        planned: &[PlannedEvent],
        targets: usize,
        (target, cgroup): (&TaskTarget, Option<&Cgroup>),
        tasks: &[i32],
        pmu: Option<UprobePmu>,
    ) -> Result<(Counters, Vec<Refusal>), ProbeError> {
        let cpus = crate::perf::online_cpus()?;
        let places: Vec<(i32, i32)> = match target {
            TaskTarget::SystemWide => cpus.iter().map(|&c| (-1, c as i32)).collect(),
            _ => tasks.iter().map(|&t| (t, -1)).collect(),
        };
        crate::perf::event_set::raise_nofile((planned.len() * places.len()) as u64);
        let mut events = Vec::new();
        let mut refused = Vec::new();
        for p in planned {
            let Some(&member) = p.members.first() else {
                continue;
            };
            let attr = match (p.pmu(), pmu, p.software()) {
                // Counted only where every event is a hit (see the plan's `countable`).
                (_, _, Some((event, _))) => Some(event.attr()),
                (Some((path, offset)), Some(pmu), None) => pmu.attr(path, offset, false),
                _ => Some(Attr::tracepoint(tracefs.event_id(&p.group, &p.event)?)),
            };
            let Some(mut attr) = attr.map(|a| a.period(0)) else {
                continue;
            };
            if *target != TaskTarget::SystemWide {
                attr = attr.inherit();
            }
            let mut evs = Vec::new();
            for &(pid, cpu) in &places {
                let opened = match cgroup {
                    Some(cg) => PerfEvent::open_cgroup(&attr, cg.dir.as_fd(), cpu),
                    None => PerfEvent::open(&attr, pid, cpu),
                };
                match opened {
                    Ok(ev) => {
                        if let Some(f) = &p.filter {
                            super::perf::set_filter(&ev, p, f, tracefs)?;
                        }
                        evs.push(ev)
                    }
                    Err(PerfError::NoSuchProcess { .. }) if pid != -1 => continue,
                    Err(PerfError::Open { source, .. }) if evs.is_empty() => {
                        refused.push(Refusal {
                            targets: vec![member],
                            reason: source.to_string(),
                        });
                        break;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            if !evs.is_empty() {
                events.push((member, evs));
            }
        }
        let last = PerTarget::filled(targets, 0);
        Ok((Counters { events, last }, refused))
    }

    /// How many targets are counted.
    pub fn targets(&self) -> usize {
        self.events.len()
    }

    /// How many perf events are open.
    pub fn len(&self) -> usize {
        self.events.iter().map(|(_, e)| e.len()).sum()
    }

    pub fn enable(&self) -> Result<(), PerfError> {
        self.events
            .iter()
            .flat_map(|(_, e)| e)
            .try_for_each(PerfEvent::enable)
    }

    pub fn disable(&self) {
        for ev in self.events.iter().flat_map(|(_, e)| e) {
            let _ = ev.disable();
        }
    }

    /// Close every counter, in parallel (see [`crate::perf::close_all`]).
    pub fn close(self) {
        crate::perf::close_all(self.events.into_iter().flat_map(|(_, e)| e).collect());
    }

    /// The counts since the last call, as statistics (counts only).
    pub fn take(&mut self) -> Result<Stats, PerfError> {
        let mut stats = Stats::new(self.last.len());
        for (target, evs) in &self.events {
            let mut total = 0;
            for ev in evs {
                total += ev.read_count()?;
            }
            stats.funcs[*target].count = total.saturating_sub(self.last[*target]);
            self.last[*target] = total;
        }
        Ok(stats)
    }
}
