//! Each recording's attrs as the readers need them (the file reader and the live decoder): how a record finds
//! its attr, what each attr says about its records, and how the sampled event fired.
use super::convert::{AttrInfo, SIMPLE_SAMPLE_FIELDS};
use super::{Sampling, OFF_CPU_EVENT};
use byteorder::LittleEndian;
use linux_perf_data::linux_perf_event_reader::{
    get_record_id, get_record_identifier, AttrFlags, Endianness, PerfEventType, RawData,
    RecordIdParseInfo, RecordParseInfo, RecordType, SamplingPolicy, SoftwareCounterType,
};
use linux_perf_data::AttributeDescription;
use std::collections::HashMap;

/// How a record finds its attr (as linux-perf-data does it).
pub(super) enum AttrLookup {
    /// One attr: every record belongs to it.
    Only,
    /// Several attrs whose records hold the sample id at the same place.
    SameLayout(RecordIdParseInfo),
    /// Several attrs, all with PERF_SAMPLE_IDENTIFIER (the id is first in a SAMPLE, last elsewhere).
    Identifier { sample_id_all: bool },
}

/// The attr index of a kernel record (0 when its id is unknown, as linux-perf-data does).
pub(super) fn attr_index(
    lookup: &AttrLookup,
    id_to_attr: &HashMap<u64, usize>,
    record_type: RecordType,
    body: &[u8],
) -> usize {
    let id = match lookup {
        AttrLookup::Only => return 0,
        AttrLookup::SameLayout(info) => {
            get_record_id::<LittleEndian>(record_type, RawData::Single(body), info)
        }
        AttrLookup::Identifier { sample_id_all } => get_record_identifier::<LittleEndian>(
            record_type,
            RawData::Single(body),
            *sample_id_all,
        ),
    };
    id.and_then(|id| id_to_attr.get(&id).copied()).unwrap_or(0)
}

/// What the reader needs of each attr.
pub(super) fn attr_infos(descs: &[AttributeDescription], names: &[String]) -> Vec<AttrInfo> {
    descs
        .iter()
        .enumerate()
        .map(|(index, desc)| AttrInfo {
            sample_type: desc.attr.sample_format.bits(),
            read_format: desc.attr.read_format.bits(),
            default_period: match desc.attr.sampling_policy {
                SamplingPolicy::Period(p) => p.get(),
                _ => 1,
            },
            parse_info: RecordParseInfo::new(&desc.attr, Endianness::LittleEndian),
            simple_samples: desc.attr.sample_format.bits() & !SIMPLE_SAMPLE_FIELDS == 0,
            off_cpu: names[index] == OFF_CPU_EVENT,
            index: u16::try_from(index).unwrap_or(u16::MAX),
        })
        .collect()
}

/// How records find their attr (linux-perf-data has checked that records of several attrs can be told apart).
pub(super) fn attr_lookup(attrs: &[AttrInfo], descs: &[AttributeDescription]) -> AttrLookup {
    let first = &attrs[0].parse_info;
    if attrs.len() == 1 {
        AttrLookup::Only
    } else if attrs
        .iter()
        .all(|a| a.parse_info.id_parse_info == first.id_parse_info)
    {
        AttrLookup::SameLayout(first.id_parse_info)
    } else {
        AttrLookup::Identifier {
            sample_id_all: descs[0].attr.flags.contains(AttrFlags::SAMPLE_ID_ALL),
        }
    }
}

/// An attr's `-F` or period; None for an attr that does not sample.
pub(super) fn policy_of(policy: &SamplingPolicy) -> Option<super::SamplingPolicy> {
    match policy {
        SamplingPolicy::Frequency(f) => Some(super::SamplingPolicy::Frequency(*f)),
        SamplingPolicy::Period(p) => Some(super::SamplingPolicy::Period(p.get())),
        SamplingPolicy::NoSampling => None,
    }
}

/// How the sampled event fired, from the first attr other than the off-CPU event.
pub(super) fn sampling_of(descs: &[AttributeDescription], names: &[String]) -> Option<Sampling> {
    let (desc, _) = descs
        .iter()
        .zip(names)
        .find(|(_, name)| *name != OFF_CPU_EVENT)?;
    let policy = policy_of(&desc.attr.sampling_policy)?;
    let clock = matches!(
        desc.attr.type_,
        PerfEventType::Software(SoftwareCounterType::CpuClock | SoftwareCounterType::TaskClock)
    );
    Some(Sampling { policy, clock })
}
