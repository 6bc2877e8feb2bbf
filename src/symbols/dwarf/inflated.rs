//! Inflated debug sections kept on disk, one file per build id. A debug file whose DWARF is compressed
//! (Debian's libc6-dbg: 2.8 MB of zlib streams that inflate to 8.5 MB, some 50-80 ms of CPU) is inflated once
//! and written into the build-id cache as `.rprof-dwarf/<build id>/sections`; later loads map that file instead
//! (only the pages that lookups touch are read, from the page cache). A push drops each binary's DWARF after
//! every period and loads it again for the next period's new addresses: libc's inflation was paid at every
//! period, by every run, and by every rprof of the host.
//!
//! The file: `RPROFDW1`, a u32 count of sections, then for each its name (a u8 length and the bytes), its offset
//! and its length in the file (u64 each), then the sections' bytes; integers little endian. A section that is
//! missing or not as long as the debug file's compression header says is inflated again, and the file written
//! again with it. Files are written through a temporary name and a rename (a concurrent reader never sees half
//! of one), and noted in the cache's ledger: the cache's size bound evicts them as it evicts rprof's other
//! copies, the least recently used first.
use crate::buildid::ledger::Ledger;
use crate::mapped::MappedFile;
use std::io::Write;
use std::ops::Range;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"RPROFDW1";

/// Where inflated debug sections are kept: a build-id cache, and the bound of rprof's files in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InflatedCache {
    pub dir: PathBuf,
    pub bound: u64,
}

/// The inflated sections of one build id, mapped.
pub(crate) struct Inflated {
    map: MappedFile,
    sections: Vec<(String, Range<usize>)>,
}

/// The file of build id `build_id` under cache `dir`.
pub(crate) fn path(dir: &Path, build_id: &[u8]) -> PathBuf {
    dir.join(".rprof-dwarf")
        .join(crate::buildid::hex(build_id))
        .join("sections")
}

impl Inflated {
    /// The sections kept for `build_id`; None when there is no file, or it does not parse.
    pub(crate) fn open(dir: &Path, build_id: &[u8]) -> Option<Inflated> {
        let map = MappedFile::open(&path(dir, build_id)).ok()?;
        let sections = parse(&map)?;
        map.advise_random(&map[..]);
        Some(Inflated { map, sections })
    }

    /// Section `name` when it is `len` bytes long: the mapped file and the section's range in it.
    pub(crate) fn section(&self, name: &str, len: u64) -> Option<(MappedFile, Range<usize>)> {
        let (_, range) = self.sections.iter().find(|(n, _)| n == name)?;
        (range.len() as u64 == len).then(|| (self.map.clone(), range.clone()))
    }
}

/// The sections a file's bytes hold (name, range); None when the bytes are not such a file.
fn parse(bytes: &[u8]) -> Option<Vec<(String, Range<usize>)>> {
    let mut at = 0usize;
    let mut take = |n: usize| {
        let taken = bytes.get(at..at.checked_add(n)?)?;
        at += n;
        Some(taken)
    };
    if take(8)? != MAGIC {
        return None;
    }
    let count = u32::from_le_bytes(take(4)?.try_into().ok()?);
    let mut sections = Vec::new();
    for _ in 0..count {
        let len = usize::from(take(1)?[0]);
        let name = std::str::from_utf8(take(len)?).ok()?.to_string();
        let offset = usize::try_from(u64::from_le_bytes(take(8)?.try_into().ok()?)).ok()?;
        let size = usize::try_from(u64::from_le_bytes(take(8)?.try_into().ok()?)).ok()?;
        let end = offset.checked_add(size).filter(|&end| end <= bytes.len())?;
        sections.push((name, offset..end));
    }
    Some(sections)
}

/// Write the inflated `sections` (name, bytes) of build id `build_id` into `cache`, making room under its bound
/// (nothing is written when they cannot fit).
pub(crate) fn store(
    cache: &InflatedCache,
    build_id: &[u8],
    sections: &[(&str, &[u8])],
) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let sections: Vec<_> = sections.iter().filter(|(n, _)| n.len() <= 255).collect();
    let header = 12 + sections.iter().map(|(n, _)| 17 + n.len()).sum::<usize>();
    let total = header + sections.iter().map(|(_, b)| b.len()).sum::<usize>();
    let mut ledger = Ledger::open(&cache.dir)?;
    if !ledger.make_room(total as u64, cache.bound, &Default::default()) {
        return Ok(());
    }
    let target = path(&cache.dir, build_id);
    let parent = target.parent().unwrap_or(&cache.dir);
    std::fs::create_dir_all(parent)?;
    let temporary = parent.join(format!(".tmp.{}", std::process::id()));
    let written = write(&temporary, header, &sections)
        .and_then(|()| std::fs::rename(&temporary, &target))
        .and_then(|()| std::fs::metadata(&target));
    let meta = match written {
        Ok(meta) => meta,
        Err(e) => {
            let _ = std::fs::remove_file(&temporary);
            return Err(e);
        }
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let relative = target.strip_prefix(&cache.dir).unwrap_or(&target);
    ledger.note(relative, meta.len(), meta.ino(), now);
    ledger.save()
}

/// The file's bytes at `path`: the header (`header` bytes), then the sections.
fn write(path: &Path, header: usize, sections: &[&(&str, &[u8])]) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    out.write_all(MAGIC)?;
    out.write_all(&(sections.len() as u32).to_le_bytes())?;
    let mut offset = header as u64;
    for (name, bytes) in sections {
        out.write_all(&[name.len() as u8])?;
        out.write_all(name.as_bytes())?;
        out.write_all(&offset.to_le_bytes())?;
        out.write_all(&(bytes.len() as u64).to_le_bytes())?;
        offset += bytes.len() as u64;
    }
    for (_, bytes) in sections {
        out.write_all(bytes)?;
    }
    out.into_inner().map_err(|e| e.into_error())?.sync_data()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sections written are read back by name at their length; a length other than the one written is not
    /// used; another build id has no file; the ledger notes the file (so the cache's bound evicts it), and a
    /// bound too small for it writes nothing.
    #[test]
    fn sections_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let cache = InflatedCache {
            dir: dir.path().to_path_buf(),
            bound: 1 << 20,
        };
        let info = vec![7u8; 5000];
        let sections = [(".debug_info", &info[..]), (".debug_line", &b"lines"[..])];
        store(&cache, &[1, 2, 3], &sections).unwrap();
        let kept = Inflated::open(dir.path(), &[1, 2, 3]).unwrap();
        let (map, range) = kept.section(".debug_info", 5000).unwrap();
        assert_eq!(&map[range], &info[..]);
        let (map, range) = kept.section(".debug_line", 5).unwrap();
        assert_eq!(&map[range], b"lines");
        assert!(kept.section(".debug_line", 6).is_none());
        assert!(kept.section(".debug_str", 0).is_none());
        assert!(Inflated::open(dir.path(), &[1, 2, 4]).is_none());
        let ledger = Ledger::open(dir.path()).unwrap();
        assert_eq!(ledger.entries.len(), 1);
        assert_eq!(
            ledger.entries[0].path,
            Path::new(".rprof-dwarf/010203/sections")
        );
        assert_eq!(ledger.entries[0].bytes, 12 + 2 * 17 + 22 + 5005);
        drop(ledger);
        let small = InflatedCache {
            bound: 100,
            ..cache
        };
        store(&small, &[9, 9], &sections).unwrap();
        assert!(Inflated::open(dir.path(), &[9, 9]).is_none());
        assert!(
            parse(b"RPROFDW1\x01\x00\x00\x00\x03abc").is_none(),
            "cut short"
        );
    }
}
