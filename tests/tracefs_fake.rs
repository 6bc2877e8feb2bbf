//! The tracefs layer and the kprobe path on a fake tracefs tree (plain files in a temp dir).
use rprof::probe::group;
use rprof::probe::plan::{plan, Capabilities};
use rprof::probe::{
    resolve_kernel, resolve_syscalls, resolve_tracepoints, ProbeOptions, TargetKind, Targets,
};
use rprof::tracefs::{
    CpuStats, Instance, ProbeDef, ProbeFile, ProbeLocation, Tracefs, TracefsError,
};
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
                ref_ctr: None,
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
    let p = plan(
        "rprof_9",
        &Targets::new(targets),
        &ProbeOptions::default(),
        &Capabilities::default(),
    );
    let (defs, events) = (p.defs, p.events);
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

/// Fill an instance directory the way the kernel does on mkdir (only the files these tests use).
fn fake_instance_files(dir: &Path) {
    fs::write(dir.join("trace_clock"), "[local] global counter mono\n").unwrap();
    fs::write(dir.join("buffer_size_kb"), "1410\n").unwrap();
    fs::write(dir.join("set_event_pid"), "99\n").unwrap();
    fs::write(dir.join("tracing_on"), "1\n").unwrap();
    fs::create_dir_all(dir.join("options")).unwrap();
    fs::write(dir.join("options/event-fork"), "0\n").unwrap();
    let ev = dir.join("events/syscalls/sys_enter_getppid");
    fs::create_dir_all(&ev).unwrap();
    fs::write(ev.join("enable"), "0\n").unwrap();
    fs::create_dir_all(dir.join("per_cpu/cpu1")).unwrap();
    fs::write(
        dir.join("per_cpu/cpu1/stats"),
        "entries: 5\noverrun: 7\ncommit overrun: 0\nbytes: 80\noldest event ts: 1.5\nnow ts: 2.5\n\
         dropped events: 1\nread events: 40\n",
    )
    .unwrap();
}

/// Check the instance layer on a fake tree: creation (and its refusals), listing, every setting written to the
/// instance's own files, the clock check, CPU stats, and removal.
#[test]
fn instances() {
    let d = fake_tree(false);
    let t = Tracefs::at(d.path());
    assert!(!t.instance_supported());
    assert!(t.instances().unwrap().is_empty());
    let err = Instance::create(&t, "rprof_1").unwrap_err();
    assert!(matches!(err, TracefsError::NoInstances { .. }), "{err}");
    fs::create_dir(d.path().join("instances")).unwrap();
    let inst = Instance::create(&t, "rprof_1").unwrap();
    assert_eq!(inst.path(), d.path().join("instances/rprof_1"));
    assert_eq!(inst.name(), "rprof_1");
    let err = Instance::create(&t, "rprof_1").unwrap_err();
    assert!(matches!(err, TracefsError::InstanceExists { .. }), "{err}");
    assert!(err.to_string().contains("rmdir"), "{err}");
    for bad in ["", "a/b", ".."] {
        let err = Instance::create(&t, bad).unwrap_err();
        assert!(matches!(err, TracefsError::InstanceName { .. }), "{err}");
    }
    assert_eq!(t.instances().unwrap(), vec!["rprof_1".to_string()]);

    let dir = inst.path().to_path_buf();
    fake_instance_files(&dir);
    inst.set_clock("mono").unwrap();
    assert!(read(&dir.join("trace_clock")).starts_with("mono"));
    let err = inst.set_clock("tai").unwrap_err();
    assert!(matches!(err, TracefsError::NoClock { .. }), "{err}");
    assert!(err.to_string().contains("global"), "{err}");
    inst.set_buffer_kb(4096).unwrap();
    assert_eq!(read(&dir.join("buffer_size_kb")), "4096\n");
    assert!(
        !inst.set_buffer_percent(0).unwrap(),
        "no buffer_percent file"
    );
    fs::write(dir.join("buffer_percent"), "50\n").unwrap();
    assert!(inst.set_buffer_percent(0).unwrap());
    assert!(read(&dir.join("buffer_percent")).starts_with("0\n"));
    inst.set_event_pids(&[12, 34]).unwrap();
    assert_eq!(
        read(&dir.join("set_event_pid")),
        "12 34",
        "the list is replaced"
    );
    inst.set_event_pids(&[]).unwrap();
    assert_eq!(read(&dir.join("set_event_pid")), "");
    inst.set_event_fork(true).unwrap();
    assert_eq!(read(&dir.join("options/event-fork")), "1\n");
    inst.enable_event("syscalls", "sys_enter_getppid", true)
        .unwrap();
    assert_eq!(
        read(&dir.join("events/syscalls/sys_enter_getppid/enable")),
        "1\n"
    );
    assert!(inst.enable_event("syscalls", "nope", true).is_err());
    inst.set_tracing_on(false).unwrap();
    assert_eq!(read(&dir.join("tracing_on")), "0\n");
    let stats = inst.cpu_stats(1).unwrap();
    assert_eq!(
        stats,
        CpuStats {
            entries: 5,
            overrun: 7,
            commit_overrun: 0,
            bytes: 80,
            dropped_events: 1,
            read_events: 40,
        }
    );
    assert!(inst.cpu_stats(0).is_err());

    assert!(Instance::open_existing(&t, "rprof_1").is_ok());
    let err = Instance::open_existing(&t, "rprof_2").unwrap_err();
    assert!(matches!(err, TracefsError::NoSuchInstance { .. }), "{err}");
    // A plain directory with files cannot be removed (the kernel's can): the error names it.
    let err = inst.remove().unwrap_err();
    assert!(err.to_string().contains("instances/rprof_1"), "{err}");
    fs::remove_dir_all(&dir).unwrap();
    fs::create_dir(&dir).unwrap();
    inst.remove().unwrap();
    assert!(!dir.exists());
    inst.remove().unwrap();
}

/// Check that a probed file whose path `uprobe_events` cannot parse (a space splits the line) is written as
/// `/proc/self/fd/N`, and a plain path as itself.
#[test]
fn unparsable_paths_are_written_through_an_fd() {
    let d = fake_tree(false);
    let bins = tempfile::tempdir().unwrap();
    let spaced = bins.path().join("a b");
    fs::write(&spaced, b"\x7fELF").unwrap();
    let plain = bins.path().join("plain");
    fs::write(&plain, b"\x7fELF").unwrap();
    let def = |path: &Path, event: &str| ProbeDef {
        group: "rprof_5".into(),
        event: event.into(),
        is_return: false,
        location: ProbeLocation::User {
            path: path.to_path_buf(),
            offset: 0x10,
            ref_ctr: None,
        },
        fetch: Vec::new(),
    };
    let t = Tracefs::at(d.path());
    t.add_probes(&[def(&spaced, "u0"), def(&plain, "u1")])
        .unwrap();
    let u = read(&d.path().join("uprobe_events"));
    let lines: Vec<&str> = u.lines().collect();
    assert!(lines[0].starts_with("p:rprof_5/u0 /proc/self/fd/"), "{u}");
    assert!(lines[0].ends_with(":0x10"), "{u}");
    assert_eq!(lines[1], format!("p:rprof_5/u1 {}:0x10", plain.display()));
}
