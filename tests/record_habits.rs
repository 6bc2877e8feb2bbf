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

/// The number of records of each type in a recording's data section (perf.data's header gives the section at
/// byte 40: offset, size).
fn record_types(path: &std::path::Path) -> std::collections::BTreeMap<u32, u64> {
    let bytes = std::fs::read(path).unwrap();
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    let (offset, size) = (u64_at(40) as usize, u64_at(48) as usize);
    let mut types = std::collections::BTreeMap::new();
    let mut at = offset;
    while at + 8 <= offset + size {
        let kind = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        let len = usize::from(u16::from_le_bytes([bytes[at + 6], bytes[at + 7]]));
        assert!(len >= 8, "a record of {len} bytes at {at}");
        *types.entry(kind).or_insert(0) += 1;
        at += len;
    }
    types
}

/// Check that with a Python process on the host (`-a` then reads Python stacks as samples arrive: the reader
/// wakes for each sample), the side-band records of the other processes do not wake the reader one by one: it
/// used to wake, poll and end a round for every MMAP2, COMM, FORK and EXIT record of every process, which on a
/// host running builds made `record -a --push` cost 3-5x `perf record` (issue 45). The session's rounds
/// (FINISHED_ROUND records) are bounded by what may wake the reader: a sample, the 100 ms poll timeout, a
/// half-full ring (not reached here) and the rounds that read what is left at the end; the 300 processes
/// started meanwhile wrote thousands of side-band records.
#[test]
fn side_band_records_do_not_wake_the_reader() {
    if !privileged("side_band_records_do_not_wake_the_reader") {
        return;
    }
    let python = Command::new("python3")
        .args(["-c", "import time; time.sleep(600)"])
        .spawn()
        .expect("run python3");
    let python = KillOnDrop(python);
    let exe = format!("/proc/{}/exe", python.0.id());
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_link(&exe).is_ok_and(|p| p.to_string_lossy().contains("python")) {
        assert!(Instant::now() < deadline, "python3 did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("w.data");
    let started = Instant::now();
    rprof_ok(&[
        "record",
        "-q",
        "-a",
        "-F",
        "19",
        "-o",
        data.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "for i in $(seq 300); do /bin/true; done",
    ]);
    let wall = started.elapsed();
    let types = record_types(&data);
    let count = |kind: u32| types.get(&kind).copied().unwrap_or(0);
    let (samples, exits, rounds) = (count(9), count(4), count(68));
    let side_band = count(3) + count(4) + count(7) + count(10);
    // One round per 100 ms of the session and per sample, and a few at the start and the end.
    let bound = samples + (wall.as_secs_f64() / 0.1).ceil() as u64 + 20;
    eprintln!(
        "{:.2} s: {side_band} side-band records ({exits} exits), {samples} samples, {rounds} rounds (bound {bound})",
        wall.as_secs_f64()
    );
    assert!(exits >= 300, "{exits} exits of 300 processes: {types:?}");
    assert!(
        rounds <= bound,
        "{rounds} rounds for {samples} samples in {:.2} s: the reader woke for side-band records ({side_band})",
        wall.as_secs_f64()
    );
}

/// `record -a` looks for CPython only in processes that map an interpreter file (its MMAP2 records, a parent's
/// at a fork, the mappings of the processes that existed at the start): reading every new process's
/// /proc/PID/maps at its first sample cost a push on a host starting processes all the time a tenth of its CPU
/// (issue 45). Under strace, a recording of ten C spinners (100 ms of CPU time each) and one python3 spinning
/// 500 ms of its own CPU time, all started after the recording began, opens the maps of the python process and
/// of none of the spinners, and the python's samples carry its Python function.
#[test]
fn python_detection_reads_maps_of_python_processes_only() {
    if !privileged("python_detection_reads_maps_of_python_processes_only") {
        return;
    }
    if Command::new("strace").arg("-V").output().is_err() {
        skip(
            "python_detection_reads_maps_of_python_processes_only",
            "strace is not installed",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let spin = build_c(dir.path(), "recording_spin.c", FP);
    let (pids, py_pid) = (dir.path().join("pids"), dir.path().join("py_pid"));
    let py = "import time\nend = time.process_time() + 0.5\ndef py_spinner():\n    while time.process_time() < end:\n        pass\npy_spinner()\n";
    let script = format!(
        "for i in $(seq 10); do sh -c 'echo $$ >> {p}; exec {s} 100'; done; python3 -c '{py}' & echo $! > {q}; wait",
        p = pids.display(),
        s = spin.display(),
        q = py_pid.display()
    );
    let (data, trace) = (dir.path().join("py.data"), dir.path().join("strace"));
    let out = Command::new("strace")
        // --seccomp-bpf: only openat stops a process (the python3 spinner, stopped at each clock_gettime of
        // its loop, had its samples in ptrace's stop instead of its Python code).
        .args(["-f", "--seccomp-bpf", "-qq", "-e", "trace=openat", "-o"])
        .arg(&trace)
        .arg(env!("CARGO_BIN_EXE_rprof"))
        .env("PERF_BUILDID_DIR", test_buildid_dir())
        .args(["record", "-q", "-a", "-g", "-F", "199", "-o"])
        .arg(&data)
        .args(["--", "sh", "-c", &script])
        .output()
        .unwrap();
    assert_success(&out, &["strace rprof record -a"]);
    let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap();
    let spinners: Vec<String> = read(&pids).lines().map(str::to_string).collect();
    let python = read(&py_pid).trim().to_string();
    // The maps opened by rprof's own threads (the command's shells open none).
    let opened: std::collections::HashSet<String> = read(&trace)
        .lines()
        .filter_map(|l| maps_pid(l.split("\"/proc/").nth(1)?))
        .collect();
    assert_eq!(spinners.len(), 10, "{spinners:?}");
    for pid in &spinners {
        assert!(!opened.contains(pid), "the maps of spinner {pid} were read");
    }
    assert!(
        opened.contains(&python),
        "the maps of python3 ({python}) were not read: {opened:?}"
    );
    let folded = rprof_ok(&["report", "-i", data.to_str().unwrap(), "--folded"]);
    assert!(
        folded.lines().any(|l| l.contains("py_spinner")),
        "no py_spinner frame:\n{folded}"
    );
}

/// The pid in `PID/maps", ...` (the rest of a strace line after `"/proc/`).
fn maps_pid(rest: &str) -> Option<String> {
    let (pid, rest) = rest.split_once('/')?;
    (rest.starts_with("maps\"") && pid.bytes().all(|b| b.is_ascii_digit())).then(|| pid.to_string())
}
