//! Event names in the data section: PERF_RECORD_EVENT_UPDATE records of type NAME.
//!
//! The EVENT_DESC feature section, which names each attr's event, is written when a recording finishes; a
//! recorder killed before that leaves attrs without names, and the off-CPU event (`offcpu-time`) would read
//! as its kernel event (`context-switches`), its nanoseconds off CPU taken for samples. So [`super::Writer`]
//! also names every event at the start of the data section with the record perf itself uses in pipe mode:
//! `perf report` and `perf script` (file mode too) apply it to the event whose id it carries, and the reader
//! here takes names from it for attrs that EVENT_DESC does not name.
use linux_perf_data::AttributeDescription;
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;

/// PERF_RECORD_EVENT_UPDATE.
pub(super) const PERF_RECORD_EVENT_UPDATE: u32 = 78;
/// PERF_EVENT_UPDATE__NAME: the update carries the event's name.
const UPDATE_NAME: u64 = 2;
/// How much of the start of a data section is searched for names: rprof writes them first, a few dozen
/// bytes each.
const SEARCHED: u64 = 64 << 10;

/// A PERF_RECORD_EVENT_UPDATE naming the event of sample id `id` (header, update type, id, the name with its
/// NUL, padded to 8 bytes).
pub(super) fn encode_name(id: u64, name: &str) -> Vec<u8> {
    let mut name = name.as_bytes().to_vec();
    name.push(0);
    name.resize(name.len().next_multiple_of(8), 0);
    let size = 8 + 16 + name.len();
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(&PERF_RECORD_EVENT_UPDATE.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&u16::try_from(size).unwrap_or(u16::MAX).to_le_bytes());
    out.extend_from_slice(&UPDATE_NAME.to_le_bytes());
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&name);
    out
}

/// The (id, name) of an EVENT_UPDATE record of type NAME (the whole record, header included).
pub(super) fn parse_name(record: &[u8]) -> Option<(u64, String)> {
    let word = |at: usize| Some(u64::from_le_bytes(record.get(at..at + 8)?.try_into().ok()?));
    if word(8)? != UPDATE_NAME {
        return None;
    }
    let id = word(16)?;
    let text = record.get(24..)?;
    let end = text.iter().position(|&b| b == 0)?;
    let name = std::str::from_utf8(&text[..end]).ok()?;
    (!name.is_empty()).then(|| (id, name.to_string()))
}

/// The event names (by sample id) of the EVENT_UPDATE records in the first [`SEARCHED`] bytes of the data
/// section at `offset` (`len` bytes long). A read error or a record that does not fit ends the search.
pub(super) fn names_at_start(file: &File, offset: u64, len: u64) -> HashMap<u64, String> {
    let mut names = HashMap::new();
    let mut buf = vec![0u8; len.min(SEARCHED) as usize];
    let Ok(got) = file.read_at(&mut buf, offset) else {
        return names;
    };
    buf.truncate(got);
    let mut at = 0;
    while let Some(header) = buf.get(at..at + 8) {
        let record_type = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
        let size = usize::from(u16::from_le_bytes([header[6], header[7]]));
        let Some(record) = buf.get(at..at + size).filter(|_| size >= 8) else {
            break;
        };
        if record_type == PERF_RECORD_EVENT_UPDATE {
            names.extend(parse_name(record));
        }
        at += size;
    }
    names
}

/// The event name of each attr: from EVENT_DESC, else from the EVENT_UPDATE records at the start of the data
/// section (`in_stream`, read only when EVENT_DESC misses a name: a recording killed before it was written),
/// found by one of the attr's ids as perf finds them (any id when there is one attr), else `[unknown]`.
pub(super) fn event_names(
    descs: &[AttributeDescription],
    ids: &[Vec<u64>],
    in_stream: impl FnOnce() -> HashMap<u64, String>,
) -> Vec<String> {
    let in_stream = match descs.iter().any(|d| d.name().is_none()) {
        true => in_stream(),
        false => HashMap::new(),
    };
    let only = descs.len() == 1;
    descs
        .iter()
        .zip(ids)
        .map(|(desc, ids)| {
            let streamed = match only {
                true => in_stream.values().next(),
                false => ids.iter().find_map(|id| in_stream.get(id)),
            };
            desc.name()
                .or(streamed.map(String::as_str))
                .unwrap_or("[unknown]")
                .to_string()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::{
        encode_sample, Event, FileAttr, Reader, SampleFields, Writer, OFF_CPU_EVENT,
    };
    use linux_perf_data::linux_perf_event_reader::constants::{
        PERF_SAMPLE_IP, PERF_SAMPLE_PERIOD, PERF_SAMPLE_TID, PERF_SAMPLE_TIME,
    };

    /// A cpu-clock attr (PERF_ATTR_SIZE_VER0 bytes) with `sample_type`, period 1000 and sample_id_all.
    fn attr_bytes(sample_type: u64) -> Vec<u8> {
        let mut attr = vec![0u8; 64];
        attr[0..4].copy_from_slice(&1u32.to_le_bytes());
        attr[4..8].copy_from_slice(&64u32.to_le_bytes());
        attr[16..24].copy_from_slice(&1000u64.to_le_bytes());
        attr[24..32].copy_from_slice(&sample_type.to_le_bytes());
        attr[40..48].copy_from_slice(&(1u64 << 18).to_le_bytes());
        attr
    }

    /// Check that a name record comes back with its id and name, padded to 8 bytes, and that other update
    /// types are not taken for names.
    #[test]
    fn name_records_round_trip() {
        let rec = encode_name(42, "offcpu-time");
        assert_eq!(rec.len() % 8, 0);
        assert_eq!(usize::from(u16::from_le_bytes([rec[6], rec[7]])), rec.len());
        assert_eq!(parse_name(&rec), Some((42, "offcpu-time".to_string())));
        let mut unit = rec.clone();
        unit[8] = 0; // PERF_EVENT_UPDATE__UNIT
        assert_eq!(parse_name(&unit), None);
    }

    /// Check that a recording whose writer was never finished (no EVENT_DESC, the state a SIGKILL leaves)
    /// still names its two events, from the EVENT_UPDATE records the writer puts first in the data section,
    /// and tells their samples apart by their ids: the second event's (offcpu-time) are off-CPU samples.
    #[test]
    fn unfinished_recording_names_its_events_and_tells_them_apart() {
        let st =
            PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_PERIOD | (1 << 16);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("killed.data");
        let attrs = vec![
            FileAttr {
                attr: attr_bytes(st),
                ids: vec![11, 13],
                name: "cpu-clock".into(),
            },
            FileAttr {
                attr: attr_bytes(st),
                ids: vec![12, 14],
                name: OFF_CPU_EVENT.into(),
            },
        ];
        let mut w = Writer::create(&path, attrs).unwrap();
        for (time, id) in [(1u64, 11u64), (2, 14)] {
            let sample = SampleFields {
                ip: 0x1000,
                pid: 7,
                tid: 7,
                time,
                id,
                period: 1000 * time,
                ..SampleFields::default()
            };
            w.write_record(&[&encode_sample(st, &sample)]).unwrap();
        }
        drop(w); // killed: no finish, the buffer reaches the file as a flush would
        let mut r = Reader::open(&path).unwrap();
        assert_eq!(r.event_names(), ["cpu-clock", OFF_CPU_EVENT]);
        let mut off_cpu = Vec::new();
        while let Ok(Some(event)) = r.next_event() {
            if let Event::Sample(s) = event {
                off_cpu.push((s.attr, s.off_cpu));
            }
        }
        assert_eq!(off_cpu, [(0, false), (1, true)]);
    }
}
