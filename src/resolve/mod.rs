//! The one callchain -> frames resolver, used by `report` and by `probe -g`: PERF_CONTEXT markers split the
//! kernel part from the user part, return addresses are looked up one byte back (the leaf and the first user
//! address after the kernel part exactly), inlined functions become frames of their own, JIT code is named
//! through `/tmp/perf-PID.map`, and what stays unknown is `[unknown]` with its module.
//!
//! Kernel addresses and addresses in mapped files get a *pending* frame id: they are symbolized at the end
//! ([`StackResolver::finish`]), while the symbolizer reads kallsyms and loads each binary on threads of its own,
//! instead of holding up the first sample that needs them.
mod frame;

use crate::addr::{FileOffset, RuntimeAddr};
use crate::process::{AddressSpace, Mapping};
use crate::symbols::{ModuleKey, Symbolized, Symbolizer, SymbolizerOptions, Unnamed, VDSO};
use crate::unwind::fp::{self, ChainPart};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub(crate) use frame::short_name;
pub use frame::{folded_name, is_jit_like, FrameInfo, UnnamedCode, UnnamedFrame};

/// The maps hashed once or more per sample: SipHash (std's default) costs more there than everything else.
pub(crate) type FastMap<K, V> = HashMap<K, V, ahash::RandomState>;
/// The sets hashed once or more per event.
pub(crate) type FastSet<T> = std::collections::HashSet<T, ahash::RandomState>;

/// Frames are interned: stacks are vectors of indices into [`Profile::frames`].
pub type FrameId = u32;

/// The kernel's name in BUILD_ID entries and mappings (`[kernel.kallsyms]_text`).
pub const KERNEL_NAME: &str = "[kernel.kallsyms]";

/// Kernel addresses on x86_64 live in the upper half.
const KERNEL_START: u64 = 0xffff_8000_0000_0000;

/// The name of the kernel's uprobe trampoline page in /proc/PID/maps and MMAP records.
pub const UPROBES: &str = "[uprobes]";
/// The module of Python frames (read from the interpreter by `record`).
pub const PYTHON_MODULE: &str = "[python]";

/// Where x86-64 puts that page (the top page of the user address space, `TASK_SIZE - PAGE_SIZE`): a stack
/// recorded before the page was mapped, or without its mapping, still has its addresses.
const UPROBES_PAGE: std::ops::Range<u64> = 0x7fff_ffff_e000..0x7fff_ffff_f000;

/// Frame ids with this bit stand for a kernel address or an address in a mapped file (an index into
/// `pending`) whose frames are looked up in [`StackResolver::finish`].
const PENDING: FrameId = 1 << 31;

/// A file mapped by a process: (pid, path, build id).
type MappedFile = (u32, Arc<str>, Option<Arc<[u8]>>);

/// An address to symbolize at the end.
#[derive(Clone)]
enum Pending {
    Kernel(u64),
    User(Arc<ModuleKey>, FileOffset, Arc<str>),
}

/// Where the frames of a frame id come from.
pub enum Origin<'a> {
    /// An address in a mapped file: its frames, outermost first (inlined functions after their caller).
    File {
        path: &'a Path,
        build_id: Option<&'a [u8]>,
        offset: FileOffset,
        frames: &'a [FrameId],
    },
    /// A kernel address.
    Kernel { address: u64, frames: &'a [FrameId] },
    /// A frame without an address (JIT code named by a perf map, an unknown mapping).
    Frame(FrameId),
}

/// Resolves raw stacks of processes into interned frames.
pub struct StackResolver {
    symbolizer: Symbolizer,
    /// Build ids by path, from the recording's BUILD_ID section.
    build_ids: HashMap<String, Vec<u8>>,
    frames: Vec<FrameInfo>,
    frame_ids: FastMap<FrameInfo, FrameId>,
    /// (pid, generation, address, exact) -> frames outermost first; kernel addresses use pid u32::MAX.
    cache: FastMap<(u32, u64, u64, bool), Arc<[FrameId]>>,
    /// The symbolizer's module of each (pid, path, build id).
    modules: FastMap<MappedFile, Arc<ModuleKey>>,
    pending: Vec<Pending>,
    pending_ids: FastMap<(Option<Arc<ModuleKey>>, u64), FrameId>,
    /// The frames of each pending id, once [`StackResolver::finish`] ran.
    expanded: Vec<Vec<FrameId>>,
    /// The (unnamed frame, file offset) pairs met: a frame standing for a range of code holds several.
    unnamed_offsets: std::collections::HashSet<(FrameId, u64)>,
    /// Read the kernel's symbols in the background from the first kernel address on (else when finishing).
    prefetch_kernel: bool,
    /// Start loading each binary in the background when its first address comes (else only when finishing).
    prefetch_files: bool,
    /// Drop each binary's DWARF once its addresses are looked up, before the next binary is read.
    release_each: bool,
    /// Pending ids (indices) whose binary the symbolizer's gate refused: looked up again at the next finish.
    refused: Vec<usize>,
}

