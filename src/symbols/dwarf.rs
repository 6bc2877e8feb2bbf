//! DWARF line tables and inlined frames through addr2line's `Loader`.
use std::path::Path;

/// One DWARF frame: the function name as stored (maybe mangled) and its `file:line`.
pub(crate) struct DwarfFrame {
    pub name: Option<String>,
    pub location: Option<String>,
}

/// The DWARF of one file (the binary itself or its separate debug file).
pub(crate) struct Dwarf {
    loader: addr2line::Loader,
}

impl Dwarf {
    /// Load the DWARF of `path`; None when it cannot be parsed.
    pub fn open(path: &Path) -> Option<Dwarf> {
        addr2line::Loader::new(path)
            .ok()
            .map(|loader| Dwarf { loader })
    }

    /// The frames at ELF address `addr`, outermost function first, then the functions inlined into it.
    /// Each frame's location is the line inside that frame (for outer frames: the call site of the next one).
    pub fn frames(&self, addr: u64) -> Vec<DwarfFrame> {
        let mut frames = Vec::new();
        let Ok(mut iter) = self.loader.find_frames(addr) else {
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
