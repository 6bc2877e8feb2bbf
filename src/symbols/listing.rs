//! What `probe` and the unwinder ask of one ELF file: its build id, load layout and Go marker
//! ([`elf_info`]), and every function symbol ([`function_symbols`]).
use super::binary;
use super::demangle;
use super::elf;
use super::{DebugSources, SymbolError};
use crate::addr::ElfAddr;
use crate::elf_layout::ElfLayout;
use std::path::Path;

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
/// build id or `.gnu_debuglink` under the debug directories, else fetched from debuginfod) is added.
pub fn function_symbols(
    path: &Path,
    sources: &DebugSources,
) -> Result<Vec<FunctionSymbol>, SymbolError> {
    let loaded = binary::load(path, path, None, sources)?;
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
