//! [`Symbolizer`]: one noun for every lookup (kernel, mapped files, JIT code), each (binary, address) once.
use super::binary::Binary;
use super::cache::{CacheId, FileCache, FileId};
use super::kernel::KernelNames;
use super::perfmap::PerfMaps;
use super::pool::{Pool, Slot};
use super::unnamed::{Symbolized, Unknown, Unnamed};
use super::{
    DebugSources, FunctionRange, KernelRef, ModuleKey, SymbolError, SymbolizerOptions, VDSO,
};
use crate::addr::{FileOffset, RuntimeAddr};
use crate::elf_layout::ElfLayout;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A binary as opened: ready, or why it could not be used.
type Opened = Result<Box<Binary>, Unnamed>;

/// What a binary is known by: a file's identity, the vDSO, or (gone from disk) its build id alone; with the
/// build id expected of it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum BinaryKey {
    File(FileId, Option<Vec<u8>>),
    Vdso(Option<Vec<u8>>),
    Gone(Vec<u8>),
}

/// What [`Symbolizer::trim`] dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Trimmed {
    pub modules: usize,
    pub binaries: usize,
    pub resolved: usize,
}

/// Asked before a binary not yet read is opened, with about how many bytes its symbol tables will take: whether
/// it may be (`rprof record --push`'s budget).
pub type OpenGate = Box<dyn FnMut(u64) -> bool + Send>;

/// Resolves addresses to names, caching each (binary, address) once.
///
/// Binaries are parsed once each (shared between processes mapping the same file) and kept for the life of
/// the symbolizer, unless [`Symbolizer::trim`] drops them past its cap.
pub struct Symbolizer {
    opts: SymbolizerOptions,
    kernel: KernelNames,
    /// Each module's binary in `binaries`, or why it has none.
    modules: HashMap<ModuleKey, Result<CacheId, Unnamed>>,
    /// Binaries, opened or being opened on `pool`.
    binaries: FileCache<BinaryKey, Slot<Opened>>,
    pool: Pool,
    /// What each (binary, file offset) resolved to.
    resolved: HashMap<(CacheId, u64), Symbolized>,
    perf_maps: PerfMaps,
    /// The names of the recording's Python frames (see [`crate::python::frame_addr`]).
    python_names: crate::python::Names,
    /// How many times [`Symbolizer::trim`] ran, and when (in those terms) each binary was last used, by the
    /// index of its id.
    trims: u32,
    last_used: Vec<u32>,
    /// Without it every binary may be opened.
    gate: Option<OpenGate>,
    /// Binaries the gate refused since [`Symbolizer::take_refused`].
    refused: std::collections::HashSet<BinaryKey>,
}

impl Symbolizer {
    /// A symbolizer with nothing loaded yet.
    pub fn new(opts: SymbolizerOptions) -> Symbolizer {
        let mut kernel = KernelNames::default();
        // Where inflated debug sections are kept, the kernel's run-time symbols are too (`-N`: neither).
        kernel.keep_runtime_in(opts.debug.inflated.as_ref().map(|c| c.dir.clone()));
        Symbolizer {
            opts,
            kernel,
            modules: HashMap::new(),
            binaries: FileCache::new(),
            pool: Pool::new(),
            resolved: HashMap::new(),
            perf_maps: PerfMaps::default(),
            python_names: crate::python::Names::default(),
            trims: 0,
            last_used: Vec::new(),
            gate: None,
            refused: std::collections::HashSet::new(),
        }
    }

    /// Say which kernel the addresses come from (build id and `_text`); before the first kernel lookup or
    /// [`Symbolizer::prefetch_kernel`]. Without it, the running kernel is assumed.
    pub fn set_kernel(&mut self, kernel: KernelRef) {
        self.kernel.set_kernel(kernel);
    }

    /// Start loading the kernel's symbols on another thread, so that the first [`Symbolizer::kernel`] lookup
    /// finds them ready (reading /proc/kallsyms costs the kernel tens of milliseconds). Does nothing when they
    /// are loaded or loading.
    pub fn prefetch_kernel(&mut self) {
        self.kernel.prefetch();
    }

