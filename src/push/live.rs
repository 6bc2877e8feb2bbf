//! The records of a recording in progress as profiles: events in time order tracked into address spaces and
//! commands (as every reader of a recording does), each sample's stack resolved once per distinct raw stack,
//! and the samples kept until their period is cut into a [`Profile`] for the pprof writer.
//!
//! The resolver and its caches live across periods (a binary is read once, not once a period), and are
//! started afresh (the raw stacks still waiting resolved again) once enough processes have exited or enough
//! frames piled up, so that a host where processes come and go every second keeps a flat memory.
pub(crate) mod top;
mod unsym;

use super::budget::{Keeper, Over, PushBudget};
use crate::merge::OrderedMerge;
use crate::process::AddressSpaces;
use crate::recording::{CpuMode, Event, Sample, Sampling};
use crate::replay::track;
use crate::report::{exports_of, FrameId, Profile, StackCount, StackResolver, TimedSample};
use crate::resolve::FastMap;
use crate::symbols::SymbolizerOptions;
use std::collections::HashMap;
use std::sync::Arc;

/// Start the resolver afresh past this many exited processes since it started...
const EXITS_BEFORE_RESET: u64 = 300;
/// ... or this many distinct raw stacks.
const STACKS_BEFORE_RESET: usize = 200_000;
/// A restarted resolver keeps the symbolizer (binaries read, kernel symbols, resolved offsets: what costs CPU to
/// make again) unless it holds more than this many resolved offsets (each a few hundred bytes of names and
/// paths; a host running builds met ~400 new ones per 15 s period, so 200,000 let them pile up for hours)...
const MAX_RESOLVED: usize = 50_000;
/// ... or this many binaries (each with its symbols and DWARF).
const MAX_BINARIES: usize = 256;

/// A raw stack as sampled, the key of the resolved-stack cache.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ChainKey {
    pid: u32,
    generation: u64,
    kernel: bool,
    /// `addrs` is a callchain (leaf first, with PERF_CONTEXT_* markers); else only the IP.
    chain: bool,
    addrs: Vec<u64>,
}

/// A sample waiting for its period to be cut.
#[derive(Clone, Debug)]
pub(crate) struct HeldSample {
    pub(crate) time: u64,
    pid: u32,
    tid: u32,
    comm: Arc<str>,
    /// Index in [`Live::stacks`].
    stack: u32,
    weight: u64,
    off_cpu: bool,
}

/// What the session counted beside samples.
#[derive(Clone, Copy, Debug, Default)]
pub struct LiveCounts {
    pub samples: u64,
    pub lost: u64,
    pub lost_samples: u64,
    /// Resolver restarts (memory bound).
    pub resets: u64,
    /// Samples that arrived after their period was cut (they go into the next one).
    pub late: u64,
}

/// The live session.
pub(crate) struct Live {
    opts: SymbolizerOptions,
    resolver: StackResolver,
    spaces: AddressSpaces,
    merge: OrderedMerge<Event>,
    comm_of_tid: FastMap<u32, Arc<str>>,
    chains: FastMap<ChainKey, u32>,
    /// Distinct raw stacks with their frames (outermost first, some pending).
    stacks: Vec<(ChainKey, Vec<FrameId>)>,
    /// Samples not yet in a cut period.
    held: Vec<HeldSample>,
    /// Container id of each process met (None: not in a container), read from /proc at its first sample.
    containers: FastMap<u32, Option<Arc<str>>>,
    exits: u64,
    /// `--push-unsymbolized`: no binary is read but for its build id, found here by (pid, path).
    unsymbolized: bool,
    build_ids: FastMap<(u32, String), Option<Vec<u8>>>,
    /// ... and by file identity, so that a binary's id is read once, not once per process that maps it.
    build_ids_by_file: FastMap<unsym::FileKey, Option<Vec<u8>>>,
    /// The kernel's `_text` (from its mapping), told again to a restarted resolver.
    kernel_text: Option<u64>,
    /// The running kernel's build id: its frames are named from the copy of kallsyms in the build-id cache
    /// when there is one (a file read, where /proc/kallsyms has the kernel format every line at each start).
    kernel_build_id: Option<Vec<u8>>,
    sampling: Option<Sampling>,
    pub(crate) counts: LiveCounts,
    /// `rprof record --push`: binaries read when a period is cut, one at a time, and dropped after it unless
    /// still sampled (see [`Live::keep_lean`]).
    lean: bool,
    /// The CPU and memory budget, asked before each new binary.
    keeper: Option<Keeper>,
    /// The last period's refusal (the budget's label, how many binaries), to tell a repeat from news.
    last_unread: Option<(&'static str, usize)>,
}

/// More labels of each process's samples.
pub(crate) type PidLabels = HashMap<u32, Vec<(String, String)>>;

/// A period whose new binaries were (some of them) not read: why, and how many.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Unread {
    pub(crate) over: Over,
    pub(crate) binaries: usize,
    /// The period before was refused for the same budget the same number of binaries (most often the same
    /// binaries, asked again each period): not news for the log.
    pub(crate) repeat: bool,
}

