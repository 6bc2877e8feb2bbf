//! `rprof report`: replay a recording (rprof's or perf's), symbolize each sample's stack, aggregate, and print a
//! top table, folded stacks or an SVG flame graph.
use crate::addr::{FileOffset, RuntimeAddr};
use crate::recording::{CpuMode, Event, Reader, RecordingError, Sample};
use crate::symbols::{KernelRef, ModuleKey, Symbolizer, SymbolizerOptions, VDSO};
use crate::unwind::dwarf::{DwarfStats, DwarfUnwinder};
use perf_event_open_sys::bindings::{PERF_CONTEXT_KERNEL, PERF_CONTEXT_MAX, PERF_CONTEXT_USER};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

mod output;
pub use output::{write_flamegraph, write_folded, write_table, TableOptions};

/// Errors of the report stage.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Recording(#[from] RecordingError),
    #[error("cannot write the report: {0}")]
    Output(#[from] std::io::Error),
    #[error("cannot write the flame graph {path}: {source}")]
    Svg {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Which samples to keep.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    pub pids: Vec<u32>,
    pub tids: Vec<u32>,
    pub comms: Vec<String>,
}

/// A frame as printed: a function (or `[unknown]`) in a module.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FrameInfo {
    pub name: String,
    /// The module's file name (`[kernel.kallsyms]` for the kernel).
    pub module: String,
    pub kernel: bool,
}

/// Frames are interned: stacks are vectors of indices into [`Profile::frames`].
pub type FrameId = u32;

/// One distinct stack of one command, with how often it was sampled.
#[derive(Clone, Debug, Default)]
pub struct StackCount {
    pub samples: u64,
    /// Sum of sample periods (nanoseconds of CPU time for the clock events).
    pub period: u64,
}

/// The aggregated, symbolized samples of a recording.
#[derive(Debug, Default)]
pub struct Profile {
    pub frames: Vec<FrameInfo>,
    pub comms: Vec<String>,
    /// (comm index, frames outermost first) -> counts.
    pub stacks: HashMap<(u32, Vec<FrameId>), StackCount>,
    pub samples: u64,
    pub period: u64,
    /// LOST records and the events they lost, LOST_SAMPLES, THROTTLE records seen in the file.
    pub lost: u64,
    pub lost_samples: u64,
    pub throttled: u64,
    /// How the user stack copies of the samples unwound (recordings of `perf record --call-graph dwarf`).
    pub unwound: DwarfStats,
}

/// A memory mapping of a process, as MMAP/MMAP2 records describe it.
#[derive(Clone, Debug)]
struct Mapping {
    end: u64,
    pgoff: u64,
    module: Arc<ModuleKey>,
    /// The file name shown in reports.
    short: Arc<str>,
}

/// The maps hashed once or more per sample: SipHash (std's default) costs more there than everything else.
type FastMap<K, V> = HashMap<K, V, ahash::RandomState>;

/// A raw stack as sampled: what [`Session::add_sample`] resolves, and the key of its cache.
#[derive(Debug, PartialEq, Eq, Hash)]
struct ChainKey {
    pid: u32,
    /// The process's mapping generation (see [`Session::generation`]).
    generation: u32,
    comm: u32,
    /// The sample's CPU mode was kernel.
    kernel: bool,
    /// `addrs` is the raw callchain (leaf first, with PERF_CONTEXT_* markers); else it holds only the IP.
    chain: bool,
    addrs: Vec<u64>,
}

