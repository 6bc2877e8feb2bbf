//! Files mapped read-only into memory, so that reading a 100 MB binary costs only the pages a lookup touches.
//!
//! [`MappedFile`] is the one safe wrapper around `mmap` of a file for the rest of rprof (symbols, debug files,
//! DWARF). It derefs to `&[u8]`, clones cheaply (an `Arc`), and can also hold bytes from the heap (the vDSO
//! read from memory, decompressed DWARF sections) so that callers handle one type.
//!
//! # What happens if the file changes underneath
//!
//! The map is shared (`MAP_SHARED`) and read-only, on a descriptor opened read-only. Not private: the kernel
//! writes the breakpoint of every uprobe on a file into each private map of it that may execute (`uprobe_mmap`
//! and uprobe registration treat any `MAP_PRIVATE` file map without `noexec` as code), so a private map of a
//! binary that another rprof (or perf, or bpftrace) probes read `int3` where the function starts: probe
//! placement then classed an emulated `push` as single-stepped. A shared read-only map shows the file's bytes.
//! Nothing in rprof writes to it, but another process may write to the file while it is mapped:
//! - **Truncated** (`cp new old`, `> old`): touching a page past the new end raises SIGBUS, which kills rprof.
//! - **Rewritten in place**: the map shows the new bytes (it is the page cache). A `&[u8]` whose bytes change is outside what Rust
//!   promises; in practice the readers here (object, gimli) check every offset and length they read
//!   from the bytes, so changed bytes give wrong or missing symbols or a parse error, never an access outside
//!   the map.
//!
//! This is accepted, as `perf report` accepts it (libelf's `ELF_C_READ_MMAP` and libdw map binaries and debug
//! files the same way), because the files rprof maps are rarely written in place:
//! - an executable that is running cannot be opened for writing (ETXTBSY);
//! - installers and linkers replace a binary with a new inode (dpkg and rpm rename a new file over the old one;
//!   GNU ld, gold, lld and rustc unlink their output before writing it), and a map holds on to the old inode,
//!   which stays intact;
//! - the recording names files by build id, and the symbolizer refuses a file whose build id differs.
//!
//! What is done about the rest: only regular files are mapped (a FIFO or device has no stable contents), the
//! length mapped is the length `fstat` gives on the open descriptor, and [`MappedFile::changed`] tells whether
//! the file's size or modification time moved since it was mapped, for callers that want to re-check.
use memmap2::{Advice, Mmap, MmapOptions, UncheckedAdvice};
use std::fs::File;
use std::ops::Deref;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

/// A read-only file mapped into memory, or bytes on the heap; derefs to its bytes. Clones share the bytes.
#[derive(Clone)]
pub struct MappedFile {
    inner: Arc<Backing>,
}

enum Backing {
    Map {
        map: Mmap,
        /// The open file, to check its size and modification time later.
        file: File,
        len: u64,
        modified: Option<SystemTime>,
    },
    Heap(Box<[u8]>),
}

