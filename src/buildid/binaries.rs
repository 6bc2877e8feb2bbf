//! Copies of user binaries in the build-id cache, in perf's layout: `DIR/PATH/<build id>/elf` and the link
//! `DIR/.build-id/xx/rest` -> `../../PATH/<build id>`, so that a recording names its code after the binary was
//! rebuilt or deleted, and each of perf and rprof reads the copies the other kept. `record` keeps copies of
//! the binaries its samples are in, under a size bound on what rprof added ([`super::ledger`]).
use super::ledger::Ledger;
use super::{build_id_link, hex, read_build_id, store};
use std::collections::HashSet;
use std::io::{Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// The default bound on the bytes of the copies rprof keeps in the build-id cache (`--buildid-cache-size`).
pub const DEFAULT_BOUND: u64 = 2 << 30;

/// Where perf's layout keeps the copy of `path` (absolute) of build id `build_id` under `dir`.
pub fn cached_elf_path(dir: &Path, path: &Path, build_id: &[u8]) -> PathBuf {
    entry_dir(dir, path, build_id).join("elf")
}

/// `DIR/PATH/<build id>`: the directory of a binary's build id.
fn entry_dir(dir: &Path, path: &Path, build_id: &[u8]) -> PathBuf {
    dir.join(path.strip_prefix("/").unwrap_or(path))
        .join(hex(build_id))
}

/// The cached copy of the binary of `build_id` under `dir`, perf's or rprof's: `.build-id/xx/rest/elf` (perf
/// before 4.x linked the file itself: `.build-id/xx/rest`), else `PATH/<build id>/elf` for the recorded
/// `path`. None when there is none. The caller checks the copy's build id, as for any file.
pub fn find_cached_binary(dir: &Path, path: &Path, build_id: &[u8]) -> Option<PathBuf> {
    let (first, rest) = build_id_link(build_id)?;
    let link = dir.join(".build-id").join(first).join(rest);
    [link.join("elf"), link, cached_elf_path(dir, path, build_id)]
        .into_iter()
        .find(|p| p.is_file())
}

/// The copy `.build-id/xx/rest` links to, relative to `dir`: `PATH/<build id>/elf` for a link to
/// `../../PATH/<build id>`.
fn linked_copy(dir: &Path, build_id: &[u8]) -> Option<PathBuf> {
    let (first, rest) = build_id_link(build_id)?;
    let target = std::fs::read_link(dir.join(".build-id").join(first).join(rest)).ok()?;
    Some(target.strip_prefix("../..").ok()?.join("elf"))
}

/// What keeping copies of a recording's binaries did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Kept {
    /// Copies written now, and their bytes.
    pub added: usize,
    pub added_bytes: u64,
    /// Binaries already in the cache (perf's copy or rprof's).
    pub present: usize,
    /// Binaries not copied because they do not fit under the bound with what this recording needs.
    pub no_room: Vec<String>,
}

/// Copies of one recording's binaries going into the cache, with rprof's ledger locked meanwhile.
pub struct Keeper {
    dir: PathBuf,
    ledger: Ledger,
    bound: u64,
    now: u64,
    /// The ledger's paths this recording needs: never evicted to make room for its other binaries.
    protected: HashSet<PathBuf>,
    kept: Kept,
}

