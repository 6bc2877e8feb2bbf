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
}

/// Run rprof expecting clap's usage error: exit status 2, and a message naming each of `names` (the flags).
fn usage_error(args: &[&str], names: &[&str]) {
    let out = rprof().args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "rprof {args:?}: {err}");
    assert!(err.starts_with("error: "), "rprof {args:?}: {err}");
    for name in names {
        assert!(
            err.contains(name),
            "rprof {args:?}: {name} not named:\n{err}"
        );
    }
}

/// Check that conflicting targets, a missing target or pattern, and bad values of --call-graph, -e, -C, the
/// seconds and counts are usage errors (exit 2) naming the flag, before anything runs.
#[test]
fn bad_arguments_are_usage_errors() {
    for (args, names) in [
        (
            &["record", "-a", "-p", "1"][..],
            &["--all-cpus", "--pid"][..],
        ),
        (&["record", "-a", "-t", "1"], &["--all-cpus", "--tid"]),
        (&["record", "-p", "1", "-t", "1"], &["--pid", "--tid"]),
        (&["record", "-C", "0", "-p", "1"], &["--cpu", "--pid"]),
        (&["record", "-q"], &["-p PID"]),
        (&["record", "-C", "0-x"], &["--cpu", "0-x", "0-3"]),
        (&["record", "-C", "3-1"], &["--cpu"]),
        (
            &["record", "--call-graph", "lbr", "-a"],
            &["--call-graph", "fp or dwarf"],
        ),
        (
            &["record", "--call-graph", "dwarf,65536", "-a"],
            &["--call-graph", "8..=65528"],
        ),
        (
            &["record", "--call-graph", "dwarf,big", "-a"],
            &["--call-graph", "8..=65528"],
        ),
        (
            &["record", "-e", "cycles", "-a"],
            &["--event", "cycles", "cpu-clock"],
        ),
        (&["record", "-d", "0", "-a"], &["--duration", "seconds"]),
        (&["record", "-d", "soon", "-a"], &["--duration", "seconds"]),
        (&["record", "-F", "0", "-a"], &["--freq"]),
        (&["record", "-c", "0", "-a"], &["--count"]),
        (
            &["record", "-m", "100", "-a"],
            &["--mmap-pages", "power of two"],
        ),
        (&["probe"], &["PATTERN"]),
        (&["probe", "-x", "/bin/true"], &["PATTERN"]),
        (
            &["probe", "syscall:write", "-d", "0"],
            &["--duration", "seconds"],
        ),
        (
            &["probe", "syscall:write", "-i", "inf"],
            &["--interval", "seconds"],
        ),
        (
            &["probe", "syscall:write", "-p", "1", "--", "true"],
            &["--pid", "COMMAND"],
        ),
        (
            &["probe", "syscall:write", "--mmap-pages", "3"],
            &["--mmap-pages", "power of two"],
        ),
    ] {
        usage_error(args, names);
    }
}

