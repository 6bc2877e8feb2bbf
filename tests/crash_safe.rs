//! Recordings that survive a killed recorder, and launched commands that do not outlive it: `rprof record`
//! SIGKILLed mid-run leaves a file that `rprof report` (and `perf report`) read with one warning, perf's own
//! SIGKILLed file is read the same way, and `-- CMD` dies with rprof unless `--keep-workload`.
mod common;

use common::{build_c, contains_run, privileged, read_line, rprof, wait_for_cpu, KillOnDrop, FP};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// CPU time of the target during each recording: the samples a run gets at 999 Hz depend on it, not on how
/// long the machine takes to give it.
const WORK: Duration = Duration::from_secs(2);

/// A spinning fixture (main -> spin_outer -> spin_leaf) that runs until killed.
fn spinner(dir: &Path) -> KillOnDrop {
    let bin = build_c(dir, "recording_spin.c", FP);
    KillOnDrop(Command::new(bin).arg("3600000").spawn().unwrap())
}

/// `rprof record -F 999 -g -p PID -o DATA`, once it said it is sampling; its stderr is drained after that.
fn start_record(pid: u32, data: &Path, extra: &[&str]) -> Child {
    let mut record = rprof();
    record
        .args(["record", "-F", "999", "-g", "-o"])
        .arg(data)
        .args(extra)
        .args(["-p", &pid.to_string()]);
    start_sampling(record)
}

/// Start `record` (an `rprof record` command) and return once it said it is sampling; its stderr is drained
/// after that.
fn start_sampling(mut record: Command) -> Child {
    let mut child = record
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let line = read_line(&mut stderr);
    assert!(line.contains("sampling"), "rprof record said: {line}");
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    child
}

/// `rprof report -i DATA`: the sample count of its table header and its stderr lines.
fn report(data: &Path) -> (u64, Vec<String>) {
    let out = rprof().args(["report", "-i"]).arg(data).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "rprof report -i {} failed: {stderr}",
        data.display()
    );
    let samples = stdout
        .lines()
        .find_map(|l| l.strip_prefix("# ")?.split_once(" samples"))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("no '# N samples' line in:\n{stdout}"));
    (samples, stderr.lines().map(str::to_string).collect())
}

/// The one warning line about an unfinished file, checked for what it must say.
fn assert_one_unfinished_warning(lines: &[String], data: &Path, samples: u64) {
    let warnings: Vec<&String> = lines.iter().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 1, "one warning line: {lines:?}");
    let w = warnings[0];
    let count = format!("read {} samples", rprof::report::thousands(samples));
    assert!(
        w.contains(&data.display().to_string())
            && w.contains("was not finished")
            && w.contains(&count),
        "the warning names the file, says it was not finished and gives the samples ({count}): {w}"
    );
}

