//! Helpers shared by the recording tests: the fixture build, an attr as bytes, a Writer-made recording of the
//! fixture binary, and `perf` availability.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use perf_event_open_sys::bindings::{
    perf_event_attr, PERF_ATTR_SIZE_VER8, PERF_COUNT_SW_CPU_CLOCK, PERF_SAMPLE_CALLCHAIN,
    PERF_SAMPLE_CPU, PERF_SAMPLE_IP, PERF_SAMPLE_PERIOD, PERF_SAMPLE_TID, PERF_SAMPLE_TIME,
    PERF_TYPE_SOFTWARE,
};
use rprof::recording::{
    encode_comm, encode_finished_round, encode_mmap2, encode_sample, BuildIdEntry, Event, FileAttr,
    Meta, Mmap2, Reader, RecordingError, SampleFields, SampleId, Writer,
};

pub const SAMPLE_TYPE: u64 = (PERF_SAMPLE_IP
    | PERF_SAMPLE_TID
    | PERF_SAMPLE_TIME
    | PERF_SAMPLE_CPU
    | PERF_SAMPLE_PERIOD
    | PERF_SAMPLE_CALLCHAIN) as u64;
pub const FREQ: u64 = 99;
pub const PERF_RECORD_MISC_USER: u16 = 2;
pub const PERF_CONTEXT_USER: u64 = -512i64 as u64;
pub const PERF_CONTEXT_KERNEL: u64 = -128i64 as u64;
pub const PERF_RECORD_MISC_KERNEL: u16 = 1;

/// The cpu-clock attr rprof would open: frequency 99, IP|TID|TIME|CPU|PERIOD|CALLCHAIN, sample_id_all,
/// mmap2, comm, task.
pub fn cpu_clock_attr() -> perf_event_attr {
    let mut attr = perf_event_attr {
        type_: PERF_TYPE_SOFTWARE,
        size: PERF_ATTR_SIZE_VER8,
        config: PERF_COUNT_SW_CPU_CLOCK as u64,
        sample_type: SAMPLE_TYPE,
        ..Default::default()
    };
    attr.__bindgen_anon_1.sample_freq = FREQ;
    attr.set_freq(1);
    attr.set_sample_id_all(1);
    attr.set_mmap(1);
    attr.set_mmap2(1);
    attr.set_comm(1);
    attr.set_task(1);
    attr
}

/// The attr's bytes as the kernel reads them: `#[repr(C)]` field order, little-endian, `attr.size` bytes.
/// Unions cannot be read without unsafe, so the sample period/frequency is passed in and the other unions
/// (wakeup, config1, config2, aux_action) are written as 0.
pub fn attr_bytes(attr: &perf_event_attr, period_or_freq: u64) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&attr.type_.to_le_bytes());
    b.extend_from_slice(&attr.size.to_le_bytes());
    b.extend_from_slice(&attr.config.to_le_bytes());
    b.extend_from_slice(&period_or_freq.to_le_bytes());
    b.extend_from_slice(&attr.sample_type.to_le_bytes());
    b.extend_from_slice(&attr.read_format.to_le_bytes());
    b.extend_from_slice(&attr._bitfield_1.get(0, 64).to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes()); // wakeup_events
    b.extend_from_slice(&attr.bp_type.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes()); // config1
    b.extend_from_slice(&0u64.to_le_bytes()); // config2
    b.extend_from_slice(&attr.branch_sample_type.to_le_bytes());
    b.extend_from_slice(&attr.sample_regs_user.to_le_bytes());
    b.extend_from_slice(&attr.sample_stack_user.to_le_bytes());
    b.extend_from_slice(&attr.clockid.to_le_bytes());
    b.extend_from_slice(&attr.sample_regs_intr.to_le_bytes());
    b.extend_from_slice(&attr.aux_watermark.to_le_bytes());
    b.extend_from_slice(&attr.sample_max_stack.to_le_bytes());
    b.extend_from_slice(&attr.__reserved_2.to_le_bytes());
    b.extend_from_slice(&attr.aux_sample_size.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes()); // aux_action
    b.extend_from_slice(&attr.sig_data.to_le_bytes());
    b.extend_from_slice(&attr.config3.to_le_bytes());
    b.extend_from_slice(&attr.config4.to_le_bytes());
    b.truncate(attr.size as usize);
    b
}

/// True when tests that need `perf` must fail instead of skipping.
pub fn require_privileged() -> bool {
    std::env::var("RPROF_REQUIRE_PRIVILEGED").is_ok_and(|v| v == "1")
}

/// Whether `perf` runs; prints why a test skips, or panics under RPROF_REQUIRE_PRIVILEGED=1.
pub fn perf_available(test: &str) -> bool {
    let ok = Command::new("perf")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            !require_privileged(),
            "{test}: perf is not installed but RPROF_REQUIRE_PRIVILEGED=1"
        );
        // Straight to stderr: the harness hides `eprintln!` of passing tests, and a skip must show.
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "SKIPPED {test}: perf is not installed");
    }
    ok
}

/// Build fixtures/recording_spin.c (non-PIE, frame pointers, -g) into `dir`.
pub fn build_spin(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/recording_spin.c");
    let out = dir.join("recording_spin");
    let status = Command::new("cc")
        .args([
            "-O1",
            "-g",
            "-fno-omit-frame-pointer",
            "-no-pie",
            "-Wl,--build-id",
            "-o",
        ])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("run cc");
    assert!(status.success(), "cc failed on {}", src.display());
    out
}

