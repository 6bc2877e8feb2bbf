//! One binary prepared for lookups: its segments, a sorted function table and its DWARF.
use super::debugfile::{find_debug_file, DebugHints};
use super::dwarf::Dwarf;
use super::elf::{
    dynamic_ifuncs, has_dwarf, has_symtab, info_of, plt_symbols, raw_symbols, ElfData, RawSymbol,
};
use super::fde::Fdes;
use super::unnamed::{Unknown, Unnamed};
use super::{
    demangle, DebugSources, ElfInfo, Frame, FunctionRange, InflatedCache, SymbolError,
    SymbolizerOptions,
};
use crate::addr::{ElfAddr, FileOffset};
use crate::mapped::MappedFile;
use object::Object;
use std::cell::OnceCell;
use std::path::{Path, PathBuf};

/// Everything read from a binary and its debug file.
pub(crate) struct Loaded {
    pub info: ElfInfo,
    /// Function symbols, deduplicated on (name, address), unsorted.
    pub symbols: Vec<RawSymbol>,
    /// Symbols synthesized for PLT entries (`write@plt`), kept apart so that only lookups see them (a probe on
    /// a PLT stub is not wanted).
    pub plt: Vec<RawSymbol>,
    /// The bytes of the file holding DWARF (the binary or its debug file), if any.
    pub dwarf: Option<MappedFile>,
    /// Debug-file paths looked at (for error messages).
    pub searched: Vec<PathBuf>,
    /// No .symtab, and none from a debug file: only exported (.dynsym) names, if any.
    pub stripped: bool,
    /// The unwind tables, which bound the code around an unnamed address.
    pub fdes: Option<Fdes>,
}

/// Read the symbols of `opened` (mapped by a process as `original`) and synthesize its PLT symbols, with its
/// separate debug file when the binary lacks a .symtab or DWARF. With `expected_build_id`, a file with another
/// build id is refused.
pub(crate) fn load(
    opened: &Path,
    original: &Path,
    expected_build_id: Option<&[u8]>,
    sources: &DebugSources,
) -> Result<Loaded, SymbolError> {
    load_data(
        ElfData::read(opened)?,
        opened,
        original,
        expected_build_id,
        sources,
    )
}

/// [`load`] for a file already read (`opened` names it in errors).
pub(crate) fn load_data(
    data: ElfData,
    opened: &Path,
    original: &Path,
    expected_build_id: Option<&[u8]>,
    sources: &DebugSources,
) -> Result<Loaded, SymbolError> {
    let file = data.parse(opened)?;
    let info = info_of(&file);
    if let Some(expected) = expected_build_id {
        if info.build_id.as_deref() != Some(expected) {
            return Err(SymbolError::BuildIdMismatch {
                path: opened.to_path_buf(),
            });
        }
    }
    let own_symtab = has_symtab(&file);
    let own_dwarf = has_dwarf(&file);
    let mut symbols = raw_symbols(&file, false);
    symbols.extend(raw_symbols(&file, true));
    let mut dwarf = own_dwarf.then(|| data.data.clone());
    let mut searched = Vec::new();
    let mut stripped = !own_symtab;
    if !own_symtab || !own_dwarf {
        let hints = DebugHints {
            opened,
            original,
            build_id: info.build_id.as_deref(),
            debuglink: file.gnu_debuglink().ok().flatten(),
        };
        let found = debug_file(&hints, sources, !own_symtab, !own_dwarf);
        searched = found.searched;
        if let Some(table) = found.symbols {
            symbols.extend(table);
            stripped = false;
        }
        dwarf = dwarf.or(found.dwarf);
    }
    dedup_symbols(&mut symbols);
    // An IRELATIVE PLT slot is named after the IFUNC at its addend: its exported name (the name callers use,
    // `strnlen` rather than the debug file's `__strnlen_ifunc`), else the function there; best alias first.
    let ifuncs = dynamic_ifuncs(&file);
    let best_at = |table: &[RawSymbol], addr: u64| {
        table
            .iter()
            .filter(|s| s.addr == addr)
            .max_by_key(|s| alias_rank(s))
            .map(|s| s.name.clone())
    };
    let plt = plt_symbols(&file, |addr| {
        best_at(&ifuncs, addr).or_else(|| best_at(&symbols, addr))
    });
    let fdes = Fdes::of(&data.data, &file);
    // The symbol tables were copied out: their pages may go (lookups read what they need again).
    data.data.release(&data.data);
    Ok(Loaded {
        info,
        symbols,
        plt,
        dwarf,
        searched,
        stripped,
        fdes,
    })
}

