//! perf trace's event list: `-e openat,'open*',sched:sched_switch` names syscalls (names or globs of the
//! syscalls the kernel traces, `syscalls:sys_enter_NAME`, or the syscall table's spelling: `stat` for
//! `newstat`), perf's strace groups (`file`, `string`: a file of syscall names each, in [`STRACE_GROUPS`]) and
//! tracepoints in one list; `!` before it shows every syscall but those named. A list of tracepoints only shows
//! no syscalls, as perf trace's. The plan has a [`PlannedKind::Syscall`] per syscall
//! shown, then the tracepoints.
use super::grammar::{self, EventSpec, Kind};
use super::plan::{self, Plan, PlannedEvent, PlannedKind};
use super::EventError;
use crate::tracefs::Tracefs;
use std::path::Path;

/// Where perf trace looks for its strace groups (`-e file`), as Debian's linux-perf installs them: one file per
/// group, a syscall name per line.
pub const STRACE_GROUPS: &str = "/usr/share/perf-core/strace/groups";

/// What `rprof trace` was asked for: `-e`'s words (commas split), `--event`'s (tracepoints besides the
/// syscalls) and `--no-syscalls`.
#[derive(Clone, Debug, Default)]
pub struct TraceRequest {
    pub expr: Vec<String>,
    pub event: Vec<String>,
    pub no_syscalls: bool,
}

/// `-e`'s words split: the syscall names and globs, whether `!` negates them, and the other words (events).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceList {
    pub syscalls: Vec<String>,
    pub negated: bool,
    pub events: Vec<String>,
}

/// Split `-e`'s words into syscalls and events: a word is a syscall when it names or (a glob) matches one of
/// `names` (the traced syscalls), in their tracefs or table spelling; else a group's name (a file in
/// `groups`, perf trace's strace groups) stands for its syscalls that are traced. A `!` before a word negates
/// the syscalls (perf trace takes it before the list).
pub fn split(words: &[String], names: &[String], groups: &Path) -> TraceList {
    let mut list = TraceList::default();
    for word in words {
        let word = match word.strip_prefix('!') {
            Some(w) => {
                list.negated = true;
                w
            }
            None => word.as_str(),
        };
        if names.iter().any(|n| matches(word, n)) {
            list.syscalls.push(word.to_string());
        } else if let Some(members) = group(groups, word) {
            let traced: Vec<String> = members
                .into_iter()
                .filter(|m| names.iter().any(|n| matches(m, n)))
                .collect();
            // A group none of whose syscalls is traced here still selects (none of) them.
            match traced.is_empty() {
                true => list.syscalls.push(word.to_string()),
                false => list.syscalls.extend(traced),
            }
        } else {
            list.events.push(word.to_string());
        }
    }
    list
}

/// The syscall names of strace group `word` in `dir` (None: no such group; a word that could be a path or a
/// glob is none).
fn group(dir: &Path, word: &str) -> Option<Vec<String>> {
    if word.is_empty() || word.starts_with('.') || word.contains(['/', ':', '*', '?', '[']) {
        return None;
    }
    let text = std::fs::read_to_string(dir.join(word)).ok()?;
    Some(
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(str::to_string)
            .collect(),
    )
}

/// Whether the syscall word `word` (a name or glob) names the traced syscall `name` (tracefs spelling) or its
/// table spelling.
fn matches(word: &str, name: &str) -> bool {
    let table = table_name(name);
    if !word.contains(['*', '?', '[']) {
        return word == name || word == table;
    }
    globset::Glob::new(word)
        .map(|g| g.compile_matcher())
        .is_ok_and(|m| m.is_match(name) || m.is_match(table))
}

/// The syscalls a trace shows, of `names`: none with `--no-syscalls` or when `-e` names events but no
/// syscall (perf trace), all when `-e` names nothing, else those named, or all but them after `!`.
pub fn selected(list: &TraceList, names: &[String], no_syscalls: bool) -> Vec<String> {
    if no_syscalls || (list.syscalls.is_empty() && !list.events.is_empty() && !list.negated) {
        return Vec::new();
    }
    let named = |n: &String| list.syscalls.iter().any(|w| matches(w, n));
    names
        .iter()
        .filter(|n| list.syscalls.is_empty() || named(n) != list.negated)
        .cloned()
        .collect()
}

/// The syscall table's name of the syscall whose tracepoints are `sys_enter_NAME`: the tracepoints take the
/// name of the kernel's `SYSCALL_DEFINE`, which differs from the table's for a few (`newstat` is `stat`,
/// `umount` is `umount2`).
pub fn table_name(name: &str) -> &str {
    match name {
        "newstat" => "stat",
        "newfstat" => "fstat",
        "newlstat" => "lstat",
        "newuname" => "uname",
        "sendfile64" => "sendfile",
        "umount" => "umount2",
        _ => name,
    }
}

/// The syscalls the kernel traces: those with both `sys_enter_NAME` and `sys_exit_NAME`.
pub fn traced_syscalls(tracefs: &Tracefs) -> Result<Vec<String>, EventError> {
    let events = tracefs.events("syscalls").map_err(|_| {
        EventError::Config(format!(
            "trace: no syscall tracepoints in {} (the kernel needs CONFIG_FTRACE_SYSCALLS)",
            tracefs.root().join("events").display()
        ))
    })?;
    Ok(events
        .iter()
        .filter_map(|e| e.strip_prefix("sys_enter_"))
        .filter(|n| {
            events
                .iter()
                .any(|e| e.strip_prefix("sys_exit_") == Some(n))
        })
        .map(str::to_string)
        .collect())
}

