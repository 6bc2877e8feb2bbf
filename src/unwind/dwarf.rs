//! DWARF unwinding of user stacks captured with PERF_SAMPLE_REGS_USER + PERF_SAMPLE_STACK_USER: the unwind loop
//! and the per-process framehop state.
//!
//! The mappings come from the one address-space model ([`crate::process::AddressSpace`]), which the caller feeds
//! with every user mapping, live and offline alike. The unwinder keeps, per process, one framehop unwinder
//! holding the modules it needed so far. Unwinding goes frame by frame; before each step the module (ELF file +
//! load bias) that holds the current address is loaded lazily into the process's unwinder. Modules are shared
//! between processes through a cache keyed by (path, load bias) and capped in size; when the cap is reached the
//! least recently used module is dropped from the cache and from every process. When a process's address space
//! changes (its generation), the modules whose mapping is gone are removed from its unwinder first.
//! Unwind data comes from `.eh_frame` + `.eh_frame_hdr`, or a larger `.debug_frame` (see [`super::modules`]).
//! Addresses without a module or without CFI are unwound by framehop with a frame-pointer step.
//! Modules are read on a loader thread ([`super::loader`]): a read that stalls cuts a stack short at that
//! module for a while instead of stopping the recording.

use std::cell::Cell;
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{FrameAddress, Module, Unwinder};

use super::loader::{self, Loader};
use super::modules::{self, ModuleKey};
use super::signal::{self, SigreturnSites};
pub use super::stats::{DwarfStats, UnwindOutcome};
use crate::elf_layout::ElfLayout;
use crate::process::{AddressSpace, Mapping};

pub use crate::regs::UserRegs;

/// The callchain marker before the user part of a sample's callchain.
const PERF_CONTEXT_USER: u64 = perf_event_open_sys::bindings::PERF_CONTEXT_USER;

/// Most frames one unwind produces (the leaf IP included); deeper stacks end as [`UnwindOutcome::Truncated`].
pub const MAX_FRAMES: usize = 256;

/// Default cap on the number of modules kept in the cache (see [`DwarfUnwinder::with_module_cap`]).
pub const DEFAULT_MODULE_CAP: usize = 256;

/// A sample's copy of its user stack, which starts at the stack pointer.
struct StackCopy<'a> {
    start: u64,
    bytes: &'a [u8],
    /// Whether the last failed read was past the end of the copy: tells "ran off the copy" from other failures.
    read_past_end: Cell<bool>,
    /// How many bytes from the start the reads reached.
    used: Cell<u64>,
}

impl StackCopy<'_> {
    /// The 8 bytes at `addr`.
    fn read(&self, addr: u64) -> Result<u64, ()> {
        let in_copy = addr
            .checked_sub(self.start)
            .and_then(|off| usize::try_from(off).ok())
            .and_then(|off| Some((off, self.bytes.get(off..off.checked_add(8)?)?)));
        match in_copy {
            Some((off, bytes)) => {
                self.used.set(self.used.get().max(off as u64 + 8));
                Ok(u64::from_le_bytes(bytes.try_into().map_err(|_| ())?))
            }
            None => {
                self.read_past_end.set(self.past_end(addr));
                Err(())
            }
        }
    }

    /// Whether reading 8 bytes at `addr` runs past the end of the copy (the stack goes on beyond it).
    fn past_end(&self, addr: u64) -> bool {
        addr >= self.start && addr.saturating_add(8) > self.start + self.bytes.len() as u64
    }
}

/// One process: the framehop unwinder holding the modules it needed so far.
struct ProcessModules {
    unwinder: UnwinderX86_64<Vec<u8>>,
    /// Modules added to `unwinder`, with the start of their address range (framehop's removal key).
    loaded: HashMap<ModuleKey, u64>,
    /// The module of each mapping (by start) looked up so far; `None`: not a readable ELF file.
    keys: HashMap<u64, Option<ModuleKey>>,
    /// The address-space generation `loaded` and `keys` were checked against.
    generation: u64,
}

struct CachedModule {
    /// `None` when the file could not be read: remembered so it is not retried on every frame.
    module: Option<Module<Vec<u8>>>,
    last_used: u64,
}