/// Assert that `perf report --stdio` reads the SIGKILLed recording `data` and prints `expect` (`what` names it).
fn assert_perf_reports(data: &Path, expect: &str, what: &str) {
    let out = Command::new("perf")
        .args(["report", "--stdio", "-i"])
        .arg(data)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains(expect),
        "{what}: perf report on the killed file: {}{text}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Check that `rprof record -F 999 -g -p PID` SIGKILLed after 2 s of the target's CPU time leaves a file that
/// `rprof report` reads with one warning and at least half the samples of a run of the same length that was
/// ended with SIGINT (records reach the file 4 times a second, so about 85% are expected), and that `perf
/// report` reads it too.
#[test]
fn sigkilled_record_keeps_its_samples() {
    if !privileged("sigkilled_record_keeps_its_samples") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let spin = spinner(dir.path());
    let pid = spin.0.id();

    let clean = dir.path().join("clean.data");
    let mut rec = start_record(pid, &clean, &[]);
    wait_for_cpu(pid, WORK);
    kill(Pid::from_raw(rec.id() as i32), Signal::SIGINT).unwrap();
    assert!(rec.wait().unwrap().success(), "the SIGINTed run failed");
    let (clean_samples, clean_err) = report(&clean);
    assert!(
        !clean_err.iter().any(|l| l.contains("warning")),
        "a finished file gives no warning: {clean_err:?}"
    );

    let killed = dir.path().join("killed.data");
    let mut rec = start_record(pid, &killed, &[]);
    wait_for_cpu(pid, WORK);
    rec.kill().unwrap();
    rec.wait().unwrap();
    let (samples, lines) = report(&killed);
    assert_one_unfinished_warning(&lines, &killed, samples);
    eprintln!(
        "SIGKILL after {WORK:?} of CPU: {samples} samples, {clean_samples} in a finished run"
    );
    assert!(
        samples * 2 >= clean_samples,
        "{samples} samples after SIGKILL, {clean_samples} in a finished run of the same length"
    );

    if common::perf_tool("sigkilled_record_keeps_its_samples (perf report part)") {
        assert_perf_reports(&killed, "# Samples:", "killed");
    }
}

/// Check that a `perf record` SIGKILLed after 2 s of the target's CPU time (small rings, so perf has written
/// something) is read by `rprof report` with the same one warning, samples of the fixture included.
#[test]
fn sigkilled_perf_record_file_is_read() {
    if !privileged("sigkilled_perf_record_file_is_read")
        || !common::perf_tool("sigkilled_perf_record_file_is_read")
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let spin = spinner(dir.path());
    let pid = spin.0.id();
    let data = dir.path().join("perf.data");
    let mut perf = Command::new("perf")
        .args(["record", "-m", "8", "-F", "999", "-g", "-o"])
        .arg(&data)
        .args(["-p", &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_cpu(pid, WORK);
    perf.kill().unwrap();
    perf.wait().unwrap();
    let (samples, lines) = report(&data);
    assert_one_unfinished_warning(&lines, &data, samples);
    // perf writes what it read when a ring is half full (16 KiB): most of 2 s at 999 Hz is there.
    assert!(
        samples >= 500,
        "{samples} samples read from perf's killed file"
    );
    let out = rprof()
        .args(["report", "--folded", "-i"])
        .arg(&data)
        .output()
        .unwrap();
    let folded = String::from_utf8_lossy(&out.stdout);
    assert!(
        folded.contains("main;spin_outer;spin_leaf"),
        "the fixture's stacks: {folded}"
    );
}

/// A recording SIGKILLed after [`WORK`] of its target's CPU time.
struct Killed {
    data: std::path::PathBuf,
    /// The target's CPU time from the "sampling" line to the kill.
    cpu: Duration,
    /// Samples of the fixture's stack (main -> spin_outer -> spin_leaf) in the killed file.
    samples: u64,
    /// `rprof report`'s stderr lines.
    lines: Vec<String>,
    /// What rprof record said (its stderr up to the kill).
    said: String,
}

/// `rprof record -F 999 -o DIR/NAME.data ARGS` on the spinner `pid`, SIGKILLed after [`WORK`] of its CPU time
/// (counted from the "sampling" line).
fn kill_after_work(dir: &Path, name: &str, args: &[&str], pid: u32) -> Killed {
    let data = dir.join(format!("{name}.data"));
    let mut rec = rprof()
        .args(["record", "-F", "999", "-o"])
        .arg(&data)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = rec.stderr.take().unwrap();
    let line = read_line(&mut stderr);
    assert!(
        line.contains("sampling"),
        "{name}: rprof record said: {line}"
    );
    let rest = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        text
    });
    let cpu0 = common::cpu_time(pid).unwrap();
    wait_for_cpu(pid, WORK);
    // Whether rprof ended on its own before the kill (an error) shows in what it said.
    let early = rec.try_wait().unwrap();
    rec.kill().unwrap();
    let cpu = common::cpu_time(pid).unwrap() - cpu0;
    rec.wait().unwrap();
    let said = format!(
        "{line}{}{}",
        rest.join().unwrap(),
        match early {
            Some(status) => format!("(rprof record had ended before the kill: {status})"),
            None => String::new(),
        }
    );
    let (_, lines) = report(&data);
    let folded = rprof()
        .args(["report", "--folded", "-i"])
        .arg(&data)
        .output()
        .unwrap();
    let folded = String::from_utf8_lossy(&folded.stdout);
    let samples: u64 = common::parse_folded(&folded)
        .iter()
        .filter(|(frames, _)| contains_run(frames, &["main", "spin_outer", "spin_leaf"]))
        .map(|(_, n)| n)
        .sum();
    eprintln!("{name}: SIGKILL after {cpu:?} of the target's CPU: {samples} of its samples");
    Killed {
        data,
        cpu,
        samples,
        lines,
        said,
    }
}

/// A killed recording holds at least half the samples its target's CPU time gave (999 a second; records
/// reach the file 4 times a second, DWARF mode's a round of 100 ms later), and reads with the one warning.
fn assert_kept_its_samples(name: &str, k: &Killed) {
    let expected = k.cpu.as_secs_f64() * 999.0;
    assert!(
        k.samples as f64 >= expected / 2.0,
        "{name}: {} samples of the fixture's stack after SIGKILL, for {:?} of its CPU; rprof report said \
         {:?}; rprof record said:\n{}",
        k.samples,
        k.cpu,
        k.lines,
        k.said
    );
    assert!(
        k.lines.iter().any(|l| l.contains("was not finished")),
        "{name}: {:?}",
        k.lines
    );
}

/// Check that `rprof record --call-graph dwarf -p PID` and `rprof record -g -a`, SIGKILLed after 2 s of the
/// target's CPU time, leave files that `rprof report` reads with the one warning and at least half the target's
/// samples (999 a second of its CPU time; records reach the file 4 times a second, DWARF mode's a round of
/// 100 ms later), whose events `rprof script` names, and that `perf report` reads.
#[test]
fn sigkilled_dwarf_and_system_wide_records_keep_their_samples() {
    let test = "sigkilled_dwarf_and_system_wide_records_keep_their_samples";
    if !privileged(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let spin = spinner(dir.path());
    let pid = spin.0.id();
    let pid_arg = pid.to_string();
    for (name, args) in [
        ("dwarf", &["--call-graph", "dwarf", "-p", &pid_arg][..]),
        ("system", &["-g", "-a"][..]),
    ] {
        let killed = kill_after_work(dir.path(), name, args, pid);
        assert_kept_its_samples(name, &killed);
        let script = rprof()
            .args(["script", "-i"])
            .arg(&killed.data)
            .output()
            .unwrap();
        let script = String::from_utf8_lossy(&script.stdout);
        assert!(
            script.contains(" cpu-clock: ") && !script.contains("[unknown]:"),
            "{name}: rprof script names the event: {}",
            script.lines().next().unwrap_or("")
        );
        if common::perf_tool(test) {
            assert_perf_reports(&killed.data, "of event 'cpu-clock", name);
        }
    }
}

/// The build id of the libc that process `pid` maps, in hex (from `readelf -n`).
fn libc_build_id(pid: u32) -> Option<String> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let libc = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains("/libc.so"))?;
    let out = Command::new("readelf").arg("-n").arg(libc).output().ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_string))
}

