//! Decoding and applying the records of `rprof probe`: each record read from a ring becomes an [`Item`] in the
//! time-ordered merge, and the [`Sink`] applies the items in time order (pairing, mappings, stacks).
use super::addrmap::AddrMap;
use super::calls::{Call, Calls};
use super::fetch::{FieldLoc, Value};
use super::group::Role;
use super::pairing::{CallData, Pairer};
use super::stacks::{self, StackCounter};
use super::stats::Stats;
use crate::merge::OrderedMerge;
use crate::perf::{EventInfos, RawRecord};
use crate::process::{AddressSpaces, TaskEvent};
use linux_perf_event_reader::{EventRecord, RecordParseInfo};
use std::collections::{HashMap, HashSet};

use crate::perf::record_type::{
    EXIT as PERF_RECORD_EXIT, LOST as PERF_RECORD_LOST, SAMPLE as PERF_RECORD_SAMPLE,
};

/// What probe knows about one tracefs event, found by its type id (`common_type`, the first field of its data).
#[derive(Clone, Copy, Debug)]
pub(super) struct EventInfo {
    /// The target, when the event stands for one (kernel functions, syscalls, tracepoints, lone user functions).
    pub(super) target: Option<u32>,
    pub(super) role: Role,
    /// Offset in the data of the probed address (`__probe_ip` / `__probe_func`), for shared user events.
    pub(super) addr_field: Option<usize>,
    /// Offset in the data of the `sp` fetch argument (timed user probes).
    pub(super) sp_field: Option<usize>,
}

/// The probe's events by type id, and where every event's data holds the thread id (`common_pid`).
pub(super) struct EventTypes {
    pub(super) by_type: HashMap<u16, EventInfo>,
    pub(super) pid_field: usize,
    /// The fetched values of events that have some: (index in the target's fetches, where in the data).
    pub(super) fields: HashMap<u16, Box<[(usize, FieldLoc)]>>,
}

/// Values fetched by one event: (index in its target's fetches, value).
pub(super) type Values = Box<[(usize, Value)]>;

fn read_u64(data: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(data.get(at..at + 8)?.try_into().ok()?))
}

impl EventTypes {
    /// The item of one event's data (from a perf RAW sample or the tracefs ring); None for other events.
    pub(super) fn item(&self, data: &[u8], stack: Option<Box<[u64]>>) -> Option<Item> {
        let kind = u16::from_ne_bytes(data.get(..2)?.try_into().ok()?);
        let info = self.by_type.get(&kind)?;
        let tid = i32::from_ne_bytes(
            data.get(self.pid_field..self.pid_field + 4)?
                .try_into()
                .ok()?,
        );
        let addr = match info.addr_field {
            Some(off) => read_u64(data, off)?,
            None => 0,
        };
        let sp = info.sp_field.and_then(|off| read_u64(data, off));
        let values = self.fields.get(&kind).map(|fields| {
            fields
                .iter()
                .filter_map(|(i, loc)| Some((*i, loc.read(data)?)))
                .collect()
        });
        Some(Item::Sample {
            target: info.target,
            addr,
            role: info.role,
            tid: tid as u32,
            sp,
            stack,
            values,
        })
    }
}

/// An event read from a ring, waiting in the time-ordered merge.
pub(super) enum Item {
    /// A hit of `target`, or of the user function at runtime address `addr`, in thread `tid`.
    Sample {
        target: Option<u32>,
        addr: u64,
        role: Role,
        tid: u32,
        sp: Option<u64>,
        stack: Option<Box<[u64]>>,
        values: Option<Values>,
    },
    /// A change of a process's mappings (MMAP2, COMM exec, FORK).
    Task(TaskEvent),
    /// A new thread `tid` of process `pid` (FORK).
    Thread {
        pid: u32,
        tid: u32,
    },
    Exit {
        pid: u32,
        tid: u32,
    },
}

/// What a perf event of a probe session is: how its records parse, and, for an event of the uprobe PMU (which
/// has no tracefs type id to look up), what its hits are.
#[derive(Clone, Copy, Debug)]
pub(super) struct ProbeInfo {
    pub(super) parse: RecordParseInfo,
    pub(super) pmu: Option<EventInfo>,
}

