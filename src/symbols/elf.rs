//! ELF files: build id, PT_LOAD segments, Go marker, function symbols (.symtab, .dynsym), and symbols
//! synthesized for PLT entries.
use super::{ElfInfo, SymbolError};
use crate::elf_layout::ElfLayout;
use crate::mapped::{MapError, MappedFile};
use object::elf::{FileHeader32, FileHeader64};
use object::read::elf::{FileHeader, SectionHeader};
use object::{
    Architecture, Endianness, Object, ObjectSection, ObjectSymbol, ObjectSymbolTable, ReadRef,
    RelocationTarget, SymbolFlags, SymbolKind, SymbolSection,
};
use std::collections::HashMap;
use std::path::Path;

/// Map `path` read-only; [`SymbolError::Io`] names the file when it cannot be opened or mapped.
pub(crate) fn map_file(path: &Path) -> Result<MappedFile, SymbolError> {
    MappedFile::open(path).map_err(|e| {
        let source = match e {
            MapError::Open { source, .. } | MapError::Map { source, .. } => source,
            MapError::NotRegular { .. } => {
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file")
            }
        };
        SymbolError::Io {
            path: path.to_path_buf(),
            source,
        }
    })
}

/// An ELF file mapped into memory (or, for the vDSO, read from memory).
///
/// Only the pages that parsing and lookups touch are read: the symbol tables are extracted from it, and DWARF
/// borrows its uncompressed sections in place.
pub(crate) struct ElfData {
    pub data: MappedFile,
}

impl ElfData {
    /// Map `path`; [`SymbolError::Io`] when it cannot be opened or mapped.
    pub fn read(path: &Path) -> Result<ElfData, SymbolError> {
        Ok(ElfData {
            data: map_file(path)?,
        })
    }

    /// Parse it as ELF; [`SymbolError::CorruptElf`] or [`SymbolError::NotElf`] otherwise.
    pub fn parse(&self, path: &Path) -> Result<object::File<'_>, SymbolError> {
        let file =
            object::File::parse(&*self.data).map_err(|e| parse_error(path, &*self.data, e))?;
        if file.format() != object::BinaryFormat::Elf {
            return Err(SymbolError::NotElf {
                path: path.to_path_buf(),
                reason: format!("it is a {:?} file", file.format()),
            });
        }
        Ok(file)
    }
}

/// The error for a file in `data` that object cannot parse (`error`): a corrupt ELF file when it starts with
/// ELF's magic, else not an ELF file. A bad section or program header table gets what the ELF header says of it.
pub(crate) fn parse_error<'d, R: ReadRef<'d>>(
    path: &Path,
    data: R,
    error: object::Error,
) -> SymbolError {
    let path = path.to_path_buf();
    let mut reason = error.to_string();
    if data.read_bytes_at(0, 4).ok() != Some(&object::elf::ELFMAG[..]) {
        return SymbolError::NotElf { path, reason };
    }
    let facts = table_facts::<FileHeader64<Endianness>, R>(data, &reason)
        .or_else(|| table_facts::<FileHeader32<Endianness>, R>(data, &reason));
    if let Some(facts) = facts {
        reason = format!("{reason} ({facts})");
    }
    SymbolError::CorruptElf { path, reason }
}

/// Where the ELF header of `data` puts the header table that `reason` names, and the file's length:
/// `section header table: 37 entries of 64 bytes at offset 0x3f08; the file has 18232 bytes`.
fn table_facts<'d, H: FileHeader, R: ReadRef<'d>>(data: R, reason: &str) -> Option<String> {
    let header = H::parse(data).ok()?;
    let endian = header.endian().ok()?;
    let (table, count, size, offset) = if reason.contains("section header") {
        let offset: u64 = header.e_shoff(endian).into();
        let table = "section header table";
        (
            table,
            header.e_shnum(endian),
            header.e_shentsize(endian),
            offset,
        )
    } else if reason.contains("program header") {
        let offset: u64 = header.e_phoff(endian).into();
        let table = "program header table";
        (
            table,
            header.e_phnum(endian),
            header.e_phentsize(endian),
            offset,
        )
    } else {
        return None;
    };
    let len = data.len().ok()?;
    Some(format!(
        "{table}: {count} entries of {size} bytes at offset {offset:#x}; the file has {len} bytes"
    ))
}

