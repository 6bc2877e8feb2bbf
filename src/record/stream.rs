//! The records of a recording session as they leave the rings: counted, noted (mapped executables for the
//! BUILD_ID section), put in time order when a stage needs it (the DWARF unwinder, the off-CPU accounting),
//! and appended to the recording with a FINISHED_ROUND per round.
use super::dwarf::DwarfState;
use super::offcpu::OffCpu;
use super::python::PythonStacks;
use super::sink::Sink;
use super::synth;
use super::{RecordError, PROT_EXEC};
use crate::merge::OrderedMerge;
use crate::perf::{self, record_type, EventInfos, Handler, RawRecord};
use crate::recording::{self, SampleFields};
use linux_perf_event_reader::{EventRecord, RawData, RawEventRecord, RecordParseInfo, RecordType};
use std::collections::{BTreeMap, HashSet};

/// Which event of the session wrote a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Source {
    /// The sampling clock (and the side-band records).
    Clock,
    /// The `context-switches` event and its switch records (`--off-cpu`).
    Switches,
    /// Another sampled event (`-e`), by its index among them.
    Event(u16),
}

impl Source {
    /// The source of the `i`th sampled event (the first is the clock's place: it carries the side band).
    pub(super) fn of_event(i: usize) -> Source {
        match i {
            0 => Source::Clock,
            i => Source::Event(i as u16),
        }
    }

    /// The index of a sampled event.
    pub(super) fn event(self) -> Option<usize> {
        match self {
            Source::Clock => Some(0),
            Source::Event(i) => Some(usize::from(i)),
            Source::Switches => None,
        }
    }
}

/// Counters and facts gathered while streaming records.
#[derive(Default)]
pub(super) struct Collected {
    pub(super) samples: u64,
    pub(super) lost: u64,
    pub(super) lost_samples: u64,
    pub(super) throttled: u64,
    /// Executable files that were mapped (for the BUILD_ID section), each with the last process that mapped it
    /// (the likeliest to live at the end, to open the file in its mount namespace). Keyed by path alone, so that
    /// a host where processes come and go for hours keeps one entry per file, not one per process.
    pub(super) paths: BTreeMap<String, i32>,
    /// Whether to note them: only a recording file has a BUILD_ID section (a push without `-o` writes none).
    pub(super) note_paths: bool,
    /// Host pid -> pid in its own pid namespace, where they differ (for the recording's NS_PIDS section).
    pub(super) ns_pids: BTreeMap<u32, u32>,
}

impl Collected {
    /// Note that process `pid` mapped the executable file `path`.
    pub(super) fn note_path(&mut self, pid: i32, path: &str) {
        if !self.note_paths {
            return;
        }
        match self.paths.get_mut(path) {
            Some(last) => *last = pid,
            None => {
                self.paths.insert(path.to_string(), pid);
            }
        }
    }

    /// Note process `pid`'s pid in its own namespace, read now from /proc/PID/status (while it lives).
    pub(super) fn note_ns_pid(&mut self, pid: u32) {
        if let Some(ns) = crate::process::ns_pid(pid) {
            self.ns_pids.insert(pid, ns);
        }
    }
}

/// `-G`: the processes of the cgroup met so far. The kernel gives a cgroup's events the COMM, MMAP2, FORK and
/// EXIT records of the tasks of the cgroup (and its descendants) only, so a process that starts in the cgroup
/// (exec or fork there) is described by the kernel; one that was moved in while running is described from
/// /proc at its first sample.
pub(super) struct Members {
    /// Processes met: described at the start, or in a record of the cgroup's events.
    pub(super) pids: HashSet<u32>,
    /// How many of them were described from /proc at their first sample.
    pub(super) late: u64,
    /// How the kernel's records are laid out (the attr given to the kernel).
    pub(super) info: RecordParseInfo,
    /// The sample_type of the recording, for synthesized records.
    pub(super) sample_type: u64,
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

    /// A synthesized record (whole, header included), to be processed at `time` among the kernel's.
    fn push_synthesized(&mut self, time: u64, bytes: Vec<u8>) {
        let kind = u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        let misc = u16::from_ne_bytes([bytes[4], bytes[5]]);
        self.merge.push(time, (Source::Clock, kind, misc, bytes));
    }
}

