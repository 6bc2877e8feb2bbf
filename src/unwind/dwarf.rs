//! DWARF unwinding of user stacks captured with PERF_SAMPLE_REGS_USER + PERF_SAMPLE_STACK_USER.
//!
//! OWNER: dwarf helper. Interface contract used by `record`:
//! - `DwarfUnwinder::new(debug_dirs: Vec<PathBuf>) -> DwarfUnwinder`
//! - `add_mapping(&mut self, pid: u32, start: u64, len: u64, pgoff: u64, path: &str)` on each MMAP2/MMAP
//!   (executable mappings only are interesting; others may be ignored),
//! - `fork(&mut self, parent_pid: u32, child_pid: u32)` (a new process inherits the parent's mappings),
//! - `exit(&mut self, pid: u32)` drops a process,
//! - `unwind(&mut self, pid: u32, regs: &UserRegs, stack: &[u8], dyn_size: u64, out: &mut Vec<u64>) -> UnwindOutcome`
//!   pushes the user frames leaf first (the first is `regs.ip`, then return addresses as found on the stack).
//!
//! How it works: each process keeps its mappings and one framehop unwinder. Unwinding goes frame by frame; before
//! each step the module (ELF file + load bias) that holds the current address is loaded lazily into the process's
//! unwinder. Modules are shared between processes through a cache keyed by (path, load bias) and capped in size;
//! when the cap is reached the least recently used module is dropped from the cache and from every process.
//! Unwind data comes from `.eh_frame` + `.eh_frame_hdr`; when a larger `.debug_frame` exists in the file or in its
//! separate debug file (found by build-id under each debug dir), that one is used instead (framehop uses one).
//! Addresses without a module or without CFI are unwound by framehop with a frame-pointer step.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::elf_layout::ElfLayout;
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, FrameAddress, Module, Unwinder};
use object::read::ReadCache;
use object::{Object, ObjectSection, ReadRef};

pub use crate::regs::UserRegs;

/// The callchain marker before the user part of a sample's callchain.
const PERF_CONTEXT_USER: u64 = perf_event_open_sys::bindings::PERF_CONTEXT_USER;

/// How an unwind ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnwindOutcome {
    /// Reached the outermost frame (no more return address / CFI says end).
    Complete,
    /// Ran off the end of the captured stack copy (the copy was too small), or hit the frame limit.
    Truncated,
    /// A frame could not be unwound (no CFI for the address, unreadable memory...).
    Failed,
}

/// Most frames one unwind produces (the leaf IP included); deeper stacks end as [`UnwindOutcome::Truncated`].
pub const MAX_FRAMES: usize = 256;

/// Default cap on the number of modules kept in the cache (see [`DwarfUnwinder::with_module_cap`]).
pub const DEFAULT_MODULE_CAP: usize = 256;

/// Paths whose layout is remembered at most; past this the layout cache is cleared.
const MAX_LAYOUTS: usize = 4096;

/// `mov $15, %rax; syscall`: the x86_64 rt_sigreturn trampoline that signal handlers return into.
const SIGRETURN_CODE: [u8; 9] = [0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05];
/// Offset of `uc_mcontext.gregs` in the x86_64 `ucontext_t` (after uc_flags, uc_link and the 24-byte uc_stack).
const UC_MCONTEXT: u64 = 40;
/// Indexes of rbp, rsp and rip in `gregs` (`REG_RBP`, `REG_RSP`, `REG_RIP` of `<sys/ucontext.h>`).
const REG_RBP: u64 = 10;
const REG_RSP: u64 = 15;
const REG_RIP: u64 = 16;

/// Why a module could not be loaded (kept private: a module that fails to load is unwound with frame pointers).
#[derive(Debug, thiserror::Error)]
enum ModuleError {
    #[error("Could not open {path}: {source}")]
    Open {
        path: String,
        source: std::io::Error,
    },
    #[error("Could not parse the ELF file {path}: {source}")]
    Parse { path: String, source: object::Error },
    #[error("{0} is not a file on disk (anonymous or special mapping)")]
    NotAFile(String),
}

