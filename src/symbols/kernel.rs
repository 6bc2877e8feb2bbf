//! Which kallsyms names a recording's kernel addresses, and which image its `[vdso]` frames.
//!
//! `perf record` keeps a copy of /proc/kallsyms per kernel build id in its build-id cache
//! (`~/.debug/[kernel.kallsyms]/<build-id>/kallsyms`, or under `$PERF_BUILDID_DIR`), and `rprof record` keeps
//! one in the same place. A recording names its kernel by build id (the BUILD_ID feature) and by where `_text`
//! was (the `[kernel.kallsyms]_text` mapping). The kernel image's symbols (core and init text: the lines without
//! a `[module]` tag) are fixed by the build, so the cached copy names them exactly, shifted by the KASLR offset
//! between the two `_text` addresses; reading it is a plain file read, where /proc/kallsyms makes the kernel
//! format some 100k lines (60 ms here). Addresses outside the image (modules, BPF, trampolines) change at run
//! time: only the running kernel's /proc/kallsyms can name them, and only when it is the kernel that was
//! recorded.
//!
//! The vDSO is the kernel's too: `record` keeps its image in the same cache (`[vdso]/<build-id>/vdso`), and a
//! report reads `[vdso]` frames from that copy, or from its own process's vDSO when that is the recorded one.
use super::kallsyms::{parse_kallsyms, KernelSymbols};
use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What a recording says of its kernel.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelRef {
    /// The kernel's build id (BUILD_ID feature entry `[kernel.kallsyms]`).
    pub build_id: Option<Vec<u8>>,
    /// The address of `_text` when it was recorded (the `[kernel.kallsyms]_text` mapping's offset).
    pub text: Option<u64>,
}

/// The build-id cache directory: `$PERF_BUILDID_DIR`, else `$HOME/.debug` (perf's defaults).
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

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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
pub fn running_text() -> Option<u64> {
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

/// Copy the running kernel's /proc/kallsyms into the build-id cache under `dir` unless a copy is there, as
/// `perf record` does. Returns the copy's path and whether it was written now.
pub fn store_kallsyms(dir: &Path, build_id: &[u8]) -> std::io::Result<(PathBuf, bool)> {
    let path = cached_kallsyms_path(dir, build_id);
    if path.is_file() {
        return Ok((path, false));
    }
    let data = read_kallsyms_text(Path::new("/proc/kallsyms"))?;
    store(dir, "[kernel.kallsyms]", build_id, &path, &data)?;
    Ok((path, true))
}

/// Where the cached vDSO image of build id `build_id` lives under `dir` (perf's layout).
pub fn cached_vdso_path(dir: &Path, build_id: &[u8]) -> PathBuf {
    dir.join("[vdso]").join(hex(build_id)).join("vdso")
}

/// This process's vDSO image (the running kernel's), read from its own memory, and its build id.
pub fn running_vdso() -> Option<(Vec<u8>, Vec<u8>)> {
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
        store(dir, "[vdso]", &build_id, &path, &image)?;
    }
    Ok(Some(build_id))
}

