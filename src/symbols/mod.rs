//! Symbolization: kernel addresses through kallsyms, user addresses through ELF symbols and DWARF (with inlined
//! frames), separate debug files (build-id, .gnu_debuglink), /tmp/perf-PID.map for JITs, and demangling.
//!
//! Split by job:
//! - [`Symbolizer`] (`symbolizer.rs`) resolves kernel addresses, offsets into mapped files (frames outermost
//!   first, inlined frames after the function they were inlined into, or why there is no name: never a wrong
//!   one) and JIT addresses, each (binary, address) once; binaries are opened on a [`pool`] of threads and kept
//!   in one [`cache`] keyed by file identity.
//! - `binary.rs` prepares one binary (symbol table, DWARF, debug file), `elf.rs` reads ELF symbols, `dwarf/`
//!   looks inlined frames and lines up with gimli, `debugfile.rs` finds separate debug files.
//! - `kernel.rs` / `kallsyms.rs` name kernel addresses, `vdso.rs` finds the recorded vDSO image, `perfmap.rs`
//!   reads JIT maps.
//! - `listing.rs` lists a binary's functions for `probe` ([`function_symbols`], [`elf_info`]); `params` reads
//!   function parameters from DWARF.
mod binary;
pub mod btf;
mod cache;
mod code;
mod debugfile;
pub mod debuginfod;
mod demangle;
mod dies;
mod dwarf;
mod elf;
mod fde;
pub mod ifunc;
mod kallsyms;
mod kernel;
mod kernel_runtime;
mod listing;
pub mod params;
mod perfmap;
mod pool;
mod symbolizer;
mod unnamed;
mod vdso;

pub use code::function_code;
pub use demangle::demangle;
pub use dwarf::inflated::InflatedCache;
pub use kallsyms::{parse_kallsyms, KernelSymbols, Marks};
pub use kernel::KernelRef;
pub use listing::{elf_info, function_symbols, ElfInfo, FunctionSymbol};
pub use perfmap::{parse_perf_map, PerfMap};
pub use symbolizer::{OpenGate, Symbolizer};
pub use unnamed::{Symbolized, Unknown, Unnamed};
// The build-id facts live in `crate::buildid`; re-exported for the users of `symbols`.
pub use crate::buildid::{
    buildid_dir, cached_kallsyms_path, cached_vdso_path, running_build_id, running_text,
    running_vdso, VDSO,
};

use crate::addr::ElfAddr;
use debuginfod::Debuginfod;
use std::path::PathBuf;
use std::sync::Arc;

/// Where separate debug files (and binaries gone from disk) are looked for.
#[derive(Clone, Debug)]
pub struct DebugSources {
    /// Roots searched for separate debug files (`ROOT/.build-id/xx/rest.debug`, `ROOT/<dir>/<debuglink>`).
    /// Default: `/usr/lib/debug`.
    pub dirs: Vec<PathBuf>,
    /// debuginfod servers, asked for what the local files do not have (None: local files only).
    pub debuginfod: Option<Arc<Debuginfod>>,
    /// Keep compressed debug sections inflated on disk here, per build id (None: inflate at each load).
    pub inflated: Option<InflatedCache>,
}

impl DebugSources {
    /// No separate debug files (an image read from memory, a cached copy).
    pub fn none() -> DebugSources {
        DebugSources::local(Vec::new())
    }

    /// Local files only, under `dirs`.
    pub fn local(dirs: Vec<PathBuf>) -> DebugSources {
        DebugSources {
            dirs,
            debuginfod: None,
            inflated: None,
        }
    }

    /// The debug file a server has for `build_id`, when debuginfod is on.
    pub(crate) fn fetch_debuginfo(&self, build_id: Option<&[u8]>) -> Option<PathBuf> {
        self.debuginfod.as_ref()?.debuginfo(build_id?)
    }
}

impl Default for DebugSources {
    fn default() -> Self {
        DebugSources {
            dirs: vec![PathBuf::from("/usr/lib/debug")],
            debuginfod: None,
            inflated: None,
        }
    }
}

/// Options for symbolization.
#[derive(Clone, Debug)]
pub struct SymbolizerOptions {
    /// Where separate debug files come from.
    pub debug: DebugSources,
    /// Show inlined functions as frames of their own (DWARF).
    pub inlines: bool,
    /// Fill [`Frame::source`] with the source file and line.
    pub lines: bool,
    /// Demangle Rust and C++ names.
    pub demangle: bool,
}

impl Default for SymbolizerOptions {
    fn default() -> Self {
        SymbolizerOptions {
            debug: DebugSources::default(),
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
    /// True when this frame was inlined into the frame before it.
    pub inlined: bool,
    /// The name as the binary stores it (mangled), when it differs from `name`.
    pub raw_name: Option<String>,
    /// The outermost frame only: how far the address lies past the start of its function symbol (what perf
    /// prints as `name+0xOFF`); None for inlined frames and names from DWARF alone.
    pub offset: Option<u64>,
    /// The source file (as DWARF names it, joined with the compilation directory) and line of this frame (for
    /// outer frames: the call site of the next one), when [`SymbolizerOptions::lines`] is set and DWARF has it.
    pub source: Option<SourceLine>,
}

/// A source line as DWARF names it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SourceLine {
    pub file: String,
    /// The line, 1-based; 0 when DWARF names the file alone.
    pub line: u32,
}

impl std::fmt::Display for SourceLine {
    /// `file:line`, or the file alone without a line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            0 => write!(f, "{}", self.file),
            line => write!(f, "{}:{line}", self.file),
        }
    }
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
    #[error("{path} has no symbol table and no debug file was found (looked in {searched}); install its debug symbols, or set DEBUGINFOD_URLS")]
    NoSymbols { path: PathBuf, searched: String },
}

#[cfg(test)]
mod tests {
    /// Check that a symbolizer can move to another thread (for a parallel report).
    #[test]
    fn symbolizer_is_send() {
        fn is_send<T: Send>() {}
        is_send::<super::Symbolizer>();
    }

    /// Check that a source line prints as `file:line`, and as the file alone without a line.
    #[test]
    fn source_line_display() {
        let at = |line| super::SourceLine {
            file: "/src/a.c".into(),
            line,
        };
        assert_eq!(at(12).to_string(), "/src/a.c:12");
        assert_eq!(at(0).to_string(), "/src/a.c");
    }
}
