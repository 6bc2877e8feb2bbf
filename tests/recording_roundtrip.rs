//! Writer/Reader roundtrip, interop with `perf report` / `perf script`, and reading `perf record -g` files.
mod recording_common;

use std::process::Command;

use recording_common::*;
use rprof::recording::{
    encode_comm, encode_finished_round, encode_mmap2, encode_sample, BuildIdEntry, CpuMode, Event,
    FileAttr, Meta, Mmap2, Reader, RecordingError, SampleFields, SampleId, Writer,
};

/// Check that COMM, MMAP2 and SAMPLE records written by the Writer read back field for field, with the
/// feature sections (hostname, osrelease, nrcpus, cmdline, build ids).
#[test]
fn roundtrip_every_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rt.data");
    let attr = FileAttr {
        attr: attr_bytes(&cpu_clock_attr(), FREQ),
        ids: vec![11, 12],
        name: "cpu-clock".into(),
    };
    assert_eq!(attr.attr.len(), 136);
    let mut w = Writer::create(&path, vec![attr]).unwrap();
    assert!(path.exists(), "create makes the file at once");

    let id = SampleId {
        pid: 100,
        tid: 101,
        time: 5_000,
        cpu: 1,
        id: 11,
    };
    w.write_record(&[&encode_comm(
        SAMPLE_TYPE,
        100,
        101,
        "worker-thread",
        true,
        &id,
    )])
    .unwrap();
    w.write_record(&[&encode_comm(
        SAMPLE_TYPE,
        100,
        102,
        "x",
        false,
        &SampleId { time: 5_001, ..id },
    )])
    .unwrap();
    let map = Mmap2 {
        pid: 100,
        tid: 101,
        start: 0x5555_0000_1000,
        len: 0x2345,
        pgoff: 0x1000,
        maj: 8,
        min: 1,
        ino: 777,
        prot: 5,
        flags: 2,
        path: "/usr/lib/libexample.so.1".into(),
        kernel: false,
    };
    w.write_record(&[&encode_mmap2(
        SAMPLE_TYPE,
        &map,
        &SampleId { time: 5_002, ..id },
    )])
    .unwrap();
    let kmap = Mmap2 {
        pid: -1,
        tid: 0,
        start: 0xffff_ffff_8100_0000,
        len: 0x100_0000,
        path: "[kernel.kallsyms]_text".into(),
        kernel: true,
        ..Default::default()
    };
    w.write_record(&[&encode_mmap2(
        SAMPLE_TYPE,
        &kmap,
        &SampleId { time: 5_003, ..id },
    )])
    .unwrap();
    let sample = SampleFields {
        ip: 0x5555_0000_1234,
        pid: 100,
        tid: 101,
        time: 6_000,
        id: 11,
        cpu: 1,
        period: 10_101_010,
        callchain: vec![
            PERF_CONTEXT_USER,
            0x5555_0000_1234,
            0x5555_0000_2000,
            0x5555_0000_2100,
        ],
        misc: PERF_RECORD_MISC_USER,
        raw: Vec::new(),
    };
    let bytes = encode_sample(SAMPLE_TYPE, &sample);
    let (a, b) = bytes.split_at(20);
    w.write_record(&[a, b]).unwrap();
    let ksample = SampleFields {
        ip: 0xffff_ffff_8100_1000,
        misc: 1,
        time: 6_001,
        callchain: vec![],
        ..sample.clone()
    };
    w.write_record(&[&encode_sample(SAMPLE_TYPE, &ksample)])
        .unwrap();
    w.write_record(&[&encode_finished_round()]).unwrap();
    let meta = Meta {
        hostname: "host-a".into(),
        os_release: "6.18.44".into(),
        nr_cpus_online: 2,
        nr_cpus_available: 8,
        cmdline: vec!["rprof".into(), "record".into(), "-F".into(), "99".into()],
    };
    let build_ids = vec![
        BuildIdEntry {
            pid: 100,
            misc: 2,
            build_id: (1..=20).collect(),
            path: "/usr/lib/libexample.so.1".into(),
        },
        BuildIdEntry {
            pid: -1,
            misc: 1,
            build_id: vec![0xab; 20],
            path: "[kernel.kallsyms]".into(),
        },
    ];
    let size = w.finish(&meta, &build_ids).unwrap();
    assert_eq!(size, std::fs::metadata(&path).unwrap().len());

    let mut r = Reader::open(&path).unwrap();
    let m = r.meta();
    assert_eq!(
        (m.hostname.as_str(), m.os_release.as_str()),
        ("host-a", "6.18.44")
    );
    assert_eq!((m.nr_cpus_online, m.nr_cpus_available), (2, 8));
    assert_eq!(m.cmdline, meta.cmdline);
    let ids = r.build_ids();
    assert_eq!(ids.len(), 2);
    assert_eq!(
        (ids[0].pid, ids[0].misc, ids[0].path.as_str()),
        (100, 2, "/usr/lib/libexample.so.1")
    );
    assert_eq!(ids[0].build_id, (1..=20).collect::<Vec<u8>>());
    assert_eq!(
        (ids[1].pid, ids[1].misc, ids[1].build_id.clone()),
        (-1, 1, vec![0xab; 20])
    );

    let mut events = Vec::new();
    while let Some(e) = r.next_event().unwrap() {
        events.push(e);
    }
    assert_eq!(events.len(), 6, "{events:#?}");
    match &events[0] {
        Event::Comm {
            pid,
            tid,
            name,
            exec,
        } => assert_eq!(
            (*pid, *tid, name.as_str(), *exec),
            (100, 101, "worker-thread", true)
        ),
        e => panic!("expected COMM, got {e:?}"),
    }
    match &events[1] {
        Event::Comm {
            pid,
            tid,
            name,
            exec,
        } => assert_eq!((*pid, *tid, name.as_str(), *exec), (100, 102, "x", false)),
        e => panic!("expected COMM, got {e:?}"),
    }
    match &events[2] {
        Event::Mmap {
            pid,
            tid,
            start,
            len,
            pgoff,
            path,
            build_id,
            cpu_mode,
        } => {
            assert_eq!(
                (*pid, *tid, *start, *len, *pgoff),
                (100, 101, map.start, map.len, map.pgoff)
            );
            assert_eq!(
                (path.as_str(), build_id, *cpu_mode),
                (map.path.as_str(), &None, CpuMode::User)
            );
        }
        e => panic!("expected MMAP, got {e:?}"),
    }
    match &events[3] {
        Event::Mmap {
            pid,
            start,
            len,
            path,
            cpu_mode,
            ..
        } => {
            assert_eq!(
                (*pid, *start, *len, path.as_str(), *cpu_mode),
                (
                    -1,
                    kmap.start,
                    kmap.len,
                    kmap.path.as_str(),
                    CpuMode::Kernel
                )
            );
        }
        e => panic!("expected kernel MMAP, got {e:?}"),
    }
    match &events[4] {
        Event::Sample(s) => {
            assert_eq!(
                (s.pid, s.tid, s.time, s.cpu, s.period, s.ip),
                (100, 101, Some(6_000), Some(1), 10_101_010, sample.ip)
            );
            assert_eq!(
                (s.cpu_mode, &s.callchain),
                (CpuMode::User, &sample.callchain)
            );
        }
        e => panic!("expected SAMPLE, got {e:?}"),
    }
    match &events[5] {
        Event::Sample(s) => assert_eq!(
            (s.ip, s.cpu_mode, s.callchain.len()),
            (ksample.ip, CpuMode::Kernel, 0)
        ),
        e => panic!("expected SAMPLE, got {e:?}"),
    }
    assert!(r.next_event().unwrap().is_none());
}