/// Write `data` to `path` in the build-id cache `dir` (through a temporary name and a rename, so a concurrent
/// reader never sees half a file), and link it from `.build-id/xx/rest` as perf does.
fn store(dir: &Path, kind: &str, build_id: &[u8], path: &Path, data: &[u8]) -> std::io::Result<()> {
    let parent = path.parent().unwrap_or(dir);
    std::fs::create_dir_all(parent)?;
    let temporary = parent.join(format!(".tmp.{}", std::process::id()));
    let written = std::fs::File::create(&temporary)
        .and_then(|mut f| f.write_all(data))
        .and_then(|()| std::fs::rename(&temporary, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(e);
    }
    let id = hex(build_id);
    if id.len() > 2 {
        let link_dir = dir.join(".build-id").join(&id[..2]);
        if std::fs::create_dir_all(&link_dir).is_ok() {
            let target = Path::new("../..").join(kind).join(&id);
            let _ = std::os::unix::fs::symlink(target, link_dir.join(&id[2..]));
        }
    }
    Ok(())
}

/// The text of a kallsyms file (/proc/kallsyms reports a size of 0, so the buffer is sized for a typical kernel
/// rather than grown from nothing).
fn read_kallsyms_text(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut data = Vec::with_capacity(8 << 20);
    std::fs::File::open(path)?.read_to_end(&mut data)?;
    Ok(data)
}

/// Read and parse a kallsyms file.
fn read_kallsyms(path: &Path) -> std::io::Result<KernelSymbols> {
    Ok(parse_kallsyms(&read_kallsyms_text(path)?))
}

/// The kernel symbols for one recording: the image's from the cached copy when there is one, the rest (or
/// all, without a copy) from the running kernel when it is the recorded one.
pub(crate) struct KernelTable {
    cached: Option<Cached>,
    live: Live,
}

/// A cached kallsyms copy and how to map recorded addresses onto it.
struct Cached {
    symbols: KernelSymbols,
    /// The kernel image in the copy's addresses.
    image: std::ops::RangeInclusive<u64>,
    /// Recorded address minus the copy's address (the KASLR difference), wrapping.
    shift: u64,
}

enum Live {
    /// Loaded (or loading failed: empty).
    Loaded(KernelSymbols),
    /// Allowed, loaded on first use (only addresses outside the cached image need it).
    Deferred,
    /// The running kernel is not the recorded one.
    Refused,
}

impl KernelTable {
    /// Decide the sources for `recorded` and load what is sure to be needed.
    pub fn load(recorded: &KernelRef) -> KernelTable {
        let same_kernel = match (&recorded.build_id, running_build_id()) {
            (Some(recorded_id), Some(running)) => {
                *recorded_id == running
                    && match recorded.text {
                        Some(text) => running_text().is_none_or(|t| t == text),
                        None => true,
                    }
            }
            // An older recording without the kernel's build id, or a kernel without notes: trust the live one.
            _ => true,
        };
        let cached = recorded
            .build_id
            .as_deref()
            .and_then(|id| Some(cached_kallsyms_path(&buildid_dir()?, id)))
            .and_then(|path| read_kallsyms(&path).ok())
            .and_then(|symbols| Cached::new(symbols, recorded.text));
        let live = match (&cached, same_kernel) {
            (_, false) => Live::Refused,
            (Some(_), true) => Live::Deferred,
            (None, true) => {
                Live::Loaded(read_kallsyms(Path::new("/proc/kallsyms")).unwrap_or_default())
            }
        };
        if matches!(live, Live::Refused) && cached.is_none() {
            let id = recorded.build_id.as_deref().map(hex).unwrap_or_default();
            let dir = buildid_dir().unwrap_or_default();
            eprintln!(
                "rprof: warning: the recording's kernel (build id {id}) is not the running one (another \
                 build or another boot), and {} holds no copy of its kallsyms; kernel frames show as [unknown]",
                dir.display()
            );
        }
        KernelTable { cached, live }
    }

    /// The text symbol at a recorded kernel address.
    pub fn lookup(&mut self, addr: u64) -> Option<Arc<str>> {
        if let Some(cached) = &self.cached {
            let at = addr.wrapping_sub(cached.shift);
            if cached.image.contains(&at) {
                return cached.symbols.lookup(at).cloned();
            }
        }
        if matches!(self.live, Live::Deferred) {
            let symbols = read_kallsyms(Path::new("/proc/kallsyms")).unwrap_or_default();
            self.live = Live::Loaded(symbols);
        }
        match &self.live {
            Live::Loaded(symbols) => symbols.lookup(addr).cloned(),
            _ => None,
        }
    }
}

impl Cached {
    /// A copy is usable for the kernel image; shifted by the `_text` difference when the recording gives its
    /// `_text`.
    fn new(symbols: KernelSymbols, recorded_text: Option<u64>) -> Option<Cached> {
        let marks = symbols.marks();
        let (low, high) = marks.image?;
        let shift = match (recorded_text, marks.text) {
            (Some(recorded), Some(copy)) => recorded.wrapping_sub(copy),
            _ => 0,
        };
        Some(Cached {
            symbols,
            image: low..=high,
            shift,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{notes_build_id, Cached, KernelTable, Live};
    use crate::symbols::kallsyms::parse_kallsyms;

    const COPY: &[u8] = b"ffffffff81000000 T _text\n\
ffffffff81000000 T _stext\n\
ffffffff81000100 T ksys_write\n\
ffffffff81000200 T vfs_write\n\
ffffffff81000300 T _etext\n\
ffffffffc0001000 t mod_fn\t[some_module]\n";

    /// Check that the cached copy names the image shifted by the KASLR difference, and that addresses outside
    /// it go to the live kernel only when allowed.
    #[test]
    fn cached_image_with_kaslr_shift() {
        let shift = 0x0260_0000;
        let cached = Cached::new(parse_kallsyms(COPY), Some(0xffffffff81000000 + shift)).unwrap();
        let mut table = KernelTable {
            cached: Some(cached),
            live: Live::Refused,
        };
        let name = |t: &mut KernelTable, a: u64| t.lookup(a).map(|s| s.to_string());
        assert_eq!(
            name(&mut table, 0xffffffff81000110 + shift).as_deref(),
            Some("ksys_write")
        );
        assert_eq!(
            name(&mut table, 0xffffffff81000200 + shift).as_deref(),
            Some("vfs_write")
        );
        assert_eq!(
            name(&mut table, 0xffffffff81000110),
            None,
            "an unshifted address is below the recorded image"
        );
        assert_eq!(
            name(&mut table, 0xffffffffc0001010),
            None,
            "modules are not taken from a copy"
        );
    }

    /// Check that a copy of only module symbols is not used.
    #[test]
    fn copy_without_image_is_unused() {
        let symbols = parse_kallsyms(b"ffffffffc0001000 t mod_fn\t[some_module]\n");
        assert!(Cached::new(symbols, None).is_none());
    }

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
}