impl Keeper {
    /// Start keeping copies under cache directory `dir`, rprof's copies bounded to `bound` bytes in all.
    pub fn open(dir: &Path, bound: u64) -> std::io::Result<Keeper> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Ok(Keeper {
            dir: dir.to_path_buf(),
            ledger: Ledger::open(dir)?,
            bound,
            now,
            protected: HashSet::new(),
            kept: Kept::default(),
        })
    }

    /// Note that the recording needs the cache's file `relative` (a kallsyms or vDSO copy): it is not evicted
    /// now, and counts as used now if rprof wrote it.
    pub fn needs(&mut self, relative: &Path) {
        self.ledger.touch(relative, self.now);
        self.protected.insert(relative.to_path_buf());
    }

    /// Keep a copy of binary `path` (absolute, as the process mapped it) of build id `build_id`, read from
    /// `file` (opened as the process sees it), unless the cache has one. A file with another build id (it was
    /// rebuilt while recording) is not copied.
    pub fn keep(
        &mut self,
        path: &str,
        build_id: &[u8],
        mut file: std::fs::File,
    ) -> std::io::Result<()> {
        if !path.starts_with('/') || path.contains('\n') || build_id_link(build_id).is_none() {
            return Ok(());
        }
        let target = cached_elf_path(&self.dir, Path::new(path), build_id);
        let relative = target
            .strip_prefix(&self.dir)
            .unwrap_or(&target)
            .to_path_buf();
        // perf counts a build id as cached once its `.build-id` link resolves, whatever path it came from.
        if find_cached_binary(&self.dir, Path::new(path), build_id).is_some() {
            self.needs(&relative);
            // The copy the link names may sit under another path (the same build mapped by another name).
            if let Some(linked) = linked_copy(&self.dir, build_id) {
                self.needs(&linked);
            }
            self.kept.present += 1;
            return Ok(());
        }
        if read_build_id(&file).as_deref() != Some(build_id) {
            return Ok(());
        }
        let bytes = file.metadata()?.len();
        if !self.ledger.make_room(bytes, self.bound, &self.protected) {
            self.kept.no_room.push(path.to_string());
            return Ok(());
        }
        file.seek(SeekFrom::Start(0))?;
        let kind = Path::new(path.trim_start_matches('/'));
        let (bytes, inode) = store(&self.dir, kind, build_id, &target, &mut file)?;
        self.ledger.note(&relative, bytes, inode, self.now);
        self.protected.insert(relative);
        self.kept.added += 1;
        self.kept.added_bytes += bytes;
        Ok(())
    }

    /// Write the ledger back; what was kept.
    pub fn finish(self) -> std::io::Result<Kept> {
        self.ledger.save()?;
        Ok(self.kept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check perf's layout for a binary's copy and that the copy is found through its `.build-id` link, through
    /// perf's old layout (the link names the file), and by its path without a link.
    #[test]
    fn binary_cache_layout() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let id = [0xab, 0xcd, 0xef];
        assert_eq!(
            cached_elf_path(d, Path::new("/usr/bin/prog"), &id),
            d.join("usr/bin/prog/abcdef/elf")
        );
        assert_eq!(find_cached_binary(d, Path::new("/usr/bin/prog"), &id), None);
        let exe = Path::new("/bin/true");
        let own = read_build_id(&std::fs::File::open(exe).unwrap()).expect("a build id");
        let mut keeper = Keeper::open(d, DEFAULT_BOUND).unwrap();
        let path = "/opt/x y/prog";
        keeper
            .keep(path, &own, std::fs::File::open(exe).unwrap())
            .unwrap();
        // Kept already: not copied again.
        keeper
            .keep(path, &own, std::fs::File::open(exe).unwrap())
            .unwrap();
        // Another build id than the file's: not copied.
        keeper
            .keep("/opt/other", &id, std::fs::File::open(exe).unwrap())
            .unwrap();
        let kept = keeper.finish().unwrap();
        assert_eq!((kept.added, kept.present), (1, 1));
        let copy = cached_elf_path(d, Path::new(path), &own);
        assert_eq!(std::fs::read(&copy).unwrap(), std::fs::read(exe).unwrap());
        assert_eq!(kept.added_bytes, std::fs::metadata(exe).unwrap().len());
        let (first, rest) = build_id_link(&own).unwrap();
        let link = d.join(".build-id").join(first).join(&rest);
        assert_eq!(
            std::fs::read_link(&link).unwrap(),
            Path::new("../../opt/x y/prog").join(hex(&own))
        );
        assert_eq!(
            find_cached_binary(d, Path::new("/elsewhere"), &own),
            Some(link.join("elf"))
        );
        assert_eq!(
            linked_copy(d, &own),
            Some(Path::new("opt/x y/prog").join(hex(&own)).join("elf"))
        );
        assert!(!d.join("opt/other").exists());

        let old = tempfile::tempdir().unwrap();
        let (first, rest) = build_id_link(&id).unwrap();
        std::fs::create_dir_all(old.path().join(".build-id").join(&first)).unwrap();
        let file = old.path().join(".build-id").join(&first).join(&rest);
        std::fs::write(&file, b"elf").unwrap();
        assert_eq!(
            find_cached_binary(old.path(), Path::new("/p"), &id),
            Some(file.clone())
        );
        std::fs::remove_file(&file).unwrap();
        let by_path = cached_elf_path(old.path(), Path::new("/p"), &id);
        std::fs::create_dir_all(by_path.parent().unwrap()).unwrap();
        std::fs::write(&by_path, b"elf").unwrap();
        assert_eq!(
            find_cached_binary(old.path(), Path::new("/p"), &id),
            Some(by_path)
        );
    }

    /// Check that a binary larger than the bound allows is not copied, and named as such.
    #[test]
    fn binary_over_bound_is_not_copied() {
        let dir = tempfile::tempdir().unwrap();
        let exe = Path::new("/bin/true");
        let own = read_build_id(&std::fs::File::open(exe).unwrap()).unwrap();
        let mut keeper = Keeper::open(dir.path(), 1000).unwrap();
        keeper
            .keep("/bin/big", &own, std::fs::File::open(exe).unwrap())
            .unwrap();
        let kept = keeper.finish().unwrap();
        assert_eq!(kept.no_room, vec!["/bin/big".to_string()]);
        assert_eq!(kept.added, 0);
        assert!(!dir.path().join("bin").exists());
    }
}