/// Where the records go: the recording, through the online DWARF unwinder in DWARF mode and the off-CPU
/// accounting with `--off-cpu`.
pub(super) struct Stream {
    pub(super) writer: Sink,
    pub(super) st: Collected,
    pub(super) dwarf: Option<DwarfState>,
    pub(super) offcpu: Option<OffCpu>,
    /// Time order for the stages above; None: records are written as they are read.
    pub(super) ordered: Option<Ordered>,
    /// The sample_type of the samples in the file.
    pub(super) file_sample_type: u64,
    /// `-G`: the processes of the cgroup met so far.
    pub(super) members: Option<Members>,
    /// Records say which event wrote them (several events, IDENTIFIER in every sample type).
    pub(super) identified: bool,
    /// The Python stacks of samples of Python processes, read as they arrive.
    pub(super) python: Option<PythonStacks>,
}

impl Stream {
    /// `-G`: note the process behind a COMM, FORK or sample the first time it shows (and its namespace pid,
    /// read at once); describe a process met first in a sample from /proc, in records stamped just before
    /// the sample, which go out ahead of it.
    fn meet(&mut self, rec: &RawRecord<'_>) -> Result<(), RecordError> {
        let Some(m) = &mut self.members else {
            return Ok(());
        };
        match rec.kind {
            // Both start with the pid.
            record_type::COMM | record_type::FORK => {
                let pid = body_u32(rec, 0);
                if m.pids.insert(pid) {
                    self.st.note_ns_pid(pid);
                }
            }
            record_type::SAMPLE => {
                let Ok(EventRecord::Sample(s)) = rec.event(&m.info).parse() else {
                    return Ok(());
                };
                let pid = s.pid.unwrap_or(0);
                if pid <= 0 || !m.pids.insert(pid as u32) {
                    return Ok(());
                }
                m.late += 1;
                self.st.note_ns_pid(pid as u32);
                let time = s.timestamp.unwrap_or(1).saturating_sub(1);
                for r in synth::process_records(m.sample_type, pid, time) {
                    if let Some(mmap) = r.mmap.as_ref().filter(|m| m.path.starts_with('/')) {
                        self.st.note_path(pid, &mmap.path);
                    }
                    match &mut self.ordered {
                        Some(o) => o.push_synthesized(time, r.bytes),
                        None => self.writer.write_record(&[&r.bytes])?,
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}

impl Handler<Source> for Stream {
    type Error = RecordError;

    /// Count the record and append it, or queue it for the time-ordered stages.
    fn record(
        &mut self,
        infos: &EventInfos<Source>,
        rec: RawRecord<'_>,
    ) -> Result<(), RecordError> {
        let source = match self.identified {
            true => infos.of(&rec).copied().unwrap_or(Source::Clock),
            false => Source::Clock,
        };
        self.meet(&rec)?;
        let rewritten = self.python_frames(&rec, source);
        if let Some(comm) = self.python.as_mut().and_then(|p| p.take_comm()) {
            match &mut self.ordered {
                Some(o) => {
                    let time = rec.event(&o.info).timestamp().unwrap_or(0);
                    o.merge.push(time, (source, record_type::COMM, 0, comm));
                }
                None => self.writer.write_record(&[&comm])?,
            }
        }
        let st = &mut self.st;
        match rec.kind {
            record_type::SAMPLE => st.samples += (source != Source::Switches) as u64,
            record_type::LOST => st.lost += body_u64(&rec, 8),
            record_type::LOST_SAMPLES => st.lost_samples += body_u64(&rec, 0),
            record_type::THROTTLE => st.throttled += 1,
            record_type::MMAP2 => note_mmap2(&rec, st),
            _ => {}
        }
        match &mut self.ordered {
            Some(o) => {
                let time = rec.event(&o.info).timestamp().unwrap_or(0);
                let bytes = rewritten.unwrap_or_else(|| rec.bytes.as_slice().into_owned());
                o.merge.push(time, (source, rec.kind, rec.misc, bytes));
                Ok(())
            }
            None => match rewritten {
                Some(bytes) => Ok(self.writer.write_record(&[&bytes])?),
                None => Ok(self.writer.write_record(&rec.parts())?),
            },
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
        Ok(self.writer.end_round(last)?)
    }
}

impl Stream {
    /// A sample of a Python thread gets its Python stack now (the sample rewritten with it, or in DWARF mode
    /// kept for after the unwinding); a process that exec'd or exited is forgotten.
    fn python_frames(&mut self, rec: &RawRecord<'_>, source: Source) -> Option<Vec<u8>> {
        let py = self.python.as_mut()?;
        match rec.kind {
            record_type::SAMPLE if source != Source::Switches => {
                py.arrived(rec, self.dwarf.is_some(), self.file_sample_type)
            }
            record_type::EXIT => {
                py.forget(body_u32(rec, 0));
                py.unmapped(body_u32(rec, 0), body_u32(rec, 8));
                None
            }
            record_type::COMM if rec.misc & COMM_EXEC != 0 => {
                py.forget(body_u32(rec, 0));
                py.unmapped(body_u32(rec, 0), body_u32(rec, 0));
                None
            }
            record_type::FORK => {
                py.forked(body_u32(rec, 0), body_u32(rec, 4));
                None
            }
            record_type::MMAP2 => {
                if let Some((pid, path)) = exec_mapping(rec) {
                    py.mapped(pid as u32, &path);
                }
                None
            }
            _ => None,
        }
    }

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
        // Without the unwinder, the off-CPU accounting needs only its own event's records and exits: the
        // clock's samples and side-band records go out as they are, unparsed.
        let needed =
            self.dwarf.is_some() || source == Source::Switches || kind == record_type::EXIT;
        if !needed {
            return Ok(self.writer.write_record(&[bytes])?);
        }
        let raw = RawEventRecord::new(RecordType(kind), misc, RawData::Single(&bytes[8..]), *info);
        let Ok(record) = raw.parse() else {
            return Ok(self.writer.write_record(&[bytes])?);
        };
        let mut out = Vec::new();
        match (&record, &mut self.offcpu) {
            (EventRecord::Sample(s), _) => {
                let fields = match &mut self.dwarf {
                    Some(d) => {
                        let mut f = d.unwind(s, misc);
                        if let Some(py) = &mut self.python {
                            py.unwound(&mut f);
                        }
                        Some(f)
                    }
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

/// PERF_RECORD_MISC_COMM_EXEC: the COMM record of an exec.
const COMM_EXEC: u16 = 1 << 13;

fn body_u64(rec: &perf::RawRecord<'_>, offset: usize) -> u64 {
    let body = rec.body();
    body.get(offset..offset + 8)
        .map(|b| u64::from_ne_bytes(b.as_slice().as_ref().try_into().unwrap_or([0; 8])))
        .unwrap_or(0)
}

fn body_u32(rec: &perf::RawRecord<'_>, offset: usize) -> u32 {
    let body = rec.body();
    body.get(offset..offset + 4)
        .map(|b| u32::from_ne_bytes(b.as_slice().as_ref().try_into().unwrap_or([0; 4])))
        .unwrap_or(0)
}

fn note_mmap2(rec: &perf::RawRecord<'_>, st: &mut Collected) {
    if let Some((pid, path)) = exec_mapping(rec) {
        st.note_path(pid, &path);
    }
}

/// The process and file of an MMAP2 record of an executable file mapping.
fn exec_mapping(rec: &perf::RawRecord<'_>) -> Option<(i32, String)> {
    use linux_perf_event_reader::Mmap2Record;
    let m = Mmap2Record::parse::<byteorder::NativeEndian>(rec.body(), rec.misc).ok()?;
    let path = m.path.as_slice();
    (m.protection & PROT_EXEC != 0 && path.first() == Some(&b'/'))
        .then(|| (m.pid, String::from_utf8_lossy(&path).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::Collected;

    /// Check that a file mapped by process after process is noted once, with the last process that mapped it:
    /// a host where a process starts every second keeps one entry per file, not one per process; and that
    /// nothing is noted when no recording file is written.
    #[test]
    fn mapped_files_one_entry_per_path() {
        let mut st = Collected {
            note_paths: true,
            ..Collected::default()
        };
        for pid in 100..10_100 {
            st.note_path(pid, "/usr/lib/x86_64-linux-gnu/libc.so.6");
            st.note_path(pid, "/usr/bin/sleep");
        }
        st.note_path(7, "/usr/bin/true");
        assert_eq!(st.paths.len(), 3);
        assert_eq!(st.paths["/usr/bin/sleep"], 10_099);
        assert_eq!(st.paths["/usr/bin/true"], 7);
        let mut push = Collected::default();
        push.note_path(7, "/usr/bin/true");
        assert!(push.paths.is_empty(), "noted without a file to write");
    }
}
