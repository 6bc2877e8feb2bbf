//! The records of a recording session as they leave the rings: counted, noted (mapped executables for the
//! BUILD_ID section), unwound in DWARF mode, and appended to the recording with a FINISHED_ROUND per round.
use super::dwarf::DwarfState;
use super::{RecordError, PROT_EXEC};
use crate::perf::{self, record_type, EventInfos, Handler, RawRecord};
use crate::recording::{self, Writer};
use std::collections::BTreeSet;

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

/// Where the records go: the recording, through the online DWARF unwinder in DWARF mode.
pub(super) struct Stream {
    pub(super) writer: Writer,
    pub(super) st: Collected,
    pub(super) dwarf: Option<DwarfState>,
}

impl Handler<()> for Stream {
    type Error = RecordError;

    /// Count the record and append it. In DWARF mode records go through the time-ordered merge first, so that
    /// a mapping is known before the samples that run in it.
    fn record(&mut self, _: &EventInfos<()>, rec: RawRecord<'_>) -> Result<(), RecordError> {
        let st = &mut self.st;
        match rec.kind {
            record_type::SAMPLE => st.samples += 1,
            record_type::LOST => st.lost += body_u64(&rec, 8),
            record_type::LOST_SAMPLES => st.lost_samples += body_u64(&rec, 0),
            record_type::THROTTLE => st.throttled += 1,
            record_type::MMAP2 => note_mmap2(&rec, st),
            _ => {}
        }
        match &mut self.dwarf {
            Some(d) => {
                d.queue(&rec);
                Ok(())
            }
            None => Ok(self.writer.write_record(&rec.parts())?),
        }
    }

    /// Release what is in order (everything at the end) and mark the round with FINISHED_ROUND.
    fn end_round(&mut self, records: usize, last: bool) -> Result<(), RecordError> {
        if let Some(d) = &mut self.dwarf {
            d.release(&mut self.writer, last)?;
        }
        if records > 0 {
            self.writer
                .write_record(&[&recording::encode_finished_round()])?;
        }
        Ok(self.writer.flush_if_due()?)
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
