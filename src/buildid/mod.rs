//! Build ids and the build-id cache: the facts `record` writes down and `symbols` and `unwind` look up.
//!
//! - The cache directory (`$PERF_BUILDID_DIR`, else `~/.debug`) and perf's layout in it:
//!   `[kernel.kallsyms]/<id>/kallsyms`, `[vdso]/<id>/vdso`, `PATH/<id>/elf` (user binaries, [`binaries`]),
//!   and the links `.build-id/xx/rest`; the record of what rprof added, for its size bound ([`ledger`]).
//! - The separate debug file of a build id under a debug directory: `DIR/.build-id/xx/rest.debug`.
//! - The running kernel: its build id (/sys/kernel/notes), its `_text` address, its kallsyms text, and its vDSO
//!   image (read from this process's memory).
//! - A file's build id, and the hex spelling of build ids.
//!
//! It sits below both `record` (which stores the copies and names the build ids in the recording) and
//! `symbols` (which reads them back), so neither depends on the other for these facts.
use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};

mod binaries;
pub mod ledger;

pub use binaries::{cached_elf_path, find_cached_binary, Keeper, Kept, DEFAULT_BOUND};

/// The name under which processes map the kernel's vDSO (and perf records it).
pub const VDSO: &str = "[vdso]";

/// Lowercase hex of a build id (or any bytes).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The build-id cache directory: `$PERF_BUILDID_DIR`, else `$HOME/.debug`. perf itself takes its directory
/// from `perf --buildid-dir DIR`, else `$HOME/.debug`, and sets PERF_BUILDID_DIR to it for the programs it
/// runs (perf-archive reads it too).
pub fn buildid_dir() -> Option<PathBuf> {
    match std::env::var_os("PERF_BUILDID_DIR") {
        Some(dir) if !dir.is_empty() => Some(PathBuf::from(dir)),
        _ => std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".debug")),
    }
}

/// Where the cached kallsyms of kernel `build_id` lives under `dir`.
pub fn cached_kallsyms_path(dir: &Path, build_id: &[u8]) -> PathBuf {
    dir.join("[kernel.kallsyms]")
        .join(hex(build_id))
        .join("kallsyms")
}

/// Where the cached vDSO image of build id `build_id` lives under `dir` (perf's layout).
pub fn cached_vdso_path(dir: &Path, build_id: &[u8]) -> PathBuf {
    dir.join(VDSO).join(hex(build_id)).join("vdso")
}

/// The separate debug file of `build_id` under the debug directory `dir`: `DIR/.build-id/xx/rest.debug`.
/// None for a build id shorter than two bytes.
pub fn debug_file_path(dir: &Path, build_id: &[u8]) -> Option<PathBuf> {
    let (first, rest) = build_id_link(build_id)?;
    Some(
        dir.join(".build-id")
            .join(first)
            .join(format!("{rest}.debug")),
    )
}

/// The two parts of a build id's `.build-id/xx/rest` name: its first byte and the rest, in hex.
fn build_id_link(build_id: &[u8]) -> Option<(String, String)> {
    if build_id.len() < 2 {
        return None;
    }
    let id = hex(build_id);
    Some((id[..2].to_string(), id[2..].to_string()))
}

/// The build id of an ELF file read from `file`; None when it is not ELF or has no build-id note.
///
/// Only the ELF header, the section (else program) headers with their names and the notes are read: a whole
/// `object::File` parse also reads the symbol tables (megabytes for a compiler), which a host starting new
/// processes paid at every process of a big binary (`--push-unsymbolized` reads build ids per process).
pub fn read_build_id(file: &std::fs::File) -> Option<Vec<u8>> {
    build_id_from(object::ReadCache::new(file))
}

/// [`read_build_id`] from any reader (the tests count the bytes it reads).
fn build_id_from<R: object::ReadCacheOps>(cache: object::ReadCache<R>) -> Option<Vec<u8>> {
    use object::elf::{FileHeader32, FileHeader64};
    use object::{Endianness, FileKind};
    match FileKind::parse(&cache).ok()? {
        FileKind::Elf32 => elf_build_id::<FileHeader32<Endianness>, _>(&cache),
        FileKind::Elf64 => elf_build_id::<FileHeader64<Endianness>, _>(&cache),
        _ => None,
    }
}