impl Live {
    pub(crate) fn new(
        opts: SymbolizerOptions,
        sampling: Option<Sampling>,
        unsymbolized: bool,
        kernel_build_id: Option<Vec<u8>>,
    ) -> Live {
        let symbolizer = crate::symbols::Symbolizer::new(opts.clone());
        Live {
            resolver: resolver(symbolizer, kernel_build_id.as_deref(), unsymbolized),
            kernel_build_id,
            unsymbolized,
            build_ids: FastMap::default(),
            build_ids_by_file: FastMap::default(),
            opts,
            spaces: AddressSpaces::new(),
            merge: OrderedMerge::new(),
            comm_of_tid: FastMap::default(),
            chains: FastMap::default(),
            stacks: Vec::new(),
            held: Vec::new(),
            containers: FastMap::default(),
            exits: 0,
            kernel_text: None,
            sampling,
            counts: LiveCounts::default(),
            lean: false,
            keeper: None,
            last_unread: None,
        }
    }

    /// Symbolize as a fleet agent must (`rprof record --push`): binaries are read only when a period is cut and
    /// only for the addresses of its samples, one at a time (each one's DWARF dropped before the next is read);
    /// after the period, the binaries no address of it was looked up in are dropped, and the others' DWARF;
    /// with a budget, no new binary is read while the push is over it (see `push/budget.rs`).
    pub(crate) fn keep_lean(&mut self, budget: Option<PushBudget>) {
        self.lean = true;
        self.keeper = budget.map(Keeper::new);
        if let Some(keeper) = &self.keeper {
            self.resolver.symbolizer().set_gate(Some(keeper.gate()));
        }
        self.lean_resolver();
    }

    fn lean_resolver(&mut self) {
        if self.lean {
            self.resolver.defer_files();
            self.resolver.release_each_binary();
        }
    }

    /// The names of the Python frames the samples carry.
    pub(crate) fn set_python_names(&mut self, names: crate::python::Names) {
        self.resolver.symbolizer().set_python_names(names);
    }

    /// An event read in the current round (records without a time sort first).
    pub(crate) fn push(&mut self, time: Option<u64>, event: Event) {
        self.merge
            .push(time.map_or(0, |t| t.saturating_add(1)), event);
    }

    /// The round ended: handle what is now in time order.
    pub(crate) fn end_round(&mut self) {
        let mut ready = Vec::new();
        self.merge.finish_round(|_, e| ready.push(e));
        ready.into_iter().for_each(|e| self.handle(e));
    }

    /// Handle every queued event timed before `limit` (perf clock nanoseconds), or all of them.
    pub(crate) fn release_before(&mut self, limit: Option<u64>) {
        let mut ready = Vec::new();
        match limit {
            // Queued keys are times + 1.
            Some(limit) => self.merge.drain_before(limit + 1, |_, e| ready.push(e)),
            None => self.merge.drain(|_, e| ready.push(e)),
        }
        ready.into_iter().for_each(|e| self.handle(e));
    }

    fn handle(&mut self, event: Event) {
        track(&event, &mut self.spaces, &mut self.resolver, None);
        match event {
            Event::Comm { tid, name, .. } => {
                self.comm_of_tid.insert(tid, Arc::from(name));
            }
            Event::Fork { tid, ptid, .. } => {
                if let Some(c) = self.comm_of_tid.get(&ptid).cloned() {
                    self.comm_of_tid.entry(tid).or_insert(c);
                }
            }
            Event::Exit { pid, tid } => {
                self.comm_of_tid.remove(&tid);
                if pid == tid {
                    self.containers.remove(&pid);
                    self.exits += 1;
                }
            }
            Event::Sample(sample) => self.add_sample(sample),
            Event::Lost { count } => self.counts.lost += count,
            Event::LostSamples { count } => self.counts.lost_samples += count,
            Event::Mmap {
                path,
                pgoff,
                cpu_mode: CpuMode::Kernel,
                ..
            } if path.starts_with(crate::resolve::KERNEL_NAME) => self.kernel_text = Some(pgoff),
            Event::Mmap { .. } | Event::Throttle { .. } => {}
        }
    }

