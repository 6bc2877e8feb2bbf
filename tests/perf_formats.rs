//! perf.data in every form perf writes: zstd-compressed records (COMPRESSED, COMPRESSED2, records spanning
//! compressed chunks) and pipe mode, read from a file and from stdin. The files are linux-perf-data's test
//! fixtures (fixtures/perf-data, with their licence); perf 6.1 reads only sleep.compressed.pipe.data of them
//! (the others have 136-byte attrs, "a more recent and unsupported ABI"), so the expected sample counts are
//! the crate's own reading (linux-perf-data 0.13 with its zstd feature, counting PERF_RECORD_SAMPLE), and
//! perf 6.1's `perf report -D -i - < sleep.compressed.pipe.data | grep -c PERF_RECORD_SAMPLE` (8) for that one.
mod common;

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
        let out = common::run_with_stdin(
            common::rprof().args(["report", "--stdio", "-i", "-"]),
            Some(&bytes),
        );
        assert_eq!(samples(&out), *expected, "{name}");
    }
}

/// The (offset, type, size) of each record of the data section of the perf.data file `bytes` (file mode).
fn records(bytes: &[u8]) -> Vec<(usize, u32, usize)> {
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
    let (mut at, end) = (word(40), word(40) + word(48));
    let mut out = Vec::new();
    while at < end {
        let kind = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        let size = u16::from_le_bytes([bytes[at + 6], bytes[at + 7]]) as usize;
        out.push((at, kind, size));
        at += size;
    }
    out
}

/// `rprof report -i INPUT` (stdin: `stdin`), killed after 60 s so that a hang fails the test; returns
/// (success, stdout, stderr).
fn report_within_a_minute(input: &str, stdin: Option<Vec<u8>>) -> (bool, String, String) {
    let mut cmd = assert_cmd::Command::new(env!("CARGO_BIN_EXE_rprof"));
    cmd.args(["report", "--stdio", "-i", input])
        .timeout(std::time::Duration::from_secs(60));
    if let Some(bytes) = stdin {
        cmd.write_stdin(bytes);
    }
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.code().is_some(),
        "rprof report -i {input} was killed (a hang?): {stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.success(), stdout, stderr)
}

/// Check that every unreadable record (a corrupt zstd frame, a record that runs past the end of its data
/// section, a record of an invalid size, a pipe-mode stream cut inside a record, and a file cut inside its
/// only compressed record, so that nothing can be read) is an error with a non-zero exit that names the file,
/// the offset and the fix, within a minute (never a hang, never an empty table that exits 0).
#[test]
fn unreadable_records_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let fixture =
        |name: &str| std::fs::read(common::fixtures().join("perf-data").join(name)).unwrap();
    let compressed = fixture("sleep.compressed.data");
    let (zstd_at, _, zstd_size) = *records(&compressed)
        .iter()
        .find(|r| r.1 == 81)
        .expect("a COMPRESSED record");
    let plain = fixture("sleep.data");
    let plain_records = records(&plain);
    let (last_at, _, last_size) = *plain_records.last().unwrap();
    let (first_at, _, _) = plain_records[0];
    let pipe = fixture("sleep.compressed.pipe.data");
    type Case = (&'static str, Vec<u8>, String, &'static str);
    let mut cases: Vec<Case> = Vec::new();
    let mut corrupt = compressed.clone();
    for b in &mut corrupt[zstd_at + 40..zstd_at + zstd_size - 8] {
        *b ^= 0x5a;
    }
    let at = format!("compressed record at byte {zstd_at}");
    cases.push((
        "corrupt zstd",
        corrupt,
        at,
        "copy it again, or record again",
    ));
    let mut past_end = plain.clone();
    let longer = (last_size + 64) as u16;
    past_end[last_at + 6..last_at + 8].copy_from_slice(&longer.to_le_bytes());
    let at = format!("inside the record at byte {last_at}");
    cases.push((
        "record past the end",
        past_end,
        at,
        "copy it again, or record again",
    ));
    let mut bad_size = plain.clone();
    bad_size[first_at + 6..first_at + 8].copy_from_slice(&3u16.to_le_bytes());
    let at = format!("the record at byte {first_at} has an invalid size 3");
    cases.push((
        "invalid size",
        bad_size,
        at,
        "copy it again, or record again",
    ));
    let cut = pipe.len() - 100;
    let at = "the data section is truncated inside the record at byte".to_string();
    let fix = "record to a file (-o FILE)";
    cases.push(("pipe cut", pipe[..cut].to_vec(), at, fix));
    let at = format!("inside the record at byte {zstd_at}");
    cases.push((
        "nothing read",
        compressed[..zstd_at + zstd_size / 2].to_vec(),
        at,
        "no sample could be read from it: record again",
    ));
    for (what, bytes, at, fix) in cases {
        let path = dir.path().join("bad.data");
        std::fs::write(&path, &bytes).unwrap();
        let path = path.to_str().unwrap();
        let mut runs = vec![(path.to_string(), report_within_a_minute(path, None))];
        if what == "pipe cut" {
            let stdin = report_within_a_minute("-", Some(bytes.clone()));
            runs.push(("/dev/stdin".to_string(), stdin));
        }
        for (name, (success, stdout, stderr)) in runs {
            assert!(!success, "{what} ({name}): exit 0 with {stdout}{stderr}");
            assert!(
                stderr.contains(&name) && stderr.contains(&at) && stderr.contains(fix),
                "{what} ({name}): the error names the file, {at:?} and the fix {fix:?}: {stderr}"
            );
        }
    }
}

