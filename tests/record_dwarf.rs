//! End-to-end proof of `rprof record --call-graph dwarf[,SIZE]` (issue #3): programs built without frame
//! pointers are recorded with the real `rprof` binary and their stacks, read back with `rprof report --folded`
//! (and with `perf`), must reach `main` through the right frames.
mod common;
use common::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Optimized, without frame pointers: only CFI can unwind these.
const NO_FP: &[&str] = &["-O2", "-fomit-frame-pointer"];

/// Record `exe args` into `dir/name` with the given call-graph flags; returns (path, rprof's stderr).
fn record(
    dir: &Path,
    name: &str,
    call_graph: &[&str],
    exe: &Path,
    args: &[&str],
) -> (String, String) {
    let data = dir.join(name).to_str().unwrap().to_string();
    let mut all = vec!["record", "-F", "999", "-o", &data];
    all.extend_from_slice(call_graph);
    all.push("--");
    all.push(exe.to_str().unwrap());
    all.extend_from_slice(args);
    let (_, stderr) = rprof_ok_stderr(&all);
    (data, stderr)
}

/// `rprof report --folded` of the samples of command `comm`.
fn folded(data: &str, comm: &str) -> (String, Vec<(Vec<String>, u64)>) {
    let text = rprof_ok(&["report", "-i", data, "--folded", "--comm", comm]);
    let stacks = parse_folded(&text);
    (text, stacks)
}

fn has(frames: &[String], name: &str) -> bool {
    frames.iter().any(|f| f == name)
}

/// Position of the first frame satisfying `pred`.
fn pos(frames: &[String], pred: impl Fn(&str) -> bool) -> Option<usize> {
    frames.iter().position(|f| pred(f))
}

/// Check that the -O2 -fomit-frame-pointer call tree unwinds fully under `--call-graph dwarf` (>= 95% of the
/// samples in `hot_a` carry `main;work_a;hot_a`), while the same binary under `-g` (frame pointers) does not.
#[test]
fn calltree_without_frame_pointers_dwarf_vs_fp() {
    if !privileged("calltree_without_frame_pointers_dwarf_vs_fp") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "dw_calltree.c", NO_FP);
    let chain = ["main", "work_a", "hot_a"];
    let in_hot_a = |f: &[String]| has(f, "hot_a");
    let full = |f: &[String]| contains_run(f, &chain);

    let (dw, stderr) = record(
        dir.path(),
        "dw.data",
        &["--call-graph", "dwarf"],
        &bin,
        &["600"],
    );
    let (text, stacks) = folded(&dw, "dw_calltree");
    let (dw_share, dw_n) = share_of(&stacks, in_hot_a, full);

    let (fp, _) = record(dir.path(), "fp.data", &["-g"], &bin, &["600"]);
    let (fp_text, fp_stacks) = folded(&fp, "dw_calltree");
    let (fp_share, fp_n) = share_of(&fp_stacks, in_hot_a, full);

    eprintln!(
        "dwarf: {dw_n} hot_a samples, {:.1}% with main;work_a;hot_a | fp (-g): {fp_n} hot_a samples, {:.1}%",
        dw_share * 100.0,
        fp_share * 100.0
    );
    assert!(
        dw_n >= 100,
        "too few hot_a samples ({dw_n}):\n{stderr}\n{text}"
    );
    assert!(
        dw_share >= 0.95,
        "only {:.1}% of hot_a samples reach main under dwarf:\n{stderr}\n{text}",
        dw_share * 100.0
    );
    assert!(
        fp_n >= 100,
        "too few hot_a samples under -g ({fp_n}):\n{fp_text}"
    );
    assert!(
        fp_share <= 0.5 && dw_share - fp_share >= 0.45,
        "frame pointers should not unwind this binary, yet {:.1}% of hot_a samples reach main:\n{fp_text}",
        fp_share * 100.0
    );
    // hot_b is unwound as well, and never confused with hot_a's path.
    assert!(
        stacks
            .iter()
            .filter(|(f, _)| has(f, "hot_b"))
            .all(|(f, _)| !has(f, "work_a")),
        "hot_b under work_a:\n{text}"
    );
}

