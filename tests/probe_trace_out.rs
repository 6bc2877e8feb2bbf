//! `rprof probe --trace-out`: the Chrome trace-event file, loaded by a real consumer (speedscope 1.25.0 in
//! headless Chromium, through tools/trace-consumer/load_trace.mjs, which CI installs), against the calls rprof
//! counted and the physics of the fixture (a sleep lasts at least what it asked for).
mod common;
use common::{build_c, privileged, rprof, skip};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The consumer's script when it is installed (node, `npm ci` in its directory, Chromium); otherwise None after a
/// visible skip (a panic under RPROF_REQUIRE_PRIVILEGED=1).
fn trace_consumer(test: &str) -> Option<PathBuf> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/trace-consumer/load_trace.mjs");
    match Command::new("node").arg(&script).arg("--check").output() {
        Ok(o) if o.status.success() => Some(script),
        Ok(o) => {
            let why = String::from_utf8_lossy(&o.stderr).trim().to_string();
            skip(
                test,
                &format!("the speedscope trace consumer is not installed (bash tools/trace-consumer/install.sh): {why}"),
            );
            None
        }
        Err(e) => {
            skip(test, &format!("node does not run: {e}"));
            None
        }
    }
}

/// What speedscope parsed from `trace`; panics if it rejected the file or warned while importing it (a warning
/// means badly nested slices).
fn load_trace(script: &Path, trace: &Path) -> Value {
    let out = Command::new("node")
        .arg(script)
        .arg(trace)
        .output()
        .expect("run node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "speedscope rejected {}: {stdout}\n{}",
        trace.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(&stdout).expect("load_trace prints JSON");
    assert_eq!(v["importer"], "Importing as Trace Event Format profile");
    assert_eq!(
        v["warnings"],
        json!([]),
        "speedscope warned while importing"
    );
    v
}

/// A slice as speedscope built it: name, start and end (us, each track shifted to start at 0), depth.
#[derive(Debug)]
struct Slice {
    name: String,
    start: f64,
    end: f64,
    depth: u64,
}

/// Each profile (a track) with its slices.
fn profiles(v: &Value) -> Vec<(String, Vec<Slice>)> {
    v["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let slices = p["slices"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| Slice {
                    name: s["name"].as_str().unwrap().to_string(),
                    start: s["start"].as_f64().unwrap(),
                    end: s["end"].as_f64().unwrap(),
                    depth: s["depth"].as_u64().unwrap(),
                })
                .collect();
            (p["name"].as_str().unwrap().to_string(), slices)
        })
        .collect()
}

/// `rprof probe --json --trace-out TRACE ARGS`: the JSON report's entry of each function, by name.
fn probe_json(trace: &Path, args: &[&str]) -> Value {
    let out = rprof()
        .args(["probe", "--json", "--trace-out", trace.to_str().unwrap()])
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "rprof probe {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json = stdout.lines().find(|l| l.starts_with('{')).expect("JSON");
    serde_json::from_str(json).unwrap()
}

fn function<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["function"] == name)
        .unwrap_or_else(|| panic!("no {name} in {report}"))
}

