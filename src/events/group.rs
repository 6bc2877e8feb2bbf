//! The tracefs group `rprof_<pid>` that holds this process's probes, removed on every exit path.
//!
//! [`ProbeGroup`] removes its probes on drop (normal end, errors, and panics that unwind). A panic hook also
//! removes every live group (a panic in another thread, or `panic = "abort"`); signals are turned into a clean
//! exit by the caller. Groups left by a process that was SIGKILLed are removed by the next rprof at start,
//! through [`remove_stale_groups`].
use crate::tracefs::instance::Instance;
use crate::tracefs::{ProbeDef, Tracefs, TracefsError};
use std::path::PathBuf;
use std::sync::{Mutex, Once};

/// Groups to remove if the process panics: (tracefs root, group).
static LIVE_GROUPS: Mutex<Vec<(PathBuf, String)>> = Mutex::new(Vec::new());
static PANIC_HOOK: Once = Once::new();

fn install_panic_hook() {
    PANIC_HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let groups = LIVE_GROUPS.lock().map(|g| g.clone()).unwrap_or_default();
            for (root, group) in groups {
                // The instance of the same name first: its enabled events keep the probes busy.
                let _ = std::fs::remove_dir(root.join("instances").join(&group));
                let _ = Tracefs::at(root).remove_group(&group);
            }
            previous(info);
        }));
    });
}

/// This process's probe group; its probes are removed when it is dropped.
#[derive(Debug)]
pub struct ProbeGroup {
    tracefs: Tracefs,
    name: String,
}

impl ProbeGroup {
    /// Create `defs` (all in the group `name`). On failure, what was created is removed again.
    pub fn create(
        tracefs: &Tracefs,
        name: &str,
        defs: &[ProbeDef],
    ) -> Result<ProbeGroup, TracefsError> {
        install_panic_hook();
        if let Ok(mut g) = LIVE_GROUPS.lock() {
            g.push((tracefs.root().to_path_buf(), name.to_string()));
        }
        // From here on, Drop removes whatever was created, even when add_probes fails half way.
        let group = ProbeGroup {
            tracefs: tracefs.clone(),
            name: name.to_string(),
        };
        tracefs.add_probes(defs)?;
        Ok(group)
    }

    /// The group name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Remove the probes now (the perf events on them must be closed first).
    pub fn remove(&self) -> Result<(), TracefsError> {
        self.tracefs.remove_group(&self.name)
    }
}

impl ProbeGroup {
    /// Remove the probes (after every perf event on them is closed), saying why they could not be.
    pub fn close(self) -> Result<(), TracefsError> {
        self.remove()
    }
}

impl Drop for ProbeGroup {
    /// Errors and panics: the best that can be done (the next rprof removes a group left behind).
    fn drop(&mut self) {
        let _ = self.remove();
        if let Ok(mut g) = LIVE_GROUPS.lock() {
            g.retain(|(_, n)| *n != self.name);
        }
    }
}

/// Prefix of the tracefs groups owned by rprof instances: `rprof_<pid>`.
pub const GROUP_PREFIX: &str = "rprof_";

/// The group name owned by the process `pid`.
pub fn group_name(pid: u32) -> String {
    format!("{GROUP_PREFIX}{pid}")
}

/// The owner pid of a group named `rprof_<pid>`.
pub fn group_owner(group: &str) -> Option<u32> {
    group.strip_prefix(GROUP_PREFIX)?.parse().ok()
}

/// All groups named `rprof_<pid>` that hold probes, with their owner pid.
pub fn rprof_groups(tracefs: &Tracefs) -> Result<Vec<(String, u32)>, TracefsError> {
    Ok(tracefs
        .groups()?
        .into_iter()
        .filter_map(|group| group_owner(&group).map(|pid| (group, pid)))
        .collect())
}

/// True when `pid` is a live rprof process (a reused pid that now runs something else counts as dead).
pub fn rprof_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/comm")) {
        Ok(comm) => comm.trim_end().starts_with("rprof"),
        Err(_) => false,
    }
}

/// Remove the `rprof_<pid>` groups whose owner is not alive according to `is_alive`; returns their names.
pub fn remove_groups_of_dead_owners(
    tracefs: &Tracefs,
    is_alive: impl Fn(u32) -> bool,
) -> Result<Vec<String>, TracefsError> {
    let mut removed = Vec::new();
    for (group, pid) in rprof_groups(tracefs)? {
        if !is_alive(pid) {
            tracefs.remove_group(&group)?;
            removed.push(group);
        }
    }
    Ok(removed)
}

/// Remove the groups of rprof processes that are gone (never our own).
pub fn remove_stale_groups(tracefs: &Tracefs) -> Result<Vec<String>, TracefsError> {
    let me = std::process::id();
    remove_groups_of_dead_owners(tracefs, |pid| pid == me || rprof_alive(pid))
}

/// Remove the tracefs instances `rprof_<pid>` of rprof processes that are gone, then their groups (an event
/// enabled in an instance keeps its probe busy). Returns what was removed.
pub fn remove_stale(tracefs: &Tracefs) -> Result<Vec<String>, TracefsError> {
    let me = std::process::id();
    let mut removed = Vec::new();
    if tracefs.instance_supported() {
        for name in tracefs.instances()? {
            let Some(owner) = group_owner(&name) else {
                continue;
            };
            if owner != me && !rprof_alive(owner) {
                // Another rprof starting now may have removed it since the listing.
                match Instance::open_existing(tracefs, &name) {
                    Err(TracefsError::NoSuchInstance { .. }) => continue,
                    instance => instance?.remove()?,
                }
                removed.push(format!("instances/{name}"));
            }
        }
    }
    removed.extend(remove_stale_groups(tracefs)?);
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that group names map back to their owner pid.
    #[test]
    fn group_owner_pid() {
        assert_eq!(group_owner(&group_name(4242)), Some(4242));
        assert_eq!(group_owner("rprof_x"), None);
        assert_eq!(group_owner("uprobes"), None);
    }

    /// Check that a live process that is not rprof (a reused pid) and a pid that cannot exist count as dead
    /// owners.
    #[test]
    fn liveness_needs_an_rprof_process() {
        let mut other = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let alive = rprof_alive(other.id());
        other.kill().unwrap();
        other.wait().unwrap();
        assert!(!alive);
        assert!(!rprof_alive(u32::MAX));
    }
}