/// Online DWARF unwinder for the user stacks of sampled processes (x86_64).
pub struct DwarfUnwinder {
    loader: Loader,
    /// Frames whose module was still loading (the unwind went on without it).
    cut_while_loading: u64,
    /// How long an unwind waits for a module being loaded: [`loader::LOAD_WAIT`] while recording, None (until
    /// it is loaded) when reading a recording.
    load_wait: Option<std::time::Duration>,
    module_cap: usize,
    processes: HashMap<u32, ProcessModules>,
    modules: HashMap<ModuleKey, CachedModule>,
    layouts: HashMap<Arc<str>, Option<Arc<ElfLayout>>>,
    /// The vDSO of this process, which is the same image as every other 64-bit process's on this kernel.
    vdso: Option<Option<Arc<[u8]>>>,
    cache: CacheX86_64,
    sigreturn: SigreturnSites,
    /// The unwinder used for processes without any known mapping.
    no_modules: UnwinderX86_64<Vec<u8>>,
    tick: u64,
    /// See [`DwarfUnwinder::last_stack_used`].
    last_used: u64,
}

impl DwarfUnwinder {
    /// Create an unwinder for a recording's reader (`report`, `script`): an unwind waits for the modules it
    /// needs however long they take to load. `debug_dirs` are searched for separate debug files
    /// (`DIR/.build-id/xx/rest.debug`).
    pub fn new(debug_dirs: Vec<PathBuf>) -> DwarfUnwinder {
        DwarfUnwinder::with_module_cap(debug_dirs, DEFAULT_MODULE_CAP)
    }

    /// Create an unwinder for the recorder, which drains the rings on the same thread: an unwind waits for a
    /// module at most [`loader::LOAD_WAIT`], then goes on without it (counted in
    /// [`DwarfUnwinder::cut_while_loading`]).
    pub fn live(debug_dirs: Vec<PathBuf>) -> DwarfUnwinder {
        DwarfUnwinder {
            load_wait: Some(loader::LOAD_WAIT),
            ..DwarfUnwinder::new(debug_dirs)
        }
    }

    /// Create an unwinder that keeps at most `module_cap` modules (at least 1) in its cache.
    pub fn with_module_cap(debug_dirs: Vec<PathBuf>, module_cap: usize) -> DwarfUnwinder {
        DwarfUnwinder {
            loader: Loader::new(debug_dirs),
            cut_while_loading: 0,
            load_wait: None,
            module_cap: module_cap.max(1),
            processes: HashMap::new(),
            modules: HashMap::new(),
            layouts: HashMap::new(),
            vdso: None,
            cache: CacheX86_64::new(),
            sigreturn: SigreturnSites::default(),
            no_modules: UnwinderX86_64::new(),
            tick: 0,
            last_used: 0,
        }
    }

    /// Number of modules currently in the cache (never more than the cap).
    pub fn cached_modules(&self) -> usize {
        self.modules.len()
    }

    /// How many frames were unwound without their module because it was still loading (a slow file read).
    pub fn cut_while_loading(&self) -> u64 {
        self.cut_while_loading
    }

    /// Forget the framehop state of process `pid` (it ended); the module cache keeps its modules.
    pub fn forget(&mut self, pid: u32) {
        self.processes.remove(&pid);
    }

    /// [`DwarfUnwinder::unwind`] into a sample's callchain: the unwound frames become its user part
    /// (PERF_CONTEXT_USER, then the leaf IP and the return addresses), replacing any user part it had; the
    /// kernel part stays.
    pub fn unwind_callchain(
        &mut self,
        pid: u32,
        space: Option<&AddressSpace>,
        regs: &UserRegs,
        stack: &[u8],
        dyn_size: u64,
        callchain: &mut Vec<u64>,
    ) -> UnwindOutcome {
        if let Some(at) = callchain.iter().position(|&a| a == PERF_CONTEXT_USER) {
            callchain.truncate(at);
        }
        callchain.push(PERF_CONTEXT_USER);
        self.unwind(pid, space, regs, stack, dyn_size, callchain)
    }

