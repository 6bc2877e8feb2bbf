//! End-to-end tests of `rprof record -G CGROUP`: processes started in a cgroup after rprof are sampled and
//! symbolized, nothing outside it is, pid namespaces are mapped, and a missing cgroup is one clear line.
mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A fresh cgroup under the cgroup2 mount, removed when dropped (pass or fail): its processes are killed
/// (cgroup.kill) and the directory removed.
struct TestCgroup {
    name: String,
    path: PathBuf,
}

impl TestCgroup {
    /// Create `rprof_test_TEST_PID`; None (after a skip) where no cgroup2 is mounted.
    fn create(test: &str) -> Option<TestCgroup> {
        let mountinfo = std::fs::read("/proc/self/mountinfo").unwrap();
        let Some(mount) = rprof::process::parse_cgroup2_mount(&mountinfo) else {
            skip(test, "no cgroup2 file system is mounted");
            return None;
        };
        let name = format!("rprof_test_{test}_{}", std::process::id());
        let path = mount.join(&name);
        std::fs::create_dir(&path).unwrap_or_else(|e| panic!("mkdir {}: {e}", path.display()));
        Some(TestCgroup { name, path })
    }

    /// `sh -c` that moves itself into this cgroup, then runs `argv` in its place (exec): the program
    /// starts inside the cgroup.
    fn spawn_inside(&self, argv: &[&str]) -> Child {
        let script = format!(
            "echo $$ > '{}' && exec \"$@\"",
            self.path.join("cgroup.procs").display()
        );
        Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg("sh")
            .args(argv)
            .stdout(Stdio::null())
            .spawn()
            .unwrap()
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let _ = std::fs::write(self.path.join("cgroup.kill"), "1");
        for _ in 0..500 {
            if std::fs::remove_dir(&self.path).is_ok() || !self.path.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        eprintln!("could not remove the test cgroup {}", self.path.display());
    }
}

/// Start `rprof record -G CGROUP -F 499 -g -o DATA` and wait until it says that sampling is on.
fn start_recorder(cgroup: &TestCgroup, data: &Path) -> KillOnDrop {
    let mut rec = KillOnDrop(
        rprof()
            .args(["record", "-G", &cgroup.name, "-F", "499", "-g", "-o"])
            .arg(data)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let started = read_line(rec.0.stderr.as_mut().unwrap());
    assert!(
        started.contains(&format!("sampling cgroup '{}'", cgroup.name)),
        "{started}"
    );
    rec
}

/// Stop the recorder with SIGINT; returns the rest of its stderr (the summary), asserting success.
fn stop_recorder(mut rec: KillOnDrop) -> String {
    let pid = nix::unistd::Pid::from_raw(rec.0.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::SIGINT).unwrap();
    let mut rest = String::new();
    use std::io::Read;
    rec.0
        .stderr
        .as_mut()
        .unwrap()
        .read_to_string(&mut rest)
        .unwrap();
    let status = rec.0.wait().unwrap();
    assert!(
        status.success(),
        "rprof record -G failed ({status}):\n{rest}"
    );
    rest
}

/// Check that `-G` on a cgroup samples two processes started in it after rprof (both appear, their user frames
/// symbolized in their own binaries), and nothing from outside the cgroup: not an identical burner running at
/// the same time, nor any other process of the system.
#[test]
fn cgroup_samples_processes_started_later_and_nothing_outside() {
    const TEST: &str = "cgroup_samples_processes_started_later_and_nothing_outside";
    if !privileged(TEST) {
        return;
    }
    let Some(cgroup) = TestCgroup::create("later") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "calltree.c", FP);
    let copy = |name: &str| {
        let to = dir.path().join(name);
        std::fs::copy(&bin, &to).unwrap();
        to.to_str().unwrap().to_string()
    };
    let (one, two, outside) = (copy("cg_one"), copy("cg_two"), copy("outsider"));
    let data = dir.path().join("cg.data");
    let rec = start_recorder(&cgroup, &data);

    // 750 ms of CPU time of the call tree each, all three at once on the machine's cores.
    let mut outsider = KillOnDrop(
        Command::new(&outside)
            .arg("750")
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut a = KillOnDrop(cgroup.spawn_inside(&[&one, "750"]));
    let mut b = KillOnDrop(cgroup.spawn_inside(&[&two, "750"]));
    assert!(a.0.wait().unwrap().success());
    assert!(b.0.wait().unwrap().success());
    let summary = stop_recorder(rec);
    assert!(outsider.0.wait().unwrap().success());
    assert!(
        summary.contains(&format!("cgroup '{}': 2 processes seen", cgroup.name)),
        "{summary}"
    );

    let folded = rprof_ok(&["report", "-i", data.to_str().unwrap(), "--folded"]);
    let stacks = parse_folded(&folded);
    for comm in ["cg_one", "cg_two"] {
        let symbolized: u64 = stacks
            .iter()
            .filter(|(f, _)| f[0] == comm && contains_run(f, &["main", "work_a", "hot_a"]))
            .map(|s| s.1)
            .sum();
        // ~0.56 s of CPU under work_a;hot_a at 499 Hz: ~280 samples.
        assert!(
            symbolized >= 100,
            "{comm}: only {symbolized} samples in main;work_a;hot_a\n{folded}"
        );
    }
    // The two programs, and the shell that moved itself into the cgroup before its exec: nothing else. A
    // sample taken in the exec itself, before the kernel's COMM record of the new name, is of a process first
    // met in the cgroup there; when rprof reads it after the process is gone, /proc has no name left to
    // describe it with, and it is `:PID` (as perf shows a thread it has no COMM for): one of the two pids.
    let members = [format!(":{}", a.0.id()), format!(":{}", b.0.id())];
    let strangers: Vec<&(Vec<String>, u64)> = stacks
        .iter()
        .filter(|(f, _)| {
            !["cg_one", "cg_two", "sh"].contains(&f[0].as_str()) && !members.contains(&f[0])
        })
        .collect();
    assert!(
        strangers.is_empty(),
        "samples from outside the cgroup: {strangers:?}"
    );
}

/// Check that a process in its own pid namespace (`unshare --pid --fork`, started in the cgroup) is recorded
/// with its host pid, that the recording maps that pid to its namespace pid (1) through `recording::Reader`
/// and `report::Profile`, that record's summary shows both, and that `perf report` still reads the file with
/// rprof's extra feature section.
#[test]
fn cgroup_maps_host_pids_to_namespace_pids() {
    const TEST: &str = "cgroup_maps_host_pids_to_namespace_pids";
    if !privileged(TEST) {
        return;
    }
    if Command::new("unshare").arg("--version").output().is_err() {
        skip(TEST, "unshare (util-linux) is not installed");
        return;
    }
    let Some(cgroup) = TestCgroup::create("pidns") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "calltree.c", FP);
    let burner = dir.path().join("nsburn");
    std::fs::copy(&bin, &burner).unwrap();
    let data = dir.path().join("ns.data");
    let rec = start_recorder(&cgroup, &data);
    let mut child = KillOnDrop(cgroup.spawn_inside(&[
        "unshare",
        "--pid",
        "--fork",
        "--mount-proc",
        burner.to_str().unwrap(),
        "300",
    ]));
    assert!(child.0.wait().unwrap().success());
    let summary = stop_recorder(rec);

    // The host pid of nsburn, from its exec COMM record.
    let mut reader = rprof::recording::Reader::open(&data).unwrap();
    let ns_pids = reader.ns_pids().clone();
    let mut host_pid = None;
    while let Some(event) = reader.next_event().unwrap() {
        if let rprof::recording::Event::Comm { pid, name, .. } = event {
            if name == "nsburn" {
                host_pid = Some(pid);
            }
        }
    }
    let host_pid = host_pid.expect("an exec COMM record of nsburn");
    assert_ne!(host_pid, 1);
    assert_eq!(ns_pids.get(&host_pid), Some(&1), "{ns_pids:?}");
    assert!(summary.contains(&format!("{host_pid} (ns 1)")), "{summary}");
    let profile = rprof::report::load(
        &data,
        &rprof::report::Filter::default(),
        rprof::symbols::SymbolizerOptions::default(),
    )
    .unwrap();
    assert_eq!(profile.ns_pids.get(&host_pid), Some(&1));
    assert!(profile.comms.iter().any(|c| c == "nsburn"));

    if perf_tool(TEST) {
        let out = Command::new("perf")
            .args(["report", "--stdio", "--sort", "comm", "-i"])
            .arg(&data)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("nsburn"),
            "perf report on a recording with rprof's NS_PIDS section:\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Check that a cgroup that does not exist is one line naming the path tried and the cgroup2 mount, with
/// rprof's exit status 1 and no recording left behind, and that -G refuses -p.
#[test]
fn cgroup_missing_is_one_clear_line() {
    let Some(mount) =
        rprof::process::parse_cgroup2_mount(&std::fs::read("/proc/self/mountinfo").unwrap())
    else {
        skip(
            "cgroup_missing_is_one_clear_line",
            "no cgroup2 file system is mounted",
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("none.data");
    let out = rprof()
        .args(["record", "-G", "rprof_no_such_cgroup", "-o"])
        .arg(&data)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let tried = mount.join("rprof_no_such_cgroup");
    let expected = format!(
        "cgroup 'rprof_no_such_cgroup' not found at {}; -G takes a path relative to the cgroup2 mount ({})",
        tried.display(),
        mount.display()
    );
    assert!(stderr.contains(&expected), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(!data.exists(), "a failed -G left {}", data.display());

    let out = rprof()
        .args(["record", "-G", "x", "-p", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be used with"));
}

/// Check `rprof stat -G CGROUP -a` (perf stat's): the getppid calls of a program started in the cgroup are
/// counted exactly, and none of an identical program outside it, running at the same time.
#[test]
fn stat_counts_only_the_cgroups_events() {
    const TEST: &str = "stat_counts_only_the_cgroups_events";
    if !privileged(TEST) {
        return;
    }
    let Some(cgroup) = TestCgroup::create("stat") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "getppid_n.c", &["-O2"]);
    let bin = bin.to_str().unwrap();
    let mut stat = KillOnDrop(
        rprof()
            .args([
                "stat",
                "-e",
                "syscalls:sys_enter_getppid",
                "-a",
                "-G",
                &cgroup.name,
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let started = read_line(stat.0.stderr.as_mut().unwrap());
    assert!(started.contains("Ctrl-C to end"), "{started}");
    let mut inside = cgroup.spawn_inside(&[bin, "1234"]);
    let mut outside = Command::new(bin).arg("777").spawn().unwrap();
    assert!(inside.wait().unwrap().success() && outside.wait().unwrap().success());
    let pid = nix::unistd::Pid::from_raw(stat.0.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::SIGINT).unwrap();
    let mut text = String::new();
    use std::io::Read;
    let mut stdout = stat.0.stdout.take().unwrap();
    stdout.read_to_string(&mut text).unwrap();
    assert!(stat.0.wait().unwrap().success(), "{text}");
    let count = text
        .lines()
        .find_map(|l| l.strip_prefix("syscalls:sys_enter_getppid"))
        .and_then(|c| c.trim().replace(',', "").parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no count in:\n{text}"));
    assert_eq!(count, 1234, "{text}");
}
