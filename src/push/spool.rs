//! The spool: every profile is written here before it is sent and removed once the store took it, so that a
//! store that is down, a network that fails, or an rprof that is killed loses nothing; the next rprof with
//! the same spool sends what is left. The directory is bounded: past its size, the oldest profiles are
//! dropped (and counted).
//!
//! One file a profile, named by its period's start so that names sort oldest first, and by its destination:
//! `TIME_NS-PID-SEQ-KEY.push` (KEY: [`Destination::key`] in hex), holding one line of JSON (where it goes:
//! the destination, the query, the content type) and then the body as sent. A file is written under a
//! temporary name and renamed, so a kill never leaves half a profile. A lock file keeps two rprofs from
//! sending the same spool twice.
//!
//! The spool is shared by destinations and its size bound is global, but a profile is only sent to its own
//! destination: the others' profiles wait for an rprof pushing there. Files of older rprofs
//! (`TIME_NS-PID-SEQ.push`, no destination recorded) are never sent, since their store is unknown; they are
//! kept, oldest, so the size bound drops them first.
use super::destination::Destination;
use super::PushError;
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Where a spooled profile goes.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Request {
    /// `pyroscope` (POST URL/ingest?QUERY) or `otlp` (POST URL).
    pub kind: String,
    pub query: String,
    pub content_type: String,
    /// The store it was made for; None in files of older rprofs, which are never sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<Destination>,
}

/// A file in the spool.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Spooled {
    pub(super) path: PathBuf,
    pub(super) size: u64,
    /// Its destination's key (from the name); None for a file of an older rprof.
    pub(super) key: Option<u64>,
}

/// What the spool holds for destinations other than the given ones.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Elsewhere {
    /// Each other destination, with how many profiles wait for it (by destination).
    pub others: Vec<(Destination, usize)>,
    /// Files of rprof before destinations were recorded: never sent.
    pub unkeyed: usize,
}

/// A profile in the spool.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) path: PathBuf,
    pub(super) request: Request,
    pub(super) body: Vec<u8>,
}

pub(super) struct Spool {
    dir: PathBuf,
    max_bytes: u64,
    seq: AtomicU64,
    pub(super) dropped: AtomicU64,
    _lock: Flock<File>,
}

const SUFFIX: &str = ".push";

