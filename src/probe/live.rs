//! Decoding and applying the records of `rprof probe`: each record read from a ring becomes an [`Item`] in the
//! time-ordered merge, and the [`Sink`] applies the items in time order (pairing, mappings, stacks).
use super::addrmap::AddrMap;
use super::group::Role;
use super::pairing::Pairer;
use super::stacks::{self, StackCounter};
use super::stats::Stats;
use crate::merge::OrderedMerge;
use crate::perf::attr::regs;
use crate::perf::{EventInfos, RawRecord};
use crate::process::{AddressSpaces, TaskEvent};
use linux_perf_event_reader::{EventRecord, RecordParseInfo, RecordType};
use std::collections::HashSet;

use crate::perf::record_type::{
    EXIT as PERF_RECORD_EXIT, LOST as PERF_RECORD_LOST, SAMPLE as PERF_RECORD_SAMPLE,
};

/// What probe knows about one perf event.
#[derive(Clone, Copy)]
pub(super) struct EventInfo {
    /// The target, when the event stands for one (kernel functions, syscalls, tracepoints).
    pub(super) target: Option<u32>,
    pub(super) role: Role,
    /// Offset in the raw data of the probed address (`__probe_ip` / `__probe_func`), for shared user events.
    pub(super) addr_field: Option<usize>,
    /// The event's samples carry the user SP (uprobes and uretprobes).
    pub(super) has_sp: bool,
    pub(super) parse: RecordParseInfo,
}

/// An event read from a ring, waiting in the time-ordered merge.
pub(super) enum Item {
    /// A hit of `target`, or of the user function at runtime address `addr`.
    Sample {
        target: Option<u32>,
        addr: u64,
        role: Role,
        pid: u32,
        tid: u32,
        sp: Option<u64>,
        stack: Option<Box<[u64]>>,
    },
    /// A change of a process's mappings (MMAP2, COMM exec, FORK).
    Task(TaskEvent),
    Exit {
        pid: u32,
        tid: u32,
    },
}

/// Decode one record into the merge; counts lost events. `any` parses the non-sample records (EXIT, LOST):
/// their fixed fields parse the same under any attr.
#[allow(clippy::too_many_arguments)]
pub(super) fn decode(
    rec: RawRecord<'_>,
    infos: &EventInfos<EventInfo>,
    any: Option<RecordParseInfo>,
    merge: &mut OrderedMerge<Item>,
    stats: &mut Stats,
    addrs: &AddrMap,
    want_paths: bool,
) {
    if rec.kind == PERF_RECORD_SAMPLE {
        let Some(id) = linux_perf_event_reader::get_record_identifier::<byteorder::NativeEndian>(
            RecordType(rec.kind),
            rec.body(),
            true,
        ) else {
            return;
        };
        let Some(info) = infos.get(id) else { return };
        let Ok(EventRecord::Sample(s)) = rec.event(&info.parse).parse() else {
            return;
        };
        let (Some(time), Some(tid)) = (s.timestamp, s.tid) else {
            return;
        };
        let sp = if info.has_sp {
            s.user_regs.as_ref().and_then(|r| r.get(regs::SP as u64))
        } else {
            None
        };
        let addr = match (info.addr_field, &s.raw) {
            (Some(off), Some(raw)) => {
                let mut b = [0u8; 8];
                let mut d = *raw;
                if d.skip(off).is_err() || d.read_exact(&mut b).is_err() {
                    return;
                }
                u64::from_ne_bytes(b)
            }
            _ => 0,
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
        let pid = s.pid.unwrap_or(0) as u32;
        let item = Item::Sample {
            target: info.target,
            addr,
            role: info.role,
            pid,
            tid: tid as u32,
            sp,
            stack,
        };
        merge.push(time, item);
        return;
    }
    let Some(p) = &any else { return };
    let raw = rec.event(p);
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
        (_, Ok(record)) if want_paths || !addrs.is_empty() => {
            let time = match &record {
                EventRecord::Fork(f) => f.timestamp,
                _ => time,
            };
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
    pub(super) timed: bool,
    /// User hits whose address matched no probed function (a process whose mappings were missed).
    pub(super) unresolved: u64,
}

impl Sink {
    pub(super) fn apply(&mut self, time: u64, item: Item) {
        match item {
            Item::Sample {
                target,
                addr,
                role,
                pid,
                tid,
                sp,
                stack,
            } => {
                // A process whose mappings came before we looked (or were missed): read them now.
                if self.spaces.get(pid).is_none() && self.synthesized.insert(pid) {
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
                match role {
                    Role::Entry if self.timed => {
                        self.pairer.entry(&mut self.stats, tid, target, time, sp)
                    }
                    Role::Return if self.timed => {
                        self.pairer.ret(&mut self.stats, tid, target, time, sp)
                    }
                    Role::Return => {}
                    Role::Entry | Role::Hit => self.stats.funcs[target as usize].enter(),
                }
                if let Some(chain) = stack {
                    self.stacks.add(target, pid, self.spaces.get(pid), &chain);
                }
            }
            Item::Task(task) => self.spaces.apply(task),
            Item::Exit { pid, tid } => {
                self.pairer.thread_exit(&mut self.stats, tid);
                if pid == tid {
                    self.spaces.apply(TaskEvent::Exit { pid });
                }
            }
        }
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
