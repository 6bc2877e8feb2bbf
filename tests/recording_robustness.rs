//! The Reader on truncated and corrupted recordings: it must never panic, and must report an error rather
//! than silently return fewer events.
mod recording_common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::Instant;

use recording_common::*;
use rprof::recording::Event;

/// Read `path` to the end, turning a panic into a test failure that names `what`.
fn read_no_panic(path: &Path, what: &str) -> (usize, bool) {
    match catch_unwind(AssertUnwindSafe(|| read_all(path))) {
        Ok((events, err)) => {
            if let Some(e) = &err {
                assert!(
                    e.to_string().contains(&path.display().to_string()),
                    "error does not name the file: {e}"
                );
            }
            (events.len(), err.is_some())
        }
        Err(_) => panic!("the reader panicked on {what}"),
    }
}

/// The end of the data section, from the header.
fn data_end(bytes: &[u8]) -> usize {
    let word =
        |i: usize| u64::from_le_bytes(bytes[8 + 8 * i..16 + 8 * i].try_into().unwrap()) as usize;
    word(4) + word(5)
}

/// Cut `original` at every offset of the header, attrs, first `dense_data` data bytes and the feature
/// sections, and every `stride` bytes in the rest of the data section: no panic, an error for every cut, and
/// (inside the data section) the events before the cut, never fewer for a longer prefix.
fn check_truncations(original: &[u8], dir: &Path, dense_data: usize, stride: usize) {
    let full_events = {
        let p = dir.join("full.data");
        std::fs::write(&p, original).unwrap();
        let (n, err) = read_no_panic(&p, "the whole file");
        assert!(!err, "the whole file reads without error");
        n
    };
    let path = dir.join("cut.data");
    let mut last_events = 0;
    let mut cut = 0;
    let data_end = data_end(original);
    let data_offset = u64::from_le_bytes(original[40..48].try_into().unwrap()) as usize;
    while cut < original.len() {
        std::fs::write(&path, &original[..cut]).unwrap();
        let (events, err) =
            read_no_panic(&path, &format!("a cut at byte {cut} of {}", original.len()));
        assert!(
            err,
            "a cut at byte {cut} of {} gave no error ({events} events)",
            original.len()
        );
        if cut <= data_end {
            assert!(
                events >= last_events,
                "cut at {cut}: {events} events, a shorter cut gave {last_events}"
            );
            last_events = events;
        }
        let dense = cut < data_offset + dense_data || cut + 64 >= data_end;
        cut += if dense { 1 } else { stride };
    }
    // A cut just before the end of the data section still yields nearly everything.
    std::fs::write(&path, &original[..data_end - 1]).unwrap();
    let (events, _) = read_no_panic(&path, "a cut one byte before the data end");
    assert!(
        events + 2 >= full_events,
        "{events} of {full_events} events before the cut"
    );
}

/// A deterministic xorshift64 generator.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Flip `count` random bytes (one at a time, each on a fresh copy) and read to the end: no panic.
fn check_flips(original: &[u8], dir: &Path, seed: u64, count: usize) {
    let path = dir.join("flip.data");
    let mut rng = XorShift(seed);
    let mut bytes = original.to_vec();
    for i in 0..count {
        // Half the flips land in the header, attrs and feature sections, where a flip matters most.
        let at = if i % 2 == 0 {
            let meta_len = 512.min(bytes.len());
            let tail = bytes.len() - data_end(original).min(bytes.len());
            let r = rng.next() as usize % (meta_len + tail.max(1));
            if r < meta_len {
                r
            } else {
                (data_end(original) + r - meta_len).min(bytes.len() - 1)
            }
        } else {
            rng.next() as usize % bytes.len()
        };
        let x = (rng.next() % 255 + 1) as u8;
        bytes[at] ^= x;
        std::fs::write(&path, &bytes).unwrap();
        read_no_panic(&path, &format!("flip {i}: byte {at} ^= {x:#x}"));
        bytes[at] ^= x;
    }
}

