//! The records of a recording session as they leave the rings: counted, noted (mapped executables for the
//! BUILD_ID section), unwound in DWARF mode, and appended to the recording with a FINISHED_ROUND per round.
use super::dwarf::DwarfState;
use super::synth;
use super::{RecordError, PROT_EXEC};
use crate::perf::{self, record_type, EventInfos, Handler, RawRecord};
use crate::recording::{self, Writer};
use linux_perf_event_reader::{EventRecord, RecordParseInfo};
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// Counters and facts gathered while streaming records.
#[derive(Default)]
pub(super) struct Collected {
    pub(super) samples: u64,
    pub(super) lost: u64,
    pub(super) lost_samples: u64,
    pub(super) throttled: u64,
    /// Executable files that were mapped (for the BUILD_ID section).
    pub(super) paths: BTreeSet<(i32, String)>,
    /// Host pid -> pid in its own pid namespace, where they differ (for the recording's NS_PIDS section).
    pub(super) ns_pids: BTreeMap<u32, u32>,
}

impl Collected {
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

/// Where the records go: the recording, through the online DWARF unwinder in DWARF mode.
pub(super) struct Stream {
    pub(super) writer: Writer,
    pub(super) st: Collected,
    pub(super) dwarf: Option<DwarfState>,
    /// `-G`: the processes of the cgroup met so far.
    pub(super) members: Option<Members>,
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
                        self.st.paths.insert((pid, mmap.path.clone()));
                    }
                    match &mut self.dwarf {
                        Some(d) => d.queue_synthesized(time, r.bytes),
                        None => self.writer.write_record(&[&r.bytes])?,
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}

impl Handler<()> for Stream {
    type Error = RecordError;

    /// Count the record and append it. In DWARF mode records go through the time-ordered merge first, so that
    /// a mapping is known before the samples that run in it.
    fn record(&mut self, _: &EventInfos<()>, rec: RawRecord<'_>) -> Result<(), RecordError> {
        self.meet(&rec)?;
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

fn body_u32(rec: &perf::RawRecord<'_>, offset: usize) -> u32 {
    let body = rec.body();
    body.get(offset..offset + 4)
        .map(|b| u32::from_ne_bytes(b.as_slice().as_ref().try_into().unwrap_or([0; 4])))
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
