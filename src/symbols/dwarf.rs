//! DWARF line tables and inlined frames through addr2line's `Context`.
//!
//! The sections are loaded here rather than by addr2line's `Loader`, for speed: the file is read once, sections
//! stored uncompressed are shared with it instead of copied, and the sections symbolization never reads
//! (location lists and macros, which describe variables and are large and compressed in distribution debug
//! files) are not decompressed. Split DWARF (`.dwo` files next to the compilation directory) is loaded on
//! demand, as the `Loader` does; DWARF packages (`.dwp`) are not searched.
use addr2line::{LookupContinuation, LookupResult, SplitDwarfLoad};
use gimli::{EndianArcSlice, Reader as _, RunTimeEndian, SectionId};
use object::{CompressionFormat, Object, ObjectSection};
use std::path::{Path, PathBuf};
use std::sync::Arc;

type Reader = EndianArcSlice<RunTimeEndian>;

/// One DWARF frame: the function name as stored (maybe mangled) and its `file:line`.
pub(crate) struct DwarfFrame {
    pub name: Option<String>,
    pub location: Option<String>,
}

/// The DWARF of one file (the binary itself or its separate debug file).
pub(crate) struct Dwarf {
    ctx: addr2line::Context<Reader>,
}

/// Load the DWARF sections of an ELF file held in `data`; `dwo` picks the split-DWARF section names.
fn load_dwarf(data: Arc<[u8]>, dwo: bool) -> Option<gimli::Dwarf<Reader>> {
    let file = object::File::parse(&*data).ok()?;
    let endian = if file.is_little_endian() {
        RunTimeEndian::Little
    } else {
        RunTimeEndian::Big
    };
    let empty = Reader::new(Arc::from(&[][..]), endian);
    let load = |id: SectionId| -> Result<Reader, ()> {
        // Location lists and macros describe variables and macros: symbolization never reads them.
        if matches!(
            id,
            SectionId::DebugLoc
                | SectionId::DebugLocLists
                | SectionId::DebugMacinfo
                | SectionId::DebugMacro
        ) {
            return Ok(empty.clone());
        }
        let name = if dwo { id.dwo_name() } else { Some(id.name()) };
        let Some(section) = name.and_then(|n| file.section_by_name(n)) else {
            return Ok(empty.clone());
        };
        match section.compressed_file_range() {
            // Stored as is: share the file's bytes.
            Ok(range) if range.format == CompressionFormat::None => {
                let start = usize::try_from(range.offset).map_err(drop)?;
                let end = usize::try_from(range.offset + range.uncompressed_size).map_err(drop)?;
                if end > data.len() {
                    return Ok(empty.clone());
                }
                Ok(Reader::new(Arc::clone(&data), endian).range(start..end))
            }
            _ => match section.uncompressed_data() {
                Ok(bytes) => Ok(Reader::new(Arc::from(&*bytes), endian)),
                Err(_) => Ok(empty.clone()),
            },
        }
    };
    gimli::Dwarf::load(load).ok()
}

impl Dwarf {
    /// Load the DWARF of `path`; None when it cannot be parsed.
    pub fn open(path: &Path) -> Option<Dwarf> {
        let data: Arc<[u8]> = Arc::from(std::fs::read(path).ok()?);
        let mut dwarf = load_dwarf(data, false)?;
        dwarf.populate_abbreviations_cache(gimli::AbbreviationsCacheStrategy::Duplicates);
        let ctx = addr2line::Context::from_dwarf(dwarf).ok()?;
        Some(Dwarf { ctx })
    }

    /// The frames at ELF address `addr`, outermost function first, then the functions inlined into it.
    /// Each frame's location is the line inside that frame (for outer frames: the call site of the next one).
    pub fn frames(&self, addr: u64) -> Vec<DwarfFrame> {
        let mut frames = Vec::new();
        let mut lookup = self.ctx.find_frames(addr);
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
            let location = frame.location.as_ref().and_then(|loc| {
                let file = loc.file?;
                Some(match loc.line {
                    Some(line) => format!("{file}:{line}"),
                    None => file.to_string(),
                })
            });
            frames.push(DwarfFrame { name, location });
        }
        frames.reverse();
        frames
    }
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
    let data: Arc<[u8]> = Arc::from(std::fs::read(&path).ok()?);
    let mut dwo = load_dwarf(data, true)?;
    dwo.make_dwo(&load.parent);
    Some(Arc::new(dwo))
}
