//! Opening the perf events of `rprof probe`: a side-band event (mmaps, forks, exits) and one sampled event per
//! planned probe event read through perf, opened for each CPU and task in one [`EventSet`]; and the table of
//! every probe event's fields by type id, which decodes perf samples and tracefs ring events alike.
use super::group::{PlannedEvent, Role};
use super::live::{EventInfo, EventTypes, PerfParse, ProbeInfo};
use super::resolve::Target;
use super::{ProbeError, ProbeOptions, TaskTarget};
use crate::perf::attr::sample;
use crate::perf::{ring, Attr, EventSet, PerfError, Refused, UprobePmu};
use crate::tracefs::{parse_field_offset, Tracefs};
use std::collections::HashMap;

/// The open perf events of a probe session.
pub(super) struct Opened {
    pub(super) events: EventSet<ProbeInfo>,
    pub(super) parse: PerfParse,
    /// Per target: false when the kernel refused its probe.
    pub(super) usable: Vec<bool>,
}

/// Each planned event's fields, by type id: where the probed address and the stack pointer are. Also each
/// planned event's tracefs id, in `planned`'s order (None for uprobe PMU events), for [`open_events`]. Each
/// event's `id` and `format` files are read once.
pub(super) fn event_types(
    tracefs: &Tracefs,
    planned: &[PlannedEvent],
    targets: &[Target],
) -> Result<(EventTypes, Vec<Option<u64>>), ProbeError> {
    let mut by_type = HashMap::new();
    let mut fields = HashMap::new();
    let mut ids = Vec::with_capacity(planned.len());
    let mut pid_field = None;
    for p in planned {
        if p.pmu.is_some() {
            ids.push(None);
            continue;
        }
        let id = tracefs.event_id(&p.group, &p.event)?;
        ids.push(Some(id));
        // The values a lone target fetches on this event.
        let fetches = match p.members.as_slice() {
            [m] => targets[*m as usize].fetches.as_slice(),
            _ => &[],
        };
        let format = if pid_field.is_none() || p.user || !fetches.is_empty() {
            tracefs.event_format(&p.group, &p.event)?
        } else {
            String::new()
        };
        if pid_field.is_none() {
            pid_field = parse_field_offset(&format, "common_pid");
        }
        let (mut addr_field, mut sp_field) = (None, None);
        if p.user {
            let field = if p.role == Role::Return {
                "__probe_func"
            } else {
                "__probe_ip"
            };
            if p.members.len() > 1 {
                addr_field = Some(parse_field_offset(&format, field).unwrap_or(8));
            }
            sp_field = parse_field_offset(&format, "sp");
        }
        let target = (p.members.len() == 1).then(|| p.members[0]);
        let info = EventInfo {
            target,
            role: p.role,
            addr_field,
            sp_field,
        };
        by_type.insert(id as u16, info);
        let locs = crate::probe::fetch::field_locs(&format, fetches, p.role == Role::Return);
        if !locs.is_empty() {
            fields.insert(id as u16, locs.into_boxed_slice());
        }
    }
    let types = EventTypes {
        by_type,
        pid_field: pid_field.unwrap_or(4),
        fields,
    };
    Ok((types, ids))
}

/// The sample bits of the events read through perf: the time and the event's data (which holds the thread id,
/// the probed address and the fetch arguments), nothing more; with `-g`, the stack at entry and the event id
/// (entries and returns then differ in layout).
fn sample_bits(stacks: bool, role: Role, user: bool) -> u64 {
    let mut bits = sample::TIME | sample::RAW;
    if stacks {
        bits |= sample::IDENTIFIER;
        if role != Role::Return {
            bits |= sample::CALLCHAIN;
            if user {
                // The return address at SP: the caller, which a frame-pointer walk at function entry skips.
                bits |= sample::STACK_USER;
            }
        }
    }
    bits
}

/// The sample bits of a uprobe PMU event (`-g`): no data to carry the thread and the stack pointer, so TID and
/// the user SP register; the id tells entries from returns and which function.
pub(super) fn pmu_sample_bits(stacks: bool, role: Role) -> u64 {
    let mut bits = sample::TIME | sample::TID | sample::IDENTIFIER | sample::REGS_USER;
    if stacks && role != Role::Return {
        bits |= sample::CALLCHAIN | sample::STACK_USER;
    }
    bits
}

