//! tracefs instances (`instances/NAME`): private per-CPU ring buffers with their own trace clock, pid filter and
//! event enables, so a tracer does not disturb the global buffer or other tracers.
//!
//! Policy-free like the rest of the layer: an [`Instance`] is a handle on a directory. Nothing is removed on drop;
//! the caller decides when to [`Instance::remove`] it (and removes stale ones found by [`Tracefs::instances`]).
use super::{Tracefs, TracefsError};
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

impl Tracefs {
    /// True when this tracefs can make instances (it has an `instances/` directory).
    pub fn instance_supported(&self) -> bool {
        self.root().join("instances").is_dir()
    }

    /// The names of the existing instances (empty when instances are not supported).
    pub fn instances(&self) -> Result<Vec<String>, TracefsError> {
        if !self.instance_supported() {
            return Ok(Vec::new());
        }
        self.dir_names(Path::new("instances"))
    }
}

/// A handle on the tracefs instance `instances/NAME`.
#[derive(Clone, Debug)]
pub struct Instance {
    name: String,
    path: PathBuf,
}

/// The counters of one CPU's ring buffer (`per_cpu/cpuN/stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuStats {
    /// Events in the buffer now.
    pub entries: u64,
    /// Events overwritten before they were read (overwrite mode).
    pub overrun: u64,
    /// Events lost because an interrupt storm wrapped the buffer during a write.
    pub commit_overrun: u64,
    /// Bytes in the buffer now.
    pub bytes: u64,
    /// Events dropped because the buffer was full (overwrite mode off).
    pub dropped_events: u64,
    /// Events read so far.
    pub read_events: u64,
}

/// Parse `per_cpu/cpuN/stats` (`entries: 0`, `commit overrun: 0`, ... one per line). Unknown or missing lines
/// are left at zero.
pub fn parse_cpu_stats(text: &str) -> CpuStats {
    let mut stats = CpuStats::default();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<u64>() else {
            continue;
        };
        let field = match key.trim() {
            "entries" => &mut stats.entries,
            "overrun" => &mut stats.overrun,
            "commit overrun" => &mut stats.commit_overrun,
            "bytes" => &mut stats.bytes,
            "dropped events" => &mut stats.dropped_events,
            "read events" => &mut stats.read_events,
            _ => continue,
        };
        *field = value;
    }
    stats
}

/// Parse `trace_clock` (`[local] global counter mono ...`): the offered clocks and the selected one.
pub fn parse_trace_clocks(text: &str) -> (Vec<String>, Option<String>) {
    let mut current = None;
    let clocks = text
        .split_whitespace()
        .map(
            |word| match word.strip_prefix('[').and_then(|w| w.strip_suffix(']')) {
                Some(selected) => {
                    current = Some(selected.to_string());
                    selected.to_string()
                }
                None => word.to_string(),
            },
        )
        .collect();
    (clocks, current)
}

/// How long `remove` retries an `rmdir` that fails with EBUSY.
const REMOVE_RETRIES: u32 = 100;
const REMOVE_WAIT: Duration = Duration::from_millis(10);