/// A module in the cache: one ELF file at one load bias. Modules are shared by all processes that map them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ModuleKey {
    path: Arc<str>,
    bias: u64,
}

/// One mapping of a process; the module key is resolved on first need.
#[derive(Clone, Debug)]
struct Mapping {
    end: u64,
    pgoff: u64,
    path: Arc<str>,
    /// `None`: not resolved yet; `Some(None)`: no module (not a readable ELF file).
    key: Option<Option<ModuleKey>>,
}

/// One process: its mappings and the framehop unwinder holding the modules it needed so far.
#[derive(Clone)]
struct Process {
    mappings: BTreeMap<u64, Mapping>,
    unwinder: UnwinderX86_64<Vec<u8>>,
    /// Modules added to `unwinder`, with the start of their address range (framehop's removal key).
    loaded: HashMap<ModuleKey, u64>,
}

impl Process {
    fn new() -> Process {
        Process {
            mappings: BTreeMap::new(),
            unwinder: UnwinderX86_64::new(),
            loaded: HashMap::new(),
        }
    }
}

struct CachedModule {
    /// `None` when the file could not be read: remembered so it is not retried on every frame.
    module: Option<Module<Vec<u8>>>,
    last_used: u64,
}

/// Online DWARF unwinder for the user stacks of sampled processes (x86_64).
pub struct DwarfUnwinder {
    debug_dirs: Vec<PathBuf>,
    module_cap: usize,
    processes: HashMap<u32, Process>,
    modules: HashMap<ModuleKey, CachedModule>,
    layouts: HashMap<Arc<str>, Option<Arc<ElfLayout>>>,
    /// The vDSO of this process, which is the same image as every other 64-bit process's on this kernel.
    vdso: Option<Option<Arc<[u8]>>>,
    cache: CacheX86_64,
    /// (file, offset) of code already checked for the rt_sigreturn trampoline, and the answer.
    sigreturn_sites: HashMap<(Arc<str>, u64), bool>,
    /// The unwinder used for processes without any known mapping.
    no_modules: UnwinderX86_64<Vec<u8>>,
    tick: u64,
}

impl DwarfUnwinder {
    /// Create an unwinder; `debug_dirs` are searched for separate debug files (`DIR/.build-id/xx/rest.debug`).
    pub fn new(debug_dirs: Vec<PathBuf>) -> DwarfUnwinder {
        DwarfUnwinder::with_module_cap(debug_dirs, DEFAULT_MODULE_CAP)
    }

    /// Create an unwinder that keeps at most `module_cap` modules (at least 1) in its cache.
    pub fn with_module_cap(debug_dirs: Vec<PathBuf>, module_cap: usize) -> DwarfUnwinder {
        DwarfUnwinder {
            debug_dirs,
            module_cap: module_cap.max(1),
            processes: HashMap::new(),
            modules: HashMap::new(),
            layouts: HashMap::new(),
            vdso: None,
            cache: CacheX86_64::new(),
            sigreturn_sites: HashMap::new(),
            no_modules: UnwinderX86_64::new(),
            tick: 0,
        }
    }

    /// Number of modules currently in the cache (never more than the cap).
    pub fn cached_modules(&self) -> usize {
        self.modules.len()
    }

    /// Record a mapping of `path` at `start..start+len`, file offset `pgoff`, in process `pid`.
    /// Mappings it overlaps are replaced, as mmap does.
    pub fn add_mapping(&mut self, pid: u32, start: u64, len: u64, pgoff: u64, path: &str) {
        let end = start.saturating_add(len);
        if len == 0 {
            return;
        }
        let process = self.processes.entry(pid).or_insert_with(Process::new);
        let overlapping: Vec<u64> = process
            .mappings
            .range(..end)
            .rev()
            .take_while(|(_, m)| m.end > start)
            .map(|(s, _)| *s)
            .collect();
        // Trim the mappings the new one overlaps, keeping their parts before and after it.
        let mut dropped = Vec::new();
        for old_start in overlapping {
            let Some(old) = process.mappings.remove(&old_start) else {
                continue;
            };
            if old_start < start {
                let mut head = old.clone();
                head.end = start;
                process.mappings.insert(old_start, head);
            }
            if old.end > end {
                let mut tail = old.clone();
                tail.pgoff = old.pgoff.wrapping_add(end - old_start);
                process.mappings.insert(end, tail);
            }
            if let Some(Some(key)) = old.key {
                dropped.push(key);
            }
        }
        // Unload the modules no mapping refers to anymore.
        for key in dropped {
            let still_used = process
                .mappings
                .values()
                .any(|m| matches!(&m.key, Some(Some(k)) if *k == key));
            if !still_used {
                if let Some(avma_start) = process.loaded.remove(&key) {
                    process.unwinder.remove_module(avma_start);
                }
            }
        }
        process.mappings.insert(
            start,
            Mapping {
                end,
                pgoff,
                path: Arc::from(path),
                key: None,
            },
        );
    }

