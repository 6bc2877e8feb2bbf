//! Probe definitions: the lines of `uprobe_events`, `kprobe_events` and (event probes) `dynamic_events`,
//! written in batches, listed, and removed by group.
use super::{Tracefs, TracefsError};
use std::fs;
use std::path::{Path, PathBuf};

/// Which definition file a dynamic probe lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProbeFile {
    /// `uprobe_events`
    Uprobe,
    /// `kprobe_events`
    Kprobe,
    /// `dynamic_events`, for event probes (`e:`), which the other two do not take.
    Dynamic,
}

impl ProbeFile {
    /// Every definition file, in the order probes are written.
    pub const ALL: [ProbeFile; 3] = [ProbeFile::Uprobe, ProbeFile::Kprobe, ProbeFile::Dynamic];

    /// The file name under the tracefs root.
    pub fn file_name(self) -> &'static str {
        match self {
            ProbeFile::Uprobe => "uprobe_events",
            ProbeFile::Kprobe => "kprobe_events",
            ProbeFile::Dynamic => "dynamic_events",
        }
    }

    /// Whether a probe of kind `kind` (`p`, `r`, `e`) listed in this file is defined here (`dynamic_events`
    /// lists every kind; rprof writes only event probes there).
    pub fn holds(self, kind: char) -> bool {
        self != ProbeFile::Dynamic || kind == 'e'
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
    /// An event probe on the tracepoint `system.event` (`e:`), which reads its fields (`$field`) and what
    /// they point to, in the kernel, when the tracepoint fires.
    Event { system: String, event: String },
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
            ProbeLocation::Event { .. } => ProbeFile::Dynamic,
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
            ProbeLocation::Event { system, event } => {
                format!("e:{}/{} {system}.{event}", self.group, self.event)
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

/// Lines written per `write(2)`: the kernel parses up to 4096 bytes per chunk, line by line.
const WRITE_CHUNK: usize = 3800;

/// Further attempts at removing a group whose probes are still busy (after 20, 40, 80, 160, 320 ms).
const REMOVE_RETRIES: u32 = 5;

impl Tracefs {
    /// Whether this kernel takes event probes: whether `e:GROUP/rprof_check` on `syscalls.sys_enter_getpid` can
    /// be created (it is removed at once). Some kernels list the syntax in README and refuse every line.
    pub fn event_probes_work(&self, group: &str) -> bool {
        let def = ProbeDef {
            group: group.to_string(),
            event: "rprof_check".into(),
            is_return: false,
            location: ProbeLocation::Event {
                system: "syscalls".into(),
                event: "sys_enter_getpid".into(),
            },
            fetch: Vec::new(),
        };
        let ok = self.root.join(ProbeFile::Dynamic.file_name()).exists()
            && self
                .append(ProbeFile::Dynamic.file_name(), &format!("{}\n", def.line()))
                .is_ok();
        if ok {
            let _ = self.append(
                ProbeFile::Dynamic.file_name(),
                &format!("-:{group}/rprof_check\n"),
            );
        }
        ok
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
            ProbeFile::Dynamic => TracefsError::NoEventProbes { path },
        })
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
        for file in ProbeFile::ALL {
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
        for file in ProbeFile::ALL {
            // One event may hold many probe points (listed once each): delete each event once.
            let mut mine: Vec<ListedProbe> = Vec::new();
            for p in self.list_probes(file)? {
                if p.group == group
                    && file.holds(p.kind)
                    && !mine.iter().any(|m| m.event == p.event)
                {
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
        for file in ProbeFile::ALL {
            for p in self.list_probes(file)? {
                if file.holds(p.kind) && !groups.contains(&p.group) {
                    groups.push(p.group);
                }
            }
        }
        Ok(groups)
    }
}