impl Instance {
    /// Create the instance `name` (mkdir `instances/NAME`). Fails when instances are not supported, the name
    /// is not a plain directory name, or the instance already exists.
    pub fn create(tracefs: &Tracefs, name: &str) -> Result<Instance, TracefsError> {
        let instance = Instance::at(tracefs, name)?;
        match fs::create_dir(&instance.path) {
            Ok(()) => Ok(instance),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                Err(TracefsError::InstanceExists {
                    path: instance.path,
                })
            }
            Err(error) => Err(TracefsError::InstanceCreate {
                path: instance.path,
                error,
            }),
        }
    }

    /// A handle on the existing instance `name`.
    pub fn open_existing(tracefs: &Tracefs, name: &str) -> Result<Instance, TracefsError> {
        let instance = Instance::at(tracefs, name)?;
        if !instance.path.is_dir() {
            return Err(TracefsError::NoSuchInstance {
                path: instance.path,
            });
        }
        Ok(instance)
    }

    fn at(tracefs: &Tracefs, name: &str) -> Result<Instance, TracefsError> {
        if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
            return Err(TracefsError::InstanceName {
                name: name.to_string(),
            });
        }
        let dir = tracefs.root().join("instances");
        if !tracefs.instance_supported() {
            return Err(TracefsError::NoInstances { path: dir });
        }
        Ok(Instance {
            name: name.to_string(),
            path: dir.join(name),
        })
    }

    /// The instance's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The instance's directory (what the ring reader opens `per_cpu/cpuN/trace_pipe_raw` in).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Disable every event of the instance, then remove it, retrying for about a second while the kernel says
    /// it is busy. Fails while a file in it is open (such as a ring reader's `trace_pipe_raw`). Removing an
    /// instance that is already gone is not an error.
    pub fn remove(&self) -> Result<(), TracefsError> {
        if !self.path.exists() {
            return Ok(());
        }
        // Best effort: rmdir disables the events itself on current kernels.
        let _ = self.write("events/enable", "0\n");
        let mut tries = 0;
        loop {
            match fs::remove_dir(&self.path) {
                Ok(()) => return Ok(()),
                // Gone, or being removed by another process (the kernel found no such instance: ENODEV),
                // as rprofs starting at once each remove a dead one's.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::ENODEV) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) && tries < REMOVE_RETRIES => {
                    tries += 1;
                    std::thread::sleep(REMOVE_WAIT);
                }
                Err(error) => {
                    return Err(TracefsError::InstanceRemove {
                        path: self.path.clone(),
                        error,
                    })
                }
            }
        }
    }

    /// The selected trace clock.
    pub fn clock(&self) -> Result<String, TracefsError> {
        let text = self.read("trace_clock")?;
        Ok(parse_trace_clocks(&text).1.unwrap_or_default())
    }

    /// Select the trace clock, after checking that `trace_clock` offers it. `mono` is CLOCK_MONOTONIC, the clock
    /// of perf events opened with `use_clockid` and CLOCK_MONOTONIC, so their records merge with these.
    pub fn set_clock(&self, clock: &str) -> Result<(), TracefsError> {
        let (clocks, _) = parse_trace_clocks(&self.read("trace_clock")?);
        if !clocks.iter().any(|c| c == clock) {
            return Err(TracefsError::NoClock {
                clock: clock.to_string(),
                path: self.path.join("trace_clock"),
                available: clocks.join(" "),
            });
        }
        self.write("trace_clock", clock)
    }

    /// Set the size of each CPU's ring buffer in KiB (`buffer_size_kb`). Do it before mapping the rings.
    pub fn set_buffer_kb(&self, per_cpu_kb: u64) -> Result<(), TracefsError> {
        match self.write("buffer_size_kb", &format!("{per_cpu_kb}\n")) {
            Err(TracefsError::Write { path, error })
                if error.raw_os_error() == Some(libc::EBUSY) =>
            {
                Err(TracefsError::Resize { path, error })
            }
            other => other,
        }
    }

    /// Set how full (in percent) a CPU buffer must be before a blocked reader or `poll` wakes up
    /// (`buffer_percent`; 0 wakes on any data). Returns false when the kernel has no such file.
    pub fn set_buffer_percent(&self, percent: u32) -> Result<bool, TracefsError> {
        if !self.path.join("buffer_percent").exists() {
            return Ok(false);
        }
        self.write("buffer_percent", &format!("{percent}\n"))?;
        Ok(true)
    }

    /// Record events only of these threads (`set_event_pid` takes thread ids); an empty list records all.
    /// Replaces the previous list.
    pub fn set_event_pids(&self, tids: &[u32]) -> Result<(), TracefsError> {
        let path = self.path.join("set_event_pid");
        let text: String = tids.iter().map(|t| format!("{t} ")).collect();
        // O_TRUNC empties the kernel's list; the write adds the new ids.
        OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&path)
            .and_then(|mut f| {
                if text.is_empty() {
                    Ok(())
                } else {
                    f.write_all(text.trim_end().as_bytes())
                }
            })
            .map_err(|error| TracefsError::Write { path, error })
    }

    /// Whether children of the threads in `set_event_pid` join the list when they are forked
    /// (`options/event-fork`).
    pub fn set_event_fork(&self, on: bool) -> Result<(), TracefsError> {
        self.set_option("event-fork", on)
    }

    /// Set a trace option (`options/NAME`), e.g. `overwrite` (off: a full ring drops new events).
    pub fn set_option(&self, name: &str, on: bool) -> Result<(), TracefsError> {
        self.write(Path::new("options").join(name), flag(on))
    }

    /// Enable or disable the event `GROUP/EVENT` in this instance.
    pub fn enable_event(&self, group: &str, event: &str, on: bool) -> Result<(), TracefsError> {
        let rel = Path::new("events").join(group).join(event).join("enable");
        self.write(rel, flag(on))
    }

    /// Set (or with None clear) the filter of one event of the instance (`events/GROUP/EVENT/filter`, ftrace's
    /// syntax); a filter the kernel refuses is an error with the reason its `error_log` gives.
    pub fn set_filter(
        &self,
        group: &str,
        event: &str,
        filter: Option<&str>,
    ) -> Result<(), TracefsError> {
        let rel = Path::new("events").join(group).join(event).join("filter");
        match self.write(rel, &format!("{}\n", filter.unwrap_or("0"))) {
            Err(TracefsError::Write { .. }) if filter.is_some() => Err(TracefsError::Filter {
                event: format!("{group}:{event}"),
                filter: filter.unwrap_or_default().to_string(),
                detail: super::filter_error(self.read("error_log").ok()),
            }),
            r => r,
        }
    }

    /// Start or stop recording into the instance's buffers (`tracing_on`).
    pub fn set_tracing_on(&self, on: bool) -> Result<(), TracefsError> {
        self.write("tracing_on", flag(on))
    }

    /// The counters of CPU `cpu`'s buffer.
    pub fn cpu_stats(&self, cpu: u32) -> Result<CpuStats, TracefsError> {
        let text = self.read(format!("per_cpu/cpu{cpu}/stats"))?;
        Ok(parse_cpu_stats(&text))
    }

    fn read(&self, rel: impl AsRef<Path>) -> Result<String, TracefsError> {
        let path = self.path.join(rel);
        fs::read_to_string(&path).map_err(|error| TracefsError::Read { path, error })
    }

    /// Write `text` to a control file in one `write(2)`, without truncating (O_TRUNC on some files, such as
    /// `trace`, clears the buffer).
    fn write(&self, rel: impl AsRef<Path>, text: &str) -> Result<(), TracefsError> {
        let path = self.path.join(rel);
        OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .map_err(|error| TracefsError::Write { path, error })
    }
}