/// How the perf records of a probe session parse: one layout for all (no IDENTIFIER), or per event id (`-g`,
/// whose entry samples carry stacks and whose returns do not).
pub(super) struct PerfParse {
    /// The side-band event's: non-sample records parse the same under every attr of the session.
    pub(super) any: RecordParseInfo,
    /// The probe events' samples, when they all have one layout (None with `by_id`, or no perf probe events).
    pub(super) samples: Option<RecordParseInfo>,
    pub(super) by_id: bool,
}

/// Decode one perf record into the merge; counts lost events.
pub(super) fn decode(
    rec: RawRecord<'_>,
    infos: &EventInfos<ProbeInfo>,
    parse: &PerfParse,
    types: &EventTypes,
    merge: &mut OrderedMerge<Item>,
    stats: &mut Stats,
) {
    if rec.kind == PERF_RECORD_SAMPLE {
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
        let stack = s.callchain.map(|c| {
            let mut chain: Vec<u64> = (0..c.len()).filter_map(|i| c.get(i)).collect();
            if let Some((mut data, size)) = s.user_stack {
                let mut b = [0u8; 8];
                if size >= 8 && data.read_exact(&mut b).is_ok() {
                    stacks::add_entry_caller(&mut chain, u64::from_ne_bytes(b));
                }
            }
            chain.into_boxed_slice()
        });
        // A tracefs event's data says which event and thread it is; a uprobe PMU event's id says which, and
        // the thread and stack pointer come with the sample.
        let item = match (s.raw, pmu) {
            (Some(raw), _) => types.item(&raw.as_slice(), stack),
            (None, Some(info)) => s.tid.map(|tid| Item::Sample {
                target: info.target,
                addr: 0,
                role: info.role,
                tid: tid as u32,
                sp: s
                    .user_regs
                    .as_ref()
                    .and_then(|r| r.get(u64::from(crate::regs::index::SP))),
                stack,
                values: None,
            }),
            (None, None) => None,
        };
        if let Some(item) = item {
            merge.push(time, item);
        }
        return;
    }
    let raw = rec.event(&parse.any);
    let time = raw.timestamp().unwrap_or(0);
    match (rec.kind, raw.parse()) {
        (PERF_RECORD_LOST, Ok(EventRecord::Lost(l))) => stats.lost += l.count,
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
                EventRecord::Fork(f) => (f.timestamp, Some((f.pid, f.tid))),
                EventRecord::Comm(c) => (time, Some((c.pid, c.tid))),
                _ => (time, None),
            };
            if let Some((pid, tid)) = thread {
                merge.push(
                    time,
                    Item::Thread {
                        pid: pid as u32,
                        tid: tid as u32,
                    },
                );
            }
            if let Some(task) = TaskEvent::from_record(&record) {
                merge.push(time, Item::Task(task));
            }
        }
        _ => {}
    }
}

/// The state that released events update.
pub(super) struct Sink {
    pub(super) stats: Stats,
    pub(super) pairer: Pairer,
    pub(super) stacks: StackCounter,
    pub(super) addrs: AddrMap,
    /// Every process's mappings.
    pub(super) spaces: AddressSpaces,
    /// Processes whose mappings were read from /proc on their first hit.
    pub(super) synthesized: HashSet<u32>,
    /// The process of each thread seen (from FORK records, or /proc on a thread's first hit).
    pub(super) threads: HashMap<u32, u32>,
    pub(super) timed: bool,
    /// User hits whose address matched no probed function (a process whose mappings were missed).
    pub(super) unresolved: u64,
    /// Per-call work (`--by`, `--hist VALUE`, `--min-duration`, `--trace`), when asked for.
    pub(super) calls: Option<Calls>,
    /// Per target: how many values it fetches, where its `caller` is, and whether it is a kernel function.
    pub(super) fetch_shape: Vec<FetchShape>,
}

/// What a target's fetched values look like to the sink.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct FetchShape {
    pub(super) count: usize,
    pub(super) caller: Option<usize>,
    pub(super) kernel: bool,
}