/// Check that a stack through glibc's qsort (no frame pointers) unwinds through libc's frames up to `main`:
/// >= 90% of the samples in the `compare` callback show main -> (libc qsort frames) -> compare.
#[test]
fn qsort_callback_through_libc() {
    if !privileged("qsort_callback_through_libc") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "dw_qsort.c", NO_FP);
    let (dw, stderr) = record(
        dir.path(),
        "qs.data",
        &["--call-graph", "dwarf"],
        &bin,
        &["500"],
    );
    let (text, stacks) = folded(&dw, "dw_qsort");
    let through_libc = |f: &[String]| {
        let (Some(m), Some(c)) = (pos(f, |s| s == "main"), pos(f, |s| s == "compare")) else {
            return false;
        };
        // main calls qsort directly, and the frames between are libc's sorting code.
        m + 2 <= c
            && f[m + 1].contains("qsort")
            && f[m + 1..c]
                .iter()
                .all(|s| s.contains("qsort") || s.contains("msort"))
    };
    let (share, n) = share_of(&stacks, |f| has(f, "compare"), through_libc);
    eprintln!(
        "qsort: {n} compare samples, {:.1}% main -> qsort -> ... -> compare",
        share * 100.0
    );
    assert!(n >= 100, "too few compare samples ({n}):\n{stderr}\n{text}");
    assert!(
        share >= 0.90,
        "only {:.1}% of compare samples unwind through libc to main:\n{stderr}\n{text}",
        share * 100.0
    );
}

/// The name of a Rust function without generic arguments (`a::b::<T>` -> `a::b`).
fn base(name: &str) -> &str {
    name.split_once("::<").map_or(name, |(b, _)| b)
}

/// Check that a Rust release build without frame pointers (generic functions a few levels deep) unwinds to the
/// crate's `main` with demangled names: >= 90% of the samples in `spin` show main -> run -> outer -> inner -> spin.
#[test]
fn rust_release_generics() {
    if !privileged("rust_release_generics") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_rust(
        dir.path(),
        "dw_generic.rs",
        &["-C", "opt-level=3", "-C", "force-frame-pointers=no"],
    );
    let (dw, stderr) = record(
        dir.path(),
        "rs.data",
        &["--call-graph", "dwarf"],
        &bin,
        &["500"],
    );
    let (text, stacks) = folded(&dw, "dw_generic");
    let chain = [
        "dw_generic::main",
        "dw_generic::run",
        "dw_generic::outer",
        "dw_generic::inner",
        "dw_generic::spin",
    ];
    let in_spin = |f: &[String]| f.iter().any(|s| base(s) == "dw_generic::spin");
    let full = |f: &[String]| {
        let names: Vec<String> = f.iter().map(|s| base(s).to_string()).collect();
        contains_run(&names, &chain) && has(f, "main")
    };
    let (share, n) = share_of(&stacks, in_spin, full);
    eprintln!(
        "rust: {n} spin samples, {:.1}% reach dw_generic::main",
        share * 100.0
    );
    assert!(n >= 100, "too few spin samples ({n}):\n{stderr}\n{text}");
    assert!(
        share >= 0.90,
        "only {:.1}% of spin samples unwind to dw_generic::main:\n{stderr}\n{text}",
        share * 100.0
    );
    // Demangled: no mangled symbol or hash suffix (`::h` and 16 hex digits) left in the crate's frames (only
    // those: a stray sample may land in std's `hash::` code or in the kernel).
    let hash_suffix = |f: &str| {
        f.rsplit_once("::h")
            .is_some_and(|(_, h)| h.len() == 16 && h.chars().all(|c| c.is_ascii_hexdigit()))
    };
    for (frames, _) in &stacks {
        for f in frames.iter().filter(|f| f.contains("dw_generic")) {
            assert!(
                !f.starts_with("_ZN") && !f.starts_with("_R") && !hash_suffix(f),
                "not demangled: {f}"
            );
        }
    }
}