/// Check that a `perf record -g` file cut at every offset of its header, attrs, first KiB of records and
/// feature sections and every 7 bytes elsewhere, or with 2500 bytes flipped, never panics the reader, and
/// every cut gives an error after the events before it.
#[test]
fn perf_record_file_truncated_and_flipped() {
    if !perf_available("perf_record_file_truncated_and_flipped") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let binary = build_spin(dir.path());
    let path = dir.path().join("perf.data");
    perf_record_spin(&binary, &path, 150);
    let original = std::fs::read(&path).unwrap();
    let (events, _) = read_all(&path);
    assert!(
        events.iter().any(|e| matches!(e, Event::Sample(_))),
        "the recording has samples"
    );
    let start = Instant::now();
    check_truncations(&original, dir.path(), 1024, 7);
    check_flips(&original, dir.path(), 0x9e37_79b9_7f4a_7c15, 2500);
    eprintln!(
        "{} bytes: truncations and flips in {:?}",
        original.len(),
        start.elapsed()
    );
}

/// Check that a Writer-made file cut at every offset of its header, attrs, first KiB of records and feature
/// sections and every 5 bytes elsewhere, or with 2500 bytes flipped, never panics the reader, and every cut
/// gives an error after the events before it.
#[test]
fn writer_file_truncated_and_flipped() {
    let dir = tempfile::tempdir().unwrap();
    let binary = build_spin(dir.path());
    let path = dir.path().join("w.data");
    write_spin_recording(&path, &binary, 60).unwrap();
    let original = std::fs::read(&path).unwrap();
    let start = Instant::now();
    check_truncations(&original, dir.path(), 1024, 5);
    check_flips(&original, dir.path(), 0x1234_5678_9abc_def1, 2500);
    eprintln!(
        "{} bytes: truncations and flips in {:?}",
        original.len(),
        start.elapsed()
    );
}

/// Check that a recording whose writer never called finish (killed) yields its records and then an error
/// saying it was not finished.
#[test]
fn unfinished_recording_reports_error() {
    use rprof::recording::{encode_comm, FileAttr, SampleId, Writer};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("killed.data");
    let attr = FileAttr {
        attr: attr_bytes(&cpu_clock_attr(), FREQ),
        ids: vec![],
        name: "cpu-clock".into(),
    };
    let mut w = Writer::create(&path, vec![attr]).unwrap();
    for i in 0..3 {
        let id = SampleId {
            pid: 9,
            tid: 9,
            time: i,
            ..Default::default()
        };
        w.write_record(&[&encode_comm(SAMPLE_TYPE, 9, 9, "k", false, &id)])
            .unwrap();
    }
    drop(w); // flushes the buffer, never writes the final header
    let (events, err) = read_all(&path);
    assert_eq!(events.len(), 3);
    let msg = err.expect("an error after the events").to_string();
    assert!(
        msg.contains("not finished") && msg.contains("killed.data"),
        "{msg}"
    );
}

/// A Writer-made file with one COMM, one MMAP2 and one SAMPLE (with callchain), and the offset of the COMM (the
/// first record after the event names).
fn small_file(dir: &Path) -> (Vec<u8>, usize) {
    use rprof::recording::{
        encode_comm, encode_mmap2, encode_sample, FileAttr, Meta, Mmap2, SampleFields, SampleId,
        Writer,
    };
    let path = dir.join("small.data");
    let attr = FileAttr {
        attr: attr_bytes(&cpu_clock_attr(), FREQ),
        ids: vec![1],
        name: "cpu-clock".into(),
    };
    let mut w = Writer::create(&path, vec![attr]).unwrap();
    let id = SampleId::default();
    w.write_record(&[&encode_comm(SAMPLE_TYPE, 1, 1, "abc", false, &id)])
        .unwrap(); // 48 bytes
    let m = Mmap2 {
        path: "/bin/true".into(),
        ..Default::default()
    };
    w.write_record(&[&encode_mmap2(SAMPLE_TYPE, &m, &id)])
        .unwrap(); // 8+64+16+24 = 112 bytes
    let s = SampleFields {
        callchain: vec![1, 2],
        ..Default::default()
    };
    w.write_record(&[&encode_sample(SAMPLE_TYPE, &s)]).unwrap();
    let meta = Meta {
        cmdline: vec!["a".into()],
        hostname: "h".into(),
        ..Default::default()
    };
    w.finish(&meta, &[]).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let mut first = u64::from_le_bytes(bytes[40..48].try_into().unwrap()) as usize;
    // Past the PERF_RECORD_EVENT_UPDATE (78) that names the event at the start of the data section.
    while bytes[first..first + 4] == 78u32.to_le_bytes() {
        first += u16::from_le_bytes([bytes[first + 6], bytes[first + 7]]) as usize;
    }
    (bytes, first)
}

