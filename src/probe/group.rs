//! The tracefs group `rprof_<pid>` that holds this process's probes, removed on every exit path.
//!
//! [`ProbeGroup`] removes its probes on drop (normal end, errors, and panics that unwind). A panic hook also
//! removes every live group (a panic in another thread, or `panic = "abort"`); signals are turned into a clean
//! exit by the caller. Groups left by a process that was SIGKILLed are removed by the next rprof at start,
//! through [`remove_stale_groups`].
use super::resolve::{Target, TargetKind};
use crate::tracefs::instance::Instance;
use crate::tracefs::{ProbeDef, ProbeLocation, Tracefs, TracefsError};
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

/// Probe points per tracefs event for user functions. Closing an event's last perf event costs an RCU grace
/// period (tens of ms on some machines) under a global mutex, so few events with many points each are fast.
pub const POINTS_PER_EVENT: usize = 1024;

/// What a perf event on a tracefs event stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A function entry (uprobe, kprobe, sys_enter).
    Entry,
    /// A function return (uretprobe, kretprobe, sys_exit).
    Return,
    /// A counted tracepoint hit.
    Hit,
}

/// One tracefs event to open perf events on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedEvent {
    pub group: String,
    pub event: String,
    pub role: Role,
    /// The targets whose probe points this event holds. With more than one (user functions), a hit names its
    /// target by the runtime address in its raw data.
    pub members: Vec<u32>,
    /// True for uprobes/uretprobes: their data holds the probed address and (timed) the user SP.
    pub user: bool,
    /// Read through the tracefs instance's ring (false: through perf events).
    pub ring: bool,
    /// A uprobe of the `uprobe` PMU at this file and offset (no tracefs event: `group`/`event` are only names).
    pub pmu: Option<(PathBuf, u64)>,
}

/// The fetch argument that carries the user stack pointer, which pairing matches returns to entries by.
pub const SP_FETCH: &str = "sp=%sp";

