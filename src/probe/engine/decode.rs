//! Decoding the records of a probe session: perf samples (their RAW data, or a uprobe PMU sample's thread
//! and registers) and tracefs ring events alike become [`Item`]s in the time-ordered merge; the table of every
//! probe event's fields, by type id, says what each event's data holds.
use super::holes::{Hole, Holes};
use crate::merge::OrderedMerge;
use crate::perf::record_type::{
    EXIT as PERF_RECORD_EXIT, LOST as PERF_RECORD_LOST, SAMPLE as PERF_RECORD_SAMPLE,
};
use crate::perf::{EventInfos, RawRecord};
use crate::probe::analysis::add_entry_caller;
use crate::probe::plan::{PlannedEvent, Role, RAW_SYSCALLS};
use crate::probe::spec::register::SampledRegs;
use crate::probe::spec::sysno::syscall_number;
use crate::probe::target::{TargetId, TargetKind, Targets};
use crate::probe::value::{field_locs, FieldLoc, Value};
use crate::probe::ProbeError;
use crate::process::TaskEvent;
use crate::resolve::FastMap;
use crate::tracefs::{parse_field_offset, Tracefs};
use linux_perf_event_reader::{EventRecord, RecordParseInfo, SampleRecord};

/// What probe knows about one tracefs event, found by its type id (`common_type`, the first field of its data).
#[derive(Clone, Copy, Debug)]
pub struct EventInfo {
    /// The target, when the event stands for one (kernel functions, syscalls, tracepoints, lone user functions).
    pub target: Option<TargetId>,
    pub role: Role,
    /// Offset in the data of the probed address (`__probe_ip` / `__probe_func`), for shared user events.
    pub addr_field: Option<usize>,
    /// Offset in the data of the `sp` fetch argument (timed user probes).
    pub sp_field: Option<usize>,
    /// Offset in the data of the `g` fetch argument (Go: the goroutine, which pairs returns with entries).
    pub key_field: Option<usize>,
    /// Offset in the data of the syscall number (`raw_syscalls` events, shared by many syscalls).
    pub number_field: Option<usize>,
    /// A uprobe or uretprobe (whose `common_flags` say NMI: it runs from the int3 trap).
    pub user: bool,
    /// A software event's registers, read from its samples as its target's fetches.
    pub regs: SampledRegs,
}

impl EventInfo {
    /// An event of `target` (or none) in `role` whose data holds no address, stack pointer, key or number.
    pub fn bare(target: Option<TargetId>, role: Role) -> EventInfo {
        EventInfo {
            target,
            role,
            addr_field: None,
            sp_field: None,
            key_field: None,
            number_field: None,
            user: true,
            regs: SampledRegs::default(),
        }
    }
}

/// The probe's events by type id, and where every event's data holds the thread id (`common_pid`).
#[derive(Debug, Default)]
pub struct EventTypes {
    by_type: FastMap<u16, EventInfo>,
    pid_field: usize,
    /// Where every event's data holds `common_flags` (which say whether it ran in an interrupt).
    flags_field: Option<usize>,
    /// The fetched values of events that have some: (index in the target's fetches, where in the data).
    fields: FastMap<u16, Box<[(usize, FieldLoc)]>>,
    /// The targets of `raw_syscalls` events, by syscall number.
    numbers: FastMap<u64, TargetId>,
}

/// Values fetched by one event: (index in its target's fetches, value).
pub type Values = Box<[(usize, Value)]>;

fn read_u64(data: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(data.get(at..at + 8)?.try_into().ok()?))
}

/// One probe hit, as decoded.
#[derive(Debug)]
pub struct Hit {
    /// The target, or None when the runtime address `addr` names it (user functions sharing an event).
    pub target: Option<TargetId>,
    pub addr: u64,
    pub role: Role,
    pub tid: u32,
    /// The process (perf samples say it; the ring's events do not).
    pub pid: Option<u32>,
    /// The CPU it ran on.
    pub cpu: Option<u32>,
    /// It ran in an interrupt (hard, soft or NMI), for no process: `tid` is the interrupted task's.
    pub irq: bool,
    /// The user stack pointer (timed user probes).
    pub sp: Option<u64>,
    /// What entries and returns pair by instead of the thread: a Go function's goroutine.
    pub key: Option<u64>,
    /// The callchain at entry (`-g`), leaf first, with its context markers.
    pub stack: Option<Box<[u64]>>,
    pub values: Option<Values>,
    /// Read from the tracefs instance ring, which may not filter by task (see
    /// [`crate::probe::plan::Plan::ring_filter_in_kernel`]).
    pub from_ring: bool,
}