    /// Unwind one sample of process `pid`, whose mappings are `space` (None: unknown, frame pointers only):
    /// `regs` are the user registers and `stack` the copy of the user stack starting at `regs.sp`, of which the
    /// first `dyn_size` bytes are valid. Pushes the leaf IP and then the raw return addresses (not adjusted by
    /// -1) into `out`, and tells how the unwind ended.
    ///
    /// A signal frame is pushed as PERF_CONTEXT_USER, the trampoline's address, PERF_CONTEXT_USER, the
    /// interrupted IP: neither is a return address (the handler "returns" to the trampoline's first byte, and the
    /// interrupted instruction had not run), and a resolver looks up the address after PERF_CONTEXT_USER exactly.
    pub fn unwind(
        &mut self,
        pid: u32,
        space: Option<&AddressSpace>,
        regs: &UserRegs,
        stack: &[u8],
        dyn_size: u64,
        out: &mut Vec<u64>,
    ) -> UnwindOutcome {
        if let Some(space) = space {
            self.sync_process(pid, space);
        }
        let valid_len = (dyn_size as usize).min(stack.len());
        let copy = StackCopy {
            start: regs.sp,
            bytes: &stack[..valid_len],
            read_past_end: Cell::new(false),
            used: Cell::new(0),
        };
        let outcome = self.walk(pid, space, regs, &copy, out);
        self.last_used = copy.used.get();
        outcome
    }

    /// How many bytes of its stack copy the last unwind read (from the stack pointer up): for a complete
    /// unwind, about how deep the stack was.
    pub fn last_stack_used(&self) -> u64 {
        self.last_used
    }

    /// The frame-by-frame loop of [`DwarfUnwinder::unwind`].
    fn walk(
        &mut self,
        pid: u32,
        space: Option<&AddressSpace>,
        regs: &UserRegs,
        copy: &StackCopy<'_>,
        out: &mut Vec<u64>,
    ) -> UnwindOutcome {
        let mut read_stack = |addr: u64| copy.read(addr);
        let mut uregs = UnwindRegsX86_64::new(regs.ip, regs.sp, regs.bp);
        let mut address = FrameAddress::from_instruction_pointer(regs.ip);
        out.push(regs.ip);
        let mut frames = 1;
        loop {
            if frames >= MAX_FRAMES {
                return UnwindOutcome::Truncated;
            }
            if let Some(space) = space {
                self.ensure_module(pid, space, address.address_for_lookup());
            }
            // An unknown process has no modules: framehop then only takes frame-pointer steps.
            let unwinder = match self.processes.get(&pid).filter(|_| space.is_some()) {
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
                Err(framehop::Error::CouldNotReadStack(addr)) if copy.past_end(addr) => {
                    return UnwindOutcome::Truncated
                }
                Err(_) if copy.read_past_end.get() => return UnwindOutcome::Truncated,
                // framehop does not unwind signal frames: a signal handler returns into the rt_sigreturn
                // trampoline, and the interrupted code's registers are in the ucontext on the stack.
                Err(_) if self.is_sigreturn(pid, space, address.address()) => {
                    let [rip, rsp, rbp] = signal::saved_regs(before.sp());
                    let (Ok(ip), Ok(sp), Ok(bp)) = (copy.read(rip), copy.read(rsp), copy.read(rbp))
                    else {
                        return match copy.past_end(rip) {
                            true => UnwindOutcome::Truncated,
                            false => UnwindOutcome::Failed,
                        };
                    };
                    if ip == 0 {
                        return UnwindOutcome::Failed;
                    }
                    // The trampoline's address and the interrupted IP are both looked up exactly.
                    if frames > 1 {
                        if let Some(trampoline) = out.pop() {
                            out.extend([PERF_CONTEXT_USER, trampoline]);
                        }
                    }
                    out.extend([PERF_CONTEXT_USER, ip]);
                    frames += 1;
                    uregs = UnwindRegsX86_64::new(ip, sp, bp);
                    address = FrameAddress::from_instruction_pointer(ip);
                }
                Err(_) => return UnwindOutcome::Failed,
            }
        }
    }

    /// Whether the code at `address` of process `pid` is the rt_sigreturn trampoline.
    fn is_sigreturn(&mut self, pid: u32, space: Option<&AddressSpace>, address: u64) -> bool {
        let Some(mapping) = space.and_then(|s| s.find(address)) else {
            return false;
        };
        let vdso = self.vdso.clone().flatten();
        self.sigreturn
            .is_sigreturn(pid, mapping, address, vdso.as_deref())
    }