/// Check that in a write() loop (-O2 -fomit-frame-pointer) DWARF mode shows the kernel's ksys_write/vfs_write
/// over user frames that reach main through write_many, which frame pointers cannot recover.
#[test]
fn kernel_over_user_frames() {
    if !privileged("kernel_over_user_frames") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "writeloop.c", NO_FP);
    let in_write = |f: &[String]| has(f, "ksys_write") || has(f, "vfs_write");
    let full = |f: &[String]| {
        let (Some(w), Some(k)) = (
            pos(f, |s| s == "write_many"),
            pos(f, |s| s == "ksys_write" || s == "vfs_write"),
        ) else {
            return false;
        };
        contains_run(f, &["main", "write_many"]) && w < k
    };
    let (dw, stderr) = record(
        dir.path(),
        "wl.data",
        &["--call-graph", "dwarf"],
        &bin,
        &["1000"],
    );
    let (text, stacks) = folded(&dw, "writeloop");
    let (share, n) = share_of(&stacks, in_write, full);

    let (fp, _) = record(dir.path(), "fp.data", &["-g"], &bin, &["1000"]);
    let (fp_text, fp_stacks) = folded(&fp, "writeloop");
    let (fp_share, fp_n) = share_of(&fp_stacks, in_write, full);
    eprintln!(
        "writeloop: dwarf {n} samples in ksys_write/vfs_write, {:.1}% under main;write_many | fp {fp_n}, {:.1}%",
        share * 100.0,
        fp_share * 100.0
    );
    assert!(
        n >= 30,
        "too few samples in ksys_write/vfs_write ({n}):\n{stderr}\n{text}"
    );
    assert!(
        share >= 0.90,
        "only {:.1}% of kernel write samples sit over main;write_many:\n{stderr}\n{text}",
        share * 100.0
    );
    assert!(
        fp_n >= 30,
        "too few kernel write samples under -g ({fp_n}):\n{fp_text}"
    );
    assert!(
        fp_share <= 0.5,
        "frame pointers recovered write_many in {:.1}% of kernel samples; the fixture no longer proves the point:\n{fp_text}",
        fp_share * 100.0
    );
}

/// Fold `perf script -F comm,ip,sym` output: one (frames leaf first, comm) per sample.
fn perf_script_stacks(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        let mut lines = block.lines().filter(|l| !l.trim().is_empty());
        let Some(head) = lines.next() else { continue };
        let frames = lines
            .map(|l| {
                let mut it = l.split_whitespace();
                it.next(); // address
                it.collect::<Vec<_>>().join(" ")
            })
            .collect();
        out.push((head.trim().to_string(), frames));
    }
    out
}

/// The `[.] SYMBOL` entry of `perf report --stdio --no-children -G`: its percentage and the frames of its
/// call graph (outermost first).
fn perf_report_entry(text: &str, symbol: &str) -> Option<(f64, Vec<String>)> {
    let mut lines = text.lines();
    let pct = lines.by_ref().find_map(|l| {
        let cols: Vec<&str> = l.split_whitespace().collect();
        (cols.len() >= 5 && cols[cols.len() - 2] == "[.]" && cols[cols.len() - 1] == symbol)
            .then(|| cols[0].trim_end_matches('%').parse::<f64>().ok())?
    })?;
    let frames = lines
        .take_while(|l| !l.trim().is_empty())
        .map(|l| {
            l.trim()
                .trim_start_matches(['|', '-'])
                .rsplit("--")
                .next()
                .unwrap_or("")
                .trim()
                .to_string()
        })
        .filter(|s| !s.is_empty())
        .collect();
    Some((pct, frames))
}