impl Sink {
    pub(super) fn apply(&mut self, time: u64, item: Item) {
        match item {
            Item::Sample {
                target,
                addr,
                role,
                tid,
                sp,
                stack,
                values,
            } => {
                let needs_pid = target.is_none() || stack.is_some() || self.calls.is_some();
                let pid = if needs_pid {
                    match self.pid_of(tid) {
                        Some(p) => p,
                        None => {
                            self.unresolved += 1;
                            return;
                        }
                    }
                } else {
                    0
                };
                // A process whose mappings came before we looked (or were missed): read them now.
                if needs_pid && self.spaces.get(pid).is_none() && self.synthesized.insert(pid) {
                    self.spaces.synthesize(pid);
                }
                let target = match target {
                    Some(t) => t,
                    None => match self.addrs.lookup(self.spaces.get(pid), addr) {
                        Some(t) => t,
                        None => {
                            self.unresolved += 1;
                            return;
                        }
                    },
                };
                let data = self
                    .calls
                    .is_some()
                    .then(|| self.call_data(target, pid, values, stack.as_deref()));
                match role {
                    Role::Entry if self.timed => {
                        self.pairer
                            .entry(&mut self.stats, tid, target, time, sp, data)
                    }
                    Role::Return if self.timed => {
                        let closed = self.pairer.ret(&mut self.stats, tid, target, time, sp);
                        if let (Some(calls), Some(closed)) = (self.calls.as_mut(), closed) {
                            let mut entry = closed.data.map(|d| *d).unwrap_or_default();
                            // The values fetched at the return join those of the entry.
                            if let Some(ret) = data {
                                if entry.values.len() < ret.values.len() {
                                    entry.values.resize(ret.values.len(), None);
                                }
                                for (slot, v) in entry.values.iter_mut().zip(ret.values) {
                                    if v.is_some() {
                                        *slot = v;
                                    }
                                }
                            }
                            calls.add(&Call {
                                target,
                                tid,
                                time: closed.time,
                                dur: Some((closed.dur, closed.self_ns)),
                                values: &entry.values,
                                caller: entry.caller,
                                stack: entry.stack,
                            });
                        }
                    }
                    Role::Return => {}
                    Role::Entry | Role::Hit => {
                        self.stats.funcs[target as usize].enter();
                        if let (Some(calls), Some(d)) = (self.calls.as_mut(), data) {
                            calls.add(&Call {
                                target,
                                tid,
                                time,
                                dur: None,
                                values: &d.values,
                                caller: d.caller,
                                stack: d.stack,
                            });
                        }
                    }
                }
                if let Some(chain) = stack {
                    self.stacks.add(target, pid, self.spaces.get(pid), &chain);
                }
            }
            Item::Task(task) => self.spaces.apply(task),
            Item::Thread { pid, tid } => {
                self.threads.insert(tid, pid);
            }
            Item::Exit { pid, tid } => {
                self.threads.remove(&tid);
                self.pairer.thread_exit(&mut self.stats, tid);
                if pid == tid {
                    self.spaces.apply(TaskEvent::Exit { pid });
                }
            }
        }
    }

    /// What one event of `target` carries for its call: its values in the target's order, its caller's frames,
    /// and (for the slow-call list) the stack at entry.
    fn call_data(
        &mut self,
        target: u32,
        pid: u32,
        values: Option<Values>,
        stack: Option<&[u64]>,
    ) -> Box<CallData> {
        let shape = self
            .fetch_shape
            .get(target as usize)
            .copied()
            .unwrap_or_default();
        let mut data = CallData {
            values: vec![None; shape.count],
            caller: None,
            stack: None,
        };
        for (i, v) in values.map(Vec::from).unwrap_or_default() {
            if let Some(slot) = data.values.get_mut(i) {
                *slot = Some(v);
            }
        }
        let space = self.spaces.get(pid);
        if let Some(Some(Value::Addr(ret))) = shape.caller.and_then(|i| data.values.get(i)) {
            data.caller = Some(self.stacks.caller(pid, space, *ret, shape.kernel));
        }
        let slow = self
            .calls
            .as_ref()
            .is_some_and(|c| c.opts.min_duration.is_some());
        if let (true, Some(chain)) = (slow, stack) {
            data.stack = Some(self.stacks.frames(pid, space, chain));
        }
        Box::new(data)
    }

    /// The process of thread `tid`: known from a FORK record, or read from /proc (kept for its next hits).
    fn pid_of(&mut self, tid: u32) -> Option<u32> {
        if let Some(&pid) = self.threads.get(&tid) {
            return Some(pid);
        }
        let pid = crate::process::tgid(tid as i32).ok()? as u32;
        self.threads.insert(tid, pid);
        Some(pid)
    }

    /// Release what the merge holds (all of it with `drain`).
    pub(super) fn release(&mut self, merge: &mut OrderedMerge<Item>, drain: bool) {
        if drain {
            merge.drain(|t, item| self.apply(t, item));
        } else {
            merge.finish_round(|t, item| self.apply(t, item));
        }
    }
}
