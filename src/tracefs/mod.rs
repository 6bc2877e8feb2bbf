//! tracefs: find or mount it, create and remove uprobe/kprobe events, read event ids, list tracepoints, manage
//! instances ([`instance`]) and parse their ring-buffer pages ([`page`]; read by `perf::ftrace_ring`).
//!
//! Every function takes the tracefs root from [`Tracefs`], so tests can run the whole layer on a fake tree (a
//! temporary directory holding plain files named like the kernel's). Probe definition files are only ever opened
//! for appending: opening `uprobe_events` with `O_TRUNC` would delete every probe on the machine.
pub mod instance;
pub mod page;

pub use instance::{CpuStats, Instance};
pub use page::PageLayout;

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
    #[error("this kernel has no {path} (it was built without CONFIG_KPROBE_EVENTS), so kernel functions cannot be probed; use `syscall:NAME` or `t:CATEGORY:EVENT` tracepoints, or -x BINARY for user functions")]
    NoKprobes { path: PathBuf },
    #[error("this kernel has no {path} (it was built without CONFIG_UPROBE_EVENTS), so user functions cannot be probed")]
    NoUprobes { path: PathBuf },
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

/// Which definition file a dynamic probe lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProbeFile {
    /// `uprobe_events`
    Uprobe,
    /// `kprobe_events`
    Kprobe,
}

impl ProbeFile {
    /// The file name under the tracefs root.
    pub fn file_name(self) -> &'static str {
        match self {
            ProbeFile::Uprobe => "uprobe_events",
            ProbeFile::Kprobe => "kprobe_events",
        }
    }
}

/// Where a probe is placed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeLocation {
    /// A file offset in a binary (`/path:0xOFFSET`), with the file offset of a USDT semaphore that the kernel
    /// counts up while the probe is enabled (`/path:0xOFFSET(0xREF)`).
    User {
        path: PathBuf,
        offset: u64,
        ref_ctr: Option<u64>,
    },
    /// A kernel symbol (`function`, optionally `module:function`).
    Kernel { symbol: String },
}

/// One dynamic probe event: `p:` (entry) or `r:` (return) `GROUP/EVENT LOCATION`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeDef {
    pub group: String,
    /// A short name in `[A-Za-z0-9_]`.
    pub event: String,
    /// `r:` (uretprobe / kretprobe) instead of `p:`.
    pub is_return: bool,
    pub location: ProbeLocation,
    /// Fetch arguments, `NAME=ARG` (`sp=%sp`, `ret=$retval`); every point of one event must have the same.
    pub fetch: Vec<String>,
}

impl ProbeDef {
    /// The file this probe is defined in.
    pub fn file(&self) -> ProbeFile {
        match self.location {
            ProbeLocation::User { .. } => ProbeFile::Uprobe,
            ProbeLocation::Kernel { .. } => ProbeFile::Kprobe,
        }
    }

    /// The definition line, without the newline.
    pub fn line(&self) -> String {
        self.line_with(None)
    }

    /// The definition line with `alias` written for the user path (see [`Tracefs::add_probes`]).
    fn line_with(&self, alias: Option<&str>) -> String {
        let kind = if self.is_return { 'r' } else { 'p' };
        let mut line = match &self.location {
            ProbeLocation::User {
                path,
                offset,
                ref_ctr,
            } => {
                let semaphore = ref_ctr.map_or(String::new(), |r| format!("(0x{r:x})"));
                let path = alias.map_or_else(|| path.display().to_string(), str::to_string);
                format!(
                    "{kind}:{}/{} {path}:0x{offset:x}{semaphore}",
                    self.group, self.event,
                )
            }
            ProbeLocation::Kernel { symbol } => {
                format!("{kind}:{}/{} {symbol}", self.group, self.event)
            }
        };
        for arg in &self.fetch {
            line.push(' ');
            line.push_str(arg);
        }
        line
    }
}

/// The files of user probes whose paths `uprobe_events` cannot parse, open for as long as the probes are
/// written, each named `/proc/self/fd/N`.
struct PathAliases {
    open: Vec<(PathBuf, fs::File)>,
}

impl PathAliases {
    /// Open every path of `defs` that needs an alias.
    fn open(defs: &[ProbeDef]) -> Result<PathAliases, TracefsError> {
        let mut open: Vec<(PathBuf, fs::File)> = Vec::new();
        for d in defs {
            let ProbeLocation::User { path, .. } = &d.location else {
                continue;
            };
            if !needs_alias(path) || open.iter().any(|(p, _)| p == path) {
                continue;
            }
            let file = fs::File::open(path).map_err(|error| TracefsError::Read {
                path: path.clone(),
                error,
            })?;
            open.push((path.clone(), file));
        }
        Ok(PathAliases { open })
    }