/// The start of the kernel's uprobe trampoline page when `addr` (as sampled: a return address is not moved
/// back, since the trampoline's address is the page's first byte) lies in it: a `[uprobes]` mapping, or where
/// x86-64 puts the page when no mapping holds the address.
fn uprobe_trampoline(space: Option<&AddressSpace>, addr: u64) -> Option<u64> {
    match space.and_then(|s| s.find(addr)) {
        Some(m) if &*m.path == UPROBES => Some(m.start),
        Some(_) => None,
        None => UPROBES_PAGE.contains(&addr).then_some(UPROBES_PAGE.start),
    }
}

impl StackResolver {
    /// A resolver with a new symbolizer; `build_ids` are the recorded build ids by path (may be empty).
    pub fn new(opts: SymbolizerOptions, build_ids: HashMap<String, Vec<u8>>) -> StackResolver {
        StackResolver::with_symbolizer(Symbolizer::new(opts), build_ids)
    }

    /// A resolver reusing a symbolizer (its binaries and kernel symbols) of an earlier one: see
    /// [`StackResolver::into_symbolizer`].
    pub fn with_symbolizer(
        symbolizer: Symbolizer,
        build_ids: HashMap<String, Vec<u8>>,
    ) -> StackResolver {
        StackResolver {
            symbolizer,
            build_ids,
            frames: Vec::new(),
            frame_ids: FastMap::default(),
            cache: FastMap::default(),
            modules: FastMap::default(),
            pending: Vec::new(),
            pending_ids: FastMap::default(),
            expanded: Vec::new(),
            unnamed_offsets: std::collections::HashSet::new(),
            prefetch_kernel: true,
            prefetch_files: true,
            release_each: false,
            refused: Vec::new(),
        }
    }

    /// Read one binary at a time when finishing, each one's DWARF dropped before the next is read (a live
    /// session's memory then holds one binary's debug information at a time, not all of a period's).
    pub fn release_each_binary(&mut self) {
        self.release_each = true;
    }

    /// Load no binary before [`StackResolver::finish`] (a caller that may never symbolize files: `rprof record
    /// --push-unsymbolized` sends file offsets and build ids).
    pub fn defer_files(&mut self) {
        self.prefetch_files = false;
    }

    /// The kernel address a pending id stands for.
    pub fn kernel_address(&self, id: FrameId) -> Option<u64> {
        if id & PENDING == 0 {
            return None;
        }
        match &self.pending[(id & !PENDING) as usize] {
            Pending::Kernel(addr) => Some(*addr),
            Pending::User(..) => None,
        }
    }

    /// Start reading the kernel's symbols in the background (unless deferred to finishing: see
    /// [`StackResolver::defer_kernel`]).
    pub fn prefetch_kernel(&mut self) {
        if self.prefetch_kernel {
            self.symbolizer.prefetch_kernel();
        }
    }

    /// Read the kernel's symbols when finishing, not in the background while samples come: with
    /// [`StackResolver::finish_last`], the files' DWARF is gone by then, and the two are not held at once.
    pub fn defer_kernel(&mut self) {
        self.prefetch_kernel = false;
    }

    /// The symbolizer, for a resolver started afresh that keeps the binaries already loaded.
    pub fn into_symbolizer(self) -> Symbolizer {
        self.symbolizer
    }

    /// The symbolizer (to say which kernel the addresses come from, or start loading it early).
    pub fn symbolizer(&mut self) -> &mut Symbolizer {
        &mut self.symbolizer
    }

    /// The recorded build id of a path.
    pub fn build_id(&self, path: &str) -> Option<&Vec<u8>> {
        self.build_ids.get(path)
    }

    /// Append the frames of a callchain (leaf first, with PERF_CONTEXT_* markers) of process `pid` to `out`,
    /// leaf first; `kernel` tells whether the addresses before any marker are kernel addresses.
    pub fn resolve_chain(
        &mut self,
        pid: u32,
        space: Option<&AddressSpace>,
        kernel: bool,
        chain: &[u64],
        out: &mut Vec<FrameId>,
    ) {
        for part in fp::split(chain, kernel) {
            let ChainPart {
                addr,
                kernel,
                exact,
            } = part;
            let frames = self.resolve(pid, space, addr, kernel || addr >= KERNEL_START, exact);
            // `frames` is outermost first; the callchain is leaf first.
            out.extend(frames.iter().rev());
        }
    }

