//! The record of what rprof added to the build-id cache, so that a size bound evicts rprof's own copies, the
//! least recently used first, and never perf's (perf keeps no such record, and its entries are never in it).
//!
//! `DIR/.rprof-added` holds one line per file rprof wrote: `USED BYTES INODE PATH`, USED the seconds since
//! the epoch when a recording last needed the file, PATH relative to DIR (the last field: it may hold spaces).
//! The file is locked while it is read and rewritten, so that recorders ending together do not lose each
//! other's lines. An entry is evicted only while the file at its path is still the one rprof wrote (its
//! inode): a copy that perf or the user put there since is left alone.
use std::collections::HashSet;
use std::io::{Read, Seek, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The name of the record under the cache directory.
pub const LEDGER: &str = ".rprof-added";

/// One file rprof wrote into the cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// When a recording last needed it (seconds since the epoch).
    pub used: u64,
    pub bytes: u64,
    /// The inode rprof's copy got.
    pub inode: u64,
    /// Relative to the cache directory, e.g. `usr/bin/prog/<build id>/elf`.
    pub path: PathBuf,
}

/// The entries of a ledger's text; lines that do not parse are dropped (their files are then never evicted).
pub fn parse(text: &str) -> Vec<Entry> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.splitn(4, ' ');
            let mut number = || fields.next()?.parse::<u64>().ok();
            let (used, bytes, inode) = (number()?, number()?, number()?);
            let path = fields.next().filter(|p| !p.is_empty())?;
            Some(Entry {
                used,
                bytes,
                inode,
                path: PathBuf::from(path),
            })
        })
        .collect()
}

/// The ledger's text for `entries`.
pub fn format(entries: &[Entry]) -> String {
    entries
        .iter()
        .map(|e| format!("{} {} {} {}\n", e.used, e.bytes, e.inode, e.path.display()))
        .collect()
}

/// Which entries to evict so that `incoming` more bytes fit with the others under `bound`: the least recently
/// used first, never one in `protected` (what the recording being finished needs). None when that cannot make
/// room (nothing is to be evicted then).
pub fn plan_evictions(
    entries: &[Entry],
    protected: &HashSet<PathBuf>,
    incoming: u64,
    bound: u64,
) -> Option<Vec<usize>> {
    let total: u64 = entries.iter().map(|e| e.bytes).sum();
    let mut over = total.saturating_add(incoming).saturating_sub(bound);
    if over == 0 {
        return Some(Vec::new());
    }
    let mut candidates: Vec<usize> = (0..entries.len())
        .filter(|&i| !protected.contains(&entries[i].path))
        .collect();
    candidates.sort_by_key(|&i| (entries[i].used, i));
    let mut evicted = Vec::new();
    for i in candidates {
        evicted.push(i);
        over = over.saturating_sub(entries[i].bytes);
        if over == 0 {
            return Some(evicted);
        }
    }
    None
}

/// The ledger of a cache directory, locked while open.
pub struct Ledger {
    dir: PathBuf,
    file: std::fs::File,
    pub entries: Vec<Entry>,
}