/// Check that rprof exits with the workload's status when it succeeded (as `perf record` does), 128+N when
/// signal N killed the workload, and 1 when rprof itself failed.
#[test]
fn exit_status_is_the_workloads() {
    if !privileged("exit_status_is_the_workloads") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("x.data");
    let data = data.to_str().unwrap();
    let status = |args: &[&str]| {
        let out = rprof().args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!err.contains("panicked"), "rprof {args:?}: {err}");
        (out.status.code(), err)
    };
    let record = |cmd: &[&str]| {
        let mut args = vec!["record", "-q", "-o", data, "--"];
        args.extend_from_slice(cmd);
        status(&args)
    };
    assert_eq!(record(&["true"]).0, Some(0));
    assert_eq!(record(&["false"]).0, Some(1));
    assert_eq!(record(&["sh", "-c", "exit 7"]).0, Some(7));
    assert_eq!(record(&["sh", "-c", "kill -KILL $$"]).0, Some(128 + 9));
    // The recording is complete whatever the workload's status.
    rprof_ok(&["report", "-i", data]);
    let (code, err) = status(&["probe", "syscall:write", "--", "sh", "-c", "echo x; exit 3"]);
    assert_eq!(code, Some(3), "{err}");
    // rprof's own failures are 1, even when the workload would have succeeded.
    let (code, err) = status(&["record", "-o", "/nonexistent-dir/x.data", "--", "true"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.starts_with("rprof: ") && err.contains("/nonexistent-dir/x.data"),
        "{err}"
    );
    let (code, err) = status(&["probe", "-x", "/nonexistent/bin", "f", "--", "true"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("/nonexistent/bin"), "{err}");
}

/// Check that an unprivileged user gets the perf_event_paranoid explanation: at 2 (the kernel's default) in the
/// one line that says the recording falls back to user space (perf's `:u`, issue 43), which then succeeds; at
/// 3 and above in the refusal, which names the sysctl.
#[test]
fn denied_explains_paranoid() {
    if !privileged("denied_explains_paranoid") {
        return;
    }
    let paranoid =
        std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").unwrap_or_default();
    let paranoid = paranoid.trim().parse::<i32>().unwrap_or(2);
    if paranoid < 2 {
        skip(
            "denied_explains_paranoid",
            "perf_event_paranoid < 2 lets every user sample",
        );
        return;
    }
    let dir = common::world_writable_tempdir();
    let data = dir.path().join("denied.data");
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_rprof"))
        .args([
            "record",
            "-N",
            "-g",
            "-o",
            data.to_str().unwrap(),
            "--",
            "true",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.success(), paranoid == 2, "{err}");
    assert!(
        err.contains(&format!("perf_event_paranoid={paranoid}")) && err.contains("CAP_PERFMON"),
        "{err}"
    );
    if paranoid == 2 {
        assert!(err.contains("user space only"), "{err}");
    }
}

/// Check that missing, empty and corrupt recordings, and recordings cut inside their header, give an error
/// naming the file, never a panic; and that a recording cut inside its data or feature sections (as a killed
/// recorder or a full disk leaves it) is reported up to the cut with one warning line naming the file.
#[test]
fn bad_recordings() {
    if !privileged("bad_recordings") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let e = rprof_err(&["report", "-i", "/nonexistent.data"]);
    assert!(e.contains("/nonexistent.data"), "{e}");
    let good = record_calltree(dir.path(), "good.data", "200");
    let bytes = std::fs::read(&good).unwrap();
    let bad = dir.path().join("bad.data");
    let bad_s = bad.to_str().unwrap();
    let data_offset = u64::from_le_bytes(bytes[40..48].try_into().unwrap()) as usize;
    for cut in [0, 7, 100, bytes.len() / 2, bytes.len() - 1] {
        std::fs::write(&bad, &bytes[..cut]).unwrap();
        let out = rprof()
            .args(["report", "-i", bad_s, "--folded"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(bad_s) && !err.contains("panicked"),
            "cut at {cut}: {err}"
        );
        if cut < data_offset {
            assert!(
                !out.status.success(),
                "cut at {cut} (in the header) accepted"
            );
        } else {
            assert!(
                out.status.success(),
                "cut at {cut} (after the header): {err}"
            );
            let warnings: Vec<&str> = err.lines().filter(|l| l.contains("warning")).collect();
            assert_eq!(warnings.len(), 1, "cut at {cut}: one warning line: {err}");
            assert!(
                warnings[0].contains(bad_s) && warnings[0].contains("samples up to byte"),
                "cut at {cut}: {err}"
            );
        }
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
        // 500 ms of CPU time for "target-exits"; for the signals, far more than the test waits.
        let ms = if how == "target-exits" {
            "500"
        } else {
            "100000"
        };
        let mut target = KillOnDrop(
            Command::new(&bin)
                .arg(ms)
                .stdout(Stdio::null())
                .spawn()
                .unwrap(),
        );
        // Held stopped until sampling is on, so the 500 ms of "target-exits" are all sampled however long
        // rprof takes to start on a busy machine.
        let target_pid = nix::unistd::Pid::from_raw(target.0.id() as i32);
        nix::sys::signal::kill(target_pid, nix::sys::signal::SIGSTOP).unwrap();
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
        nix::sys::signal::kill(target_pid, nix::sys::signal::SIGCONT).unwrap();
        if how != "target-exits" {
            // 300 ms of the target's CPU time: ~300 samples at 999 Hz however busy the machine is.
            wait_for_cpu(target.0.id(), Duration::from_millis(300));
        }
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
        // ~300 samples for the signals (300 ms of CPU), ~500 for the target that exits; ask for far fewer.
        assert!(samples >= 50, "{how}: only {samples} samples\n{folded}");
        assert!(folded.contains("hot_a"), "{how}: {folded}");
    }
}

/// Record the many-stacks fixture for 600 ms of its CPU time: ~600 samples, nearly each a deep stack of its
/// own (megabytes folded).
fn record_many_stacks(dir: &std::path::Path) -> String {
    let bin = build_c(dir, "many_stacks.c", FP);
    record_to(
        dir,
        "many.data",
        &["-F", "999", "-g", "--", bin.to_str().unwrap(), "600"],
    )
}

/// Check that `rprof report --folded | head -1` ends quietly with status 0 (not an error, not killed by
/// SIGPIPE), with a real broken pipe: the output is far larger than the pipe buffer and the reader closes after
/// one line.
#[test]
fn broken_pipe_is_success() {
    if !privileged("broken_pipe_is_success") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = record_many_stacks(dir.path());
    let full = rprof_ok(&["report", "-i", &data, "--folded"]);
    assert!(
        full.len() >= 256 * 1024,
        "the folded output ({} bytes, {} lines) must be far over the 64 KiB pipe buffer for the pipe to break",
        full.len(),
        full.lines().count()
    );
    let mut child = rprof()
        .args(["report", "-i", &data, "--folded"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let first = read_line(child.stdout.as_mut().unwrap());
    assert!(first.starts_with("many_stacks;"), "{first}");
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{}: {err}", out.status);
    assert!(err.is_empty(), "{err}");
}

/// Check that a broken pipe that is not stdout's (a flame graph written to a FIFO whose reader leaves) is an
/// error naming the file, exit status 1.
#[test]
fn broken_pipe_elsewhere_is_an_error() {
    if !privileged("broken_pipe_elsewhere_is_an_error") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = record_many_stacks(dir.path());
    let svg = dir.path().join("full.svg");
    rprof_ok(&["report", "-i", &data, "--flamegraph", svg.to_str().unwrap()]);
    let size = std::fs::metadata(&svg).unwrap().len();
    assert!(
        size >= 256 * 1024,
        "the SVG ({size} bytes) must be far over the pipe buffer"
    );
    let fifo = dir.path().join("fifo.svg");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let mut r = std::fs::File::open(&fifo).unwrap();
            let mut byte = [0u8; 1];
            std::io::Read::read_exact(&mut r, &mut byte).unwrap();
        })
    };
    let out = rprof()
        .args([
            "report",
            "-i",
            &data,
            "--flamegraph",
            fifo.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    reader.join().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}: {err}", out.status);
    assert!(err.contains(fifo.to_str().unwrap()), "{err}");
    assert!(err.contains("Broken pipe"), "{err}");
}

/// Check that `-a` samples the whole system, including a process started without rprof. The recording lasts
/// until that process has used 300 ms of CPU time (~150 samples at 499 Hz), not a span of wall time, which a
/// loaded machine could give to other processes.
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
    let spinner = KillOnDrop(
        Command::new(&bin)
            .arg("100000")
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let data = dir.path().join("a.data");
    let data = data.to_str().unwrap();
    let mut rec = KillOnDrop(
        rprof()
            .args(["record", "-a", "-g", "-F", "499", "-o", data])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let started = read_line(rec.0.stderr.as_mut().unwrap());
    assert!(started.contains("sampling"), "{started}");
    wait_for_cpu(spinner.0.id(), Duration::from_millis(300));
    let rec_pid = nix::unistd::Pid::from_raw(rec.0.id() as i32);
    nix::sys::signal::kill(rec_pid, nix::sys::signal::SIGINT).unwrap();
    let status = rec.0.wait().unwrap();
    assert!(status.success(), "rprof record -a exited with {status}");
    let folded = rprof_ok(&["report", "-i", data, "--folded", "--comm", "calltree"]);
    assert!(folded.contains(";main;work_a;hot_a "), "{folded}");
}

/// Check that `trace --event` takes the event layer's grammar and plan: a software event (perf's name, or an
/// alias in a comma list) or a probe point is refused in one line that says where it is counted or traced,
/// before anything is opened.
#[test]
fn trace_event_takes_tracepoints_only() {
    if !privileged("trace_event_takes_tracepoints_only") {
        return;
    }
    for (list, hint) in [
        ("cs", "rprof stat -e"),
        ("sched:sched_switch,page-faults", "rprof stat -e"),
        ("u:/bin/true:main", "rprof probe --trace"),
    ] {
        let err = rprof_err(&["trace", "--no-syscalls", "--event", list, "--", "true"]);
        let name = list.rsplit(',').next().unwrap();
        assert!(
            err.contains(&format!("trace --event {name}: not a tracepoint")) && err.contains(hint),
            "{err}"
        );
    }
}
