//! Symbolization: kernel addresses through kallsyms, user addresses through ELF symbols and DWARF (with inlined
//! frames), separate debug files (build-id, .gnu_debuglink), /tmp/perf-PID.map for JITs, and demangling.
//!
//! OWNER: symbols helper. Interface contract used by `report`:
//! - [`Symbolizer::new`] with [`SymbolizerOptions`].
//! - [`Symbolizer::kernel`] resolves a kernel address.
//! - [`Symbolizer::user`] resolves an offset into a mapped file to frames (outermost first, inlined frames after
//!   the function they were inlined into). Unknown gives an empty slice, never a wrong name.
//! - [`Symbolizer::jit`] resolves an address through /tmp/perf-PID.map.
//!   Each (binary, offset) is resolved once and cached.
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
    pub name: String,
    /// `file:line` when [`SymbolizerOptions::lines`] is set and DWARF has it.
    pub location: Option<String>,
    /// True when this frame was inlined into the frame before it.
    pub inlined: bool,
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
use std::path::Path;
use std::sync::Arc;

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

/// A PT_LOAD segment.
#[derive(Clone, Copy, Debug)]
pub struct LoadSegment {
    pub vaddr: u64,
    pub offset: u64,
    pub filesz: u64,
    pub memsz: u64,
    pub executable: bool,
}

/// What the probe and unwind stages need to know about an ELF file.
#[derive(Clone, Debug)]
pub struct ElfInfo {
    pub build_id: Option<Vec<u8>>,
    pub segments: Vec<LoadSegment>,
    /// A Go binary (has `.go.buildinfo`): uretprobes crash it.
    pub is_go: bool,
}

impl ElfInfo {
    /// Uprobe offset of an ELF address: addr - segment vaddr + segment file offset.
    pub fn file_offset(&self, addr: ElfAddr) -> Option<FileOffset> {
        self.segments
            .iter()
            .find(|s| addr.0 >= s.vaddr && addr.0 < s.vaddr + s.memsz.max(s.filesz))
            .map(|s| FileOffset(addr.0 - s.vaddr + s.offset))
    }

    /// The ELF address at a file offset (inverse of [`ElfInfo::file_offset`]).
    pub fn elf_addr(&self, offset: FileOffset) -> Option<ElfAddr> {
        self.segments
            .iter()
            .find(|s| offset.0 >= s.offset && offset.0 < s.offset + s.filesz)
            .map(|s| ElfAddr(offset.0 - s.offset + s.vaddr))
    }
}

/// Read an ELF file's build id, PT_LOAD segments and Go marker.
pub fn elf_info(_path: &Path) -> Result<ElfInfo, SymbolError> {
    unimplemented!("symbols helper")
}

/// All function symbols of `path` (its own tables, else those of its separate debug file), aliases included.
pub fn function_symbols(
    _path: &Path,
    _debug_dirs: &[PathBuf],
) -> Result<Vec<FunctionSymbol>, SymbolError> {
    unimplemented!("symbols helper")
}

/// Resolves addresses to names, caching each (binary, address) once.
pub struct Symbolizer {
    _opts: SymbolizerOptions,
}

impl Symbolizer {
    pub fn new(opts: SymbolizerOptions) -> Symbolizer {
        Symbolizer { _opts: opts }
    }

    /// A kernel address through /proc/kallsyms (None when unknown or kallsyms is hidden).
    pub fn kernel(&mut self, _addr: u64) -> Option<Arc<str>> {
        None
    }

    /// An offset into a mapped file: frames outermost first; empty when unknown.
    pub fn user(&mut self, _module: &ModuleKey, _offset: FileOffset) -> Arc<[Frame]> {
        Arc::from(Vec::new())
    }

    /// A JIT address through /tmp/perf-PID.map.
    pub fn jit(&mut self, _pid: u32, _addr: RuntimeAddr) -> Option<Arc<str>> {
        None
    }
}