    /// A kernel address: from the build-id cache's copy of the recorded kernel's kallsyms, or from the running
    /// kernel's /proc/kallsyms when it is the recorded one (see `symbols/kernel.rs`). None when unknown.
    pub fn kernel(&mut self, addr: u64) -> Option<Arc<str>> {
        self.kernel_at(addr).map(|(name, _)| name)
    }

    /// Why kernel addresses without a name have none: no symbols of the recorded kernel are at hand
    /// ([`Unnamed::KernelWithoutSymbols`]), or none covers them ([`Unnamed::NoSymbol`]: modules, BPF).
    pub fn kernel_unnamed(&mut self) -> Unnamed {
        self.kernel.why_unnamed()
    }

    /// A kernel address: its symbol and how far the address lies past the symbol's start.
    pub fn kernel_at(&mut self, addr: u64) -> Option<(Arc<str>, u64)> {
        self.kernel.lookup_at(addr)
    }

    /// An offset into a mapped file: frames outermost first, or why there is no name.
    ///
    /// The file is opened as `module.path`, else as `/proc/PID/root/path` (containers); a file whose build id
    /// differs from `module.build_id` is not used. The outermost name comes from the symbol table (.symtab,
    /// .dynsym, or the debug file's), inlined frames and lines from DWARF.
    pub fn user(&mut self, module: &ModuleKey, offset: FileOffset) -> Symbolized {
        let id = match self.module(module) {
            Ok(id) => id,
            Err(cause) => return Symbolized::Unknown(Unknown::alone(cause)),
        };
        if let Some(known) = self.resolved.get(&(id, offset.0)) {
            return known.clone();
        }
        let opts = &self.opts;
        let symbolized = match self.binaries.get(id).get(lost) {
            Ok(binary) => match binary.resolve(offset, opts) {
                Ok(frames) => Symbolized::Frames(Arc::from(frames)),
                Err(unknown) => Symbolized::Unknown(unknown),
            },
            Err(cause) => Symbolized::Unknown(Unknown::alone(*cause)),
        };
        self.resolved.insert((id, offset.0), symbolized.clone());
        symbolized
    }

    /// Bound what the symbolizer keeps across the periods of a long session (`rprof record --push`): the
    /// per-process modules and perf maps are forgotten (modules are found again from the binaries, which are
    /// cached by file identity, not by process); a binary no address was looked up in since the trim before
    /// this one is dropped (a build's compilers and scripts come and go), with the offsets resolved in it; the
    /// resolved offsets are dropped past `max_resolved`, and the binaries (with everything that points into
    /// them) past `max_binaries`. The kernel's symbols stay.
    pub fn trim(&mut self, max_resolved: usize, max_binaries: usize) -> Trimmed {
        let mut t = Trimmed {
            modules: self.modules.len(),
            ..Trimmed::default()
        };
        self.modules = HashMap::new();
        self.perf_maps.forget();
        let (trims, last_used) = (self.trims, &self.last_used);
        let before = self.binaries.len();
        self.binaries.retain(|id| {
            let used = last_used.get(FileCache::<BinaryKey, Slot<Opened>>::index(id));
            used.is_some_and(|&used| trims.saturating_sub(used) < 2)
        });
        if self.binaries.len() < before {
            t.binaries = before - self.binaries.len();
            let binaries = &self.binaries;
            let resolved_before = self.resolved.len();
            self.resolved.retain(|(id, _), _| binaries.contains(*id));
            t.resolved = resolved_before - self.resolved.len();
            self.resolved.shrink_to_fit();
        }
        self.trims += 1;
        if self.resolved.len() > max_resolved || self.binaries.len() > max_binaries {
            t.resolved += self.resolved.len();
            self.resolved = HashMap::new();
        }
        if self.binaries.len() > max_binaries {
            t.binaries += self.binaries.len();
            self.binaries = FileCache::new();
            self.last_used = Vec::new();
        }
        t
    }

    /// Ask `gate` before opening a binary not yet read: one it refuses is not read, its addresses stay unnamed
    /// ([`Unnamed::OverBudget`], not kept: a later lookup asks again).
    pub fn set_gate(&mut self, gate: Option<OpenGate>) {
        self.gate = gate;
    }