    /// Append the frames (leaf first) of a sample without a callchain: its IP alone.
    pub fn resolve_ip(
        &mut self,
        pid: u32,
        space: Option<&AddressSpace>,
        kernel: bool,
        ip: u64,
        out: &mut Vec<FrameId>,
    ) {
        let frames = self.resolve(pid, space, ip, kernel || ip >= KERNEL_START, true);
        out.extend(frames.iter().rev());
    }

    /// Frames (outermost first) for one address; `exact` is false for return addresses, which are looked up
    /// one byte back so that a call at the end of a function resolves to that function. Pending ids among them
    /// get their frames from [`StackResolver::finish`].
    pub fn resolve_addr(
        &mut self,
        pid: u32,
        space: Option<&AddressSpace>,
        addr: u64,
        kernel: bool,
        exact: bool,
    ) -> Arc<[FrameId]> {
        self.resolve(pid, space, addr, kernel || addr >= KERNEL_START, exact)
    }

    /// Whether some addresses wait for [`StackResolver::finish`].
    pub fn has_pending(&self) -> bool {
        self.expanded.len() < self.pending.len()
    }

    /// The module and file offset a pending id stands for (None for kernel addresses and frames without an
    /// address).
    pub fn module_of(&self, id: FrameId) -> Option<(&Arc<ModuleKey>, FileOffset)> {
        if id & PENDING == 0 {
            return None;
        }
        match &self.pending[(id & !PENDING) as usize] {
            Pending::User(module, offset, _) => Some((module, *offset)),
            Pending::Kernel(_) => None,
        }
    }

    /// How far the looked-up address of a pending id lies past the start of its function symbol (perf's
    /// `name+0xOFF`); None when no symbol covers it.
    pub fn symbol_offset(&mut self, id: FrameId) -> Option<u64> {
        if id & PENDING == 0 {
            return None;
        }
        match self.pending[(id & !PENDING) as usize].clone() {
            Pending::Kernel(addr) => self.symbolizer.kernel_at(addr).map(|(_, off)| off),
            Pending::User(module, offset, _) => {
                self.symbolizer.user(&module, offset).first()?.offset
            }
        }
    }

    fn resolve(
        &mut self,
        pid: u32,
        space: Option<&AddressSpace>,
        addr: u64,
        kernel: bool,
        exact: bool,
    ) -> Arc<[FrameId]> {
        let key = if kernel {
            (u32::MAX, 0, addr, exact)
        } else {
            (pid, space.map_or(0, AddressSpace::generation), addr, exact)
        };
        if let Some(f) = self.cache.get(&key) {
            return Arc::clone(f);
        }
        let lookup = if exact { addr } else { addr.saturating_sub(1) };
        let ids: Arc<[FrameId]> = if kernel {
            self.prefetch_kernel();
            Arc::from([self.pending_id(None, lookup, || Pending::Kernel(lookup))])
        } else {
            let mapping = space.and_then(|s| s.find(lookup));
            let id = match uprobe_trampoline(space, addr) {
                Some(page) => {
                    let code = UnnamedCode::Address(page);
                    let cause = Unnamed::UprobeTrampoline;
                    self.frame_id(FrameInfo::unnamed(UPROBES.into(), false, cause, code))
                }
                None => self.resolve_user(pid, mapping, lookup),
            };
            Arc::from([id])
        };
        self.cache.insert(key, Arc::clone(&ids));
        ids
    }

