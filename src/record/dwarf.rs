//! Online DWARF unwinding while recording: samples with user registers and a stack copy come in, samples with
//! the unwound callchain go out. Records reach it in time order (the stream merges the rings first), so that a
//! mapping is known to the unwinder before the samples that run in it.
use crate::process::{AddressSpaces, FileId, Mapping, TaskEvent};
use crate::recording::{self, SampleFields};
use crate::unwind::dwarf::{DwarfStats, DwarfUnwinder, UserRegs};
use std::path::PathBuf;
use std::sync::Arc;

/// Online DWARF unwinding: raw samples with registers and a stack copy in, samples with a callchain out.
pub(super) struct DwarfState {
    unwinder: DwarfUnwinder,
    /// The processes' mappings, fed with every user mapping of the recording.
    spaces: AddressSpaces,
    pub(super) stats: DwarfStats,
}

impl DwarfState {
    pub(super) fn new(debug_dirs: Vec<PathBuf>) -> DwarfState {
        DwarfState {
            unwinder: DwarfUnwinder::live(debug_dirs),
            spaces: AddressSpaces::new(),
            stats: DwarfStats::default(),
        }
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

    /// Feed a side-band record to the address spaces (every user mapping, as report does when it reads the
    /// recording).
    pub(super) fn side_band(&mut self, record: &linux_perf_event_reader::EventRecord<'_>) {
        if let Some(event) = TaskEvent::from_record(record) {
            if let TaskEvent::Exit { pid } = event {
                self.unwinder.forget(pid);
            }
            self.spaces.apply(event);
        }
    }

    /// The sample with its user stack copy unwound into the callchain.
    pub(super) fn unwind(
        &mut self,
        s: &linux_perf_event_reader::SampleRecord<'_>,
        misc: u16,
    ) -> SampleFields {
        let mut fields = recording::SampleFields::from_record(s, misc);
        let callchain = &mut fields.callchain;
        let regs = s.user_regs.as_ref().and_then(UserRegs::from_sample);
        if let (Some(regs), Some((stack, dyn_size))) = (regs, &s.user_stack) {
            let stack = stack.as_slice();
            let pid = s.pid.unwrap_or(0) as u32;
            let space = self.spaces.get(pid);
            let cut_before = self.unwinder.cut_while_loading();
            let outcome = self
                .unwinder
                .unwind_callchain(pid, space, &regs, &stack, *dyn_size, callchain);
            if self.unwinder.cut_while_loading() > cut_before {
                self.stats.cut_loading += 1;
            }
            self.stats
                .count(outcome, stack.len() as u64, self.unwinder.last_stack_used());
        }
        fields
    }
}
