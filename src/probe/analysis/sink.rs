//! The sink: decoded events, released in time order by the merge, become calls (pairing), statistics,
//! per-call work (values, slow calls, trace lines) and stacks; mapping events keep the address spaces current.
use super::addrmap::AddrMap;
use super::calls::{Call, Calls};
use super::context::{Comms, Ctx};
use super::filter::UserFilter;
use super::keyed::KeyedPairer;
use super::pairing::{NetCost, Pairer, Return, StackKey};
use super::stacks::StackCounter;
use super::stats::Stats;
use crate::merge::OrderedMerge;
use crate::probe::engine::decode::{Hit, Item, Values};
use crate::probe::engine::holes::Hole;
use crate::probe::observe::{HitRole, ObservedHit};
use crate::probe::output::TraceOut;
use crate::probe::plan::Role;
use crate::probe::target::{PerTarget, TargetId, TargetKind, Targets};
use crate::probe::value::Value;
use crate::process::{AddressSpaces, TaskEvent};
use crate::resolve::{FastMap, FastSet};

/// The state that released events update.
pub struct Sink<'a> {
    pub targets: &'a Targets,
    pub stats: Stats,
    pub pairer: Pairer,
    /// Keyed pairs (`--pair ... --key`).
    pub keyed: KeyedPairer,
    pub stacks: StackCounter,
    addrs: AddrMap,
    /// Every process's mappings.
    pub spaces: AddressSpaces,
    /// Processes whose mappings were read from /proc on their first hit.
    synthesized: FastSet<u32>,
    /// The process of each thread seen (from FORK records, or /proc on a thread's first hit).
    threads: FastMap<u32, u32>,
    /// Returns are probed: entries and returns are paired into calls.
    pub timed: bool,
    /// User hits whose address matched no probed function (a process whose mappings were missed).
    pub unresolved: u64,
    /// Per-call work (`--by`, `--hist VALUE`, `--min-duration`, `--trace`), when asked for.
    pub calls: Option<Calls>,
    /// `--trace-out`: every call written to a trace-event file.
    pub trace_out: Option<TraceOut>,
    /// Values read just before their target's next entry on a thread (a syscall's strings, at its `syscall`
    /// instruction): (thread, target) -> values.
    pending: FastMap<(u32, TargetId), Vec<Option<Value>>>,
    /// Ring hits are kept only from these processes and those they fork (when the ring is not filtered by task
    /// in the kernel); None keeps every hit.
    only: Option<FastSet<u32>>,
    /// The hits dropped by that filter.
    pub foreign: Foreign,
    /// The launched command's thread until its first event: it waited for its start in a `read` of rprof's
    /// launcher, whose return (a syscall probe's, or a hit of a syscall exit's tracepoint) is rprof's, not
    /// the command's.
    pub launcher: Option<u32>,
    /// Every thread's command name.
    comms: Comms,
    /// The part of each target's filter that rprof evaluates.
    filters: PerTarget<Option<UserFilter>>,
    /// The part of each target's filter decided when a call returns (it names `ret`).
    ret_filters: PerTarget<Option<UserFilter>>,
    /// Targets with no return to time (an address inside a function, some Go functions): their entries are
    /// counted as hits, never left open.
    counted_only: PerTarget<bool>,
    /// Syscalls whose entries the kernel's filter rejects on values their exits lack: the exit of a rejected
    /// call comes without an entry, and is no orphan.
    entry_filtered: PerTarget<bool>,
    /// Entries that filter rejected, whose returns are dropped with them: (thread, target) -> their SPs.
    rejected: FastMap<(u32, TargetId), Vec<Option<u64>>>,
    /// The filters of pairs' ends: (pair, end's bit) -> the filter, evaluated whole by rprof.
    pub(super) pair_filters: FastMap<(TargetId, u32), UserFilter>,
    /// Every hit that passed the filters, for the session's observer ([`crate::probe::run_observed`]), kept
    /// until the end of the reading round.
    pub observed: Option<Vec<ObservedHit>>,
    /// Processes that exited while hits were kept for the observer, and their address space's generation:
    /// their mappings are forgotten once the hits were handed over ([`Sink::forget_exited`]), so that the
    /// observer can still name their addresses.
    exited: Vec<(u32, u64)>,
    /// The hits go to an observer that names no addresses but their stacks (`rprof bt` without `usym()`), and
    /// no filter, per-call work or trace of rprof's reads them: a process's mappings are not read from /proc
    /// on its first hit, nor its parent (`ppid`).
    pub observer_only: bool,
}

