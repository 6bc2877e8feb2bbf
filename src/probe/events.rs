//! Opening the perf events of `rprof probe`: one attr per planned probe event (tracepoint id, sample bits,
//! side-band records on the first), opened for each CPU and task in one [`EventSet`].
use super::group::{PlannedEvent, Role};
use super::live::EventInfo;
use super::resolve::Target;
use super::{ProbeError, ProbeOptions, TaskTarget};
use crate::perf::attr::{regs, sample};
use crate::perf::{ring, Attr, EventSet, PerfError, Refused};
use crate::tracefs::Tracefs;
use linux_perf_event_reader::RecordParseInfo;

/// The open events of a probe session.
pub(super) struct Opened {
    pub(super) events: EventSet<EventInfo>,
    /// Parse info for non-sample records (EXIT, LOST): their fixed fields parse the same under any attr.
    pub(super) any_parse: Option<RecordParseInfo>,
    /// Per target: false when the kernel refused its probe.
    pub(super) usable: Vec<bool>,
}

/// Open one perf event per planned probe event, CPU and task. Returns the events, the parse info of their
/// non-sample records, and which targets are usable (a probe the kernel refuses is skipped with a warning).
pub(super) fn open_events(
    opts: &ProbeOptions,
    tracefs: &Tracefs,
    planned: &[PlannedEvent],
    targets: &[Target],
    tasks: &[i32],
) -> Result<Opened, ProbeError> {
    let cpus = crate::perf::online_cpus()?;
    let page = ring::page_size();
    let pages = opts.mmap_pages.max(1).next_power_of_two();
    let watermark = (pages * page / 4) as u32;
    let any_user = planned.iter().any(|p| p.user);
    let mut plan: Vec<(Attr, EventInfo)> = Vec::new();
    for (n, p) in planned.iter().enumerate() {
        let id = tracefs.event_id(&p.group, &p.event)?;
        let mut bits = sample::IDENTIFIER | sample::TID | sample::TIME;
        let mut addr_field = None;
        if p.user {
            bits |= sample::REGS_USER | sample::RAW;
            let field = if p.role == Role::Return {
                "__probe_func"
            } else {
                "__probe_ip"
            };
            addr_field = Some(
                tracefs
                    .field_offset(&p.group, &p.event, field)?
                    .unwrap_or(8),
            );
        }
        if opts.stacks && p.role != Role::Return {
            bits |= sample::CALLCHAIN;
            if p.user {
                // The return address at SP: the caller, which a frame-pointer walk at function entry skips.
                bits |= sample::STACK_USER;
            }
        }
        let mut attr = Attr::tracepoint(id)
            .sample_type(bits)
            .sample_id_all()
            .wakeup_watermark(watermark);
        if p.user {
            attr = attr.regs_user(1 << regs::SP);
            if bits & sample::STACK_USER != 0 {
                attr = attr.stack_user(8);
            }
        }
        if opts.stacks {
            attr = attr.max_stack(127);
        }
        if opts.target != TaskTarget::SystemWide {
            attr = attr.inherit();
        }
        if matches!(opts.target, TaskTarget::Command(_)) {
            attr = attr.enable_on_exec();
        }
        if n == 0 {
            // One event per task and CPU reports mmaps (to map user addresses back to functions) and thread
            // exits (to close the open calls of threads that end mid-call).
            if any_user || opts.stacks {
                attr = attr.side_band();
            } else if !opts.count_only {
                attr = attr.task_events();
            }
        }
        let target = if p.members.len() == 1 && !p.user {
            Some(p.members[0])
        } else {
            None
        };
        let info = EventInfo {
            target,
            role: p.role,
            addr_field,
            has_sp: p.user,
            parse: attr.parse_info(),
        };
        plan.push((attr, info));
    }
    let mut usable = vec![true; targets.len()];
    // A probe the kernel refuses (other than the first, which carries the side-band records) is skipped.
    let mut refused = |pi: usize, e: &PerfError| {
        let PerfError::Open { source, .. } = e else {
            return Refused::Fail;
        };
        if pi == 0 || plan[pi].1.role == Role::Hit {
            return Refused::Fail;
        }
        let names: Vec<&str> = planned[pi]
            .members
            .iter()
            .take(3)
            .map(|&m| targets[m as usize].name.as_str())
            .collect();
        eprintln!(
            "rprof: warning: skipping {} target(s) ({}...): the kernel refused the probe ({source})",
            planned[pi].members.len(),
            names.join(", ")
        );
        for &m in &planned[pi].members {
            usable[m as usize] = false;
        }
        Refused::Skip
    };
    let events = EventSet::open(&plan, &cpus, tasks, pages, &mut refused)?;
    Ok(Opened {
        any_parse: plan.first().map(|(_, info)| info.parse),
        events,
        usable,
    })
}
