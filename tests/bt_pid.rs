//! `rprof bt` with `/pid == N/` on every probe: the events are opened for process N only (per thread,
//! inherited), so another process's events never reach rprof; the count is bpftrace's on the same workload.
mod common;
use common::tracer::{bpftrace_bg, Tracer};
use common::{build_c, privileged, rprof};
use std::io::Write;
use std::process::{Command, Stdio};

/// The number after `key` in `text`.
fn value(text: &str, key: &str) -> u64 {
    text.lines()
        .find_map(|l| l.split_once(key)?.1.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no `{key}` in:\n{text}"))
}

/// `rprof bt -v` on `program` in the background, once BEGIN ran (its probes are enabled).
fn rprof_bt_bg(program: &str) -> Tracer {
    let program = format!("BEGIN {{ printf(\"rprof-test: attached\\n\"); }} {program}");
    Tracer::start(
        rprof().args(["bt", "-v", "-e", &program]),
        "rprof-test: attached",
    )
}

/// Start the target (a shell that waits for a line, then becomes `getppid_n CALLS`, keeping its pid), run
/// `tracer` once it exists, then let the target make its calls while `noise` (another process) makes its own;
/// returns what the tracer printed.
fn traced(
    bin: &std::path::Path,
    noise: &std::path::Path,
    calls: u64,
    tracer: impl FnOnce(u32) -> Tracer,
) -> String {
    let mut target = Command::new("/bin/sh")
        .args(["-c", &format!("read x; exec {} {calls}", bin.display())])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let t = tracer(target.id());
    let noisy = Command::new(noise).arg("50000").spawn().unwrap();
    writeln!(target.stdin.take().unwrap(), "go").unwrap();
    assert!(target.wait().unwrap().success());
    assert!(noisy.wait_with_output().unwrap().status.success());
    t.stop()
}

/// Check that `/pid == N/` counts exactly process N's 5,000 getppid(2) calls, as bpftrace counts them, while
/// another process makes 50,000: with per-process events, rprof receives only N's 5,000 events (its `-v`
/// count of the hits handed to the program, before the predicate), where a predicate it cannot take into the
/// kernel (`pid == N || pid == N`) has it receive the other process's too.
#[test]
fn pid_predicate_opens_events_of_that_process_only() {
    if !privileged("pid_predicate_opens_events_of_that_process_only") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bt_pid_target");
    std::fs::rename(build_c(dir.path(), "getppid_n.c", &["-O2"]), &bin).unwrap();
    let noise = dir.path().join("bt_pid_noise");
    std::fs::copy(&bin, &noise).unwrap();
    let count =
        |n: u32| format!("tracepoint:syscalls:sys_enter_getppid /pid == {n}/ {{ @n = count(); }}");

    let mine = traced(&bin, &noise, 5000, |n| rprof_bt_bg(&count(n)));
    assert!(
        mine.contains("(per-process events: `pid == "),
        "-v says where the pid part runs:\n{mine}"
    );
    assert_eq!(value(&mine, "@n: "), 5000, "{mine}");
    assert_eq!(value(&mine, "rprof bt: "), 5000, "{mine}");

    let theirs = traced(&bin, &noise, 5000, |n| bpftrace_bg(&count(n)));
    assert_eq!(value(&theirs, "@n: "), 5000, "{theirs}");

    // The same predicate written so that the kernel cannot take it: every process's events reach rprof.
    let either = |n: u32| {
        format!(
            "tracepoint:syscalls:sys_enter_getppid /pid == {n} || pid == {n}/ {{ @n = count(); }}"
        )
    };
    let wide = traced(&bin, &noise, 5000, |n| rprof_bt_bg(&either(n)));
    assert!(wide.contains("rprof bt: tasks: every process"), "{wide}");
    assert_eq!(value(&wide, "@n: "), 5000, "{wide}");
    assert!(value(&wide, "rprof bt: ") >= 55_000, "{wide}");
}