impl Spool {
    /// Open (create) the spool directory and lock it.
    pub(super) fn open(dir: &Path, max_bytes: u64) -> Result<Spool, PushError> {
        let fail = |source| PushError::Spool {
            path: dir.to_path_buf(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(fail)?;
        let lock_path = dir.join(".lock");
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(fail)?;
        let lock = Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|(_, errno)| {
            PushError::SpoolBusy {
                path: dir.to_path_buf(),
                errno,
            }
        })?;
        Ok(Spool {
            dir: dir.to_path_buf(),
            max_bytes,
            seq: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            _lock: lock,
        })
    }

    /// Add a profile of the period that started at `time_ns`; then drop the oldest profiles while the spool
    /// is over its size.
    pub(super) fn put(
        &self,
        time_ns: u64,
        request: &Request,
        body: &[u8],
    ) -> Result<(), PushError> {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let key = request.to.as_ref().map_or(0, Destination::key);
        let name = format!(
            "{time_ns:020}-{:010}-{seq:06}-{key:016x}{SUFFIX}",
            std::process::id()
        );
        let fail = |source| PushError::Spool {
            path: self.dir.clone(),
            source,
        };
        let mut tmp = tempfile::NamedTempFile::new_in(&self.dir).map_err(fail)?;
        let header = serde_json::to_string(request).unwrap_or_default();
        tmp.write_all(header.as_bytes()).map_err(fail)?;
        tmp.write_all(b"\n").map_err(fail)?;
        tmp.write_all(body).map_err(fail)?;
        tmp.persist(self.dir.join(name))
            .map_err(|e| fail(e.error))?;
        self.trim();
        Ok(())
    }

    /// The spooled profiles of every destination, oldest first, with their sizes and destination keys.
    pub(super) fn list(&self) -> Vec<Spooled> {
        let mut files: Vec<Spooled> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let stem = name.strip_suffix(SUFFIX)?;
                Some(Spooled {
                    path: e.path(),
                    size: e.metadata().map_or(0, |m| m.len()),
                    key: name_key(stem),
                })
            })
            .collect();
        files.sort();
        files
    }

    /// The spooled profiles for these destination keys, oldest first.
    pub(super) fn list_for(&self, keys: &[u64]) -> Vec<Spooled> {
        let mut files = self.list();
        files.retain(|f| f.key.is_some_and(|k| keys.contains(&k)));
        files
    }

    /// What waits for destinations other than `keys` (each file's first line read, not its body).
    pub(super) fn elsewhere(&self, keys: &[u64]) -> Elsewhere {
        let mut counts: std::collections::BTreeMap<Destination, usize> = Default::default();
        let mut unkeyed = 0;
        for f in self.list() {
            match f.key {
                Some(k) if keys.contains(&k) => {}
                Some(_) => match header(&f.path).and_then(|r| r.to) {
                    Some(to) => *counts.entry(to).or_default() += 1,
                    None => unkeyed += 1,
                },
                None => unkeyed += 1,
            }
        }
        Elsewhere {
            others: counts.into_iter().collect(),
            unkeyed,
        }
    }

    /// Drop the oldest profiles (of any destination) while the spool holds more than its size.
    fn trim(&self) {
        let files = self.list();
        let mut total: u64 = files.iter().map(|f| f.size).sum();
        for f in files {
            if total <= self.max_bytes {
                break;
            }
            if std::fs::remove_file(&f.path).is_ok() {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
            total -= f.size;
        }
    }

    /// Read a spooled profile; None when it is gone (sent, or dropped meanwhile) or unreadable (removed).
    pub(super) fn read(&self, path: &Path) -> Option<Entry> {
        let bytes = std::fs::read(path).ok()?;
        let newline = bytes.iter().position(|&b| b == b'\n');
        let request = newline.and_then(|n| serde_json::from_slice(&bytes[..n]).ok());
        let (Some(n), Some(request)) = (newline, request) else {
            let _ = std::fs::remove_file(path);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        Some(Entry {
            path: path.to_path_buf(),
            request,
            body: bytes[n + 1..].to_vec(),
        })
    }

    pub(super) fn remove(&self, path: &Path) {
        let _ = std::fs::remove_file(path);
    }
}

/// The destination key in a file name's stem (`TIME-PID-SEQ-KEY`); None for an older rprof's `TIME-PID-SEQ`.
fn name_key(stem: &str) -> Option<u64> {
    let mut parts = stem.split('-');
    let key = parts.nth(3)?;
    match (parts.next(), key.len()) {
        (None, 16) => u64::from_str_radix(key, 16).ok(),
        _ => None,
    }
}

/// The first line of a spooled file: where it goes (without reading the body).
fn header(path: &Path) -> Option<Request> {
    use std::io::BufRead;
    let mut line = Vec::new();
    std::io::BufReader::new(File::open(path).ok()?)
        .read_until(b'\n', &mut line)
        .ok()?;
    serde_json::from_slice(line.strip_suffix(b"\n")?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(to: Option<Destination>) -> Request {
        Request {
            kind: "pyroscope".into(),
            query: "name=a".into(),
            content_type: "x".into(),
            to,
        }
    }

    /// Check that profiles are listed by destination, that what waits for other destinations is counted by
    /// destination, and that an older rprof's file (no destination) is never listed for sending but counted.
    #[test]
    fn profiles_listed_by_destination() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path(), 1 << 20).unwrap();
        let a = Destination::new("pyroscope", "http://127.0.0.1:9", None, None);
        let b = Destination::new("pyroscope", "http://127.0.0.1:9", Some("t"), None);
        spool.put(1, &request(Some(a.clone())), b"1").unwrap();
        spool.put(2, &request(Some(b.clone())), b"2").unwrap();
        spool.put(3, &request(Some(a.clone())), b"3").unwrap();
        let old = dir
            .path()
            .join(format!("{:020}-{:010}-{:06}.push", 0, 1, 0));
        std::fs::write(
            &old,
            b"{\"kind\":\"pyroscope\",\"query\":\"\",\"content_type\":\"x\"}\nbody",
        )
        .unwrap();
        assert_eq!(spool.list().len(), 4);
        let mine = spool.list_for(&[a.key()]);
        let bodies: Vec<Vec<u8>> = mine
            .iter()
            .map(|f| spool.read(&f.path).unwrap().body)
            .collect();
        assert_eq!(bodies, [b"1".to_vec(), b"3".to_vec()]);
        assert_eq!(
            spool.read(&mine[0].path).unwrap().request.to,
            Some(a.clone())
        );
        let elsewhere = spool.elsewhere(&[a.key()]);
        assert_eq!(elsewhere.others, [(b.clone(), 1)]);
        assert_eq!(elsewhere.unkeyed, 1);
        assert!(spool
            .list_for(&[a.key(), b.key()])
            .iter()
            .all(|f| f.path != old));
    }

    /// Check that the size bound is global: the oldest profile goes first, whatever its destination.
    #[test]
    fn size_bound_is_global() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path(), 2500).unwrap();
        let a = Destination::new("pyroscope", "http://a", None, None);
        let b = Destination::new("otlp", "http://b", None, None);
        spool.put(1, &request(Some(a.clone())), &[0; 1000]).unwrap();
        spool.put(2, &request(Some(b.clone())), &[0; 1000]).unwrap();
        spool.put(3, &request(Some(b.clone())), &[0; 1000]).unwrap();
        assert_eq!(spool.dropped.load(Ordering::Relaxed), 1);
        assert!(spool.list_for(&[a.key()]).is_empty());
        assert_eq!(spool.list_for(&[b.key()]).len(), 2);
    }
}