/// Drop the repeats of a (name, address) (a function in .symtab, .dynsym and the debug file's .symtab), keeping
/// each first one in place: by sorting indexes, not hashing the names (libc's debug file has tens of thousands).
fn dedup_symbols(symbols: &mut Vec<RawSymbol>) {
    let mut order: Vec<usize> = (0..symbols.len()).collect();
    order.sort_unstable_by(|&a, &b| {
        let (x, y) = (&symbols[a], &symbols[b]);
        x.addr
            .cmp(&y.addr)
            .then_with(|| x.name.cmp(&y.name))
            .then(a.cmp(&b))
    });
    let mut keep = vec![true; symbols.len()];
    for pair in order.windows(2) {
        let (first, next) = (&symbols[pair[0]], &symbols[pair[1]]);
        if first.addr == next.addr && first.name == next.name {
            keep[pair[1]] = false;
        }
    }
    let mut kept = keep.into_iter();
    symbols.retain(|_| kept.next().unwrap_or(true));
}

/// What a separate debug file adds to a binary.
struct DebugFile {
    /// Its .symtab's functions (asked for, and found).
    symbols: Option<Vec<RawSymbol>>,
    /// Its bytes, when it holds DWARF (asked for).
    dwarf: Option<MappedFile>,
    /// The paths looked at.
    searched: Vec<PathBuf>,
}

/// The separate debug file of a binary: found locally by `hints`, else (when no local file names the code)
/// fetched from debuginfod; its symbols when `symtab`, its DWARF when `dwarf`.
fn debug_file(
    hints: &DebugHints<'_>,
    sources: &DebugSources,
    symtab: bool,
    dwarf: bool,
) -> DebugFile {
    let search = find_debug_file(hints, &sources.dirs);
    let mut out = DebugFile {
        symbols: None,
        dwarf: None,
        searched: search.searched,
    };
    let found = match search.found {
        None if symtab => sources.fetch_debuginfo(hints.build_id),
        found => found,
    };
    let Some(data) = found.and_then(|path| Some((ElfData::read(&path).ok()?, path))) else {
        return out;
    };
    let (data, path) = data;
    if let Ok(file) = data.parse(&path) {
        if symtab && has_symtab(&file) {
            out.symbols = Some(raw_symbols(&file, false));
        }
        if dwarf && has_dwarf(&file) {
            out.dwarf = Some(data.data.clone());
        }
    }
    // The symbol table was copied out: its pages may go (DWARF reads its own again).
    data.data.release(&data.data);
    out
}

/// A function's range and name (as stored, maybe mangled).
pub(crate) struct Entry {
    start: u64,
    end: u64,
    name: Box<str>,
    /// The demangled name, computed on first use.
    demangled: OnceCell<String>,
}

impl Entry {
    /// The name, demangled when `demangled` is set.
    pub fn name(&self, demangled: bool) -> &str {
        if demangled {
            self.demangled.get_or_init(|| demangle(&self.name))
        } else {
            &self.name
        }
    }
}

/// Function symbols sorted by address, one per address, each with a known end.
pub(crate) struct SymbolTable {
    entries: Vec<Entry>,
}

/// Rank aliases at one address as perf does (`choose_best_symbol`), so both tools name a function alike: a
/// sized, non-weak, global name with fewer leading underscores and no '@' wins; then the longest name.
fn alias_rank(s: &RawSymbol) -> (bool, bool, bool, usize, bool, usize) {
    let underscores = s.name.bytes().take_while(|&b| b == b'_').count();
    (
        s.size > 0,
        !s.weak,
        s.global,
        usize::MAX - underscores,
        !s.name.contains('@'),
        s.name.len(),
    )
}

impl SymbolTable {
    /// Sort and bound the symbols: a symbol ends at `addr + size`, or, when its size is 0, at the next symbol or
    /// the end of its section.
    pub fn new(symbols: Vec<RawSymbol>) -> SymbolTable {
        // Rank each symbol once (not in every comparison), then move the names into the table.
        let mut sorted: Vec<_> = symbols.into_iter().map(|s| (alias_rank(&s), s)).collect();
        sorted.sort_by(|(ra, a), (rb, b)| a.addr.cmp(&b.addr).then_with(|| rb.cmp(ra)));
        sorted.dedup_by_key(|(_, s)| s.addr);
        let starts: Vec<u64> = sorted.iter().map(|(_, s)| s.addr).collect();
        let mut entries = Vec::with_capacity(sorted.len());
        for (i, (_, s)) in sorted.into_iter().enumerate() {
            let end = if s.size > 0 {
                s.addr.saturating_add(s.size)
            } else {
                let next = starts.get(i + 1).copied().unwrap_or(u64::MAX);
                next.min(s.section_end)
            };
            entries.push(Entry {
                start: s.addr,
                end,
                name: s.name.into_boxed_str(),
                demangled: OnceCell::new(),
            });
        }
        SymbolTable { entries }
    }

