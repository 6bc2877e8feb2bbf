//! The module cache's pieces: a mapped file's load layout (PT_LOAD segments, load bias, code range), its unwind
//! sections (`.eh_frame`, or a larger `.debug_frame` from the file or its separate debug file) and the framehop
//! module built from them.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use framehop::{ExplicitModuleSectionInfo, Module};
use object::read::ReadCache;
use object::{Object, ObjectSection, ReadRef};

use crate::elf_layout::ElfLayout;

/// Paths whose layout is remembered at most; past this the layout cache is cleared.
pub(super) const MAX_LAYOUTS: usize = 4096;

/// Why a module could not be loaded (kept private: a module that fails to load is unwound with frame pointers).
#[derive(Debug, thiserror::Error)]
pub(super) enum ModuleError {
    #[error("Could not open {path}: {source}")]
    Open {
        path: String,
        source: std::io::Error,
    },
    #[error("Could not parse the ELF file {path}: {source}")]
    Parse { path: String, source: object::Error },
    #[error("{0} is not a file on disk (anonymous or special mapping)")]
    NotAFile(String),
}

/// A module in the cache: one ELF file at one load bias. Modules are shared by all processes that map them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct ModuleKey {
    pub(super) path: Arc<str>,
    pub(super) bias: u64,
}

/// Find the module key of a mapping: the file's layout (cached per path) gives the load bias.
pub(super) fn resolve_key(
    layouts: &mut HashMap<Arc<str>, Option<Arc<ElfLayout>>>,
    vdso: &mut Option<Option<Arc<[u8]>>>,
    pid: u32,
    start: u64,
    pgoff: u64,
    path: &Arc<str>,
) -> Option<ModuleKey> {
    let layout = match layouts.get(path) {
        Some(layout) => layout.clone(),
        None => {
            if layouts.len() >= MAX_LAYOUTS {
                layouts.clear();
            }
            let layout = read_layout(vdso, pid, path).ok().map(Arc::new);
            layouts.insert(path.clone(), layout.clone());
            layout
        }
    };
    let layout = layout?;
    Some(ModuleKey {
        path: path.clone(),
        bias: layout.bias(start, pgoff),
    })
}

pub(super) fn read_layout(
    vdso: &mut Option<Option<Arc<[u8]>>>,
    pid: u32,
    path: &str,
) -> Result<ElfLayout, ModuleError> {
    if path == "[vdso]" {
        let bytes = vdso
            .get_or_insert_with(|| read_own_vdso().map(Arc::from))
            .clone()
            .ok_or_else(|| ModuleError::NotAFile(path.to_string()))?;
        let obj = object::File::parse(&*bytes).map_err(|source| ModuleError::Parse {
            path: path.to_string(),
            source,
        })?;
        return Ok(ElfLayout::of(&obj));
    }
    let (file, shown) = open_file(pid, path)?;
    let cache = ReadCache::new(file);
    let obj = object::File::parse(&cache).map_err(|source| ModuleError::Parse {
        path: shown,
        source,
    })?;
    Ok(ElfLayout::of(&obj))
}

/// Open a mapped file: its path as is, else through the process's root (containers).
pub(super) fn open_file(pid: u32, path: &str) -> Result<(File, String), ModuleError> {
    if !path.starts_with('/') || path.starts_with("//anon") || path.starts_with("/memfd:") {
        return Err(ModuleError::NotAFile(path.to_string()));
    }
    crate::process::open_target_file(pid, Path::new(path))
        .map(|(file, opened)| (file, opened.display().to_string()))
        .map_err(|source| ModuleError::Open {
            path: path.to_string(),
            source,
        })
}

/// The unwind-related sections of an ELF file, copied out (only CFI is kept in memory, not the whole file).
///
/// framehop uses either `.eh_frame` or `.debug_frame`, never both. Compilers emit one of them per function, so
/// the larger one covers the code that matters: `.eh_frame` normally, `.debug_frame` for code built with
/// `-fno-asynchronous-unwind-tables -g` (where `.eh_frame` only holds the C runtime's few entries).
fn section_info<'data, R: ReadRef<'data>>(
    obj: &object::File<'data, R>,
) -> ExplicitModuleSectionInfo<Vec<u8>> {
    let range = |name: &str| {
        obj.section_by_name(name)
            .map(|s| s.address()..s.address() + s.size())
    };
    let mut info = ExplicitModuleSectionInfo {
        base_svma: 0,
        text_svma: range(".text"),
        got_svma: range(".got"),
        eh_frame_svma: range(".eh_frame"),
        eh_frame_hdr_svma: range(".eh_frame_hdr"),
        ..Default::default()
    };
    if section_size(obj, ".debug_frame") > section_size(obj, ".eh_frame") {
        if let Some(debug_frame) = section_bytes(obj, ".debug_frame") {
            use_debug_frame(&mut info, debug_frame);
            return info;
        }
    }
    info.eh_frame = section_bytes(obj, ".eh_frame");
    if info.eh_frame.is_some() {
        info.eh_frame_hdr = section_bytes(obj, ".eh_frame_hdr");
    }
    info
}

