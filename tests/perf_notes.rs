//! Issue 32: the perf usage notes' commands (record/report/script/annotate/probe) replayed with rprof on a
//! program shaped like the notes' (main -> func_a -> func_b -> func_c -> func_d), checking the functions, the
//! counts and the stacks. Each command is perf's spelling, as the notes write it.
mod common;
use common::*;
use std::path::Path;

/// Run rprof with `args`, returning (status, stdout, stderr).
fn run(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = rprof()
        .current_dir(dir)
        .args(args)
        .output()
        .expect("rprof runs");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

/// The `calls N` the fixture printed.
fn calls(stdout: &str) -> u64 {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("calls ")?.parse().ok())
        .expect("calls N")
}

/// Check that the notes' record/report/script/annotate command lines parse as perf parses them and that
/// their output shows the chain func_a -> func_b -> func_c -> func_d under main.
#[test]
fn sampling_commands_as_the_notes_write_them() {
    if !privileged("sampling_commands_as_the_notes_write_them") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "record_event.c", FP);
    let bin = bin.to_str().unwrap();
    // The notes' main recipe (with -p replaced by the command, and -g twice) and a command without `--`.
    let (code, out, err) = run(
        dir.path(),
        &[
            "record",
            "-F",
            "99",
            "-g",
            "--call-graph=dwarf",
            "-g",
            "-o",
            "a.data",
            bin,
            "300",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(calls(&out) > 0);
    let (code, _, err) = run(
        dir.path(),
        &[
            "record",
            "-g",
            "--proc-map-timeout",
            "500",
            "-o",
            "b.data",
            bin,
            "400",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("--proc-map-timeout has no effect"), "{err}");
    let (code, folded, err) = run(dir.path(), &["report", "-i", "b.data", "--folded"]);
    assert_eq!(code, 0, "{err}");
    let stacks = parse_folded(&folded);
    let total: u64 = stacks.iter().map(|s| s.1).sum();
    let chain: u64 = stacks
        .iter()
        .filter(|(f, _)| contains_run(f, &["main", "func_a", "func_b", "func_c", "func_d"]))
        .map(|s| s.1)
        .sum();
    // 400 ms of CPU at 4000 Hz: about 1600 samples, all but start-up in func_d's chain.
    assert!(
        total >= 500 && chain * 10 >= total * 9,
        "{chain} of {total}"
    );
    let (code, table, err) = run(
        dir.path(),
        &[
            "report",
            "-i",
            "b.data",
            "--stdio",
            "--comm",
            "record_event",
            "--percent-limit",
            "5",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let rows: Vec<&str> = table
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .collect();
    assert_eq!(rows.len(), 1, "{table}");
    assert!(rows[0].contains("func_d"), "{table}");
    let (code, script, err) = run(
        dir.path(),
        &["script", "-i", "b.data", "-c", "record_event"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        script.contains("func_c+") && script.contains("func_a+"),
        "{}",
        &script[..script.len().min(2000)]
    );
    let (code, none, _) = run(dir.path(), &["script", "-i", "b.data", "-c", "bash"]);
    assert_eq!((code, none.trim()), (0, ""));
    let (code, ann, err) = run(
        dir.path(),
        &["annotate", "-i", "b.data", "--stdio2", "func_d"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        ann.starts_with("Samples: ") && ann.contains("func_d() ") && ann.contains("← ret"),
        "{ann}"
    );
    assert!(
        ann.contains("↑ j"),
        "a backward jump of func_d's loop: {ann}"
    );
}

/// Check perf's probe listing and address forms: -F lists the four functions, an address (a file offset, as
/// perf's) and FUNC+OFF count exactly the program's calls, -l with no pattern and -d GROUP say that probes
/// live only as long as the session.
#[test]
fn probe_commands_as_the_notes_write_them() {
    if !privileged("probe_commands_as_the_notes_write_them") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "record_event.c", FP);
    let b = bin.to_str().unwrap();
    let (code, funcs, err) = run(dir.path(), &["probe", "-F", "-x", b, "func_*"]);
    assert_eq!(
        (code, funcs.as_str()),
        (0, "func_a\nfunc_b\nfunc_c\nfunc_d\n"),
        "{err}"
    );
    let nm = std::process::Command::new("nm").arg(&bin).output().unwrap();
    let addr = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .find_map(|l| l.strip_suffix(" T func_d").map(str::to_string))
        .expect("func_d in nm");
    let addr = format!("0x{}", addr.trim_start_matches('0'));
    for probe in [
        vec!["--add", addr.as_str()],
        vec![addr.as_str()],
        vec!["func_d+4"],
    ] {
        let mut args = vec!["probe", "-x", b];
        args.extend(&probe);
        args.extend(["--", b, "200"]);
        let (code, out, err) = run(dir.path(), &args);
        assert_eq!(code, 0, "{probe:?}: {err}");
        let n = calls(&out);
        let row = out
            .lines()
            .find(|l| l.starts_with("func_d") || l.starts_with("0x"))
            .expect(&out);
        let count: u64 = row.split_whitespace().nth(1).unwrap().parse().unwrap();
        assert_eq!(count, n, "{probe:?}: {out}");
        // Counted, not timed: no time in the row, and no call is said to be still running.
        assert!(
            !out.contains("OPEN") && !err.contains("OPEN"),
            "{probe:?}: {out}{err}"
        );
    }
    // func_d+2 is inside func_d's first instruction (endbr64 or push %rbp; mov %rsp,%rbp): refused, since a
    // breakpoint there would change the instruction.
    let (code, _, err) = run(dir.path(), &["probe", "-x", b, "func_d+2", "--", b, "50"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("is inside the instruction at func_d+0x"),
        "{err}"
    );
    let (code, _, err) = run(dir.path(), &["probe", "-l"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("live only as long as"), "{err}");
    let (code, _, err) = run(dir.path(), &["probe", "-d", "probe_test:*"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("live only as long as") && !err.contains("invalid value"),
        "{err}"
    );
}

/// The lines of the closing verdict on stderr (`rprof report: ...` or `rprof record: ...`).
fn verdict_lines<'a>(stderr: &'a str, what: &str) -> Vec<&'a str> {
    let head = format!("rprof {what}: ");
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix(&head))
        .collect()
}

/// Check that the closing verdict follows what was recorded (issue 41, item 3): no note on cut stacks when
/// the recording asked for no stacks (no -g), while the same program recorded with -g (frame pointers, so
/// stacks reach `_start`) has none either; no sampling-error note for a recording of every event of a
/// tracepoint (period 1), in `record` and `report`, nor at `-c 2` (the kernel still writes every hit, as
/// perf's recording shows), where the same tracepoint at `-F 100` keeps it; and the tracepoint's count is the
/// program's exact number of calls.
#[test]
fn notes_follow_what_was_recorded() {
    if !privileged("notes_follow_what_was_recorded") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "calltree.c", FP);
    let bin = bin.to_str().unwrap();
    let (code, _, err) = run(
        dir.path(),
        &["record", "-F", "999", "-o", "n.data", bin, "300"],
    );
    assert_eq!(code, 0, "{err}");
    let (code, table, err) = run(dir.path(), &["report", "-i", "n.data"]);
    assert_eq!(code, 0, "{err}");
    assert!(table.contains("[.] hot_a"), "{table}");
    let notes = verdict_lines(&err, "report");
    assert!(notes.iter().any(|l| l.starts_with("precision:")), "{err}");
    assert!(
        !notes.iter().any(|l| l.starts_with("stacks:")),
        "no stacks were recorded: {err}"
    );

    let calls = dir.path().join("getppid_n");
    let status = std::process::Command::new("cc")
        .arg(fixtures().join("getppid_n.c"))
        .arg("-o")
        .arg(&calls)
        .status()
        .unwrap();
    assert!(status.success());
    let calls = calls.to_str().unwrap();
    let event = "syscalls:sys_enter_getppid";
    let (code, _, err) = run(
        dir.path(),
        &["record", "-e", event, "-o", "t.data", calls, "3000"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("3000 samples"), "every event recorded: {err}");
    assert!(
        !verdict_lines(&err, "record")
            .iter()
            .any(|l| l.starts_with("precision:")),
        "every event recorded has no sampling error: {err}"
    );
    let (code, table, err) = run(dir.path(), &["report", "-i", "t.data"]);
    assert_eq!(code, 0, "{err}");
    assert!(table.starts_with("# 3000 samples"), "{table}");
    assert!(
        !verdict_lines(&err, "report")
            .iter()
            .any(|l| l.starts_with("precision:")),
        "every event recorded has no sampling error: {err}"
    );
    // At -c 2 the kernel still writes every hit (a software event whose samples carry their period), as
    // `perf record -e TRACEPOINT -c 2` does: still no sampling error.
    let (code, _, err) = run(
        dir.path(),
        &[
            "record", "-e", event, "-c", "2", "-o", "c.data", calls, "3000",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("3000 samples"), "every event recorded: {err}");
    assert!(
        !verdict_lines(&err, "record")
            .iter()
            .any(|l| l.starts_with("precision:")),
        "{err}"
    );
    // At -F the events are sampled: the note stays.
    let (code, _, err) = run(
        dir.path(),
        &[
            "record", "-e", event, "-F", "100", "-o", "f.data", calls, "3000",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        verdict_lines(&err, "record")
            .iter()
            .any(|l| l.starts_with("precision:")),
        "a sample of the events keeps its note: {err}"
    );
    let (code, table, err) = run(dir.path(), &["report", "-i", "f.data"]);
    assert_eq!(code, 0, "{err}");
    assert!(!table.starts_with("# 3000 samples"), "sampled: {table}");
    assert!(
        verdict_lines(&err, "report")
            .iter()
            .any(|l| l.starts_with("precision:")),
        "a sample of the events keeps its note: {err}"
    );
}

/// Check that a DWARF recording of a program with a return probe on `work_a` (an `rprof probe` session on it
/// at the same time) names the frame that stands for work_a's caller as the kernel's `[uprobes]` page, at the
/// address `perf report` shows for it, and that the verdict explains it as the uprobe trampoline, not as JIT
/// code or an address in no mapping.
#[test]
fn uprobe_trampoline_frames_are_explained() {
    if !privileged("uprobe_trampoline_frames_are_explained") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "calltree.c", FP);
    let mut target = std::process::Command::new(&bin)
        .arg("4000")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = target.id().to_string();
    let b = bin.to_str().unwrap();
    let mut probe = rprof()
        .args(["probe", "-x", b, "work_a", "-p", &pid, "-d", "30"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The probe is on once its session says so.
    let started = read_line(probe.stderr.as_mut().unwrap());
    assert!(started.contains("probing 1 target"), "{started}");
    let (code, _, err) = run(
        dir.path(),
        &[
            "record",
            "-F",
            "999",
            "--call-graph",
            "dwarf",
            "-p",
            &pid,
            "-o",
            "u.data",
            "--",
            "sleep",
            "1",
        ],
    );
    let probe_pid = nix::unistd::Pid::from_raw(probe.id() as i32);
    let _ = nix::sys::signal::kill(probe_pid, nix::sys::signal::SIGINT);
    let _ = probe.wait();
    let _ = target.kill();
    let _ = target.wait();
    assert_eq!(code, 0, "{err}");
    let (code, folded, err) = run(dir.path(), &["report", "-i", "u.data", "--folded"]);
    assert_eq!(code, 0, "{err}");
    let stacks = parse_folded(&folded);
    let through = |f: &[String]| contains_run(f, &["[uprobes]", "work_a", "hot_a"]);
    let n: u64 = stacks.iter().filter(|s| through(&s.0)).map(|s| s.1).sum();
    assert!(
        n >= 50,
        "no stack through [uprobes] -> work_a -> hot_a:\n{folded}"
    );
    let note = verdict_lines(&err, "report")
        .into_iter()
        .find(|l| l.contains("[uprobes]"))
        .unwrap_or_else(|| panic!("no note on [uprobes]: {err}"));
    assert!(note.contains("uprobe trampoline page"), "{note}");
    assert!(
        !note.contains("JIT") && !note.contains("perf-PID.map") && !note.contains("no mapping"),
        "{note}"
    );
    // perf names no symbol there either: it prints the page's address, the one rprof's table shows.
    let (code, table, err) = run(dir.path(), &["report", "-i", "u.data", "--children", "-q"]);
    assert_eq!(code, 0, "{err}");
    let row = table
        .lines()
        .find(|l| l.contains("[uprobes]"))
        .unwrap_or_else(|| panic!("no [uprobes] row:\n{table}"));
    assert!(row.ends_with("[.] 0x7fffffffe000"), "{row}");
}

/// Check that `report --diff BASE` without --folded prints perf diff's table (issue 41): on two recordings
/// of the call tree, each of hot_a's and hot_b's rows has perf diff's `Baseline` and `Delta Abs` on the same
/// files to the printed precision, and its new share is the baseline plus the change.
#[test]
fn diff_table_reads_as_perf_diff() {
    let test = "diff_table_reads_as_perf_diff";
    if !privileged(test) || !perf_tool(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "calltree.c", FP);
    let bin = bin.to_str().unwrap();
    for (name, ms) in [("base.data", "300"), ("new.data", "600")] {
        let (code, _, err) = run(dir.path(), &["record", "-F", "999", "-o", name, bin, ms]);
        assert_eq!(code, 0, "{err}");
    }
    let (code, table, err) = run(
        dir.path(),
        &[
            "report",
            "-i",
            "new.data",
            "--diff",
            "base.data",
            "--sort",
            "dso,sym",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        table.contains("# Baseline      New  Delta Abs  Object"),
        "{table}"
    );
    let perf = std::process::Command::new("perf")
        .current_dir(dir.path())
        .args(["diff", "base.data", "new.data"])
        .output()
        .unwrap();
    let perf = String::from_utf8_lossy(&perf.stdout).into_owned();
    for sym in ["hot_a", "hot_b"] {
        let end = format!("[.] {sym}");
        let ours = table.lines().find(|l| l.trim_end().ends_with(&end));
        let theirs = perf.lines().find(|l| l.trim_end().ends_with(&end));
        let (Some(ours), Some(theirs)) = (ours, theirs) else {
            panic!("no {sym} row:\n{table}\n{perf}");
        };
        let ours: Vec<&str> = ours.split_whitespace().collect();
        let theirs: Vec<&str> = theirs.split_whitespace().collect();
        // rprof: baseline, new, delta; perf: baseline, delta.
        assert_eq!(
            (ours[0], ours[2]),
            (theirs[0], theirs[1]),
            "{table}\n{perf}"
        );
        let pct = |s: &str| s.trim_end_matches('%').parse::<f64>().unwrap();
        assert!(
            (pct(ours[0]) + pct(ours[2]) - pct(ours[1])).abs() <= 0.011,
            "{table}"
        );
    }
}