    /// Process `child_pid` starts with a copy of the mappings of `parent_pid`.
    pub fn fork(&mut self, parent_pid: u32, child_pid: u32) {
        if parent_pid == child_pid {
            return;
        }
        if let Some(parent) = self.processes.get(&parent_pid) {
            let child = parent.clone();
            self.processes.insert(child_pid, child);
        }
    }

    /// Forget process `pid` and its mappings.
    pub fn exit(&mut self, pid: u32) {
        self.processes.remove(&pid);
    }

    /// [`DwarfUnwinder::unwind`] into a sample's callchain: the unwound frames become its user part
    /// (PERF_CONTEXT_USER, then the leaf IP and the return addresses), replacing any user part it had; the
    /// kernel part stays.
    pub fn unwind_callchain(
        &mut self,
        pid: u32,
        regs: &UserRegs,
        stack: &[u8],
        dyn_size: u64,
        callchain: &mut Vec<u64>,
    ) -> UnwindOutcome {
        if let Some(at) = callchain.iter().position(|&a| a == PERF_CONTEXT_USER) {
            callchain.truncate(at);
        }
        callchain.push(PERF_CONTEXT_USER);
        self.unwind(pid, regs, stack, dyn_size, callchain)
    }

    /// Unwind one sample of process `pid`: `regs` are the user registers and `stack` the copy of the user stack
    /// starting at `regs.sp`, of which the first `dyn_size` bytes are valid. Pushes the leaf IP and then the raw
    /// return addresses (not adjusted by -1) into `out`, and tells how the unwind ended.
    pub fn unwind(
        &mut self,
        pid: u32,
        regs: &UserRegs,
        stack: &[u8],
        dyn_size: u64,
        out: &mut Vec<u64>,
    ) -> UnwindOutcome {
        let valid_len = (dyn_size as usize).min(stack.len());
        let stack = &stack[..valid_len];
        let stack_start = regs.sp;
        let stack_end = regs.sp.saturating_add(valid_len as u64);
        // Whether the last failed read was past the end of the copy: tells "ran off the copy" from other failures.
        let read_past_end = std::cell::Cell::new(false);
        let mut read_stack = |addr: u64| -> Result<u64, ()> {
            let in_copy = addr
                .checked_sub(stack_start)
                .and_then(|off| usize::try_from(off).ok())
                .and_then(|off| stack.get(off..off.checked_add(8)?));
            match in_copy {
                Some(bytes) => Ok(u64::from_le_bytes(bytes.try_into().map_err(|_| ())?)),
                None => {
                    read_past_end.set(addr >= stack_start && addr.saturating_add(8) > stack_end);
                    Err(())
                }
            }
        };

        let mut uregs = UnwindRegsX86_64::new(regs.ip, regs.sp, regs.bp);
        let mut address = FrameAddress::from_instruction_pointer(regs.ip);
        out.push(regs.ip);
        let mut frames = 1;
        loop {
            if frames >= MAX_FRAMES {
                return UnwindOutcome::Truncated;
            }
            self.ensure_module(pid, address.address_for_lookup());
            // An unknown process has no modules: framehop then only takes frame-pointer steps.
            let unwinder = match self.processes.get(&pid) {
                Some(process) => &process.unwinder,
                None => &self.no_modules,
            };
            let before = uregs;
            let step = unwinder.unwind_frame(address, &mut uregs, &mut self.cache, &mut read_stack);
            match step {
                Ok(Some(0)) | Ok(None) => return UnwindOutcome::Complete,
                Ok(Some(return_address)) => {
                    out.push(return_address);
                    frames += 1;
                    match FrameAddress::from_return_address(return_address) {
                        Some(next) => address = next,
                        None => return UnwindOutcome::Complete,
                    }
                }
                Err(framehop::Error::CouldNotReadStack(addr))
                    if addr >= stack_start && addr.saturating_add(8) > stack_end =>
                {
                    return UnwindOutcome::Truncated
                }
                Err(_) if read_past_end.get() => return UnwindOutcome::Truncated,
                // framehop does not unwind signal frames: a signal handler returns into the rt_sigreturn
                // trampoline, and the interrupted code's registers are in the ucontext on the stack.
                Err(_) if self.is_sigreturn(pid, address.address()) => {
                    let ucontext = before.sp();
                    let greg = |i: u64| ucontext + UC_MCONTEXT + 8 * i;
                    let (Ok(ip), Ok(sp), Ok(bp)) = (
                        read_stack(greg(REG_RIP)),
                        read_stack(greg(REG_RSP)),
                        read_stack(greg(REG_RBP)),
                    ) else {
                        return match greg(REG_RIP + 1) > stack_end {
                            true => UnwindOutcome::Truncated,
                            false => UnwindOutcome::Failed,
                        };
                    };
                    if ip == 0 {
                        return UnwindOutcome::Failed;
                    }
                    out.push(ip);
                    frames += 1;
                    uregs = UnwindRegsX86_64::new(ip, sp, bp);
                    address = FrameAddress::from_instruction_pointer(ip);
                }
                Err(_) => return UnwindOutcome::Failed,
            }
        }
    }