impl Ledger {
    /// Open (or start) the ledger of cache directory `dir` and lock it.
    pub fn open(dir: &Path) -> std::io::Result<Ledger> {
        std::fs::create_dir_all(dir)?;
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join(LEDGER))?;
        file.lock()?;
        let mut text = String::new();
        file.read_to_string(&mut text)?;
        Ok(Ledger {
            dir: dir.to_path_buf(),
            file,
            entries: parse(&text),
        })
    }

    /// Note that rprof wrote `path` (relative to the directory), `bytes` long, now.
    pub fn note(&mut self, path: &Path, bytes: u64, inode: u64, now: u64) {
        self.entries.retain(|e| e.path != path);
        self.entries.push(Entry {
            used: now,
            bytes,
            inode,
            path: path.to_path_buf(),
        });
    }

    /// Note that a recording needs `path` now, if rprof wrote it.
    pub fn touch(&mut self, path: &Path, now: u64) {
        for e in self.entries.iter_mut().filter(|e| e.path == path) {
            e.used = now;
        }
    }

    /// The bytes of rprof's files.
    pub fn total(&self) -> u64 {
        self.entries.iter().map(|e| e.bytes).sum()
    }

    /// Evict rprof's least recently used files (never one in `protected`) until `incoming` more bytes fit
    /// under `bound`. False when they cannot fit: nothing is evicted then.
    pub fn make_room(&mut self, incoming: u64, bound: u64, protected: &HashSet<PathBuf>) -> bool {
        let Some(plan) = plan_evictions(&self.entries, protected, incoming, bound) else {
            return false;
        };
        let gone: HashSet<usize> = plan.into_iter().collect();
        for &i in &gone {
            evict(&self.dir, &self.entries[i]);
        }
        let mut i = 0;
        self.entries.retain(|_| {
            i += 1;
            !gone.contains(&(i - 1))
        });
        true
    }

    /// Write the ledger back (and unlock it).
    pub fn save(mut self) -> std::io::Result<()> {
        let text = format(&self.entries);
        self.file.set_len(0)?;
        self.file.rewind()?;
        self.file.write_all(text.as_bytes())
    }
}

/// Remove the file rprof wrote for `entry` while it is still rprof's copy, then the directories and the
/// `.build-id` link that nothing else uses any more.
fn evict(dir: &Path, entry: &Entry) {
    let file = dir.join(&entry.path);
    match std::fs::symlink_metadata(&file) {
        Ok(meta) if meta.is_file() && meta.ino() == entry.inode => {
            if std::fs::remove_file(&file).is_err() {
                return;
            }
        }
        // Gone already, or another file now (perf's, the user's): not rprof's to remove.
        _ => return,
    }
    // The build id's directory (`PATH/<id>`) holds the file; perf's link to it is `.build-id/xx/rest`.
    let Some(id_dir) = file.parent() else {
        return;
    };
    if std::fs::remove_dir(id_dir).is_err() {
        return;
    }
    remove_link(dir, id_dir);
    let mut parent = id_dir.parent();
    while let Some(p) = parent.filter(|p| p.starts_with(dir) && *p != dir) {
        if std::fs::remove_dir(p).is_err() {
            break;
        }
        parent = p.parent();
    }
}