/// Check that `perf report` and `perf script` read the DWARF-mode recording and see the same stacks as
/// `rprof report`: the chain hot_a <- work_a <- main is there, with a share within 2 points of rprof's.
#[test]
fn perf_reads_dwarf_recording() {
    if !privileged("perf_reads_dwarf_recording") || !perf_tool("perf_reads_dwarf_recording") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "dw_calltree.c", NO_FP);
    let (dw, _) = record(
        dir.path(),
        "dw.data",
        &["--call-graph", "dwarf"],
        &bin,
        &["600"],
    );

    // rprof: share of all samples whose stack ends in main;work_a;hot_a (leaf hot_a).
    let text = rprof_ok(&["report", "-i", &dw, "--folded"]);
    let stacks = parse_folded(&text);
    let total: u64 = stacks.iter().map(|s| s.1).sum();
    let ends_in = |f: &[String]| f.ends_with(&["main".into(), "work_a".into(), "hot_a".into()]);
    let rprof_chain: u64 = stacks.iter().filter(|(f, _)| ends_in(f)).map(|s| s.1).sum();
    let rprof_self: u64 = stacks
        .iter()
        .filter(|(f, _)| f.last().map(String::as_str) == Some("hot_a"))
        .map(|s| s.1)
        .sum();
    let rprof_chain_pct = rprof_chain as f64 * 100.0 / total.max(1) as f64;
    let rprof_self_pct = rprof_self as f64 * 100.0 / total.max(1) as f64;

    // perf script, folded here.
    let out = Command::new("perf")
        .args(["script", "-F", "comm,ip,sym", "-i", &dw])
        .stderr(Stdio::piped())
        .output()
        .expect("run perf script");
    let script = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "perf script failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let samples = perf_script_stacks(&script);
    let perf_chain = samples
        .iter()
        .filter(|(_, f)| f.len() >= 3 && f[0] == "hot_a" && f[1] == "work_a" && f[2] == "main")
        .count();
    let perf_chain_pct = perf_chain as f64 * 100.0 / samples.len().max(1) as f64;

    // perf report's own call graph.
    let out = Command::new("perf")
        .args(["report", "--stdio", "--no-children", "-G", "-i", &dw])
        .stderr(Stdio::piped())
        .output()
        .expect("run perf report");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "perf report failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (perf_self_pct, perf_frames) = perf_report_entry(&report, "hot_a")
        .unwrap_or_else(|| panic!("no hot_a entry in perf report:\n{report}"));

    eprintln!(
        "rprof: {total} samples, main;work_a;hot_a {rprof_chain_pct:.2}%, hot_a self {rprof_self_pct:.2}% | \
         perf script: {} samples, chain {perf_chain_pct:.2}% | perf report: hot_a {perf_self_pct:.2}%, graph {:?}",
        samples.len(),
        perf_frames
    );
    assert!(total >= 200, "too few samples ({total}):\n{text}");
    assert!(
        rprof_chain_pct >= 50.0,
        "rprof: main;work_a;hot_a only {rprof_chain_pct:.1}%:\n{text}"
    );
    assert!(
        (perf_chain_pct - rprof_chain_pct).abs() <= 2.0,
        "perf script sees hot_a <- work_a <- main in {perf_chain_pct:.2}% of samples, rprof in {rprof_chain_pct:.2}%"
    );
    assert!(
        (perf_self_pct - rprof_self_pct).abs() <= 2.0,
        "perf report puts {perf_self_pct:.2}% in hot_a, rprof {rprof_self_pct:.2}%"
    );
    assert!(
        contains_run(&perf_frames, &["main", "work_a", "hot_a"]),
        "perf report's call graph for hot_a lacks main -> work_a -> hot_a: {perf_frames:?}\n{report}"
    );
}

/// Check that a deep recursion recorded with `--call-graph dwarf,1024` ends with the summary line telling that
/// stacks were truncated and advising a larger copy (dwarf,65528).
#[test]
fn small_stack_copy_advises_larger_size() {
    if !privileged("small_stack_copy_advises_larger_size") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "dw_recurse.c", NO_FP);
    let (dw, stderr) = record(
        dir.path(),
        "rec.data",
        &["--call-graph", "dwarf,1024"],
        &bin,
        &["300"],
    );
    eprintln!("{stderr}");
    assert!(
        stderr.contains("truncated") && stderr.contains("dwarf,65528"),
        "no truncation advice in the summary:\n{stderr}"
    );
    // The samples are still there, each with the leaf and the part of the stack the copy held.
    let (text, stacks) = folded(&dw, "dw_recurse");
    let in_spin: u64 = stacks
        .iter()
        .filter(|(f, _)| has(f, "spin"))
        .map(|s| s.1)
        .sum();
    assert!(in_spin >= 50, "too few spin samples ({in_spin}):\n{text}");
    assert!(
        stacks
            .iter()
            .filter(|(f, _)| has(f, "spin"))
            .all(|(f, _)| !has(f, "main")),
        "a 1 KiB copy cannot reach main through 100 recursive frames:\n{text}"
    );
}

