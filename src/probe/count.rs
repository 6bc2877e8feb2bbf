//! The counting engine of `rprof probe --count`: one counting perf event per target (per task with
//! `inherit`, or per CPU system-wide), read with `read(2)` at each `-i` tick and at the end. No samples, no
//! return probes, nothing to lose: a probed call costs the uprobe trap and one counter increment. User
//! functions are counted on uprobes of the `uprobe` PMU where the kernel has it (nothing in tracefs, nothing
//! left after a SIGKILL).
use super::group::PlannedEvent;
use super::stats::Stats;
use super::{ProbeError, TaskTarget};
use crate::perf::{Attr, PerfError, PerfEvent, UprobePmu};
use crate::tracefs::Tracefs;

/// The counters of every target.
pub(super) struct Counters {
    /// (target, its events on every task or CPU).
    events: Vec<(u32, Vec<PerfEvent>)>,
    /// Each target's count at the last read.
    last: Vec<u64>,
}

impl Counters {
    /// Open one counter per planned event (each stands for one target) on each task (`inherit`, any CPU) or,
    /// system-wide, on each CPU. A probe the kernel refuses is skipped with a warning.
    pub(super) fn open(
        tracefs: &Tracefs,
        planned: &[PlannedEvent],
        names: &[String],
        target: &TaskTarget,
        tasks: &[i32],
        pmu: Option<UprobePmu>,
    ) -> Result<Counters, ProbeError> {
        let cpus = crate::perf::online_cpus()?;
        let places: Vec<(i32, i32)> = match target {
            TaskTarget::SystemWide => cpus.iter().map(|&c| (-1, c as i32)).collect(),
            _ => tasks.iter().map(|&t| (t, -1)).collect(),
        };
        crate::perf::event_set::raise_nofile((planned.len() * places.len()) as u64);
        let mut events = Vec::new();
        for p in planned {
            let Some(&member) = p.members.first() else {
                continue;
            };
            let attr = match (&p.pmu, pmu) {
                (Some((path, offset)), Some(pmu)) => pmu.attr(path, *offset, false),
                _ => Some(Attr::tracepoint(tracefs.event_id(&p.group, &p.event)?)),
            };
            let Some(mut attr) = attr.map(|a| a.period(0)) else {
                continue;
            };
            if *target != TaskTarget::SystemWide {
                attr = attr.inherit();
            }
            if matches!(target, TaskTarget::Command(_)) {
                attr = attr.enable_on_exec();
            }
            let mut evs = Vec::new();
            for &(pid, cpu) in &places {
                match PerfEvent::open(&attr, pid, cpu) {
                    Ok(ev) => evs.push(ev),
                    Err(PerfError::NoSuchProcess { .. }) if pid != -1 => continue,
                    Err(PerfError::Open { source, .. }) if evs.is_empty() => {
                        eprintln!(
                            "rprof: warning: skipping {}: the kernel refused the probe ({source})",
                            names[member as usize]
                        );
                        break;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            if !evs.is_empty() {
                events.push((member, evs));
            }
        }
        let last = vec![0; names.len()];
        Ok(Counters { events, last })
    }

    /// How many targets are counted.
    pub(super) fn targets(&self) -> usize {
        self.events.len()
    }

    /// How many perf events are open.
    pub(super) fn len(&self) -> usize {
        self.events.iter().map(|(_, e)| e.len()).sum()
    }

    pub(super) fn enable(&self) -> Result<(), PerfError> {
        self.events
            .iter()
            .flat_map(|(_, e)| e)
            .try_for_each(PerfEvent::enable)
    }

    pub(super) fn disable(&self) {
        for ev in self.events.iter().flat_map(|(_, e)| e) {
            let _ = ev.disable();
        }
    }

    /// The counts since the last call, as statistics (counts only).
    pub(super) fn take(&mut self) -> Result<Stats, PerfError> {
        let mut stats = Stats::new(self.last.len());
        for (target, evs) in &self.events {
            let mut total = 0;
            for ev in evs {
                total += ev.read_count()?;
            }
            let t = *target as usize;
            stats.funcs[t].count = total.saturating_sub(self.last[t]);
            self.last[t] = total;
        }
        Ok(stats)
    }
}