/// The (offset, size) of feature section `bit` of a Writer-made file (features 2,3,4,7,11,12).
fn feature_section(bytes: &[u8], bit: usize) -> usize {
    let order = [2, 3, 4, 7, 11, 12];
    let i = order.iter().position(|&b| b == bit).unwrap();
    let at = data_end(bytes) + 16 * i;
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize
}

/// Check that the corruptions that would make linux-perf-data / linux-perf-event-reader panic or allocate
/// without bound (huge callchain count, MMAP2 build-id length > 20, AUXTRACE with a huge size, huge counts
/// in EVENT_DESC, CMDLINE and strings, zero attr size, overflowing section bounds) give errors naming the file.
#[test]
fn targeted_corruptions_give_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (good, data) = small_file(dir.path());
    let (comm, mmap2, sample) = (data, data + 48, data + 48 + 112);
    type Patch = Box<dyn Fn(&mut Vec<u8>)>;
    let put = |at: usize, v: &[u8]| -> Patch {
        let v = v.to_vec();
        Box::new(move |b: &mut Vec<u8>| b[at..at + v.len()].copy_from_slice(&v))
    };
    let event_desc = feature_section(&good, 12);
    let cmdline = feature_section(&good, 11);
    let hostname = feature_section(&good, 3);
    let cases: Vec<(&str, Patch)> = vec![
        // sample body: ip, pid/tid, time, cpu, period, then callchain nr
        (
            "callchain nr",
            put(sample + 8 + 40, &0x2000_0000_0000_0001u64.to_le_bytes()),
        ),
        (
            "callchain nr max",
            put(sample + 8 + 40, &u64::MAX.to_le_bytes()),
        ),
        (
            "mmap2 build id",
            Box::new(move |b: &mut Vec<u8>| {
                b[mmap2 + 5] |= 0x40; // PERF_RECORD_MISC_MMAP_BUILD_ID
                b[mmap2 + 8 + 32] = 0xff;
            }),
        ),
        (
            "auxtrace",
            Box::new(move |b: &mut Vec<u8>| {
                b[comm..comm + 4].copy_from_slice(&71u32.to_le_bytes());
                b[comm + 8..comm + 16].copy_from_slice(&u64::MAX.to_le_bytes());
            }),
        ),
        ("compressed", put(comm, &81u32.to_le_bytes())),
        ("record size 0", put(comm + 6, &[0, 0])),
        ("event_desc nr", put(event_desc, &u32::MAX.to_le_bytes())),
        (
            "event_desc attr size",
            put(event_desc + 4, &0u32.to_le_bytes()),
        ),
        (
            "event_desc nr_ids",
            put(event_desc + 8 + 128, &u32::MAX.to_le_bytes()),
        ),
        (
            "event_desc name len",
            put(event_desc + 8 + 128 + 4, &u32::MAX.to_le_bytes()),
        ),
        ("cmdline nr", put(cmdline, &u32::MAX.to_le_bytes())),
        ("hostname len", put(hostname, &u32::MAX.to_le_bytes())),
        ("attr size 0", put(16, &0u64.to_le_bytes())),
        ("attrs section huge", put(32, &u64::MAX.to_le_bytes())),
        ("data size max", put(48, &u64::MAX.to_le_bytes())),
        ("data offset max", put(40, &u64::MAX.to_le_bytes())),
        ("header size max", put(8, &u64::MAX.to_le_bytes())),
        ("all features", put(72, &[0xff; 32])),
        (
            "event_desc attr own size",
            put(event_desc + 8 + 4, &200u32.to_le_bytes()),
        ),
        (
            "event_desc attr sample_type all",
            put(event_desc + 8 + 24, &u64::MAX.to_le_bytes()),
        ),
    ];
    let path = dir.path().join("bad.data");
    for (name, patch) in cases {
        let mut bytes = good.clone();
        patch(&mut bytes);
        std::fs::write(&path, &bytes).unwrap();
        let (_, err) = read_no_panic(&path, name);
        assert!(err, "{name}: no error");
    }
}