    /// Whether the code at `address` in process `pid` is the x86_64 rt_sigreturn trampoline (glibc's
    /// `__restore_rt`, the vDSO's `__vdso_rt_sigreturn`): a signal handler returns there.
    fn is_sigreturn(&mut self, pid: u32, address: u64) -> bool {
        let Some(process) = self.processes.get(&pid) else {
            return false;
        };
        let Some((&start, mapping)) = process.mappings.range(..=address).next_back() else {
            return false;
        };
        if address >= mapping.end {
            return false;
        }
        let offset = (address - start).wrapping_add(mapping.pgoff);
        let site = (mapping.path.clone(), offset);
        if let Some(&known) = self.sigreturn_sites.get(&site) {
            return known;
        }
        let mut code = [0u8; SIGRETURN_CODE.len()];
        let read = if &*mapping.path == "[vdso]" {
            let vdso = self.vdso.clone().flatten();
            let at = usize::try_from(address - start).ok();
            match (vdso, at) {
                (Some(bytes), Some(at)) => bytes
                    .get(at..at + code.len())
                    .map(|b| code.copy_from_slice(b))
                    .is_some(),
                _ => false,
            }
        } else {
            use std::os::unix::fs::FileExt;
            open_file(pid, &mapping.path)
                .is_ok_and(|(file, _)| file.read_exact_at(&mut code, offset).is_ok())
        };
        let found = read && code == SIGRETURN_CODE;
        if self.sigreturn_sites.len() >= MAX_LAYOUTS {
            self.sigreturn_sites.clear();
        }
        self.sigreturn_sites.insert(site, found);
        found
    }

