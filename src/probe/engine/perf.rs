//! Opening the perf events of `rprof probe`: a side-band event (mmaps, forks, exits) and one sampled event per
//! planned probe event read through perf, opened for each CPU and task in one [`EventSet`].
use super::decode::{EventInfo, PerfParse, ProbeInfo};
use super::Refusal;
use crate::perf::attr::sample;
use crate::perf::{ring, Attr, EventSet, PerfError, Refused, UprobePmu};
use crate::probe::plan::{PlannedEvent, Role};
use crate::probe::{ProbeError, ProbeOptions, TaskTarget};
use crate::tracefs::Tracefs;

/// The open perf events of a probe session.
pub struct Opened {
    pub events: EventSet<ProbeInfo>,
    pub parse: PerfParse,
    /// The probes the kernel refused (their targets are not probed).
    pub refused: Vec<Refusal>,
}

/// The sample bits of the events read through perf: the time and the event's data (which holds the thread id,
/// the probed address and the fetch arguments), nothing more; with `-g`, the stack at entry; the event id
/// where the session's samples differ in layout (`by_id`: entries and returns with `-g`, software events).
fn sample_bits(stacks: bool, by_id: bool, role: Role, user: bool) -> u64 {
    let mut bits = sample::TIME | sample::RAW | sample::TID | sample::CPU;
    if by_id {
        bits |= sample::IDENTIFIER;
    }
    if stacks && role != Role::Return {
        bits |= sample::CALLCHAIN;
        if user {
            // The return address at SP: the caller, which a frame-pointer walk at function entry skips.
            bits |= sample::STACK_USER;
        }
    }
    bits
}

/// The sample bits of a software event (`profile:hz:99`): no data to carry the thread, so TID (with the
/// process); the id says which target; with `-g`, the kernel's and the user's stack where it fired; with
/// `regs`, the registers where it fired (`profile:hz:99(%ip)`).
pub fn software_sample_bits(stacks: bool, regs: bool) -> u64 {
    let mut bits = sample::TIME | sample::TID | sample::CPU | sample::IDENTIFIER;
    if stacks {
        bits |= sample::CALLCHAIN;
    }
    if regs {
        bits |= sample::REGS_INTR;
    }
    bits
}

/// The sample bits of a uprobe PMU event (`-g`): no data to carry the thread and the stack pointer, so TID and
/// the user SP register; the id tells entries from returns and which function.
pub fn pmu_sample_bits(stacks: bool, role: Role) -> u64 {
    let mut bits =
        sample::TIME | sample::TID | sample::CPU | sample::IDENTIFIER | sample::REGS_USER;
    if stacks && role != Role::Return {
        bits |= sample::CALLCHAIN | sample::STACK_USER;
    }
    bits
}

/// Open the side-band event and one perf event per planned event not read through the tracefs ring, for each
/// CPU and task (uprobe PMU events with `pmu`); `ids` are the planned events' tracefs ids (from
/// [`super::decode::event_types`]). A probe the kernel refuses is skipped and listed in [`Opened::refused`].
pub fn open_events(
    opts: &ProbeOptions,
    tracefs: &Tracefs,
    planned: &[PlannedEvent],
    ids: &[Option<u64>],
    tasks: &[i32],
    pmu: Option<UprobePmu>,
) -> Result<Opened, ProbeError> {
    let cpus = crate::perf::online_cpus()?;
    let pages = opts.mmap_pages.max(1).next_power_of_two();
    // Samples told apart by their event's id: with `-g` (entries carry stacks, returns do not), or beside a
    // software event (no RAW data to name its target).
    let by_id = opts.stacks || planned.iter().any(|p| !p.ring() && p.software().is_some());
    let common = Common {
        opts,
        watermark: (pages * ring::page_size() / 4) as u32,
        by_id,
    };
    let id_bits = if by_id { sample::IDENTIFIER } else { 0 };
    // Mmaps (to map user addresses back to functions), forks (threads to processes) and exits (to close the
    // open calls of threads that end mid-call).
    let side = common.apply(
        Attr::dummy()
            .sample_type(sample::TIME | sample::TID | sample::CPU | id_bits)
            .side_band(),
        false,
    );
    let mut specs: Vec<(Attr, ProbeInfo)> = vec![(side, info(side, None))];
    let mut members: Vec<&PlannedEvent> = Vec::new();
    for (n, (p, id)) in planned
        .iter()
        .zip(ids)
        .enumerate()
        .filter(|(_, (p, _))| !p.ring())
    {
        let Some(mut spec) = event_spec(&common, tracefs, p, *id, pmu)? else {
            continue;
        };
        spec.1.planned = Some(n);
        specs.push(spec);
        members.push(p);
    }
    let mut refusals = Vec::new();
    // A probe the kernel refuses is skipped (the side-band event is needed, and counted tracepoints too).
    let mut refused = |i: usize, e: &PerfError| {
        let PerfError::Open { source, .. } = e else {
            return Refused::Fail;
        };
        if i == 0 || members[i - 1].role == Role::Hit {
            return Refused::Fail;
        }
        refusals.push(Refusal {
            targets: members[i - 1].members.clone(),
            reason: source.to_string(),
        });
        Refused::Skip
    };
    let everywhere: Vec<bool> = std::iter::once(false)
        .chain(members.iter().map(|p| p.everywhere))
        .collect();
    let events = EventSet::open_mixed(&specs, &everywhere, &cpus, tasks, pages, &mut refused)?;
    set_filters(&events, planned, tracefs)?;
    Ok(Opened {
        parse: PerfParse {
            any: specs[0].1.parse,
            samples: specs.get(1).map(|p| p.1.parse),
            by_id,
        },
        events,
        refused: refusals,
    })
}