/// The event name of perf report's `# Samples: N  of event 'NAME'` line.
fn perf_report_event(report: &str) -> Option<String> {
    let line = report.lines().find(|l| l.starts_with("# Samples: "))?;
    let (_, name) = line.split_once(" of event '")?;
    Some(name.trim_end_matches('\'').to_string())
}

/// Check that the `cycles:ppp` recordings (perf record's default event on a PMU with precise events) name
/// their events in `rprof evlist` and in `rprof report --sort event` by the names the files hold (their
/// EVENT_DESC), which is what perf report prints: `'cycles:P'` in `perf report`'s `# Samples: 8  of event`
/// line for sleep.compressed.pipe.data, the one perf 6.1 reports, checked in the same run. (perf 6.1's
/// `perf evlist` of a pipe-mode file prints names it derives from the attrs, `cycles:ppp` and `dummy:uH`,
/// since it does not read the stream's feature records; that is the name in this fixture set's README.)
#[test]
fn cycles_ppp_recordings_name_their_events() {
    let expected: [(&str, &[&str]); 6] = [
        ("sleep.data", &["cycles:Pu"]),
        ("sleep.compressed.data", &["cycles:P"]),
        ("sleep.compressed2.data", &["cycles:Pu"]),
        ("sleep.compressed.pipe.data", &["cycles:P"]),
        ("sleep.compressed2.pipe.data", &["cycles:P"]),
        ("fibo.compressed2.pipe.data", &["cycles:P", "dummy:u"]),
    ];
    for (name, events) in expected {
        let path = common::fixtures().join("perf-data").join(name);
        let path = path.to_str().unwrap();
        let evlist = common::rprof_ok(&["evlist", "-i", path]);
        assert_eq!(evlist.lines().collect::<Vec<_>>(), events, "{name}");
        let report = common::rprof_ok(&["report", "--stdio", "--sort", "event", "-i", path]);
        let rows: Vec<&str> = report
            .lines()
            .filter(|l| !l.starts_with('#') && l.contains('%'))
            .filter_map(|l| l.split_whitespace().nth(1))
            .collect();
        // Only the sampled event has samples (the dummy event carries side-band records).
        assert_eq!(rows, &events[..1], "{name}:\n{report}");
    }
    if !common::perf_tool("cycles_ppp_recordings_name_their_events") {
        return;
    }
    let path = common::fixtures()
        .join("perf-data")
        .join("sleep.compressed.pipe.data");
    let perf = std::process::Command::new("perf")
        .args(["report", "--stdio", "-i"])
        .arg(&path)
        .output()
        .unwrap();
    let theirs = perf_report_event(&String::from_utf8_lossy(&perf.stdout));
    let ours = common::rprof_ok(&["evlist", "-i", path.to_str().unwrap()]);
    assert_eq!(
        theirs.as_deref(),
        ours.lines().next(),
        "perf report vs rprof evlist"
    );
}
