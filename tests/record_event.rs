//! `rprof record -e EVENT`: recordings at probe points, tracepoints and syscalls, read by rprof and by perf.
mod common;
use common::*;

/// The number of calls the fixture printed (`calls N` on its stdout, which rprof record passes on).
fn calls(stdout: &str) -> u64 {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("calls "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no 'calls N' in {stdout}"))
}

/// `perf script`'s samples: (header line, frames' symbols leaf first).
fn perf_script_samples(data: &str, fields: Option<&str>) -> Vec<(String, Vec<String>)> {
    let mut cmd = std::process::Command::new("perf");
    cmd.args(["script", "-i", data]);
    if let Some(f) = fields {
        cmd.args(["-F", f]);
    }
    let out = cmd.output().expect("run perf script");
    assert!(
        out.status.success(),
        "perf script failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut samples = Vec::new();
    for block in text.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let mut lines = block.lines().filter(|l| !l.trim().is_empty());
        let head = lines.next().unwrap_or_default().to_string();
        let frames = lines
            .filter_map(|l| l.split_whitespace().nth(1))
            .map(|s| s.split('+').next().unwrap_or(s).to_string())
            .collect();
        samples.push((head, frames));
    }
    samples
}

/// The bar of issue 32: `record -e u:BIN:func_d -g -- BIN` gives one sample per call of func_d, each in func_d
/// under func_c, func_b, func_a and main, in rprof's report and in perf script alike.
#[test]
fn probe_point_sample_per_call_with_callers() {
    if !privileged("probe_point_sample_per_call_with_callers")
        || !perf_tool("probe_point_sample_per_call_with_callers")
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "record_event.c", FP);
    let bin = bin.to_str().unwrap();
    let data = dir.path().join("probe.data");
    let data = data.to_str().unwrap();
    let event = format!("u:{bin}:func_d");
    let out = rprof_ok(&[
        "record", "-q", "-o", data, "-e", &event, "-g", "--", bin, "300",
    ]);
    let n = calls(&out);
    assert!(n >= 30, "too few calls: {n}");
    let folded = rprof_ok(&["report", "-i", data, "--folded"]);
    let stacks = parse_folded(&folded);
    let total: u64 = stacks.iter().map(|s| s.1).sum();
    assert_eq!(total, n, "samples != calls of func_d\n{folded}");
    for (frames, count) in &stacks {
        assert!(
            frames.last().map(String::as_str) == Some("func_d")
                && contains_run(frames, &["main", "func_a", "func_b", "func_c", "func_d"]),
            "{count} samples at {frames:?}, not main;func_a;func_b;func_c;func_d\n{folded}"
        );
    }
    let samples = perf_script_samples(data, None);
    assert_eq!(samples.len() as u64, n, "perf script's samples != calls");
    for (head, frames) in &samples {
        assert!(head.contains("probe_record_event:func_d"), "{head}");
        assert_eq!(
            frames.get(..5).map(|f| f.to_vec()),
            Some(
                ["func_d", "func_c", "func_b", "func_a", "main"]
                    .map(String::from)
                    .to_vec()
            ),
            "perf script's stack at {head}"
        );
    }
    // The probe lived as long as the recording.
    let left = std::fs::read_to_string("/sys/kernel/tracing/uprobe_events").unwrap_or_default();
    assert!(!left.contains("func_d"), "probe left behind: {left}");
}

/// Check that the same works with DWARF unwinding (`--call-graph dwarf`), read by perf script.
#[test]
fn probe_point_with_dwarf_stacks() {
    if !privileged("probe_point_with_dwarf_stacks") || !perf_tool("probe_point_with_dwarf_stacks") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(
        dir.path(),
        "record_event.c",
        &["-O1", "-g", "-fomit-frame-pointer"],
    );
    let bin = bin.to_str().unwrap();
    let data = dir.path().join("dwarf.data");
    let data = data.to_str().unwrap();
    let event = format!("u:{bin}:func_d");
    let out = rprof_ok(&[
        "record",
        "-q",
        "-o",
        data,
        "-e",
        &event,
        "--call-graph",
        "dwarf",
        "--",
        bin,
        "200",
    ]);
    let n = calls(&out);
    let samples = perf_script_samples(data, None);
    assert_eq!(samples.len() as u64, n, "perf script's samples != calls");
    let whole = samples
        .iter()
        .filter(|(_, f)| {
            f.get(..5)
                == Some(&["func_d", "func_c", "func_b", "func_a", "main"].map(String::from)[..])
        })
        .count();
    assert_eq!(
        whole,
        samples.len(),
        "stacks without all callers: {:?}",
        samples.first()
    );
}

/// `-e sched:sched_switch -a -g`: switches with their fields (perf script prints them from the recording's
/// tracing data) and stacks.
#[test]
fn tracepoint_system_wide_with_fields() {
    if !privileged("tracepoint_system_wide_with_fields")
        || !perf_tool("tracepoint_system_wide_with_fields")
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("switch.data");
    let data = data.to_str().unwrap();
    rprof_ok(&[
        "record",
        "-q",
        "-o",
        data,
        "-e",
        "sched:sched_switch",
        "-a",
        "-g",
        "--",
        "sleep",
        "0.3",
    ]);
    let samples = perf_script_samples(data, None);
    let sleeps: Vec<&(String, Vec<String>)> = samples
        .iter()
        .filter(|(h, _)| h.contains("sched:sched_switch:") && h.contains("prev_comm=sleep"))
        .collect();
    assert!(
        !sleeps.is_empty(),
        "no switch of sleep: {:?}",
        samples.first()
    );
    for (head, frames) in &sleeps {
        assert!(head.contains("next_comm="), "no fields: {head}");
        assert!(
            frames.iter().any(|f| f == "schedule" || f == "__schedule"),
            "stack of {head}: {frames:?}"
        );
    }
    let script = rprof_ok(&["script", "-i", data]);
    assert!(
        script.contains("sched:sched_switch"),
        "rprof script: {}",
        &script[..script.len().min(2000)]
    );
}

/// `-e syscalls:sys_enter_openat --filter 'flags == 0'`: the kernel keeps the fixture's plain opens only,
/// one per call (the loader's opens have O_CLOEXEC), counted exactly.
#[test]
fn syscall_tracepoint_with_filter_counts_exactly() {
    if !privileged("syscall_tracepoint_with_filter_counts_exactly") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "record_event.c", FP);
    let bin = bin.to_str().unwrap();
    let data = dir.path().join("openat.data");
    let data = data.to_str().unwrap();
    let out = rprof_ok(&[
        "record",
        "-q",
        "-o",
        data,
        "-e",
        "syscalls:sys_enter_openat",
        "--filter",
        "flags == 0",
        "--",
        bin,
        "100",
        "/nonexistent/rprof-record-event",
    ]);
    let n = calls(&out);
    let folded = rprof_ok(&["report", "-i", data, "--folded"]);
    let total: u64 = parse_folded(&folded).iter().map(|s| s.1).sum();
    assert_eq!(total, n, "openat samples != opens\n{folded}");
}

/// A kernel function where the kernel has no kprobes: an error that says so.
#[test]
fn kprobe_without_kprobes_says_so() {
    if !privileged("kprobe_without_kprobes_says_so") {
        return;
    }
    if std::path::Path::new("/sys/kernel/tracing/kprobe_events").exists() {
        skip("kprobe_without_kprobes_says_so", "this kernel has kprobes");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("k.data");
    let out = rprof()
        .args([
            "record",
            "-q",
            "-o",
            data.to_str().unwrap(),
            "-e",
            "kprobe:vfs_read",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("no kprobes"), "{err}");
}
