//! Records as they are written, read back one at a time: the events of a recording that is still being made
//! (`rprof record --push` turns them into profiles while sampling goes on), from the same attrs the writer
//! got and through the same conversion as [`super::Reader`].
use std::collections::HashMap;

use byteorder::LittleEndian;
use linux_perf_data::linux_perf_event_reader::{
    get_record_timestamp, PerfEventAttr, RawData, RawEventRecord, RecordType,
};
use linux_perf_data::AttributeDescription;

use super::attrs::{attr_index, attr_infos, attr_lookup, sampling_of, AttrLookup};
use super::convert::{convert, read_u32, AttrInfo};
use super::{Event, FileAttr, RecordingError, Sampling};

/// Turns the bytes of one record (header included) into an [`Event`].
pub struct Decoder {
    attrs: Vec<AttrInfo>,
    lookup: AttrLookup,
    id_to_attr: HashMap<u64, usize>,
    sampling: Option<Sampling>,
}

impl Decoder {
    /// A decoder for the records of a recording with these attrs (as given to [`super::Writer::create`]).
    pub fn new(attrs: &[FileAttr]) -> Result<Decoder, RecordingError> {
        let mut descs = Vec::with_capacity(attrs.len());
        for a in attrs {
            let (attr, _) =
                PerfEventAttr::parse::<_, LittleEndian>(a.attr.as_slice()).map_err(|e| {
                    RecordingError::Corrupt {
                        path: "(records being recorded)".into(),
                        reason: format!("the attr of event {} does not parse: {e}", a.name),
                    }
                })?;
            descs.push(AttributeDescription {
                attr,
                name: Some(a.name.clone()),
                event_ids: a.ids.clone(),
            });
        }
        let names: Vec<String> = attrs.iter().map(|a| a.name.clone()).collect();
        let infos = attr_infos(&descs, &names);
        Ok(Decoder {
            lookup: attr_lookup(&infos, &descs),
            attrs: infos,
            id_to_attr: attrs
                .iter()
                .enumerate()
                .flat_map(|(index, a)| a.ids.iter().map(move |&id| (id, index)))
                .collect(),
            sampling: sampling_of(&descs, &names),
        })
    }

    /// How the recording's sampled event fires.
    pub fn sampling(&self) -> Option<Sampling> {
        self.sampling
    }

    /// The time of a record (None for records without one, such as synthesized ones), and its event (None
    /// for records of other types).
    pub fn decode(&self, record: &[u8]) -> Result<(Option<u64>, Option<Event>), String> {
        if record.len() < 8 {
            return Err(format!("a record of {} bytes is cut short", record.len()));
        }
        let record_type = RecordType(read_u32(record, 0));
        if record_type.is_user_type() {
            return Ok((None, None));
        }
        let body = &record[8..];
        let attr = &self.attrs[attr_index(&self.lookup, &self.id_to_attr, record_type, body)];
        let time = get_record_timestamp::<LittleEndian>(
            record_type,
            RawData::Single(body),
            &attr.parse_info,
        );
        let raw = RawEventRecord::new(
            record_type,
            u16::from_le_bytes([record[4], record[5]]),
            RawData::Single(body),
            attr.parse_info,
        );
        Ok((time, convert(attr, &raw)?))
    }
}
