//! A program that maps, unmaps and remaps code at one address (dlopen of library A, dlclose, dlopen of library B
//! landing where A was): report (with frame-pointer stacks, and with stacks the live DWARF unwinder unwound while
//! recording) names A's functions in A's phase and B's in B's, and `probe -g --folded` names B's stacks as
//! `report --folded` does.
mod common;
use common::*;
use std::path::{Path, PathBuf};

/// CPU time of each phase: about 300 samples per phase at 999 Hz on any CPU (a loaded machine takes longer).
const PHASE_MS: &str = "300";

struct Built {
    remap: PathBuf,
    lib_a: PathBuf,
    lib_b: PathBuf,
}

/// Build remap.c and the two libraries (one source, two prefixes: the same layout).
fn build(dir: &Path) -> Built {
    let lib = |prefix: &str, name: &str| {
        let out = dir.join(name);
        let st = std::process::Command::new("gcc")
            .arg(fixtures().join("remap_lib.c"))
            .args(["-shared", "-fPIC", &format!("-DP={prefix}"), "-o"])
            .arg(&out)
            .args(FP)
            .status()
            .expect("run gcc");
        assert!(st.success(), "gcc failed on remap_lib.c");
        out
    };
    Built {
        remap: build_c(dir, "remap.c", &[FP, &["-ldl"]].concat()),
        lib_a: lib("a_", "liba.so"),
        lib_b: lib("b_", "libb.so"),
    }
}

/// The command line running the fixture.
fn workload(b: &Built) -> Vec<String> {
    [&b.remap, &b.lib_a, &b.lib_b]
        .iter()
        .map(|p| p.to_str().unwrap().to_string())
        .chain([PHASE_MS.to_string()])
        .collect()
}

/// Check that the fixture printed the same load address for both libraries.
fn assert_same_address(stdout: &str) {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("A at "))
        .unwrap_or_else(|| panic!("no load addresses printed:\n{stdout}"));
    let (a, b) = line
        .strip_prefix("A at ")
        .and_then(|l| l.split_once(", B at "))
        .unwrap();
    assert_eq!(a, b, "library B did not land where A was: {line}");
}

/// Record the fixture with `mode` and check each phase's samples name its own library's functions.
fn check_phases(dir: &Path, b: &Built, name: &str, mode: &[&str]) -> Vec<(Vec<String>, u64)> {
    let data = dir.join(name);
    let data = data.to_str().unwrap();
    let mut args = vec!["record", "-q", "-o", data, "-F", "999"];
    args.extend_from_slice(mode);
    args.push("--");
    let work = workload(b);
    args.extend(work.iter().map(String::as_str));
    let stdout = rprof_ok(&args);
    assert_same_address(&stdout);
    let folded = rprof_ok(&["report", "-i", data, "--folded"]);
    let stacks = parse_folded(&folded);
    let count = |phase: &str, names: &[&str]| -> (u64, u64) {
        let in_phase = stacks.iter().filter(|(f, _)| f.iter().any(|x| x == phase));
        let total: u64 = in_phase.clone().map(|(_, n)| n).sum();
        let named: u64 = in_phase
            .filter(|(f, _)| contains_run(f, names))
            .map(|(_, n)| n)
            .sum();
        (named, total)
    };
    let (a_named, a_total) = count("phase_a", &["phase_a", "a_spin", "a_inner"]);
    let (b_named, b_total) = count("phase_b", &["phase_b", "b_spin", "b_inner"]);
    eprintln!(
        "{name}: phase A {a_named}/{a_total} samples in a_spin;a_inner, phase B {b_named}/{b_total} in b_spin;b_inner"
    );
    for (phase, total, named) in [("A", a_total, a_named), ("B", b_total, b_named)] {
        assert!(
            total >= 100,
            "{name}: too few phase {phase} samples ({total}):\n{folded}"
        );
        assert!(
            named * 100 >= total * 90,
            "{name}: only {named} of {total} phase {phase} samples name the phase's library:\n{folded}"
        );
    }
    // None of B's samples is named after A, and the other way round.
    for (frames, _) in &stacks {
        let has = |p: &str| frames.iter().any(|f| f.starts_with(p));
        if frames.iter().any(|f| f == "phase_b") {
            assert!(!has("a_"), "{name}: a phase B stack names A: {frames:?}");
        }
        if frames.iter().any(|f| f == "phase_a") {
            assert!(!has("b_"), "{name}: a phase A stack names B: {frames:?}");
        }
    }
    stacks
}

/// Check that report names each phase's library right, with frame-pointer and live-DWARF stacks, and that
/// `probe -g --folded` on B's function names the same frames as `report --folded` for that stack.
#[test]
fn dlopen_dlclose_redlopen_at_one_address() {
    if !privileged("dlopen_dlclose_redlopen_at_one_address") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let b = build(dir.path());
    let fp = check_phases(dir.path(), &b, "fp.data", &["-g"]);
    let dwarf = check_phases(dir.path(), &b, "dwarf.data", &["--call-graph", "dwarf"]);

    let mut args = vec![
        "probe",
        "-x",
        b.lib_b.to_str().unwrap(),
        "b_spin",
        "-g",
        "--folded",
        "--",
    ];
    let work = workload(&b);
    args.extend(work.iter().map(String::as_str));
    let out = rprof_ok(&args);
    assert_same_address(&out);
    let probe_stack: Vec<String> = out
        .lines()
        .find(|l| l.contains("b_spin") && l.contains(';'))
        .and_then(|l| l.rsplit_once(' '))
        .map(|(frames, _)| frames.split(';').map(String::from).collect())
        .unwrap_or_else(|| panic!("no folded stack of b_spin:\n{out}"));
    eprintln!("probe -g: {probe_stack:?}");
    assert_eq!(
        probe_stack.last().map(String::as_str),
        Some("b_spin"),
        "{probe_stack:?}"
    );
    assert!(
        contains_run(&probe_stack, &["main", "phase_b", "b_spin"]),
        "{probe_stack:?}"
    );
    // The same frames, spelled the same, lead to b_spin in report's frame-pointer stacks (after the command)...
    assert!(
        fp.iter().any(|(f, _)| f[1..].starts_with(&probe_stack)),
        "probe's stack {probe_stack:?} is not how report names it:\n{fp:?}"
    );
    // ...and appear in the stacks the live DWARF unwinder recorded.
    let run: Vec<&str> = probe_stack.iter().map(String::as_str).collect();
    assert!(
        dwarf.iter().any(|(f, _)| contains_run(f, &run)),
        "probe's stack {probe_stack:?} is not in the DWARF stacks:\n{dwarf:?}"
    );
}
