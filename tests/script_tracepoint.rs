//! `rprof script` on recordings at tracepoints: each sample's fields as the event's `print fmt` shows them,
//! compared line for line with `perf script` on the same file (rprof's recordings and one perf wrote).
mod common;
use common::*;

/// One sample of a script's output: its header line (`COMM PID [CPU] TIME: EVENT: FIELDS`) and its kernel
/// frames' lines (user frames are left out: the symbolizers differ there on inlined and C++ names).
type Block = (String, Vec<String>);

fn blocks(text: &str) -> Vec<Block> {
    let mut out: Vec<Block> = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match line.starts_with('\t') {
            false => out.push((line.to_string(), Vec::new())),
            true if line.ends_with("([kernel.kallsyms])") => {
                if let Some(last) = out.last_mut() {
                    last.1.push(line.to_string());
                }
            }
            true => {}
        }
    }
    out
}

fn perf_script(data: &str) -> String {
    let out = std::process::Command::new("perf")
        .args(["script", "-i", data])
        .output()
        .expect("run perf script");
    assert!(
        out.status.success(),
        "perf script failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// rprof script's and perf script's samples of `data`, their header lines (the event part: command, pid,
/// CPU, time, event and fields) asserted equal line for line; returns rprof's. The kernel frames are
/// counted, not asserted: perf leaves a rare sample's kernel chain out where rprof shows it.
fn same_as_perf(data: &str) -> Vec<Block> {
    let ours = blocks(&rprof_ok(&["script", "-i", data]));
    let perfs = blocks(&perf_script(data));
    assert_eq!(ours.len(), perfs.len(), "samples: rprof vs perf");
    for (a, b) in ours.iter().zip(&perfs) {
        assert_eq!(a.0, b.0, "header line");
    }
    let frames = ours.iter().zip(&perfs).filter(|(a, b)| a.1 == b.1).count();
    eprintln!(
        "{data}: {} header lines equal to perf script's; kernel frames equal in {frames}",
        ours.len()
    );
    ours
}

fn record(dir: &std::path::Path, name: &str, args: &[&str]) -> String {
    let data = dir.join(name).to_str().unwrap().to_string();
    let mut all = vec!["record", "-q", "-o", &data];
    all.extend_from_slice(args);
    rprof_ok(&all);
    data
}

/// sched_switch system-wide with stacks while a fixture naps 20 times: every line as perf script prints it,
/// and the fixture's 20 naps among them (`prev_state=S`, in nanosleep's kernel path).
#[test]
fn sched_switch_fields_as_perf() {
    if !privileged("sched_switch_fields_as_perf") || !perf_tool("sched_switch_fields_as_perf") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "spin_sleep.c", FP);
    let data = record(
        dir.path(),
        "switch.data",
        &[
            "-e",
            "sched:sched_switch",
            "-a",
            "-g",
            "--",
            bin.to_str().unwrap(),
            "20",
            "2",
        ],
    );
    let samples = same_as_perf(&data);
    let naps = samples
        .iter()
        .filter(|(h, frames)| {
            h.contains("sched:sched_switch: prev_comm=spin_sleep ")
                && h.contains(" prev_state=S ==> ")
                && frames.iter().any(|f| f.contains("nanosleep"))
        })
        .count();
    assert!(naps >= 20, "{naps} naps of spin_sleep, 20 made");
}

/// A syscall's entry in a per-process recording (no CPU field): `dfd: 0xffffff9c, filename: 0x...,
/// flags: 0x00000000, mode: ...` as perf prints it, with cat's plain open of its file.
#[test]
fn openat_fields_as_perf() {
    if !privileged("openat_fields_as_perf") || !perf_tool("openat_fields_as_perf") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("input.txt");
    std::fs::write(&file, "x\n").unwrap();
    let data = record(
        dir.path(),
        "openat.data",
        &[
            "-e",
            "syscalls:sys_enter_openat",
            "--",
            "cat",
            file.to_str().unwrap(),
        ],
    );
    let samples = same_as_perf(&data);
    assert!(
        samples.iter().any(|(h, _)| h
            .contains("syscalls:sys_enter_openat: dfd: 0xffffff9c, filename: 0x")
            && h.contains(", flags: 0x00000000, mode: 0x")),
        "no plain open of the file: {samples:?}"
    );
}

/// sched_process_exec's `__get_str(filename)`: the two programs a shell runs, by name, as perf prints them.
#[test]
fn exec_fields_as_perf() {
    if !privileged("exec_fields_as_perf") || !perf_tool("exec_fields_as_perf") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = record(
        dir.path(),
        "exec.data",
        &[
            "-e",
            "sched:sched_process_exec",
            "-a",
            "--",
            "sh",
            "-c",
            "/bin/true; /bin/echo done",
        ],
    );
    let samples = same_as_perf(&data);
    for program in ["filename=/bin/true pid=", "filename=/bin/echo pid="] {
        assert!(
            samples.iter().any(|(h, _)| h.contains(program)),
            "no exec of {program}: {samples:?}"
        );
    }
}

/// A file perf itself wrote (its tracing data has the ftrace formats, kallsyms and printk formats rprof's
/// has not): the same lines as perf script's, with sleep's switch among them.
#[test]
fn perf_written_file_as_perf() {
    if !privileged("perf_written_file_as_perf") || !perf_tool("perf_written_file_as_perf") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("perf.data");
    let data = data.to_str().unwrap();
    let st = std::process::Command::new("perf")
        .args([
            "record",
            "-q",
            "-e",
            "sched:sched_switch",
            "-a",
            "-g",
            "-o",
            data,
        ])
        .args(["--", "sleep", "0.2"])
        .status()
        .expect("run perf record");
    assert!(st.success(), "perf record failed");
    let samples = same_as_perf(data);
    assert!(
        samples
            .iter()
            .any(|(h, _)| h.contains("prev_comm=sleep ") && h.contains("prev_state=S")),
        "no switch of sleep"
    );
}