    /// Make sure the module holding `address` in process `pid` is in that process's framehop unwinder.
    fn ensure_module(&mut self, pid: u32, address: u64) {
        let Some(process) = self.processes.get_mut(&pid) else {
            return;
        };
        let Some((&map_start, mapping)) = process.mappings.range_mut(..=address).next_back() else {
            return;
        };
        if address >= mapping.end {
            return;
        }
        let key = match &mapping.key {
            Some(resolved) => resolved.clone(),
            None => {
                let resolved = resolve_key(
                    &mut self.layouts,
                    &mut self.vdso,
                    pid,
                    map_start,
                    mapping.pgoff,
                    &mapping.path,
                );
                mapping.key = Some(resolved.clone());
                resolved
            }
        };
        let Some(key) = key else {
            return;
        };
        self.tick += 1;
        let tick = self.tick;
        if let Some(cached) = self.modules.get_mut(&key) {
            cached.last_used = tick;
            if let Some(module) = &cached.module {
                if let Entry::Vacant(slot) = process.loaded.entry(key) {
                    slot.insert(module.avma_range().start);
                    process.unwinder.add_module(module.clone());
                }
            }
            return;
        }

        // Not cached: make room, then build it.
        while self.modules.len() >= self.module_cap {
            self.evict_oldest();
        }
        let layout = self.layouts.get(&key.path).cloned().flatten();
        let module = match layout {
            Some(layout) => self.load_module(pid, &key, &layout).ok(),
            None => None,
        };
        let Some(process) = self.processes.get_mut(&pid) else {
            return;
        };
        if let Some(module) = &module {
            process
                .loaded
                .insert(key.clone(), module.avma_range().start);
            process.unwinder.add_module(module.clone());
        }
        self.modules.insert(
            key,
            CachedModule {
                module,
                last_used: tick,
            },
        );
    }

    /// Drop the least recently used module from the cache and from every process.
    fn evict_oldest(&mut self) {
        let Some(oldest) = self
            .modules
            .iter()
            .min_by_key(|(_, m)| m.last_used)
            .map(|(k, _)| k.clone())
        else {
            return;
        };
        self.modules.remove(&oldest);
        for process in self.processes.values_mut() {
            if let Some(avma_start) = process.loaded.remove(&oldest) {
                process.unwinder.remove_module(avma_start);
            }
        }
    }

    /// Read the unwind sections of the file of `key` and build the framehop module at its load bias.
    fn load_module(
        &mut self,
        pid: u32,
        key: &ModuleKey,
        layout: &ElfLayout,
    ) -> Result<Module<Vec<u8>>, ModuleError> {
        let mut info = if &*key.path == "[vdso]" {
            let Some(Some(bytes)) = self.vdso.clone() else {
                return Err(ModuleError::NotAFile(key.path.to_string()));
            };
            let file = object::File::parse(&*bytes).map_err(|source| ModuleError::Parse {
                path: key.path.to_string(),
                source,
            })?;
            section_info(&file)
        } else {
            let (file, shown) = open_file(pid, &key.path)?;
            let cache = ReadCache::new(file);
            let obj = object::File::parse(&cache).map_err(|source| ModuleError::Parse {
                path: shown.clone(),
                source,
            })?;
            let mut info = section_info(&obj);
            if info.debug_frame.is_none() {
                let eh_frame_len = info.eh_frame.as_ref().map_or(0, |d| d.len() as u64);
                let from_debug_file = obj
                    .build_id()
                    .ok()
                    .flatten()
                    .and_then(|id| self.debug_frame_from_debug_file(id, eh_frame_len));
                if let Some(debug_frame) = from_debug_file {
                    use_debug_frame(&mut info, debug_frame);
                }
            }
            info
        };
        info.base_svma = 0;
        let code = layout.code_range();
        let avma_range = code.start.wrapping_add(key.bias)..code.end.wrapping_add(key.bias);
        Ok(Module::new(
            key.path.to_string(),
            avma_range,
            key.bias,
            info,
        ))
    }

    /// The `.debug_frame` of the separate debug file with this build-id, if one of the debug dirs has it and it
    /// is larger than `than` bytes (the size of the `.eh_frame` it would replace).
    fn debug_frame_from_debug_file(&self, build_id: &[u8], than: u64) -> Option<Vec<u8>> {
        for dir in &self.debug_dirs {
            let path = crate::buildid::debug_file_path(dir, build_id)?;
            let Ok(file) = File::open(&path) else {
                continue;
            };
            let cache = ReadCache::new(file);
            let Ok(obj) = object::File::parse(&cache) else {
                continue;
            };
            if section_size(&obj, ".debug_frame") > than {
                return section_bytes(&obj, ".debug_frame");
            }
        }
        None
    }
}

