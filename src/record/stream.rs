//! The records of a recording session as they leave the rings: counted, noted (mapped executables for the
//! BUILD_ID section), put in time order when a stage needs it (the DWARF unwinder, the off-CPU accounting),
//! and appended to the recording with a FINISHED_ROUND per round.
use super::dwarf::DwarfState;
use super::offcpu::OffCpu;
use super::{RecordError, PROT_EXEC};
use crate::merge::OrderedMerge;
use crate::perf::{self, record_type, EventInfos, Handler, RawRecord};
use crate::recording::{self, SampleFields, Writer};
use linux_perf_event_reader::{EventRecord, RawData, RawEventRecord, RecordParseInfo, RecordType};
use std::collections::BTreeSet;

/// Which event of the session wrote a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Source {
    /// The sampling clock (and the side-band records).
    Clock,
    /// The `context-switches` event and its switch records (`--off-cpu`).
    Switches,
}

/// Counters and facts gathered while streaming records.
#[derive(Default)]
pub(super) struct Collected {
    pub(super) samples: u64,
    pub(super) lost: u64,
    pub(super) lost_samples: u64,
    pub(super) throttled: u64,
    /// Executable files that were mapped (for the BUILD_ID section).
    pub(super) paths: BTreeSet<(i32, String)>,
}

/// Records kept until they are in time order.
pub(super) struct Ordered {
    merge: OrderedMerge<(Source, u32, u16, Vec<u8>)>,
    /// How records of the session lay out their sample id (every attr of the session has the same).
    info: RecordParseInfo,
}

impl Ordered {
    pub(super) fn new(info: RecordParseInfo) -> Ordered {
        Ordered {
            merge: OrderedMerge::new(),
            info,
        }
    }
}

/// Where the records go: the recording, through the online DWARF unwinder in DWARF mode and the off-CPU
/// accounting with `--off-cpu`.
pub(super) struct Stream {
    pub(super) writer: Writer,
    pub(super) st: Collected,
    pub(super) dwarf: Option<DwarfState>,
    pub(super) offcpu: Option<OffCpu>,
    /// Time order for the stages above; None: records are written as they are read.
    pub(super) ordered: Option<Ordered>,
    /// The sample_type of the samples in the file.
    pub(super) file_sample_type: u64,
}

impl Handler<Source> for Stream {
    type Error = RecordError;

    /// Count the record and append it, or queue it for the time-ordered stages.
    fn record(
        &mut self,
        infos: &EventInfos<Source>,
        rec: RawRecord<'_>,
    ) -> Result<(), RecordError> {
        let source = match self.offcpu {
            Some(_) => infos.of(&rec).copied().unwrap_or(Source::Clock),
            None => Source::Clock,
        };
        let st = &mut self.st;
        match rec.kind {
            record_type::SAMPLE => st.samples += (source == Source::Clock) as u64,
            record_type::LOST => st.lost += body_u64(&rec, 8),
            record_type::LOST_SAMPLES => st.lost_samples += body_u64(&rec, 0),
            record_type::THROTTLE => st.throttled += 1,
            record_type::MMAP2 => note_mmap2(&rec, st),
            _ => {}
        }
        match &mut self.ordered {
            Some(o) => {
                let time = rec.event(&o.info).timestamp().unwrap_or(0);
                let bytes = rec.bytes.as_slice().into_owned();
                o.merge.push(time, (source, rec.kind, rec.misc, bytes));
                Ok(())
            }
            None => Ok(self.writer.write_record(&rec.parts())?),
        }
    }