    /// The function containing `addr`.
    pub fn lookup(&self, addr: u64) -> Option<&Entry> {
        let i = self
            .entries
            .partition_point(|e| e.start <= addr)
            .checked_sub(1)?;
        let e = &self.entries[i];
        (addr < e.end).then_some(e)
    }
}

/// A binary ready for lookups.
pub(crate) struct Binary {
    pub info: ElfInfo,
    symbols: SymbolTable,
    /// The DWARF, loaded (sections decompressed) when the binary is opened; dropped by
    /// [`Binary::release_dwarf`] and loaded again from `dwarf_file` when needed after that.
    dwarf: Option<Dwarf>,
    /// The file holding the DWARF (the binary or its debug file).
    dwarf_file: Option<MappedFile>,
    /// Where its compressed sections are kept inflated.
    inflated: Option<InflatedCache>,
    /// Why an address no symbol covers has no name: the binary is stripped, or only that code is unnamed.
    unnamed: Unnamed,
    fdes: Option<Fdes>,
}

impl Binary {
    /// Load a binary (see [`load`]) and its DWARF (decompressed: tens of milliseconds for libc's debug file,
    /// which callers run on a thread of their own where they can).
    pub fn open(
        opened: &Path,
        original: &Path,
        expected_build_id: Option<&[u8]>,
        sources: &DebugSources,
    ) -> Result<Binary, SymbolError> {
        let loaded = load(opened, original, expected_build_id, sources)?;
        Ok(Binary::from_loaded(loaded, sources.inflated.clone()))
    }

    /// A binary from bytes read elsewhere (the vDSO, from memory); `name` stands for it in errors.
    pub fn from_bytes(
        bytes: Vec<u8>,
        name: &Path,
        expected_build_id: Option<&[u8]>,
    ) -> Result<Binary, SymbolError> {
        let data = ElfData {
            data: MappedFile::from_vec(bytes),
        };
        let loaded = load_data(data, name, name, expected_build_id, &DebugSources::none())?;
        Ok(Binary::from_loaded(loaded, None))
    }

    /// The lookup table (symbols and PLT entries) and DWARF of what [`load`] read.
    fn from_loaded(mut loaded: Loaded, inflated: Option<InflatedCache>) -> Binary {
        loaded.symbols.append(&mut loaded.plt);
        let symbols = SymbolTable::new(std::mem::take(&mut loaded.symbols));
        let dwarf = (loaded.dwarf.clone()).and_then(|d| Dwarf::from_data(d, inflated.as_ref()));
        Binary {
            info: loaded.info,
            symbols,
            dwarf_file: loaded.dwarf.filter(|_| dwarf.is_some()),
            inflated,
            dwarf,
            unnamed: match loaded.stripped {
                true => Unnamed::Stripped,
                false => Unnamed::NoSymbol,
            },
            fdes: loaded.fdes,
        }
    }

    /// The function symbol containing ELF address `addr`.
    pub fn function_at(&self, addr: u64) -> Option<FunctionRange> {
        let e = self.symbols.lookup(addr)?;
        Some(FunctionRange {
            raw_name: e.name(false).to_string(),
            name: e.name(true).to_string(),
            start: ElfAddr(e.start),
            end: ElfAddr(e.end),
        })
    }

    /// Drop the DWARF (the decompressed sections of a debug file, the units' indexes) until an address needs it
    /// again: a caller done with its lookups (report, once every sampled address is resolved) frees it before
    /// what comes next (the kernel's symbols).
    pub fn release_dwarf(&mut self) {
        self.dwarf = None;
    }

    /// The DWARF, loaded again after [`Binary::release_dwarf`].
    fn dwarf(&mut self) -> Option<&mut Dwarf> {
        if self.dwarf.is_none() {
            let file = self.dwarf_file.clone()?;
            self.dwarf = Dwarf::from_data(file, self.inflated.as_ref());
        }
        self.dwarf.as_mut()
    }

    /// The file offsets of the code the unwind tables bound around `addr` (an FDE's range).
    fn unwind_range(&self, addr: ElfAddr) -> Option<std::ops::Range<FileOffset>> {
        let range = self.fdes.as_ref()?.range(addr.0)?;
        let layout = &self.info.layout;
        let start = layout.file_offset(ElfAddr(range.start))?;
        // The end is one past the last byte, which may lie past the segment.
        let last = layout.file_offset(ElfAddr(range.end.checked_sub(1)?))?;
        Some(start..FileOffset(last.0 + 1))
    }