/// Find the module key of a mapping: the file's layout (cached per path) gives the load bias.
fn resolve_key(
    layouts: &mut HashMap<Arc<str>, Option<Arc<ElfLayout>>>,
    vdso: &mut Option<Option<Arc<[u8]>>>,
    pid: u32,
    start: u64,
    pgoff: u64,
    path: &Arc<str>,
) -> Option<ModuleKey> {
    let layout = match layouts.get(path) {
        Some(layout) => layout.clone(),
        None => {
            if layouts.len() >= MAX_LAYOUTS {
                layouts.clear();
            }
            let layout = read_layout(vdso, pid, path).ok().map(Arc::new);
            layouts.insert(path.clone(), layout.clone());
            layout
        }
    };
    let layout = layout?;
    Some(ModuleKey {
        path: path.clone(),
        bias: layout.bias(start, pgoff),
    })
}

fn read_layout(
    vdso: &mut Option<Option<Arc<[u8]>>>,
    pid: u32,
    path: &str,
) -> Result<ElfLayout, ModuleError> {
    if path == "[vdso]" {
        let bytes = vdso
            .get_or_insert_with(|| read_own_vdso().map(Arc::from))
            .clone()
            .ok_or_else(|| ModuleError::NotAFile(path.to_string()))?;
        let obj = object::File::parse(&*bytes).map_err(|source| ModuleError::Parse {
            path: path.to_string(),
            source,
        })?;
        return Ok(ElfLayout::of(&obj));
    }
    let (file, shown) = open_file(pid, path)?;
    let cache = ReadCache::new(file);
    let obj = object::File::parse(&cache).map_err(|source| ModuleError::Parse {
        path: shown,
        source,
    })?;
    Ok(ElfLayout::of(&obj))
}

/// Open a mapped file as the process sees it (through its root: containers), else by its path as is.
fn open_file(pid: u32, path: &str) -> Result<(File, String), ModuleError> {
    if !path.starts_with('/') || path.starts_with("//anon") || path.starts_with("/memfd:") {
        return Err(ModuleError::NotAFile(path.to_string()));
    }
    crate::process::open_target_file(pid, Path::new(path))
        .map(|(file, opened)| (file, opened.display().to_string()))
        .map_err(|source| ModuleError::Open {
            path: path.to_string(),
            source,
        })
}

/// The unwind-related sections of an ELF file, copied out (only CFI is kept in memory, not the whole file).
///
/// framehop uses either `.eh_frame` or `.debug_frame`, never both. Compilers emit one of them per function, so
/// the larger one covers the code that matters: `.eh_frame` normally, `.debug_frame` for code built with
/// `-fno-asynchronous-unwind-tables -g` (where `.eh_frame` only holds the C runtime's few entries).
fn section_info<'data, R: ReadRef<'data>>(
    obj: &object::File<'data, R>,
) -> ExplicitModuleSectionInfo<Vec<u8>> {
    let range = |name: &str| {
        obj.section_by_name(name)
            .map(|s| s.address()..s.address() + s.size())
    };
    let mut info = ExplicitModuleSectionInfo {
        base_svma: 0,
        text_svma: range(".text"),
        got_svma: range(".got"),
        eh_frame_svma: range(".eh_frame"),
        eh_frame_hdr_svma: range(".eh_frame_hdr"),
        ..Default::default()
    };
    if section_size(obj, ".debug_frame") > section_size(obj, ".eh_frame") {
        if let Some(debug_frame) = section_bytes(obj, ".debug_frame") {
            use_debug_frame(&mut info, debug_frame);
            return info;
        }
    }
    info.eh_frame = section_bytes(obj, ".eh_frame");
    if info.eh_frame.is_some() {
        info.eh_frame_hdr = section_bytes(obj, ".eh_frame_hdr");
    }
    info
}

/// Unwind with `.debug_frame` only (framehop would ignore it next to an `.eh_frame`).
fn use_debug_frame(info: &mut ExplicitModuleSectionInfo<Vec<u8>>, debug_frame: Vec<u8>) {
    info.eh_frame = None;
    info.eh_frame_hdr = None;
    info.debug_frame = Some(debug_frame);
}

