//! tracefs: find or mount it, create and remove uprobe/kprobe events, read event ids, list tracepoints, manage
//! instances ([`instance`]) and parse their ring-buffer pages ([`page`]; read by `perf::ftrace_ring`).
//!
//! Every function takes the tracefs root from [`Tracefs`], so tests can run the whole layer on a fake tree (a
//! temporary directory holding plain files named like the kernel's). Probe definition files are only ever opened
//! for appending: opening `uprobe_events` with `O_TRUNC` would delete every probe on the machine.
mod format;
pub mod instance;
pub mod page;
pub mod print_fmt;
mod probes;

pub use format::{parse_field_offset, parse_format, FormatField};
pub use instance::{CpuStats, Instance};
pub use page::PageLayout;
pub use print_fmt::{field_displays, symbolic_names, FieldDisplay};
pub use probes::{needs_alias, parse_probe_list, ListedProbe, ProbeDef, ProbeFile, ProbeLocation};

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The usual tracefs mount points, in the order they are tried.
pub const TRACEFS_ROOTS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// Errors of the tracefs layer.
#[derive(Debug, thiserror::Error)]
pub enum TracefsError {
    #[error("cannot find or mount tracefs at /sys/kernel/tracing or /sys/kernel/debug/tracing ({0}); run as root or mount it with `mount -t tracefs nodev /sys/kernel/tracing`")]
    Mount(String),
    #[error("tracefs is mounted at {root} but this user (uid {uid}) cannot read it: mode {mode:04o}, owner {owner}:{group}; run as root, or let a group read it (`mount -o remount,gid=GROUP,mode=0750 {root}` as root, then add the user to GROUP)")]
    Unreadable {
        root: PathBuf,
        uid: u32,
        mode: u32,
        owner: u32,
        group: u32,
    },
    #[error("cannot read {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("cannot write {path}: {error}")]
    Write {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("cannot create probe `{line}` in {path}: {error}{detail}")]
    Create {
        line: String,
        path: PathBuf,
        error: std::io::Error,
        detail: String,
    },
    #[error("the kernel refused the filter `{filter}` on {event}: {detail}; check the field names in its format file, or write that part of the filter differently")]
    Filter {
        event: String,
        filter: String,
        detail: String,
    },
    #[error("this kernel has no {path} (it was built without CONFIG_KPROBE_EVENTS), so kernel functions cannot be probed; use `syscall:NAME` or `t:CATEGORY:EVENT` tracepoints, or -x BINARY for user functions")]
    NoKprobes { path: PathBuf },
    #[error("this kernel has no {path} (it was built without CONFIG_UPROBE_EVENTS), so user functions cannot be probed")]
    NoUprobes { path: PathBuf },
    #[error("this kernel has no {path}, so it takes no event probes (e:, Linux 5.15 and later with CONFIG_PROBE_EVENTS)")]
    NoEventProbes { path: PathBuf },
    #[error("bad event id in {path}: {text:?}")]
    BadId { path: PathBuf, text: String },
    #[error("this tracefs has no {path} directory, so no private trace instance can be made (instances need Linux 3.11 or later)")]
    NoInstances { path: PathBuf },
    #[error("bad tracefs instance name {name:?}: use a non-empty name without `/`")]
    InstanceName { name: String },
    #[error("the tracefs instance {path} already exists; remove it with `rmdir {path}` (if no tracer uses it) or pick another name")]
    InstanceExists { path: PathBuf },
    #[error("there is no tracefs instance {path}; create it first (or list them with `ls {}`)", path.parent().map(|p| p.display().to_string()).unwrap_or_default())]
    NoSuchInstance { path: PathBuf },
    #[error("cannot create the tracefs instance {path}: {error}; creating instances needs root (CAP_SYS_ADMIN)")]
    InstanceCreate {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("cannot remove the tracefs instance {path}: {error}; close every file open in it (its trace_pipe_raw readers), then `rmdir {path}`")]
    InstanceRemove {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("the trace clock {clock:?} is not offered by {path} (it offers: {available}); pick one of those")]
    NoClock {
        clock: String,
        path: PathBuf,
        available: String,
    },
    #[error("cannot resize the ring buffer with {path}: {error}; a buffer cannot be resized while its per-CPU rings are memory-mapped, so set the size before opening them")]
    Resize {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// Parse `available_filter_functions`: one `name` or `name [module]` per line; returns the names.
pub fn parse_filter_functions(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect()
}

/// A tracefs mount.
#[derive(Clone, Debug)]
pub struct Tracefs {
    root: PathBuf,
}

impl Tracefs {
    /// Use the tracefs tree at `root` as is (a real mount or a fake tree in tests).
    pub fn at(root: impl Into<PathBuf>) -> Tracefs {
        Tracefs { root: root.into() }
    }

    /// Find tracefs at `/sys/kernel/tracing` or `/sys/kernel/debug/tracing`, mounting it at the first if absent.
    pub fn find_or_mount() -> Result<Tracefs, TracefsError> {
        for root in TRACEFS_ROOTS {
            let t = Tracefs::at(root);
            if t.is_mounted() {
                return Ok(t);
            }
        }
        if let Some((root, e)) = Tracefs::mounted_unreadable() {
            // Another process (a second rprof starting at once) may have mounted it since the look above:
            // then it is readable now, not refused.
            let t = Tracefs::at(&root);
            return if t.is_mounted() { Ok(t) } else { Err(e) };
        }
        let mut errors = Vec::new();
        for root in TRACEFS_ROOTS {
            match nix::mount::mount(
                Some("nodev"),
                root,
                Some("tracefs"),
                nix::mount::MsFlags::empty(),
                None::<&str>,
            ) {
                Ok(()) => {
                    let t = Tracefs::at(root);
                    if t.is_mounted() {
                        return Ok(t);
                    }
                    errors.push(format!("{root}: mounted but empty"));
                }
                // EBUSY: another process (a second rprof, bpftrace, perf) is mounting it at this moment;
                // its mount is complete once the kernel answers, so look again.
                Err(nix::errno::Errno::EBUSY) if Tracefs::wait_mounted(root) => {
                    return Ok(Tracefs::at(root));
                }
                Err(e) => errors.push(format!("mount {root}: {e}")),
            }
        }
        Err(TracefsError::Mount(errors.join("; ")))
    }

    /// A tracefs mounted (in /proc/self/mounts) at one of the usual roots, and the error to give if this user
    /// cannot read it.
    fn mounted_unreadable() -> Option<(PathBuf, TracefsError)> {
        use std::os::unix::fs::MetadataExt;
        let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
        let root = mounts.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(2) == Some(&"tracefs") && TRACEFS_ROOTS.contains(f.get(1)?))
                .then(|| f[1].to_string())
        })?;
        let meta = std::fs::metadata(&root).ok()?;
        let root = PathBuf::from(root);
        let error = TracefsError::Unreadable {
            root: root.clone(),
            uid: nix::unistd::geteuid().as_raw(),
            mode: meta.mode() & 0o7777,
            owner: meta.uid(),
            group: meta.gid(),
        };
        Some((root, error))
    }

    /// Whether `root` shows a mounted tracefs within a second: after EBUSY, another process's mount of it.
    fn wait_mounted(root: &str) -> bool {
        for _ in 0..100 {
            if Tracefs::at(root).is_mounted() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        false
    }

    /// True when the tree looks like a mounted tracefs (it has `available_events` or `events/`).
    pub fn is_mounted(&self) -> bool {
        self.root.join("available_events").exists() || self.root.join("events").is_dir()
    }

    /// The root directory.
    /// The last filter error tracefs logged (`error_log`), for [`TracefsError::Filter`].
    pub fn filter_error(&self) -> String {
        filter_error(self.read("error_log").ok())
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn read(&self, rel: impl AsRef<Path>) -> Result<String, TracefsError> {
        let path = self.root.join(rel);
        fs::read_to_string(&path).map_err(|error| TracefsError::Read { path, error })
    }

    /// Append `text` to a control file in one `write(2)`, never truncating it.
    fn append(&self, rel: impl AsRef<Path>, text: &str) -> Result<(), std::io::Error> {
        let path = self.root.join(rel);
        let mut f = OpenOptions::new().append(true).open(path)?;
        f.write_all(text.as_bytes())
    }

    /// The kernel functions that can be probed (`available_filter_functions`).
    pub fn available_functions(&self) -> Result<Vec<String>, TracefsError> {
        Ok(parse_filter_functions(
            &self.read("available_filter_functions")?,
        ))
    }

    /// The tracepoint categories (`events/*` directories that hold events).
    pub fn categories(&self) -> Result<Vec<String>, TracefsError> {
        self.dir_names(Path::new("events"))
    }

    /// The events of one category (`events/CATEGORY/*` directories).
    pub fn events(&self, category: &str) -> Result<Vec<String>, TracefsError> {
        self.dir_names(&Path::new("events").join(category))
    }

    fn dir_names(&self, rel: &Path) -> Result<Vec<String>, TracefsError> {
        let path = self.root.join(rel);
        let entries = fs::read_dir(&path).map_err(|error| TracefsError::Read {
            path: path.clone(),
            error,
        })?;
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        names.sort();
        Ok(names)
    }
}

/// The message of the last error in an `error_log` text (`... error: Illegal integer value`).
pub fn filter_error(log: Option<String>) -> String {
    log.as_deref()
        .and_then(|log| log.lines().rev().find_map(|l| l.split_once("error: ")))
        .map_or_else(
            || "see error_log".to_string(),
            |(_, m)| m.trim().to_string(),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that probe lines of both files parse into kind, group and event.
    #[test]
    fn parses_probe_listing() {
        let text =
            "p:rprof_12/e0 /bin/x:0x0000000000001139\nr:rprof_12/r0 /bin/x:0x0000000000001139\n\
                    p:kprobes/myprobe do_sys_open\n";
        let got = parse_probe_list(text);
        assert_eq!(got.len(), 3);
        assert_eq!(
            got[1],
            ListedProbe {
                kind: 'r',
                group: "rprof_12".into(),
                event: "r0".into()
            }
        );
        assert_eq!(got[2].group, "kprobes");
    }

    /// Check that probe definitions render the kernel's syntax.
    #[test]
    fn renders_probe_lines() {
        let u = ProbeDef {
            group: "rprof_1".into(),
            event: "e3".into(),
            is_return: false,
            location: ProbeLocation::User {
                path: "/usr/bin/x".into(),
                offset: 0x1139,
                ref_ctr: None,
            },
            fetch: vec!["sp=%sp".into()],
        };
        assert_eq!(u.line(), "p:rprof_1/e3 /usr/bin/x:0x1139 sp=%sp");
        let k = ProbeDef {
            group: "rprof_1".into(),
            event: "r3".into(),
            is_return: true,
            location: ProbeLocation::Kernel {
                symbol: "vfs_read".into(),
            },
            fetch: Vec::new(),
        };
        assert_eq!(k.line(), "r:rprof_1/r3 vfs_read");
        assert_eq!(k.file(), ProbeFile::Kprobe);
    }

    /// Check that field offsets are read from an event format.
    #[test]
    fn parses_format_offsets() {
        let f = "name: r0\nID: 1\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\n\
                 \tfield:unsigned long __probe_func;\toffset:8;\tsize:8;\tsigned:0;\n\
                 \tfield:unsigned long __probe_ret_ip;\toffset:16;\tsize:8;\tsigned:0;\n";
        assert_eq!(parse_field_offset(f, "__probe_func"), Some(8));
        assert_eq!(parse_field_offset(f, "__probe_ret_ip"), Some(16));
        assert_eq!(parse_field_offset(f, "__probe_ip"), None);
    }

    /// Check that available_filter_functions lines keep only the names.
    #[test]
    fn parses_filter_functions() {
        let got = parse_filter_functions("vfs_read\nfoo_init [foo]\n\n");
        assert_eq!(got, vec!["vfs_read".to_string(), "foo_init".to_string()]);
    }
}