/// Check issue 41's residue: a DWARF recording whose first unwind of libc waits on a file read that never
/// ends (libc's debug file, in `--debug-dir`, is a FIFO nobody writes: as a disk that stalls under load),
/// SIGKILLed after 2 s of its target's CPU time, still holds at least half the target's samples with the
/// fixture's stack (before, it held none: the sampling thread waited in the read).
#[test]
fn sigkilled_dwarf_record_keeps_its_samples_while_a_module_read_stalls() {
    let test = "sigkilled_dwarf_record_keeps_its_samples_while_a_module_read_stalls";
    if !privileged(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let spin = spinner(dir.path());
    let pid = spin.0.id();
    // The spinner has mapped libc once it spends CPU time in main.
    wait_for_cpu(pid, Duration::from_millis(20));
    let Some(id) = libc_build_id(pid) else {
        common::skip(
            test,
            "no libc build id (readelf -n) in the spinner's mappings",
        );
        return;
    };
    let debug = dir.path().join("debug");
    let link = debug.join(".build-id").join(&id[..2]);
    std::fs::create_dir_all(&link).unwrap();
    nix::unistd::mkfifo(
        &link.join(format!("{}.debug", &id[2..])),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let pid_arg = pid.to_string();
    let args = [
        "--call-graph",
        "dwarf",
        "--debug-dir",
        debug.to_str().unwrap(),
        "-p",
        &pid_arg,
    ];
    let killed = kill_after_work(dir.path(), "stalled", &args, pid);
    assert_kept_its_samples("stalled", &killed);
}

/// Check issue 30's bar: an `--off-cpu` recording SIGKILLed after two rounds of offcpu_sleep.c (300 ms of its
/// CPU, then 700 ms asleep in sleep_phase, each round) reads as off-CPU, though the names of its events
/// (EVENT_DESC) are written only at the end: `rprof report` has off-CPU columns and `--off-cpu-only` the two
/// sleeps that ended (at least 1.4 s, at most the recording's wall time) in the worker's nanosleep, `rprof script`
/// names both events, and `perf report` reads the off-CPU samples as their own event, named.
#[test]
fn sigkilled_off_cpu_record_reads_as_off_cpu() {
    let test = "sigkilled_off_cpu_record_reads_as_off_cpu";
    if !privileged(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(
        dir.path(),
        "offcpu_sleep.c",
        &["-O1", "-g", "-fno-omit-frame-pointer"],
    );
    let data = dir.path().join("k.data");
    let started = Instant::now();
    let mut rec = rprof()
        .args(["record", "--off-cpu", "-g", "-F", "999", "-o"])
        .arg(&data)
        .args(["--", bin.to_str().unwrap(), "1000"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = rec.stderr.take().unwrap();
    let line = read_line(&mut stderr);
    assert!(line.contains("sampling"), "rprof record said: {line}");
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    let workload = common::only_child(rec.id());
    // Two rounds done and the third begun (0.6 s of CPU and more), then time for the records to reach the file.
    wait_for_cpu(workload, Duration::from_millis(700));
    std::thread::sleep(Duration::from_millis(600));
    rec.kill().unwrap();
    let wall = started.elapsed();
    rec.wait().unwrap();
    assert!(
        gone(workload, Duration::from_secs(5)),
        "the fixture outlived rprof"
    );

    let out = rprof().args(["report", "-i"]).arg(&data).output().unwrap();
    let (table, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && stderr.contains("was not finished"),
        "{stderr}"
    );
    let header = table.lines().find(|l| l.contains("Symbol")).unwrap();
    assert!(header.contains("Wait"), "off-CPU columns: {table}");
    let off = common::rprof_ok(&[
        "report",
        "-i",
        data.to_str().unwrap(),
        "--off-cpu-only",
        "--folded",
    ]);
    let sleep_us: u64 = common::parse_folded(&off)
        .iter()
        // Frame pointers skip the caller of libc's nanosleep (sleep_phase), which has none.
        .filter(|(frames, _)| {
            contains_run(frames, &["worker"]) && frames.iter().any(|f| f.contains("nanosleep"))
        })
        .map(|(_, us)| us)
        .sum();
    eprintln!("off CPU in the worker's nanosleep: {sleep_us} us, in {wall:?} of recording");
    assert!(
        sleep_us >= 1_400_000 && sleep_us as u128 <= wall.as_micros(),
        "{sleep_us} us off CPU in nanosleep after two 700 ms sleeps, in {wall:?}:\n{off}"
    );
    let script = common::rprof_ok(&["script", "-i", data.to_str().unwrap()]);
    assert!(
        script.contains("offcpu-time: ")
            && script.contains("cpu-clock: ")
            && !script.contains("[unknown]:"),
        "rprof script names the events:\n{}",
        script.lines().take(5).collect::<Vec<_>>().join("\n")
    );
    if !common::perf_tool(test) {
        return;
    }
    let out = Command::new("perf")
        .args(["report", "--stdio", "--sort", "sym", "-i"])
        .arg(&data)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events: Vec<&str> = text.lines().filter(|l| l.contains(" of event ")).collect();
    assert!(
        events.iter().any(|l| l.contains("of event 'offcpu-time'"))
            && events.iter().any(|l| l.contains("of event 'cpu-clock"))
            && !events.iter().any(|l| l.contains("context-switches")),
        "perf report's events: {events:?}"
    );
}

/// Check that a recording whose target exits on its own is finished: report reads it without a warning.
#[test]
fn target_exit_leaves_a_finished_file() {
    if !privileged("target_exit_leaves_a_finished_file") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "recording_spin.c", FP);
    let data = dir.path().join("exit.data");
    let out = rprof()
        .args(["record", "-F", "999", "-g", "-o"])
        .arg(&data)
        .args(["--", bin.to_str().unwrap(), "200"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (samples, lines) = report(&data);
    assert!(samples > 0, "no samples");
    assert!(
        !lines.iter().any(|l| l.contains("warning")),
        "a finished file gives no warning: {lines:?}"
    );
}

/// Whether process `pid` is gone (or a zombie nobody reaped yet), waiting up to `wait` for it.
fn gone(pid: u32, wait: Duration) -> bool {
    let deadline = Instant::now() + wait;
    loop {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.chars().next()));
        if matches!(state, None | Some(Some('Z'))) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Check that the command `rprof record -- CMD` launched is killed with rprof (SIGKILL), and that
/// `--keep-workload` leaves it running.
#[test]
fn launched_command_dies_with_rprof() {
    if !privileged("launched_command_dies_with_rprof") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "recording_spin.c", FP);
    for keep in [false, true] {
        let data = dir.path().join(format!("keep{keep}.data"));
        let mut cmd = rprof();
        cmd.args(["record", "-F", "99", "-o"]).arg(&data);
        if keep {
            cmd.arg("--keep-workload");
        }
        let mut rec = cmd
            .args(["--", bin.to_str().unwrap(), "3600000"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let workload = common::only_child(rec.id());
        wait_for_cpu(workload, Duration::from_millis(50));
        rec.kill().unwrap();
        rec.wait().unwrap();
        if keep {
            assert!(
                !gone(workload, Duration::from_millis(500)),
                "--keep-workload: the command was killed"
            );
            kill(Pid::from_raw(workload as i32), Signal::SIGKILL).unwrap();
        } else {
            assert!(
                gone(workload, Duration::from_secs(5)),
                "the command outlived the SIGKILLed rprof"
            );
        }
    }
}

/// Check the bar of the supervisor: 2 s after `kill -9` of a timing `rprof probe` (the tracefs ring engine on a
/// private fixture, and perf events on `c:malloc`), `uprobe_events` holds no line of its group, `instances/` no
/// instance of it, and the launched command is gone.
#[test]
fn sigkilled_timing_probe_leaves_nothing() {
    if !privileged("sigkilled_timing_probe_leaves_nothing") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "probe_fixture.c", &["-O0", "-g"]);
    let bin = bin.to_str().unwrap();
    for (spec, engine) in [
        (vec!["-x", bin, "func_a"], "engine: tracefs ring"),
        (vec!["c:malloc"], "engine: perf"),
    ] {
        let mut args = vec!["probe"];
        args.extend(&spec);
        args.extend(["--", bin, "wait", "1", "0"]);
        let mut child = rprof()
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let header = read_line(child.stderr.as_mut().unwrap());
        assert!(header.contains(engine), "{spec:?}: header: {header}");
        let line = read_line(child.stdout.as_mut().unwrap());
        let workload: u32 = line.trim().parse().expect("the fixture's pid");
        let pid = child.id();
        assert!(
            !rprof_uprobes(pid).is_empty(),
            "{spec:?}: the probes are not in uprobe_events"
        );
        child.kill().unwrap();
        let killed = std::time::Instant::now();
        child.wait().unwrap();
        let instance = Path::new("/sys/kernel/tracing/instances").join(format!("rprof_{pid}"));
        while (!rprof_uprobes(pid).is_empty() || instance.exists())
            && killed.elapsed() < Duration::from_secs(2)
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(
            rprof_uprobes(pid),
            Vec::<String>::new(),
            "{spec:?}: uprobe_events 2 s after the SIGKILL"
        );
        assert!(
            !instance.exists(),
            "{spec:?}: {} 2 s after the SIGKILL",
            instance.display()
        );
        assert!(
            gone(workload, Duration::from_secs(2)),
            "{spec:?}: the launched command outlived the SIGKILLed rprof probe"
        );
    }
}

/// The lines of `uprobe_events` that belong to the rprof process `pid` (group `rprof_<pid>`).
fn rprof_uprobes(pid: u32) -> Vec<String> {
    let tag = format!(":rprof_{pid}/");
    std::fs::read_to_string("/sys/kernel/tracing/uprobe_events")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(&tag))
        .map(str::to_string)
        .collect()
}

/// Check that system-wide `rprof probe --count -x BIN f` and `rprof probe -g ...` use the uprobe PMU (nothing in
/// uprobe_events while they run, and nothing right after a SIGKILL, without a restart). On tasks (a command,
/// `-p`) rprof never uses it (their events follow new threads, which an inherited PMU probe breaks; see
/// tests/probe_threads.rs): there the supervisor removes the tracefs probes (the tests above).
#[test]
fn sigkilled_probe_on_the_pmu_leaves_nothing() {
    if !privileged("sigkilled_probe_on_the_pmu_leaves_nothing") {
        return;
    }
    if !Path::new("/sys/bus/event_source/devices/uprobe/type").exists() {
        common::skip(
            "sigkilled_probe_on_the_pmu_leaves_nothing",
            "this kernel has no uprobe PMU (4.17 and later have it)",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "probe_fixture.c", &["-O0", "-g"]);
    let bin = bin.to_str().unwrap();
    for (flag, engine) in [
        ("--count", "engine: counters (uprobe PMU)"),
        ("-g", "engine: perf (uprobe PMU)"),
    ] {
        let mut child = rprof()
            .args(["probe", flag, "-x", bin, "func_a", "-d", "60"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let header = read_line(child.stderr.as_mut().unwrap());
        assert!(header.contains(engine), "{flag}: header: {header}");
        let pid = child.id();
        assert_eq!(
            rprof_uprobes(pid),
            Vec::<String>::new(),
            "{flag}: PMU probes are not in uprobe_events"
        );
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(
            rprof_uprobes(pid),
            Vec::<String>::new(),
            "{flag}: uprobe_events right after the SIGKILL"
        );
    }
}

/// Check that a recording at a tracepoint (`-e sched:sched_switch -a -g`) SIGKILLed once it holds switches
/// is read by `rprof report` with the one unfinished warning, by `rprof script` with every hit named
/// sched:sched_switch, and by `perf script` with the same hits and their fields: the tracepoints' formats,
/// which perf writes at the end (HEADER_TRACING_DATA), rprof writes before the records and keeps a feature
/// table pointing to them after the records as it goes.
#[test]
fn sigkilled_tracepoint_record_keeps_its_hits() {
    if !privileged("sigkilled_tracepoint_record_keeps_its_hits") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let killed = dir.path().join("switches.data");
    let mut record = rprof();
    record
        .args(["record", "-e", "sched:sched_switch", "-a", "-g", "-o"])
        .arg(&killed)
        .args(["--", "sleep", "3600"]);
    let mut rec = start_sampling(record);
    // The recorder writes its records 4 times a second: wait until the file holds a few hundred switches.
    let script = |data: &Path| rprof().args(["script", "-i"]).arg(data).output().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::metadata(&killed).map_or(0, |m| m.len()) < 64 << 10 && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    rec.kill().unwrap();
    rec.wait().unwrap();
    let (samples, lines) = report(&killed);
    assert_one_unfinished_warning(&lines, &killed, samples);
    let out = script(&killed);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let hits = text
        .lines()
        .filter(|l| l.contains(" sched:sched_switch:"))
        .count() as u64;
    eprintln!("SIGKILLed tracepoint recording: {samples} samples, {hits} switches in rprof script");
    assert!(samples > 0, "no switch recorded before the SIGKILL");
    assert_eq!(hits, samples, "every sample is a sched:sched_switch hit");
    if !common::perf_tool("sigkilled_tracepoint_record_keeps_its_hits (perf script part)") {
        return;
    }
    let out = Command::new("perf")
        .args(["script", "-i"])
        .arg(&killed)
        .output()
        .unwrap();
    let perf = String::from_utf8_lossy(&out.stdout);
    let perf_hits = perf
        .lines()
        .filter(|l| l.contains(" sched:sched_switch:") && l.contains("next_comm="))
        .count() as u64;
    assert_eq!(
        perf_hits,
        samples,
        "perf script's switches with their fields: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
