//! cgroup v2 (`rprof record -G`) and pid namespaces: where cgroup2 is mounted (from /proc/self/mountinfo),
//! the cgroup directory whose fd perf_event_open takes with PERF_FLAG_PID_CGROUP, the processes in it and its
//! descendants, and a process's pid in its own pid namespace (the last NSpid of /proc/PID/status).
use super::ProcessError;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// An open cgroup v2 directory.
#[derive(Debug)]
pub struct Cgroup {
    /// The name as given: a path relative to the cgroup2 mount.
    pub name: String,
    /// The directory.
    pub path: PathBuf,
    /// The directory, opened O_RDONLY | O_DIRECTORY: what perf_event_open takes as `pid` with
    /// PERF_FLAG_PID_CGROUP.
    pub dir: OwnedFd,
}

impl Cgroup {
    /// Open cgroup `name`, a path relative to the cgroup2 mount found in /proc/self/mountinfo (perf's `-G`
    /// spelling; a leading `/` is allowed).
    pub fn open(name: &str) -> Result<Cgroup, ProcessError> {
        let info = PathBuf::from("/proc/self/mountinfo");
        let text = std::fs::read(&info).map_err(|source| ProcessError::Read {
            path: info.clone(),
            source,
        })?;
        let mount = parse_cgroup2_mount(&text).ok_or(ProcessError::NoCgroup2)?;
        Self::open_under(&mount, name)
    }

    /// Open cgroup `name` under the cgroup2 mount `mount`.
    pub fn open_under(mount: &Path, name: &str) -> Result<Cgroup, ProcessError> {
        use std::os::unix::fs::OpenOptionsExt;
        let relative = name.trim_start_matches('/');
        let path = mount.join(relative);
        let not_found = || ProcessError::NoSuchCgroup {
            name: name.to_string(),
            path: path.clone(),
            mount: mount.to_path_buf(),
        };
        // A cgroup is a directory with a cgroup.procs file; `..` could leave the mount.
        if Path::new(relative)
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
            || !path.join("cgroup.procs").is_file()
        {
            return Err(not_found());
        }
        let dir = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY)
            .open(&path)
            .map_err(|source| match source.kind() {
                std::io::ErrorKind::NotFound => not_found(),
                _ => ProcessError::Read {
                    path: path.clone(),
                    source,
                },
            })?;
        Ok(Cgroup {
            name: name.to_string(),
            path,
            dir: dir.into(),
        })
    }

    /// The processes in this cgroup and its descendants now (perf events of a cgroup cover its descendants),
    /// sorted. Directories that vanish while being read are skipped.
    pub fn pids(&self) -> Vec<i32> {
        let mut pids = Vec::new();
        let mut dirs = vec![self.path.clone()];
        while let Some(dir) = dirs.pop() {
            if let Ok(text) = std::fs::read(dir.join("cgroup.procs")) {
                pids.extend(parse_pid_list(&text));
            }
            if let Ok(entries) = std::fs::read_dir(&dir) {
                dirs.extend(
                    entries
                        .filter_map(Result::ok)
                        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                        .map(|e| e.path()),
                );
            }
        }
        pids.sort_unstable();
        pids.dedup();
        pids
    }
}

/// The mount point of the first cgroup2 file system in the text of /proc/PID/mountinfo, whose lines read
/// `ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS`; the mount point has
/// spaces, tabs, newlines and backslashes escaped as `\040`, `\011`, `\012`, `\134`.
pub fn parse_cgroup2_mount(mountinfo: &[u8]) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStringExt;
    mountinfo.split(|&b| b == b'\n').find_map(|line| {
        let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
        let dash = fields.iter().position(|f| *f == b"-")?;
        if dash < 6 || fields.get(dash + 1) != Some(&&b"cgroup2"[..]) {
            return None;
        }
        Some(PathBuf::from(std::ffi::OsString::from_vec(unescape(
            fields[4],
        ))))
    })
}

/// Undo the kernel's octal escapes (`\040`) of a mountinfo field.
fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal = field.get(i + 1..i + 4).filter(|d| {
            field[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)) && d[0] <= b'3'
        });
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(field[i]);
                i += 1;
            }
        }
    }
    out
}