    /// Bring the framehop state of `pid` up to date with its address space: when the space changed, the modules
    /// whose mapping is gone (unmapped, replaced, or a new program after exec) leave the process's unwinder.
    fn sync_process(&mut self, pid: u32, space: &AddressSpace) {
        let process = self.processes.entry(pid).or_insert_with(|| ProcessModules {
            unwinder: UnwinderX86_64::new(),
            loaded: HashMap::new(),
            keys: HashMap::new(),
            generation: space.generation(),
        });
        if process.generation == space.generation() {
            return;
        }
        process.generation = space.generation();
        process.keys.clear();
        let (layouts, vdso) = (&mut self.layouts, &mut self.vdso);
        let gone: Vec<(ModuleKey, u64)> = process
            .loaded
            .iter()
            .filter(|(key, &avma_start)| {
                let still = space
                    .find(avma_start)
                    .filter(|m| m.path == key.path)
                    .and_then(|m| {
                        modules::resolve_key(layouts, vdso, pid, m.start, m.pgoff, &m.path)
                    });
                still.as_ref() != Some(*key)
            })
            .map(|(key, &start)| (key.clone(), start))
            .collect();
        for (key, avma_start) in gone {
            process.loaded.remove(&key);
            process.unwinder.remove_module(avma_start);
        }
    }

    /// The module key of `mapping` in process `pid` (cached per mapping start until the space changes).
    fn module_key(&mut self, pid: u32, mapping: &Mapping) -> Option<ModuleKey> {
        let process = self.processes.get_mut(&pid)?;
        if let Some(key) = process.keys.get(&mapping.start) {
            return key.clone();
        }
        let key = modules::resolve_key(
            &mut self.layouts,
            &mut self.vdso,
            pid,
            mapping.start,
            mapping.pgoff,
            &mapping.path,
        );
        process.keys.insert(mapping.start, key.clone());
        key
    }

    /// Make sure the module holding `address` in process `pid` is in that process's framehop unwinder (unless
    /// it is still loading).
    fn ensure_module(&mut self, pid: u32, space: &AddressSpace, address: u64) {
        let Some(mapping) = space.find(address) else {
            return;
        };
        if !self.ready(pid, mapping) {
            self.cut_while_loading += 1;
            return;
        }
        let Some(key) = self.module_key(pid, mapping) else {
            return;
        };
        let Some(process) = self.processes.get_mut(&pid) else {
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
        }
    }

    /// Whether the module of `mapping` is known (loaded, or known not to load); else it is asked of the
    /// loader and waited for (while recording at most [`loader::LOAD_WAIT`]), and false while it is still
    /// loading.
    fn ready(&mut self, pid: u32, mapping: &Mapping) -> bool {
        // The common case, every frame: the mapping's module is known.
        let known = self
            .processes
            .get(&pid)
            .and_then(|p| p.keys.get(&mapping.start));
        match known {
            Some(None) => return true,
            Some(Some(key)) if self.modules.contains_key(key) => return true,
            _ => {}
        }
        if self.loader.pending(&mapping.path) {
            // Requested by an earlier unwind that went on without it (recording only).
            self.take_loaded(Some(&mapping.path), self.load_wait.map(|_| Duration::ZERO));
            return !self.loader.pending(&mapping.path);
        }
        self.take_loaded(None, Some(Duration::ZERO));
        let layout = match self.layouts.get(&mapping.path) {
            Some(None) => return true,
            Some(Some(layout)) => {
                let key = ModuleKey {
                    path: mapping.path.clone(),
                    bias: layout.bias(mapping.start, mapping.pgoff),
                };
                if self.modules.contains_key(&key) {
                    return true;
                }
                Some(layout.clone())
            }
            None => None,
        };
        let vdso = match &*mapping.path {
            "[vdso]" => self
                .vdso
                .get_or_insert_with(|| modules::read_own_vdso().map(Arc::from))
                .clone(),
            _ => None,
        };
        // While recording, behind a load that already stalls, a new one would wait too: the unwind goes on at
        // once.
        let wait = match self.loader.busy() {
            true => self.load_wait.map(|_| Duration::ZERO),
            false => self.load_wait,
        };
        self.loader.request(loader::Request {
            pid,
            path: mapping.path.clone(),
            start: mapping.start,
            pgoff: mapping.pgoff,
            layout,
            vdso,
        });
        self.take_loaded(Some(&mapping.path), wait);
        !self.loader.pending(&mapping.path)
    }

