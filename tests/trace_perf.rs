//! `rprof trace` as perf trace: `--duration MSEC` shows only the calls longer than it, `-s` prints perf
//! trace -s's summary (calls, errors, times per syscall), `-e` takes one list of syscalls (names, globs, `!`)
//! and tracepoints; each against perf trace on the same fixture.
mod common;
use common::*;
use std::process::Command;

/// Run perf trace with `args` on one CPU; returns its standard error (where perf trace writes).
///
/// perf trace pairs each syscall's entry with its exit from per-CPU rings, and when the traced command moves
/// to another CPU in the middle of a burst it drops a call or a few: 20 unpinned runs of `trace_slow 200 1 3`
/// counted 397-400 of its 400 getppid calls (`--sort-events` did no better), 20 on one CPU all 400. So the
/// peer runs on the first CPU this test may use, its command with it; rprof's runs are not pinned, and their
/// counts are asserted exact.
fn perf_trace(args: &[&str]) -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let allowed = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .expect("Cpus_allowed_list in /proc/self/status");
    let cpu = allowed.trim().split([',', '-']).next().unwrap();
    let out = Command::new("taskset")
        .args(["-c", cpu, "perf", "trace"])
        .args(args)
        .output()
        .expect("run taskset perf trace");
    assert!(
        out.status.success(),
        "perf trace {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The call lines of a trace (`MS ( DUR ms): COMM/TID NAME(...) = RET`): (name, duration in ms).
fn calls(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter_map(|l| {
            let (head, call) = l.split_once("): ")?;
            let dur = head
                .split_once('(')?
                .1
                .trim()
                .strip_suffix(" ms")?
                .trim()
                .parse()
                .ok()?;
            let name = call.split_once(' ')?.1.split_once('(')?.0.to_string();
            Some((name, dur))
        })
        .collect()
}

/// `trace --duration 1` of 400 getppid calls around one 50 ms nanosleep shows that call alone, as perf trace
/// --duration 1 does on the same command.
#[test]
fn duration_shows_only_slow_calls() {
    if !privileged("duration_shows_only_slow_calls") || !perf_tool("duration_shows_only_slow_calls")
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "trace_slow.c", &["-O1"]);
    let bin = bin.to_str().unwrap();
    let filter = [
        "-e",
        "getppid,clock_nanosleep,nanosleep",
        "--duration",
        "1",
        "--",
    ];
    let mut args = vec!["trace"];
    args.extend(filter);
    args.extend([bin, "200", "50", "3"]);
    let (stdout, ours) = rprof_ok_stderr(&args);
    assert!(
        !stdout.contains("): "),
        "trace lines on standard output: {stdout}"
    );
    let theirs = perf_trace(&[&filter[..], &[bin, "200", "50", "3"]].concat());
    for (who, text) in [("rprof", &ours), ("perf", &theirs)] {
        let c = calls(text);
        assert_eq!(c.len(), 1, "{who}: one call over 1 ms:\n{text}");
        assert!(
            c[0].0.contains("nanosleep") && c[0].1 >= 50.0,
            "{who}: {c:?}"
        );
    }
    // Without the filter: every call, the 400 getppid among them.
    let (_, all) = rprof_ok_stderr(&["trace", "-e", "getppid", "--", bin, "200", "50", "3"]);
    assert_eq!(
        calls(&all).iter().filter(|c| c.0 == "getppid").count(),
        400,
        "{all}"
    );
}

/// A row of perf trace -s's table: (calls, errors) of `syscall`.
fn summary_row(text: &str, syscall: &str) -> Option<(u64, u64)> {
    text.lines().find_map(|l| {
        let cells: Vec<&str> = l.split_whitespace().collect();
        match cells.as_slice() {
            [name, calls, errors, ..] if *name == syscall => {
                Some((calls.parse().ok()?, errors.parse().ok()?))
            }
            _ => None,
        }
    })
}

