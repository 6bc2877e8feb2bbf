//! Which processes other than the targets map the probed files: the tracefs ring's uprobes would trap in them
//! too (see [`crate::probe::plan`]).
use crate::probe::target::{TargetKind, Targets};
use crate::probe::TaskTarget;
use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A probed file and how many processes other than the targets (and rprof) map it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sharing {
    pub path: PathBuf,
    pub others: usize,
}

/// For each probed user file, the processes other than the targets that map it now (from /proc/*/maps, by
/// device and inode). With `-- CMD` every other process counts; system-wide, none does.
pub fn sharing(targets: &Targets, target: &TaskTarget) -> Vec<Sharing> {
    let mut files: Vec<(PathBuf, Option<(u64, u64)>)> = Vec::new();
    for (_, t) in targets.iter() {
        let user = match &t.kind {
            TargetKind::User { path, .. } => Some(path),
            _ => None,
        };
        // The files of user functions, and those whose syscall instructions are probed for strings.
        for path in user
            .into_iter()
            .chain(t.syscall_sites.iter().map(|(p, _)| p))
        {
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