    /// The frames at a file offset, outermost first; why there is no name, when there is none.
    pub fn resolve(
        &mut self,
        offset: FileOffset,
        opts: &SymbolizerOptions,
    ) -> Result<Vec<Frame>, Unknown> {
        let Some(addr) = self.info.layout.elf_addr(offset) else {
            // Not in a loaded segment of the file (a mapping of its data, or a stale mapping).
            return Err(Unknown::alone(Unnamed::NoSymbol));
        };
        // DWARF is needed for inlined frames, lines, or when the symbol table has nothing.
        let need_dwarf = opts.inlines || opts.lines || self.symbols.lookup(addr.0).is_none();
        let dwarf_frames = match need_dwarf.then(|| self.dwarf()).flatten() {
            Some(dwarf) => dwarf.frames(addr.0, opts.lines),
            None => Vec::new(),
        };
        let symbol = self.symbols.lookup(addr.0);
        let name_of = |raw: &str| match opts.demangle {
            true => demangle(raw),
            false => raw.to_string(),
        };
        let raw_name = |name: &str, raw: &str| (name != raw).then(|| raw.to_string());
        let mut dwarf_frames = dwarf_frames.into_iter();
        let outer = dwarf_frames.next();
        // The symbol table names the outermost function (it is always fully qualified); DWARF fills in when
        // the symbol table has nothing there.
        let outer_raw = symbol
            .map(|s| s.name(false))
            .or_else(|| outer.as_ref().and_then(|f| f.name.as_deref()));
        let Some(outer_raw) = outer_raw else {
            return Err(Unknown {
                cause: self.unnamed,
                range: self.unwind_range(addr),
            });
        };
        let outer_name = match symbol {
            Some(s) => s.name(opts.demangle).to_string(),
            None => name_of(outer_raw),
        };
        let mut frames = vec![Frame {
            raw_name: raw_name(&outer_name, outer_raw),
            name: outer_name,
            inlined: false,
            offset: symbol.map(|s| addr.0 - s.start),
            source: outer.and_then(|f| f.source),
        }];
        if opts.inlines {
            for f in dwarf_frames {
                let Some(name) = f.name.as_deref() else {
                    continue;
                };
                let demangled = name_of(name);
                frames.push(Frame {
                    raw_name: raw_name(&demangled, name),
                    name: demangled,
                    inlined: true,
                    offset: None,
                    source: f.source,
                });
            }
        }
        Ok(frames)
    }
}

#[cfg(test)]
mod tests {
    use super::{RawSymbol, SymbolTable};

    fn sym(name: &str, addr: u64, size: u64, section_end: u64) -> RawSymbol {
        RawSymbol {
            name: name.into(),
            addr,
            size,
            section_end,
            global: true,
            weak: false,
        }
    }

    /// Check that repeats of a (name, address) go and the first of each stays, in order.
    #[test]
    fn dedup_keeps_first_in_order() {
        let mut table = vec![
            sym("b", 0x200, 0, 0x1000),
            sym("a", 0x100, 0x10, 0x1000),
            sym("b", 0x200, 8, 0x1000),
            sym("a2", 0x100, 0x10, 0x1000),
            sym("a", 0x100, 0, 0x1000),
            sym("b", 0x300, 0, 0x1000),
        ];
        super::dedup_symbols(&mut table);
        let kept: Vec<_> = table
            .iter()
            .map(|s| (s.name.as_str(), s.addr, s.size))
            .collect();
        assert_eq!(
            kept,
            [
                ("b", 0x200, 0),
                ("a", 0x100, 0x10),
                ("a2", 0x100, 0x10),
                ("b", 0x300, 0)
            ]
        );
    }

    /// Check that sized symbols stop at their size, unsized ones at the next symbol or section end, and
    /// that the best alias wins.
    #[test]
    fn bounds_and_aliases() {
        let table = SymbolTable::new(vec![
            sym("b", 0x200, 0, 0x1000),
            sym("a", 0x100, 0x10, 0x1000),
            sym("__a_alias", 0x100, 0x10, 0x1000),
            sym("last", 0x300, 0, 0x400),
            RawSymbol {
                weak: true,
                ..sym("weak_a", 0x100, 0x10, 0x1000)
            },
        ]);
        let name = |addr| table.lookup(addr).map(|e| e.name(false).to_string());
        assert_eq!(name(0x100).as_deref(), Some("a"));
        assert_eq!(name(0x10f).as_deref(), Some("a"));
        assert_eq!(name(0x110), None, "padding after a sized symbol");
        assert_eq!(name(0x2ff).as_deref(), Some("b"));
        assert_eq!(name(0x3ff).as_deref(), Some("last"));
        assert_eq!(name(0x400), None, "past the section end");
        assert_eq!(name(0x50), None);
    }
}