/// `trace -s` prints perf trace -s's header and columns, with the same calls and errors per syscall as perf
/// trace -s on the same command (3 failing close calls among them).
#[test]
fn summary_as_perf_trace() {
    if !privileged("summary_as_perf_trace") || !perf_tool("summary_as_perf_trace") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "trace_slow.c", &["-O1"]);
    let bin = bin.to_str().unwrap();
    let (_, ours) = rprof_ok_stderr(&["trace", "-s", "--", bin, "200", "1", "3"]);
    let theirs = perf_trace(&["-s", "--", bin, "200", "1", "3"]);
    let header =
        "   syscall            calls  errors  total       min       avg       max       stddev";
    for text in [&ours, &theirs] {
        assert!(text.contains(" Summary of events:"), "{text}");
        assert!(text.lines().any(|l| l == header), "{text}");
        assert!(text.contains(" trace_slow ("), "{text}");
    }
    assert_eq!(summary_row(&ours, "getppid"), Some((400, 0)), "{ours}");
    for syscall in [
        "getppid",
        "close",
        "nanosleep",
        "clock_nanosleep",
        "mmap",
        "openat",
        "write",
    ] {
        assert_eq!(
            summary_row(&ours, syscall),
            summary_row(&theirs, syscall),
            "{syscall}:\nrprof:\n{ours}\nperf:\n{theirs}"
        );
    }
    let (calls, errors) = summary_row(&ours, "close").unwrap();
    assert!(calls >= 3 && errors == 3, "{ours}");
}

/// The tracepoint hits of a trace (`... COMM/TID CATEGORY:EVENT(field: value, ...)`): the event and its
/// fields, each value's first word (perf trace adds the comm after a pid: `pid: 17062 (true)`).
fn tracepoint_hits(text: &str) -> Vec<(String, Vec<(String, String)>)> {
    text.lines()
        .filter_map(|l| {
            let (_, hit) = l.split_once(" sched:")?;
            let (event, args) = hit.split_once('(')?;
            let fields = args
                .trim_end()
                .strip_suffix(')')?
                .split(", ")
                .filter_map(|f| {
                    let (k, v) = f.split_once(": ")?;
                    Some((k.to_string(), v.split_whitespace().next()?.to_string()))
                })
                .collect();
            Some((format!("sched:{event}"), fields))
        })
        .collect()
}

/// `trace --no-syscalls --event` takes the event layer's list (a comma list, a glob in the category) and
/// shows the command's tracepoint hits with their fields, as perf trace -e shows them on the same command:
/// the same events in the same order, the same field names, the same values but for the pids.
#[test]
fn tracepoints_of_the_event_layer_as_perf_trace() {
    const TEST: &str = "tracepoints_of_the_event_layer_as_perf_trace";
    if !privileged(TEST) || !perf_tool(TEST) {
        return;
    }
    let ours = rprof_ok_stderr(&[
        "trace",
        "--no-syscalls",
        "--event",
        "sched:sched_process_exec,*:sched_process_exit",
        "--",
        "/bin/true",
    ])
    .1;
    let theirs = perf_trace(&[
        "--no-syscalls",
        "-e",
        "sched:sched_process_exec,sched:sched_process_exit",
        "--",
        "/bin/true",
    ]);
    let (o, t) = (tracepoint_hits(&ours), tracepoint_hits(&theirs));
    let events = |h: &[(String, Vec<(String, String)>)]| -> Vec<String> {
        h.iter().map(|(e, _)| e.clone()).collect()
    };
    assert_eq!(
        events(&o),
        ["sched:sched_process_exec", "sched:sched_process_exit"],
        "{ours}"
    );
    assert_eq!(events(&o), events(&t), "rprof:\n{ours}\nperf:\n{theirs}");
    for ((_, a), (_, b)) in o.iter().zip(&t) {
        let names =
            |f: &[(String, String)]| -> Vec<String> { f.iter().map(|x| x.0.clone()).collect() };
        assert_eq!(names(a), names(b), "rprof:\n{ours}\nperf:\n{theirs}");
        for ((k, x), (_, y)) in a.iter().zip(b) {
            if !k.contains("pid") {
                assert_eq!(x, y, "{k}: rprof:\n{ours}\nperf:\n{theirs}");
            }
        }
    }
}

/// How many call lines of each syscall a trace has (execve left out: perf trace shows the command's as
/// `[continued]`, without a duration).
fn call_counts(text: &str) -> std::collections::BTreeMap<String, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for (name, _) in calls(text).into_iter().filter(|c| c.0 != "execve") {
        *counts.entry(name).or_insert(0) += 1;
    }
    counts
}

/// The events of a trace's tracepoint hits, in order.
fn hit_events(text: &str) -> Vec<String> {
    tracepoint_hits(text).into_iter().map(|h| h.0).collect()
}