/// Check that the encoders produce the kernel layouts byte for byte (sizes, padding, trailer order, misc).
#[test]
fn encoder_layouts() {
    let id = SampleId {
        pid: 1,
        tid: 2,
        time: 3,
        cpu: 4,
        id: 5,
    };
    let comm = encode_comm(SAMPLE_TYPE, 1, 2, "abcdefg", true, &id);
    // header 8 + pid/tid 8 + "abcdefg\0" 8 + TID 8 + TIME 8 + CPU 8
    assert_eq!(comm.len(), 48);
    assert_eq!(u32::from_le_bytes(comm[0..4].try_into().unwrap()), 3);
    assert_eq!(u16::from_le_bytes(comm[4..6].try_into().unwrap()), 1 << 13);
    assert_eq!(u16::from_le_bytes(comm[6..8].try_into().unwrap()), 48);
    assert_eq!(&comm[16..24], b"abcdefg\0");
    assert_eq!(&comm[24..32], &[1, 0, 0, 0, 2, 0, 0, 0]);
    assert_eq!(u64::from_le_bytes(comm[32..40].try_into().unwrap()), 3);
    assert_eq!(&comm[40..48], &[4, 0, 0, 0, 0, 0, 0, 0]);
    // An 8-byte name needs a second 8-byte block for its NUL.
    assert_eq!(
        encode_comm(0, 1, 2, "abcdefgh", false, &id).len(),
        8 + 8 + 16
    );

    let m = Mmap2 {
        path: "/bin/x".into(),
        ..Default::default()
    };
    let rec = encode_mmap2(0, &m, &id);
    assert_eq!(rec.len(), 8 + 64 + 8);
    assert_eq!(
        u16::from_le_bytes(rec[4..6].try_into().unwrap()),
        2,
        "PERF_RECORD_MISC_USER"
    );
    let k = encode_mmap2(0, &Mmap2 { kernel: true, ..m }, &id);
    assert_eq!(
        u16::from_le_bytes(k[4..6].try_into().unwrap()),
        1,
        "PERF_RECORD_MISC_KERNEL"
    );

    // IDENTIFIER first in a sample; in the trailer ID before CPU and IDENTIFIER last.
    let st = (1 << 16) | (1 << 6) | (1 << 7) | 1;
    let s = encode_sample(
        st,
        &SampleFields {
            ip: 9,
            id: 5,
            cpu: 4,
            ..Default::default()
        },
    );
    assert_eq!(s.len(), 8 + 8 * 4);
    assert_eq!(u64::from_le_bytes(s[8..16].try_into().unwrap()), 5);
    assert_eq!(u64::from_le_bytes(s[16..24].try_into().unwrap()), 9);
    let c = encode_comm(st, 1, 2, "a", false, &id);
    assert_eq!(
        &c[c.len() - 24..],
        &[5, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0]
    );
    assert_eq!(encode_finished_round(), vec![68, 0, 0, 0, 0, 0, 8, 0]);
}