impl<'a> Sink<'a> {
    /// An empty sink for `targets`, pairing when `timed` (net of the probes' costs with `net`; keyed pairs
    /// bounded by `keyed`), with per-call work when `calls` is given.
    pub fn new(
        targets: &'a Targets,
        addrs: AddrMap,
        timed: bool,
        net: Option<PerTarget<NetCost>>,
        keyed: KeyedPairer,
        calls: Option<Calls>,
    ) -> Sink<'a> {
        Sink {
            targets,
            stats: Stats::new(targets.len()),
            pairer: Pairer::new(net),
            keyed,
            stacks: StackCounter::new(),
            addrs,
            spaces: AddressSpaces::new(),
            synthesized: FastSet::default(),
            threads: FastMap::default(),
            timed,
            unresolved: 0,
            calls,
            trace_out: None,
            pending: FastMap::default(),
            only: None,
            foreign: Foreign::default(),
            launcher: None,
            comms: Comms::of_running_tasks(),
            filters: targets
                .iter()
                .map(|(_, t)| t.filter.as_ref()?.user.as_ref().map(UserFilter::new))
                .collect(),
            ret_filters: targets
                .iter()
                .map(|(_, t)| t.filter.as_ref()?.at_return.as_ref().map(UserFilter::new))
                .collect(),
            counted_only: targets
                .iter()
                .map(|(_, t)| {
                    matches!(t.go, Some(crate::probe::spec::go::GoFunction::CountOnly(_)))
                })
                .collect(),
            entry_filtered: targets
                .iter()
                .map(|(_, t)| {
                    matches!(t.kind, TargetKind::Syscall { .. })
                        && t.filter
                            .as_ref()
                            .is_some_and(|f| f.kernel != f.kernel_return)
                })
                .collect(),
            rejected: FastMap::default(),
            pair_filters: super::pair_hit::end_filters(targets),
            observed: None,
            exited: Vec::new(),
            observer_only: false,
        }
    }

    /// Keep a hit for the observer (its stack named now, so that it can be kept by name).
    fn observed(&mut self, call: &Call, role: Role, pid: u32, chain: Option<&[u64]>) {
        let role = match role {
            Role::Entry => HitRole::Entry,
            Role::Return => HitRole::Return,
            Role::Hit => HitRole::Hit,
            Role::Value | Role::Pair(_) => return,
        };
        let stack = chain.map(|c| self.stacks.named(pid, self.spaces.get(pid), c));
        let hit = ObservedHit {
            target: call.target,
            role,
            time: call.time,
            pid: call.ctx.pid,
            tid: call.tid,
            cpu: call.ctx.cpu,
            comm: call.ctx.comm.clone(),
            values: call.values.clone(),
            stack,
        };
        if let Some(hits) = self.observed.as_mut() {
            hits.push(hit);
        }
    }

    /// Forget the mappings of the processes that exited while their hits waited for the observer (unless a
    /// new process of the same pid has mapped since).
    pub fn forget_exited(&mut self) {
        for (pid, generation) in std::mem::take(&mut self.exited) {
            if self.spaces.generation(pid) == generation {
                self.spaces.apply(TaskEvent::Exit { pid });
            }
        }
    }

    /// Keep ring hits of `pids` (and of the processes they fork) only; None keeps every hit.
    pub fn only_processes(&mut self, pids: Option<Vec<u32>>) {
        self.only = pids.map(|p| p.into_iter().collect());
    }

    /// Thread `tid` belongs to process `pid` (known before any record says so).
    pub fn add_thread(&mut self, tid: u32, pid: u32) {
        self.threads.insert(tid, pid);
    }

    /// Whether hits name their target by address (user functions sharing events).
    pub fn needs_mappings(&self) -> bool {
        !self.addrs.is_empty()
    }

    pub fn apply(&mut self, time: u64, item: Item) {
        match item {
            Item::Hit(hit) => self.hit(time, hit),
            Item::Task(task) => self.spaces.apply(task),
            Item::Thread {
                pid,
                tid,
                parent,
                ppid,
            } => {
                // Side-band records come from the target's tasks only.
                self.threads.insert(tid, pid);
                if let Some(parent) = parent {
                    self.comms.fork(tid, parent);
                }
                if let Some(ppid) = ppid {
                    self.comms.set_parent(pid, ppid);
                }
                if let Some(only) = &mut self.only {
                    only.insert(pid);
                }
            }
            Item::Comm { tid, comm } => self.comms.set(tid, comm),
            Item::Hole(hole) => self.hole(hole),
            Item::Exit { pid, tid } => {
                // perf trace's lines show the calls a thread never returned from (exit_group) as `= ?`.
                let perf_trace = self.calls.as_ref().is_some_and(|c| {
                    c.opts.trace && c.opts.style == crate::probe::TraceStyle::PerfTrace
                });
                if perf_trace {
                    for call in self.pairer.open_on(tid) {
                        self.done(&call, pid, None);
                    }
                }
                self.threads.remove(&tid);
                self.comms.exit(tid);
                if let Some(calls) = self.calls.as_mut() {
                    calls.thread_exit(tid);
                }
                self.rejected.retain(|(t, _), _| *t != tid);
                self.pending.retain(|(t, _), _| *t != tid);
                self.pairer.thread_exit(&mut self.stats, tid);
                match (pid == tid, self.observed.is_some()) {
                    (true, true) => self.exited.push((pid, self.spaces.generation(pid))),
                    (true, false) => self.spaces.apply(TaskEvent::Exit { pid }),
                    (false, _) => {}
                }
            }
        }
    }

    /// Events were lost (released at the hole's start): calls open now or entered before its end are not timed
    /// (see [`Pairer`]); the trace marks the place.
    fn hole(&mut self, hole: Hole) {
        self.stats.holes += 1;
        self.pairer.hole_end = self.pairer.hole_end.max(hole.until);
        self.keyed.hole_end = self.keyed.hole_end.max(hole.until);
        if let Some(calls) = self.calls.as_mut() {
            calls.hole(hole);
        }
        if let Some(out) = self.trace_out.as_mut() {
            out.hole(&hole);
        }
    }

    /// One probe hit: its target (by address for shared user events), then by role an entry, a return or a
    /// counted hit, and its stack.
    fn hit(&mut self, time: u64, hit: Hit) {
        if hit.from_ring && !self.in_target(hit.tid) {
            self.foreign.hits += 1;
            return;
        }
        if self.launcher_return(&hit) {
            return;
        }
        let keyed = hit.target.is_some_and(|t| self.targets[t].is_keyed());
        let pair = matches!(hit.role, Role::Pair(_));
        let filtered = hit.target.is_some_and(|t| self.filters[t].is_some());
        let needs_pid = hit.target.is_none()
            || self.observed.is_some()
            || hit.stack.is_some()
            || self.calls.is_some()
            || self.trace_out.is_some()
            || filtered;
        let Some(pid) = self.hit_pid(&hit, keyed, needs_pid) else {
            self.unresolved += 1;
            return;
        };
        let target = match hit.target {
            Some(t) => t,
            None => match self.addrs.lookup(self.spaces.get(pid), hit.addr) {
                Some(t) => t,
                None => {
                    self.unresolved += 1;
                    return;
                }
            },
        };
        let mut call = Call::entry(target, hit.tid, time);
        let observed = self.observed.is_some();
        if self.calls.is_some() || pair || self.trace_out.is_some() || filtered || observed {
            call.ctx = self.context(&hit, pid);
            self.carry(&mut call, pid, hit.values, hit.stack.as_deref());
        }
        if hit.role == Role::Value {
            // Kept for the entry that follows on this thread (bounded: one per thread and target).
            self.pending.insert((hit.tid, target), call.values);
            return;
        }
        // The values read just before this entry (a syscall's strings, at its `syscall` instruction), which
        // the filter may test. A return ends the call whose entry the kernel's filter may have dropped: what
        // was read for it is no later call's.
        let pending = match self.pending.is_empty() {
            true => None,
            false => self.pending.remove(&(hit.tid, target)),
        };
        if let Some(values) = pending {
            if hit.role != Role::Return {
                call.join_return(values);
            }
        }
        if filtered && !self.passes(&call, hit.role, hit.sp) {
            return;
        }
        if observed {
            self.observed(&call, hit.role, pid, hit.stack.as_deref());
        }
        if let Role::Pair(mask) = hit.role {
            self.pair_hit(call, mask, hit.stack.as_deref(), pid);
            return;
        }
        let key = match hit.key {
            Some(g) => StackKey::Goroutine(g),
            None => StackKey::Thread(hit.tid),
        };
        match hit.role {
            Role::Entry if self.timed && !self.counted_only[target] => {
                self.pairer.entry(&mut self.stats, call, key, hit.sp)
            }
            // The exit of a call whose entry the kernel's filter rejected.
            Role::Return if self.entry_filtered[target] && !self.pairer.is_open(key, target) => {}
            Role::Return if self.timed => {
                let filter = self.ret_filters[target].as_ref();
                let fetches = &self.targets[target].fetches;
                let keep = |c: &Call| filter.is_none_or(|f| f.keeps(fetches, c));
                let ret = Return {
                    time,
                    sp: hit.sp,
                    values: call.values,
                };
                if let Some(closed) = self
                    .pairer
                    .ret_with(&mut self.stats, key, target, ret, &keep)
                {
                    self.done(&closed, pid, None);
                }
            }
            Role::Return | Role::Value | Role::Pair(_) => {}
            Role::Entry | Role::Hit => {
                self.stats.funcs[target].enter();
                self.done(&call, pid, None);
            }
        }
        if let Some(chain) = hit.stack {
            self.stacks.add(target, pid, self.spaces.get(pid), &chain);
        }
    }

    /// Whether a hit is the launched command's first event and the return of rprof's launcher's `read` (a
    /// syscall probe's return, or a syscall exit's tracepoint), which is rprof's, not the command's.
    fn launcher_return(&mut self, hit: &Hit) -> bool {
        if self.launcher != Some(hit.tid) {
            return false;
        }
        self.launcher = None;
        let exit_tracepoint = hit.target.is_some_and(|t| match &self.targets[t].kind {
            TargetKind::Tracepoint { category, event } => {
                crate::probe::spec::sysno::tracepoint_syscall(category, event)
                    .is_some_and(|(_, exit)| exit)
                    || (category == "raw_syscalls" && event == "sys_exit")
            }
            _ => false,
        });
        hit.role == Role::Return || exit_tracepoint
    }

    /// The process of a hit, where the hit needs one (else 0); None where it cannot be known.
    fn hit_pid(&mut self, hit: &Hit, keyed: bool, needs_pid: bool) -> Option<u32> {
        if !needs_pid {
            return Some(0);
        }
        match hit.pid.or_else(|| self.pid_of(hit.tid)) {
            Some(pid) => {
                // A process whose mappings came before we looked (or were missed): read them now, where
                // something names its addresses.
                let names = hit.stack.is_some() || hit.target.is_none() || !self.observer_only;
                if names && self.spaces.get(pid).is_none() && self.synthesized.insert(pid) {
                    self.spaces.synthesize(pid);
                }
                Some(pid)
            }
            // An event of a known target, without a stack, in a task gone before it was read (a short program,
            // read after its exit): its values are in the event. Its process is taken to be its thread (a keyed
            // pair's, none).
            None if hit.target.is_some() && hit.stack.is_none() => {
                Some(if keyed { 0 } else { hit.tid })
            }
            None => None,
        }
    }

    /// The process context of a hit in process `pid` (none but the CPU in an interrupt).
    pub(super) fn context(&mut self, hit: &Hit, pid: u32) -> Ctx {
        if hit.irq {
            return Ctx {
                cpu: hit.cpu,
                ..Ctx::default()
            };
        }
        Ctx {
            pid: Some(pid),
            tid: Some(hit.tid),
            comm: self.comms.get(hit.tid),
            cpu: hit.cpu,
            // Read by filters, per-call work and traces (`ppid`); not by an observer.
            ppid: match self.observer_only {
                true => None,
                false => self.comms.parent(pid),
            },
        }
    }

    /// Whether a hit of a target with a filter counts: an entry (or hit) by rprof's part of the filter, a return
    /// unless it returns from an entry the filter rejected.
    fn passes(&mut self, call: &Call, role: Role, sp: Option<u64>) -> bool {
        let key = (call.tid, call.target);
        if role == Role::Return {
            let Some(open) = self.rejected.get_mut(&key) else {
                return true;
            };
            let entry_sp = sp.map(|s| s.wrapping_sub(8));
            let at = open
                .iter()
                .rposition(|s| s.is_none() || entry_sp.is_none() || *s == entry_sp);
            return match at {
                Some(i) => {
                    open.remove(i);
                    false
                }
                None => true,
            };
        }
        let Some(f) = &self.filters[call.target] else {
            return true;
        };
        if !matches!(role, Role::Entry | Role::Hit)
            || f.keeps(&self.targets[call.target].fetches, call)
        {
            return true;
        }
        if role == Role::Entry && self.timed {
            let open = self.rejected.entry(key).or_default();
            if open.len() < 64 {
                open.push(sp);
            }
        }
        false
    }

    /// A call that ended (or a hit): per-call work and the trace-event file; `key`: a keyed pair's key.
    pub(super) fn done(&mut self, call: &Call, pid: u32, key: Option<&[Value]>) {
        if let Some(out) = self.trace_out.as_mut() {
            let by = self.calls.as_ref().and_then(|c| c.by_value(call));
            out.call(call, pid, &self.targets[call.target], key, by.as_ref());
        }
        if let Some(calls) = self.calls.as_mut() {
            calls.add(call);
        }
    }

    /// What one event of a call carries for it: its values in the target's order, its caller's frames, and
    /// (for the slow-call list) the stack at entry.
    fn carry(&mut self, call: &mut Call, pid: u32, values: Option<Values>, stack: Option<&[u64]>) {
        let t = &self.targets[call.target];
        let caller = t.fetches.iter().position(|f| f.label == "caller");
        let kernel = t.is_kernel();
        call.values = vec![None; t.fetches.len()];
        for (i, v) in values.map(Vec::from).unwrap_or_default() {
            if let Some(slot) = call.values.get_mut(i) {
                *slot = Some(v);
            }
        }
        // The process's mappings are looked up only for what names addresses (most hits have neither).
        if let Some(Some(Value::Addr(ret))) = caller.and_then(|i| call.values.get(i)) {
            let space = self.spaces.get(pid);
            call.caller = Some(self.stacks.caller(pid, space, *ret, kernel));
        }
        let slow = self
            .calls
            .as_ref()
            .is_some_and(|c| c.opts.min_duration.is_some());
        if let (true, Some(chain)) = (slow, stack) {
            call.stack = Some(self.stacks.frames(pid, self.spaces.get(pid), chain));
        }
    }

    /// Whether thread `tid` is one of the target's (always, without a filter): its process is a target process
    /// or one they forked (a FORK record came first). A task gone before its hit was read, with no record, is
    /// not.
    fn in_target(&mut self, tid: u32) -> bool {
        if self.only.is_none() || self.launcher == Some(tid) {
            return true;
        }
        if self.foreign.tids.contains(&tid) {
            return false;
        }
        let pid = self.pid_of(tid);
        if let (Some(p), Some(only)) = (pid, &self.only) {
            if only.contains(&p) {
                return true;
            }
        }
        self.foreign.tids.insert(tid);
        self.foreign.pids.extend(pid);
        false
    }

    /// The process of thread `tid`: known from a FORK record, or read from /proc (kept for its next hits).
    fn pid_of(&mut self, tid: u32) -> Option<u32> {
        if tid == 0 {
            // The idle task: interrupts that came while a CPU idled.
            return Some(0);
        }
        if let Some(&pid) = self.threads.get(&tid) {
            return Some(pid);
        }
        let pid = crate::process::tgid(tid as i32).ok()? as u32;
        self.threads.insert(tid, pid);
        Some(pid)
    }

    /// Release what the merge holds (all of it with `drain`).
    pub fn release(&mut self, merge: &mut OrderedMerge<Item>, drain: bool) {
        if drain {
            merge.drain(|t, item| self.apply(t, item));
        } else {
            merge.finish_round(|t, item| self.apply(t, item));
        }
    }
}

/// Ring hits of tasks outside the target, dropped: processes that mapped a probed file after the start (the
/// ring is then not filtered by task in the kernel).
#[derive(Debug, Default)]
pub struct Foreign {
    pub hits: u64,
    /// The threads seen, so that each is looked up once.
    tids: FastSet<u32>,
    pids: FastSet<u32>,
}

impl Foreign {
    /// The processes seen (a thread whose process was gone counts as one).
    pub fn processes(&self) -> usize {
        self.pids.len().max(usize::from(!self.tids.is_empty()))
    }
}

/// `usym()`/`ksym()` of an observer: the stacks' resolver, with the mappings as of the round's hits.
impl crate::probe::observe::AddrNames for Sink<'_> {
    fn user(&mut self, pid: u32, addr: u64) -> Option<crate::probe::ObservedFrame> {
        self.stacks.name_one(pid, self.spaces.get(pid), addr, false)
    }

    fn kernel(&mut self, addr: u64) -> Option<crate::probe::ObservedFrame> {
        self.stacks.name_one(0, None, addr, true)
    }
}