/// An event read from a ring, waiting in the time-ordered merge.
#[derive(Debug)]
pub enum Item {
    Hit(Hit),
    /// A change of a process's mappings (MMAP2, COMM exec, FORK).
    Task(TaskEvent),
    /// A new thread `tid` of process `pid` (FORK).
    Thread {
        pid: u32,
        tid: u32,
        /// The thread that forked it (FORK records; None for an exec's COMM).
        parent: Option<u32>,
        /// The process that forked it, when it is a new process (a FORK record of another process's task).
        ppid: Option<u32>,
    },
    /// Thread `tid` is named `comm` from now on (an exec, or a rename).
    Comm {
        tid: u32,
        comm: std::sync::Arc<str>,
    },
    Exit {
        pid: u32,
        tid: u32,
    },
    /// Events were lost (released at the hole's start, so that every call open across it is known).
    Hole(Hole),
}

impl EventTypes {
    /// The types of events that stand for no target, by their ids and roles (the calibration's), with the
    /// thread id at `pid_field` of their data.
    pub fn for_roles(roles: &[(u64, Role)], pid_field: usize) -> EventTypes {
        let by_type = roles
            .iter()
            .map(|&(id, role)| (id as u16, EventInfo::bare(None, role)))
            .collect();
        EventTypes {
            by_type,
            pid_field,
            ..EventTypes::default()
        }
    }

    /// The item of one event's data (from a perf RAW sample or the tracefs ring); None for other events.
    pub fn item(&self, data: &[u8], stack: Option<Box<[u64]>>) -> Option<Item> {
        let kind = u16::from_ne_bytes(data.get(..2)?.try_into().ok()?);
        let info = self.by_type.get(&kind)?;
        let tid = i32::from_ne_bytes(
            data.get(self.pid_field..self.pid_field + 4)?
                .try_into()
                .ok()?,
        );
        let target = match info.number_field {
            // A syscall of no target (read from raw_syscalls with the others) is dropped.
            Some(off) => Some(*self.numbers.get(&read_u64(data, off)?)?),
            None => info.target,
        };
        let addr = match info.addr_field {
            Some(off) => read_u64(data, off)?,
            None => 0,
        };
        let sp = info.sp_field.and_then(|off| read_u64(data, off));
        let key = info.key_field.and_then(|off| read_u64(data, off));
        // TRACE_FLAG_HARDIRQ | TRACE_FLAG_SOFTIRQ | TRACE_FLAG_NMI.
        // Not for uprobes: the kernel runs their handlers from the int3 trap, flagged as an NMI.
        let irq = !info.user
            && self
                .flags_field
                .and_then(|off| data.get(off))
                .is_some_and(|f| f & (0x08 | 0x10 | 0x40) != 0);
        let values = self.fields.get(&kind).map(|fields| {
            fields
                .iter()
                .filter_map(|(i, loc)| Some((*i, loc.read(data)?)))
                .collect()
        });
        Some(Item::Hit(Hit {
            target,
            addr,
            role: info.role,
            tid: tid as u32,
            pid: None,
            cpu: None,
            irq,
            sp,
            key,
            stack,
            values,
            from_ring: false,
        }))
    }
}

/// What a perf event of a probe session is: how its records parse, and, for an event of the uprobe PMU or a
/// software event (which have no tracefs type id to look up), what its hits are.
#[derive(Clone, Copy, Debug)]
pub struct ProbeInfo {
    pub parse: RecordParseInfo,
    pub pmu: Option<EventInfo>,
    /// The planned event it reads (its index in the plan's events), for its kernel filter.
    pub planned: Option<usize>,
}

/// How the perf records of a probe session parse: one layout for all (no IDENTIFIER), or per event id (`-g`,
/// whose entry samples carry stacks and whose returns do not; software events, whose samples have no RAW data).
#[derive(Clone, Copy, Debug)]
pub struct PerfParse {
    /// The side-band event's: non-sample records parse the same under every attr of the session.
    pub any: RecordParseInfo,
    /// The probe events' samples, when they all have one layout (None with `by_id`, or no perf probe events).
    pub samples: Option<RecordParseInfo>,
    pub by_id: bool,
}

/// Decode one perf record into the merge; LOST records become holes (see [`Holes`]).
pub fn decode(
    rec: RawRecord<'_>,
    infos: &EventInfos<ProbeInfo>,
    parse: &PerfParse,
    types: &EventTypes,
    merge: &mut OrderedMerge<Item>,
    holes: &mut Holes,
) {
    if rec.kind == PERF_RECORD_SAMPLE {
        decode_sample(rec, infos, parse, types, merge, holes);
    } else {
        decode_side_band(rec, parse, merge, holes);
    }
}

