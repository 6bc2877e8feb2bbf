//! perf.data in every form perf writes: zstd-compressed records (COMPRESSED, COMPRESSED2, records spanning
//! compressed chunks) and pipe mode, read from a file and from stdin. The files are linux-perf-data's test
//! fixtures (fixtures/perf-data, with their licence); perf 6.1 reads only sleep.compressed.pipe.data of them
//! (the others have 136-byte attrs, "a more recent and unsupported ABI"), so the expected sample counts are
//! the crate's own reading (linux-perf-data 0.13 with its zstd feature, counting PERF_RECORD_SAMPLE), and
//! perf 6.1's `perf report -D -i - < sleep.compressed.pipe.data | grep -c PERF_RECORD_SAMPLE` (8) for that one.
mod common;

use std::io::Write;
use std::process::Stdio;

/// The sample count of `rprof report`'s first line ("# N samples, ...").
fn samples(report: &str) -> u64 {
    let line = report
        .lines()
        .find(|l| l.contains(" samples, "))
        .unwrap_or_else(|| panic!("no sample count in:\n{report}"));
    line.trim_start_matches("# ")
        .split(' ')
        .next()
        .unwrap()
        .replace(',', "")
        .parse()
        .unwrap()
}

const FIXTURES: [(&str, u64); 6] = [
    ("sleep.data", 7),
    ("sleep.compressed.data", 8),
    ("sleep.compressed2.data", 7),
    ("sleep.compressed.pipe.data", 8),
    ("sleep.compressed2.pipe.data", 7),
    // Records that span compressed chunks.
    ("fibo.compressed2.pipe.data", 547),
];

/// Check that every fixture reads with the crate's sample count, from -i FILE.
#[test]
fn crate_fixtures_read_with_their_sample_counts() {
    for (name, expected) in FIXTURES {
        let path = common::fixtures().join("perf-data").join(name);
        let out = common::rprof()
            .args(["report", "--stdio", "-i"])
            .arg(&path)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            samples(&stdout),
            expected,
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Check that pipe-mode streams read from stdin (`-i -`) through a pipe, with the crate's sample counts.
#[test]
fn pipe_mode_reads_from_stdin() {
    for (name, expected) in FIXTURES.iter().filter(|f| f.0.contains("pipe")) {
        let bytes = std::fs::read(common::fixtures().join("perf-data").join(name)).unwrap();
        let mut child = common::rprof()
            .args(["report", "--stdio", "-i", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let writer = std::thread::spawn(move || stdin.write_all(&bytes));
        let out = child.wait_with_output().unwrap();
        writer.join().unwrap().unwrap();
        assert_eq!(
            samples(&String::from_utf8_lossy(&out.stdout)),
            *expected,
            "{name}"
        );
    }
}
