//! DWARF: the functions inlined at an address and their source lines, looked up with gimli directly.
//!
//! For an address, `.debug_aranges` names its compilation unit (files without it get the same table from their
//! units' own ranges, read once). The unit's functions are indexed once (their code ranges and DIE offsets), and
//! a lookup reads only the DIEs under the function holding the address: the inlined subroutines whose ranges
//! hold it, and their names (through abstract origins and specifications, in other units when LTO put them
//! there: [`Dies`] parses a bounded number of units and follows references without a context over the whole
//! file). The line table is read only when lines are asked for. A bounded number of units' indexes (see
//! [`UNITS_KEPT`]) are kept, and the mapped pages of the sections are released each time a unit is indexed (see
//! [`MappedFile::release`]): callers that look addresses up in order (report does) visit each unit once.
//!
//! This replaces addr2line, which parses each unit it answers for whole (functions and line table) and makes a
//! context over the whole file for units that refer into others: on large Rust binaries that was most of
//! report's memory. The sections are loaded here: the file is mapped (shared with the symbol table's reader),
//! sections stored uncompressed are used in place, and the sections symbolization never reads (location lists
//! and macros) are not decompressed. Split DWARF (`.dwo` files next to the compilation
//! directory) is read when a unit is a skeleton; DWARF packages (`.dwp`) are not searched. An address that
//! `.debug_aranges` does not cover has no DWARF, as libdw has it.
mod functions;
pub(crate) mod inflated;
mod lines;

use super::dies::Dies;
use super::SourceLine;
use crate::mapped::MappedFile;
use functions::{inlined_at, Functions, Inlined};
use gimli::{EndianReader, Reader as _, RunTimeEndian, SectionId, UnitOffset};
use inflated::{Inflated, InflatedCache};
use lines::{FileNames, Lines};
use object::{CompressionFormat, Object, ObjectSection};
use std::ops::Range;
use std::path::PathBuf;

/// A DWARF section: a range of the mapped file, or (compressed sections only) decompressed bytes on the heap.
type Reader = EndianReader<RunTimeEndian, MappedFile>;

/// One DWARF frame: the function name as stored (maybe mangled) and its source line.
pub(crate) struct DwarfFrame {
    pub name: Option<String>,
    pub source: Option<SourceLine>,
}

/// How many units' indexes (functions, and line tables when asked for) are kept: the least recently used is
/// dropped past [`UNITS_KEPT`] of them, or past [`UNITS_BUDGET`] bytes when more than [`UNITS_KEPT_MIN`] are
/// kept. A long session (`rprof record --push`) meets new addresses of the same units period after period:
/// with 4 units kept, libc's were indexed again and again (65 indexes of 26 units in 10 s).
const UNITS_KEPT: usize = 64;
const UNITS_KEPT_MIN: usize = 4;
const UNITS_BUDGET: usize = 1 << 20;

/// How many parsed units (headers, abbreviations, line program headers) [`Dies`] keeps: the indexed units and
/// the ones their names refer into.
const DIES_KEPT: usize = 16;

/// What is kept of one unit.
struct UnitIndex {
    /// The unit's header offset in `.debug_info` (the skeleton's, for split DWARF).
    unit: usize,
    /// Split DWARF: the `.dwo` file's DIEs, and the unit's header offset there.
    dwo: Option<(Box<Dies<Reader>>, usize)>,
    functions: Functions,
    /// The line table (read on first need, with lines only).
    lines: Option<Lines>,
    /// File names of the line table (rows) and of the DIEs' line program (call sites; the `.dwo`'s for split
    /// DWARF).
    row_files: FileNames,
    call_files: FileNames,
}

/// The DWARF of one file (the binary itself or its separate debug file).
pub(crate) struct Dwarf {
    dies: Dies<Reader>,
    /// Address ranges and the `.debug_info` offset of the unit covering each, sorted by start: from
    /// `.debug_aranges`, else from the units' own ranges (read on first need).
    aranges: Option<Vec<(Range<u64>, usize)>>,
    /// The file the sections are mapped from, and the part of it that holds the sections used in place.
    data: MappedFile,
    mapped: Range<usize>,
    /// Indexed units, the most recently used last; bounded by [`UNITS_KEPT`] and [`UNITS_BUDGET`].
    units: Vec<UnitIndex>,
}