fn flag(on: bool) -> &'static str {
    if on {
        "1\n"
    } else {
        "0\n"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that a CPU's stats file parses, timestamps and unknown lines ignored.
    #[test]
    fn parses_cpu_stats() {
        let text = "entries: 12\noverrun: 3\ncommit overrun: 1\nbytes: 4096\n\
                    oldest event ts:  5025.334447\nnow ts:  5046.116417\ndropped events: 2\nread events: 50000\n\
                    future counter: 9\n";
        assert_eq!(
            parse_cpu_stats(text),
            CpuStats {
                entries: 12,
                overrun: 3,
                commit_overrun: 1,
                bytes: 4096,
                dropped_events: 2,
                read_events: 50000,
            }
        );
        assert_eq!(parse_cpu_stats(""), CpuStats::default());
    }

    /// Check that trace_clock lists the clocks and marks the selected one.
    #[test]
    fn parses_trace_clock() {
        let (clocks, current) = parse_trace_clocks(
            "[local] global counter uptime perf mono mono_raw boot tai x86-tsc\n",
        );
        assert_eq!(clocks.len(), 10);
        assert!(clocks.contains(&"mono".to_string()) && clocks.contains(&"local".to_string()));
        assert_eq!(current.as_deref(), Some("local"));
        assert_eq!(
            parse_trace_clocks("local [mono]").1.as_deref(),
            Some("mono")
        );
    }
}