    /// Release what is in order (everything at the end) and mark the round with FINISHED_ROUND.
    fn end_round(&mut self, records: usize, last: bool) -> Result<(), RecordError> {
        if let Some(o) = &mut self.ordered {
            let mut ready = Vec::new();
            match last {
                true => o.merge.drain(|_, r| ready.push(r)),
                false => o.merge.finish_round(|_, r| ready.push(r)),
            }
            let info = o.info;
            for (source, kind, misc, bytes) in ready {
                self.process(&info, source, kind, misc, &bytes)?;
            }
            if let Some(offcpu) = &mut self.offcpu {
                let mut out = Vec::new();
                offcpu.flush_old(&mut |s| out.push(s));
                if last {
                    offcpu.finish(&mut |s| out.push(s));
                }
                self.write_samples(out)?;
            }
        }
        if records > 0 {
            self.writer
                .write_record(&[&recording::encode_finished_round()])?;
        }
        Ok(self.writer.flush_if_due()?)
    }
}

impl Stream {
    /// One record, in time order: unwound (DWARF), turned into off-CPU time (switch samples and records), and
    /// written.
    fn process(
        &mut self,
        info: &RecordParseInfo,
        source: Source,
        kind: u32,
        misc: u16,
        bytes: &[u8],
    ) -> Result<(), RecordError> {
        let raw = RawEventRecord::new(RecordType(kind), misc, RawData::Single(&bytes[8..]), *info);
        let Ok(record) = raw.parse() else {
            return Ok(self.writer.write_record(&[bytes])?);
        };
        let mut out = Vec::new();
        match (&record, &mut self.offcpu) {
            (EventRecord::Sample(s), _) => {
                let fields = match &mut self.dwarf {
                    Some(d) => Some(d.unwind(s, misc)),
                    None if source == Source::Switches => Some(SampleFields::from_record(s, misc)),
                    None => None,
                };
                match (source, fields, &mut self.offcpu) {
                    (Source::Switches, Some(f), Some(offcpu)) => offcpu.switch_sample(f),
                    (_, Some(f), _) => out.push(f),
                    (_, None, _) => self.writer.write_record(&[bytes])?,
                }
                return self.write_samples(out);
            }
            (EventRecord::ContextSwitch(_), Some(offcpu)) => {
                let common = raw.common_data().unwrap_or_default();
                let (tid, time) = (common.tid.unwrap_or(0), common.timestamp.unwrap_or(0));
                let switch_out = misc & perf::misc::SWITCH_OUT != 0;
                let preempted = misc & perf::misc::SWITCH_OUT_PREEMPT != 0;
                offcpu.switch(tid as u32, time, switch_out, preempted, &mut |s| {
                    out.push(s)
                });
                // Switch records are read here, not stored: the samples they produce are.
                return self.write_samples(out);
            }
            (EventRecord::Exit(e), Some(offcpu)) => {
                let time = raw.timestamp().unwrap_or(0);
                offcpu.exit(e.tid as u32, time, &mut |s| out.push(s));
            }
            _ => {}
        }
        if let Some(d) = &mut self.dwarf {
            d.side_band(&record);
        }
        self.write_samples(out)?;
        Ok(self.writer.write_record(&[bytes])?)
    }

    fn write_samples(&mut self, samples: Vec<SampleFields>) -> Result<(), RecordError> {
        for s in samples {
            self.writer
                .write_record(&[&recording::encode_sample(self.file_sample_type, &s)])?;
        }
        Ok(())
    }
}

fn body_u64(rec: &perf::RawRecord<'_>, offset: usize) -> u64 {
    let body = rec.body();
    body.get(offset..offset + 8)
        .map(|b| u64::from_ne_bytes(b.as_slice().as_ref().try_into().unwrap_or([0; 8])))
        .unwrap_or(0)
}

fn note_mmap2(rec: &perf::RawRecord<'_>, st: &mut Collected) {
    use linux_perf_event_reader::Mmap2Record;
    if let Ok(m) = Mmap2Record::parse::<byteorder::NativeEndian>(rec.body(), rec.misc) {
        let path = String::from_utf8_lossy(&m.path.as_slice()).into_owned();
        if m.protection & PROT_EXEC != 0 && path.starts_with('/') {
            st.paths.insert((m.pid, path));
        }
    }
}