    fn add_sample(&mut self, sample: Sample) {
        self.counts.samples += 1;
        let comm = match self.comm_of_tid.get(&sample.tid) {
            Some(c) => Arc::clone(c),
            None => match self.comm_of_tid.get(&sample.pid) {
                Some(c) => Arc::clone(c),
                None if sample.pid == 0 => Arc::from("swapper"),
                None => Arc::from(format!(":{}", sample.tid)),
            },
        };
        self.containers
            .entry(sample.pid)
            .or_insert_with(|| crate::process::container_id(sample.pid).map(Arc::from));
        let chain = !sample.callchain.is_empty();
        let key = ChainKey {
            pid: sample.pid,
            generation: self.spaces.generation(sample.pid),
            kernel: sample.cpu_mode == CpuMode::Kernel,
            chain,
            addrs: if chain {
                sample.callchain
            } else {
                vec![sample.ip]
            },
        };
        let stack = match self.chains.get(&key) {
            Some(&i) => i,
            None => {
                let frames = self.resolve(&key);
                self.stacks.push((key.clone(), frames));
                let i = self.stacks.len() as u32 - 1;
                self.chains.insert(key, i);
                i
            }
        };
        self.held.push(HeldSample {
            time: sample.time.unwrap_or(0),
            pid: sample.pid,
            tid: sample.tid,
            comm,
            stack,
            weight: sample.period,
            off_cpu: sample.off_cpu,
        });
    }

    /// The frames of a raw stack, outermost first.
    fn resolve(&mut self, key: &ChainKey) -> Vec<FrameId> {
        let mut frames = Vec::with_capacity(key.addrs.len() + 4);
        let space = self.spaces.get(key.pid);
        match key.chain {
            true => {
                self.resolver
                    .resolve_chain(key.pid, space, key.kernel, &key.addrs, &mut frames)
            }
            false => {
                self.resolver
                    .resolve_ip(key.pid, space, key.kernel, key.addrs[0], &mut frames)
            }
        }
        frames.reverse();
        frames
    }

    /// Take the held samples timed before `limit` (all of them with None), and the ones that came too late
    /// for the period before (timed before `since`), counted.
    pub(crate) fn take_before(&mut self, since: u64, limit: Option<u64>) -> Vec<HeldSample> {
        let (taken, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|s| limit.is_none_or(|l| s.time < l));
        self.held = kept;
        self.counts.late += taken.iter().filter(|s| s.time < since).count() as u64;
        taken
    }

    /// The profile of `samples`: their stacks symbolized, as report's pprof writer takes it; and each process's
    /// container id.
    pub(crate) fn profile(
        &mut self,
        samples: &[HeldSample],
    ) -> (Profile, PidLabels, Option<Unread>) {
        self.resolver.finish();
        let refused = self.resolver.symbolizer().take_refused();
        let over = self.keeper.as_ref().and_then(Keeper::take_over);
        let unread = over.map(|over| Unread {
            over,
            binaries: refused,
            repeat: self.last_unread == Some((over.label(), refused)),
        });
        self.last_unread = unread.map(|u| (u.over.label(), u.binaries));
        let mut stack_index: FastMap<u32, u32> = FastMap::default();
        let mut stacks: Vec<((u32, Vec<FrameId>), StackCount)> = Vec::new();
        let mut comm_index: HashMap<Arc<str>, u32> = HashMap::new();
        let mut p = Profile {
            sampling: self.sampling,
            ..Profile::default()
        };
        let mut labels: HashMap<u32, Vec<(String, String)>> = HashMap::new();
        let mut timed = Vec::with_capacity(samples.len());
        for s in samples {
            let stack = *stack_index.entry(s.stack).or_insert_with(|| {
                stacks.push((
                    (0, self.stacks[s.stack as usize].1.clone()),
                    StackCount::default(),
                ));
                stacks.len() as u32 - 1
            });
            let comm = *comm_index.entry(Arc::clone(&s.comm)).or_insert_with(|| {
                p.comms.push(s.comm.to_string());
                p.comms.len() as u32 - 1
            });
            if let Some(Some(id)) = self.containers.get(&s.pid) {
                labels
                    .entry(s.pid)
                    .or_insert_with(|| vec![("container_id".to_string(), id.to_string())]);
            }
            match s.off_cpu {
                true => (p.off_samples += 1, p.off_period += s.weight),
                false => (p.samples += 1, p.period += s.weight),
            };
            timed.push(TimedSample {
                time: s.time,
                pid: s.pid,
                tid: s.tid,
                comm,
                stack,
                weight: s.weight,
                off_cpu: s.off_cpu,
            });
        }
        let mut exports = exports_of(&self.resolver, &stacks, timed);
        if let Some(unread) = unread {
            self.mark_unread(&mut exports, unread.over, &mut labels);
        }
        p.exports = Some(exports);
        p.frames = self.resolver.frames().to_vec();
        p.addresses = self.resolver.addresses();
        (p, labels, unread)
    }

