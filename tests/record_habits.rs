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

/// The sampling frequency stored in the first attr of recording `data` (None for a fixed period).
fn attr_sample_freq(data: &std::path::Path) -> Option<u64> {
    let bytes = std::fs::read(data).unwrap();
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    // perf_file_header: magic, size, attr_size, then the attrs section's offset; perf_event_attr: sample_freq
    // at byte 16, the flags at 40 (bit 10: freq).
    let attr = word(24) as usize;
    (word(attr + 40) & (1 << 10) != 0).then(|| word(attr + 16))
}

/// The seconds from a recording's first sample to its last (`rprof script -F time`).
fn sample_span_seconds(data: &str) -> f64 {
    let times: Vec<f64> = rprof_ok(&["script", "-i", data, "-F", "time"])
        .lines()
        .filter_map(|l| l.trim().trim_end_matches(':').parse().ok())
        .collect();
    match (times.first(), times.last()) {
        (Some(first), Some(last)) => last - first,
        _ => panic!("no sample times in {data}"),
    }
}

/// Check issue 30's bar: `-F` above `kernel.perf_event_max_sample_rate` records at that limit with a warning
/// that names the sysctl and its value (as perf does): the file's attr asks for the limit, and the samples do
/// not come faster than it; `--strict-freq` refuses, naming the sysctl
/// and the fix.
#[test]
fn frequency_above_the_kernel_limit_records_at_the_limit() {
    if !privileged("frequency_above_the_kernel_limit_records_at_the_limit") {
        return;
    }
    let max: u64 = std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let asked = (max * 10).to_string();
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "recording_spin.c", FP);
    let data = dir.path().join("max.data");
    let data_arg = data.to_str().unwrap();
    let cmd = [bin.to_str().unwrap(), "300"];
    let mut args = vec!["record", "-F", &asked, "-o", data_arg, "--"];
    args.extend(cmd);
    let (_, stderr) = rprof_ok_stderr(&args);
    let warning = stderr
        .lines()
        .find(|l| l.contains("warning"))
        .unwrap_or_else(|| panic!("no warning:\n{stderr}"));
    // The kernel may lower its limit while the test runs: the warning says the one rprof read.
    let said: u64 = warning
        .split("kernel.perf_event_max_sample_rate = ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("the warning names the sysctl and its value: {warning}"));
    assert!(
        said <= max && warning.contains(&format!("sampling at {said} Hz")),
        "{warning}"
    );
    assert!(!stderr.contains("perf_event_open failed"), "{stderr}");
    assert_eq!(
        attr_sample_freq(&data),
        Some(said),
        "the recording's sample_freq"
    );
    let table = rprof_ok(&["report", "-i", data_arg, "--sort", "comm"]);
    let samples: f64 = table
        .lines()
        .find_map(|l| l.strip_prefix("# ")?.split_once(" samples"))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("no '# N samples' line in:\n{table}"));
    // The limit is a rate in time: the cpu-clock timer fires at most once per period while the fixture is on
    // a CPU, so the samples are at most the rate times the span they cover. Not per second of the fixture's
    // CPU time: this kernel does not charge the timer's interrupts to the task, and at 100,000 Hz they can
    // take most of its time on a CPU (measured here: perf record -F 100000 of this fixture, 300 ms of its CPU,
    // 173,687 samples over 5.6 s, 25-35 us apart). Each switch onto a CPU restarts the period's count, at most
    // one sample more per switch, and a spinner runs at least the scheduler's slice (0.75 ms) each time: 10%.
    let span = sample_span_seconds(data_arg);
    eprintln!("-F {asked}: recorded at {said} Hz, {samples} samples over {span:.3} s");
    assert!(
        samples > 0.0 && samples <= 1.1 * said as f64 * span + 1.0,
        "{samples} samples over {span:.3} s at {said} Hz"
    );

    let mut args = vec![
        "record",
        "--strict-freq",
        "-F",
        &asked,
        "-o",
        data_arg,
        "--",
    ];
    args.extend(cmd);
    let out = rprof().args(&args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "--strict-freq recorded: {err}");
    assert!(
        err.contains("kernel.perf_event_max_sample_rate")
            && err.contains(&format!(
                "sysctl -w kernel.perf_event_max_sample_rate={asked}"
            ))
            && !err.contains("perf_event_open failed"),
        "{err}"
    );
}