/// What every perf event of the session shares: the clock, the wakeup watermark, and following the target's
/// tasks. A launched command's events are enabled just before it execs (not by `enable_on_exec`), so that
/// its `execve` is seen entering, as `strace` sees it.
struct Common<'a> {
    opts: &'a ProbeOptions,
    watermark: u32,
    /// Every sample carries its event's id (see [`PerfParse::by_id`]).
    by_id: bool,
}

impl Common<'_> {
    /// The session's settings on `attr`; an event read `everywhere` watches every task from the start.
    fn apply(&self, attr: Attr, everywhere: bool) -> Attr {
        let mut attr = attr
            .sample_id_all()
            .clock_monotonic()
            .wakeup_watermark(self.watermark);
        if everywhere {
            return attr.start_enabled();
        }
        if self.opts.target != TaskTarget::SystemWide {
            attr = attr.inherit();
        }
        attr
    }
}

fn info(attr: Attr, pmu: Option<EventInfo>) -> ProbeInfo {
    ProbeInfo {
        parse: attr.parse_info(),
        pmu,
        planned: None,
    }
}

/// Give each open event its planned event's kernel filter (`PERF_EVENT_IOC_SET_FILTER`), before it is enabled.
fn set_filters(
    events: &EventSet<ProbeInfo>,
    planned: &[PlannedEvent],
    tracefs: &Tracefs,
) -> Result<(), ProbeError> {
    events.try_each(|ev, info| {
        let Some(p) = info.planned.and_then(|n| planned.get(n)) else {
            return Ok(());
        };
        match &p.filter {
            Some(f) => set_filter(ev, p, f, tracefs),
            None => Ok(()),
        }
    })
}

/// Set one perf event's filter; a filter the kernel refuses is an error with the reason `error_log` gives.
pub fn set_filter(
    ev: &crate::perf::PerfEvent,
    p: &PlannedEvent,
    filter: &str,
    tracefs: &Tracefs,
) -> Result<(), ProbeError> {
    ev.set_filter(filter).map_err(|_| {
        crate::tracefs::TracefsError::Filter {
            event: format!("{}:{}", p.group, p.event),
            filter: filter.to_string(),
            detail: tracefs.filter_error(),
        }
        .into()
    })
}

/// The attr of one planned event read through perf: a software event or a uprobe PMU probe (the thread, and
/// the SP of a probe, from the sample) or a tracefs event (its data says everything). None when the PMU cannot take the path.
fn event_spec(
    common: &Common<'_>,
    tracefs: &Tracefs,
    p: &PlannedEvent,
    id: Option<u64>,
    pmu: Option<UprobePmu>,
) -> Result<Option<(Attr, ProbeInfo)>, ProbeError> {
    let stacks = common.opts.stacks;
    if let Some((event, sample)) = p.software() {
        let regs = p.sampled_regs();
        let attr = sample
            .apply(event.attr())
            .sample_type(software_sample_bits(stacks, regs.mask() != 0))
            .regs_intr(regs.mask());
        let mut attr = common.apply(attr, p.everywhere);
        if stacks {
            attr = attr.max_stack(127);
        }
        let hits = EventInfo {
            regs,
            ..EventInfo::bare(p.members.first().copied(), p.role)
        };
        return Ok(Some((attr, info(attr, Some(hits)))));
    }
    let (mut attr, pmu_info) = match (p.pmu(), pmu) {
        (Some((path, offset)), Some(pmu)) => {
            let Some(attr) = pmu.attr(path, offset, p.role == Role::Return) else {
                return Ok(None);
            };
            let attr = attr
                .sample_type(pmu_sample_bits(stacks, p.role))
                .regs_user(1 << crate::perf::attr::regs::SP);
            let hits = EventInfo::bare(p.members.first().copied(), p.role);
            (common.apply(attr, p.everywhere), Some(hits))
        }
        _ => {
            let id = match id {
                Some(id) => id,
                None => tracefs.event_id(&p.group, &p.event)?,
            };
            let bits = sample_bits(stacks, common.by_id, p.role, p.user);
            (
                common.apply(Attr::tracepoint(id).sample_type(bits), p.everywhere),
                None,
            )
        }
    };
    if stacks {
        attr = attr.max_stack(127);
        if p.user && p.role != Role::Return {
            attr = attr.stack_user(8);
        }
    }
    Ok(Some((attr, info(attr, pmu_info))))
}