    /// Put the loads that finished into the layout and module caches (waiting up to `wait` for `path`'s; None:
    /// until it is loaded).
    fn take_loaded(&mut self, path: Option<&str>, wait: Option<Duration>) {
        for loaded in self.loader.collect(path, wait) {
            if self.layouts.len() >= modules::MAX_LAYOUTS {
                self.layouts.clear();
            }
            self.layouts.insert(loaded.path, loaded.layout);
            let Some((key, module)) = loaded.module else {
                continue;
            };
            while self.modules.len() >= self.module_cap {
                self.evict_oldest();
            }
            self.tick += 1;
            let cached = CachedModule {
                module,
                last_used: self.tick,
            };
            self.modules.insert(key, cached);
        }
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::{AddressSpaces, TaskEvent};

    fn map(spaces: &mut AddressSpaces, pid: u32, start: u64, path: &str) {
        spaces.apply(TaskEvent::Mmap {
            pid,
            mapping: Mapping {
                start,
                end: start + 0x10_0000,
                pgoff: 0,
                path: Arc::from(path),
                file: None,
                build_id: None,
                prot: 5,
            },
        });
    }

    /// Check that an unknown process unwinds with frame pointers only and gets no state, and that a module
    /// leaves a process's unwinder when another file is mapped over it (dlclose + dlopen at one address).
    #[test]
    fn modules_follow_the_address_space() {
        let mut u = DwarfUnwinder::new(vec![]);
        let regs = UserRegs {
            ip: 0x1234,
            sp: 0x1000,
            bp: 0,
        };
        let mut out = Vec::new();
        let outcome = u.unwind(99, None, &regs, &[0u8; 16], 16, &mut out);
        assert_eq!((out, outcome), (vec![0x1234], UnwindOutcome::Complete));
        assert!(!u.processes.contains_key(&99));

        // This test's own executable stands for a library (it is an ELF file with CFI).
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let exe = exe.to_str().unwrap();
        let mut spaces = AddressSpaces::new();
        map(&mut spaces, 7, 0x7f00_0000_0000, exe);
        let space = spaces.get(7);
        let regs = UserRegs {
            ip: 0x7f00_0000_0000 + 0x2000,
            ..regs
        };
        u.unwind(7, space, &regs, &[0u8; 16], 16, &mut Vec::new());
        assert_eq!(u.processes[&7].loaded.len(), 1, "the module is loaded");
        map(&mut spaces, 7, 0x7f00_0000_0000, "/nonexistent/other.so");
        u.unwind(7, spaces.get(7), &regs, &[0u8; 16], 16, &mut Vec::new());
        assert!(
            u.processes[&7].loaded.is_empty(),
            "the replaced module is gone"
        );
        assert_eq!(
            u.cached_modules(),
            1,
            "the cache keeps it for other processes"
        );
    }

    /// Check that a recording's reader waits for a module however long its file takes to read (a report under
    /// load cut every stack at the first frame: 0% of 450 samples reached main), and that the recorder waits at
    /// most LOAD_WAIT. A FIFO stands for a file on a stalled disk: opening it blocks until its writer comes,
    /// 300 ms later (6x LOAD_WAIT).
    #[test]
    fn a_reader_waits_for_a_slow_module_and_the_recorder_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("slow.so");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let path = fifo.to_str().unwrap();
        for (mut u, waits) in [
            (DwarfUnwinder::live(vec![]), false),
            (DwarfUnwinder::new(vec![]), true),
        ] {
            let writer = {
                let fifo = fifo.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(300));
                    // Opening waits for the loader's open; the write may then fail (EPIPE) when the loader
                    // already gave up on the file (a FIFO cannot be read at an offset) and closed it.
                    let _ = std::fs::write(fifo, b"not an ELF file");
                })
            };
            let mut spaces = AddressSpaces::new();
            map(&mut spaces, 7, 0x7f00_0000_0000, path);
            let regs = UserRegs {
                ip: 0x7f00_0000_2000,
                sp: 0x1000,
                bp: 0,
            };
            u.unwind(7, spaces.get(7), &regs, &[0u8; 16], 16, &mut Vec::new());
            assert_eq!(
                u.cut_while_loading() == 0,
                waits,
                "cut while loading: {}",
                u.cut_while_loading()
            );
            writer.join().unwrap();
        }
    }
}
