//! The stop signals of `rprof record` and `rprof probe`: SIGHUP (a closed terminal), SIGTERM and SIGINT end a
//! session the same way, with a complete recording or a printed report and no probes left behind.
mod common;

use common::{build_c, privileged, rprof, FP};
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use std::os::unix::process::CommandExt;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// How a signal reaches rprof.
#[derive(Clone, Copy, Debug)]
enum Sender {
    /// `kill -SIG PID`: rprof alone.
    Process,
    /// A terminal hangup: the whole process group (rprof and its workload), as when a user closes a terminal.
    Group,
}

fn send(child: &Child, sig: Signal, to: Sender) {
    let pid = Pid::from_raw(child.id() as i32);
    match to {
        Sender::Process => kill(pid, sig).unwrap(),
        Sender::Group => killpg(pid, sig).unwrap(),
    }
}

/// CPU time (user + system, in clock ticks) of rprof's child, the workload, once it runs.
fn workload_ticks(rprof: &Child) -> Option<u64> {
    let children =
        std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", rprof.id())).ok()?;
    let pid: u32 = children.split_whitespace().next()?.parse().ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name (which may hold spaces) in parentheses: utime is the 12th, stime the 13th.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// Wait until rprof announced sampling and its workload has run for `ticks` clock ticks of CPU: that many
/// hundredths of a second of cpu-clock samples are in (the recorder's buffer is flushed at the end).
fn wait_for_samples(child: &mut Child, ticks: u64) {
    let mut stderr = child.stderr.take().unwrap();
    let line = common::read_line(&mut stderr);
    assert!(line.contains("sampling"), "rprof record said: {line}");
    // Keep draining stderr so rprof never blocks on it.
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    let t0 = Instant::now();
    while workload_ticks(child).unwrap_or(0) < ticks {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "the workload did not run ({:?} ticks)",
            workload_ticks(child)
        );
        if let Ok(Some(st)) = child.try_wait() {
            panic!("rprof record ended before the signal: {st}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Check that SIGHUP, SIGTERM and SIGINT during `rprof record -g` (sent to rprof, or to its process group as a
/// terminal hangup does) leave a complete recording whose report shows the fixture's functions.
#[test]
fn record_signals_leave_a_readable_recording() {
    if !privileged("record_signals_leave_a_readable_recording") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "recording_spin.c", FP);
    let cases = [
        (Signal::SIGHUP, Sender::Process),
        (Signal::SIGHUP, Sender::Group),
        (Signal::SIGTERM, Sender::Process),
        (Signal::SIGINT, Sender::Process),
    ];
    for (n, (sig, to)) in cases.into_iter().enumerate() {
        let data = dir.path().join(format!("sig{n}.data"));
        // The fixture spins far longer than the test: the signal ends it.
        let mut child = rprof()
            .args(["record", "-g", "-F", "999", "-o"])
            .arg(&data)
            .args(["--", bin.to_str().unwrap(), "3600000"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        // About 300 samples (0.3 s of CPU at 999 Hz).
        wait_for_samples(&mut child, 30);
        send(&child, sig, to);
        let st = child.wait().unwrap();
        assert!(
            st.code().is_some(),
            "{sig} {to:?}: rprof died of the signal: {st}"
        );
        let out = rprof()
            .args(["report", "--folded", "-i"])
            .arg(&data)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{sig} {to:?}: report failed: {stderr}"
        );
        // A finished file: report reads it without the warning an unfinished (killed) one gets.
        assert!(
            !stderr.contains("warning"),
            "{sig} {to:?}: the recording was not finished: {stderr}"
        );
        // Frame-pointer stacks of the fixture, from main down to the leaf.
        let stacks = text
            .lines()
            .filter(|l| l.contains("main;spin_outer;spin_leaf "))
            .count();
        assert!(
            stacks > 0,
            "{sig} {to:?}: no main;spin_outer;spin_leaf in:\n{text}"
        );
    }
}

/// The probe lines of group `rprof_<pid>` still in uprobe_events.
fn leftover(pid: u32) -> Vec<String> {
    let text = std::fs::read_to_string("/sys/kernel/tracing/uprobe_events").unwrap_or_default();
    let tag = format!(":rprof_{pid}/");
    text.lines()
        .filter(|l| l.contains(&tag))
        .map(str::to_string)
        .collect()
}

/// Check that SIGHUP (to rprof, or to its process group) ends `rprof probe` with its report printed and its
/// probes removed.
#[test]
fn probe_hangup_reports_and_removes_probes() {
    if !privileged("probe_hangup_reports_and_removes_probes") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "probe_fixture.c", &["-O0", "-g"]);
    let bin = bin.to_str().unwrap();
    for to in [Sender::Process, Sender::Group] {
        let mut child = rprof()
            .args(["probe", "-x", bin, "func_a", "--", bin, "wait", "1", "0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = child.id();
        // The fixture prints its pid once it runs under the probes; then wait for a few calls (one per 10 ms).
        let mut stdout = child.stdout.take().unwrap();
        let line = common::read_line(&mut stdout);
        assert!(line.trim().parse::<u32>().is_ok(), "fixture said: {line}");
        assert!(!leftover(pid).is_empty(), "no probes in uprobe_events");
        std::thread::sleep(Duration::from_millis(100));
        send(&child, Signal::SIGHUP, to);
        let mut text = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut text).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.code().is_some(),
            "{to:?}: rprof died of SIGHUP: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let calls = text
            .lines()
            .find_map(|l| l.strip_prefix("func_a "))
            .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok());
        assert!(calls.is_some_and(|c| c > 0), "{to:?}: no report:\n{text}");
        assert_eq!(
            leftover(pid),
            Vec::<String>::new(),
            "{to:?}: SIGHUP left probes"
        );
    }
}

/// How rprof's session with `-- CMD` is ended in [`exit_status_is_the_ended_commands`].
#[derive(Clone, Copy, Debug)]
enum Ending {
    /// `-d 1`: rprof ends the command (SIGTERM).
    Duration,
    /// `kill <rprof>`: SIGTERM to rprof alone, which ends the command with SIGTERM.
    Term,
    /// Ctrl-C at a terminal: SIGINT to the whole process group, the command included.
    Interrupt,
}

/// Run `rprof ARGS -- BIN wait 1 0` (probe_fixture: prints its pid, then calls func_a every 10 ms until
/// killed), end it as `ending` says once the command runs, and return rprof's exit status.
fn exit_status_after(args: &[&str], bin: &str, ending: Ending) -> std::process::ExitStatus {
    let mut cmd = rprof();
    cmd.args(args);
    if let Ending::Duration = ending {
        cmd.args(["-d", "1"]);
    }
    let mut child = cmd
        .args(["--", bin, "wait", "1", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    let mut stdout = child.stdout.take().unwrap();
    let line = common::read_line(&mut stdout);
    assert!(line.trim().parse::<u32>().is_ok(), "fixture said: {line}");
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    std::thread::sleep(Duration::from_millis(200));
    match ending {
        Ending::Duration => {}
        Ending::Term => send(&child, Signal::SIGTERM, Sender::Process),
        Ending::Interrupt => send(&child, Signal::SIGINT, Sender::Group),
    }
    child.wait().unwrap()
}

/// Check issue 30's bar: with `-- CMD`, `rprof record` and `rprof probe` exit with the status of the command
/// they ended, as perf does: 143 (SIGTERM) after `-d` and after `kill <rprof>`, 130 (SIGINT) after a Ctrl-C
/// at the terminal (SIGINT to the process group).
#[test]
fn exit_status_is_the_ended_commands() {
    if !privileged("exit_status_is_the_ended_commands") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "probe_fixture.c", &["-O0", "-g"]);
    let bin = bin.to_str().unwrap();
    let data = dir.path().join("exit.data");
    let record = ["record", "-q", "-F", "99", "-o", data.to_str().unwrap()];
    let probe = ["probe", "-x", bin, "func_a"];
    for (tool, args) in [("record", &record[..]), ("probe", &probe[..])] {
        for (ending, code) in [
            (Ending::Duration, 143),
            (Ending::Term, 143),
            (Ending::Interrupt, 130),
        ] {
            let st = exit_status_after(args, bin, ending);
            assert_eq!(
                st.code(),
                Some(code),
                "rprof {tool} ended by {ending:?}: {st}"
            );
        }
    }
}
