//! The events this machine has, as `perf list` names and groups them: software events (with perf's aliases),
//! hardware and cache events where there is a PMU, and tracepoints (from tracefs).
use super::hardware;
use crate::perf::software::SOFTWARE_EVENTS;
use crate::tracefs::Tracefs;

/// One listed event: its name (`context-switches OR cs`) and perf's kind (`Software event`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    pub name: String,
    pub kind: &'static str,
}

/// Which groups to list, from perf list's words: `hw`/`hardware`, `sw`/`software`, `cache`/`hwcache`,
/// `tracepoint`; anything else is a glob (`sched:*`) or a substring (`fault`) of the names.
pub fn wanted(words: &[String]) -> (Vec<&'static str>, Vec<String>) {
    let mut kinds = Vec::new();
    let mut patterns = Vec::new();
    for w in words {
        match w.as_str() {
            "hw" | "hardware" => kinds.push(HARDWARE),
            "sw" | "software" => kinds.push(SOFTWARE),
            "cache" | "hwcache" => kinds.push(CACHE),
            "tracepoint" => kinds.push(TRACEPOINT),
            _ => patterns.push(w.clone()),
        }
    }
    (kinds, patterns)
}

pub const HARDWARE: &str = "Hardware event";
pub const SOFTWARE: &str = "Software event";
pub const CACHE: &str = "Hardware cache event";
pub const TRACEPOINT: &str = "Tracepoint event";

/// The events of the `kinds` (all when empty) whose names match one of `patterns` (all when empty), in
/// perf's order: hardware, software, cache, tracepoints. `tracefs` None: no tracepoints.
pub fn list(kinds: &[&str], patterns: &[String], tracefs: Option<&Tracefs>) -> Vec<Listed> {
    let want = |k: &str| kinds.is_empty() || kinds.contains(&k);
    let mut out = Vec::new();
    let mut push = |name: String, kind: &'static str| out.push(Listed { name, kind });
    if want(HARDWARE) && hardware::pmu_present() {
        for (name, aliases, _) in hardware::HARDWARE_EVENTS {
            push(with_aliases(name, aliases), HARDWARE);
        }
    }
    if want(SOFTWARE) {
        let mut sw: Vec<_> = SOFTWARE_EVENTS.iter().collect();
        sw.sort_by_key(|e| e.name);
        for e in sw {
            let perf_aliases: Vec<&str> =
                e.aliases.iter().copied().filter(|a| *a != "cpu").collect();
            push(with_aliases(e.name, &perf_aliases), SOFTWARE);
        }
    }
    if want(CACHE) && hardware::pmu_present() {
        for name in hardware::cache_names() {
            push(name, CACHE);
        }
    }
    if want(TRACEPOINT) {
        if let Some(t) = tracefs {
            for system in t.categories().unwrap_or_default() {
                for event in t.events(&system).unwrap_or_default() {
                    push(format!("{system}:{event}"), TRACEPOINT);
                }
            }
        }
    }
    out.retain(|l| patterns.is_empty() || patterns.iter().any(|p| matches(p, &l.name)));
    out
}

fn with_aliases(name: &str, aliases: &[&str]) -> String {
    std::iter::once(name)
        .chain(aliases.iter().copied())
        .collect::<Vec<_>>()
        .join(" OR ")
}

/// A glob (with `*`, `?` or `[`) matches a whole name or one of its ` OR ` spellings; a word is a substring.
fn matches(pattern: &str, name: &str) -> bool {
    if !pattern.contains(['*', '?', '[']) {
        return name.contains(pattern);
    }
    globset::Glob::new(pattern)
        .map(|g| g.compile_matcher())
        .is_ok_and(|m| name.split(" OR ").any(|n| m.is_match(n)))
}

/// A listed event as perf list prints it: `  NAME (padded to 50) [KIND]`.
pub fn line(l: &Listed) -> String {
    format!("  {:<50} [{}]", l.name, l.kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check perf list's layout and aliases, and the filters.
    #[test]
    fn software_as_perf_lists_them() {
        let sw = list(&[SOFTWARE], &[], None);
        let lines: Vec<String> = sw.iter().map(line).collect();
        assert!(lines.contains(
            &"  context-switches OR cs                             [Software event]".to_string()
        ));
        assert!(lines.contains(
            &"  page-faults OR faults                              [Software event]".to_string()
        ));
        assert_eq!(
            lines[0],
            "  alignment-faults                                   [Software event]"
        );
        let (kinds, pats) = wanted(&["sw".into(), "fault".into()]);
        let faults = list(&kinds, &pats, None);
        assert!(
            faults.iter().all(|l| l.name.contains("fault")) && faults.len() == 5,
            "{faults:?}"
        );
        assert_eq!(list(&[SOFTWARE], &["cs".into()], None).len(), 1);
        assert_eq!(list(&[SOFTWARE], &["c*".into()], None).len(), 4);
    }
}
