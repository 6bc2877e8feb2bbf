//! Least privilege (issue 43, item 7): as uid 65534 with the host's kernel.perf_event_paranoid unchanged,
//! without capabilities (perf's `:u` fallback, said in one line) and with CAP_PERFMON alone (everything that
//! needs no tracefs; trace says what to change about tracefs).
mod common;

use common::{
    build_c, csv_count, parse_folded, perf_events_fixture, privileged, read_line, rprof, skip,
    KillOnDrop,
};
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("run the command")
}

/// Run `args` as uid 65534 (nobody) with no capabilities: the host's perf_event_paranoid unchanged.
fn as_nobody(args: &[&str]) -> Output {
    as_nobody_with_caps(&["--inh-caps=-all"], args)
}

/// Run rprof with `args` as uid 65534 (nobody), its capabilities set by setpriv's `caps` flags.
fn as_nobody_with_caps(caps: &[&str], args: &[&str]) -> Output {
    run(Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .args(caps)
        .arg(env!("CARGO_BIN_EXE_rprof"))
        .args(args))
}

/// Check that, as a user without capabilities at the host's kernel.perf_event_paranoid, `record -- CMD`
/// samples the command's user space (its hot function, no kernel frame) and `stat -- CMD` counts, each
/// saying so in one line, while `trace -- CMD` is refused in one line naming the setting; at 3 and above the
/// line names the sysctl instead; at 1 or below everything opens.
#[test]
fn unprivileged_user_space_only() {
    const TEST: &str = "unprivileged_user_space_only";
    if !privileged(TEST) {
        return;
    }
    let paranoid = rprof::events::privilege::paranoid().unwrap_or(2);
    let dir = common::world_writable_tempdir();
    let bin = perf_events_fixture(dir.path());
    let b = bin.to_str().unwrap();
    let data = dir.path().join("nobody.data");
    let data = data.to_str().unwrap();
    let rec = as_nobody(&[
        "record", "-N", "-F", "999", "-g", "-o", data, "--", b, "spin", "300",
    ]);
    let err = String::from_utf8_lossy(&rec.stderr);
    if paranoid >= 3 {
        assert!(
            !rec.status.success() && err.contains("kernel.perf_event_paranoid=3"),
            "{err}"
        );
        return;
    }
    assert!(rec.status.success(), "{err}");
    assert_eq!(err.contains("user space only"), paranoid == 2, "{err}");
    let report = run(rprof().args(["report", "-i", data, "--folded"]));
    let folded = parse_folded(&String::from_utf8_lossy(&report.stdout));
    let total: u64 = folded.iter().map(|(_, n)| n).sum();
    let hot: u64 = folded
        .iter()
        .filter(|(f, _)| f.iter().any(|x| x == "pe_spin"))
        .map(|(_, n)| n)
        .sum();
    assert!(
        total > 100 && hot * 10 >= total * 8,
        "{hot} of {total} in pe_spin: {folded:?}"
    );
    if paranoid == 2 {
        let entry = [
            "entry_SYSCALL_64",
            "do_syscall_64",
            "asm_exc_page_fault",
            "asm_sysvec_apic_timer_interrupt",
        ];
        let kernel = folded
            .iter()
            .any(|(f, _)| f.iter().any(|x| entry.contains(&x.as_str())));
        assert!(!kernel, "kernel frames at paranoid 2: {folded:?}");
        let table = run(rprof().args(["report", "-i", data]));
        let table = String::from_utf8_lossy(&table.stdout);
        assert!(!table.contains(" [k] "), "{table}");
    }
    let st = as_nobody(&[
        "stat",
        "-x,",
        "-e",
        "task-clock,page-faults",
        "--",
        b,
        "touch",
        "1000",
    ]);
    let err = String::from_utf8_lossy(&st.stderr);
    assert!(st.status.success(), "{err}");
    assert!(csv_count(&err, "page-faults") >= 1000, "{err}");
    // trace's syscalls and tracepoints happen in the kernel: no :u fallback serves them, the line says what.
    if paranoid == 2 {
        let tr = as_nobody(&["trace", "--", b, "touch", "1"]);
        let err = String::from_utf8_lossy(&tr.stderr);
        assert!(!tr.status.success(), "{err}");
        assert!(
            err.contains("needs CAP_PERFMON or kernel.perf_event_paranoid <= 1 (it is 2)"),
            "{err}"
        );
    }
}

/// Run `args` as uid 65534 (nobody) with CAP_PERFMON alone (inherited and ambient, so that it survives the
/// change of user and the exec): the host's perf_event_paranoid unchanged.
fn as_nobody_with_perfmon(args: &[&str]) -> Output {
    as_nobody_with_caps(
        &["--inh-caps=-all,+perfmon", "--ambient-caps=+perfmon"],
        args,
    )
}

/// The bar: with CAP_PERFMON alone, everything that needs no tracefs works, whatever the host's
/// perf_event_paranoid: `record -a`, `stat -a` and `top` (system-wide) see the whole system, the kernel
/// included (no "user space only" fallback); and `trace`, which needs tracefs, says what to change where this
/// user cannot read it (its mode and owner, the remount), never that tracefs cannot be found.
#[test]
fn cap_perfmon_alone_records_and_counts_system_wide() {
    const TEST: &str = "cap_perfmon_alone_records_and_counts_system_wide";
    if !privileged(TEST) {
        return;
    }
    let probe = run(Command::new("setpriv").args([
        "--reuid=65534",
        "--inh-caps=-all,+perfmon",
        "--ambient-caps=+perfmon",
        "true",
    ]));
    if !probe.status.success() {
        skip(
            TEST,
            "setpriv cannot give CAP_PERFMON (util-linux older than 2.36, or a kernel before 5.8)",
        );
        return;
    }
    let dir = common::world_writable_tempdir();
    perfmon_record_and_stat(dir.path());
    perfmon_top(dir.path());
    perfmon_trace();
}