/// The plan of `rprof trace`: a [`PlannedKind::Syscall`] per syscall shown, then the tracepoints of `-e` and
/// `--event` (globs resolved). Anything else is refused in one line saying where it is counted or traced.
pub fn plan_trace(req: &TraceRequest) -> Result<Plan, EventError> {
    let tracefs = Tracefs::find_or_mount().map_err(|e| EventError::Config(e.to_string()))?;
    let names = traced_syscalls(&tracefs)?;
    let list = split(&req.expr, &names, Path::new(STRACE_GROUPS));
    let flagged = list
        .events
        .iter()
        .map(|e| ("-e", e))
        .chain(req.event.iter().map(|e| ("--event", e)));
    let mut specs = Vec::new();
    for (flag, text) in flagged {
        let spec = EventSpec::new(text);
        only_tracepoints(flag, &spec, &tracefs)?;
        specs.push(spec);
    }
    let mut plan = plan::plan(&specs, None)?;
    let mut syscalls = Vec::new();
    for name in selected(&list, &names, req.no_syscalls) {
        let id = tracefs
            .event_id("syscalls", &format!("sys_enter_{name}"))
            .map_err(|e| EventError::Config(e.to_string()))?;
        syscalls.push(PlannedEvent {
            name: name.clone(),
            kind: PlannedKind::Syscall { name, id },
            filter: None,
        });
    }
    if !list.syscalls.is_empty() && syscalls.is_empty() && !req.no_syscalls {
        return Err(EventError::Config(format!(
            "trace -e !{}: that leaves no syscall to trace",
            list.syscalls.join(",")
        )));
    }
    plan.events.splice(0..0, syscalls);
    if plan.events.is_empty() {
        return Err(EventError::Config(
            "trace --no-syscalls: nothing left to trace; name tracepoints with -e CATEGORY:EVENT (globs \
             allowed)"
                .into(),
        ));
    }
    plan.tracefs.get_or_insert(tracefs);
    Ok(plan)
}

/// Refuse what rprof trace does not show (software, hardware events, probe points), and a word that is
/// neither a syscall nor an event.
fn only_tracepoints(flag: &str, spec: &EventSpec, tracefs: &Tracefs) -> Result<(), EventError> {
    let name = &spec.name;
    let event = match grammar::parse(spec) {
        Ok(e) => e,
        Err(_) if !name.contains(':') => {
            return Err(EventError::Config(format!(
                "trace {flag} {name}: no syscall {name} (the kernel traces syscalls as sys_enter_NAME in \
                 {}), no strace group of that name in {STRACE_GROUPS} and no event of that name; tracepoints \
                 are CATEGORY:EVENT (`rprof list tracepoint` lists them)",
                tracefs.root().join("events/syscalls").display()
            )))
        }
        Err(e) => return Err(e),
    };
    let hint = match event.kind {
        Kind::Tracepoint { .. } => return Ok(()),
        _ if event.is_trace() => {
            "trace a function with rprof probe --trace, or record it with rprof record -e"
                .to_string()
        }
        _ => format!("count {name} with rprof stat -e, or sample it with rprof record -e"),
    };
    Err(EventError::Parse(format!(
        "trace {flag} {name}: not a tracepoint; rprof trace shows syscalls and tracepoints (CATEGORY:EVENT, \
         globs allowed): {hint}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(list: &str) -> Vec<String> {
        grammar::split_list(list)
    }

    fn names() -> Vec<String> {
        [
            "openat",
            "open",
            "read",
            "newstat",
            "mmap",
            "munmap",
            "exit_group",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    /// Check perf trace's split: names, globs and the table's spelling are syscalls, the rest events.
    #[test]
    fn syscalls_and_events_in_one_list() {
        let l = split(
            &words("openat,open*,stat,sched:sched_switch,cs"),
            &names(),
            Path::new("/nonexistent"),
        );
        assert_eq!(l.syscalls, ["openat", "open*", "stat"]);
        assert_eq!(l.events, ["sched:sched_switch", "cs"]);
        assert!(!l.negated);
        let sel = selected(&l, &names(), false);
        assert_eq!(sel, ["openat", "open", "newstat"]);
    }

    /// Check what is shown: events alone show no syscalls, nothing shows all, `!` all but those named.
    #[test]
    fn which_syscalls_are_shown() {
        let all = names();
        let none = Path::new("/nonexistent");
        let sel = |list: &str, no: bool| selected(&split(&words(list), &all, none), &all, no);
        assert!(sel("sched:*", false).is_empty());
        assert_eq!(sel("", false), all);
        assert!(sel("", true).is_empty());
        assert!(sel("read", true).is_empty());
        assert_eq!(
            sel("!open*,*map,sched:sched_switch", false),
            ["read", "newstat", "exit_group"]
        );
    }

    /// Check perf trace's strace groups: a group's name stands for its syscalls that are traced here (in their
    /// table spelling too), after the syscall names; `!` negates it; a word of no group is an event.
    #[test]
    fn strace_groups_name_their_syscalls() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("file"), "openat\nstat\n\nnosuch\n").unwrap();
        std::fs::write(dir.path().join("gone"), "nosuch\n").unwrap();
        let all = names();
        let l = split(&words("file,read,sched:*,net"), &all, dir.path());
        assert_eq!(l.syscalls, ["openat", "stat", "read"]);
        assert_eq!(l.events, ["sched:*", "net"]);
        assert_eq!(selected(&l, &all, false), ["openat", "read", "newstat"]);
        let l = split(&words("!file"), &all, dir.path());
        assert_eq!(
            selected(&l, &all, false),
            ["open", "read", "mmap", "munmap", "exit_group"]
        );
        let l = split(&words("gone"), &all, dir.path());
        assert!(selected(&l, &all, false).is_empty());
        assert!(split(&words("../file"), &all, dir.path())
            .syscalls
            .is_empty());
    }
}