/// The state of replaying a recording.
struct Session {
    symbolizer: Symbolizer,
    build_ids: HashMap<String, Vec<u8>>,
    maps: FastMap<u32, BTreeMap<u64, Mapping>>,
    /// How many times each process's mappings changed: part of the cache keys below, so that a new mapping
    /// retires the resolutions made before it without a scan of the caches.
    generation: FastMap<u32, u32>,
    comm_of_tid: FastMap<u32, u32>,
    comm_ids: HashMap<String, u32>,
    frame_ids: FastMap<FrameInfo, FrameId>,
    /// (pid, generation, address, exact) -> frames leaf-most last; kernel addresses use pid u32::MAX.
    cache: FastMap<(u32, u32, u64, bool), Arc<[FrameId]>>,
    /// Raw stack -> index in `stacks`: most samples repeat a stack seen before, and skip resolving it.
    chains: FastMap<ChainKey, usize>,
    /// Distinct resolved stacks (comm, frames outermost first) with their counts, and their index.
    stacks: Vec<((u32, Vec<FrameId>), StackCount)>,
    stack_ids: FastMap<(u32, Vec<FrameId>), usize>,
    /// Addresses whose frames are resolved at the end (see [`PENDING`]), and their ids.
    pending: Vec<Pending>,
    pending_ids: FastMap<(Option<Arc<ModuleKey>>, u64), FrameId>,
    /// For recordings whose samples carry user stacks (`perf record --call-graph dwarf`): unwinds them.
    unwinder: Option<DwarfUnwinder>,
    profile: Profile,
}

/// Frame ids with this bit stand for a kernel address or an address in a mapped file (an index into
/// [`Session::pending`]) whose frames are looked up once the whole recording is read. Meanwhile the symbolizer
/// reads kallsyms and loads each binary's DWARF on threads of their own, instead of holding up the first sample
/// that needs them.
const PENDING: FrameId = 1 << 31;

/// An address to symbolize at the end.
#[derive(Clone)]
enum Pending {
    Kernel(u64),
    User(Arc<ModuleKey>, FileOffset, Arc<str>),
}

/// The kernel's name in BUILD_ID entries and mappings (`[kernel.kallsyms]_text`).
const KERNEL_NAME: &str = "[kernel.kallsyms]";

/// Kernel addresses on x86_64 live in the upper half.
const KERNEL_START: u64 = 0xffff_8000_0000_0000;

/// Read, symbolize and aggregate a recording.
pub fn load(
    input: &Path,
    filter: &Filter,
    opts: SymbolizerOptions,
) -> Result<Profile, ReportError> {
    let reader = Reader::open(input)?;
    let build_ids: HashMap<String, Vec<u8>> = reader
        .build_ids()
        .iter()
        .map(|b| (b.path.clone(), b.build_id.clone()))
        .collect();
    let debug_dirs = opts.debug_dirs.clone();
    let mut symbolizer = Symbolizer::new(opts);
    symbolizer.set_kernel(KernelRef {
        build_id: build_ids.get(KERNEL_NAME).cloned(),
        text: None,
    });
    let mut s = Session {
        symbolizer,
        build_ids,
        maps: FastMap::default(),
        generation: FastMap::default(),
        comm_of_tid: FastMap::default(),
        comm_ids: HashMap::new(),
        frame_ids: FastMap::default(),
        cache: FastMap::default(),
        chains: FastMap::default(),
        stacks: Vec::new(),
        stack_ids: FastMap::default(),
        pending: Vec::new(),
        pending_ids: FastMap::default(),
        unwinder: reader
            .has_user_stacks()
            .then(|| DwarfUnwinder::new(debug_dirs)),
        profile: Profile::default(),
    };
    let pid_set: HashSet<u32> = filter.pids.iter().copied().collect();
    let tid_set: HashSet<u32> = filter.tids.iter().copied().collect();
    let keep = |sample: &Sample| {
        (pid_set.is_empty() || pid_set.contains(&sample.pid))
            && (tid_set.is_empty() || tid_set.contains(&sample.tid))
    };
    // The file is parsed on a thread of its own, in batches, while this one resolves and symbolizes.
    std::thread::scope(|scope| -> Result<(), ReportError> {
        let (sender, batches) = std::sync::mpsc::sync_channel(QUEUED_BATCHES);
        std::thread::Builder::new()
            .name("rprof-reader".into())
            .spawn_scoped(scope, move || read_batches(reader, sender))
            .map_err(ReportError::Output)?;
        for batch in batches {
            for event in batch? {
                match event {
                    Event::Sample(sample) if !keep(&sample) => {}
                    event => s.handle(event, &filter.comms),
                }
            }
        }
        Ok(())
    })?;
    Ok(s.finish())
}