/// Unwind with `.debug_frame` only (framehop would ignore it next to an `.eh_frame`).
fn use_debug_frame(info: &mut ExplicitModuleSectionInfo<Vec<u8>>, debug_frame: Vec<u8>) {
    info.eh_frame = None;
    info.eh_frame_hdr = None;
    info.debug_frame = Some(debug_frame);
}

/// The uncompressed size of a section (0 if absent).
fn section_size<'data, R: ReadRef<'data>>(obj: &object::File<'data, R>, name: &str) -> u64 {
    obj.section_by_name(name)
        .and_then(|s| s.compressed_data().ok())
        .map_or(0, |c| c.uncompressed_size)
}

/// The (uncompressed) bytes of a section, if present and not empty.
fn section_bytes<'data, R: ReadRef<'data>>(
    obj: &object::File<'data, R>,
    name: &str,
) -> Option<Vec<u8>> {
    let section = obj.section_by_name(name)?;
    // A corrupt compression header must not size an allocation.
    let compressed = section.compressed_data().ok()?;
    if !crate::elf_layout::fits_expansion(&compressed) {
        return None;
    }
    let data = compressed.decompress().ok()?;
    if data.is_empty() {
        None
    } else {
        Some(data.into_owned())
    }
}

/// This process's vDSO image (the same as every other 64-bit process's on this kernel).
pub(super) fn read_own_vdso() -> Option<Vec<u8>> {
    crate::buildid::running_vdso_image()
}

/// Read the unwind sections of the file of `key` and build the framehop module at its load bias.
pub(super) fn load_module(
    pid: u32,
    key: &ModuleKey,
    layout: &ElfLayout,
    vdso: Option<&[u8]>,
    debug_dirs: &[PathBuf],
) -> Result<Module<Vec<u8>>, ModuleError> {
    let mut info = if &*key.path == "[vdso]" {
        let Some(bytes) = vdso else {
            return Err(ModuleError::NotAFile(key.path.to_string()));
        };
        let file = object::File::parse(bytes).map_err(|source| ModuleError::Parse {
            path: key.path.to_string(),
            source,
        })?;
        section_info(&file)
    } else {
        let (file, shown) = open_file(pid, &key.path)?;
        let cache = ReadCache::new(file);
        let obj = object::File::parse(&cache).map_err(|source| ModuleError::Parse {
            path: shown.clone(),
            source,
        })?;
        let mut info = section_info(&obj);
        if info.debug_frame.is_none() {
            let eh_frame_len = info.eh_frame.as_ref().map_or(0, |d| d.len() as u64);
            let from_debug_file = obj
                .build_id()
                .ok()
                .flatten()
                .and_then(|id| debug_frame_from_debug_file(debug_dirs, id, eh_frame_len));
            if let Some(debug_frame) = from_debug_file {
                use_debug_frame(&mut info, debug_frame);
            }
        }
        info
    };
    info.base_svma = 0;
    let code = layout.code_range();
    let avma_range = code.start.wrapping_add(key.bias)..code.end.wrapping_add(key.bias);
    Ok(Module::new(
        key.path.to_string(),
        avma_range,
        key.bias,
        info,
    ))
}

/// The `.debug_frame` of the separate debug file with this build-id, if one of the debug dirs has it and it
/// is larger than `than` bytes (the size of the `.eh_frame` it would replace).
fn debug_frame_from_debug_file(
    debug_dirs: &[PathBuf],
    build_id: &[u8],
    than: u64,
) -> Option<Vec<u8>> {
    for dir in debug_dirs {
        let path = crate::buildid::debug_file_path(dir, build_id)?;
        let Ok(file) = File::open(&path) else {
            continue;
        };
        let cache = ReadCache::new(file);
        let Ok(obj) = object::File::parse(&cache) else {
            continue;
        };
        if section_size(&obj, ".debug_frame") > than {
            return section_bytes(&obj, ".debug_frame");
        }
    }
    None
}
