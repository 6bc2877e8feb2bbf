//! Probes on a command whose threads start after the probes are on: every thread's calls are counted, and the
//! program's threads start. (The uprobe PMU with `inherit` made each new thread's clone fail with EFAULT: the
//! kernel re-reads the probe's path from a pointer into rprof's memory, in the new thread.)
mod common;
use common::{build_c, privileged, rprof};

/// `rprof probe ARGS`: (stdout, stderr), asserting success.
fn probe(args: &[&str]) -> (String, String) {
    let out = rprof().args(args).output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "rprof {args:?}: {stdout}\n{stderr}");
    (stdout, stderr)
}

/// The COUNT column of `name`'s row.
fn count(table: &str, name: &str) -> u64 {
    table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.replace(',', "").parse().ok())
        .unwrap_or_else(|| panic!("no row {name}: {table}"))
}

/// Check that `--count`, timing and `-g` on a command that starts a thread count both threads' calls exactly
/// (main and the worker each call outer() 5 times, which calls inner() twice), and that the thread started.
#[test]
fn new_threads_are_probed_and_start() {
    if !privileged("new_threads_are_probed_and_start") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "trace_nest.c", &["-O1", "-pthread"]);
    let bin = bin.to_str().unwrap();
    for mode in [&["--count"][..], &[][..], &["-g"][..]] {
        let mut args = vec!["probe"];
        args.extend(mode);
        args.extend(["-x", bin, "outer", "inner", "--", bin, "nest", "5"]);
        let (out, err) = probe(&args);
        assert!(
            out.contains("calls 5"),
            "{mode:?}: the fixture did not finish: {out}{err}"
        );
        assert_eq!(
            (count(&out, "outer"), count(&out, "inner")),
            (10, 20),
            "{mode:?}: {out}"
        );
    }
}