/// The pids of a `cgroup.procs` file, one a line.
pub fn parse_pid_list(text: &[u8]) -> Vec<i32> {
    String::from_utf8_lossy(text)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// The `NSpid:` line of /proc/PID/status: the pid in each pid namespace the process belongs to, from the
/// outermost (the one of the reader's namespace) to its own.
pub fn parse_nspids(status: &[u8]) -> Option<Vec<u32>> {
    let text = String::from_utf8_lossy(status);
    let line = text.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    let pids: Option<Vec<u32>> = line.split_whitespace().map(|p| p.parse().ok()).collect();
    pids.filter(|p| !p.is_empty())
}

/// The pid process `pid` has in its own pid namespace, when that differs from `pid` (None when it is the
/// same, or the process is gone).
pub fn ns_pid(pid: u32) -> Option<u32> {
    let status = std::fs::read(format!("/proc/{pid}/status")).ok()?;
    let innermost = *parse_nspids(&status)?.last()?;
    (innermost != pid).then_some(innermost)
}

/// The container id in a `/proc/PID/cgroup` file: the last run of 64 hex digits in a cgroup path (Docker's
/// `docker-ID.scope` or `/docker/ID`, containerd's `cri-containerd-ID.scope`, Kubernetes' `.../ID`, Podman's
/// `libpod-ID.scope`); None outside containers.
pub fn parse_container_id(cgroup: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(cgroup);
    let mut found = None;
    for line in text.lines() {
        let path = line.splitn(3, ':').nth(2).unwrap_or("");
        for part in path.split(|c: char| !c.is_ascii_hexdigit()) {
            if part.len() == 64 {
                found = Some(part.to_ascii_lowercase());
            }
        }
    }
    found
}

/// The container id of process `pid` (see [`parse_container_id`]), None outside containers or once it is
/// gone.
pub fn container_id(pid: u32) -> Option<String> {
    parse_container_id(&std::fs::read(format!("/proc/{pid}/cgroup")).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that container ids are found in the cgroup paths of Docker, containerd and Kubernetes, and that a
    /// process outside containers has none.
    #[test]
    fn container_ids() {
        let id = "3f4e5d6c7b8a99887766554433221100ffeeddccbbaa99887766554433221100";
        let docker = format!("0::/system.slice/docker-{id}.scope\n");
        assert_eq!(parse_container_id(docker.as_bytes()).as_deref(), Some(id));
        let k8s = format!("12:cpu:/kubepods/burstable/pod1234-5678/{id}\n0::/\n");
        assert_eq!(parse_container_id(k8s.as_bytes()).as_deref(), Some(id));
        let cri = format!("0::/kubepods.slice/cri-containerd-{id}.scope\n");
        assert_eq!(parse_container_id(cri.as_bytes()).as_deref(), Some(id));
        assert_eq!(
            parse_container_id(b"0::/user.slice/user-0.slice/session-3.scope\n"),
            None
        );
    }

    /// Check that the cgroup2 mount is found in a v1/v2 hybrid's mountinfo, after the optional fields, with
    /// escaped characters undone, and that a system without cgroup2 has none.
    #[test]
    fn cgroup2_mount_in_mountinfo() {
        let hybrid = b"23 1 0:21 / /sys rw,nosuid - sysfs sysfs rw\n\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
37 31 0:34 / /sys/fs/cgroup/memory rw,relatime shared:7 - cgroup cgroup rw,memory\n\
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:9 master:2 - cgroup2 cgroup2 rw\n";
        assert_eq!(
            parse_cgroup2_mount(hybrid),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        let escaped = b"41 31 0:38 / /mnt/my\\040cg\\134x rw - cgroup2 none rw\n";
        assert_eq!(
            parse_cgroup2_mount(escaped),
            Some(PathBuf::from("/mnt/my cg\\x"))
        );
        // "cgroup2" as a source or a mount point is not the file system type.
        let v1_only = b"37 31 0:34 / /cgroup2 rw - cgroup cgroup2 rw,memory\n\
garbage line\n\n";
        assert_eq!(parse_cgroup2_mount(v1_only), None);
    }

    /// Check that cgroup.procs and NSpid lines parse.
    #[test]
    fn pid_lists_and_nspids() {
        assert_eq!(parse_pid_list(b"12\n345\n\n"), vec![12, 345]);
        let status =
            b"Name:\tsh\nTgid:\t4242\nPid:\t4242\nNSpid:\t4242\t17\t1\nNStgid:\t4242\t17\t1\n";
        assert_eq!(parse_nspids(status), Some(vec![4242, 17, 1]));
        assert_eq!(parse_nspids(b"Name:\tsh\nNSpid:\t88\n"), Some(vec![88]));
        assert_eq!(parse_nspids(b"Name:\tsh\n"), None);
        assert_eq!(ns_pid(std::process::id()), None);
    }

    /// Check that a name that is not a cgroup, or leaves the mount, is refused naming the path tried.
    #[test]
    fn missing_cgroup_is_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("a")).unwrap();
        std::fs::write(dir.path().join("a/cgroup.procs"), b"1\n2\n").unwrap();
        std::fs::create_dir(dir.path().join("a/b")).unwrap();
        std::fs::write(dir.path().join("a/b/cgroup.procs"), b"3\n").unwrap();
        let cg = Cgroup::open_under(dir.path(), "/a").unwrap();
        assert_eq!(cg.pids(), vec![1, 2, 3]);
        let err = Cgroup::open_under(dir.path(), "x").unwrap_err().to_string();
        let tried = dir.path().join("x");
        assert!(
            err.contains(&format!("cgroup 'x' not found at {}", tried.display())),
            "{err}"
        );
        assert!(Cgroup::open_under(&dir.path().join("a"), "../a").is_err());
    }
}
