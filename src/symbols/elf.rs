//! ELF files: build id, PT_LOAD segments, Go marker, and function symbols (.symtab, .dynsym).
use super::{ElfInfo, LoadSegment, SymbolError};
use object::{
    Object, ObjectSection, ObjectSegment, ObjectSymbol, SegmentFlags, SymbolKind, SymbolSection,
};
use std::path::Path;

/// An ELF file read into memory.
///
/// The whole file is read (no mmap: the library keeps `unsafe` in `src/perf/` only); the symbol tables are
/// extracted from it, and DWARF shares it.
pub(crate) struct ElfData {
    pub data: std::sync::Arc<[u8]>,
}

impl ElfData {
    /// Read `path`; [`SymbolError::Io`] when it cannot be read.
    pub fn read(path: &Path) -> Result<ElfData, SymbolError> {
        let data = std::fs::read(path).map_err(|source| SymbolError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(ElfData {
            data: std::sync::Arc::from(data),
        })
    }

    /// Parse it as ELF; [`SymbolError::NotElf`] otherwise.
    pub fn parse(&self, path: &Path) -> Result<object::File<'_>, SymbolError> {
        let not_elf = |reason: String| SymbolError::NotElf {
            path: path.to_path_buf(),
            reason,
        };
        let file = object::File::parse(&*self.data).map_err(|e| not_elf(e.to_string()))?;
        if file.format() != object::BinaryFormat::Elf {
            return Err(not_elf(format!("it is a {:?} file", file.format())));
        }
        Ok(file)
    }
}

/// Build id, PT_LOAD segments and Go marker of a parsed file.
pub(crate) fn info_of<'d, R: object::ReadRef<'d>>(file: &object::File<'d, R>) -> ElfInfo {
    let segments = file
        .segments()
        .map(|s| {
            let (offset, filesz) = s.file_range();
            let executable = match s.flags() {
                SegmentFlags::Elf { p_flags } => p_flags & object::elf::PF_X != 0,
                _ => false,
            };
            LoadSegment {
                vaddr: s.address(),
                offset,
                filesz,
                memsz: s.size(),
                executable,
            }
        })
        .collect();
    ElfInfo {
        build_id: file.build_id().ok().flatten().map(<[u8]>::to_vec),
        segments,
        is_go: file.section_by_name(".go.buildinfo").is_some(),
    }
}

/// True when the file holds DWARF debug info (not just an empty NOBITS placeholder).
pub(crate) fn has_dwarf(file: &object::File<'_>) -> bool {
    file.section_by_name(".debug_info")
        .is_some_and(|s| s.size() > 0 && s.file_range().is_some_and(|(_, size)| size > 0))
}

/// The build id of the ELF file at `path`, if it can be read.
pub(crate) fn file_build_id(path: &Path) -> Option<Vec<u8>> {
    let file = std::fs::File::open(path).ok()?;
    let cache = object::ReadCache::new(file);
    let parsed = object::File::parse(&cache).ok()?;
    parsed.build_id().ok().flatten().map(<[u8]>::to_vec)
}

/// A function symbol as read from a symbol table, before sorting and demangling.
#[derive(Clone, Debug)]
pub(crate) struct RawSymbol {
    pub name: String,
    pub addr: u64,
    pub size: u64,
    /// End of the section holding the symbol: bounds a symbol of size 0.
    pub section_end: u64,
    pub global: bool,
    pub weak: bool,
}

/// Function symbols (STT_FUNC, STT_GNU_IFUNC) with a nonzero address from .symtab (`dynamic == false`) or
/// .dynsym (`dynamic == true`).
pub(crate) fn raw_symbols(file: &object::File<'_>, dynamic: bool) -> Vec<RawSymbol> {
    let symbols = if dynamic {
        file.dynamic_symbols()
    } else {
        file.symbols()
    };
    symbols
        .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0 && s.is_definition())
        .filter_map(|s| {
            let name = s.name().ok()?;
            if name.is_empty() {
                return None;
            }
            let section_end = match s.section() {
                SymbolSection::Section(index) => file
                    .section_by_index(index)
                    .map(|sec| sec.address() + sec.size())
                    .unwrap_or(u64::MAX),
                _ => u64::MAX,
            };
            Some(RawSymbol {
                name: name.to_string(),
                addr: s.address(),
                size: s.size(),
                section_end,
                global: s.is_global(),
                weak: s.is_weak(),
            })
        })
        .collect()
}

/// True when the file has a .symtab section.
pub(crate) fn has_symtab(file: &object::File<'_>) -> bool {
    file.section_by_name(".symtab").is_some()
}