/// Errors of [`MappedFile::open`].
#[derive(Debug, thiserror::Error)]
pub enum MapError {
    #[error("cannot open {path}: {source}")]
    Open {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("cannot map {path}: it is not a regular file")]
    NotRegular { path: std::path::PathBuf },
    #[error("cannot map {path} into memory: {source}; check `ulimit -v` and the file system")]
    Map {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

impl MappedFile {
    /// Open `path` and map it read-only (shared, pages read on first touch).
    pub fn open(path: &Path) -> Result<MappedFile, MapError> {
        let open_err = |source| MapError::Open {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(open_err)?;
        let meta = file.metadata().map_err(open_err)?;
        if !meta.is_file() {
            return Err(MapError::NotRegular {
                path: path.to_path_buf(),
            });
        }
        let len = meta.len();
        let map_len = usize::try_from(len).map_err(|_| MapError::Map {
            path: path.to_path_buf(),
            source: std::io::Error::from(std::io::ErrorKind::FileTooLarge),
        })?;
        // SAFETY: `map` is unsafe because the mapped bytes can change or vanish (SIGBUS) if another process
        // writes to or truncates the file while it is mapped; the module documentation explains why this is
        // accepted (perf does the same) and what is done about it. The map is read-only (PROT_READ, MAP_SHARED
        // on a descriptor opened read-only): nothing in this process can write through it, and it is unmapped
        // only when the last clone of this `MappedFile` is dropped, after every borrow of its bytes has ended.
        // Its length is the file's size from `fstat` on this descriptor, so no page past the end of the file is
        // mapped.
        let map = unsafe { MmapOptions::new().len(map_len).map(&file) }.map_err(|source| {
            MapError::Map {
                path: path.to_path_buf(),
                source,
            }
        })?;
        Ok(MappedFile {
            inner: Arc::new(Backing::Map {
                map,
                file,
                len,
                modified: meta.modified().ok(),
            }),
        })
    }

    /// Bytes on the heap (read from memory, or decompressed), behind the same type as a mapped file.
    pub fn from_vec(bytes: Vec<u8>) -> MappedFile {
        MappedFile {
            inner: Arc::new(Backing::Heap(bytes.into_boxed_slice())),
        }
    }

    /// True when this is a file mapping (false for heap bytes).
    pub fn is_mapped(&self) -> bool {
        matches!(*self.inner, Backing::Map { .. })
    }

    /// Tell the kernel that the pages holding `bytes` (a part of this file's bytes) are not needed for now, so
    /// that they leave rprof's resident set; touched again, they are read again from the file (from the page
    /// cache, where they usually still are). Does nothing for heap bytes, or for bytes that are not part of
    /// this file's. The pages at either end are released whole, with whatever else they hold.
    pub fn release(&self, bytes: &[u8]) {
        let Some((map, start)) = self.map_range(bytes) else {
            return;
        };
        // SAFETY: MADV_DONTNEED is unsafe in general because it discards a private mapping's own pages (those
        // written to, copy-on-write): the memory would then read back as the file's bytes (or zeros for
        // anonymous memory) under live borrows. This map is shared and read-only (see `open`): it has no pages
        // of its own (not even the copies a uprobe's breakpoint makes in a private map), only the file's pages
        // from the page cache. Dropping
        // them from the page tables changes no byte any borrow can see: the next access faults the same page
        // of the file in again. (If the file is changed underneath, the bytes may change or a truncated page
        // raise SIGBUS on that access, as for any first access: see the module documentation.) The range lies
        // inside the map (checked above); memmap2 aligns its start down to a page boundary.
        let _ =
            unsafe { map.unchecked_advise_range(UncheckedAdvice::DontNeed, start, bytes.len()) };
    }

    /// Tell the kernel that `bytes` (a part of this file's bytes) will be read in no particular order, so that
    /// touching one page does not read or map the pages around it. Does nothing for heap bytes.
    pub fn advise_random(&self, bytes: &[u8]) {
        if let Some((map, start)) = self.map_range(bytes) {
            let _ = map.advise_range(Advice::Random, start, bytes.len());
        }
    }

    /// The map and the offset in it of `bytes`, when they are a non-empty part of this file's mapped bytes.
    fn map_range(&self, bytes: &[u8]) -> Option<(&Mmap, usize)> {
        let Backing::Map { map, .. } = &*self.inner else {
            return None;
        };
        let start = (bytes.as_ptr() as usize).wrapping_sub(map.as_ptr() as usize);
        if bytes.is_empty() || start >= map.len() || bytes.len() > map.len() - start {
            return None;
        }
        Some((map, start))
    }

    /// True when the mapped file's size or modification time differs from when it was mapped (or it cannot be
    /// checked): its bytes may have changed, or be partly gone. Always false for heap bytes.
    pub fn changed(&self) -> bool {
        match &*self.inner {
            Backing::Map {
                file,
                len,
                modified,
                ..
            } => match file.metadata() {
                Ok(now) => {
                    now.len() != *len || now.modified().ok() != *modified || now.nlink() == 0
                }
                Err(_) => true,
            },
            Backing::Heap(_) => false,
        }
    }
}

impl Deref for MappedFile {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &*self.inner {
            Backing::Map { map, .. } => map,
            Backing::Heap(bytes) => bytes,
        }
    }
}

impl AsRef<[u8]> for MappedFile {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl std::fmt::Debug for MappedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedFile")
            .field("len", &self.len())
            .field("mapped", &self.is_mapped())
            .finish()
    }
}

// SAFETY: `StableDeref` promises that the address `deref` returns does not change when the `MappedFile` is
// moved, and `CloneStableDeref` that clones deref to the same address. Both hold: the bytes live in the
// `Backing` behind the `Arc` (a mapping, or a boxed slice), which neither moves nor changes while any clone
// exists, and a clone only copies the `Arc`. gimli relies on this to keep slices of the bytes across clones of
// its readers.
unsafe impl gimli::StableDeref for MappedFile {}
// SAFETY: see above: clones share one `Arc<Backing>`, so they deref to the same bytes at the same address.
unsafe impl gimli::CloneStableDeref for MappedFile {}

/// Give the heap's free pages back to the kernel, as [`MappedFile::release`] gives a file's: glibc keeps what
/// is freed in its arenas (one per thread that allocated), so a long session (`rprof record --push`) that drops
/// its caches would otherwise keep their pages resident. Costs a walk over the free chunks (about a
/// millisecond here); call it between periods, not per sample.
pub fn release_free_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only hands free memory of the allocator's arenas back to the kernel (MADV_DONTNEED
    // on free chunks, shrinking the top of each heap); it takes each arena's lock, so it is safe beside other
    // threads allocating, and no live allocation moves or changes.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Keep a long session's heap close to what it holds (`rprof record --push`): allocations of 256 KiB and more
/// (decompressed DWARF sections, symbol tables, batches of records) get their own mappings, returned to the
/// kernel when freed, instead of glibc's default, which raises that threshold to the largest block freed so far
/// and then serves such blocks from the arenas, where they leave holes that small allocations scatter into.
pub fn bound_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt changes an allocator setting only (glibc's mmap threshold, read by later allocations); no
    // live allocation moves or changes. It is called before the push's threads start.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 10);
    }
}