/// A probe hit: a tracefs event's data says which event and thread it is; a uprobe PMU event's id says which,
/// and the thread and stack pointer come with the sample.
fn decode_sample(
    rec: RawRecord<'_>,
    infos: &EventInfos<ProbeInfo>,
    parse: &PerfParse,
    types: &EventTypes,
    merge: &mut OrderedMerge<Item>,
    holes: &mut Holes,
) {
    let (info, pmu) = match (&parse.samples, parse.by_id) {
        (Some(p), false) => (p, None),
        (_, true) => match infos.of(&rec) {
            Some(p) => (&p.parse, p.pmu),
            None => return,
        },
        (None, false) => return,
    };
    let Ok(EventRecord::Sample(s)) = rec.event(info).parse() else {
        return;
    };
    let Some(time) = s.timestamp else {
        return;
    };
    if let Some(cpu) = s.cpu {
        holes.seen(cpu, time, rec.bytes.len());
    }
    let stack = entry_stack(&s);
    let mut item = match (s.raw, pmu) {
        (Some(raw), _) => types.item(&raw.as_slice(), stack),
        (None, Some(info)) => s.tid.map(|tid| {
            Item::Hit(Hit {
                target: info.target,
                addr: 0,
                role: info.role,
                tid: tid as u32,
                pid: None,
                cpu: None,
                irq: false,
                sp: s
                    .user_regs
                    .as_ref()
                    .and_then(|r| r.get(u64::from(crate::regs::index::SP))),
                key: None,
                stack,
                values: sampled_values(&info.regs, s.intr_regs.as_ref()),
                from_ring: false,
            })
        }),
        (None, None) => None,
    };
    if let Some(Item::Hit(hit)) = item.as_mut() {
        hit.cpu = s.cpu;
        hit.pid = s.pid.filter(|_| !hit.irq).map(|p| p as u32);
    }
    if let Some(item) = item {
        merge.push(time, item);
    }
}

/// A software event's fetched registers, from its sample's REGS_INTR.
fn sampled_values(
    regs: &SampledRegs,
    intr: Option<&linux_perf_event_reader::Regs<'_>>,
) -> Option<Values> {
    let intr = intr?;
    Some(regs.values(|r| intr.get(r)).into_boxed_slice())
}

/// The callchain of an entry sample (`-g`), with the caller read from the copied top of the user stack.
fn entry_stack(s: &SampleRecord<'_>) -> Option<Box<[u64]>> {
    let c = s.callchain.as_ref()?;
    let mut chain: Vec<u64> = (0..c.len()).filter_map(|i| c.get(i)).collect();
    if let Some((mut data, size)) = s.user_stack {
        let mut b = [0u8; 8];
        if size >= 8 && data.read_exact(&mut b).is_ok() {
            add_entry_caller(&mut chain, u64::from_ne_bytes(b));
        }
    }
    Some(chain.into_boxed_slice())
}

/// Losses, and what threads and mappings do.
fn decode_side_band(
    rec: RawRecord<'_>,
    parse: &PerfParse,
    merge: &mut OrderedMerge<Item>,
    holes: &mut Holes,
) {
    let raw = rec.event(&parse.any);
    let time = raw.timestamp().unwrap_or(0);
    let cpu = raw.common_data().ok().and_then(|c| c.cpu);
    if let (Some(cpu), false) = (cpu, rec.kind == PERF_RECORD_LOST) {
        holes.seen(cpu, time, rec.bytes.len());
    }
    match (rec.kind, raw.parse()) {
        (PERF_RECORD_LOST, Ok(EventRecord::Lost(l))) => {
            let hole = holes.perf_lost(cpu.unwrap_or(u32::MAX), time, l.count);
            merge.push(hole.after, Item::Hole(hole));
        }
        (PERF_RECORD_EXIT, Ok(EventRecord::Exit(e))) => merge.push(
            e.timestamp,
            Item::Exit {
                pid: e.pid as u32,
                tid: e.tid as u32,
            },
        ),
        (_, Ok(record)) => {
            // Threads and their processes: from forks, and from the COMM record of an exec (a launched command
            // was forked before the events existed).
            let (time, thread) = match &record {
                EventRecord::Fork(f) => {
                    let ppid = (f.pid != f.ppid).then_some(f.ppid as u32);
                    (f.timestamp, Some((f.pid, f.tid, Some(f.ptid as u32), ppid)))
                }
                EventRecord::Comm(c) => (time, Some((c.pid, c.tid, None, None))),
                _ => (time, None),
            };
            if let Some((pid, tid, parent, ppid)) = thread {
                let (pid, tid) = (pid as u32, tid as u32);
                merge.push(
                    time,
                    Item::Thread {
                        pid,
                        tid,
                        parent,
                        ppid,
                    },
                );
            }
            if let EventRecord::Comm(c) = &record {
                let name = c.name.as_slice();
                let comm = String::from_utf8_lossy(&name).into();
                let tid = c.tid as u32;
                merge.push(time, Item::Comm { tid, comm });
            }
            if let Some(task) = TaskEvent::from_record(&record) {
                merge.push(time, Item::Task(task));
            }
        }
        _ => {}
    }
}

