//! Symbolization: kernel addresses through kallsyms, user addresses through ELF symbols and DWARF (with inlined
//! frames), separate debug files (build-id, .gnu_debuglink), /tmp/perf-PID.map for JITs, and demangling.
//!
//! [`Symbolizer`] resolves kernel addresses ([`Symbolizer::kernel`]), offsets into mapped files
//! ([`Symbolizer::user`]: frames outermost first, inlined frames after the function they were inlined into,
//! empty when unknown, never a wrong name) and JIT addresses ([`Symbolizer::jit`]), each (binary, address)
//! once. [`elf_info`], [`function_symbols`] and [`demangle`] serve `probe`; [`parse_kallsyms`] and
//! [`parse_perf_map`] are the pure parsers.
mod binary;
mod code;
mod debugfile;
mod demangle;
mod dwarf;
mod elf;
mod kallsyms;
mod kernel;
pub mod params;
mod perfmap;

pub use code::function_code;
pub use demangle::demangle;
pub use kallsyms::{parse_kallsyms, KernelSymbols, Marks};
pub use kernel::KernelRef;
// The build-id facts live in `crate::buildid`; re-exported for the users of `symbols`.
pub use crate::buildid::{
    buildid_dir, cached_kallsyms_path, cached_vdso_path, running_build_id, running_text,
    running_vdso, VDSO,
};
pub use perfmap::{parse_perf_map, PerfMap};

use binary::Binary;
use std::collections::HashMap;
use std::path::PathBuf;

/// Options for symbolization.
#[derive(Clone, Debug)]
pub struct SymbolizerOptions {
    /// Roots searched for separate debug files (`ROOT/.build-id/xx/rest.debug`, `ROOT/<dir>/<debuglink>`).
    /// Default: `/usr/lib/debug`.
    pub debug_dirs: Vec<PathBuf>,
    /// Show inlined functions as frames of their own (DWARF).
    pub inlines: bool,
    /// Fill [`Frame::location`] with `file:line`.
    pub lines: bool,
    /// Demangle Rust and C++ names.
    pub demangle: bool,
}

impl Default for SymbolizerOptions {
    fn default() -> Self {
        SymbolizerOptions {
            debug_dirs: vec![PathBuf::from("/usr/lib/debug")],
            inlines: true,
            lines: false,
            demangle: true,
        }
    }
}

/// One resolved frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The function name (demangled when [`SymbolizerOptions::demangle`] is set).
    pub name: String,
    /// `file:line` when [`SymbolizerOptions::lines`] is set and DWARF has it.
    pub location: Option<String>,
    /// True when this frame was inlined into the frame before it.
    pub inlined: bool,
    /// The name as the binary stores it (mangled), when it differs from `name`.
    pub raw_name: Option<String>,
    /// The outermost frame only: how far the address lies past the start of its function symbol (what perf
    /// prints as `name+0xOFF`); None for inlined frames and names from DWARF alone.
    pub offset: Option<u64>,
    /// The source file (as DWARF names it, joined with the compilation directory) and line of this frame,
    /// when [`SymbolizerOptions::lines`] is set and DWARF has them.
    pub source: Option<SourceLine>,
}

/// A source line as DWARF names it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SourceLine {
    pub file: String,
    pub line: u32,
}

/// A function symbol around an address: its name and its range of ELF addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionRange {
    /// The name as the symbol table stores it (maybe mangled).
    pub raw_name: String,
    /// The demangled name.
    pub name: String,
    pub start: ElfAddr,
    pub end: ElfAddr,
}

/// Which binary an address belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ModuleKey {
    /// The path as the process mapped it.
    pub path: PathBuf,
    /// The process that mapped it: used to open the file through `/proc/PID/root` (containers).
    pub pid: u32,
    /// The build id recorded for it, if any: used to find debug files and to reject a different file.
    pub build_id: Option<Vec<u8>>,
}

use crate::addr::{ElfAddr, FileOffset, RuntimeAddr};
use crate::elf_layout::ElfLayout;
use std::path::Path;
use std::sync::{mpsc, Arc, Mutex};