    /// Label the processes with addresses left unsymbolized (`rprof_unsymbolized`, why), and give the
    /// binaries of those addresses their build ids (read from the file: the store names them by it).
    fn mark_unread(
        &mut self,
        exports: &mut crate::report::Exports,
        over: Over,
        labels: &mut HashMap<u32, Vec<(String, String)>>,
    ) {
        let unread: Vec<bool> = exports
            .locations
            .iter()
            .map(|l| matches!(&l.frames[..], [f] if self.resolver.is_over_budget(*f)))
            .collect();
        let mut modules = vec![false; exports.modules.len()];
        for (l, _) in exports.locations.iter().zip(&unread).filter(|(_, &u)| u) {
            if let Some(m) = l.module {
                modules[m as usize] = true;
            }
        }
        for (m, _) in exports.modules.iter_mut().zip(modules).filter(|(_, u)| *u) {
            if m.build_id.is_none() {
                let key = (0, m.path.clone());
                let by_file = &mut self.build_ids_by_file;
                m.build_id = self
                    .build_ids
                    .entry(key)
                    .or_insert_with(|| unsym::build_id_by_file(by_file, 0, &m.path))
                    .clone();
            }
        }
        let stacks: Vec<bool> = exports
            .stacks
            .iter()
            .map(|s| s.iter().any(|&l| unread[l as usize]))
            .collect();
        for s in exports.samples.iter().filter(|s| stacks[s.stack as usize]) {
            let pid_labels = labels.entry(s.pid).or_default();
            if !pid_labels.iter().any(|(k, _)| k == "rprof_unsymbolized") {
                pid_labels.push(("rprof_unsymbolized".into(), over.label().into()));
            }
        }
    }

    /// Start the resolver afresh when it has grown past its bounds (call between periods): the samples still
    /// held get their raw stacks resolved again by the new one.
    pub(crate) fn bound_memory(&mut self) {
        if self.lean {
            self.resolver.symbolizer().end_period();
        }
        if self.exits < EXITS_BEFORE_RESET && self.stacks.len() < STACKS_BEFORE_RESET {
            crate::mapped::release_free_heap();
            return;
        }
        self.counts.resets += 1;
        self.exits = 0;
        let mut symbolizer = std::mem::replace(
            &mut self.resolver,
            StackResolver::new(self.opts.clone(), HashMap::new()),
        )
        .into_symbolizer();
        symbolizer.trim(MAX_RESOLVED, MAX_BINARIES);
        self.resolver = resolver(
            symbolizer,
            self.kernel_build_id.as_deref(),
            self.unsymbolized,
        );
        self.lean_resolver();
        self.build_ids = FastMap::default();
        self.build_ids_by_file = FastMap::default();
        if let Some(text) = self.kernel_text {
            let kernel = crate::symbols::KernelRef {
                build_id: self.kernel_build_id.clone(),
                text: Some(text),
            };
            self.resolver.symbolizer().set_kernel(kernel);
        }
        let old = std::mem::take(&mut self.stacks);
        self.chains = FastMap::default();
        let mut renumbered: FastMap<u32, u32> = FastMap::default();
        let mut held = std::mem::take(&mut self.held);
        for s in &mut held {
            s.stack = *renumbered.entry(s.stack).or_insert_with(|| {
                let key = old[s.stack as usize].0.clone();
                let frames = self.resolve(&key);
                self.stacks.push((key.clone(), frames));
                let i = self.stacks.len() as u32 - 1;
                self.chains.insert(key, i);
                i
            });
        }
        self.held = held;
        // A process whose exit came before its last samples (rings are read one after the other) was counted
        // again: keep only the container ids of the processes still mapped or with samples held.
        let (spaces, held) = (&self.spaces, &self.held);
        self.containers
            .retain(|pid, _| spaces.get(*pid).is_some() || held.iter().any(|s| s.pid == *pid));
        self.comm_of_tid.shrink_to_fit();
        self.containers.shrink_to_fit();
        crate::mapped::release_free_heap();
    }
}

/// A stack resolver on `symbolizer` that knows the running kernel's build id.
fn resolver(
    symbolizer: crate::symbols::Symbolizer,
    kernel_build_id: Option<&[u8]>,
    unsymbolized: bool,
) -> StackResolver {
    let build_ids = kernel_build_id
        .map(|id| (crate::resolve::KERNEL_NAME.to_string(), id.to_vec()))
        .into_iter()
        .collect();
    let mut resolver = StackResolver::with_symbolizer(symbolizer, build_ids);
    if unsymbolized {
        resolver.defer_files();
    }
    resolver
}