    /// How many binaries the gate refused since the last call.
    pub fn take_refused(&mut self) -> usize {
        std::mem::take(&mut self.refused).len()
    }

    /// Drop what the period just cut no longer needs (`rprof record --push`, between periods): the binaries no
    /// address was looked up in during it, with the offsets resolved in them (a host running builds meets new
    /// binaries each period; one sampled again is read again), and the DWARF of the others (loaded again for a
    /// new address). Memory then follows what is being symbolized now, not what the host has run. Returns how
    /// many binaries were dropped.
    pub fn end_period(&mut self) -> usize {
        let (now, last_used) = (self.trims, &self.last_used);
        let before = self.binaries.len();
        self.binaries.retain(|id| {
            let used = last_used.get(FileCache::<BinaryKey, Slot<Opened>>::index(id));
            used.is_some_and(|&used| used == now)
        });
        let binaries = &self.binaries;
        self.resolved.retain(|(id, _), _| binaries.contains(*id));
        self.modules
            .retain(|_, id| id.as_ref().map_or(true, |id| binaries.contains(*id)));
        self.resolved.shrink_to_fit();
        self.modules.shrink_to_fit();
        self.trims += 1;
        self.release_dwarf();
        before - self.binaries.len()
    }

    /// How many (modules, binaries, resolved offsets) are kept.
    pub fn sizes(&self) -> (usize, usize, usize) {
        (self.modules.len(), self.binaries.len(), self.resolved.len())
    }

    /// Drop the DWARF of every binary opened so far (see `Binary::release_dwarf`): for a caller that has
    /// looked up the addresses it needs (the answers are kept), before it goes on to other work. A later lookup
    /// of a new address loads the binary's DWARF again.
    pub fn release_dwarf(&mut self) {
        for slot in self.binaries.values_mut() {
            if let Slot::Ready(Ok(binary)) = slot {
                binary.release_dwarf();
            }
        }
    }

    /// The function symbol containing a file offset of a module, with the ELF layout that maps it back to
    /// file offsets; None when the binary cannot be opened or no symbol covers it.
    pub fn function(
        &mut self,
        module: &ModuleKey,
        offset: FileOffset,
    ) -> Option<(FunctionRange, ElfLayout)> {
        let id = self.module(module).ok()?;
        let binary = self.binaries.get(id).get(lost).as_ref().ok()?;
        let addr = binary.info.layout.elf_addr(offset)?;
        let function = binary.function_at(addr.0)?;
        Some((function, binary.info.layout.clone()))
    }

    /// Why a module's binary cannot be used (gone, another build id, unreadable); None when it opens.
    pub fn module_unusable(&mut self, module: &ModuleKey) -> Option<Unnamed> {
        match self.module(module) {
            Ok(id) => self.binaries.get(id).get(lost).as_ref().err().copied(),
            Err(cause) => Some(cause),
        }
    }

    /// Whether a module's binary could be opened (and had the recorded build id).
    pub fn module_opens(&mut self, module: &ModuleKey) -> bool {
        self.module_unusable(module).is_none()
    }

    /// Start opening a module (symbols and DWARF) on a thread of its own, so that a later
    /// [`Symbolizer::user`] finds it ready.
    pub fn prefetch(&mut self, module: &ModuleKey) {
        let _ = self.module(module);
    }

    /// Host pid -> pid in the process's own pid namespace (a container), for finding its perf-PID.map.
    pub fn set_ns_pids(&mut self, ns_pids: HashMap<u32, u32>) {
        self.perf_maps.set_ns_pids(ns_pids);
    }

    /// The names of the Python frames of the recording (its PYTHON section, or the live session's).
    pub fn set_python_names(&mut self, names: crate::python::Names) {
        self.python_names = names;
    }

    /// The name of a Python frame's address (None for other addresses, or one the recording does not name).
    pub fn python(&self, addr: u64) -> Option<Arc<str>> {
        let index = crate::python::frame_index(addr)?;
        self.python_names.get(index)
    }