/// Events per message from the reading thread.
const BATCH: usize = 1024;
/// Batches the reading thread may run ahead: enough to keep it busy while this thread loads a large binary's
/// DWARF or waits for kallsyms (tens of milliseconds, some 100k events), and bounded (tens of MiB).
const QUEUED_BATCHES: usize = 128;

/// Send the recording's events in batches until the end, an error (sent after the events before it), or until
/// the receiver is gone.
fn read_batches(
    mut reader: Reader,
    sender: std::sync::mpsc::SyncSender<Result<Vec<Event>, RecordingError>>,
) {
    loop {
        let mut batch = Vec::with_capacity(BATCH);
        let mut error = None;
        while batch.len() < BATCH {
            match reader.next_event() {
                Ok(Some(event)) => batch.push(event),
                Ok(None) => break,
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
        }
        let last = batch.len() < BATCH;
        if sender.send(Ok(batch)).is_err() {
            return;
        }
        if let Some(e) = error {
            let _ = sender.send(Err(e));
            return;
        }
        if last {
            return;
        }
    }
}

impl Session {
    /// Apply one event (samples already filtered by pid and tid).
    fn handle(&mut self, event: Event, comms: &[String]) {
        let s = self;
        match event {
            Event::Comm {
                pid,
                tid,
                name,
                exec,
            } => {
                if exec {
                    // A new program image: the old mappings are gone, the new ones follow.
                    s.maps.remove(&pid);
                    if let Some(unwinder) = s.unwinder.as_mut() {
                        unwinder.exit(pid);
                    }
                }
                let id = s.comm_id(&name);
                s.comm_of_tid.insert(tid, id);
            }
            Event::Mmap {
                pid,
                start,
                len,
                pgoff,
                path,
                build_id,
                cpu_mode,
                ..
            } => {
                if cpu_mode != CpuMode::Kernel && pid >= 0 {
                    if let Some(unwinder) = s.unwinder.as_mut() {
                        unwinder.add_mapping(pid as u32, start, len, pgoff, &path);
                    }
                    s.add_mapping(pid as u32, start, len, pgoff, path, build_id);
                } else if cpu_mode == CpuMode::Kernel {
                    // The recording describes the kernel: its samples will need kallsyms. The kernel's own
                    // mapping (`[kernel.kallsyms]_text`) starts at `_text`, its offset, which gives the KASLR
                    // offset against a cached copy of kallsyms.
                    if path.starts_with(KERNEL_NAME) {
                        s.symbolizer.set_kernel(KernelRef {
                            build_id: s.build_ids.get(KERNEL_NAME).cloned(),
                            text: Some(pgoff),
                        });
                    }
                    s.symbolizer.prefetch_kernel();
                }
            }
            Event::Fork {
                pid,
                ppid,
                tid,
                ptid,
            } => {
                if pid != ppid && !s.maps.contains_key(&pid) {
                    if let Some(parent) = s.maps.get(&ppid).cloned() {
                        s.maps.insert(pid, parent);
                    }
                    if let Some(unwinder) = s.unwinder.as_mut() {
                        unwinder.fork(ppid, pid);
                    }
                }
                if let Some(&c) = s.comm_of_tid.get(&ptid) {
                    s.comm_of_tid.entry(tid).or_insert(c);
                }
            }
            Event::Exit { pid, tid } => {
                if let Some(unwinder) = s.unwinder.as_mut().filter(|_| pid == tid) {
                    unwinder.exit(pid);
                }
            }
            Event::Sample(sample) => {
                let comm = s.comm_for(&sample);
                if comms.is_empty() || comms.iter().any(|c| *c == s.profile.comms[comm as usize]) {
                    s.add_sample(sample, comm);
                }
            }
            Event::Lost { count } => s.profile.lost += count,
            Event::LostSamples { count } => s.profile.lost_samples += count,
            Event::Throttle { throttled } => s.profile.throttled += throttled as u64,
        }
    }

    fn comm_id(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.comm_ids.get(name) {
            return id;
        }
        let id = self.profile.comms.len() as u32;
        self.profile.comms.push(name.to_string());
        self.comm_ids.insert(name.to_string(), id);
        id
    }

    fn comm_for(&mut self, sample: &Sample) -> u32 {
        match self
            .comm_of_tid
            .get(&sample.tid)
            .or_else(|| self.comm_of_tid.get(&sample.pid))
        {
            Some(&c) => c,
            None => self.comm_id(&format!(":{}", sample.tid)),
        }
    }

    fn add_mapping(
        &mut self,
        pid: u32,
        start: u64,
        len: u64,
        pgoff: u64,
        path: String,
        build_id: Option<Vec<u8>>,
    ) {
        let end = start.saturating_add(len);
        let maps = self.maps.entry(pid).or_default();
        // Drop mappings this one overlaps (it replaced them).
        let overlapping: Vec<u64> = maps
            .range(..end)
            .rev()
            .take_while(|(_, m)| m.end > start)
            .map(|(&s, _)| s)
            .collect();
        for s in overlapping {
            maps.remove(&s);
        }
        let build_id = build_id.or_else(|| self.build_ids.get(&path).cloned());
        let short: Arc<str> = Arc::from(short_name(&path));
        let module = Arc::new(ModuleKey {
            path: PathBuf::from(path),
            pid,
            build_id,
        });
        maps.insert(
            start,
            Mapping {
                end,
                pgoff,
                module,
                short,
            },
        );
        // Cached resolutions of this process may point at the old mapping: retire them.
        *self.generation.entry(pid).or_default() += 1;
    }

    /// Unwind a sample's user stack copy into its callchain: the kernel part stays, the user part becomes
    /// PERF_CONTEXT_USER and the unwound frames (leaf IP first).
    fn unwind(&mut self, sample: &mut Sample) {
        let (Some(unwinder), Some(user)) = (self.unwinder.as_mut(), sample.user_stack.take())
        else {
            return;
        };
        let outcome = unwinder.unwind_callchain(
            sample.pid,
            &user.regs,
            &user.stack,
            user.dyn_size,
            &mut sample.callchain,
        );
        self.profile.unwound.count(outcome, user.stack.len() as u64);
    }

    /// The number of times `pid`'s mappings changed (see [`Session::generation`]).
    fn generation_of(&self, pid: u32) -> u32 {
        self.generation.get(&pid).copied().unwrap_or(0)
    }

    fn add_sample(&mut self, mut sample: Sample, comm: u32) {
        self.unwind(&mut sample);
        let chain = !sample.callchain.is_empty();
        let key = ChainKey {
            pid: sample.pid,
            generation: self.generation_of(sample.pid),
            comm,
            kernel: sample.cpu_mode == CpuMode::Kernel,
            chain,
            addrs: if chain {
                sample.callchain
            } else {
                vec![sample.ip]
            },
        };
        let index = match self.chains.get(&key) {
            Some(&index) => index,
            None => {
                let stack = self.resolve_stack(&key);
                let index = match self.stack_ids.get(&(comm, stack.clone())) {
                    Some(&index) => index,
                    None => {
                        self.stacks
                            .push(((comm, stack.clone()), StackCount::default()));
                        self.stack_ids.insert((comm, stack), self.stacks.len() - 1);
                        self.stacks.len() - 1
                    }
                };
                self.chains.insert(key, index);
                index
            }
        };
        let count = &mut self.stacks[index].1;
        count.samples += 1;
        count.period += sample.period;
        self.profile.samples += 1;
        self.profile.period += sample.period;
    }

    /// The frames of a raw stack, outermost first.
    fn resolve_stack(&mut self, key: &ChainKey) -> Vec<FrameId> {
        let mut stack: Vec<FrameId> = Vec::with_capacity(key.addrs.len() + 4);
        if !key.chain {
            let ip = key.addrs[0];
            let kernel = key.kernel || ip >= KERNEL_START;
            stack.extend(self.resolve(key.pid, ip, kernel, true).iter());
        } else {
            let mut kernel = key.kernel;
            let mut first = true;
            for &addr in &key.addrs {
                if addr >= PERF_CONTEXT_MAX {
                    match addr {
                        PERF_CONTEXT_KERNEL => kernel = true,
                        PERF_CONTEXT_USER => {
                            // The first user address is where user code was stopped (the interrupted
                            // instruction, or the one after `syscall`), not a return address.
                            kernel = false;
                            first = true;
                        }
                        _ => {}
                    }
                    continue;
                }
                let frames = self.resolve(key.pid, addr, kernel || addr >= KERNEL_START, first);
                // `frames` is outermost first; the callchain is leaf first.
                stack.extend(frames.iter().rev());
                first = false;
            }
        }
        stack.reverse();
        stack
    }

    /// Frames (outermost first) for one address; `exact` is false for return addresses, which are looked up
    /// one byte back so that a call at the end of a function resolves to that function.
    fn resolve(&mut self, pid: u32, addr: u64, kernel: bool, exact: bool) -> Arc<[FrameId]> {
        let key = if kernel {
            (u32::MAX, 0, addr, exact)
        } else {
            (pid, self.generation_of(pid), addr, exact)
        };
        if let Some(f) = self.cache.get(&key) {
            return Arc::clone(f);
        }
        let lookup = if exact { addr } else { addr.saturating_sub(1) };
        let ids: Arc<[FrameId]> = if kernel {
            self.symbolizer.prefetch_kernel();
            Arc::from([self.pending_id(None, lookup, || Pending::Kernel(lookup))])
        } else {
            self.resolve_user(pid, lookup)
        };
        self.cache.insert(key, Arc::clone(&ids));
        ids
    }

    fn resolve_user(&mut self, pid: u32, addr: u64) -> Arc<[FrameId]> {
        let mapping = self
            .maps
            .get(&pid)
            .and_then(|m| m.range(..=addr).next_back())
            .filter(|(_, m)| addr < m.end)
            .map(|(&start, m)| (start, m.clone()));
        // Files, and the vDSO (the symbolizer finds its image).
        let file = mapping
            .as_ref()
            .filter(|(_, m)| m.module.path.starts_with("/") || m.module.path == Path::new(VDSO));
        if let Some((start, m)) = file {
            let offset = FileOffset(addr - start + m.pgoff);
            let id = self.pending_id(Some(&m.module), offset.0, || {
                Pending::User(Arc::clone(&m.module), offset, Arc::clone(&m.short))
            });
            return Arc::from([id]);
        }
        // Anonymous memory (JIT code), [vdso]-like pseudo files, or no mapping at all.
        let frame = match self.symbolizer.jit(pid, RuntimeAddr(addr)) {
            Some(name) => FrameInfo {
                name: name.to_string(),
                module: format!("perf-{pid}.map"),
                kernel: false,
            },
            None => FrameInfo {
                name: "[unknown]".into(),
                module: mapping
                    .map(|(_, m)| m.short.to_string())
                    .unwrap_or_else(|| "[unknown]".into()),
                kernel: false,
            },
        };
        Arc::from([self.frame_id(frame)])
    }

    /// The id standing for an address to resolve at the end (`module` None: the kernel).
    fn pending_id(
        &mut self,
        module: Option<&Arc<ModuleKey>>,
        addr: u64,
        new: impl FnOnce() -> Pending,
    ) -> FrameId {
        let key = (module.cloned(), addr);
        if let Some(&id) = self.pending_ids.get(&key) {
            return id;
        }
        if let Some(module) = module {
            self.symbolizer.prefetch(module);
        }
        let id = PENDING | self.pending.len() as FrameId;
        self.pending.push(new());
        self.pending_ids.insert(key, id);
        id
    }

    /// The frames (outermost first) of a pending address, through the symbolizer.
    fn resolve_pending(&mut self, index: usize) -> Vec<FrameId> {
        let (module, offset, short) = match self.pending[index].clone() {
            Pending::Kernel(addr) => {
                let name = self.symbolizer.kernel(addr);
                let frame = FrameInfo {
                    name: name
                        .map(|n| n.to_string())
                        .unwrap_or_else(|| "[unknown]".into()),
                    module: KERNEL_NAME.into(),
                    kernel: true,
                };
                return vec![self.frame_id(frame)];
            }
            Pending::User(module, offset, short) => (module, offset, short),
        };
        let frames = self.symbolizer.user(&module, offset);
        if frames.is_empty() {
            let unknown = FrameInfo {
                name: "[unknown]".into(),
                module: short.to_string(),
                kernel: false,
            };
            return vec![self.frame_id(unknown)];
        }
        frames
            .iter()
            .map(|f| FrameInfo {
                name: match &f.location {
                    Some(loc) => format!("{} {}", f.name, loc),
                    None => f.name.clone(),
                },
                module: short.to_string(),
                kernel: false,
            })
            .map(|f| self.frame_id(f))
            .collect()
    }

    /// Look the pending addresses in files up in the symbolizer (which keeps the answers) grouped by file and
    /// in order of offset, so that each part of a file's DWARF is visited once and released after: pending
    /// addresses come in the order samples met them, all over each file. Frame ids are then given in the
    /// first-met order, as before, so the outputs do not depend on this.
    fn resolve_in_order(&mut self) {
        let mut user: Vec<(&Arc<ModuleKey>, FileOffset)> = self
            .pending
            .iter()
            .filter_map(|p| match p {
                Pending::User(module, offset, _) => Some((module, *offset)),
                Pending::Kernel(_) => None,
            })
            .collect();
        user.sort_by(|(ma, oa), (mb, ob)| {
            (&ma.path, &ma.build_id, ma.pid, oa.0).cmp(&(&mb.path, &mb.build_id, mb.pid, ob.0))
        });
        for (module, offset) in user {
            self.symbolizer.user(module, offset);
        }
    }

    /// Resolve the pending addresses and merge the stacks that turn out to be the same.
    fn finish(mut self) -> Profile {
        self.resolve_in_order();
        let expanded: Vec<Vec<FrameId>> = (0..self.pending.len())
            .map(|i| self.resolve_pending(i))
            .collect();
        let mut stacks: HashMap<(u32, Vec<FrameId>), StackCount> = HashMap::new();
        for ((comm, stack), count) in std::mem::take(&mut self.stacks) {
            let mut frames = Vec::with_capacity(stack.len() + 2);
            for id in stack {
                if id & PENDING != 0 {
                    frames.extend_from_slice(&expanded[(id & !PENDING) as usize]);
                } else {
                    frames.push(id);
                }
            }
            let entry = stacks.entry((comm, frames)).or_default();
            entry.samples += count.samples;
            entry.period += count.period;
        }
        self.profile.stacks = stacks;
        self.profile
    }

    fn frame_id(&mut self, f: FrameInfo) -> FrameId {
        if let Some(&id) = self.frame_ids.get(&f) {
            return id;
        }
        let id = self.profile.frames.len() as FrameId;
        self.profile.frames.push(f.clone());
        self.frame_ids.insert(f, id);
        id
    }
}

/// The file name of a path (what reports show as the object).
fn short_name(path: &str) -> String {
    Path::new(path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.to_string())
}

/// Write the report in the chosen form to `out`.
pub fn write_summary_line(p: &Profile, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        out,
        "# {} samples, {} lost events, {} lost samples, throttled {} times",
        p.samples, p.lost, p.lost_samples, p.throttled
    )
}