/// Check that rprof's memory does not grow with the number of samples in DWARF mode: two busy threads, each
/// using 9 s of CPU, sampled at 999 Hz; rprof's VmRSS when the target has used 6 s and 17 s of CPU (about 11000
/// samples apart) differ by less than 5 MB. Sized by the target's CPU time, so a busy machine only takes longer.
#[test]
fn dwarf_mode_memory_is_bounded() {
    if !privileged("dwarf_mode_memory_is_bounded") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "dwe_threads.c", NO_FP);
    let data = dir.path().join("thr.data");
    let child = rprof()
        .args(["record", "-F", "999", "--call-graph", "dwarf", "-o"])
        .arg(&data)
        .arg("--")
        .arg(&bin)
        .arg("9")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start rprof");
    let mut child = KillOnDrop(child);
    let pid = child.0.id();
    let target = only_child(pid);
    wait_for_cpu(target, Duration::from_secs(6));
    let early = vm_rss_kib(pid).expect("rprof is running");
    wait_for_cpu(target, Duration::from_secs(11));
    let late = vm_rss_kib(pid).expect("rprof is running");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.0.stderr.take().unwrap(), &mut stderr).unwrap();
    let status = child.0.wait().expect("wait for rprof");
    assert!(status.success(), "rprof record failed:\n{stderr}");
    let samples: u64 = stderr
        .split("rprof record: ")
        .filter_map(|s| s.split(" samples,").next()?.trim().parse().ok())
        .next()
        .unwrap_or(0);
    let growth = late as i64 - early as i64;
    eprintln!(
        "rprof VmRSS: {early} KiB at 6 s of target CPU, {late} KiB at 17 s (growth {growth} KiB); {samples} samples"
    );
    assert!(
        samples >= 2000,
        "too few samples to judge ({samples}):\n{stderr}"
    );
    assert!(
        growth < 5 * 1024,
        "rprof's memory grew by {growth} KiB between 6 s and 17 s of target CPU in DWARF recording"
    );
}

/// Check that stacks sampled inside a signal handler unwind across the signal frame (glibc's `__restore_rt`
/// and the saved ucontext) into the interrupted code: >= 90% of in_handler samples show
/// main -> busy -> ... -> handler -> in_handler, as perf's unwinder does.
/// The fixture's work is sized by CPU time: 60 signals, each handled with 5 ms of CPU in in_handler, ~300
/// samples at 999 Hz on any CPU, idle or loaded.
#[test]
fn through_signal_frame() {
    if !privileged("through_signal_frame") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "dwe_signal.c", NO_FP);
    let full = |f: &[String]| {
        let (Some(b), Some(h)) = (pos(f, |s| s == "busy"), pos(f, |s| s == "handler")) else {
            return false;
        };
        contains_run(f, &["main", "busy"]) && contains_run(f, &["handler", "in_handler"]) && b < h
    };
    let (dw, stderr) = record(
        dir.path(),
        "sig.data",
        &["--call-graph", "dwarf"],
        &bin,
        &["60"],
    );
    let (text, stacks) = folded(&dw, "dwe_signal");
    let (share, n) = share_of(&stacks, |f| has(f, "in_handler"), full);
    eprintln!(
        "signal: {n} in_handler samples, {:.1}% reach main through the signal frame",
        share * 100.0
    );
    assert!(
        n >= 100,
        "too few in_handler samples ({n}):\n{stderr}\n{text}"
    );
    assert!(
        share >= 0.90,
        "only {:.1}% of in_handler samples cross the signal frame to main:\n{stderr}\n{text}",
        share * 100.0
    );
}

/// Check that a DWARF stack size the kernel cannot take (below 8 bytes, or above 65528) is refused with the
/// valid range, instead of recording samples with an empty stack copy.
#[test]
fn stack_size_out_of_range_is_refused() {
    for size in ["0", "7", "65536"] {
        let out = rprof()
            .args([
                "record",
                "--call-graph",
                &format!("dwarf,{size}"),
                "--",
                "true",
            ])
            .output()
            .expect("run rprof");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "dwarf,{size} was accepted:\n{stderr}"
        );
        assert!(
            stderr.contains("8..=65528"),
            "dwarf,{size}: no range given:\n{stderr}"
        );
    }
}
