//! Tests of the reader: time order across rounds and chunks, rprof's NS_PIDS section, attr sizes.
use super::*;
use crate::recording::data_section::CHUNK;
use crate::recording::{encode_finished_round, encode_sample, FileAttr, SampleFields, Writer};
use linux_perf_data::linux_perf_event_reader::constants::{
    PERF_SAMPLE_CALLCHAIN, PERF_SAMPLE_CPU, PERF_SAMPLE_IP, PERF_SAMPLE_PERIOD, PERF_SAMPLE_TID,
    PERF_SAMPLE_TIME,
};

/// A cpu-clock attr (PERF_ATTR_SIZE_VER0 bytes) with `sample_type`, period 1000 and sample_id_all.
fn attr_bytes(sample_type: u64) -> Vec<u8> {
    let mut attr = vec![0u8; 64];
    attr[0..4].copy_from_slice(&1u32.to_le_bytes()); // PERF_TYPE_SOFTWARE, config 0 = cpu-clock
    attr[4..8].copy_from_slice(&64u32.to_le_bytes());
    attr[16..24].copy_from_slice(&1000u64.to_le_bytes());
    attr[24..32].copy_from_slice(&sample_type.to_le_bytes());
    attr[40..48].copy_from_slice(&(1u64 << 18).to_le_bytes()); // sample_id_all
    attr
}

/// Check that records two CPUs wrote out of order within and across rounds come out in time order, all
/// of them, over a data section several read chunks long (records stay valid across buffer compaction).
#[test]
fn rounds_come_out_in_time_order_across_chunks() {
    let st = PERF_SAMPLE_IP
        | PERF_SAMPLE_TID
        | PERF_SAMPLE_TIME
        | PERF_SAMPLE_CPU
        | PERF_SAMPLE_PERIOD
        | PERF_SAMPLE_CALLCHAIN;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rounds.data");
    let attr = FileAttr {
        attr: attr_bytes(st),
        ids: vec![],
        name: "cpu-clock".into(),
    };
    let mut w = Writer::create(&path, vec![attr]).unwrap();
    let sample = |time: u64, cpu: u32| SampleFields {
        ip: time,
        pid: 7,
        tid: 7 + cpu,
        time,
        id: 0,
        cpu,
        period: 1000,
        callchain: vec![time; 8],
        misc: 2,
        raw: Vec::new(),
    };
    // Round r: CPU 0 has times [1000r, 1000r + 1000), then CPU 1 has [1000r - 990, 1000r + 10): each
    // round overlaps the one before, never the one before that (perf's FINISHED_ROUND contract).
    let rounds = 400u64;
    for r in 1..=rounds {
        for t in (1000 * r..1000 * r + 1000).step_by(20) {
            w.write_record(&[&encode_sample(st, &sample(t, 0))])
                .unwrap();
        }
        for t in (1000 * r - 990..1000 * r + 10).step_by(20) {
            w.write_record(&[&encode_sample(st, &sample(t, 1))])
                .unwrap();
        }
        w.write_record(&[&encode_finished_round()]).unwrap();
    }
    let data_size = w.data_size();
    assert!(
        data_size > 4 * CHUNK,
        "{data_size} bytes span several chunks"
    );
    w.finish(&Meta::default(), &[]).unwrap();

    let mut r = Reader::open(&path).unwrap();
    let mut times = Vec::new();
    while let Some(event) = r.next_event().unwrap() {
        let Event::Sample(s) = event else {
            panic!("only samples were written: {event:?}")
        };
        assert_eq!(
            s.callchain,
            vec![s.ip; 8],
            "the record at time {:?}",
            s.time
        );
        assert_eq!(s.tid - s.pid, s.cpu.unwrap());
        times.push(s.time.unwrap());
    }
    assert_eq!(times.len() as u64, rounds * 100);
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "time order");
}

/// Check that the host -> namespace pids given to the writer come back from the reader (rprof's NS_PIDS
/// section, bit 250, after the standard sections), and that a file without them has none.
#[test]
fn ns_pids_round_trip_through_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let attr = || FileAttr {
        attr: attr_bytes(PERF_SAMPLE_IP | PERF_SAMPLE_TID),
        ids: vec![],
        name: "cpu-clock".into(),
    };
    let path = dir.path().join("ns.data");
    // A data section of one record: an empty one is how an unfinished recording looks.
    let mut w = Writer::create(&path, vec![attr()]).unwrap();
    w.write_record(&[&encode_finished_round()]).unwrap();
    w.add_ns_pid(4242, 1);
    w.add_ns_pid(4250, 9);
    let meta = Meta {
        hostname: "host".into(),
        cmdline: vec!["rprof".into(), "record".into()],
        ..Meta::default()
    };
    w.finish(&meta, &[]).unwrap();
    let r = Reader::open(&path).unwrap();
    assert_eq!(r.ns_pids(), &HashMap::from([(4242, 1), (4250, 9)]));
    assert_eq!(r.meta().hostname, "host");
    assert_eq!(r.meta().cmdline, vec!["rprof", "record"]);

    let plain = dir.path().join("plain.data");
    let mut w = Writer::create(&plain, vec![attr()]).unwrap();
    w.write_record(&[&encode_finished_round()]).unwrap();
    w.finish(&meta, &[]).unwrap();
    assert!(Reader::open(&plain).unwrap().ns_pids().is_empty());
}

/// Check that an attr whose size is not one linux-perf-data reads exactly (here below PERF_ATTR_SIZE_VER0)
/// is refused at open, naming the file and the attr.
#[test]
fn attr_size_that_is_not_read_exactly_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("attr.data");
    let attr = FileAttr {
        attr: attr_bytes(PERF_SAMPLE_IP | PERF_SAMPLE_TID),
        ids: vec![],
        name: "cpu-clock".into(),
    };
    Writer::create(&path, vec![attr])
        .unwrap()
        .finish(&Meta::default(), &[])
        .unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let attrs_at = u64::from_le_bytes(bytes[24..32].try_into().unwrap()) as usize;
    assert!(Reader::open(&path).is_ok());
    bytes[attrs_at + 4..attrs_at + 8].copy_from_slice(&60u32.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let Err(e) = Reader::open(&path) else {
        panic!("an attr of size 60 was accepted")
    };
    let msg = e.to_string();
    assert!(
        msg.contains("attr.data") && msg.contains("attr 0 has an invalid size 60"),
        "{msg}"
    );
}
