//! The tracefs group `rprof_<pid>` that holds this process's probes, removed on every exit path.
//!
//! [`ProbeGroup`] removes its probes on drop (normal end, errors, and panics that unwind). A panic hook also
//! removes every live group (a panic in another thread, or `panic = "abort"`); signals are turned into a clean
//! exit by the caller. Groups left by a process that was SIGKILLed are removed by the next rprof at start,
//! through [`remove_stale_groups`].
use super::resolve::{Target, TargetKind};
use crate::tracefs::{self, ProbeDef, ProbeLocation, Tracefs, TracefsError};
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
                let _ = Tracefs::at(root).remove_group(&group);
            }
            previous(info);
        }));
    });
}

/// The entry and return event names of target `index`: short and in `[A-Za-z0-9_]`.
pub fn event_names(index: usize) -> (String, String) {
    (format!("e{index}"), format!("r{index}"))
}

/// The probe definitions for `targets` in `group`: an entry probe for each user or kernel function, and a return
/// probe too unless `count_only`. Syscalls and tracepoints need none.
pub fn probe_defs(group: &str, targets: &[Target], count_only: bool) -> Vec<ProbeDef> {
    let mut defs = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        let location = match &t.kind {
            TargetKind::User { path, offset, .. } => ProbeLocation::User { path: path.clone(), offset: offset.0 },
            TargetKind::Kernel { symbol } => ProbeLocation::Kernel { symbol: symbol.clone() },
            TargetKind::Syscall { .. } | TargetKind::Tracepoint { .. } => continue,
        };
        let (entry, ret) = event_names(i);
        defs.push(ProbeDef { group: group.to_string(), event: entry, is_return: false, location: location.clone() });
        if !count_only {
            defs.push(ProbeDef { group: group.to_string(), event: ret, is_return: true, location });
        }
    }
    defs
}

/// This process's probe group; its probes are removed when it is dropped.
#[derive(Debug)]
pub struct ProbeGroup {
    tracefs: Tracefs,
    name: String,
}

impl ProbeGroup {
    /// Create `defs` (all in the group `name`). On failure, what was created is removed again.
    pub fn create(tracefs: &Tracefs, name: &str, defs: &[ProbeDef]) -> Result<ProbeGroup, TracefsError> {
        install_panic_hook();
        if let Ok(mut g) = LIVE_GROUPS.lock() {
            g.push((tracefs.root().to_path_buf(), name.to_string()));
        }
        // From here on, Drop removes whatever was created, even when add_probes fails half way.
        let group = ProbeGroup { tracefs: tracefs.clone(), name: name.to_string() };
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

impl Drop for ProbeGroup {
    fn drop(&mut self) {
        if let Err(e) = self.remove() {
            eprintln!("rprof: warning: could not remove probe group {}: {e}", self.name);
        }
        if let Ok(mut g) = LIVE_GROUPS.lock() {
            g.retain(|(_, n)| *n != self.name);
        }
    }
}

/// Remove the groups of rprof processes that are gone (never our own).
pub fn remove_stale_groups(tracefs: &Tracefs) -> Result<Vec<String>, TracefsError> {
    let me = std::process::id();
    tracefs.remove_stale_groups(|pid| pid == me || tracefs::rprof_alive(pid))
}
