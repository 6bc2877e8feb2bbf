//! Online DWARF unwinding while recording: samples with user registers and a stack copy come in, samples with
//! the unwound callchain go out. Records pass through the time-ordered merge first, so that a mapping is known to
//! the unwinder before the samples that run in it.
use super::{RecordError, PROT_EXEC};
use crate::merge::OrderedMerge;
use crate::perf::{self, Attr};
use crate::recording::{self, SampleFields, Writer};
use crate::unwind::dwarf::{DwarfStats, DwarfUnwinder, UserRegs};
use std::path::PathBuf;

/// Online DWARF unwinding: raw samples with registers and a stack copy in, samples with a callchain out.
pub(super) struct DwarfState {
    pub(super) unwinder: DwarfUnwinder,
    merge: OrderedMerge<(u32, u16, Vec<u8>)>,
    info: linux_perf_event_reader::RecordParseInfo,
    file_sample_type: u64,
    pub(super) stats: DwarfStats,
}

impl DwarfState {
    pub(super) fn new(kernel: &Attr, file: &Attr, debug_dirs: Vec<PathBuf>) -> DwarfState {
        DwarfState {
            unwinder: DwarfUnwinder::new(debug_dirs),
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

    /// Feed side-band records to the unwinder; return the rewritten record for samples.
    fn process(&mut self, kind: u32, misc: u16, bytes: &[u8]) -> Option<Vec<u8>> {
        use linux_perf_event_reader::{EventRecord, RawData, RawEventRecord, RecordType};
        let raw = RawEventRecord::new(
            RecordType(kind),
            misc,
            RawData::Single(&bytes[8..]),
            self.info,
        );
        match raw.parse().ok()? {
            EventRecord::Mmap2(m) => {
                if m.protection & PROT_EXEC != 0 {
                    let path = String::from_utf8_lossy(&m.path.as_slice()).into_owned();
                    self.unwinder.add_mapping(
                        m.pid as u32,
                        m.address,
                        m.length,
                        m.page_offset,
                        &path,
                    );
                }
                None
            }
            EventRecord::Mmap(m) => {
                if !m.is_executable {
                    return None;
                }
                let path = String::from_utf8_lossy(&m.path.as_slice()).into_owned();
                self.unwinder
                    .add_mapping(m.pid as u32, m.address, m.length, m.page_offset, &path);
                None
            }
            EventRecord::Fork(f) if f.pid != f.ppid => {
                self.unwinder.fork(f.ppid as u32, f.pid as u32);
                None
            }
            EventRecord::Exit(e) if e.pid == e.tid => {
                self.unwinder.exit(e.pid as u32);
                None
            }
            EventRecord::Comm(c) if c.is_execve => {
                // A new program image: its mappings arrive next.
                self.unwinder.exit(c.pid as u32);
                None
            }
            EventRecord::Sample(s) => Some(self.rewrite(&s, misc)),
            _ => None,
        }
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
            let outcome =
                self.unwinder
                    .unwind_callchain(pid, &regs, &stack, *dyn_size, &mut callchain);
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