#[cfg(test)]
mod tests {
    use super::MappedFile;
    use std::io::Write;

    /// Check that a mapped file shows the file's bytes, that clones share them, and that it is unchanged.
    #[test]
    fn maps_file_bytes() {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        file.write_all(&data).unwrap();
        file.flush().unwrap();
        let mapped = MappedFile::open(file.path()).unwrap();
        assert!(mapped.is_mapped());
        assert_eq!(&*mapped, &data[..]);
        let clone = mapped.clone();
        assert_eq!(clone.as_ptr(), mapped.as_ptr(), "clones share the map");
        assert!(!mapped.changed());
    }

    /// Check that an empty file maps to no bytes, and that a directory is refused with a message naming it.
    #[test]
    fn empty_file_and_directory() {
        let file = tempfile::NamedTempFile::new().unwrap();
        let mapped = MappedFile::open(file.path()).unwrap();
        assert!(mapped.is_empty());
        let dir = tempfile::tempdir().unwrap();
        let err = MappedFile::open(dir.path()).unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");
        assert!(err.contains(&dir.path().display().to_string()), "{err}");
        let missing = dir.path().join("missing");
        let err = MappedFile::open(&missing).unwrap_err().to_string();
        assert!(
            err.contains("cannot open") && err.contains("missing"),
            "{err}"
        );
    }

    /// Check that growing the file after mapping it is reported by `changed`, and the map keeps its length.
    #[test]
    fn change_is_detected() {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(b"\x7fELF first").unwrap();
        file.flush().unwrap();
        let mapped = MappedFile::open(file.path()).unwrap();
        assert!(!mapped.changed());
        file.write_all(b" and more").unwrap();
        file.flush().unwrap();
        assert!(mapped.changed());
        assert_eq!(&*mapped, b"\x7fELF first");
    }

    /// Check that released pages read back the file's bytes, and that ranges outside the file are ignored.
    #[test]
    fn release_keeps_bytes() {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 253) as u8).collect();
        file.write_all(&data).unwrap();
        file.flush().unwrap();
        let mapped = MappedFile::open(file.path()).unwrap();
        assert_eq!(&*mapped, &data[..]);
        mapped.release(&mapped[5000..150_000]);
        mapped.release(&mapped[..]);
        mapped.release(&data[..10]);
        assert_eq!(&*mapped, &data[..]);
        let heap = MappedFile::from_vec(vec![7; 10]);
        heap.release(&heap[..]);
        assert_eq!(&*heap, &[7; 10]);
    }

    /// Check that heap bytes behave as a file's: deref, clone, never changed.
    #[test]
    fn heap_bytes() {
        let bytes = MappedFile::from_vec(vec![1, 2, 3]);
        assert!(!bytes.is_mapped());
        assert_eq!(&*bytes.clone(), &[1, 2, 3]);
        assert!(!bytes.changed());
    }
}