/// `record -a` samples the whole system, the kernel included (`[k]` rows in the report), and the fixture's
/// hot function is in the profile with its share of CPU time; `stat -a` counts the fixture's page faults
/// among the system's.
fn perfmon_record_and_stat(dir: &Path) {
    let bin = perf_events_fixture(dir);
    let b = bin.to_str().unwrap();
    let data = dir.join("perfmon.data");
    let data = data.to_str().unwrap();
    let rec = as_nobody_with_perfmon(&[
        "record", "-a", "-N", "-F", "999", "-g", "-o", data, "--", b, "spin", "300",
    ]);
    let err = String::from_utf8_lossy(&rec.stderr);
    assert!(rec.status.success(), "{err}");
    assert!(!err.contains("user space only"), "{err}");
    let report = run(rprof().args(["report", "-i", data, "--folded"]));
    let folded = parse_folded(&String::from_utf8_lossy(&report.stdout));
    let hot: u64 = folded
        .iter()
        .filter(|(f, _)| f.iter().any(|x| x == "pe_spin"))
        .map(|(_, n)| n)
        .sum();
    // 300 ms of the fixture's CPU time at 999 Hz: about 300 samples of cpu-clock, whatever else runs (each
    // CPU's clock samples whoever is on it); 200 leaves room for the spin's own clock reads and the start.
    assert!(hot >= 200, "{hot} samples in pe_spin: {folded:?}");
    // The kernel is sampled too (no :u fallback): every CPU's clock samples whatever runs there, the idle
    // task in the kernel included.
    let table = run(rprof().args(["report", "-i", data]));
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.contains(" [k] "), "no kernel row:\n{table}");
    let st = as_nobody_with_perfmon(&[
        "stat",
        "-a",
        "-x,",
        "-e",
        "task-clock,page-faults",
        "--",
        b,
        "touch",
        "1000",
    ]);
    let err = String::from_utf8_lossy(&st.stderr);
    assert!(st.status.success(), "{err}");
    assert!(!err.contains("user space only"), "{err}");
    assert!(csv_count(&err, "page-faults") >= 1000, "{err}");
}

/// `top --stdio` of the whole system (perf top's default, which needs CAP_PERFMON at any paranoid above 0)
/// names a busy fixture's function, run by the same user (whose maps it may read), in one of two refreshes.
fn perfmon_top(dir: &Path) {
    let bin = build_c(dir, "top_spin.c", &["-O2", "-g", "-fno-omit-frame-pointer"]);
    let mut spin = KillOnDrop(
        Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--inh-caps=-all",
            ])
            .arg(&bin)
            .arg("600000")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    assert_eq!(read_line(spin.0.stdout.as_mut().unwrap()).trim(), "ready");
    // Up to 200 rows: on a busy machine the spinner shares the CPUs with everything else that runs.
    let top =
        as_nobody_with_perfmon(&["top", "--stdio", "-d", "1", "--refreshes", "2", "-n", "200"]);
    let (out, err) = (
        String::from_utf8_lossy(&top.stdout),
        String::from_utf8_lossy(&top.stderr),
    );
    assert!(top.status.success(), "{err}");
    assert!(!err.contains("user space only"), "{err}");
    let refreshes: Vec<&str> = out.split("PerfTop:").skip(1).collect();
    assert_eq!(refreshes.len(), 2, "{out}");
    assert!(
        refreshes
            .iter()
            .flat_map(|r| r.lines())
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .any(|l| l.ends_with("top_spin [.] top_hot_spin")),
        "no refresh names top_hot_spin:\n{out}"
    );
}

/// `trace -- true` needs tracefs: where this user cannot read it (tracefs's root is 0700 since Linux 6.2
/// unless mounted with another mode), the error says so with the mode, the owner and the remount that lets a
/// group read it; where it can, the trace runs and shows the command's exit_group.
fn perfmon_trace() {
    // As root: find (or mount) tracefs, and see its root's mode and owner.
    let listed = run(rprof().args(["list", "tracepoint", "sched:sched_switch"]));
    assert!(listed.status.success(), "{listed:?}");
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let root = mounts
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.get(2) == Some(&"tracefs"))
        .map(|f| f[1].to_string())
        .expect("tracefs mounted");
    let meta = std::fs::metadata(&root).unwrap();
    let mode = std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o7777;
    let owner = format!(
        "owner {}:{}",
        std::os::unix::fs::MetadataExt::uid(&meta),
        std::os::unix::fs::MetadataExt::gid(&meta)
    );
    let trace = as_nobody_with_perfmon(&["trace", "--", "true"]);
    let err = String::from_utf8_lossy(&trace.stderr);
    if mode & 0o005 == 0o005 {
        assert!(trace.status.success(), "{err}");
        assert!(err.contains(" exit_group("), "{err}");
        return;
    }
    assert!(!trace.status.success(), "{err}");
    let want = [
        format!("tracefs is mounted at {root} but this user (uid 65534) cannot read it"),
        format!("mode {mode:04o}"),
        owner,
        format!("mount -o remount,gid=GROUP,mode=0750 {root}"),
    ];
    for w in &want {
        assert!(err.contains(w.as_str()), "no `{w}` in: {err}");
    }
    assert!(!err.contains("cannot find"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
}