/// Check that an unwritable output path fails at create, naming the path and the -o fix.
#[test]
fn create_error_names_path() {
    let attr = FileAttr {
        attr: attr_bytes(&cpu_clock_attr(), FREQ),
        ids: vec![],
        name: "cpu-clock".into(),
    };
    let path = std::path::Path::new("/nonexistent-dir/out.data");
    let err = Writer::create(path, vec![attr]).err().expect("must fail");
    let msg = err.to_string();
    assert!(matches!(err, RecordingError::Create { .. }), "{msg}");
    assert!(
        msg.contains("/nonexistent-dir/out.data") && msg.contains("-o"),
        "{msg}"
    );
}

/// Check that `perf report` and `perf script` read a Writer-made recording and attribute its samples to
/// spin_leaf in the comm recording_spin.
#[test]
fn perf_reads_writer_output() {
    if !perf_available("perf_reads_writer_output") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let binary = build_spin(dir.path());
    let path = dir.path().join("w.data");
    write_spin_recording(&path, &binary, 40).unwrap();

    let script = Command::new("perf")
        .args(["script", "-F", "comm,tid,ip,sym", "-i"])
        .arg(&path)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&script.stdout);
    let err = String::from_utf8_lossy(&script.stderr);
    assert!(script.status.success(), "perf script failed: {err}");
    let sample_lines = out
        .lines()
        .filter(|l| l.contains("recording_spin") && l.contains("4242"))
        .count();
    assert_eq!(
        sample_lines, 40,
        "perf script output:\n{out}\nstderr:\n{err}"
    );
    assert!(
        out.contains("spin_leaf"),
        "perf script output:\n{out}\nstderr:\n{err}"
    );
    assert!(
        out.contains("spin_outer"),
        "callchain frames resolve too:\n{out}"
    );

    let report = Command::new("perf")
        .args(["report", "--stdio", "-i"])
        .arg(&path)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&report.stdout);
    let err = String::from_utf8_lossy(&report.stderr);
    assert!(report.status.success(), "perf report failed: {err}");
    assert!(
        out.contains("spin_leaf") && out.contains("recording_spin"),
        "perf report output:\n{out}\nstderr:\n{err}"
    );
    assert!(out.contains("# Samples: 40"), "perf report output:\n{out}");
}