/// Each planned event's fields, by type id: where the probed address and the stack pointer are. Also each
/// planned event's tracefs id, in `planned`'s order (None for uprobe PMU events), for opening the perf events.
/// Each event's `id` and `format` files are read once.
pub fn event_types(
    tracefs: &Tracefs,
    planned: &[PlannedEvent],
    targets: &Targets,
) -> Result<(EventTypes, Vec<Option<u64>>), ProbeError> {
    let mut types = EventTypes::default();
    let mut ids = Vec::with_capacity(planned.len());
    let mut pid_field = None;
    for p in planned {
        if !p.in_tracefs() {
            ids.push(None);
            continue;
        }
        let id = tracefs.event_id(&p.group, &p.event)?;
        ids.push(Some(id));
        // The values a lone target fetches on this event.
        let fetches = match p.members.as_slice() {
            [m] => targets[*m].fetches.as_slice(),
            _ => &[],
        };
        // The shared events of many syscalls (not a tracepoint target `t:raw_syscalls:...` of its own).
        let raw = p.group == RAW_SYSCALLS
            && p.members
                .iter()
                .all(|&m| matches!(targets[m].kind, TargetKind::Syscall { .. }));
        if raw {
            for &m in &p.members {
                if let TargetKind::Syscall { name } = &targets[m].kind {
                    types.numbers.extend(syscall_number(name).map(|nr| (nr, m)));
                }
            }
        }
        let format = if pid_field.is_none() || p.user || raw || !fetches.is_empty() {
            tracefs.event_format(&p.group, &p.event)?
        } else {
            String::new()
        };
        if pid_field.is_none() {
            pid_field = parse_field_offset(&format, "common_pid");
            types.flags_field = parse_field_offset(&format, "common_flags");
        }
        types.by_type.insert(id as u16, event_info(p, &format, raw));
        // A pair's event holds the values of the ends it is.
        let ends: Vec<std::ops::Range<usize>> = match (p.role, p.members.as_slice()) {
            (Role::Pair(mask), [m]) => targets[*m]
                .pair()
                .into_iter()
                .flat_map(|pair| pair.ends())
                .filter(|(bit, _)| mask & bit != 0)
                .map(|(_, e)| e.fetches.clone())
                .collect(),
            _ => Vec::new(),
        };
        let wanted = |i: usize, f: &crate::probe::spec::fetch::Fetch| match p.role {
            Role::Pair(_) => ends.iter().any(|r| r.contains(&i)),
            role => f.on_return == (role == Role::Return),
        };
        let locs = field_locs(&format, fetches, &wanted);
        if !locs.is_empty() {
            types.fields.insert(id as u16, locs.into_boxed_slice());
        }
    }
    types.pid_field = pid_field.unwrap_or(4);
    Ok((types, ids))
}

/// Where one event's data holds the probed address (of a uprobe, or of the function a uretprobe returns from),
/// the stack pointer and the goroutine, from its `format`; `syscalls`: the shared events of many syscalls, whose
/// number says which.
fn event_info(p: &PlannedEvent, format: &str, syscalls: bool) -> EventInfo {
    let (mut addr_field, mut sp_field, mut key_field) = (None, None, None);
    if p.user {
        let probed = parse_field_offset(format, "__probe_func")
            .or_else(|| parse_field_offset(format, "__probe_ip"));
        if p.members.len() > 1 {
            addr_field = Some(probed.unwrap_or(8));
        }
        sp_field = parse_field_offset(format, "sp");
        key_field = parse_field_offset(format, "g");
    }
    let number_field = match syscalls {
        true => Some(parse_field_offset(format, "id").unwrap_or(8)),
        false => None,
    };
    EventInfo {
        target: (p.members.len() == 1).then(|| p.members[0]),
        role: p.role,
        addr_field,
        sp_field,
        key_field,
        number_field,
        user: p.user,
        regs: SampledRegs::default(),
    }
}