/// Open the side-band event and one perf event per planned event not read through the tracefs ring, for each
/// CPU and task (uprobe PMU events with `pmu`); `ids` are the planned events' tracefs ids from
/// [`event_types`]. A probe the kernel refuses is skipped with a warning and its targets marked unusable.
pub(super) fn open_events(
    opts: &ProbeOptions,
    tracefs: &Tracefs,
    planned: &[PlannedEvent],
    ids: &[Option<u64>],
    targets: &[Target],
    tasks: &[i32],
    pmu: Option<UprobePmu>,
) -> Result<Opened, ProbeError> {
    let cpus = crate::perf::online_cpus()?;
    let page = ring::page_size();
    let pages = opts.mmap_pages.max(1).next_power_of_two();
    let watermark = (pages * page / 4) as u32;
    let common = |attr: Attr| {
        let mut attr = attr
            .sample_id_all()
            .clock_monotonic()
            .wakeup_watermark(watermark);
        if opts.target != TaskTarget::SystemWide {
            attr = attr.inherit();
        }
        if matches!(opts.target, TaskTarget::Command(_)) {
            attr = attr.enable_on_exec();
        }
        attr
    };
    let id_bits = if opts.stacks { sample::IDENTIFIER } else { 0 };
    // Mmaps (to map user addresses back to functions), forks (threads to processes) and exits (to close the
    // open calls of threads that end mid-call).
    let side = common(
        Attr::dummy()
            .sample_type(sample::TIME | id_bits)
            .side_band(),
    );
    let info = |attr: Attr, pmu| ProbeInfo {
        parse: attr.parse_info(),
        pmu,
    };
    let mut plan: Vec<(Attr, ProbeInfo)> = vec![(side, info(side, None))];
    let mut members: Vec<&PlannedEvent> = Vec::new();
    for (p, id) in planned.iter().zip(ids).filter(|(p, _)| !p.ring) {
        let (mut attr, pmu_info) = match (&p.pmu, pmu) {
            (Some((path, offset)), Some(pmu)) => {
                let Some(attr) = pmu.attr(path, *offset, p.role == Role::Return) else {
                    continue;
                };
                let attr = attr
                    .sample_type(pmu_sample_bits(opts.stacks, p.role))
                    .regs_user(1 << crate::perf::attr::regs::SP);
                let hits = EventInfo {
                    target: p.members.first().copied(),
                    role: p.role,
                    addr_field: None,
                    sp_field: None,
                };
                (common(attr), Some(hits))
            }
            _ => {
                let id = match id {
                    Some(id) => *id,
                    None => tracefs.event_id(&p.group, &p.event)?,
                };
                let bits = sample_bits(opts.stacks, p.role, p.user);
                (common(Attr::tracepoint(id).sample_type(bits)), None)
            }
        };
        if opts.stacks {
            attr = attr.max_stack(127);
            if p.user && p.role != Role::Return {
                attr = attr.stack_user(8);
            }
        }
        plan.push((attr, info(attr, pmu_info)));
        members.push(p);
    }
    let mut usable = vec![true; targets.len()];
    // A probe the kernel refuses is skipped (the side-band event is needed, and counted tracepoints too).
    let mut refused = |i: usize, e: &PerfError| {
        let PerfError::Open { source, .. } = e else {
            return Refused::Fail;
        };
        if i == 0 || members[i - 1].role == Role::Hit {
            return Refused::Fail;
        }
        let p = members[i - 1];
        let names: Vec<&str> = p
            .members
            .iter()
            .take(3)
            .map(|&m| targets[m as usize].name.as_str())
            .collect();
        eprintln!(
            "rprof: warning: skipping {} target(s) ({}...): the kernel refused the probe ({source})",
            p.members.len(),
            names.join(", ")
        );
        for &m in &p.members {
            usable[m as usize] = false;
        }
        Refused::Skip
    };
    let events = EventSet::open(&plan, &cpus, tasks, pages, &mut refused)?;
    Ok(Opened {
        parse: PerfParse {
            any: plan[0].1.parse,
            samples: plan.get(1).map(|p| p.1.parse),
            by_id: opts.stacks,
        },
        events,
        usable,
    })
}
