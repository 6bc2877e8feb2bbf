//! DWARF line tables and inlined frames through addr2line's `Context`.
//!
//! The sections are loaded here rather than by addr2line's `Loader`, for speed:
//! - the file is mapped (shared with the symbol table's reader), and sections stored uncompressed are used in
//!   place;
//! - the sections symbolization never reads (location lists and macros, which describe variables and are large
//!   and compressed in distribution debug files) are not decompressed;
//! - where `.debug_aranges` names the compilation unit of an address, a context over that unit alone answers
//!   it, instead of one that first indexes every unit of the file (27 ms for libc's 4,000 units here). A unit
//!   that refers into other units (`DW_FORM_ref_addr`, as LTO and dwz output do), and any address of a file
//!   without `.debug_aranges`, go to a context over the whole file. An address that `.debug_aranges` does not
//!   cover has no DWARF, as libdw has it.
//!
//! Split DWARF (`.dwo` files next to the compilation directory) is loaded on demand, as the `Loader` does;
//! DWARF packages (`.dwp`) are not searched.
use crate::mapped::MappedFile;
use addr2line::{LookupContinuation, LookupResult, SplitDwarfLoad};
use gimli::{EndianReader, Reader as _, RunTimeEndian, Section as _, SectionId};
use object::{CompressionFormat, Object, ObjectSection};
use std::collections::HashSet;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;

/// A DWARF section: a range of the mapped file, or (compressed sections only) decompressed bytes on the heap.
type Reader = EndianReader<RunTimeEndian, MappedFile>;

/// One DWARF frame: the function name as stored (maybe mangled) and its source line.
pub(crate) struct DwarfFrame {
    pub name: Option<String>,
    pub source: Option<super::SourceLine>,
}

/// How many per-unit contexts are kept (the least recently used is dropped). A context holds its unit's
/// parsed functions and line table. Reading a unit reads all its `.debug_info`, so the mapped pages of the
/// sections are released each time a unit is read for the first time (see [`MappedFile::release`]): they hold
/// what the units before read. Callers that look addresses up in order (report does) visit each unit once.
const UNITS_KEPT: usize = 4;

/// How many units the whole file's context answers for before it is made anew. Making it reads every unit's
/// header, line program header and ranges (tens of milliseconds and megabytes of pages for a large binary), so
/// it is kept much longer than a unit's own context.
const WHOLE_UNITS_KEPT: usize = 64;

/// The DWARF of one file (the binary itself or its separate debug file).
pub(crate) struct Dwarf {
    sections: gimli::DwarfSections<Reader>,
    /// Address ranges and the `.debug_info` offset of the unit covering each, sorted by start (from
    /// `.debug_aranges`; empty when the file has none).
    aranges: Vec<(Range<u64>, usize)>,
    /// The file the sections are mapped from, and the part of it that holds the sections used in place.
    data: MappedFile,
    mapped: Range<usize>,
    /// Contexts over one unit with the unit's offset, the most recently used last; at most [`UNITS_KEPT`].
    units: Vec<(usize, addr2line::Context<Reader>)>,
    /// Units that refer into others (answered by `whole`).
    outside: HashSet<usize>,
    /// The context over every unit, made on first need.
    whole: Option<Option<addr2line::Context<Reader>>>,
    /// The units `whole` answered for since it was made (at most [`WHOLE_UNITS_KEPT`]).
    whole_units: Vec<usize>,
}

impl Dwarf {
    /// Load the DWARF sections of the ELF file held in `data`; None when it cannot be parsed.
    pub fn from_data(data: MappedFile) -> Option<Dwarf> {
        let file = object::File::parse(&*data).ok()?;
        let sections = gimli::DwarfSections::load(|id| -> Result<Reader, ()> {
            Ok(load_section(&data, &file, id, false))
        })
        .ok()?;
        let mut mapped = data.len()..0;
        let _ = sections.borrow(|r| {
            if let Some(start) = (r.bytes().as_ptr() as usize).checked_sub(data.as_ptr() as usize) {
                if !r.is_empty() && start + r.len() <= data.len() {
                    mapped.start = mapped.start.min(start);
                    mapped.end = mapped.end.max(start + r.len());
                }
            }
        });
        let mapped = mapped.start.min(mapped.end)..mapped.end;
        // Units and names lie all over the sections: no reading ahead around each page touched.
        data.advise_random(&data[mapped.clone()]);
        let aranges = unit_ranges(&sections.debug_aranges);
        Some(Dwarf {
            sections,
            aranges,
            data,
            mapped,
            units: Vec::new(),
            outside: HashSet::new(),
            whole: None,
            whole_units: Vec::new(),
        })
    }