/// Errors of the symbols stage (used where a caller needs the symbols, e.g. `rprof probe -x BIN`).
#[derive(Debug, thiserror::Error)]
pub enum SymbolError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not an ELF file: {reason}")]
    NotElf { path: PathBuf, reason: String },
    #[error("{path}: corrupt ELF file: {reason}")]
    CorruptElf { path: PathBuf, reason: String },
    #[error(
        "{path} has another build id than the recorded one; it is not the file that was profiled"
    )]
    BuildIdMismatch { path: PathBuf },
    #[error("{path} has no symbol table and no debug file was found (looked in {searched}); install its debug symbols")]
    NoSymbols { path: PathBuf, searched: String },
}

/// A function symbol of an ELF file (from .symtab, .dynsym, or the separate debug file).
#[derive(Clone, Debug)]
pub struct FunctionSymbol {
    /// The name as stored (mangled).
    pub name: String,
    /// The demangled name (equal to `name` when it is not mangled).
    pub demangled: String,
    pub addr: ElfAddr,
    pub size: u64,
}

/// What the probe and unwind stages need to know about an ELF file.
#[derive(Clone, Debug)]
pub struct ElfInfo {
    pub build_id: Option<Vec<u8>>,
    /// The PT_LOAD segments: file offsets to and from ELF addresses.
    pub layout: ElfLayout,
    /// A Go binary (has `.go.buildinfo`): uretprobes crash it.
    pub is_go: bool,
}

/// Read an ELF file's build id, PT_LOAD segments and Go marker.
pub fn elf_info(path: &Path) -> Result<ElfInfo, SymbolError> {
    let file = std::fs::File::open(path).map_err(|source| SymbolError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let cache = object::ReadCache::new(file);
    let parsed = object::File::parse(&cache).map_err(|e| elf::parse_error(path, &cache, e))?;
    if parsed.format() != object::BinaryFormat::Elf {
        let reason = format!("it is a {:?} file", parsed.format());
        return Err(SymbolError::NotElf {
            path: path.to_path_buf(),
            reason,
        });
    }
    Ok(elf::info_of(&parsed))
}

/// All function symbols of `path` (its own tables, else those of its separate debug file), aliases included.
///
/// Symbols are STT_FUNC and STT_GNU_IFUNC with a nonzero address from .symtab and .dynsym, deduplicated on
/// (name, address) and sorted by address. When the file has no .symtab, the .symtab of its debug file (found by
/// build id or `.gnu_debuglink` under `debug_dirs`) is added.
pub fn function_symbols(
    path: &Path,
    debug_dirs: &[PathBuf],
) -> Result<Vec<FunctionSymbol>, SymbolError> {
    let loaded = binary::load(path, path, None, debug_dirs)?;
    if loaded.symbols.is_empty() {
        let searched = if loaded.searched.is_empty() {
            "no debug link or build id".to_string()
        } else {
            loaded
                .searched
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        return Err(SymbolError::NoSymbols {
            path: path.to_path_buf(),
            searched,
        });
    }
    let mut symbols: Vec<FunctionSymbol> = loaded
        .symbols
        .into_iter()
        .map(|s| FunctionSymbol {
            demangled: demangle(&s.name),
            name: s.name,
            addr: ElfAddr(s.addr),
            size: s.size,
        })
        .collect();
    symbols.sort_by(|a, b| a.addr.cmp(&b.addr).then_with(|| a.name.cmp(&b.name)));
    Ok(symbols)
}

/// A binary being opened by an [`Openers`] thread, or opened (None: no candidate could be used).
enum Slot {
    Loading(mpsc::Receiver<Option<Box<Binary>>>),
    Ready(Option<Box<Binary>>),
}

impl Slot {
    fn get(&mut self) -> Option<&mut Binary> {
        if let Slot::Loading(opened) = self {
            *self = Slot::Ready(opened.recv().ok().flatten());
        }
        match self {
            Slot::Ready(binary) => binary.as_deref_mut(),
            Slot::Loading(_) => None,
        }
    }
}

/// A job for an [`Openers`] thread.
type Job = Box<dyn FnOnce() + Send>;

/// Threads that open binaries (symbols and DWARF) while the recording is read: at most one per core (up to 8),
/// because parsing is CPU-bound, and a system-wide recording samples hundreds of binaries. Files are mapped, not
/// read, so memory follows the pages parsing and lookups touch.
struct Openers {
    jobs: mpsc::Sender<Job>,
    queue: Arc<Mutex<mpsc::Receiver<Job>>>,
    threads: usize,
}

impl Openers {
    fn new() -> Openers {
        let (jobs, queue) = mpsc::channel();
        Openers {
            jobs,
            queue: Arc::new(Mutex::new(queue)),
            threads: 0,
        }
    }

    /// Open a binary with `open` on a thread of the pool (here, when no thread can be had).
    fn submit(&mut self, open: impl FnOnce() -> Option<Box<Binary>> + Send + 'static) -> Slot {
        let most = std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 8));
        if self.threads < most {
            let queue = Arc::clone(&self.queue);
            let spawned = std::thread::Builder::new()
                .name("rprof-symbols".into())
                .spawn(move || loop {
                    // The lock is held only to take a job; the thread ends when the symbolizer is dropped.
                    let job = queue.lock().unwrap_or_else(|e| e.into_inner()).recv();
                    match job {
                        Ok(job) => job(),
                        Err(_) => break,
                    }
                });
            if spawned.is_ok() {
                self.threads += 1;
            }
        }
        if self.threads == 0 {
            return Slot::Ready(open());
        }
        let (done, opened) = mpsc::channel();
        let job: Job = Box::new(move || {
            let _ = done.send(open());
        });
        match self.jobs.send(job) {
            Ok(()) => Slot::Loading(opened),
            Err(_) => Slot::Ready(None),
        }
    }
}

