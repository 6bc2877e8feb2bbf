//! The interpreter files of CPython: which files are interpreters (by name, by `Py_Version`), and the dynamic
//! symbols rprof reads a process's Python state from (`_PyRuntime`, `Py_Version`, `_PyEval_EvalFrameDefault`,
//! `PyCode_Type`), read once per file identity.
use crate::elf_layout::ElfLayout;
use crate::process;
use object::{Object, ObjectSection, ObjectSymbol};
use std::collections::HashMap;
use std::path::Path;

/// The dynamic symbols rprof needs from the interpreter's binary, as ELF addresses.
#[derive(Clone, Copy)]
pub(super) struct Symbols {
    pub(super) runtime: u64,
    pub(super) version: Option<u64>,
    pub(super) eval: Option<(u64, u64)>,
    pub(super) code_type: Option<u64>,
}

/// An interpreter file as found on disk: (device, inode, size, modification time in ns).
type FileIdentity = (u64, u64, u64, i64);

/// The symbols and layout of each interpreter file read so far, by identity: a host runs many processes of
/// one python, and `record -a` looks at each new one (reading a 30 MB libpython for each cost a push most of
/// its CPU). A file replaced in place has another identity.
static SYMBOLS_SEEN: std::sync::LazyLock<std::sync::Mutex<HashMap<FileIdentity, Interpreter>>> =
    std::sync::LazyLock::new(Default::default);

/// What an interpreter file gives: its symbols and layout, or nothing (not an interpreter rprof can read).
pub(super) type Interpreter = Option<(Symbols, ElfLayout)>;

pub(super) fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// `python3.11`, `libpython3.11.so.1.0`, `python3.12d`, `python3.13t` (not `python3.11-config`).
pub fn is_python_file(path: &str) -> bool {
    path.starts_with('/') && version_of_name(path).is_some()
}

/// The `major.minor` in an interpreter's file name.
pub(super) fn version_of_name(path: &str) -> Option<(u32, u32)> {
    let name = file_name(path);
    let rest = name
        .strip_prefix("libpython")
        .or_else(|| name.strip_prefix("python"))?;
    let (major, rest) = rest.split_once('.')?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    // A free-threaded build's `t` (3.13t), a debug build's `d`.
    let after = &rest[digits.len()..];
    let after = after.strip_prefix('t').unwrap_or(after);
    let after = after.strip_prefix('d').unwrap_or(after);
    if !(after.is_empty() || after.starts_with(".so")) {
        return None;
    }
    Some((major.parse().ok()?, digits.parse().ok()?))
}

/// The CPython `major.minor` of an interpreter file (a python binary or libpython): its `Py_Version`
/// (3.11+), else the version in its file name (after symbolic links). None for any other file.
pub fn version_of_file(path: &Path) -> Option<(u32, u32)> {
    let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let data = std::fs::read(&real).ok()?;
    let from_name = || version_of_name(&real.to_string_lossy());
    let Ok(elf) = object::File::parse(&*data) else {
        return from_name();
    };
    let version = elf
        .dynamic_symbols()
        .chain(elf.symbols())
        .find(|s| s.name() == Ok("Py_Version"))
        .and_then(|s| {
            let section = elf.section_by_index(s.section_index()?).ok()?;
            let bytes = section.data_range(s.address(), 4).ok()??;
            Some(u32::from_le_bytes(bytes.try_into().ok()?))
        });
    match version {
        Some(v) => Some((v >> 24, (v >> 16) & 0xff)),
        None => from_name(),
    }
}

/// `_PyRuntime`, `Py_Version` and `_PyEval_EvalFrameDefault` from the dynamic symbols of `path` (as process
/// `pid` sees it), with the file's load layout.
pub(super) fn read_symbols(pid: u32, path: &str) -> Interpreter {
    use std::os::unix::fs::MetadataExt;
    let (file, found_at) = process::open_target_file(pid, Path::new(path)).ok()?;
    let meta = file.metadata().ok()?;
    let id = (
        meta.dev(),
        meta.ino(),
        meta.size(),
        meta.mtime_nsec() + meta.mtime() * 1_000_000_000,
    );
    let mut seen = SYMBOLS_SEEN.lock().unwrap_or_else(|e| e.into_inner());
    seen.entry(id)
        .or_insert_with(|| symbols_of(&found_at))
        .clone()
}

/// The symbols rprof needs from an interpreter file, and its layout (the file mapped, not read: only its
/// headers and symbol tables are touched).
fn symbols_of(path: &Path) -> Interpreter {
    let data = crate::mapped::MappedFile::open(path).ok()?;
    let elf = object::File::parse(&*data).ok()?;
    let mut syms = Symbols {
        runtime: 0,
        version: None,
        eval: None,
        code_type: None,
    };
    for s in elf.dynamic_symbols().chain(elf.symbols()) {
        match s.name() {
            Ok("_PyRuntime") => syms.runtime = s.address(),
            Ok("Py_Version") => syms.version = Some(s.address()),
            Ok("_PyEval_EvalFrameDefault") => syms.eval = Some((s.address(), s.size())),
            Ok("PyCode_Type") => syms.code_type = Some(s.address()),
            _ => {}
        }
    }
    (syms.runtime != 0).then(|| (syms, ElfLayout::of(&elf)))
}
