//! `rprof record` with perf's habits (issue 26, rows 9 and 11): `-p PID -- CMD` records the process for as
//! long as CMD runs, and a previous recording at the output is kept as FILE.old.
mod common;
use common::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Check perf's idiom `record -p PID -- sleep 3`: the process is sampled while the command runs, the
/// command itself is not, recording stops when it exits (the process lives on), and rprof exits with the
/// command's status.
#[test]
fn pid_recorded_while_a_command_runs() {
    if !privileged("pid_recorded_while_a_command_runs") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "calltree.c", FP);
    let target = Command::new(&bin)
        .arg("1000000")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let target = KillOnDrop(target);
    let pid = target.0.id().to_string();
    let data = dir.path().join("p.data");
    let started = Instant::now();
    let out = rprof()
        .args([
            "record",
            "-q",
            "-g",
            "-o",
            data.to_str().unwrap(),
            "-p",
            &pid,
        ])
        .args(["--", "sh", "-c", "sleep 0.5; exit 3"])
        .output()
        .unwrap();
    let took = started.elapsed();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(took >= Duration::from_millis(500), "stopped after {took:?}");
    assert!(
        cpu_time(target.0.id()).is_some(),
        "the process was stopped with the recording"
    );
    let comms = rprof_ok(&["report", "-i", data.to_str().unwrap(), "--sort", "comm"]);
    let rows: Vec<&str> = comms.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(rows.len(), 1, "only the process is sampled:\n{comms}");
    assert!(rows[0].ends_with(" calltree"), "{comms}");
}

/// Check that recording over an existing recording keeps it as FILE.old (replacing an older one), as perf
/// does, and says so; an empty file is simply replaced.
#[test]
fn previous_recording_is_kept_as_old() {
    if !privileged("previous_recording_is_kept_as_old") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("r.data");
    let old = dir.path().join("r.data.old");
    let path = data.to_str().unwrap();
    let record = || rprof_ok_stderr(&["record", "-o", path, "-F", "99", "--", "true"]).1;
    std::fs::write(&data, b"").unwrap();
    let first = record();
    assert!(!old.exists() && !first.contains(".old"), "{first}");
    let first_bytes = std::fs::read(&data).unwrap();
    let second = record();
    assert!(
        second.contains("the previous recording is now") && second.contains("r.data.old"),
        "{second}"
    );
    assert_eq!(std::fs::read(&old).unwrap(), first_bytes);
    let second_bytes = std::fs::read(&data).unwrap();
    record();
    assert_eq!(
        std::fs::read(&old).unwrap(),
        second_bytes,
        "the older .old is replaced"
    );
}