/// Resolves addresses to names, caching each (binary, address) once.
///
/// Binaries are parsed once each (shared between processes mapping the same file) and kept for the life of
/// the symbolizer; there is no eviction.
pub struct Symbolizer {
    opts: SymbolizerOptions,
    /// Loaded on the first kernel lookup.
    kernel: Option<kernel::KernelTable>,
    /// The kernel symbols being read and parsed in the background (see [`Symbolizer::prefetch_kernel`]).
    kernel_loading: Option<std::thread::JoinHandle<kernel::KernelTable>>,
    /// The recording's kernel, as given to [`Symbolizer::set_kernel`].
    kernel_ref: KernelRef,
    /// Index into `modules` for each module seen.
    module_ids: HashMap<ModuleKey, usize>,
    /// The index in `binaries` of each module (None when there is no file to open).
    modules: Vec<Option<usize>>,
    /// Binaries, parsed or being parsed.
    binaries: Vec<Slot>,
    openers: Openers,
    /// Index in `binaries` by (device, inode, recorded build id), so one file mapped by many processes is
    /// parsed once.
    by_inode: HashMap<(u64, u64, Option<Vec<u8>>), usize>,
    /// Index in `binaries` of the vDSO by its recorded build id.
    vdso: HashMap<Option<Vec<u8>>, usize>,
    /// Resolved frames by (module index, file offset).
    frames: HashMap<(usize, u64), Arc<[Frame]>>,
    /// Perf maps by pid (None when the pid has none).
    perf_maps: HashMap<u32, Option<PerfMap>>,
    /// Host pid -> namespace pid (see [`Symbolizer::set_ns_pids`]).
    ns_pids: HashMap<u32, u32>,
    empty: Arc<[Frame]>,
}

impl Symbolizer {
    /// A symbolizer with nothing loaded yet.
    pub fn new(opts: SymbolizerOptions) -> Symbolizer {
        Symbolizer {
            opts,
            kernel: None,
            kernel_loading: None,
            kernel_ref: KernelRef::default(),
            module_ids: HashMap::new(),
            modules: Vec::new(),
            binaries: Vec::new(),
            openers: Openers::new(),
            by_inode: HashMap::new(),
            vdso: HashMap::new(),
            frames: HashMap::new(),
            perf_maps: HashMap::new(),
            ns_pids: HashMap::new(),
            empty: Arc::from(Vec::new()),
        }
    }

