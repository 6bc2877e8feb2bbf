//! /proc parsers: memory maps, threads, command names, cgroups and pid namespaces. Parsers are pure functions
//! on bytes; the readers around them name the file they could not read.
use std::path::{Path, PathBuf};

mod cgroup;
mod space;
pub use cgroup::{
    container_id, ns_pid, parse_cgroup2_mount, parse_container_id, parse_nspids, parse_pid_list,
    Cgroup,
};
pub use space::{AddressSpace, AddressSpaces, FileId, Mapping, TaskEvent};

/// Errors reading /proc.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error("no such process: {pid} (check the PID with `ps`)")]
    NoSuchProcess { pid: i32 },
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "cgroup '{name}' not found at {path}; -G takes a path relative to the cgroup2 mount ({mount}), \
         e.g. -G system.slice/docker-ID.scope"
    )]
    NoSuchCgroup {
        name: String,
        path: PathBuf,
        mount: PathBuf,
    },
    #[error(
        "no cgroup2 file system is mounted (none in /proc/self/mountinfo); mount one, e.g. \
         mount -t cgroup2 none /sys/fs/cgroup/unified"
    )]
    NoCgroup2,
}

/// One line of /proc/PID/maps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapEntry {
    pub start: u64,
    pub end: u64,
    pub read: bool,
    pub write: bool,
    pub exec: bool,
    pub private: bool,
    pub offset: u64,
    pub dev_major: u32,
    pub dev_minor: u32,
    pub inode: u64,
    /// The path, `[vdso]`/`[stack]`/... or empty for anonymous memory.
    pub path: String,
}

/// Parse the text of /proc/PID/maps. Lines that do not parse are skipped.
pub fn parse_maps(text: &[u8]) -> Vec<MapEntry> {
    text.split(|&b| b == b'\n')
        .filter_map(|line| parse_maps_line(&String::from_utf8_lossy(line)))
        .collect()
}

fn parse_maps_line(line: &str) -> Option<MapEntry> {
    // 7f5a1c000000-7f5a1c021000 r-xp 00001000 08:01 1234   /usr/lib/x.so
    let mut it = line.splitn(6, ' ');
    let (range, perms, offset, dev, inode) =
        (it.next()?, it.next()?, it.next()?, it.next()?, it.next()?);
    let path = it.next().unwrap_or("").trim_start().to_string();
    let (start, end) = range.split_once('-')?;
    let (maj, min) = dev.split_once(':')?;
    let p = perms.as_bytes();
    if p.len() < 4 {
        return None;
    }
    Some(MapEntry {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        read: p[0] == b'r',
        write: p[1] == b'w',
        exec: p[2] == b'x',
        private: p[3] == b'p',
        offset: u64::from_str_radix(offset, 16).ok()?,
        dev_major: u32::from_str_radix(maj, 16).ok()?,
        dev_minor: u32::from_str_radix(min, 16).ok()?,
        inode: inode.trim().parse().ok()?,
        path,
    })
}

fn read_proc(pid: i32, path: PathBuf) -> Result<Vec<u8>, ProcessError> {
    std::fs::read(&path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            ProcessError::NoSuchProcess { pid }
        } else {
            ProcessError::Read { path, source }
        }
    })
}

/// The memory maps of a process.
pub fn maps(pid: i32) -> Result<Vec<MapEntry>, ProcessError> {
    Ok(parse_maps(&read_proc(pid, proc_path(pid, "maps"))?))
}

/// The thread ids of a process (from /proc/PID/task).
pub fn threads(pid: i32) -> Result<Vec<i32>, ProcessError> {
    let dir = proc_path(pid, "task");
    let entries = std::fs::read_dir(&dir).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            ProcessError::NoSuchProcess { pid }
        } else {
            ProcessError::Read { path: dir, source }
        }
    })?;
    let mut tids: Vec<i32> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    Ok(tids)
}

/// The command name of a thread (/proc/PID/task/TID/comm), without the newline.
pub fn comm(pid: i32, tid: i32) -> Result<String, ProcessError> {
    let bytes = read_proc(pid, proc_path(pid, &format!("task/{tid}/comm")))?;
    Ok(String::from_utf8_lossy(&bytes)
        .trim_end_matches('\n')
        .to_string())
}

/// The thread-group id (process id) of a thread, from /proc/TID/status.
pub fn tgid(tid: i32) -> Result<i32, ProcessError> {
    let bytes = read_proc(tid, proc_path(tid, "status"))?;
    parse_status_field(&bytes, "Tgid:").ok_or(ProcessError::NoSuchProcess { pid: tid })
}

