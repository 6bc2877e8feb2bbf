//! `rprof report --otlp`: the OTLP profiles request of a recording, decoded by PyPI's opentelemetry-proto (the
//! reference reader of the schema), holds exactly the report's samples and stacks.
mod common;
use common::*;
use std::collections::HashMap;

/// Check that the OTLP request of a call-tree recording, read by opentelemetry-proto, has one profile per sample
/// type whose folded stacks equal `rprof report --folded` exactly (samples), whose CPU time is the samples times
/// the period, and whose start and duration place the samples at the time they were recorded.
#[test]
fn otlp_request_holds_the_reports_samples() {
    if !privileged("otlp_request_holds_the_reports_samples") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let before = std::time::SystemTime::now();
    let data = record_calltree(dir.path(), "r.data", "300");
    let after = std::time::SystemTime::now();
    let pb = dir.path().join("r.otlp");
    let (_, err) = rprof_ok_stderr(&["report", "-i", &data, "--otlp", pb.to_str().unwrap()]);
    assert!(err.contains("wrote"), "{err}");
    let Some(otlp) = otlp_decode("otlp_request_holds_the_reports_samples", &pb) else {
        return;
    };
    let folded = rprof_ok(&["report", "-i", &data, "--folded"]);
    let expected: HashMap<String, u64> = parse_folded(&folded)
        .into_iter()
        .map(|(frames, n)| (frames.join(";"), n))
        .collect();
    assert_eq!(otlp["resource"]["service.name"], "calltree");
    assert_eq!(otlp["scope"], "rprof");
    let profiles = otlp["profiles"].as_array().unwrap();
    let of = |t: &str| {
        profiles
            .iter()
            .find(|p| p["type"] == t)
            .unwrap_or_else(|| panic!("no {t} profile: {otlp}"))
    };
    let samples = of("samples");
    // Unnamed code is spelled as the table spells it in pprof and OTLP (src/report/pprof/mod.rs), and as perf
    // script's stacks fold in folded stacks (src/resolve/frame.rs): code in a file without a symbol covering
    // it, `libc.so.6+0x1234` (or a range `+0x..0x.. (n addresses)`), folds as `[libc.so.6]`; an address in no
    // mapping (a frame-pointer walk through libc, which keeps no frame pointer, reads a return address out of
    // the caller's data), `0x7f..`, folds as `[unknown]`; a kernel address without a symbol (a BPF filter, a
    // trampoline), `0xffff..`, as `[[kernel.kallsyms]]`.
    let folded_spelling = |f: &str| -> String {
        let hex = |h: &str| !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit());
        if let Some(h) = f.strip_prefix("0x").filter(|h| hex(h)) {
            let kernel = u64::from_str_radix(h, 16).is_ok_and(|a| a >= 0xffff_8000_0000_0000);
            return match kernel {
                true => "[[kernel.kallsyms]]".to_string(),
                false => "[unknown]".to_string(),
            };
        }
        match f.split_once("+0x") {
            Some((module, rest))
                if !module.is_empty() && rest.starts_with(|c: char| c.is_ascii_hexdigit()) =>
            {
                format!("[{module}]")
            }
            _ => f.to_string(),
        }
    };
    let mut got: HashMap<String, u64> = HashMap::new();
    for (k, v) in samples["folded"].as_object().unwrap() {
        let frames: Vec<String> = k.split(';').map(folded_spelling).collect();
        *got.entry(frames.join(";")).or_default() += v.as_u64().unwrap();
    }
    assert_eq!(got, expected);
    let total = samples["total"].as_u64().unwrap();
    assert!(total >= 100, "{total} samples for 300 ms at 999 Hz");
    // -F 999: each sample stands for 1e9/999 ns of CPU.
    let cpu = of("cpu");
    assert_eq!(cpu["unit"], "nanoseconds");
    assert_eq!(
        cpu["total"].as_u64().unwrap(),
        total * (1_000_000_000 / 999)
    );
    let ns = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    };
    let start = cpu["time_unix_nano"].as_u64().unwrap();
    let duration = cpu["duration_nano"].as_u64().unwrap();
    // The file's mtime is a little after the last sample, so the start is a little late; never before the
    // recording began, never after it ended.
    assert!(
        ns(before) <= start && start + duration <= ns(after) + 1_000_000_000,
        "start {start} duration {duration}, recorded from {} to {}",
        ns(before),
        ns(after)
    );
}