/// The uncompressed size of a section (0 if absent).
fn section_size<'data, R: ReadRef<'data>>(obj: &object::File<'data, R>, name: &str) -> u64 {
    obj.section_by_name(name)
        .and_then(|s| s.compressed_data().ok())
        .map_or(0, |c| c.uncompressed_size)
}

/// The (uncompressed) bytes of a section, if present and not empty.
fn section_bytes<'data, R: ReadRef<'data>>(
    obj: &object::File<'data, R>,
    name: &str,
) -> Option<Vec<u8>> {
    let section = obj.section_by_name(name)?;
    let data = section.uncompressed_data().ok()?;
    if data.is_empty() {
        None
    } else {
        Some(data.into_owned())
    }
}

/// Copy this process's vDSO image out of `/proc/self/mem` (found through `/proc/self/maps`).
fn read_own_vdso() -> Option<Vec<u8>> {
    crate::buildid::running_vdso_image()
}

/// How DWARF unwinds ended.
#[derive(Clone, Copy, Debug, Default)]
pub struct DwarfStats {
    /// Samples with user registers and a stack copy.
    pub unwound: u64,
    /// Unwinds that ran off the end of the stack copy.
    pub truncated: u64,
    /// Unwinds that stopped at a frame without unwind information.
    pub failed: u64,
    /// The stack copy size asked for.
    pub copy_size: u64,
}

impl DwarfStats {
    /// Count one unwind of a stack copy of `copy` bytes.
    pub fn count(&mut self, outcome: UnwindOutcome, copy: u64) {
        self.unwound += 1;
        self.copy_size = self.copy_size.max(copy);
        match outcome {
            UnwindOutcome::Complete => {}
            UnwindOutcome::Truncated => self.truncated += 1,
            UnwindOutcome::Failed => self.failed += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spans(unwinder: &DwarfUnwinder, pid: u32) -> Vec<(u64, u64, u64, String)> {
        unwinder.processes[&pid]
            .mappings
            .iter()
            .map(|(s, m)| (*s, m.end, m.pgoff, m.path.to_string()))
            .collect()
    }

    /// Check that a new mapping trims the ones it overlaps (keeping head and tail with the right file offset),
    /// that fork copies the mappings and that exit forgets them.
    #[test]
    fn mappings_overlap_fork_exit() {
        let mut u = DwarfUnwinder::new(vec![]);
        u.add_mapping(7, 0x1000, 0x4000, 0, "/a");
        u.add_mapping(7, 0x2000, 0x1000, 0x10000, "/b");
        u.add_mapping(7, 0x8000, 0x1000, 0, "/c");
        let want = vec![
            (0x1000, 0x2000, 0, "/a".to_string()),
            (0x2000, 0x3000, 0x10000, "/b".to_string()),
            (0x3000, 0x5000, 0x2000, "/a".to_string()),
            (0x8000, 0x9000, 0, "/c".to_string()),
        ];
        assert_eq!(spans(&u, 7), want);
        // Covering several mappings at once removes them.
        u.fork(7, 8);
        u.add_mapping(8, 0x1800, 0x7000, 0, "/d");
        assert_eq!(
            spans(&u, 8),
            vec![
                (0x1000, 0x1800, 0, "/a".to_string()),
                (0x1800, 0x8800, 0, "/d".to_string()),
                (0x8800, 0x9000, 0x800, "/c".to_string()),
            ]
        );
        assert_eq!(spans(&u, 7), want);
        u.exit(7);
        assert!(!u.processes.contains_key(&7));
        // Unwinding an unknown process falls back to frame pointers and does not create it.
        let mut out = Vec::new();
        let stack = [0u8; 16];
        let outcome = u.unwind(
            99,
            &UserRegs {
                ip: 0x1234,
                sp: 0x1000,
                bp: 0,
            },
            &stack,
            16,
            &mut out,
        );
        assert_eq!(out, vec![0x1234]);
        assert_eq!(outcome, UnwindOutcome::Complete);
        assert!(!u.processes.contains_key(&99));
    }
}