/// A numeric field of /proc/PID/status, e.g. "Tgid:".
pub fn parse_status_field(status: &[u8], field: &str) -> Option<i32> {
    String::from_utf8_lossy(status)
        .lines()
        .find_map(|l| l.strip_prefix(field).map(|v| v.trim().parse().ok()))?
}

/// The real user and group ids of a task: the first numbers of `Uid:` and `Gid:` in /proc/TID/status (what
/// the kernel's `current_uid_gid()` gives bpftrace's `uid` and `gid`).
pub fn ids(tid: i32) -> Option<(u32, u32)> {
    let status = std::fs::read(format!("/proc/{tid}/status")).ok()?;
    let text = String::from_utf8_lossy(&status);
    let first = |field: &str| -> Option<u32> {
        text.lines()
            .find_map(|l| l.strip_prefix(field))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    Some((first("Uid:")?, first("Gid:")?))
}

/// Every process id in /proc.
pub fn all_pids() -> Vec<i32> {
    let mut pids: Vec<i32> = std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    pids.sort_unstable();
    pids
}

/// Whether a process (or thread) exists.
pub fn exists(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Where this process reaches `path` as process `pid` sees it: `/proc/PID/root/PATH`, through the target's
/// root directory (another one inside a container). `path` is taken as absolute.
pub fn root_path(pid: u32, path: &Path) -> PathBuf {
    let relative = path.strip_prefix("/").unwrap_or(path);
    PathBuf::from(format!("/proc/{pid}/root")).join(relative)
}

/// Open a file that process `pid` maps or runs, as that process sees it: through [`root_path`], else (the
/// process is gone, or `path` is relative) by `path` as is. Returns the file and the path it was opened as;
/// the error is the one of opening `path` as is.
pub fn open_target_file(pid: u32, path: &Path) -> std::io::Result<(std::fs::File, PathBuf)> {
    if path.is_absolute() {
        let in_root = root_path(pid, path);
        if let Ok(file) = std::fs::File::open(&in_root) {
            return Ok((file, in_root));
        }
    }
    std::fs::File::open(path).map(|file| (file, path.to_path_buf()))
}

fn proc_path(pid: i32, rest: &str) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/{rest}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that maps lines with paths, spaces, pseudo-paths and anonymous memory parse.
    #[test]
    fn maps_lines() {
        let text = b"55d0c0000000-55d0c0001000 r-xp 00001000 08:01 1234                       /usr/bin/my prog\n\
7ffd1000-7ffd2000 rw-p 00000000 00:00 0                          [stack]\n\
7f0000000000-7f0000001000 rw-p 00000000 00:00 0 \n\
garbage\n";
        let m = parse_maps(text);
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].start, 0x55d0c0000000);
        assert!(m[0].exec && m[0].private && !m[0].write);
        assert_eq!(m[0].offset, 0x1000);
        assert_eq!((m[0].dev_major, m[0].dev_minor, m[0].inode), (8, 1, 1234));
        assert_eq!(m[0].path, "/usr/bin/my prog");
        assert_eq!(m[1].path, "[stack]");
        assert_eq!(m[2].path, "");
    }

    /// Check that status fields parse.
    #[test]
    fn status_fields() {
        assert_eq!(
            parse_status_field(b"Name:\tx\nTgid:\t42\nPid:\t43\n", "Tgid:"),
            Some(42)
        );
        assert_eq!(parse_status_field(b"Name:\tx\n", "Tgid:"), None);
    }

    /// Check that our own process reads back: maps include our executable, threads include us.
    #[test]
    fn reads_self() {
        let pid = std::process::id() as i32;
        assert!(maps(pid).unwrap().iter().any(|m| m.exec));
        assert!(threads(pid).unwrap().contains(&pid));
        assert_eq!(tgid(pid).unwrap(), pid);
        assert!(matches!(
            maps(i32::MAX),
            Err(ProcessError::NoSuchProcess { .. })
        ));
    }

    /// Check that a target's file opens through its root while it lives, and by its own path otherwise.
    #[test]
    fn opens_target_files() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bin");
        std::fs::write(&file, b"x").unwrap();
        let me = std::process::id();
        let (_, opened) = open_target_file(me, &file).unwrap();
        assert_eq!(
            opened,
            Path::new(&format!("/proc/{me}/root")).join(file.strip_prefix("/").unwrap())
        );
        let (_, opened) = open_target_file(u32::MAX, &file).unwrap();
        assert_eq!(opened, file);
        let missing = dir.path().join("missing");
        let err = open_target_file(me, &missing).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    }
}