/// The probe definitions to create and the events to open for `targets`. User functions of one binary share
/// events `u<N>` (entries) and `ur<N>` (returns), up to [`POINTS_PER_EVENT`] functions each (one function
/// per event with `one_per_target`, for counters, and for functions that fetch values); kernel function `i` gets
/// `k<i>` and `kr<i>`, USDT probe `i` gets `s<i>`, a `--pair` `a<i>` (its start) and `ar<i>` (its done);
/// syscalls and tracepoints use the kernel's own events. No return probes with `count_only`; timed user probes
/// fetch the stack pointer ([`SP_FETCH`]) and every probe fetches its target's values.
///
/// With `pmu` (and one event per target: counters, `-g`), user functions without values get no tracefs probe:
/// each planned event names its file and offset for the uprobe PMU.
pub fn plan(
    group: &str,
    targets: &[Target],
    count_only: bool,
    one_per_target: bool,
    pmu: bool,
) -> (Vec<ProbeDef>, Vec<PlannedEvent>) {
    let mut defs = Vec::new();
    let mut events = Vec::new();
    let per_event = if one_per_target { 1 } else { POINTS_PER_EVENT };
    // The fetch arguments of a target's entry or return probe.
    let fetch_args = |t: &Target, is_return: bool, sp: bool| {
        let mut args = Vec::new();
        if sp && !count_only {
            args.push(SP_FETCH.to_string());
        }
        args.extend(
            t.fetches
                .iter()
                .filter(|f| f.on_return == is_return)
                .map(|f| f.arg()),
        );
        args
    };
    let add = |defs: &mut Vec<ProbeDef>,
               event: &str,
               is_return: bool,
               location: &ProbeLocation,
               fetch| {
        defs.push(ProbeDef {
            group: group.to_string(),
            event: event.to_string(),
            is_return,
            location: location.clone(),
            fetch,
        });
    };
    let event = |event: String, role, members: Vec<u32>, user: bool, pmu_at| PlannedEvent {
        group: group.into(),
        event,
        role,
        members,
        user,
        ring: false,
        pmu: pmu_at,
    };
    // User functions, chunked per binary (alone when they fetch values).
    let mut chunks: Vec<(PathBuf, Vec<u32>)> = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        if let TargetKind::User { path, .. } = &t.kind {
            match chunks.iter_mut().rev().find(|(p, m)| {
                p == path
                    && m.len() < per_event
                    && t.fetches.is_empty()
                    && targets[m[0] as usize].fetches.is_empty()
            }) {
                Some((_, m)) => m.push(i as u32),
                None => chunks.push((path.clone(), vec![i as u32])),
            }
        }
    }
    for (n, (_, members)) in chunks.into_iter().enumerate() {
        let (entry, ret) = (format!("u{n}"), format!("ur{n}"));
        let mut pmu_at = None;
        for &m in &members {
            let t = &targets[m as usize];
            let TargetKind::User { path, offset, .. } = &t.kind else {
                continue;
            };
            if pmu && one_per_target && t.fetches.is_empty() {
                pmu_at = Some((path.clone(), offset.0));
                continue;
            }
            let loc = ProbeLocation::User {
                path: path.clone(),
                offset: offset.0,
                ref_ctr: None,
            };
            add(&mut defs, &entry, false, &loc, fetch_args(t, false, true));
            if !count_only {
                add(&mut defs, &ret, true, &loc, fetch_args(t, true, true));
            }
        }
        events.push(event(
            entry,
            Role::Entry,
            members.clone(),
            true,
            pmu_at.clone(),
        ));
        if !count_only {
            events.push(event(ret, Role::Return, members, true, pmu_at));
        }
    }
    for (i, t) in targets.iter().enumerate() {
        let one = vec![i as u32];
        match &t.kind {
            TargetKind::User { .. } => {}
            TargetKind::Kernel { symbol } => {
                let loc = ProbeLocation::Kernel {
                    symbol: symbol.clone(),
                };
                let (entry, ret) = (format!("k{i}"), format!("kr{i}"));
                add(&mut defs, &entry, false, &loc, fetch_args(t, false, false));
                events.push(event(entry, Role::Entry, one.clone(), false, None));
                if !count_only {
                    add(&mut defs, &ret, true, &loc, fetch_args(t, true, false));
                    events.push(event(ret, Role::Return, one, false, None));
                }
            }
            TargetKind::Usdt { .. } => {
                let name = format!("s{i}");
                add(
                    &mut defs,
                    &name,
                    false,
                    &uprobe_location(&t.kind),
                    fetch_args(t, false, false),
                );
                events.push(event(name, Role::Hit, one, true, None));
            }
            TargetKind::Pair { start, done } => {
                let (entry, ret) = (format!("a{i}"), format!("ar{i}"));
                add(
                    &mut defs,
                    &entry,
                    false,
                    &uprobe_location(start),
                    fetch_args(t, false, false),
                );
                add(
                    &mut defs,
                    &ret,
                    false,
                    &uprobe_location(done),
                    fetch_args(t, true, false),
                );
                events.push(event(entry, Role::Entry, one.clone(), true, None));
                events.push(event(ret, Role::Return, one, true, None));
            }
            TargetKind::Syscall { name } => {
                let ev = |e: String, role| PlannedEvent {
                    group: "syscalls".into(),
                    ..event(e, role, one.clone(), false, None)
                };
                events.push(ev(format!("sys_enter_{name}"), Role::Entry));
                if !count_only {
                    events.push(ev(format!("sys_exit_{name}"), Role::Return));
                }
            }
            TargetKind::Tracepoint { category, event: e } => events.push(PlannedEvent {
                group: category.clone(),
                ..event(e.clone(), Role::Hit, one, false, None)
            }),
        }
    }
    (defs, events)
}

/// The uprobe location of a user function or USDT probe (with its semaphore).
fn uprobe_location(kind: &TargetKind) -> ProbeLocation {
    let (path, offset, ref_ctr) = kind
        .uprobe_at()
        .expect("pairs and USDT targets are uprobes");
    ProbeLocation::User {
        path: path.to_path_buf(),
        offset,
        ref_ctr,
    }
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

impl Drop for ProbeGroup {
    fn drop(&mut self) {
        if let Err(e) = self.remove() {
            eprintln!(
                "rprof: warning: could not remove probe group {}: {e}",
                self.name
            );
        }
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
                Instance::open_existing(tracefs, &name)?.remove()?;
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
