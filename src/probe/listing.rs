//! What perf probe's listing flags show, in rprof's terms: the functions that can be probed (`-F`), and the
//! probe groups that exist now (`-l` without a pattern). rprof's probes live only as long as their session,
//! so after a clean exit there are none.
use super::spec::pattern::NameMatcher;
use super::ProbeError;
use crate::events::group::{group_owner, rprof_alive};
use crate::symbols::{function_symbols, DebugSources};
use crate::tracefs::{ProbeFile, Tracefs};
use std::path::Path;

/// A tracefs probe group and its probes now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeGroupNow {
    pub name: String,
    pub probes: usize,
    /// `rprof_<pid>`: the rprof process that owns it, and whether that process still runs.
    pub rprof_owner: Option<(u32, bool)>,
}

/// The probe groups of uprobe_events and kprobe_events now (rprof's and others').
pub fn groups_now() -> Result<Vec<ProbeGroupNow>, ProbeError> {
    let tracefs = Tracefs::find_or_mount()?;
    let mut groups: Vec<ProbeGroupNow> = Vec::new();
    for file in ProbeFile::ALL {
        for p in tracefs.list_probes(file)? {
            if !file.holds(p.kind) {
                continue;
            }
            match groups.iter_mut().find(|g| g.name == p.group) {
                Some(g) => g.probes += 1,
                None => groups.push(ProbeGroupNow {
                    rprof_owner: group_owner(&p.group).map(|pid| (pid, rprof_alive(pid))),
                    name: p.group,
                    probes: 1,
                }),
            }
        }
    }
    groups.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(groups)
}

/// The functions that can be probed, sorted and each once: those of `binary` (its symbol table and debug
/// file), else the kernel's (`available_filter_functions`). With a `filter` glob, those it matches (mangled or
/// demangled); without, perf's default: no names starting with `_` and no `@plt` stubs.
pub fn probeable_functions(
    binary: Option<&Path>,
    filter: Option<&str>,
    debug: &DebugSources,
) -> Result<Vec<String>, ProbeError> {
    let matcher = filter.map(|f| NameMatcher::new(f, false)).transpose()?;
    let keep = |mangled: &str, demangled: &str| match &matcher {
        Some(m) => m.matches_symbol(mangled, demangled),
        None => !demangled.starts_with('_') && !demangled.ends_with("@plt"),
    };
    let mut names: Vec<String> = match binary {
        Some(path) => function_symbols(path, debug)?
            .into_iter()
            .filter(|s| s.size > 0 && keep(&s.name, &s.demangled))
            .map(|s| s.demangled)
            .collect(),
        None => Tracefs::find_or_mount()?
            .available_functions()?
            .into_iter()
            .filter(|n| keep(n, n))
            .collect(),
    };
    names.sort();
    names.dedup();
    Ok(names)
}