    /// A JIT address through /tmp/perf-PID.map: the host's file, else (a process in a container) the one the
    /// process wrote under its namespace pid in its own /tmp, through /proc/PID/root while it lives.
    pub fn jit(&mut self, pid: u32, addr: RuntimeAddr) -> Result<Arc<str>, Unnamed> {
        self.perf_maps.lookup(pid, addr)
    }

    /// The binary of a module in the cache (started opening on the pool), or why it has none.
    fn module(&mut self, module: &ModuleKey) -> Result<CacheId, Unnamed> {
        let id = match self.modules.get(module) {
            Some(known) => *known,
            None => {
                let id = self.open_module(module);
                // Refused by the gate: asked again at the next lookup.
                if id != Err(Unnamed::OverBudget) {
                    self.modules.insert(module.clone(), id);
                }
                id
            }
        };
        if let Ok(id) = id {
            let i = FileCache::<BinaryKey, Slot<Opened>>::index(id);
            if self.last_used.len() <= i {
                self.last_used.resize(i + 1, 0);
            }
            self.last_used[i] = self.trims;
        }
        id
    }

    /// Start opening a module's binary: `path`, else `/proc/PID/root/path` (containers), else the copy of the
    /// recorded build in the build-id cache. A file whose build id differs from the recorded one is not used.
    fn open_module(&mut self, module: &ModuleKey) -> Result<CacheId, Unnamed> {
        let build_id = module.build_id.clone();
        if module.path == Path::new(VDSO) {
            let kernel = self.kernel.build_id().map(<[u8]>::to_vec);
            let key = BinaryKey::Vdso(build_id.clone());
            return Ok(self.binaries.id(key, || {
                Slot::Ready(super::vdso::open_vdso(
                    build_id.as_deref(),
                    kernel.as_deref(),
                ))
            }));
        }
        let mut candidates = vec![module.path.clone()];
        if module.path.is_absolute() {
            candidates.push(crate::process::root_path(module.pid, &module.path));
        }
        // Rebuilt or gone: the recorded build's copy in the build-id cache (perf's or rprof's).
        let cached = build_id.as_deref().zip(crate::buildid::buildid_dir());
        if let Some(copy) =
            cached.and_then(|(id, dir)| crate::buildid::find_cached_binary(&dir, &module.path, id))
        {
            candidates.push(copy);
        }
        let found: Vec<(PathBuf, FileId)> = candidates
            .into_iter()
            .filter_map(|path| FileId::of(&path).map(|id| (path, id)))
            .collect();
        let key = match found.first() {
            Some((_, file)) => BinaryKey::File(file.clone(), build_id.clone()),
            // Gone from disk: debuginfod may have the executable of its build id.
            None => match (&self.opts.debug.debuginfod, &build_id) {
                (Some(_), Some(id)) => BinaryKey::Gone(id.clone()),
                _ => return Err(Unnamed::FileGone),
            },
        };
        let debug_dirs = &self.opts.debug.dirs;
        let refused = |gate: &mut OpenGate| {
            let need = found
                .first()
                .map_or(0, |(p, _)| super::elf::symbol_table_bytes(p));
            // Its debug file by build id (libc6-dbg's): the symbols and DWARF that will be read are there.
            let debug = build_id.as_deref().map_or(0, |id| {
                let by_id = super::debugfile::by_build_id(id, debug_dirs, &mut Vec::new());
                by_id.map_or(0, |p| super::elf::symbol_table_bytes(&p))
            });
            !gate(need + debug)
        };
        // Refused already in this period: not asked again (the estimate opens the file).
        if self.refused.contains(&key) {
            return Err(Unnamed::OverBudget);
        }
        if !self.binaries.has(&key) && self.gate.as_mut().is_some_and(refused) {
            self.refused.insert(key);
            return Err(Unnamed::OverBudget);
        }
        let original = module.path.clone();
        let debug = self.opts.debug.clone();
        let pool = &mut self.pool;
        Ok(self.binaries.id(key, || {
            pool.submit(move || {
                let mut cause = None;
                for (path, _) in &found {
                    match Binary::open(path, &original, build_id.as_deref(), &debug) {
                        Ok(binary) => return Ok(Box::new(binary)),
                        // The file the process mapped says why, not the cache's copy after it.
                        Err(error) => cause = cause.or(Some(cause_of(&error))),
                    }
                }
                let cause = cause.unwrap_or(Unnamed::FileGone);
                // Gone, or another build: the recorded build, from debuginfod.
                if matches!(cause, Unnamed::FileGone | Unnamed::BuildIdMismatch) {
                    if let Some(fetched) = open_fetched(&original, build_id.as_deref(), &debug) {
                        return Ok(fetched);
                    }
                }
                Err(cause)
            })
        }))
    }
}

