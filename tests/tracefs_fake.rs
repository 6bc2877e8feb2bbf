//! The tracefs layer and the kprobe path on a fake tracefs tree (plain files in a temp dir).
use rprof::probe::group;
use rprof::probe::resolve::{resolve_kernel, resolve_syscalls, resolve_tracepoints, TargetKind};
use rprof::tracefs::{ProbeDef, ProbeFile, ProbeLocation, Tracefs, TracefsError};
use std::fs;
use std::path::Path;

fn fake_tree(kprobes: bool) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let r = d.path();
    fs::write(r.join("available_events"), "").unwrap();
    fs::write(r.join("uprobe_events"), "").unwrap();
    if kprobes {
        fs::write(r.join("kprobe_events"), "").unwrap();
    }
    fs::write(
        r.join("available_filter_functions"),
        "vfs_read\nvfs_write\nvfs_writev [foo]\ndo_sys_open\n",
    )
    .unwrap();
    for (cat, ev, id) in [
        ("syscalls", "sys_enter_write", 840),
        ("syscalls", "sys_exit_write", 839),
        ("syscalls", "sys_enter_read", 842),
        ("sched", "sched_switch", 300),
        ("sched", "sched_wakeup", 301),
    ] {
        let dir = r.join("events").join(cat).join(ev);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("id"), format!("{id}\n")).unwrap();
    }
    d
}

fn read(p: &Path) -> String {
    fs::read_to_string(p).unwrap()
}

/// Check that probes are appended (never truncating other probes) in the kernel's syntax, and read back.
#[test]
fn add_and_list_probes() {
    let d = fake_tree(true);
    fs::write(
        d.path().join("uprobe_events"),
        "p:other/keep /bin/true:0x10\n",
    )
    .unwrap();
    let t = Tracefs::at(d.path());
    assert!(t.is_mounted() && t.has_kprobes());
    let defs: Vec<ProbeDef> = (0..300)
        .map(|i| ProbeDef {
            group: "rprof_42".into(),
            event: format!("u{}", i / 100),
            is_return: i % 2 == 1,
            location: ProbeLocation::User {
                path: "/usr/lib/very/long/path/libfoo.so".into(),
                offset: 0x1000 + i,
            },
            fetch: Vec::new(),
        })
        .collect();
    t.add_probes(&defs).unwrap();
    let text = read(&d.path().join("uprobe_events"));
    assert!(text.starts_with("p:other/keep /bin/true:0x10\n"));
    assert_eq!(text.lines().count(), 301);
    assert!(text.contains("\nr:rprof_42/u0 /usr/lib/very/long/path/libfoo.so:0x1001\n"));
    let listed = t.list_probes(ProbeFile::Uprobe).unwrap();
    assert_eq!(listed.len(), 301);
    assert_eq!(
        t.groups().unwrap(),
        vec!["other".to_string(), "rprof_42".to_string()]
    );
    assert_eq!(
        group::rprof_groups(&t).unwrap(),
        vec![("rprof_42".to_string(), 42)]
    );
}

/// Check that removing a group disables it and deletes each of its events once, leaving other groups alone.
#[test]
fn remove_group_once_per_event() {
    let d = fake_tree(true);
    let r = d.path();
    fs::write(
        r.join("uprobe_events"),
        "p:rprof_7/u0 /b:0x10\np:rprof_7/u0 /b:0x20\nr:rprof_7/ur0 /b:0x10\np:keep/e /b:0x10\n",
    )
    .unwrap();
    fs::write(r.join("kprobe_events"), "p:rprof_7/k0 vfs_read\n").unwrap();
    fs::create_dir_all(r.join("events/rprof_7")).unwrap();
    fs::write(r.join("events/rprof_7/enable"), "1\n").unwrap();
    let t = Tracefs::at(r);
    t.remove_group("rprof_7").unwrap();
    let u = read(&r.join("uprobe_events"));
    let removed: Vec<&str> = u.lines().filter(|l| l.starts_with("-:")).collect();
    assert_eq!(removed, vec!["-:rprof_7/u0", "-:rprof_7/ur0"]);
    assert!(read(&r.join("kprobe_events")).ends_with("-:rprof_7/k0\n"));
    assert!(read(&r.join("events/rprof_7/enable")).ends_with("0\n"));
    // A group that does not exist is not an error.
    t.remove_group("rprof_8").unwrap();
}

/// Check that only groups of dead owners are removed at start.
#[test]
fn stale_groups_of_dead_owners() {
    let d = fake_tree(false);
    let r = d.path();
    fs::write(
        r.join("uprobe_events"),
        "p:rprof_100/u0 /b:0x10\np:rprof_200/u0 /b:0x10\np:mine/x /b:0x1\n",
    )
    .unwrap();
    let t = Tracefs::at(r);
    let removed = group::remove_groups_of_dead_owners(&t, |pid| pid == 200).unwrap();
    assert_eq!(removed, vec!["rprof_100".to_string()]);
    let u = read(&r.join("uprobe_events"));
    assert!(u.ends_with("-:rprof_100/u0\n"));
    assert!(!u.contains("-:rprof_200"));
}

/// Check the kprobe path: kernel functions match available_filter_functions and become p:/r: kprobe lines;
/// without kprobe_events the error names CONFIG_KPROBE_EVENTS.
#[test]
fn kprobe_path() {
    let d = fake_tree(true);
    let t = Tracefs::at(d.path());
    let targets = resolve_kernel(&t, "vfs_*", false).unwrap();
    let names: Vec<&str> = targets.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, vec!["vfs_read", "vfs_write", "vfs_writev"]);
    let (defs, events) = group::plan("rprof_9", &targets, false);
    t.add_probes(&defs).unwrap();
    let k = read(&d.path().join("kprobe_events"));
    assert!(
        k.contains("p:rprof_9/k0 vfs_read\nr:rprof_9/kr0 vfs_read\n"),
        "{k}"
    );
    assert_eq!(events.len(), 6);
    assert!(read(&d.path().join("uprobe_events")).is_empty());
    let none = fake_tree(false);
    let err = resolve_kernel(&Tracefs::at(none.path()), "vfs_*", false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("CONFIG_KPROBE_EVENTS"), "{err}");
    assert!(matches!(
        Tracefs::at(none.path()).require(ProbeFile::Kprobe),
        Err(TracefsError::NoKprobes { .. })
    ));
}

/// Check that syscalls need both enter and exit events, tracepoint globs match, and ids are read.
#[test]
fn syscalls_and_tracepoints() {
    let d = fake_tree(false);
    let t = Tracefs::at(d.path());
    let s = resolve_syscalls(&t, "*", false).unwrap();
    assert_eq!(s.len(), 1, "read has no exit event");
    assert_eq!(
        s[0].kind,
        TargetKind::Syscall {
            name: "write".into()
        }
    );
    assert!(resolve_syscalls(&t, "nope", false)
        .unwrap_err()
        .to_string()
        .contains("0 syscalls matched 'nope'"));
    let tp = resolve_tracepoints(&t, "sched", "sched_*", false).unwrap();
    assert_eq!(tp.len(), 2);
    assert_eq!(t.event_id("sched", "sched_wakeup").unwrap(), 301);
    assert!(t.event_id("sched", "nope").is_err());
}