    /// Say which kernel the addresses come from (build id and `_text`); before the first kernel lookup or
    /// [`Symbolizer::prefetch_kernel`]. Without it, the running kernel is assumed.
    pub fn set_kernel(&mut self, kernel: KernelRef) {
        self.kernel_ref = kernel;
    }

    /// Start loading the kernel's symbols on another thread, so that the first [`Symbolizer::kernel`] lookup
    /// finds them ready (reading /proc/kallsyms costs the kernel tens of milliseconds). Does nothing when they
    /// are loaded or loading.
    pub fn prefetch_kernel(&mut self) {
        if self.kernel.is_none() && self.kernel_loading.is_none() {
            let recorded = self.kernel_ref.clone();
            self.kernel_loading = std::thread::Builder::new()
                .name("rprof-kallsyms".into())
                .spawn(move || kernel::KernelTable::load(&recorded))
                .ok();
        }
    }

    /// A kernel address: from the build-id cache's copy of the recorded kernel's kallsyms, or from the running
    /// kernel's /proc/kallsyms when it is the recorded one (see `symbols/kernel.rs`). None when unknown.
    pub fn kernel(&mut self, addr: u64) -> Option<Arc<str>> {
        if self.kernel.is_none() {
            let table = match self.kernel_loading.take().map(|t| t.join()) {
                Some(Ok(table)) => table,
                _ => kernel::KernelTable::load(&self.kernel_ref),
            };
            self.kernel = Some(table);
        }
        self.kernel.as_mut()?.lookup(addr)
    }

    /// A kernel address: its symbol and how far the address lies past the symbol's start.
    pub fn kernel_at(&mut self, addr: u64) -> Option<(Arc<str>, u64)> {
        self.kernel(addr)?;
        self.kernel.as_mut()?.lookup_at(addr)
    }

    /// An offset into a mapped file: frames outermost first; empty when unknown.
    ///
    /// The file is opened as `module.path`, else as `/proc/PID/root/path` (containers); a file whose build id
    /// differs from `module.build_id` is not used. The outermost name comes from the symbol table (.symtab,
    /// .dynsym, or the debug file's), inlined frames and lines from DWARF.
    pub fn user(&mut self, module: &ModuleKey, offset: FileOffset) -> Arc<[Frame]> {
        let index = self.module_index(module);
        if let Some(frames) = self.frames.get(&(index, offset.0)) {
            return frames.clone();
        }
        let opts = &self.opts;
        let binary = self.modules[index].and_then(|slot| self.binaries[slot].get());
        let frames: Arc<[Frame]> = match binary.map(|b| b.resolve(offset, opts)) {
            Some(frames) if !frames.is_empty() => Arc::from(frames),
            _ => self.empty.clone(),
        };
        self.frames.insert((index, offset.0), frames.clone());
        frames
    }

    /// The function symbol containing a file offset of a module, with the ELF layout that maps it back to
    /// file offsets; None when the binary cannot be opened or no symbol covers it.
    pub fn function(
        &mut self,
        module: &ModuleKey,
        offset: FileOffset,
    ) -> Option<(FunctionRange, ElfLayout)> {
        let index = self.module_index(module);
        let binary = self.modules[index].and_then(|slot| self.binaries[slot].get())?;
        let addr = binary.info.layout.elf_addr(offset)?;
        let function = binary.function_at(addr.0)?;
        Some((function, binary.info.layout.clone()))
    }

    /// Whether a module's binary could be opened (and had the recorded build id).
    pub fn module_opens(&mut self, module: &ModuleKey) -> bool {
        let index = self.module_index(module);
        self.modules[index]
            .and_then(|slot| self.binaries[slot].get())
            .is_some()
    }

    /// Start opening a module (symbols and DWARF) on a thread of its own, so that a later
    /// [`Symbolizer::user`] finds it ready.
    pub fn prefetch(&mut self, module: &ModuleKey) {
        self.module_index(module);
    }

    fn module_index(&mut self, module: &ModuleKey) -> usize {
        if let Some(&index) = self.module_ids.get(module) {
            return index;
        }
        let binary = self.open_module(module);
        self.modules.push(binary);
        self.module_ids
            .insert(module.clone(), self.modules.len() - 1);
        self.modules.len() - 1
    }