/// Check that a `perf record -g` file of a frame-pointer C program reads back with samples, non-empty
/// callchains, the program's COMM and its MMAP.
#[test]
fn reads_perf_record_file() {
    if !perf_available("reads_perf_record_file") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let binary = build_spin(dir.path());
    let path = dir.path().join("perf.data");
    perf_record_spin(&binary, &path, 200);
    let facts = binary_facts(&binary);

    let mut r = Reader::open(&path).unwrap();
    assert!(!r.meta().hostname.is_empty());
    assert!(r.meta().cmdline.iter().any(|a| a == "record"));
    let (mut samples, mut with_chain, mut in_leaf, mut comm, mut mmap) = (0, 0, 0, false, false);
    let mut last_time = 0;
    while let Some(e) = r.next_event().unwrap() {
        match e {
            Event::Sample(s) => {
                samples += 1;
                with_chain += usize::from(!s.callchain.is_empty());
                let leaf = facts.leaf_addr..facts.leaf_addr + facts.leaf_size;
                in_leaf += usize::from(leaf.contains(&s.ip));
                let t = s.time.expect("perf samples have TIME");
                assert!(t >= last_time, "samples in time order");
                last_time = t;
            }
            Event::Comm { name, .. } if name == "recording_spin" => comm = true,
            Event::Mmap { path, .. } if path.ends_with("recording_spin") => mmap = true,
            _ => {}
        }
    }
    assert!(samples > 50, "only {samples} samples");
    assert!(
        with_chain * 10 >= samples * 9,
        "{with_chain} of {samples} samples have a callchain"
    );
    assert!(
        in_leaf * 2 >= samples,
        "{in_leaf} of {samples} samples in spin_leaf"
    );
    assert!(comm && mmap, "COMM {comm} MMAP {mmap}");
}

/// Check that in a kernel-mode sample the first user address (where user code stopped) is looked up as is,
/// not one byte back as return addresses are: at the very first byte of spin_leaf it names spin_leaf, not
/// what lies before it.
#[test]
fn first_user_address_after_kernel_is_exact() {
    let dir = tempfile::tempdir().unwrap();
    let binary = build_spin(dir.path());
    let path = dir.path().join("k.data");
    write_spin_samples(&path, &binary, 20, |facts, _| {
        let kernel_ip = 0xffff_ffff_8100_0000;
        let chain = vec![
            PERF_CONTEXT_KERNEL,
            kernel_ip,
            PERF_CONTEXT_USER,
            facts.leaf_addr,
            facts.outer_addr + 8,
        ];
        (kernel_ip, chain, PERF_RECORD_MISC_KERNEL)
    })
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rprof"))
        .args(["report", "--folded", "-i"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let folded = String::from_utf8_lossy(&out.stdout);
    assert!(
        folded.contains("spin_outer;spin_leaf;"),
        "spin_leaf is the user leaf under spin_outer:\n{folded}"
    );
}
