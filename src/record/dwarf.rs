//! Online DWARF unwinding while recording: samples with user registers and a stack copy come in, samples with
//! the unwound callchain go out. Records pass through the time-ordered merge first, so that a mapping is known to
//! the unwinder before the samples that run in it.
use super::RecordError;
use crate::merge::OrderedMerge;
use crate::perf::{self, Attr};
use crate::process::{AddressSpaces, FileId, Mapping, TaskEvent};
use crate::recording::{self, SampleFields, Writer};
use crate::unwind::dwarf::{DwarfStats, DwarfUnwinder, UserRegs};
use std::path::PathBuf;
use std::sync::Arc;

/// Online DWARF unwinding: raw samples with registers and a stack copy in, samples with a callchain out.
pub(super) struct DwarfState {
    unwinder: DwarfUnwinder,
    /// The processes' mappings, fed with every user mapping of the recording.
    spaces: AddressSpaces,
    merge: OrderedMerge<(u32, u16, Vec<u8>)>,
    info: linux_perf_event_reader::RecordParseInfo,
    file_sample_type: u64,
    pub(super) stats: DwarfStats,
}

impl DwarfState {
    pub(super) fn new(kernel: &Attr, file: &Attr, debug_dirs: Vec<PathBuf>) -> DwarfState {
        DwarfState {
            unwinder: DwarfUnwinder::new(debug_dirs),
            spaces: AddressSpaces::new(),
            merge: OrderedMerge::new(),
            info: kernel.parse_info(),
            file_sample_type: file.get_sample_type(),
            stats: DwarfStats::default(),
        }
    }

    pub(super) fn queue(&mut self, rec: &perf::RawRecord<'_>) {
        let time = rec.event(&self.info).timestamp().unwrap_or(0);
        let bytes = rec.bytes.as_slice().into_owned();
        self.merge.push(time, (rec.kind, rec.misc, bytes));
    }

    /// A synthesized record (whole, header included), to be processed at `time` among the kernel's.
    pub(super) fn queue_synthesized(&mut self, time: u64, bytes: Vec<u8>) {
        let kind = u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        let misc = u16::from_ne_bytes([bytes[4], bytes[5]]);
        self.merge.push(time, (kind, misc, bytes));
    }

    /// Process what is safe to process (everything when `all`), in time order.
    pub(super) fn release(&mut self, writer: &mut Writer, all: bool) -> Result<(), RecordError> {
        let mut ready = Vec::new();
        if all {
            self.merge.drain(|_, r| ready.push(r));
        } else {
            self.merge.finish_round(|_, r| ready.push(r));
        }
        for (kind, misc, bytes) in ready {
            match self.process(kind, misc, &bytes) {
                Some(sample) => writer.write_record(&[&sample])?,
                None => writer.write_record(&[&bytes])?,
            }
        }
        Ok(())
    }

    /// A mapping synthesized from /proc/PID/maps (and written to the recording as this MMAP2).
    pub(super) fn add_mapping(&mut self, mmap: &recording::Mmap2) {
        let mapping = Mapping {
            start: mmap.start,
            end: mmap.start.saturating_add(mmap.len),
            pgoff: mmap.pgoff,
            path: Arc::from(mmap.path.as_str()),
            file: Some(FileId {
                major: mmap.maj,
                minor: mmap.min,
                inode: mmap.ino,
            }),
            build_id: None,
            prot: mmap.prot,
        };
        self.spaces.apply(TaskEvent::Mmap {
            pid: mmap.pid as u32,
            mapping,
        });
    }

    /// Feed side-band records to the address spaces (every user mapping, as report does when it reads the
    /// recording); return the rewritten record for samples.
    fn process(&mut self, kind: u32, misc: u16, bytes: &[u8]) -> Option<Vec<u8>> {
        use linux_perf_event_reader::{EventRecord, RawData, RawEventRecord, RecordType};
        let raw = RawEventRecord::new(
            RecordType(kind),
            misc,
            RawData::Single(&bytes[8..]),
            self.info,
        );
        let record = raw.parse().ok()?;
        if let EventRecord::Sample(s) = &record {
            return Some(self.rewrite(s, misc));
        }
        if let Some(event) = TaskEvent::from_record(&record) {
            if let TaskEvent::Exit { pid } = event {
                self.unwinder.forget(pid);
            }
            self.spaces.apply(event);
        }
        None
    }

    fn rewrite(&mut self, s: &linux_perf_event_reader::SampleRecord<'_>, misc: u16) -> Vec<u8> {
        let mut callchain: Vec<u64> = match &s.callchain {
            Some(c) => (0..c.len()).filter_map(|i| c.get(i)).collect(),
            None => Vec::new(),
        };
        let regs = s.user_regs.as_ref().and_then(UserRegs::from_sample);
        if let (Some(regs), Some((stack, dyn_size))) = (regs, &s.user_stack) {
            let stack = stack.as_slice();
            let pid = s.pid.unwrap_or(0) as u32;
            let space = self.spaces.get(pid);
            let outcome = self.unwinder.unwind_callchain(
                pid,
                space,
                &regs,
                &stack,
                *dyn_size,
                &mut callchain,
            );
            self.stats.count(outcome, stack.len() as u64);
        }
        recording::encode_sample(
            self.file_sample_type,
            &SampleFields {
                ip: s.ip.unwrap_or(0),
                pid: s.pid.unwrap_or(0) as u32,
                tid: s.tid.unwrap_or(0) as u32,
                time: s.timestamp.unwrap_or(0),
                id: s.id.unwrap_or(0),
                cpu: s.cpu.unwrap_or(0),
                period: s.period.unwrap_or(1),
                callchain,
                misc,
            },
        )
    }
}