    fn resolve_user(&mut self, pid: u32, mapping: Option<&Mapping>, addr: u64) -> FrameId {
        if let Some(name) = self.symbolizer.python(addr) {
            return self.frame_id(FrameInfo::named(name.to_string(), PYTHON_MODULE.into()));
        }
        let path = mapping.map_or("", |m| &*m.path);
        // Files, and the vDSO (the symbolizer finds its image).
        let is_file = (path.starts_with('/') && !path.starts_with("//")) || path == VDSO;
        // JIT code: anonymous memory, memfd and deleted files are looked up in the JIT's perf map first.
        let mut cause = Unnamed::NoMapping;
        if mapping.is_none() || is_jit_like(path) || !is_file {
            match self.symbolizer.jit(pid, RuntimeAddr(addr)) {
                Ok(name) => {
                    let frame = FrameInfo {
                        name: name.to_string(),
                        module: format!("perf-{pid}.map"),
                        kernel: false,
                        system_name: None,
                        unnamed: None,
                        inlined: false,
                    };
                    return self.frame_id(frame);
                }
                Err(jit) if mapping.is_some() => cause = jit,
                Err(_) => {}
            }
        }
        let (Some(m), true) = (mapping, is_file) else {
            let module = mapping.map_or("[unknown]".into(), |_| short_name(path));
            let frame = FrameInfo::unnamed(module, false, cause, UnnamedCode::Address(addr));
            return self.frame_id(frame);
        };
        let module = self.module(pid, m);
        let offset = FileOffset(m.file_offset(addr));
        let short: Arc<str> = Arc::from(short_name(path));
        self.pending_id(Some(&module), offset.0, || {
            Pending::User(Arc::clone(&module), offset, short)
        })
    }

    /// The symbolizer's module for a mapping of process `pid`.
    fn module(&mut self, pid: u32, m: &Mapping) -> Arc<ModuleKey> {
        let key = (pid, Arc::clone(&m.path), m.build_id.clone());
        if let Some(module) = self.modules.get(&key) {
            return Arc::clone(module);
        }
        let build_id = m
            .build_id
            .as_ref()
            .map(|b| b.to_vec())
            .or_else(|| self.build_ids.get(&*m.path).cloned());
        let module = Arc::new(ModuleKey {
            path: PathBuf::from(&*m.path),
            pid,
            build_id,
        });
        self.modules.insert(key, Arc::clone(&module));
        module
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
        if let (Some(module), true) = (module, self.prefetch_files) {
            self.symbolizer.prefetch(module);
        }
        let id = PENDING | self.pending.len() as FrameId;
        self.pending.push(new());
        self.pending_ids.insert(key, id);
        id
    }

    /// Symbolize the pending addresses; after this, [`StackResolver::expand`] gives final frames.
    pub fn finish(&mut self) {
        self.finish_with(false);
    }

    /// [`StackResolver::finish`] for a caller that finishes once (report): each binary's DWARF is dropped once
    /// the addresses in files are looked up, before the kernel's symbols are read, so that the two are not
    /// held at once (a later lookup loads the DWARF again).
    pub fn finish_last(&mut self) {
        self.finish_with(true);
    }

    fn finish_with(&mut self, release: bool) {
        self.resolve_in_order();
        if release {
            self.symbolizer.release_dwarf();
        }
        for index in std::mem::take(&mut self.refused) {
            let frames = self.resolve_pending(index);
            self.note_refused(index, &frames);
            self.expanded[index] = frames;
        }
        for index in self.expanded.len()..self.pending.len() {
            let frames = self.resolve_pending(index);
            self.note_refused(index, &frames);
            self.expanded.push(frames);
        }
    }

    /// Remember a pending id left unnamed by the symbolizer's gate, to look it up again at the next finish.
    fn note_refused(&mut self, index: usize, frames: &[FrameId]) {
        if let [id] = frames {
            if self.is_over_budget(*id) {
                self.refused.push(index);
            }
        }
    }

    /// Whether a frame (not pending) is an address the symbolizer's gate left unnamed.
    pub fn is_over_budget(&self, id: FrameId) -> bool {
        id & PENDING == 0
            && self.frames[id as usize]
                .unnamed
                .as_ref()
                .is_some_and(|u| u.cause == Unnamed::OverBudget)
    }

    /// The final frames of a stack of ids (pending ones replaced by their frames, outermost first); call
    /// [`StackResolver::finish`] first. Works on stacks in either order as long as `outermost_first` says which.
    pub fn expand(&self, stack: &[FrameId], outermost_first: bool, out: &mut Vec<FrameId>) {
        for &id in stack {
            if id & PENDING == 0 {
                out.push(id);
                continue;
            }
            let frames = &self.expanded[(id & !PENDING) as usize];
            match outermost_first {
                true => out.extend_from_slice(frames),
                false => out.extend(frames.iter().rev()),
            }
        }
    }

