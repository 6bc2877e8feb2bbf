//! The spool: every profile is written here before it is sent and removed once the store took it, so that a
//! store that is down, a network that fails, or an rprof that is killed loses nothing; the next rprof with
//! the same spool sends what is left. The directory is bounded: past its size, the oldest profiles are
//! dropped (and counted).
//!
//! One file a profile, named by its period's start so that names sort oldest first:
//! `TIME_NS-PID-SEQ.push`, holding one line of JSON (where it goes: the kind of store, the query, the
//! content type) and then the body as sent. A file is written under a temporary name and renamed, so a kill
//! never leaves half a profile. A lock file keeps two rprofs from sending the same spool twice.
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
        let name = format!("{time_ns:020}-{:010}-{seq:06}{SUFFIX}", std::process::id());
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

    /// The spooled profiles, oldest first, with their sizes.
    pub(super) fn list(&self) -> Vec<(PathBuf, u64)> {
        let mut files: Vec<(PathBuf, u64)> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(SUFFIX))
            .map(|e| (e.path(), e.metadata().map_or(0, |m| m.len())))
            .collect();
        files.sort();
        files
    }

    /// Drop the oldest profiles while the spool holds more than its size.
    fn trim(&self) {
        let files = self.list();
        let mut total: u64 = files.iter().map(|f| f.1).sum();
        for (path, size) in files {
            if total <= self.max_bytes {
                break;
            }
            if std::fs::remove_file(&path).is_ok() {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
            total -= size;
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