/// `trace -e` takes perf trace's one list of syscalls (a name, a glob) and tracepoints: on the same command,
/// rprof and perf trace show the same calls of the syscalls named (400 getppid, the failing closes among the
/// loader's) and nothing else, and the tracepoint's one hit.
#[test]
fn mixed_list_as_perf_trace() {
    const TEST: &str = "mixed_list_as_perf_trace";
    if !privileged(TEST) || !perf_tool(TEST) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "trace_slow.c", &["-O1"]);
    let bin = bin.to_str().unwrap();
    let list = "getpp*,close,sched:sched_process_exit";
    let (_, ours) = rprof_ok_stderr(&["trace", "-e", list, "--", bin, "200", "1", "3"]);
    let theirs = perf_trace(&["-e", list, "--", bin, "200", "1", "3"]);
    let (o, t) = (call_counts(&ours), call_counts(&theirs));
    assert_eq!(o.keys().collect::<Vec<_>>(), ["close", "getppid"], "{ours}");
    assert_eq!(o["getppid"], 400, "{ours}");
    assert!(o["close"] >= 3, "{ours}");
    assert_eq!(o, t, "rprof:\n{ours}\nperf:\n{theirs}");
    for (who, text) in [("rprof", &ours), ("perf", &theirs)] {
        assert_eq!(
            hit_events(text),
            ["sched:sched_process_exit"],
            "{who}:\n{text}"
        );
    }
    // A list of tracepoints alone shows no syscalls, as perf trace's.
    let (_, ours) = rprof_ok_stderr(&[
        "trace",
        "-e",
        "sched:sched_process_exit",
        "--",
        bin,
        "2",
        "1",
        "1",
    ]);
    let theirs = perf_trace(&["-e", "sched:sched_process_exit", "--", bin, "2", "1", "1"]);
    for (who, text) in [("rprof", &ours), ("perf", &theirs)] {
        assert!(call_counts(text).is_empty(), "{who}:\n{text}");
        assert_eq!(
            hit_events(text),
            ["sched:sched_process_exit"],
            "{who}:\n{text}"
        );
    }
}

/// `trace -e '!A,B*,TRACEPOINT'` shows every syscall but those named, and the tracepoint, as perf trace does:
/// on the same command the same calls of every other syscall, none of those named.
#[test]
fn negated_list_as_perf_trace() {
    const TEST: &str = "negated_list_as_perf_trace";
    if !privileged(TEST) || !perf_tool(TEST) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "trace_slow.c", &["-O1"]);
    let bin = bin.to_str().unwrap();
    let list = "!getppid,*nanosleep,sched:sched_process_exit";
    let (_, ours) = rprof_ok_stderr(&["trace", "-e", list, "--", bin, "200", "1", "3"]);
    let theirs = perf_trace(&["-e", list, "--", bin, "200", "1", "3"]);
    let (o, t) = (call_counts(&ours), call_counts(&theirs));
    for name in ["getppid", "nanosleep", "clock_nanosleep"] {
        assert!(!o.contains_key(name), "{name} in rprof's:\n{ours}");
    }
    assert!(o.get("close").is_some_and(|&n| n >= 3), "{ours}");
    assert!(o.contains_key("mmap"), "{ours}");
    assert_eq!(o, t, "rprof:\n{ours}\nperf:\n{theirs}");
    for (who, text) in [("rprof", &ours), ("perf", &theirs)] {
        assert_eq!(
            hit_events(text),
            ["sched:sched_process_exit"],
            "{who}:\n{text}"
        );
    }
}

/// `trace -e file` takes perf trace's strace group (`/usr/share/perf-core/strace/groups/file`, installed with
/// perf): on the same command, rprof and perf trace show the same calls of the group's syscalls (the loader's
/// opens and reads, cat's open of the test's file), and nothing else.
#[test]
fn strace_group_as_perf_trace() {
    const TEST: &str = "strace_group_as_perf_trace";
    if !privileged(TEST) || !perf_tool(TEST) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("empty");
    std::fs::write(&file, "").unwrap();
    let file = file.to_str().unwrap();
    let (_, ours) = rprof_ok_stderr(&["trace", "-e", "file", "--", "/bin/cat", file]);
    let theirs = perf_trace(&["-e", "file", "--", "/bin/cat", file]);
    let (o, t) = (call_counts(&ours), call_counts(&theirs));
    assert!(o.get("openat").is_some_and(|&n| n >= 2), "{ours}");
    assert!(o.contains_key("read"), "{ours}");
    let group = std::fs::read_to_string("/usr/share/perf-core/strace/groups/file").unwrap();
    let members: Vec<&str> = group.lines().map(str::trim).collect();
    for name in o.keys() {
        assert!(
            members.contains(&name.as_str()),
            "{name} is not in the file group:\n{ours}"
        );
    }
    assert_eq!(o, t, "rprof:\n{ours}\nperf:\n{theirs}");
}
