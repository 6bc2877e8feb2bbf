//! `rprof report` of a recording with several events as perf report prints it (a section per event with
//! `# Samples: N of event 'NAME'`), `--show-nr-samples`, `--sort event`, `--header-only`, `rprof evlist` and
//! `rprof buildid-list`: each against perf on the same recordings (one made by perf, one by rprof).
mod common;
use common::*;
use std::path::Path;
use std::process::Command;

const GETPPID: &str = "syscalls:sys_enter_getppid";
const GETPID: &str = "syscalls:sys_enter_getpid";

/// Run perf with `args` in `dir`, asserting success; returns stdout.
fn perf(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("perf")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run perf");
    assert!(
        out.status.success(),
        "perf {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The `# Samples:` and `# Event count` lines of a report, in order.
fn section_lines(report: &str) -> Vec<String> {
    report
        .lines()
        .filter(|l| l.starts_with("# Samples:") || l.starts_with("# Event count"))
        .map(str::to_string)
        .collect()
}

/// The two recordings of the fixture's 300 getppid and 200 getpid calls: perf's and rprof's.
fn recordings(dir: &Path) -> [String; 2] {
    let bin = build_c(dir, "two_syscalls.c", &["-O1"]);
    let bin = bin.to_str().unwrap();
    let p = dir.join("perf.data");
    perf(
        dir,
        &[
            "record",
            "-q",
            "-o",
            p.to_str().unwrap(),
            "-e",
            GETPPID,
            "-e",
            GETPID,
            "--",
            bin,
            "300",
            "200",
        ],
    );
    let r = record_to(
        dir,
        "rprof.data",
        &["-e", GETPPID, "-e", GETPID, "--", bin, "300", "200"],
    );
    [p.to_str().unwrap().to_string(), r]
}

/// A recording of two tracepoints hit 300 and 200 times reports two sections with those counts, as perf
/// report prints them for the same file, whoever recorded it; and a row per event with `--sort event`.
#[test]
fn a_section_per_event() {
    if !privileged("a_section_per_event") || !perf_tool("a_section_per_event") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let want = vec![
        format!("# Samples: 300  of event '{GETPPID}'"),
        "# Event count (approx.): 300".to_string(),
        format!("# Samples: 200  of event '{GETPID}'"),
        "# Event count (approx.): 200".to_string(),
    ];
    for file in recordings(dir.path()) {
        let theirs = perf(dir.path(), &["report", "-i", &file, "--stdio"]);
        assert_eq!(
            section_lines(&theirs),
            want,
            "perf report of {file}:\n{theirs}"
        );
        let ours = rprof_ok(&["report", "-q", "-i", &file, "--show-nr-samples"]);
        assert_eq!(
            section_lines(&ours),
            want,
            "rprof report of {file}:\n{ours}"
        );
        // Each section's table: the fixture's row with all of the event's samples in the Samples column.
        let rows: Vec<&str> = ours
            .lines()
            .filter(|l| l.contains("two_syscalls"))
            .collect();
        assert_eq!(rows.len(), 2, "{ours}");
        for (row, n) in rows.iter().zip(["300", "200"]) {
            let cells: Vec<&str> = row.split_whitespace().collect();
            assert_eq!(cells[0], "100.00%", "{row}");
            assert_eq!(cells[2], n, "{row}");
        }
        let events = rprof_ok(&[
            "report",
            "-q",
            "-i",
            &file,
            "--sort",
            "event",
            "--show-nr-samples",
        ]);
        let rows: Vec<Vec<&str>> = events
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            rows,
            vec![
                vec!["60.00%", "300", GETPPID],
                vec!["40.00%", "200", GETPID]
            ],
            "{events}"
        );
    }
}

/// `rprof evlist` and `rprof buildid-list` print what perf evlist and perf buildid-list print for the same
/// recording, perf's and rprof's; `--header-only` prints perf's lines that it has.
#[test]
fn evlist_buildids_header() {
    if !privileged("evlist_buildids_header") || !perf_tool("evlist_buildids_header") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for file in recordings(dir.path()) {
        let theirs = perf(dir.path(), &["evlist", "-i", &file]);
        let ours = rprof_ok(&["evlist", "-i", &file]);
        assert_eq!(ours, theirs, "evlist of {file}");
        assert!(
            ours.starts_with(&format!("{GETPPID}\n{GETPID}\n")),
            "{ours}"
        );
        let mut theirs: Vec<String> = perf(dir.path(), &["buildid-list", "-i", &file])
            .lines()
            .map(str::to_string)
            .collect();
        let mut ours: Vec<String> = rprof_ok(&["buildid-list", "-i", &file])
            .lines()
            .map(str::to_string)
            .collect();
        theirs.sort();
        ours.sort();
        assert_eq!(ours, theirs, "buildid-list of {file}");
        let theirs = perf(dir.path(), &["report", "--header-only", "-i", &file]);
        let ours = rprof_ok(&["report", "--header-only", "-i", &file]);
        let keys = [
            "# captured on",
            "# hostname",
            "# os release",
            "# nrcpus online",
            "# nrcpus avail",
            "# cmdline",
            "# time of first sample",
            "# time of last sample",
            "# sample duration",
        ];
        for key in keys {
            let line = |text: &str| {
                text.lines()
                    .find(|l| l.starts_with(key))
                    .map(str::to_string)
            };
            // perf takes the sample times from the SAMPLE_TIME feature section, which rprof's recordings do
            // not have (rprof reads them from the samples).
            if line(&theirs).is_none() && key.contains("sample") {
                assert!(line(&ours).is_some(), "{key} of {file}:\n{ours}");
                continue;
            }
            assert_eq!(
                line(&ours),
                line(&theirs),
                "{key} of {file}:\n{ours}\nperf:\n{theirs}"
            );
        }
        let names = |text: &str| -> Vec<String> {
            text.lines()
                .filter(|l| l.starts_with("# event : name = "))
                .map(|l| l.split(',').next().unwrap().to_string())
                .collect()
        };
        assert_eq!(names(&ours), names(&theirs), "{file}");
    }
}