    /// Where the frames of an id come from (an address in a module, for exports that keep addresses): call
    /// [`StackResolver::finish`] first.
    pub fn origin(&self, id: FrameId) -> Origin<'_> {
        if id & PENDING == 0 {
            return Origin::Frame(id);
        }
        let index = (id & !PENDING) as usize;
        let frames = &self.expanded[index];
        match &self.pending[index] {
            Pending::Kernel(addr) => Origin::Kernel {
                address: *addr,
                frames,
            },
            Pending::User(module, offset, _) => Origin::File {
                path: &module.path,
                build_id: module.build_id.as_deref(),
                offset: *offset,
                frames,
            },
        }
    }

    /// The frame an id (not pending) stands for.
    pub fn frame(&self, id: FrameId) -> &FrameInfo {
        &self.frames[id as usize]
    }

    /// The frames made so far, indexed by id.
    pub fn frames(&self) -> &[FrameInfo] {
        &self.frames
    }

    /// All frames, indexed by id.
    pub fn into_frames(self) -> Vec<FrameInfo> {
        self.frames
    }

    /// Look the pending addresses in files up in the symbolizer (which keeps the answers) grouped by file and
    /// in order of offset, so that each part of a file's DWARF is visited once and released after: pending
    /// addresses come in the order samples met them, all over each file. Frame ids are then given in the
    /// first-met order, as before, so the outputs do not depend on this.
    fn resolve_in_order(&mut self) {
        let retried = self.refused.iter().map(|&i| &self.pending[i]);
        let mut user: Vec<(&Arc<ModuleKey>, FileOffset)> = self.pending[self.expanded.len()..]
            .iter()
            .chain(retried)
            .filter_map(|p| match p {
                Pending::User(module, offset, _) => Some((module, *offset)),
                Pending::Kernel(_) => None,
            })
            .collect();
        user.sort_by(|(ma, oa), (mb, ob)| {
            (&ma.path, &ma.build_id, ma.pid, oa.0).cmp(&(&mb.path, &mb.build_id, mb.pid, ob.0))
        });
        let mut last: Option<&Path> = None;
        for (module, offset) in user {
            if self.release_each && last.is_some_and(|p| p != module.path) {
                self.symbolizer.release_dwarf();
            }
            last = Some(&module.path);
            self.symbolizer.user(module, offset);
        }
    }

    /// The frames (outermost first) of a pending address, through the symbolizer.
    fn resolve_pending(&mut self, index: usize) -> Vec<FrameId> {
        let (module, offset, short) = match self.pending[index].clone() {
            Pending::Kernel(addr) => {
                let frame = match self.symbolizer.kernel(addr) {
                    Some(name) => FrameInfo {
                        name: name.to_string(),
                        module: KERNEL_NAME.into(),
                        kernel: true,
                        system_name: None,
                        unnamed: None,
                        inlined: false,
                    },
                    None => FrameInfo::unnamed(
                        KERNEL_NAME.into(),
                        true,
                        self.symbolizer.kernel_unnamed(),
                        UnnamedCode::Address(addr),
                    ),
                };
                return vec![self.frame_id(frame)];
            }
            Pending::User(module, offset, short) => (module, offset, short),
        };
        let frames = match self.symbolizer.user(&module, offset) {
            Symbolized::Frames(frames) => frames,
            Symbolized::Unknown(unknown) => {
                let code = match unknown.range {
                    Some(r) => UnnamedCode::Range(r.start.0, r.end.0),
                    None => UnnamedCode::Offset(offset.0),
                };
                let frame = FrameInfo::unnamed(short.to_string(), false, unknown.cause, code);
                let id = self.frame_id(frame);
                self.unnamed_offsets.insert((id, offset.0));
                return vec![id];
            }
        };
        frames
            .iter()
            .map(|f| FrameInfo {
                name: match &f.source {
                    Some(source) => format!("{} {source}", f.name),
                    None => f.name.clone(),
                },
                module: short.to_string(),
                kernel: false,
                system_name: f.raw_name.clone(),
                unnamed: None,
                inlined: f.inlined,
            })
            .map(|f| self.frame_id(f))
            .collect()
    }

    /// How many distinct sampled addresses each unnamed frame that stands for a range of code holds, for the
    /// ones that hold more than one (call [`StackResolver::finish`] first).
    pub fn addresses(&self) -> HashMap<FrameId, u32> {
        let mut counts: HashMap<FrameId, u32> = HashMap::new();
        for (id, _) in &self.unnamed_offsets {
            *counts.entry(*id).or_default() += 1;
        }
        counts.retain(|_, n| *n > 1);
        counts
    }

    fn frame_id(&mut self, f: FrameInfo) -> FrameId {
        if let Some(&id) = self.frame_ids.get(&f) {
            return id;
        }
        let id = self.frames.len() as FrameId;
        self.frames.push(f.clone());
        self.frame_ids.insert(f, id);
        id
    }
}