/// The GNU build-id note of an ELF file: in its note sections, or in its note segments when it has no section
/// headers (as `object`'s own `build_id` looks).
fn elf_build_id<'d, Elf: object::read::elf::FileHeader, R: object::ReadRef<'d>>(
    data: R,
) -> Option<Vec<u8>> {
    use object::read::elf::{ProgramHeader, SectionHeader};
    let header = Elf::parse(data).ok()?;
    let endian = header.endian().ok()?;
    let sections = header.sections(endian, data).ok()?;
    let mut found = None;
    let check = |notes: Option<object::read::elf::NoteIterator<'d, Elf>>| {
        let mut notes = notes?;
        while let Ok(Some(note)) = notes.next() {
            if note.name() == object::elf::ELF_NOTE_GNU
                && note.n_type(endian) == object::elf::NT_GNU_BUILD_ID
            {
                return Some(note.desc().to_vec());
            }
        }
        None
    };
    if !sections.is_empty() {
        for section in sections.iter() {
            found = found.or_else(|| check(section.notes(endian, data).ok().flatten()));
        }
    } else {
        for segment in header.program_headers(endian, data).ok()? {
            found = found.or_else(|| check(segment.notes(endian, data).ok().flatten()));
        }
    }
    found
}

/// The build id of the ELF file at `path`, if it can be read.
pub fn file_build_id(path: &Path) -> Option<Vec<u8>> {
    read_build_id(&std::fs::File::open(path).ok()?)
}

/// The running kernel's build id, from the GNU build-id note in /sys/kernel/notes.
pub fn running_build_id() -> Option<Vec<u8>> {
    let notes = std::fs::read("/sys/kernel/notes").ok()?;
    notes_build_id(&notes)
}

/// The NT_GNU_BUILD_ID note's descriptor in a sequence of ELF notes (4-byte aligned, native endian).
fn notes_build_id(notes: &[u8]) -> Option<Vec<u8>> {
    use object::elf::{FileHeader64, NT_GNU_BUILD_ID};
    let endian = object::NativeEndian;
    let mut iter = object::read::elf::NoteIterator::<FileHeader64<object::NativeEndian>>::new(
        endian, 4, notes,
    )
    .ok()?;
    while let Ok(Some(note)) = iter.next() {
        if note.name() == b"GNU" && note.n_type(endian) == NT_GNU_BUILD_ID {
            return Some(note.desc().to_vec());
        }
    }
    None
}

/// The running kernel's `_text` address, from the head of /proc/kallsyms (it is among the first lines, so the
/// kernel formats only a few thousand symbols, not all of them). None when hidden (all zeros) or not found.
/// Read once per process (it changes only with a boot; a push asks three times as it starts).
pub fn running_text() -> Option<u64> {
    static TEXT: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *TEXT.get_or_init(read_running_text)
}

fn read_running_text() -> Option<u64> {
    let file = std::fs::File::open("/proc/kallsyms").ok()?;
    let mut reader = std::io::BufReader::with_capacity(64 << 10, file);
    let mut line = Vec::new();
    // Per-CPU symbols ('A', address 0) may come first; _text is the first text address.
    for _ in 0..100_000 {
        line.clear();
        if reader.read_until(b'\n', &mut line).ok()? == 0 {
            return None;
        }
        let line = String::from_utf8_lossy(&line);
        let mut fields = line.split_whitespace();
        let (Some(addr), Some(_), Some(name)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if name == "_text" {
            return u64::from_str_radix(addr, 16).ok().filter(|&a| a != 0);
        }
    }
    None
}

/// The text of a kallsyms file (/proc/kallsyms reports a size of 0, so the buffer is sized for a typical kernel
/// rather than grown from nothing).
pub fn read_kallsyms_text(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut data = Vec::with_capacity(8 << 20);
    std::fs::File::open(path)?.read_to_end(&mut data)?;
    Ok(data)
}

/// Copy the running kernel's /proc/kallsyms into the build-id cache under `dir` unless a copy is there, as
/// `perf record` does. Returns the copy's path and whether it was written now.
pub fn store_kallsyms(dir: &Path, build_id: &[u8]) -> std::io::Result<(PathBuf, bool)> {
    let path = cached_kallsyms_path(dir, build_id);
    if path.is_file() {
        return Ok((path, false));
    }
    let data = read_kallsyms_text(Path::new("/proc/kallsyms"))?;
    let (bytes, inode) = store(
        dir,
        Path::new("[kernel.kallsyms]"),
        build_id,
        &path,
        &mut &data[..],
    )?;
    note_added(dir, &path, bytes, inode);
    Ok((path, true))
}

/// [`store_kallsyms`], with a warning (naming `-N`) when the copy cannot be written.
pub fn keep_kallsyms(dir: &Path, build_id: &[u8]) {
    if let Err(e) = store_kallsyms(dir, build_id) {
        eprintln!(
            "rprof: warning: cannot keep a copy of /proc/kallsyms in {}: {e} (use -N to skip)",
            dir.display()
        );
    }
}

/// This process's vDSO image (the running kernel's), read from its own memory.
pub fn running_vdso_image() -> Option<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let line = maps.lines().find(|l| l.ends_with(" [vdso]"))?;
    let (start, end) = line.split_whitespace().next()?.split_once('-')?;
    let start = u64::from_str_radix(start, 16).ok()?;
    let end = u64::from_str_radix(end, 16).ok()?;
    let mut image = vec![0; usize::try_from(end.checked_sub(start)?).ok()?];
    std::fs::File::open("/proc/self/mem")
        .ok()?
        .read_exact_at(&mut image, start)
        .ok()?;
    Some(image)
}

