//! Which engine reads each probe event: the tracefs instance's ring (cheapest per call, but its uprobes trap in
//! every process that maps the probed file) or per-task perf events (their uprobes trap only in the targets);
//! `--count` reads counters. The choice and what it was based on are printed in the header line.
use super::group::PlannedEvent;
use super::resolve::{Target, TargetKind};
use super::TaskTarget;
use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The engine asked for (`--engine`, or the environment variable `RPROF_PROBE_ENGINE`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EngineChoice {
    /// Per event: the tracefs ring when only the targets map the probed file, else perf; counters for
    /// `--count`.
    #[default]
    Auto,
    /// Every event through perf.
    Perf,
    /// Every event through the tracefs ring (with a warning when other processes map a probed file).
    Tracefs,
}

impl std::str::FromStr for EngineChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(EngineChoice::Auto),
            "perf" => Ok(EngineChoice::Perf),
            "tracefs" | "ring" => Ok(EngineChoice::Tracefs),
            _ => Err(format!("unknown engine '{s}': use auto, perf or tracefs")),
        }
    }
}

/// A probed file and how many processes other than the targets (and rprof) map it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sharing {
    pub path: PathBuf,
    pub others: usize,
}

/// For each probed user file, the processes other than the targets that map it now (from /proc/*/maps, by
/// device and inode). With `-- CMD` every other process counts; system-wide, none does.
pub fn sharing(targets: &[Target], target: &TaskTarget) -> Vec<Sharing> {
    let mut files: Vec<(PathBuf, Option<(u64, u64)>)> = Vec::new();
    for t in targets {
        if let TargetKind::User { path, .. } = &t.kind {
            if !files.iter().any(|(p, _)| p == path) {
                let id = std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()));
                files.push((path.clone(), id));
            }
        }
    }
    let mut counts = vec![0usize; files.len()];
    if !files.is_empty() && *target != TaskTarget::SystemWide {
        let me = std::process::id() as i32;
        let target_pid = match target {
            TaskTarget::Pid(p) => *p,
            _ => -1,
        };
        for pid in crate::process::all_pids() {
            if pid == me || pid == target_pid {
                continue;
            }
            let Ok(maps) = crate::process::maps(pid) else {
                continue;
            };
            let mut seen = HashSet::new();
            for m in &maps {
                for (i, (path, id)) in files.iter().enumerate() {
                    if maps_file(m, path, *id) && seen.insert(i) {
                        counts[i] += 1;
                    }
                }
            }
        }
    }
    files
        .into_iter()
        .zip(counts)
        .map(|((path, _), others)| Sharing { path, others })
        .collect()
}

fn maps_file(m: &crate::process::MapEntry, path: &Path, id: Option<(u64, u64)>) -> bool {
    match id {
        Some((dev, ino)) => {
            m.inode == ino
                && m.dev_major as u64 == nix::sys::stat::major(dev)
                && m.dev_minor as u64 == nix::sys::stat::minor(dev)
        }
        None => Path::new(&m.path) == path,
    }
}

/// The probed file of a user event, with how many other processes map it (None for other events).
pub fn shared_file<'a>(
    p: &PlannedEvent,
    targets: &[Target],
    shared: &'a [Sharing],
) -> Option<&'a Sharing> {
    let &m = p.members.first()?;
    match &targets[m as usize].kind {
        TargetKind::User { path, .. } => shared.iter().find(|s| &s.path == path),
        _ => None,
    }
}

/// Set each planned event's engine: the ring unless `ring_ok` is false, perf was asked for, stacks are
/// wanted, or (in auto) the event probes a file that other processes map. Returns the shared files that a
/// forced tracefs engine will make trap in other processes.
pub fn assign(
    planned: &mut [PlannedEvent],
    targets: &[Target],
    shared: &[Sharing],
    choice: EngineChoice,
    ring_ok: bool,
    stacks: bool,
) -> Vec<Sharing> {
    let mut forced_shared = Vec::new();
    for p in planned.iter_mut() {
        let file = shared_file(p, targets, shared);
        let is_shared = file.is_some_and(|s| s.others > 0);
        p.ring = ring_ok
            && !stacks
            && match choice {
                EngineChoice::Perf => false,
                EngineChoice::Tracefs => true,
                EngineChoice::Auto => !is_shared,
            };
        if p.ring && is_shared {
            if let Some(s) = file {
                if !forced_shared.contains(s) {
                    forced_shared.push(s.clone());
                }
            }
        }
    }
    forced_shared
}

/// The header line's engine part: `engine: tracefs ring (mapped)`, `engine: perf`, or both with what each reads.
pub fn describe(planned: &[PlannedEvent], ring_mode: Option<&str>) -> String {
    let ring = planned.iter().filter(|p| p.ring).count();
    let perf = planned.len() - ring;
    let ring_name = format!("tracefs ring ({})", ring_mode.unwrap_or("read"));
    let perf_name = if planned.iter().any(|p| p.pmu.is_some()) {
        "perf (uprobe PMU)"
    } else {
        "perf"
    };
    match (ring, perf) {
        (0, _) => format!("engine: {perf_name}"),
        (_, 0) => format!("engine: {ring_name}"),
        _ => format!(
            "engines: {ring_name} for {ring} events, {perf_name} for {perf} (files other processes map)"
        ),
    }
}