/// Build id, PT_LOAD segments and Go marker of a parsed file.
pub(crate) fn info_of<'d, R: object::ReadRef<'d>>(file: &object::File<'d, R>) -> ElfInfo {
    ElfInfo {
        build_id: file.build_id().ok().flatten().map(<[u8]>::to_vec),
        layout: ElfLayout::of(file),
        is_go: file.section_by_name(".go.buildinfo").is_some(),
    }
}

/// True when the file holds DWARF debug info (not just an empty NOBITS placeholder).
pub(crate) fn has_dwarf(file: &object::File<'_>) -> bool {
    file.section_by_name(".debug_info")
        .is_some_and(|s| s.size() > 0 && s.file_range().is_some_and(|(_, size)| size > 0))
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

/// Function symbols (STT_FUNC) with a nonzero address from .symtab (`dynamic == false`) or .dynsym
/// (`dynamic == true`). IFUNC symbols are left out (object does not count them as definitions): their address is
/// the resolver's, which the debug file's .symtab names (`strlen_ifunc`), and a probe there would hit the
/// resolver, not the function.
pub(crate) fn raw_symbols(file: &object::File<'_>, dynamic: bool) -> Vec<RawSymbol> {
    symbols_where(file, dynamic, |s| {
        s.kind() == SymbolKind::Text && s.is_definition()
    })
}

/// The STT_GNU_IFUNC definitions of .dynsym (`strnlen`), which name the PLT entries of IRELATIVE slots.
pub(crate) fn dynamic_ifuncs(file: &object::File<'_>) -> Vec<RawSymbol> {
    symbols_where(file, true, |s| {
        let ifunc = matches!(s.flags(), SymbolFlags::Elf { st_info, .. }
            if st_info & 0xf == object::elf::STT_GNU_IFUNC);
        ifunc && s.section_index().is_some()
    })
}

/// The named symbols of nonzero address of .symtab or .dynsym that `keep` accepts.
fn symbols_where(
    file: &object::File<'_>,
    dynamic: bool,
    keep: impl Fn(&object::Symbol<'_, '_>) -> bool,
) -> Vec<RawSymbol> {
    let symbols = if dynamic {
        file.dynamic_symbols()
    } else {
        file.symbols()
    };
    symbols
        .filter(|s| s.address() != 0 && keep(s))
        .filter_map(|s| {
            let name = s.name().ok()?;
            if name.is_empty() {
                return None;
            }
            let section_end = match s.section() {
                SymbolSection::Section(index) => file
                    .section_by_index(index)
                    .map(|sec| sec.address().saturating_add(sec.size()))
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

/// The x86-64 sections holding PLT entries: `.plt` (lazy-binding header and entries), `.plt.sec` (the entries
/// called, when the lazy ones are apart: IBT/CET) and `.plt.got` (entries for functions that also have a GOT slot).
const X86_64_PLT_SECTIONS: [&str; 3] = [".plt", ".plt.sec", ".plt.got"];

/// One symbol per PLT entry of an x86-64 file, named `<target>@plt` as perf and objdump name them, sized one
/// entry (the section's `sh_entsize`, else 16 bytes).
///
/// Each entry's `jmp *slot(%rip)` (after an optional `endbr64` and `bnd` prefix) gives the GOT slot it jumps
/// through, and the dynamic relocation of that slot gives the target: its dynamic symbol (`JUMP_SLOT`,
/// `GLOB_DAT`), or for `IRELATIVE` the function at the addend (`name_at`, the IFUNC, e.g. `strnlen`),
/// else objdump's `*ABS*+0x<addend>`. Entries without such a jump (the `.plt` header, the lazy-binding stubs
/// when `.plt.sec` exists) or whose slot has no relocation get no symbol. Other architectures give none.
pub(crate) fn plt_symbols(
    file: &object::File<'_>,
    name_at: impl Fn(u64) -> Option<String>,
) -> Vec<RawSymbol> {
    let object::File::Elf64(elf) = file else {
        return Vec::new();
    };
    if elf.architecture() != Architecture::X86_64 {
        return Vec::new();
    }
    // (entry address, entry size, section end, GOT slot)
    let mut entries = Vec::new();
    for name in X86_64_PLT_SECTIONS {
        let Some(section) = elf.section_by_name(name) else {
            continue;
        };
        let Ok(data) = section.data() else {
            continue;
        };
        let entry_size = match section.elf_section_header().sh_entsize(elf.endian()) {
            0 => 16,
            n => n,
        };
        let section_end = section.address().saturating_add(section.size());
        let Ok(chunk) = usize::try_from(entry_size) else {
            continue;
        };
        for (i, entry) in data.chunks_exact(chunk).enumerate() {
            // No overflow in the product: `i * entry_size` is at most the section's length.
            let Some(addr) = section.address().checked_add(i as u64 * entry_size) else {
                break;
            };
            if let Some(slot) = x86_64_plt_slot(entry, addr) {
                entries.push((addr, entry_size, section_end, slot));
            }
        }
    }
    if entries.is_empty() {
        return Vec::new();
    }
    let mut targets: HashMap<u64, Option<String>> = entries
        .iter()
        .map(|&(_, _, _, slot)| (slot, None))
        .collect();
    let dynsym = elf.dynamic_symbol_table();
    for (offset, relocation) in elf.dynamic_relocations().into_iter().flatten() {
        let Some(target @ None) = targets.get_mut(&offset) else {
            continue;
        };
        *target = match relocation.target() {
            RelocationTarget::Symbol(index) => dynsym
                .as_ref()
                .and_then(|table| table.symbol_by_index(index).ok())
                .and_then(|symbol| symbol.name().ok())
                .filter(|name| !name.is_empty())
                .map(str::to_string),
            RelocationTarget::Absolute => {
                let addend = relocation.addend() as u64;
                Some(name_at(addend).unwrap_or_else(|| format!("*ABS*+{addend:#x}")))
            }
            _ => None,
        };
    }
    entries
        .into_iter()
        .filter_map(|(addr, size, section_end, slot)| {
            let target = targets.get(&slot)?.as_deref()?;
            Some(RawSymbol {
                name: format!("{target}@plt"),
                addr,
                size,
                section_end,
                global: true,
                weak: false,
            })
        })
        .collect()
}

/// The GOT slot an x86-64 PLT entry at `addr` jumps through: `[endbr64] [bnd] jmp *disp32(%rip)` at its start.
fn x86_64_plt_slot(entry: &[u8], addr: u64) -> Option<u64> {
    const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];
    const BND: u8 = 0xf2;
    const JMP_RIP_INDIRECT: [u8; 2] = [0xff, 0x25];
    let mut at = 0;
    if entry.starts_with(&ENDBR64) {
        at += ENDBR64.len();
    }
    if entry.get(at) == Some(&BND) {
        at += 1;
    }
    let jmp = entry.get(at..at + 6)?;
    if jmp[..2] != JMP_RIP_INDIRECT {
        return None;
    }
    let disp = i32::from_le_bytes(jmp[2..].try_into().ok()?);
    let next = addr.checked_add((at + 6) as u64)?;
    Some(next.wrapping_add_signed(i64::from(disp)))
}

/// About how many bytes of memory reading the symbol tables of the ELF file at `path` takes at its peak (0 when
/// it cannot be read): each symbol table entry's size twice (the sorted table's entry and its name's
/// allocation) plus the string tables (the names), all twice, for the copies alive while the table is built
/// and sorted (measured: libLLVM.so.22, 35 MB by the single count, raised a push's peak RSS by 68 MB); and its
/// DWARF sections inflated (kept mapped while its addresses are looked up: libc's debug file, 8.5 MB inflated,
/// raised a push's RSS by 13 MiB). Only the ELF header, the section headers and the compression headers are
/// read, for a budget to decide before the whole file is (`rprof record --push`).
pub(crate) fn symbol_table_bytes(path: &Path) -> u64 {
    let Ok(file) = std::fs::File::open(path) else {
        return 0;
    };
    let cache = object::ReadCache::new(file);
    match object::FileKind::parse(&cache) {
        Ok(object::FileKind::Elf64) => tables_bytes::<FileHeader64<Endianness>, _>(&cache),
        Ok(object::FileKind::Elf32) => tables_bytes::<FileHeader32<Endianness>, _>(&cache),
        _ => 0,
    }
}

fn tables_bytes<'d, Elf: FileHeader, R: ReadRef<'d>>(data: R) -> u64 {
    let Ok(header) = Elf::parse(data) else {
        return 0;
    };
    let Ok(endian) = header.endian() else {
        return 0;
    };
    let Ok(sections) = header.sections(endian, data) else {
        return 0;
    };
    let mut bytes = 0u64;
    for s in sections.iter() {
        let size: u64 = s.sh_size(endian).into();
        let dwarf = sections
            .section_name(endian, s)
            .is_ok_and(|n| n.starts_with(b".debug_") || n.starts_with(b".zdebug_"));
        bytes += match s.sh_type(endian) {
            object::elf::SHT_SYMTAB | object::elf::SHT_DYNSYM => 4 * size,
            object::elf::SHT_STRTAB => 2 * size,
            // DWARF is kept inflated and mapped (`--push` keeps a file of the inflated sections).
            _ if dwarf => match s.compression(endian, data) {
                Ok(Some((header, _, _))) => {
                    use object::read::elf::CompressionHeader;
                    header.ch_size(endian).into()
                }
                _ => size,
            },
            _ => 0,
        };
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::x86_64_plt_slot;

    /// Check the memory estimate of a binary with symbols and DWARF (this test's own, built with debug info):
    /// at least its symbol tables four times, its string tables twice and its DWARF sections once, inflated.
    #[test]
    fn estimate_counts_symbols_and_dwarf() {
        use object::{Object, ObjectSection, SectionKind};
        let exe = std::fs::read("/proc/self/exe").unwrap();
        let file = object::File::parse(&*exe).unwrap();
        let (mut symbols, mut dwarf) = (0u64, 0u64);
        for s in file.sections() {
            let name = s.name().unwrap_or_default();
            if name.starts_with(".debug_") {
                dwarf += s.uncompressed_data().map_or(s.size(), |d| d.len() as u64);
            } else if name == ".symtab" {
                symbols += 4 * s.size();
            } else if s.kind() == SectionKind::Metadata && name == ".strtab" {
                symbols += 2 * s.size();
            }
        }
        assert!(
            dwarf > 0 && symbols > 0,
            "the test binary has DWARF and symbols"
        );
        let estimate = super::symbol_table_bytes(std::path::Path::new("/proc/self/exe"));
        assert!(
            estimate >= symbols + dwarf,
            "estimate {estimate} < symbols {symbols} + DWARF {dwarf}"
        );
        assert_eq!(
            super::symbol_table_bytes(std::path::Path::new("/nonexistent")),
            0
        );
    }

    /// Check that the GOT slot is decoded from the PLT entry forms ld writes (lazy, IBT `.plt.sec`, MPX `bnd`,
    /// 8-byte `.plt.got`) and that the header and the IBT lazy stubs give none.
    #[test]
    fn plt_slot_decoding() {
        // 1030: jmp *0x2fe2(%rip) -> 0x4018
        let lazy = [
            0xff, 0x25, 0xe2, 0x2f, 0, 0, 0x68, 0, 0, 0, 0, 0xe9, 0xe0, 0xff, 0xff, 0xff,
        ];
        assert_eq!(x86_64_plt_slot(&lazy, 0x1030), Some(0x4018));
        // 1080: endbr64; jmp *0x2f76(%rip) -> 0x4000
        let ibt = [
            0xf3, 0x0f, 0x1e, 0xfa, 0xff, 0x25, 0x76, 0x2f, 0, 0, 0x66, 0x0f, 0x1f, 0x44, 0, 0,
        ];
        assert_eq!(x86_64_plt_slot(&ibt, 0x1080), Some(0x4000));
        // endbr64; bnd jmp *-0x10(%rip)
        let bnd = [
            0xf3, 0x0f, 0x1e, 0xfa, 0xf2, 0xff, 0x25, 0xf0, 0xff, 0xff, 0xff, 0x0f, 0x1f, 0x44, 0,
            0,
        ];
        assert_eq!(x86_64_plt_slot(&bnd, 0x2000), Some(0x2000 + 11 - 0x10));
        // .plt.got: jmp *0x2f6a(%rip); xchg %ax,%ax
        let got = [0xff, 0x25, 0x6a, 0x2f, 0, 0, 0x66, 0x90];
        assert_eq!(x86_64_plt_slot(&got, 0x1070), Some(0x1076 + 0x2f6a));
        // The .plt header (push; jmp) and an IBT lazy stub (endbr64; push; bnd jmp .plt).
        let header = [
            0xff, 0x35, 0xca, 0x2f, 0, 0, 0xff, 0x25, 0xcc, 0x2f, 0, 0, 0x0f, 0x1f, 0x40, 0,
        ];
        assert_eq!(x86_64_plt_slot(&header, 0x1020), None);
        let stub = [
            0xf3, 0x0f, 0x1e, 0xfa, 0x68, 0, 0, 0, 0, 0xf2, 0xe9, 0xe2, 0xff, 0xff, 0xff, 0x90,
        ];
        assert_eq!(x86_64_plt_slot(&stub, 0x1030), None);
        assert_eq!(x86_64_plt_slot(&[0xff, 0x25, 0, 0], 0), None, "truncated");
    }
}