/// Remove `.build-id/xx/rest`, the link of the build id whose directory `id_dir` was, when it points there.
fn remove_link(dir: &Path, id_dir: &Path) {
    let (Some(name), Ok(relative)) = (
        id_dir.file_name().and_then(|n| n.to_str()),
        id_dir.strip_prefix(dir),
    ) else {
        return;
    };
    if name.len() < 3 || !name.is_char_boundary(2) {
        return;
    }
    let link_dir = dir.join(".build-id").join(&name[..2]);
    let link = link_dir.join(&name[2..]);
    if std::fs::read_link(&link).is_ok_and(|to| to == Path::new("../..").join(relative)) {
        let _ = std::fs::remove_file(&link);
        let _ = std::fs::remove_dir(&link_dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(used: u64, bytes: u64, path: &str) -> Entry {
        Entry {
            used,
            bytes,
            inode: 1,
            path: PathBuf::from(path),
        }
    }

    /// Check the ledger's text both ways, a path with spaces included, and that damaged lines are dropped.
    #[test]
    fn ledger_text_round_trips() {
        let entries = vec![
            entry(10, 2000, "usr/bin/a/ab12/elf"),
            entry(11, 5, "home/me/my prog/cd34/elf"),
        ];
        let text = format(&entries);
        assert_eq!(
            text,
            "10 2000 1 usr/bin/a/ab12/elf\n11 5 1 home/me/my prog/cd34/elf\n"
        );
        assert_eq!(parse(&text), entries);
        assert_eq!(
            parse("x 1 2 p\n1 2\n\n3 4 5 q\n"),
            vec![Entry {
                used: 3,
                bytes: 4,
                inode: 5,
                path: "q".into()
            }]
        );
    }

    /// Check the eviction plan: nothing while it fits; the least recently used first, as many as needed;
    /// never a protected entry; None (nothing evicted) when even evicting every other entry makes no room.
    #[test]
    fn evicts_least_recently_used_first() {
        let entries = vec![
            entry(30, 100, "c"),
            entry(10, 100, "a"),
            entry(20, 100, "b"),
        ];
        let none = HashSet::new();
        assert_eq!(plan_evictions(&entries, &none, 100, 400), Some(vec![]));
        assert_eq!(plan_evictions(&entries, &none, 101, 400), Some(vec![1]));
        assert_eq!(plan_evictions(&entries, &none, 150, 300), Some(vec![1, 2]));
        let a = HashSet::from([PathBuf::from("a")]);
        assert_eq!(plan_evictions(&entries, &a, 50, 300), Some(vec![2]));
        assert_eq!(plan_evictions(&entries, &a, 250, 300), None);
        assert_eq!(plan_evictions(&entries, &none, 301, 300), None);
        assert_eq!(plan_evictions(&[], &none, 10, 0), None);
    }

    /// Check eviction on a real directory: rprof's oldest copy goes with its `.build-id` link and the
    /// directories left empty; perf's entries (not in the ledger) stay, and so does a file of rprof's path
    /// that perf replaced since (another inode); the ledger is written back and read again.
    #[test]
    fn evicts_only_rprofs_files() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let write = |rel: &str, id: &str, size: usize| -> u64 {
            let id_dir = dir.join(rel).join(id);
            std::fs::create_dir_all(&id_dir).unwrap();
            std::fs::write(id_dir.join("elf"), vec![0u8; size]).unwrap();
            let link_dir = dir.join(".build-id").join(&id[..2]);
            std::fs::create_dir_all(&link_dir).unwrap();
            let target = Path::new("../..").join(rel).join(id);
            std::os::unix::fs::symlink(target, link_dir.join(&id[2..])).unwrap();
            std::fs::metadata(id_dir.join("elf")).unwrap().ino()
        };
        let old = write("tmp/a/old", "aa01", 300);
        let new = write("tmp/a/new", "bb02", 300);
        write("usr/bin/perfs", "cc03", 5000);
        let replaced = write("tmp/b/replaced", "dd04", 300);
        let mut ledger = Ledger::open(dir).unwrap();
        ledger.note(Path::new("tmp/b/replaced/dd04/elf"), 300, replaced + 1, 1);
        ledger.note(Path::new("tmp/a/old/aa01/elf"), 300, old, 2);
        ledger.note(Path::new("tmp/a/new/bb02/elf"), 300, new, 3);
        ledger.save().unwrap();

        let mut ledger = Ledger::open(dir).unwrap();
        assert_eq!(ledger.total(), 900);
        // Room for 650 more under 1000: the two least recently used go.
        assert!(ledger.make_room(650, 1000, &HashSet::new()));
        ledger.save().unwrap();
        assert!(
            !dir.join("tmp/a/old").exists(),
            "rprof's oldest copy evicted"
        );
        assert!(!dir.join(".build-id/aa").exists(), "with its link");
        assert!(dir.join("tmp/a/new/bb02/elf").is_file(), "the newest kept");
        assert!(dir.join(".build-id/bb/02/elf").is_file());
        assert!(
            dir.join("usr/bin/perfs/cc03/elf").is_file(),
            "perf's entry kept"
        );
        assert!(dir.join(".build-id/cc/03/elf").is_file());
        assert!(
            dir.join("tmp/b/replaced/dd04/elf").is_file(),
            "a file rprof did not write is kept"
        );
        let left: Vec<PathBuf> = Ledger::open(dir)
            .unwrap()
            .entries
            .into_iter()
            .map(|e| e.path)
            .collect();
        assert_eq!(left, vec![PathBuf::from("tmp/a/new/bb02/elf")]);
    }
}