impl Dwarf {
    /// Load the DWARF sections of the ELF file held in `data`; None when it cannot be parsed.
    /// With `cache`, compressed sections come inflated from the cache's file of the build id, or are inflated
    /// and written there (see [`inflated`]).
    pub fn from_data(data: MappedFile, cache: Option<&InflatedCache>) -> Option<Dwarf> {
        let file = object::File::parse(&*data).ok()?;
        let build_id = cache.and(file.build_id().ok().flatten());
        let kept = cache
            .zip(build_id)
            .and_then(|(cache, id)| Inflated::open(&cache.dir, id));
        let mut compressed = Vec::new();
        let sections = gimli::DwarfSections::load(|id| -> Result<Reader, ()> {
            let inflate = Inflate {
                kept: kept.as_ref(),
                loaded: &mut compressed,
            };
            Ok(load_section(&data, &file, id, false, Some(inflate)))
        })
        .ok()?;
        if let Some((cache, id)) = cache.zip(build_id) {
            keep_inflated(cache, id, &compressed);
        }
        let mut mapped = data.len()..0;
        let _ = sections.borrow(|r| {
            if let Some(start) = (r.bytes().as_ptr() as usize).checked_sub(data.as_ptr() as usize) {
                if !r.is_empty() && start + r.len() <= data.len() {
                    mapped.start = mapped.start.min(start);
                    mapped.end = mapped.end.max(start + r.len());
                }
            }
        });
        let dwarf = sections.borrow(|r| r.clone());
        let mapped = mapped.start.min(mapped.end)..mapped.end;
        // Units and names lie all over the sections: no reading ahead around each page touched.
        data.advise_random(&data[mapped.clone()]);
        let aranges = Some(unit_ranges(&dwarf.debug_aranges)).filter(|a| !a.is_empty());
        Some(Dwarf {
            dies: Dies::new(dwarf, DIES_KEPT),
            aranges,
            data,
            mapped,
            units: Vec::new(),
        })
    }

    /// Release the mapped pages of the sections: they hold what the units looked at so far read.
    fn release_pages(&self) {
        self.data.release(&self.data[self.mapped.clone()]);
    }

    /// The frames at ELF address `addr`, outermost function first, then the functions inlined into it; with
    /// `lines`, each frame's source line (for outer frames: the call site of the next one).
    pub fn frames(&mut self, addr: u64, lines: bool) -> Vec<DwarfFrame> {
        let Some(unit) = self.unit_at(addr) else {
            return Vec::new();
        };
        let Some(i) = self.index(unit) else {
            return Vec::new();
        };
        let index = &mut self.units[i];
        // Split DWARF: the call sites' files are in the `.dwo`'s line table when it has one, else in the
        // skeleton's.
        let (dies, die_unit, calls_in_dwo) = match &mut index.dwo {
            Some((dies, unit)) => {
                let own_lines = dies.unit(*unit).is_ok_and(|u| u.line_program.is_some());
                (&mut **dies, *unit, own_lines)
            }
            None => (&mut self.dies, unit, true),
        };
        let Some(function) = index.functions.at(addr) else {
            // Code without a function DIE (assembly, `_init`) may still have lines.
            let source = if lines { self.line_at(i, addr) } else { None };
            return source
                .map(|source| DwarfFrame {
                    name: None,
                    source: Some(source),
                })
                .into_iter()
                .collect();
        };
        let chain = match dies.unit_ref(die_unit) {
            Ok(u) => inlined_at(u, function, addr).unwrap_or_default(),
            Err(_) => return Vec::new(),
        };
        let name = |dies: &mut Dies<Reader>, die: UnitOffset| {
            dies.function_name((die_unit, die)).ok().flatten()
        };
        let mut frames = vec![DwarfFrame {
            name: name(dies, function),
            source: None,
        }];
        let mut call_sites = Vec::new();
        for inlined in &chain {
            frames.push(DwarfFrame {
                name: name(dies, inlined.die),
                source: None,
            });
            if lines && calls_in_dwo {
                call_sites.push(call_site(dies, die_unit, &mut index.call_files, inlined));
            }
        }
        if lines && !calls_in_dwo {
            for inlined in &chain {
                call_sites.push(call_site(
                    &mut self.dies,
                    unit,
                    &mut index.call_files,
                    inlined,
                ));
            }
        }
        // Each frame's line is the call site of the one inlined into it; the innermost's, its own line.
        for (frame, source) in frames.iter_mut().zip(call_sites) {
            frame.source = source;
        }
        if lines {
            let innermost = self.line_at(i, addr);
            frames.last_mut().expect("the function's frame").source = innermost;
        }
        frames
    }

