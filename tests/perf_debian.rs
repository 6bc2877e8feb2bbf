//! perf.data as the perf installed here (Debian's perf 6.1) writes it: `perf record -z` (zstd-compressed
//! records) and `perf record -o -` (pipe mode, saved to a file and piped straight into `rprof report -i -`)
//! read with exactly the sample count perf's own reader finds (`perf report -D`) and the same top functions;
//! and `rprof record -o -` piped into both `perf report -i -` and `rprof report -i -` with one sample count.
mod common;
use common::*;
use std::io::{Read, Write};
use std::process::{Command, Stdio};

/// Whether these tests can run: root and the `perf` tool; otherwise they skip (see [`skip`]).
fn have_perf(test: &str) -> bool {
    privileged(test) && perf_tool(test)
}

/// The number of PERF_RECORD_SAMPLE records perf's reader finds in `input` (`-` reads `stdin`).
fn perf_samples(input: &str, stdin: Option<&[u8]>) -> u64 {
    let out = run_with_stdin(
        Command::new("perf").args(["report", "-D", "-i", input]),
        stdin,
    );
    out.lines()
        .filter(|l| l.contains(" PERF_RECORD_SAMPLE("))
        .count() as u64
}

/// The two hottest functions by self time in `perf report --stdio` of `input`.
fn perf_top(input: &str, stdin: Option<&[u8]>) -> Vec<String> {
    let args = [
        "report",
        "--stdio",
        "--no-children",
        "--sort",
        "sym",
        "-g",
        "none",
        "-i",
        input,
    ];
    let out = run_with_stdin(Command::new("perf").args(args), stdin);
    out.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| Some(l[l.find("[.] ")? + 4..].trim().to_string()))
        .take(2)
        .collect()
}

/// `rprof report`'s sample count and two hottest functions (self) of `input`.
fn rprof_report(input: &str, stdin: Option<&[u8]>) -> (u64, Vec<String>) {
    let out = run_with_stdin(rprof().args(["report", "--stdio", "-i", input]), stdin);
    let count = out
        .lines()
        .find(|l| l.contains(" samples, "))
        .and_then(|l| l.trim_start_matches("# ").split(' ').next())
        .map(|n| n.replace(',', "").parse().unwrap())
        .unwrap_or_else(|| panic!("no sample count in {out}"));
    let top = out
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().last().map(str::to_string))
        .take(2)
        .collect();
    (count, top)
}

/// Check the three forms of perf's output: `perf record -z` to a file, `perf record -o -` saved to a file, and
/// `perf record -o -` piped into `rprof report -i -` (the stream also saved, for perf's count): rprof reads
/// each with exactly perf's sample count, and the same two hottest functions (calltree's hot_a and hot_b).
#[test]
fn perf_z_and_pipe_mode_read_with_perfs_counts() {
    if !have_perf("perf_z_and_pipe_mode_read_with_perfs_counts") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "calltree.c", FP);
    let bin = bin.to_str().unwrap();
    let record = ["record", "-q", "-F", "999", "-g"];
    let z = dir.path().join("z.data");
    let z = z.to_str().unwrap();
    let st = Command::new("perf")
        .args(record)
        .args(["-z", "-o", z, "--", bin, "300"])
        .status()
        .unwrap();
    assert!(st.success(), "perf record -z");
    let perf_pipe = |out: Stdio| {
        Command::new("perf")
            .args(record)
            .args(["-o", "-", "--", bin, "300"])
            .stdout(out)
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let piped = dir.path().join("pipe.data");
    let mut perf = perf_pipe(std::fs::File::create(&piped).unwrap().into());
    assert!(perf.wait().unwrap().success());
    let piped = piped.to_str().unwrap();
    // Straight into rprof, as the stream comes: rprof reads the pipe (perf writes it as it records).
    let mut perf = perf_pipe(Stdio::piped());
    let mut rprof_child = rprof()
        .args(["report", "--stdio", "-i", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut from_perf = perf.stdout.take().unwrap();
    let mut to_rprof = rprof_child.stdin.take().unwrap();
    let mut stream = Vec::new();
    let mut buf = [0u8; 1 << 16];
    loop {
        let n = from_perf.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        to_rprof.write_all(&buf[..n]).unwrap();
        stream.extend_from_slice(&buf[..n]);
    }
    drop(to_rprof);
    assert!(perf.wait().unwrap().success());
    let out = rprof_child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let direct = String::from_utf8_lossy(&out.stdout).into_owned();
    let (direct_count, _) = rprof_report("-", Some(&stream));
    assert!(
        direct.contains(&format!("# {direct_count} samples")),
        "{direct}"
    );
    for (what, input, stdin) in [
        ("perf record -z", z, None),
        ("perf record -o - > FILE", piped, None),
        (
            "perf record -o - | rprof report -i -",
            "-",
            Some(stream.as_slice()),
        ),
    ] {
        let perf_count = perf_samples(input, stdin);
        let (count, top) = rprof_report(input, stdin);
        eprintln!("{what}: perf {perf_count} samples, rprof {count}; top {top:?}");
        assert!(
            perf_count > 100,
            "{what}: {perf_count} samples for 300 ms of CPU at 999 Hz"
        );
        assert_eq!(count, perf_count, "{what}: rprof's count, perf's");
        assert_eq!(
            top,
            perf_top(input, stdin),
            "{what}: the two hottest functions"
        );
        assert_eq!(top, ["hot_a", "hot_b"], "{what}: calltree's 3:1 split");
    }
}

/// Check `rprof record -o -`: its stream piped into `perf report -i -` and into `rprof report -i -` gives one
/// sample count, and the same two hottest functions.
#[test]
fn rprof_pipe_mode_read_by_perf_and_rprof() {
    if !have_perf("rprof_pipe_mode_read_by_perf_and_rprof") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "calltree.c", FP);
    let out = rprof()
        .args(["record", "-q", "-F", "999", "-g", "-o", "-", "--"])
        .arg(&bin)
        .arg("300")
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success());
    let stream = out.stdout;
    let perf_count = perf_samples("-", Some(&stream));
    let (count, top) = rprof_report("-", Some(&stream));
    eprintln!("rprof record -o -: perf {perf_count} samples, rprof {count}; top {top:?}");
    assert!(
        perf_count > 100,
        "{perf_count} samples for 300 ms of CPU at 999 Hz"
    );
    assert_eq!(count, perf_count);
    assert_eq!(top, perf_top("-", Some(&stream)));
    assert_eq!(top, ["hot_a", "hot_b"]);
}
