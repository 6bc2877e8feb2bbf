//! The tracefs instance ring of a session: made (or the plan made again without it), its tasks set (in the
//! kernel or, when only the target maps the probed files, by the sink) and its events enabled.
use super::Setup;
use crate::probe::engine::ring::RingEngine;
use crate::probe::engine::Refusal;
use crate::probe::plan::{self, Plan};
use crate::probe::{Notice, ProbeError, TaskTarget};

/// The tracefs instance ring, when the plan reads events from it. When it cannot be made, the plan is made
/// again without it (perf events read everything; the probe definitions are the same).
pub(super) fn open_ring(s: &mut Setup<'_>, plan: &mut Plan) -> Option<RingEngine> {
    if !plan.uses_ring() {
        return None;
    }
    match RingEngine::create(s.tracefs, &s.group, s.opts) {
        Ok(r) => Some(r),
        Err(e) => {
            (s.notice)(Notice::RingUnavailable(e.to_string()));
            s.caps.ring = false;
            *plan = plan::plan(&s.group, s.targets, s.opts, &s.caps);
            None
        }
    }
}

/// Set the ring's tasks (filtered in the kernel when `in_kernel`), enable its events (those the kernel refuses
/// are returned).
pub(super) fn enable_ring(
    s: &Setup<'_>,
    plan: &Plan,
    ring: &mut RingEngine,
    in_kernel: bool,
) -> Result<Vec<Refusal>, ProbeError> {
    ring.set_tasks(&s.opts.target, &s.tasks, in_kernel)?;
    let mut refused = Vec::new();
    for p in plan.events.iter().filter(|p| p.ring()) {
        if let Err(e) = ring.enable(&p.group, &p.event, p.filter.as_deref()) {
            if let crate::tracefs::TracefsError::Filter { .. } = e {
                return Err(e.into());
            }
            refused.push(Refusal {
                targets: p.members.clone(),
                reason: e.to_string(),
            });
        }
    }
    Ok(refused)
}

/// The processes of a task target (none system-wide): the ones the sink keeps ring hits of, with those they fork.
pub(super) fn target_pids(s: &Setup<'_>) -> Option<Vec<u32>> {
    match &s.opts.target {
        TaskTarget::SystemWide => None,
        TaskTarget::Pid(p) => Some(vec![*p as u32]),
        TaskTarget::Command(_) => Some(s.workload.iter().map(|w| w.pid() as u32).collect()),
    }
}