    /// The source line of the code at `addr` in the unit indexed at `i`, from its line table.
    fn line_at(&mut self, i: usize, addr: u64) -> Option<SourceLine> {
        let index = &mut self.units[i];
        let unit = self.dies.unit_ref(index.unit).ok()?;
        let (file, line) = index
            .lines
            .get_or_insert_with(|| Lines::of(unit))
            .at(addr)?;
        Some(SourceLine {
            file: index.row_files.get(unit, file)?,
            line,
        })
    }

    /// The `.debug_info` offset of the unit whose code holds `addr`; None when no unit covers it.
    fn unit_at(&mut self, addr: u64) -> Option<usize> {
        if self.aranges.is_none() {
            let ranges = units_own_ranges(&mut self.dies);
            self.release_pages();
            self.aranges = Some(ranges);
        }
        let aranges = self.aranges.as_deref()?;
        // Units' ranges do not overlap but for a few stray ones (code the linker dropped, at address 0).
        let i = aranges.partition_point(|(r, _)| r.start <= addr);
        aranges[..i]
            .iter()
            .rev()
            .take(64)
            .find(|(r, _)| r.contains(&addr))
            .map(|(_, unit)| *unit)
    }

    /// The position in `units` of the index of `unit`, made (and the pages its reading touched released)
    /// on first need; None when the unit cannot be read.
    fn index(&mut self, unit: usize) -> Option<usize> {
        if let Some(i) = self.units.iter().position(|u| u.unit == unit) {
            let used = self.units.remove(i);
            self.units.push(used);
            return Some(self.units.len() - 1);
        }
        let mut dwo = load_dwo(&mut self.dies, unit);
        let functions = match &mut dwo {
            Some((dies, u)) => Functions::of(dies.unit_ref(*u).ok()?).ok()?,
            None => Functions::of(self.dies.unit_ref(unit).ok()?).ok()?,
        };
        self.release_pages();
        self.make_room(functions.bytes());
        self.units.push(UnitIndex {
            unit,
            dwo,
            functions,
            lines: None,
            row_files: FileNames::default(),
            call_files: FileNames::default(),
        });
        Some(self.units.len() - 1)
    }
}

impl UnitIndex {
    fn bytes(&self) -> usize {
        self.functions.bytes() + self.lines.as_ref().map_or(0, Lines::bytes)
    }
}

impl Dwarf {
    /// Drop the least recently used units until one more of `bytes` fits (see [`UNITS_KEPT`]).
    fn make_room(&mut self, bytes: usize) {
        let mut held: usize = bytes + self.units.iter().map(UnitIndex::bytes).sum::<usize>();
        while self.units.len() >= UNITS_KEPT
            || (self.units.len() >= UNITS_KEPT_MIN && held > UNITS_BUDGET)
        {
            held -= self.units.remove(0).bytes();
        }
    }
}

/// Where an inlined function was called from, in the unit at `unit` of `dies`.
fn call_site(
    dies: &mut Dies<Reader>,
    unit: usize,
    files: &mut FileNames,
    inlined: &Inlined,
) -> Option<SourceLine> {
    let file = files.get(dies.unit_ref(unit).ok()?, inlined.call_file?)?;
    Some(SourceLine {
        file,
        line: inlined.call_line,
    })
}