    /// `/proc/self/fd/N` for a def whose path needs it.
    fn of(&self, def: &ProbeDef) -> Option<String> {
        use std::os::fd::AsRawFd;
        let ProbeLocation::User { path, .. } = &def.location else {
            return None;
        };
        let (_, file) = self.open.iter().find(|(p, _)| p == path)?;
        Some(format!("/proc/self/fd/{}", file.as_raw_fd()))
    }
}

/// Whether `uprobe_events` cannot take `path` as written: whitespace or control characters (it splits at
/// whitespace and ends lines at newlines), bytes that are not UTF-8 (the line is text), or a length that, with
/// the rest of the line, would pass the kernel's 4 KiB line limit.
pub fn needs_alias(path: &Path) -> bool {
    let Some(text) = path.to_str() else {
        return true;
    };
    text.len() > 1024 || text.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// A probe line as listed by `uprobe_events` / `kprobe_events`: kind, group and event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedProbe {
    pub kind: char,
    pub group: String,
    pub event: String,
}

/// Parse the listing of `uprobe_events` or `kprobe_events` (`p:group/event location ...` per line).
pub fn parse_probe_list(text: &str) -> Vec<ListedProbe> {
    text.lines()
        .filter_map(|line| {
            let head = line.split_whitespace().next()?;
            let (kind, rest) = head.split_once(':')?;
            let (group, event) = rest.split_once('/')?;
            Some(ListedProbe {
                kind: kind.chars().next()?,
                group: group.to_string(),
                event: event.to_string(),
            })
        })
        .collect()
}

/// Parse `available_filter_functions`: one `name` or `name [module]` per line; returns the names.
pub fn parse_filter_functions(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect()
}

/// The offset of `field` in an event's `format` text (`field:unsigned long __probe_ip;\toffset:8;...`).
pub fn parse_field_offset(format: &str, field: &str) -> Option<usize> {
    format.lines().find_map(|line| {
        let decl = line.trim().strip_prefix("field:")?;
        let (decl, rest) = decl.split_once(';')?;
        let name = decl.split_whitespace().last()?.trim_start_matches('*');
        if name != field {
            return None;
        }
        rest.split(';')
            .find_map(|kv| kv.trim().strip_prefix("offset:")?.parse().ok())
    })
}

