//! Separate debug files: `DIR/.build-id/ab/cdef….debug` and `.gnu_debuglink` (next to the binary, in its
//! `.debug/` subdirectory, and in `DIR/<binary's dir>/`).
use crate::buildid::{debug_file_path, file_build_id};
use std::io::Read;
use std::path::{Path, PathBuf};

/// What the binary says about its debug file.
pub(crate) struct DebugHints<'a> {
    /// The file actually opened (maybe through `/proc/PID/root`).
    pub opened: &'a Path,
    /// The path the process mapped (used for `DEBUGDIR/<dir>/`).
    pub original: &'a Path,
    pub build_id: Option<&'a [u8]>,
    /// `.gnu_debuglink`: file name and CRC-32 of the debug file.
    pub debuglink: Option<(&'a [u8], u32)>,
}

/// The result of a search: the debug file found, and every path looked at (for error messages).
pub(crate) struct DebugSearch {
    pub found: Option<PathBuf>,
    pub searched: Vec<PathBuf>,
}

/// CRC-32 (the one `.gnu_debuglink` uses) of a whole file.
fn file_crc32(path: &Path) -> Option<u32> {
    let mut file = std::fs::File::open(path).ok()?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf).ok()?;
        if n == 0 {
            return Some(hasher.finalize());
        }
        hasher.update(&buf[..n]);
    }
}

/// The debug file of build id `build_id` in the first of `debug_dirs` that has it (`DIR/.build-id/ab/cdef….debug`,
/// its own build id checked); each path looked at goes to `searched`.
pub(crate) fn by_build_id(
    build_id: &[u8],
    debug_dirs: &[PathBuf],
    searched: &mut Vec<PathBuf>,
) -> Option<PathBuf> {
    for dir in debug_dirs {
        let Some(candidate) = debug_file_path(dir, build_id) else {
            continue;
        };
        searched.push(candidate.clone());
        if candidate.is_file() && file_build_id(&candidate).as_deref() == Some(build_id) {
            return Some(candidate);
        }
    }
    None
}

/// Find the separate debug file of a binary.
pub(crate) fn find_debug_file(hints: &DebugHints<'_>, debug_dirs: &[PathBuf]) -> DebugSearch {
    let mut searched = Vec::new();
    if let Some(found) = hints
        .build_id
        .and_then(|id| by_build_id(id, debug_dirs, &mut searched))
    {
        return DebugSearch {
            found: Some(found),
            searched,
        };
    }
    if let Some((name, crc)) = hints.debuglink {
        let name = Path::new(std::ffi::OsStr::new(
            std::str::from_utf8(name).unwrap_or_default(),
        ));
        if name.as_os_str().is_empty() {
            return DebugSearch {
                found: None,
                searched,
            };
        }
        let mut candidates = Vec::new();
        if let Some(dir) = hints.opened.parent() {
            candidates.push(dir.join(name));
            candidates.push(dir.join(".debug").join(name));
        }
        if let Some(dir) = hints.original.parent() {
            let relative = dir.strip_prefix("/").unwrap_or(dir);
            for debug_dir in debug_dirs {
                candidates.push(debug_dir.join(relative).join(name));
            }
        }
        for candidate in candidates {
            searched.push(candidate.clone());
            if !candidate.is_file() || same_file(&candidate, hints.opened) {
                continue;
            }
            // A matching build id is proof enough; otherwise check the CRC the binary recorded.
            let matches = match (hints.build_id, file_build_id(&candidate)) {
                (Some(expected), Some(found)) => expected == found.as_slice(),
                _ => file_crc32(&candidate) == Some(crc),
            };
            if matches {
                return DebugSearch {
                    found: Some(candidate),
                    searched,
                };
            }
        }
    }
    DebugSearch {
        found: None,
        searched,
    }
}

/// True when both paths name the same file.
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}
