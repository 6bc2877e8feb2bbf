//! Issue 32: the perf usage notes' commands (record/report/script/annotate/probe) replayed with rprof on a
//! program shaped like the notes' (main -> func_a -> func_b -> func_c -> func_d), checking the functions, the
//! counts and the stacks. Each command is perf's spelling, as the notes write it.
mod common;
use common::*;
use std::path::Path;

/// Run rprof with `args`, returning (status, stdout, stderr).
fn run(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = rprof()
        .current_dir(dir)
        .args(args)
        .output()
        .expect("rprof runs");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

/// The `calls N` the fixture printed.
fn calls(stdout: &str) -> u64 {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("calls ")?.parse().ok())
        .expect("calls N")
}

/// Check that the notes' record/report/script/annotate command lines parse as perf parses them and that
/// their output shows the chain func_a -> func_b -> func_c -> func_d under main.
#[test]
fn sampling_commands_as_the_notes_write_them() {
    if !privileged("sampling_commands_as_the_notes_write_them") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "record_event.c", FP);
    let bin = bin.to_str().unwrap();
    // The notes' main recipe (with -p replaced by the command, and -g twice) and a command without `--`.
    let (code, out, err) = run(
        dir.path(),
        &[
            "record",
            "-F",
            "99",
            "-g",
            "--call-graph=dwarf",
            "-g",
            "-o",
            "a.data",
            bin,
            "300",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(calls(&out) > 0);
    let (code, _, err) = run(
        dir.path(),
        &[
            "record",
            "-g",
            "--proc-map-timeout",
            "500",
            "-o",
            "b.data",
            bin,
            "400",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("--proc-map-timeout has no effect"), "{err}");
    let (code, folded, err) = run(dir.path(), &["report", "-i", "b.data", "--folded"]);
    assert_eq!(code, 0, "{err}");
    let stacks = parse_folded(&folded);
    let total: u64 = stacks.iter().map(|s| s.1).sum();
    let chain: u64 = stacks
        .iter()
        .filter(|(f, _)| contains_run(f, &["main", "func_a", "func_b", "func_c", "func_d"]))
        .map(|s| s.1)
        .sum();
    // 400 ms of CPU at 4000 Hz: about 1600 samples, all but start-up in func_d's chain.
    assert!(
        total >= 500 && chain * 10 >= total * 9,
        "{chain} of {total}"
    );
    let (code, table, err) = run(
        dir.path(),
        &[
            "report",
            "-i",
            "b.data",
            "--stdio",
            "--comm",
            "record_event",
            "--percent-limit",
            "5",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let rows: Vec<&str> = table
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .collect();
    assert_eq!(rows.len(), 1, "{table}");
    assert!(rows[0].contains("func_d"), "{table}");
    let (code, script, err) = run(
        dir.path(),
        &["script", "-i", "b.data", "-c", "record_event"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        script.contains("func_c+") && script.contains("func_a+"),
        "{}",
        &script[..script.len().min(2000)]
    );
    let (code, none, _) = run(dir.path(), &["script", "-i", "b.data", "-c", "bash"]);
    assert_eq!((code, none.trim()), (0, ""));
    let (code, ann, err) = run(
        dir.path(),
        &["annotate", "-i", "b.data", "--stdio2", "func_d"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        ann.starts_with("Samples: ") && ann.contains("func_d() ") && ann.contains("← ret"),
        "{ann}"
    );
    assert!(
        ann.contains("↑ j"),
        "a backward jump of func_d's loop: {ann}"
    );
}

/// Check perf's probe listing and address forms: -F lists the four functions, an address (a file offset, as
/// perf's) and FUNC+OFF count exactly the program's calls, -l with no pattern and -d GROUP say that probes
/// live only as long as the session.
#[test]
fn probe_commands_as_the_notes_write_them() {
    if !privileged("probe_commands_as_the_notes_write_them") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "record_event.c", FP);
    let b = bin.to_str().unwrap();
    let (code, funcs, err) = run(dir.path(), &["probe", "-F", "-x", b, "func_*"]);
    assert_eq!(
        (code, funcs.as_str()),
        (0, "func_a\nfunc_b\nfunc_c\nfunc_d\n"),
        "{err}"
    );
    let nm = std::process::Command::new("nm").arg(&bin).output().unwrap();
    let addr = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .find_map(|l| l.strip_suffix(" T func_d").map(str::to_string))
        .expect("func_d in nm");
    let addr = format!("0x{}", addr.trim_start_matches('0'));
    for probe in [
        vec!["--add", addr.as_str()],
        vec![addr.as_str()],
        vec!["func_d+4"],
    ] {
        let mut args = vec!["probe", "-x", b];
        args.extend(&probe);
        args.extend(["--", b, "200"]);
        let (code, out, err) = run(dir.path(), &args);
        assert_eq!(code, 0, "{probe:?}: {err}");
        let n = calls(&out);
        let row = out
            .lines()
            .find(|l| l.starts_with("func_d") || l.starts_with("0x"))
            .expect(&out);
        let count: u64 = row.split_whitespace().nth(1).unwrap().parse().unwrap();
        assert_eq!(count, n, "{probe:?}: {out}");
        // Counted, not timed: no time in the row, and no call is said to be still running.
        assert!(
            !out.contains("OPEN") && !err.contains("OPEN"),
            "{probe:?}: {out}{err}"
        );
    }
    // func_d+2 is inside func_d's first instruction (endbr64 or push %rbp; mov %rsp,%rbp): refused, since a
    // breakpoint there would change the instruction.
    let (code, _, err) = run(dir.path(), &["probe", "-x", b, "func_d+2", "--", b, "50"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("is inside the instruction at func_d+0x"),
        "{err}"
    );
    let (code, _, err) = run(dir.path(), &["probe", "-l"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("live only as long as"), "{err}");
    let (code, _, err) = run(dir.path(), &["probe", "-d", "probe_test:*"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("live only as long as") && !err.contains("invalid value"),
        "{err}"
    );
}