/// Lines written per `write(2)`: the kernel parses up to 4096 bytes per chunk, line by line.
const WRITE_CHUNK: usize = 3800;
/// Further attempts at removing a group whose probes are still busy (after 20, 40, 80, 160, 320 ms).
const REMOVE_RETRIES: u32 = 5;

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
                Err(e) => errors.push(format!("mount {root}: {e}")),
            }
        }
        Err(TracefsError::Mount(errors.join("; ")))
    }

    /// True when the tree looks like a mounted tracefs (it has `available_events` or `events/`).
    pub fn is_mounted(&self) -> bool {
        self.root.join("available_events").exists() || self.root.join("events").is_dir()
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// True when the kernel offers `kprobe_events` (CONFIG_KPROBE_EVENTS).
    pub fn has_kprobes(&self) -> bool {
        self.root.join(ProbeFile::Kprobe.file_name()).exists()
    }

    /// Fail with a clear error when the definition file for `file` is missing.
    pub fn require(&self, file: ProbeFile) -> Result<(), TracefsError> {
        let path = self.root.join(file.file_name());
        if path.exists() {
            return Ok(());
        }
        Err(match file {
            ProbeFile::Kprobe => TracefsError::NoKprobes { path },
            ProbeFile::Uprobe => TracefsError::NoUprobes { path },
        })
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

    /// The probes listed in `file` (empty when the file does not exist).
    pub fn list_probes(&self, file: ProbeFile) -> Result<Vec<ListedProbe>, TracefsError> {
        if !self.root.join(file.file_name()).exists() {
            return Ok(Vec::new());
        }
        Ok(parse_probe_list(&self.read(file.file_name())?))
    }

    /// Create probe events, batching many lines per write (1,000 probes take well under a second).
    ///
    /// A file whose path `uprobe_events` cannot take as written (it splits lines at whitespace and takes 4 KiB
    /// lines at most) is opened and named `/proc/self/fd/N`: the kernel resolves that magic link, when the line
    /// is written, to the same inode, and keeps it.
    ///
    /// On failure, the error names the first line whose event was not created. Events created before it stay;
    /// the caller removes the whole group.
    pub fn add_probes(&self, defs: &[ProbeDef]) -> Result<(), TracefsError> {
        let aliases = PathAliases::open(defs)?;
        for file in [ProbeFile::Uprobe, ProbeFile::Kprobe] {
            let lines: Vec<(String, &ProbeDef)> = defs
                .iter()
                .filter(|d| d.file() == file)
                .map(|d| (d.line_with(aliases.of(d).as_deref()), d))
                .collect();
            if lines.is_empty() {
                continue;
            }
            self.require(file)?;
            let mut batch = String::new();
            let mut batch_defs: Vec<&ProbeDef> = Vec::new();
            for (i, (line, def)) in lines.iter().enumerate() {
                batch.push_str(line);
                batch.push('\n');
                batch_defs.push(def);
                let next_len = lines.get(i + 1).map_or(usize::MAX, |(l, _)| l.len() + 1);
                if batch.len().saturating_add(next_len) > WRITE_CHUNK {
                    self.write_batch(file, &batch, &batch_defs)?;
                    batch.clear();
                    batch_defs.clear();
                }
            }
            if !batch.is_empty() {
                self.write_batch(file, &batch, &batch_defs)?;
            }
        }
        Ok(())
    }

    fn write_batch(
        &self,
        file: ProbeFile,
        batch: &str,
        defs: &[&ProbeDef],
    ) -> Result<(), TracefsError> {
        let Err(error) = self.append(file.file_name(), batch) else {
            return Ok(());
        };
        // Find the first event of the batch that does not exist: that is the line the kernel refused.
        let failed = defs
            .iter()
            .find(|d| {
                !self
                    .root
                    .join("events")
                    .join(&d.group)
                    .join(&d.event)
                    .exists()
            })
            .or(defs.first())
            .expect("a batch is never empty");
        let detail = self
            .read("error_log")
            .ok()
            .and_then(|log| {
                log.lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .map(|l| format!(" ({})", l.trim()))
            })
            .unwrap_or_default();
        Err(TracefsError::Create {
            line: failed.line(),
            path: self.root.join(file.file_name()),
            error,
            detail,
        })
    }

    /// The perf event id of `events/GROUP/EVENT/id` (PERF_TYPE_TRACEPOINT config).
    pub fn event_id(&self, group: &str, event: &str) -> Result<u64, TracefsError> {
        let rel = Path::new("events").join(group).join(event).join("id");
        let text = self.read(&rel)?;
        text.trim().parse().map_err(|_| TracefsError::BadId {
            path: self.root.join(rel),
            text,
        })
    }

    /// The `format` file of `events/GROUP/EVENT`: its fields, for [`parse_field_offset`].
    pub fn event_format(&self, group: &str, event: &str) -> Result<String, TracefsError> {
        self.read(Path::new("events").join(group).join(event).join("format"))
    }

    /// The byte offset of `field` in the raw data of `events/GROUP/EVENT` (from its `format` file).
    pub fn field_offset(
        &self,
        group: &str,
        event: &str,
        field: &str,
    ) -> Result<Option<usize>, TracefsError> {
        Ok(parse_field_offset(&self.event_format(group, event)?, field))
    }

    /// Disable a group's events (`events/GROUP/enable`), then delete every probe of the group from both
    /// definition files. Removing a group that does not exist is not an error.
    pub fn remove_group(&self, group: &str) -> Result<(), TracefsError> {
        let enable = Path::new("events").join(group).join("enable");
        if self.root.join(&enable).exists() {
            // Best effort: the events of a dead owner may still be enabled through ftrace.
            let _ = self.append(&enable, "0\n");
        }
        // A probe whose last perf event was closed a moment ago can still be busy for the kernel (EBUSY), and a
        // failed line stops the rest of its batch: try again a few times, listing what is left each time.
        let mut attempt = 0;
        loop {
            match self.remove_group_once(group) {
                Err(_) if attempt < REMOVE_RETRIES => {
                    attempt += 1;
                    std::thread::sleep(std::time::Duration::from_millis(10 << attempt));
                }
                result => return result,
            }
        }
    }

    /// Write the removal of every event of `group` that is listed now.
    fn remove_group_once(&self, group: &str) -> Result<(), TracefsError> {
        for file in [ProbeFile::Uprobe, ProbeFile::Kprobe] {
            // One event may hold many probe points (listed once each): delete each event once.
            let mut mine: Vec<ListedProbe> = Vec::new();
            for p in self.list_probes(file)? {
                if p.group == group && !mine.iter().any(|m| m.event == p.event) {
                    mine.push(p);
                }
            }
            let mut batch = String::new();
            for p in &mine {
                let line = format!("-:{}/{}\n", p.group, p.event);
                if batch.len() + line.len() > WRITE_CHUNK {
                    self.remove_batch(file, &batch)?;
                    batch.clear();
                }
                batch.push_str(&line);
            }
            self.remove_batch(file, &batch)?;
        }
        Ok(())
    }

    fn remove_batch(&self, file: ProbeFile, batch: &str) -> Result<(), TracefsError> {
        if batch.is_empty() {
            return Ok(());
        }
        self.append(file.file_name(), batch)
            .map_err(|error| TracefsError::Write {
                path: self.root.join(file.file_name()),
                error,
            })
    }

    /// The groups of the probes in both definition files, each once, in the order they are first listed.
    pub fn groups(&self) -> Result<Vec<String>, TracefsError> {
        let mut groups: Vec<String> = Vec::new();
        for file in [ProbeFile::Uprobe, ProbeFile::Kprobe] {
            for p in self.list_probes(file)? {
                if !groups.contains(&p.group) {
                    groups.push(p.group);
                }
            }
        }
        Ok(groups)
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