/// The ranges of every unit, from the units themselves (for files without `.debug_aranges`), sorted by start.
fn units_own_ranges(dies: &mut Dies<Reader>) -> Vec<(Range<u64>, usize)> {
    let starts: Vec<usize> = match dies.bounds() {
        Ok(bounds) => bounds.iter().map(|r| r.start).collect(),
        Err(_) => return Vec::new(),
    };
    let mut out = Vec::new();
    for start in starts {
        let Ok(mut ranges) = dies.unit_ref(start).and_then(|u| u.unit_ranges()) else {
            continue;
        };
        while let Ok(Some(r)) = ranges.next() {
            if r.begin < r.end {
                out.push((r.begin..r.end, start));
            }
        }
    }
    out.sort_by_key(|(r, _)| r.start);
    out
}

/// The split DWARF of a skeleton unit: the `.dwo` file its `DW_AT_dwo_name` names (relative to its
/// compilation directory), and the unit's offset there. None for other units, and when the file cannot be
/// read (that unit then has no inlined frames).
fn load_dwo(dies: &mut Dies<Reader>, unit: usize) -> Option<(Box<Dies<Reader>>, usize)> {
    use std::os::unix::ffi::OsStrExt;
    let skeleton = dies.unit_ref(unit).ok()?;
    let name = skeleton.dwo_name().ok()??;
    let name = skeleton.attr_string(name).ok()?;
    let mut path = PathBuf::new();
    if let Some(dir) = &skeleton.comp_dir {
        path.push(std::ffi::OsStr::from_bytes(&dir.to_slice().ok()?));
    }
    path.push(std::ffi::OsStr::from_bytes(&name.to_slice().ok()?));
    let data = MappedFile::open(&path).ok()?;
    let file = object::File::parse(&*data).ok()?;
    let mut dwarf = gimli::Dwarf::load(|id| -> Result<Reader, ()> {
        Ok(load_section(&data, &file, id, true, None))
    })
    .ok()?;
    dwarf.make_dwo(&dies.dwarf);
    let header = dwarf.units().next().ok()??;
    let start = header.debug_info_offset()?.0;
    let mut dwo = Dies::new(dwarf, 2);
    dwo.split_from(dies.unit(unit).ok()?);
    Some((Box::new(dwo), start))
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

/// Where compressed sections come from and go: the sections kept inflated for the file's build id, and the
/// compressed sections loaded (name, bytes, whether they were inflated now).
struct Inflate<'a> {
    kept: Option<&'a Inflated>,
    loaded: &'a mut Vec<(&'static str, Reader, bool)>,
}

/// Write the compressed sections `loaded` into `cache` when some were inflated now (none kept yet, or some kept
/// at another length: all are written again).
fn keep_inflated(cache: &InflatedCache, build_id: &[u8], loaded: &[(&'static str, Reader, bool)]) {
    if !loaded.iter().any(|(_, _, now)| *now) {
        return;
    }
    let sections: Vec<(&str, &[u8])> = loaded
        .iter()
        .map(|(name, reader, _)| (*name, reader.bytes()))
        .collect();
    if let Err(e) = inflated::store(cache, build_id, &sections) {
        eprintln!(
            "rprof: warning: cannot keep inflated debug sections in {}: {e} (they are inflated again next time)",
            cache.dir.display()
        );
    }
}

/// One DWARF section of `file` (whose bytes are `data`); `dwo` picks the split-DWARF section names. Missing,
/// unreadable and never-needed sections are empty. With `inflate`, a compressed section is taken from the ones
/// kept inflated when they have it at its length, and noted.
fn load_section(
    data: &MappedFile,
    file: &object::File<'_>,
    id: SectionId,
    dwo: bool,
    inflate: Option<Inflate<'_>>,
) -> Reader {
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
                let name = id.name();
                let kept = inflate
                    .as_ref()
                    .and_then(|i| i.kept?.section(name, compressed.uncompressed_size));
                let (reader, now) = match kept {
                    Some((map, range)) => (Reader::new(map, endian).range(range), false),
                    None => match compressed.decompress() {
                        Ok(bytes) => (
                            Reader::new(MappedFile::from_vec(bytes.into_owned()), endian),
                            true,
                        ),
                        Err(_) => return empty,
                    },
                };
                if let Some(inflate) = inflate {
                    inflate.loaded.push((name, reader.clone(), now));
                }
                reader
            }
            _ => empty,
        },
    }
}

/// No bytes: a missing or unneeded section.
fn no_bytes() -> MappedFile {
    MappedFile::from_vec(Vec::new())
}