/// Check that two threads' nested calls come out as two tracks in speedscope, without a nesting warning: on
/// each, 20 `outer` slices at depth 0 and 40 `inner` at depth 1 inside them; every `inner` lasts at least its
/// 200 us sleep; and the slices' durations add up to the totals rprof printed (to 2 ns per slice: the file
/// keeps nanoseconds, and speedscope's times are single-precision floats, a nanosecond apart at 10 ms).
#[test]
fn trace_out_nests_each_threads_calls() {
    if !privileged("trace_out_nests_each_threads_calls") {
        return;
    }
    let Some(script) = trace_consumer("trace_out_nests_each_threads_calls") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "trace_nest.c", &["-O1", "-pthread"]);
    let bin = bin.to_str().unwrap();
    let trace = dir.path().join("nest.json");
    let report = probe_json(
        &trace,
        &["-x", bin, "outer", "inner", "--", bin, "nest", "20"],
    );
    assert_eq!(function(&report, "outer")["count"], 40);
    assert_eq!(function(&report, "inner")["count"], 80);
    let v = load_trace(&script, &trace);
    let tracks = profiles(&v);
    assert_eq!(tracks.len(), 2, "one track per thread: {:?}", v["profiles"]);
    let mut totals = (0.0, 0.0);
    for (name, slices) in &tracks {
        let outers: Vec<&Slice> = slices.iter().filter(|s| s.name == "outer").collect();
        let inners: Vec<&Slice> = slices.iter().filter(|s| s.name == "inner").collect();
        assert_eq!((outers.len(), inners.len()), (20, 40), "{name}: {slices:?}");
        assert!(outers.iter().all(|s| s.depth == 0), "{name}: {outers:?}");
        assert!(inners.iter().all(|s| s.depth == 1), "{name}: {inners:?}");
        for i in &inners {
            assert!(
                i.end - i.start >= 200.0,
                "{name}: {i:?} shorter than its sleep"
            );
            assert!(
                outers.iter().any(|o| o.start <= i.start && i.end <= o.end),
                "{name}: {i:?} in no outer"
            );
        }
        totals.0 += outers.iter().map(|s| s.end - s.start).sum::<f64>();
        totals.1 += inners.iter().map(|s| s.end - s.start).sum::<f64>();
    }
    for (name, total_us, slices) in [("outer", totals.0, 40.0), ("inner", totals.1, 80.0)] {
        let rprof_ns = function(&report, name)["total_ns"].as_f64().unwrap();
        assert!(
            (total_us * 1e3 - rprof_ns).abs() <= 2.0 * slices,
            "{name}: slices add up to {total_us} us, rprof's total is {rprof_ns} ns"
        );
    }
}

/// Check that a keyed pair (started on one thread, done on another) comes out on a track of its own per key
/// (`arg0=I`, 30 of them), each with one slice that lasts at least the worker's 300 us sleep, adding up to
/// rprof's total (to 2 ns per slice).
#[test]
fn trace_out_puts_keyed_pairs_on_a_track_per_key() {
    if !privileged("trace_out_puts_keyed_pairs_on_a_track_per_key") {
        return;
    }
    let Some(script) = trace_consumer("trace_out_puts_keyed_pairs_on_a_track_per_key") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "trace_nest.c", &["-O1", "-pthread"]);
    let bin = bin.to_str().unwrap();
    let trace = dir.path().join("keyed.json");
    let args = [
        "-x",
        bin,
        "--pair",
        "request_start,request_done",
        "--key",
        "arg0",
        "--",
        bin,
        "keyed",
        "30",
    ];
    let report = probe_json(&trace, &args);
    let pair = function(&report, "request_{start..done}");
    assert_eq!(pair["count"], 30);
    let v = load_trace(&script, &trace);
    let tracks = profiles(&v);
    assert_eq!(tracks.len(), 30, "{:?}", v["profiles"]);
    let mut total_us = 0.0;
    for i in 0..30 {
        let key = format!("arg0={i} (tid ");
        let (name, slices) = tracks
            .iter()
            .find(|(n, _)| n.starts_with("rprof: keyed pairs") && n.contains(&key))
            .unwrap_or_else(|| panic!("no track for {key}: {:?}", v["profiles"]));
        assert_eq!(slices.len(), 1, "{name}: {slices:?}");
        let s = &slices[0];
        assert!(
            s.name.starts_with("request_{start..done}") && s.depth == 0,
            "{name}: {s:?}"
        );
        assert!(
            s.end - s.start >= 300.0,
            "{name}: {s:?} shorter than the worker's sleep"
        );
        total_us += s.end - s.start;
    }
    let rprof_ns = pair["total_ns"].as_f64().unwrap();
    assert!(
        (total_us * 1e3 - rprof_ns).abs() <= 60.0,
        "slices add up to {total_us} us, rprof's total is {rprof_ns} ns"
    );
}
