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
use super::kallsyms::{parse_kallsyms, read_kallsyms_from, KernelSymbols};
use super::unnamed::Unnamed;
use crate::buildid::{buildid_dir, cached_kallsyms_path, hex, running_build_id, running_text};
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

/// Read and parse a kallsyms file: a copy is mapped (its pages leave with the map once parsed), /proc's
/// file (which has no size) parsed as it is read.
pub(crate) fn read_kallsyms(path: &Path) -> std::io::Result<KernelSymbols> {
    match crate::mapped::MappedFile::open(path) {
        Ok(map) if !map.is_empty() => Ok(parse_kallsyms(&map)),
        _ => read_kallsyms_from(std::fs::File::open(path)?),
    }
}

/// The kernel symbols for one recording: the image's from the cached copy when there is one, the rest (or
/// all, without a copy) from the running kernel when it is the recorded one.
pub(crate) struct KernelTable {
    cached: Option<Cached>,
    live: Live,
    /// Where the run-time symbols are kept between rprofs (a build-id cache; see `kernel_runtime.rs`), with
    /// the kernel's build id.
    keep: Option<(PathBuf, Vec<u8>)>,
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
    /// `keep`: a build-id cache where the running kernel's run-time symbols are kept between rprofs.
    pub fn load(recorded: &KernelRef, keep: Option<&Path>) -> KernelTable {
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
        let keep = keep.zip(recorded.build_id.clone().or_else(running_build_id));
        KernelTable {
            cached,
            live,
            keep: keep.map(|(dir, id)| (dir.to_path_buf(), id)),
        }
    }

    /// The text symbol at a recorded kernel address, and how far the address lies past its start.
    /// Whether any symbols of the recorded kernel are at hand.
    pub fn has_symbols(&self) -> bool {
        self.cached.is_some()
            || match &self.live {
                Live::Loaded(symbols) => !symbols.is_empty(),
                Live::Deferred => true,
                Live::Refused => false,
            }
    }

    pub fn lookup_at(&mut self, addr: u64) -> Option<(Arc<str>, u64)> {
        if let Some(cached) = &self.cached {
            let at = addr.wrapping_sub(cached.shift);
            if cached.image.contains(&at) {
                return cached
                    .symbols
                    .lookup_at(at)
                    .map(|(name, start)| (name.clone(), at - start));
            }
        }
        if matches!(self.live, Live::Deferred) {
            // The image keeps the copy's names (whatever the sample order, one source per address); only the
            // run-time part of /proc/kallsyms is kept beside it.
            let keep = self
                .keep
                .as_ref()
                .map(|(dir, id)| (dir.as_path(), id.as_slice()));
            self.live = Live::Loaded(super::kernel_runtime::outside_image(keep));
        }
        match &self.live {
            Live::Loaded(symbols) => symbols
                .lookup_at(addr)
                .map(|(name, start)| (name.clone(), addr - start)),
            _ => None,
        }
    }
}

/// The kernel symbols of a recording, loaded on first use or in the background.
#[derive(Default)]
pub(crate) struct KernelNames {
    /// The recording's kernel, as given to [`KernelNames::set_kernel`].
    recorded: KernelRef,
    /// Loaded on the first lookup.
    table: Option<KernelTable>,
    /// The kernel symbols being read and parsed in the background (see [`KernelNames::prefetch`]).
    loading: Option<std::thread::JoinHandle<KernelTable>>,
    /// A build-id cache where the run-time symbols are kept between rprofs (None: not kept).
    keep: Option<PathBuf>,
}

impl KernelNames {
    /// Say which kernel the addresses come from; before the first lookup or prefetch.
    pub fn set_kernel(&mut self, kernel: KernelRef) {
        self.recorded = kernel;
    }

    /// Keep the running kernel's run-time symbols (modules, BPF) in build-id cache `dir` for later rprofs.
    pub fn keep_runtime_in(&mut self, dir: Option<PathBuf>) {
        self.keep = dir;
    }

    /// The recorded kernel's build id.
    pub fn build_id(&self) -> Option<&[u8]> {
        self.recorded.build_id.as_deref()
    }

    /// Start loading the symbols on another thread; nothing when they are loaded or loading.
    pub fn prefetch(&mut self) {
        if self.table.is_none() && self.loading.is_none() {
            let (recorded, keep) = (self.recorded.clone(), self.keep.clone());
            self.loading = std::thread::Builder::new()
                .name("rprof-kallsyms".into())
                .spawn(move || KernelTable::load(&recorded, keep.as_deref()))
                .ok();
        }
    }

    /// Why a kernel address has no name: no symbols of the recorded kernel at all, or none covering it.
    pub fn why_unnamed(&mut self) -> Unnamed {
        match self.table().has_symbols() {
            true => Unnamed::NoSymbol,
            false => Unnamed::KernelWithoutSymbols,
        }
    }

    /// The symbol at a recorded kernel address, and how far the address lies past its start.
    pub fn lookup_at(&mut self, addr: u64) -> Option<(Arc<str>, u64)> {
        self.table().lookup_at(addr)
    }

    /// The table, loaded (or taken from the background thread) on first use.
    fn table(&mut self) -> &mut KernelTable {
        let (recorded, loading, keep) = (&self.recorded, &mut self.loading, &self.keep);
        self.table
            .get_or_insert_with(|| match loading.take().map(|t| t.join()) {
                Some(Ok(table)) => table,
                _ => KernelTable::load(recorded, keep.as_deref()),
            })
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
    use super::{Cached, KernelTable, Live};
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
            keep: None,
        };
        let name = |t: &mut KernelTable, a: u64| t.lookup_at(a).map(|(s, _)| s.to_string());
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
}