/// Where a function and the executable segment are in a (non-PIE) binary.
pub struct BinaryFacts {
    pub text_start: u64,
    pub text_len: u64,
    pub text_offset: u64,
    pub leaf_addr: u64,
    pub leaf_size: u64,
    pub outer_addr: u64,
    pub build_id: Vec<u8>,
}

pub fn binary_facts(binary: &Path) -> BinaryFacts {
    use object::{Object, ObjectSegment, ObjectSymbol, SegmentFlags};
    let data = std::fs::read(binary).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let sym = |name: &str| {
        file.symbols()
            .find(|s| s.name() == Ok(name))
            .unwrap_or_else(|| panic!("no {name}"))
    };
    let text = file
        .segments()
        .find(|s| matches!(s.flags(), SegmentFlags::Elf { p_flags } if p_flags & object::elf::PF_X != 0))
        .expect("an executable segment");
    let leaf = sym("spin_leaf");
    BinaryFacts {
        text_start: text.address(),
        text_len: text.size(),
        text_offset: text.file_range().0,
        leaf_addr: leaf.address(),
        leaf_size: leaf.size(),
        outer_addr: sym("spin_outer").address(),
        build_id: file.build_id().unwrap().unwrap().to_vec(),
    }
}

/// Write a recording of a pretend run of `binary` (pid 4242, comm "recording_spin"): COMM, MMAP2 of its text
/// at its real address, `samples` samples in spin_leaf (called from spin_outer), FINISHED_ROUND. Returns
/// the file size.
pub fn write_spin_recording(
    path: &Path,
    binary: &Path,
    samples: u64,
) -> Result<u64, RecordingError> {
    write_spin_samples(path, binary, samples, |facts, i| {
        let ip = facts.leaf_addr + 4 + (i % 8);
        (
            ip,
            vec![PERF_CONTEXT_USER, ip, facts.outer_addr + 8],
            PERF_RECORD_MISC_USER,
        )
    })
}

/// [`write_spin_recording`] with each sample's (ip, callchain, misc) from `sample(facts, i)`.
pub fn write_spin_samples(
    path: &Path,
    binary: &Path,
    samples: u64,
    sample: impl Fn(&BinaryFacts, u64) -> (u64, Vec<u64>, u16),
) -> Result<u64, RecordingError> {
    let facts = binary_facts(binary);
    let attr = FileAttr {
        attr: attr_bytes(&cpu_clock_attr(), FREQ),
        ids: vec![7],
        name: "cpu-clock".into(),
    };
    let mut w = Writer::create(path, vec![attr])?;
    let id = SampleId {
        pid: 4242,
        tid: 4242,
        time: 1_000,
        cpu: 1,
        id: 7,
    };
    w.write_record(&[&encode_comm(
        SAMPLE_TYPE,
        4242,
        4242,
        "recording_spin",
        true,
        &id,
    )])?;
    let map = Mmap2 {
        pid: 4242,
        tid: 4242,
        start: facts.text_start,
        len: facts.text_len,
        pgoff: facts.text_offset,
        prot: 5,
        flags: 2,
        path: binary.to_str().unwrap().to_string(),
        ..Default::default()
    };
    w.write_record(&[&encode_mmap2(
        SAMPLE_TYPE,
        &map,
        &SampleId { time: 1_001, ..id },
    )])?;
    for i in 0..samples {
        let (ip, callchain, misc) = sample(&facts, i);
        let s = SampleFields {
            ip,
            pid: 4242,
            tid: 4242,
            time: 2_000 + i * 10_101_010,
            id: 7,
            cpu: (i % 2) as u32,
            period: 10_101_010,
            callchain,
            misc,
            raw: Vec::new(),
        };
        let bytes = encode_sample(SAMPLE_TYPE, &s);
        // Exercise the two-part (ring wrap) path.
        let (a, b) = bytes.split_at(12);
        w.write_record(&[a, b])?;
        if i % 16 == 15 {
            w.write_record(&[&encode_finished_round()])?;
        }
    }
    w.write_record(&[&encode_finished_round()])?;
    let meta = Meta {
        hostname: "testhost".into(),
        os_release: "6.18.0-test".into(),
        nr_cpus_online: 2,
        nr_cpus_available: 4,
        cmdline: vec![
            "rprof".into(),
            "record".into(),
            "--".into(),
            binary.to_str().unwrap().into(),
        ],
    };
    let build_ids = [BuildIdEntry {
        pid: 4242,
        misc: PERF_RECORD_MISC_USER,
        build_id: facts.build_id.clone(),
        path: binary.to_str().unwrap().to_string(),
    }];
    w.finish(&meta, &build_ids)
}

/// Run `perf record -g` on the spin fixture for `ms` milliseconds into `out`.
pub fn perf_record_spin(binary: &Path, out: &Path, ms: u32) {
    let output = Command::new("perf")
        .args(["record", "-e", "cpu-clock", "-F", "999", "-g", "-o"])
        .arg(out)
        .arg("--")
        .arg(binary)
        .arg(ms.to_string())
        .output()
        .expect("run perf record");
    assert!(
        output.status.success(),
        "perf record failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Read every event of `path`: the events before the first error, and that error.
pub fn read_all(path: &Path) -> (Vec<Event>, Option<RecordingError>) {
    let mut reader = match Reader::open(path) {
        Ok(r) => r,
        Err(e) => return (Vec::new(), Some(e)),
    };
    let mut events = Vec::new();
    loop {
        match reader.next_event() {
            Ok(Some(e)) => events.push(e),
            Ok(None) => return (events, None),
            Err(e) => return (events, Some(e)),
        }
    }
}