    /// Start opening a module's binary: `path`, else `/proc/PID/root/path` (containers). A file whose build id
    /// differs from the recorded one is skipped.
    fn open_module(&mut self, module: &ModuleKey) -> Option<usize> {
        use std::os::unix::fs::MetadataExt;
        if module.path == Path::new(VDSO) {
            return Some(self.open_vdso(module.build_id.as_ref()));
        }
        let mut candidates = vec![module.path.clone()];
        if module.path.is_absolute() {
            candidates.push(crate::process::root_path(module.pid, &module.path));
        }
        let mut found = candidates
            .into_iter()
            .filter_map(|c| {
                std::fs::metadata(&c)
                    .ok()
                    .filter(|m| m.is_file())
                    .map(|m| (c, m))
            })
            .peekable();
        let key = found
            .peek()
            .map(|(_, meta)| (meta.dev(), meta.ino(), module.build_id.clone()))?;
        if let Some(&index) = self.by_inode.get(&key) {
            return Some(index);
        }
        let paths: Vec<PathBuf> = found.map(|(path, _)| path).collect();
        let original = module.path.clone();
        let build_id = module.build_id.clone();
        let debug_dirs = self.opts.debug_dirs.clone();
        let open = move || {
            paths.iter().find_map(|path| {
                Binary::open(path, &original, build_id.as_deref(), &debug_dirs)
                    .ok()
                    .map(Box::new)
            })
        };
        let slot = self.openers.submit(open);
        self.binaries.push(slot);
        self.by_inode.insert(key, self.binaries.len() - 1);
        Some(self.binaries.len() - 1)
    }

    /// The vDSO slot for a recorded build id: the build-id cache's copy of that image, else this process's own
    /// vDSO when it is the recorded one (the same build id, or, with none recorded, the same kernel).
    fn open_vdso(&mut self, build_id: Option<&Vec<u8>>) -> usize {
        if let Some(&index) = self.vdso.get(&build_id.cloned()) {
            return index;
        }
        let name = Path::new(VDSO);
        let cached = build_id.zip(buildid_dir()).and_then(|(id, dir)| {
            Binary::open(&cached_vdso_path(&dir, id), name, Some(id), &[]).ok()
        });
        let binary = cached.or_else(|| {
            let (image, running_id) = running_vdso()?;
            let same = match build_id {
                Some(id) => *id == running_id,
                None => self
                    .kernel_ref
                    .build_id
                    .as_ref()
                    .is_none_or(|k| running_build_id().as_ref() == Some(k)),
            };
            same.then(|| Binary::from_bytes(image, name, None).ok())?
        });
        self.binaries.push(Slot::Ready(binary.map(Box::new)));
        self.vdso.insert(build_id.cloned(), self.binaries.len() - 1);
        self.binaries.len() - 1
    }

    /// Host pid -> pid in the process's own pid namespace (a container), for finding its perf-PID.map.
    pub fn set_ns_pids(&mut self, ns_pids: HashMap<u32, u32>) {
        self.ns_pids = ns_pids;
    }

    /// A JIT address through /tmp/perf-PID.map: the host's file, else (a process in a container) the one the
    /// process wrote under its namespace pid in its own /tmp, through /proc/PID/root while it lives.
    pub fn jit(&mut self, pid: u32, addr: RuntimeAddr) -> Option<Arc<str>> {
        let ns_pid = self.ns_pids.get(&pid).copied();
        let map = self.perf_maps.entry(pid).or_insert_with(|| {
            let inside = ns_pid.map(|ns| {
                crate::process::root_path(pid, Path::new(&format!("/tmp/perf-{ns}.map")))
            });
            std::iter::once(PathBuf::from(format!("/tmp/perf-{pid}.map")))
                .chain(inside)
                .find_map(|path| std::fs::read(path).ok())
                .map(|data| parse_perf_map(&data))
        });
        map.as_ref()?.lookup(addr.0).cloned()
    }
}

#[cfg(test)]
mod tests {
    /// Check that a symbolizer can move to another thread (for a parallel report).
    #[test]
    fn symbolizer_is_send() {
        fn is_send<T: Send>() {}
        is_send::<super::Symbolizer>();
    }
}
