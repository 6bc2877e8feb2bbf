//! How `rprof record` and `rprof report` fail on bad input and end on signals: one clear line, the right exit
//! code, and always a valid recording.
mod common;
use common::*;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Run rprof expecting failure; returns stderr, checked to be one line without a panic.
fn rprof_err(args: &[&str]) -> String {
    let out = rprof().args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "rprof {args:?} should fail\n{err}");
    assert!(!err.contains("panicked"), "rprof {args:?} panicked:\n{err}");
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "one line of error expected:\n{err}"
    );
    err
}

/// Check that a missing PID, an unexecutable command and an unwritable output each give one clear line.
#[test]
fn bad_targets_and_outputs() {
    if !privileged("bad_targets_and_outputs") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.data");
    let out = out.to_str().unwrap();
    let e = rprof_err(&["record", "-p", "999999999", "-o", out]);
    assert!(e.contains("no such process: 999999999"), "{e}");
    let e = rprof_err(&["record", "-o", out, "--", "/nonexistent/prog"]);
    assert!(e.contains("cannot execute /nonexistent/prog"), "{e}");
    let e = rprof_err(&["record", "-o", "/nonexistent-dir/x.data", "--", "true"]);
    assert!(e.contains("/nonexistent-dir/x.data"), "{e}");
    let e = rprof_err(&["record", "-e", "cycles", "-o", out, "--", "true"]);
    assert!(e.contains("cycles"), "{e}");
}

/// Check that an unprivileged user gets the perf_event_paranoid explanation.
#[test]
fn denied_explains_paranoid() {
    if !privileged("denied_explains_paranoid") {
        return;
    }
    let paranoid =
        std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").unwrap_or_default();
    if paranoid.trim().parse::<i32>().unwrap_or(2) < 2 {
        skip(
            "denied_explains_paranoid",
            "perf_event_paranoid < 2 lets every user sample",
        );
        return;
    }
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_rprof"))
        .args([
            "record",
            "-g",
            "-o",
            "/tmp/rprof-denied-test.data",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("perf_event_paranoid") && err.contains("CAP_PERFMON"),
        "{err}"
    );
}

/// Check that missing, empty, truncated and corrupt recordings give an error naming the file, never a panic.
#[test]
fn bad_recordings() {
    if !privileged("bad_recordings") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let e = rprof_err(&["report", "-i", "/nonexistent.data"]);
    assert!(e.contains("/nonexistent.data"), "{e}");
    let good = record_calltree(dir.path(), "good.data", "4");
    let bytes = std::fs::read(&good).unwrap();
    let bad = dir.path().join("bad.data");
    let bad_s = bad.to_str().unwrap();
    for cut in [0, 7, 100, bytes.len() / 2, bytes.len() - 1] {
        std::fs::write(&bad, &bytes[..cut]).unwrap();
        let out = rprof()
            .args(["report", "-i", bad_s, "--folded"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "cut at {cut} accepted");
        assert!(
            err.contains(bad_s) && !err.contains("panicked"),
            "cut at {cut}: {err}"
        );
    }
    let mut flipped = bytes.clone();
    for i in (64..flipped.len()).step_by(97) {
        flipped[i] ^= 0x5a;
    }
    std::fs::write(&bad, &flipped).unwrap();
    let out = rprof().args(["report", "-i", bad_s]).output().unwrap();
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
}

/// Check that SIGTERM during `record -p` and the target's own exit both leave a complete, readable file.
#[test]
fn signals_and_target_exit_leave_valid_files() {
    if !privileged("signals_and_target_exit_leave_valid_files") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(
        dir.path(),
        "calltree.c",
        &["-O0", "-fno-omit-frame-pointer"],
    );
    for how in ["sigterm", "sigint", "target-exits"] {
        let rounds = if how == "target-exits" { "10" } else { "400" };
        let mut target = KillOnDrop(
            Command::new(&bin)
                .arg(rounds)
                .stdout(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let data = dir.path().join(format!("{how}.data"));
        let mut rec = KillOnDrop(
            rprof()
                .args([
                    "record",
                    "-g",
                    "-F",
                    "999",
                    "-p",
                    &target.0.id().to_string(),
                    "-o",
                ])
                .arg(&data)
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let started = read_line(rec.0.stderr.as_mut().unwrap());
        assert!(started.contains("sampling"), "{started}");
        std::thread::sleep(Duration::from_millis(1000));
        let rec_pid = nix::unistd::Pid::from_raw(rec.0.id() as i32);
        match how {
            "sigterm" => nix::sys::signal::kill(rec_pid, nix::sys::signal::SIGTERM).unwrap(),
            "sigint" => nix::sys::signal::kill(rec_pid, nix::sys::signal::SIGINT).unwrap(),
            _ => {
                target.0.wait().unwrap();
            }
        }
        let status = rec.0.wait().unwrap();
        assert!(status.success(), "{how}: rprof exited with {status}");
        let folded = rprof_ok(&["report", "-i", data.to_str().unwrap(), "--folded"]);
        let samples: u64 = parse_folded(&folded).iter().map(|s| s.1).sum();
        // ~1000 samples with a core to itself; the tests share 2 cores, so ask for far fewer.
        assert!(samples >= 50, "{how}: only {samples} samples\n{folded}");
        assert!(folded.contains("hot_a"), "{how}: {folded}");
    }
}

/// Check that `rprof report --folded | head -1` ends quietly with status 0.
#[test]
fn broken_pipe_is_success() {
    if !privileged("broken_pipe_is_success") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = record_calltree(dir.path(), "p.data", "20");
    let script = format!(
        "set -o pipefail; '{}' report -i '{}' --folded | head -c 1 >/dev/null",
        env!("CARGO_BIN_EXE_rprof"),
        data
    );
    let out = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Check that `-a -d 1` samples the whole system, including a process started without rprof.
#[test]
fn system_wide() {
    if !privileged("system_wide") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(
        dir.path(),
        "calltree.c",
        &["-O0", "-fno-omit-frame-pointer"],
    );
    let _spinner = KillOnDrop(
        Command::new(&bin)
            .arg("400")
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(Duration::from_millis(100));
    let data = dir.path().join("a.data");
    let data = data.to_str().unwrap();
    rprof_ok(&[
        "record", "-q", "-a", "-g", "-F", "499", "-d", "1", "-o", data,
    ]);
    let folded = rprof_ok(&["report", "-i", data, "--folded", "--comm", "calltree"]);
    assert!(folded.contains(";main;work_a;hot_a "), "{folded}");
}