/// This process's vDSO image (the running kernel's) and its build id.
pub fn running_vdso() -> Option<(Vec<u8>, Vec<u8>)> {
    let image = running_vdso_image()?;
    let build_id = {
        let file = object::File::parse(&*image).ok()?;
        object::Object::build_id(&file).ok()??.to_vec()
    };
    Some((image, build_id))
}

/// Keep a copy of the running vDSO in the build-id cache under `dir` unless one is there, as `perf record`
/// does, so that a report names `[vdso]` frames also on another kernel. Returns the vDSO's build id.
pub fn store_vdso(dir: &Path) -> std::io::Result<Option<Vec<u8>>> {
    let Some((image, build_id)) = running_vdso() else {
        return Ok(None);
    };
    let path = cached_vdso_path(dir, &build_id);
    if !path.is_file() {
        let (bytes, inode) = store(dir, Path::new(VDSO), &build_id, &path, &mut &image[..])?;
        note_added(dir, &path, bytes, inode);
    }
    Ok(Some(build_id))
}

/// Note a copy rprof wrote at `path` in the ledger of cache `dir` (a copy left out of it is never evicted).
fn note_added(dir: &Path, path: &Path, bytes: u64, inode: u64) {
    let Ok(mut ledger) = ledger::Ledger::open(dir) else {
        return;
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    ledger.note(path.strip_prefix(dir).unwrap_or(path), bytes, inode, now);
    let _ = ledger.save();
}

/// Write what `source` reads to `path` in the build-id cache `dir` (through a temporary name and a rename, so a
/// concurrent reader never sees half a file), and link it from `.build-id/xx/rest` to `../../KIND/ID` as perf
/// does (KIND: `[vdso]`, `[kernel.kallsyms]`, or a binary's path without its leading `/`). Returns the copy's
/// size and inode.
fn store(
    dir: &Path,
    kind: &Path,
    build_id: &[u8],
    path: &Path,
    source: &mut dyn Read,
) -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let parent = path.parent().unwrap_or(dir);
    std::fs::create_dir_all(parent)?;
    let temporary = parent.join(format!(".tmp.{}", std::process::id()));
    let written = std::fs::File::create(&temporary)
        .and_then(|mut f| std::io::copy(source, &mut f).and_then(|_| f.metadata()))
        .and_then(|meta| std::fs::rename(&temporary, path).map(|()| meta));
    let meta = match written {
        Ok(meta) => meta,
        Err(e) => {
            let _ = std::fs::remove_file(&temporary);
            return Err(e);
        }
    };
    if let Some((first, rest)) = build_id_link(build_id) {
        let link_dir = dir.join(".build-id").join(first);
        if std::fs::create_dir_all(&link_dir).is_ok() {
            let target = Path::new("../..").join(kind).join(hex(build_id));
            let _ = std::os::unix::fs::symlink(target, link_dir.join(rest));
        }
    }
    Ok((meta.len(), meta.ino()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check the build-id note parser on a hand-made note sequence.
    #[test]
    fn parses_build_id_note() {
        let mut notes = Vec::new();
        // An unrelated note first ("Linux", type 6, 4-byte desc).
        for v in [6u32, 4, 6] {
            notes.extend_from_slice(&v.to_ne_bytes());
        }
        notes.extend_from_slice(b"Linux\0\0\0");
        notes.extend_from_slice(&[1, 2, 3, 4]);
        for v in [4u32, 3, 3] {
            notes.extend_from_slice(&v.to_ne_bytes());
        }
        notes.extend_from_slice(b"GNU\0");
        notes.extend_from_slice(&[0xaa, 0xbb, 0xcc]);
        notes.push(0);
        assert_eq!(notes_build_id(&notes), Some(vec![0xaa, 0xbb, 0xcc]));
        assert_eq!(notes_build_id(&[]), None);
    }

    /// A reader that counts the bytes read through it.
    struct Counting<'a>(std::fs::File, &'a std::cell::Cell<u64>);

    impl std::io::Read for Counting<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.0.read(buf)?;
            self.1.set(self.1.get() + n as u64);
            Ok(n)
        }
    }

    impl std::io::Seek for Counting<'_> {
        fn seek(&mut self, pos: std::io::SeekFrom) -> std::io::Result<u64> {
            self.0.seek(pos)
        }
    }

    /// The build id of this test binary (tens of MB, with symbol tables) is found reading a few KiB: its headers
    /// and notes, not its symbol tables, which a whole `object::File` parse reads (measured the same way); and
    /// it is the id that parse finds.
    #[test]
    fn build_id_reads_headers_and_notes_only() {
        let exe = std::env::current_exe().unwrap();
        let open = || std::fs::File::open(&exe).unwrap();
        let ours = std::cell::Cell::new(0);
        let id = build_id_from(object::ReadCache::new(Counting(open(), &ours)));
        let whole = std::cell::Cell::new(0);
        let cache = object::ReadCache::new(Counting(open(), &whole));
        let parsed = object::File::parse(&cache).unwrap();
        let expected = object::Object::build_id(&parsed)
            .unwrap()
            .map(<[u8]>::to_vec);
        assert!(expected.is_some(), "the test binary has no build id");
        assert_eq!(id, expected);
        assert!(
            ours.get() < 64 << 10,
            "read {} bytes for a build id",
            ours.get()
        );
        assert!(
            whole.get() > 10 * ours.get(),
            "whole parse {} bytes, ours {}",
            whole.get(),
            ours.get()
        );
        eprintln!(
            "build id: {} bytes read; whole parse: {}",
            ours.get(),
            whole.get()
        );
    }

    /// Check that the debug-file path splits the first byte into a directory.
    #[test]
    fn debug_file_path_layout() {
        let p = debug_file_path(Path::new("/usr/lib/debug"), &[0xab, 0xcd, 0xef, 0x01]).unwrap();
        assert_eq!(p, Path::new("/usr/lib/debug/.build-id/ab/cdef01.debug"));
        assert!(debug_file_path(Path::new("/x"), &[1]).is_none());
    }

    /// Check perf's cache layout for kallsyms and vDSO copies.
    #[test]
    fn cache_paths() {
        let dir = Path::new("/c");
        assert_eq!(
            cached_kallsyms_path(dir, &[0x01, 0xfe]),
            Path::new("/c/[kernel.kallsyms]/01fe/kallsyms")
        );
        assert_eq!(
            cached_vdso_path(dir, &[0x0a, 0xb0]),
            Path::new("/c/[vdso]/0ab0/vdso")
        );
    }

    /// Check that a stored copy is linked from `.build-id/xx/rest` to `../../KIND/ID`.
    #[test]
    fn store_links_build_id() {
        let dir = tempfile::tempdir().unwrap();
        let id = [0x12, 0x34, 0x56];
        let path = cached_vdso_path(dir.path(), &id);
        let (bytes, _) =
            store(dir.path(), Path::new(VDSO), &id, &path, &mut &b"image"[..]).unwrap();
        assert_eq!(bytes, 5);
        assert_eq!(std::fs::read(&path).unwrap(), b"image");
        let link = dir.path().join(".build-id/12/3456");
        assert_eq!(
            std::fs::read_link(&link).unwrap(),
            Path::new("../../[vdso]/123456")
        );
        assert_eq!(std::fs::read(link.join("vdso")).unwrap(), b"image");
    }

    /// Check that this process's vDSO is read and carries a build id.
    #[test]
    fn reads_running_vdso() {
        let (image, build_id) = running_vdso().expect("this process has a vDSO");
        assert!(image.starts_with(b"\x7fELF"));
        assert!(!build_id.is_empty());
    }
}