    /// The context that answers for `addr`: its unit's own, else the whole file's; None when
    /// `.debug_aranges` says no unit covers it.
    fn context(&mut self, addr: u64) -> Option<&addr2line::Context<Reader>> {
        let unit = if self.aranges.is_empty() {
            None
        } else {
            // Units' ranges do not overlap but for a few stray ones (code the linker dropped, at address 0).
            let i = self.aranges.partition_point(|(r, _)| r.start <= addr);
            let found = self.aranges[..i]
                .iter()
                .rev()
                .take(64)
                .find(|(r, _)| r.contains(&addr));
            // As libdw does, an address .debug_aranges does not cover has no DWARF.
            Some(found?.1)
        };
        if let Some(unit) = unit {
            if let Some(i) = self.units.iter().position(|(u, _)| *u == unit) {
                let used = self.units.remove(i);
                self.units.push(used);
                return self.units.last().map(|(_, ctx)| ctx);
            }
            if !self.outside.contains(&unit) {
                self.release_pages();
                match unit_context(&self.sections, unit) {
                    Some(ctx) => {
                        if self.units.len() == UNITS_KEPT {
                            self.units.remove(0);
                        }
                        self.units.push((unit, ctx));
                        return self.units.last().map(|(_, ctx)| ctx);
                    }
                    None => {
                        self.outside.insert(unit);
                    }
                }
            }
            // The whole file's context keeps what it parsed of every unit it answered for: it is made anew
            // past WHOLE_UNITS_KEPT units.
            if !self.whole_units.contains(&unit) {
                if self.whole_units.len() == WHOLE_UNITS_KEPT {
                    self.whole = None;
                    self.whole_units.clear();
                }
                self.release_pages();
                self.whole_units.push(unit);
            }
        }
        if self.whole.is_none() {
            let mut dwarf = self.sections.borrow(|r| r.clone());
            dwarf.populate_abbreviations_cache(gimli::AbbreviationsCacheStrategy::Duplicates);
            self.whole = Some(addr2line::Context::from_dwarf(dwarf).ok());
            // Making it read the header of every unit, all over the sections.
            self.release_pages();
        }
        self.whole.as_ref()?.as_ref()
    }

    /// Release the mapped pages of the sections: they hold what the units looked at so far read (all of each
    /// unit's `.debug_info`, names, line programs).
    fn release_pages(&self) {
        self.data.release(&self.data[self.mapped.clone()]);
    }

    /// The frames at ELF address `addr`, outermost function first, then the functions inlined into it.
    /// Each frame's location is the line inside that frame (for outer frames: the call site of the next one).
    pub fn frames(&mut self, addr: u64, lines: bool) -> Vec<DwarfFrame> {
        let mut frames = Vec::new();
        let Some(ctx) = self.context(addr) else {
            return frames;
        };
        let mut lookup = ctx.find_frames(addr);
        let found = loop {
            match lookup {
                LookupResult::Output(found) => break found,
                LookupResult::Load { load, continuation } => {
                    lookup = continuation.resume(load_dwo(load));
                }
            }
        };
        let Ok(mut iter) = found else {
            return frames;
        };
        while let Ok(Some(frame)) = iter.next() {
            let name = frame
                .function
                .as_ref()
                .and_then(|f| f.raw_name().ok())
                .map(|n| n.into_owned());
            let source = frame.location.as_ref().filter(|_| lines).and_then(|loc| {
                Some(super::SourceLine {
                    file: loc.file?.to_string(),
                    line: loc.line.unwrap_or(0),
                })
            });
            frames.push(DwarfFrame { name, source });
        }
        frames.reverse();
        frames
    }
}

/// A context over the one unit at `offset` in `.debug_info`, seen as a section of its own; None when the
/// unit cannot be read or refers outside itself (its offsets would be wrong in such a view).
fn unit_context(
    sections: &gimli::DwarfSections<Reader>,
    offset: usize,
) -> Option<addr2line::Context<Reader>> {
    let info = &sections.debug_info;
    let header = info
        .header_from_offset(gimli::DebugInfoOffset(offset))
        .ok()?;
    let end = offset.checked_add(header.length_including_self())?;
    let mut reader = info.reader().clone();
    reader.skip(offset).ok()?;
    reader.truncate(end - offset).ok()?;
    let mut dwarf = sections.borrow(|r| r.clone());
    dwarf.debug_info = gimli::DebugInfo::from(reader);
    // .debug_aranges names units by their offsets in the whole section: useless here.
    dwarf.debug_aranges =
        gimli::DebugAranges::from(Reader::new(no_bytes(), info.reader().endian()));
    let header = dwarf.units().next().ok()??;
    let unit = dwarf.unit(header).ok()?;
    if refers_outside(&unit) {
        return None;
    }
    addr2line::Context::from_dwarf(dwarf).ok()
}