/// The executable debuginfod has for a build id, opened as the binary a process mapped as `original`.
fn open_fetched(
    original: &Path,
    build_id: Option<&[u8]>,
    debug: &DebugSources,
) -> Option<Box<Binary>> {
    let id = build_id?;
    let path = debug.debuginfod.as_ref()?.executable(id)?;
    Binary::open(&path, original, Some(id), debug)
        .ok()
        .map(Box::new)
}

/// What a slot holds when the thread opening its binary died.
fn lost() -> Opened {
    Err(Unnamed::Unreadable)
}

/// Why a binary could not be opened, as the cause of its unnamed frames.
fn cause_of(error: &SymbolError) -> Unnamed {
    match error {
        SymbolError::BuildIdMismatch { .. } => Unnamed::BuildIdMismatch,
        SymbolError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            Unnamed::FileGone
        }
        _ => Unnamed::Unreadable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(path: std::path::PathBuf) -> ModuleKey {
        ModuleKey {
            path,
            pid: std::process::id(),
            build_id: None,
        }
    }

    /// Check the bounds of `trim`: the per-process modules always go, the resolved offsets only past their cap,
    /// the binaries (and the offsets resolved in them) only past theirs; a binary kept is not read again.
    #[test]
    fn trim_bounds_caches() {
        let mut s = Symbolizer::new(SymbolizerOptions::default());
        let exe = module(std::env::current_exe().unwrap());
        for off in 0..10u64 {
            s.user(&exe, FileOffset(0x1000 + off));
        }
        assert_eq!(s.sizes(), (1, 1, 10));
        let t = s.trim(100, 10);
        assert_eq!((t.modules, t.binaries, t.resolved), (1, 0, 0));
        assert_eq!(s.sizes(), (0, 1, 10));
        // The same file through a module of another process: the binary already read is found by identity.
        let other = ModuleKey {
            pid: 1,
            ..exe.clone()
        };
        s.user(&other, FileOffset(0x1000));
        assert_eq!(s.sizes(), (1, 1, 10));
        let t = s.trim(5, 10);
        assert_eq!((t.binaries, t.resolved), (0, 10));
        assert_eq!(s.sizes(), (0, 1, 0));
        s.user(&exe, FileOffset(0x1000));
        s.user(&module("/bin/true".into()), FileOffset(0x1000));
        assert_eq!(s.sizes(), (2, 2, 2));
        let t = s.trim(100, 1);
        assert_eq!((t.binaries, t.resolved), (2, 2));
        assert_eq!(s.sizes(), (0, 0, 0));
    }

    /// Check that a binary no address was looked up in since the trim before the last one is dropped, with
    /// the offsets resolved in it, and read again when an address needs it.
    #[test]
    fn trim_drops_unused_binaries() {
        let mut s = Symbolizer::new(SymbolizerOptions::default());
        let exe = module(std::env::current_exe().unwrap());
        let other = module("/bin/true".into());
        s.user(&exe, FileOffset(0x1000));
        s.user(&other, FileOffset(0x1000));
        s.trim(100, 10);
        s.user(&exe, FileOffset(0x1001));
        assert_eq!(
            s.trim(100, 10).binaries,
            0,
            "both used since the trim before"
        );
        assert_eq!(s.sizes(), (0, 2, 3));
        let t = s.trim(100, 10);
        assert_eq!(
            (t.binaries, t.resolved),
            (1, 1),
            "/bin/true unused for two trims"
        );
        assert_eq!(s.sizes(), (0, 1, 2));
        s.user(&other, FileOffset(0x1000));
        assert_eq!(s.sizes(), (1, 2, 3), "read again");
    }
}