/// True when a DIE of `unit` uses a reference form whose target may lie in another unit or file.
fn refers_outside(unit: &gimli::Unit<Reader>) -> bool {
    let Ok(mut entries) = unit.entries_raw(None) else {
        return true;
    };
    while !entries.is_empty() {
        let abbrev = match entries.read_abbreviation() {
            Ok(Some(abbrev)) => abbrev,
            Ok(None) => continue,
            Err(_) => return true,
        };
        let outside = abbrev.attributes().iter().any(|spec| {
            matches!(
                spec.form(),
                gimli::DW_FORM_ref_addr
                    | gimli::DW_FORM_GNU_ref_alt
                    | gimli::DW_FORM_ref_sup4
                    | gimli::DW_FORM_ref_sup8
                    | gimli::DW_FORM_indirect
            )
        });
        if outside || entries.skip_attributes(abbrev.attributes()).is_err() {
            return true;
        }
    }
    false
}

/// The address ranges of `.debug_aranges` with the `.debug_info` offset of their unit, sorted by start.
/// Empty when the section is missing or cannot be read whole (then nothing is assumed about unit ranges).
fn unit_ranges(aranges: &gimli::DebugAranges<Reader>) -> Vec<(Range<u64>, usize)> {
    let mut out = Vec::new();
    let mut headers = aranges.headers();
    loop {
        match headers.next() {
            Ok(Some(header)) => {
                let unit = header.debug_info_offset().0;
                let mut entries = header.entries();
                loop {
                    match entries.next() {
                        Ok(Some(entry)) => {
                            let r = entry.range();
                            if r.begin < r.end {
                                out.push((r.begin..r.end, unit));
                            }
                        }
                        Ok(None) => break,
                        Err(_) => return Vec::new(),
                    }
                }
            }
            Ok(None) => break,
            Err(_) => return Vec::new(),
        }
    }
    out.sort_by_key(|(r, _)| r.start);
    out
}

fn endian_of(file: &object::File<'_>) -> RunTimeEndian {
    if file.is_little_endian() {
        RunTimeEndian::Little
    } else {
        RunTimeEndian::Big
    }
}

/// One DWARF section of `file` (whose bytes are `data`); `dwo` picks the split-DWARF section names. Missing,
/// unreadable and never-needed sections are empty.
fn load_section(data: &MappedFile, file: &object::File<'_>, id: SectionId, dwo: bool) -> Reader {
    let endian = endian_of(file);
    let empty = Reader::new(no_bytes(), endian);
    // Location lists and macros describe variables and macros: symbolization never reads them.
    if matches!(
        id,
        SectionId::DebugLoc
            | SectionId::DebugLocLists
            | SectionId::DebugMacinfo
            | SectionId::DebugMacro
    ) {
        return empty;
    }
    let name = if dwo { id.dwo_name() } else { Some(id.name()) };
    let Some(section) = name.and_then(|n| file.section_by_name(n)) else {
        return empty;
    };
    match section.compressed_file_range() {
        // Stored as is: borrow the mapped file's bytes (read when touched).
        Ok(range) if range.format == CompressionFormat::None => {
            let bounds = usize::try_from(range.offset)
                .ok()
                .zip(
                    range
                        .offset
                        .checked_add(range.uncompressed_size)
                        .and_then(|end| usize::try_from(end).ok()),
                )
                .filter(|(_, end)| *end <= data.len());
            match bounds {
                Some((start, end)) => Reader::new(data.clone(), endian).range(start..end),
                None => empty,
            }
        }
        // Compressed: the only bytes copied to the heap. The size to allocate comes from the compression
        // header: one that the compressed bytes cannot fill is corrupt, and is not allocated.
        _ => match section.compressed_data() {
            Ok(compressed) if crate::elf_layout::fits_expansion(&compressed) => {
                match compressed.decompress() {
                    Ok(bytes) => Reader::new(MappedFile::from_vec(bytes.into_owned()), endian),
                    Err(_) => empty,
                }
            }
            _ => empty,
        },
    }
}

/// No bytes: a missing or unneeded section.
fn no_bytes() -> MappedFile {
    MappedFile::from_vec(Vec::new())
}

/// Load the DWARF sections of an ELF file held in `data` (all of them; for split DWARF).
fn load_dwarf(data: MappedFile, dwo: bool) -> Option<gimli::Dwarf<Reader>> {
    let file = object::File::parse(&*data).ok()?;
    gimli::Dwarf::load(|id| -> Result<Reader, ()> { Ok(load_section(&data, &file, id, dwo)) }).ok()
}

/// Load a split-DWARF `.dwo` file (its path is relative to the unit's compilation directory); None when it
/// cannot be read, which leaves that unit without inlined frames and lines.
fn load_dwo(load: SplitDwarfLoad<Reader>) -> Option<Arc<gimli::Dwarf<Reader>>> {
    use std::os::unix::ffi::OsStrExt;
    let mut path = PathBuf::new();
    if let Some(dir) = &load.comp_dir {
        path.push(std::ffi::OsStr::from_bytes(&dir.to_slice().ok()?));
    }
    path.push(std::ffi::OsStr::from_bytes(
        &load.path.as_ref()?.to_slice().ok()?,
    ));
    let data = MappedFile::open(&path).ok()?;
    let mut dwo = load_dwarf(data, true)?;
    dwo.make_dwo(&load.parent);
    Some(Arc::new(dwo))
}
