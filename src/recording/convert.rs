//! Record conversion: one kernel record of the data section to an [`Event`]. SAMPLE records of the common
//! simple layouts are read in place; the others go through linux-perf-event-reader, after the checks for
//! inputs that would make it panic.
use linux_perf_data::linux_perf_event_reader::constants::{
    PERF_RECORD_LOST_SAMPLES, PERF_RECORD_MISC_MMAP_BUILD_ID, PERF_RECORD_MMAP2,
    PERF_RECORD_SAMPLE, PERF_SAMPLE_ADDR, PERF_SAMPLE_CALLCHAIN, PERF_SAMPLE_CPU, PERF_SAMPLE_ID,
    PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_IP, PERF_SAMPLE_PERIOD, PERF_SAMPLE_READ,
    PERF_SAMPLE_STREAM_ID, PERF_SAMPLE_TID, PERF_SAMPLE_TIME,
};
use linux_perf_data::linux_perf_event_reader::{
    CpuMode as ReaderCpuMode, EventRecord, Mmap2FileId, RawEventRecord, ReadFormat,
    RecordParseInfo, SampleRecord,
};

use super::{CpuMode, Event, Sample, UserStack};
use crate::regs::UserRegs;

/// What the attr of a record says about parsing it.
pub(super) struct AttrInfo {
    pub(super) sample_type: u64,
    pub(super) read_format: u64,
    /// The period of samples without PERF_SAMPLE_PERIOD.
    pub(super) default_period: u64,
    pub(super) parse_info: RecordParseInfo,
    /// Whether its samples hold only the fields [`read_simple_sample`] reads.
    pub(super) simple_samples: bool,
    /// Its samples are off-CPU time (the event named [`OFF_CPU_EVENT`]): the period is the nanoseconds the
    /// thread waited at the sampled stack.
    pub(super) off_cpu: bool,
    /// Its index in the file's attrs (what [`Sample::attr`] holds).
    pub(super) index: u16,
}

pub(super) fn read_u32(bytes: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(b)
}

pub(super) fn read_u64(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(b)
}

/// The fixed-size (one u64 each) sample fields that come before the callchain.
const FIXED_SAMPLE_FIELDS: u64 = PERF_SAMPLE_IDENTIFIER
    | PERF_SAMPLE_IP
    | PERF_SAMPLE_TID
    | PERF_SAMPLE_TIME
    | PERF_SAMPLE_ADDR
    | PERF_SAMPLE_ID
    | PERF_SAMPLE_STREAM_ID
    | PERF_SAMPLE_CPU
    | PERF_SAMPLE_PERIOD;

/// The sample fields that [`read_simple_sample`] reads: the fixed ones, then the callchain.
pub(super) const SIMPLE_SAMPLE_FIELDS: u64 = FIXED_SAMPLE_FIELDS | PERF_SAMPLE_CALLCHAIN;

/// Read a SAMPLE body in place when its attr has only [`SIMPLE_SAMPLE_FIELDS`] (what `perf record -g` and
/// `rprof record` write): the same values as linux-perf-event-reader's parse, without building its full
/// SampleRecord, which is most of the cost of reading a recording.
fn read_simple_sample(attr: &AttrInfo, misc: u16, body: &[u8]) -> Result<Sample, String> {
    let bad = || format!("a SAMPLE record ({} bytes) is corrupt", body.len() + 8);
    let st = attr.sample_type;
    let mut words = body.chunks_exact(8).map(|w| read_u64(w, 0));
    // Some(value) for a field the sample has, None for one it does not; Err when the body ends before it.
    let mut field = |flag: u64| match st & flag {
        0 => Ok(None),
        _ => words.next().map(Some).ok_or_else(bad),
    };
    let _identifier = field(PERF_SAMPLE_IDENTIFIER)?;
    let ip = field(PERF_SAMPLE_IP)?;
    let pid_tid = field(PERF_SAMPLE_TID)?;
    let time = field(PERF_SAMPLE_TIME)?;
    let _addr = field(PERF_SAMPLE_ADDR)?;
    let _id = field(PERF_SAMPLE_ID)?;
    let _stream_id = field(PERF_SAMPLE_STREAM_ID)?;
    let cpu = field(PERF_SAMPLE_CPU)?;
    let period = field(PERF_SAMPLE_PERIOD)?;
    let mut callchain = Vec::new();
    if st & PERF_SAMPLE_CALLCHAIN != 0 {
        let nr = words.next().ok_or_else(bad)?;
        if nr > words.len() as u64 {
            return Err(format!(
                "a SAMPLE record has a callchain of {nr} entries, longer than the record"
            ));
        }
        callchain.reserve_exact(nr as usize);
        callchain.extend(words.take(nr as usize));
    }
    // TID is {u32 pid, u32 tid}, CPU is {u32 cpu, u32 reserved}: little-endian, the low half comes first.
    Ok(Sample {
        pid: pid_tid.map_or(0, |v| v as u32),
        tid: pid_tid.map_or(0, |v| (v >> 32) as u32),
        time,
        cpu: cpu.map(|v| v as u32),
        period: period.unwrap_or(attr.default_period),
        ip: ip.unwrap_or(0),
        cpu_mode: cpu_mode(ReaderCpuMode::from_misc(misc)),
        callchain,
        user_stack: None,
        off_cpu: attr.off_cpu,
        attr: attr.index,
        raw: Vec::new(),
    })
}

/// The byte offset of the callchain's `nr` in a sample body, following the layout linux-perf-event-reader
/// parses; None if the body ends before it.
fn callchain_offset(body: &[u8], sample_type: u64, read_format: u64) -> Option<usize> {
    let mut at = 8 * (sample_type & FIXED_SAMPLE_FIELDS).count_ones() as usize;
    if sample_type & PERF_SAMPLE_READ != 0 {
        let rf = ReadFormat::from_bits_truncate(read_format);
        let extra = rf
            .intersection(ReadFormat::TOTAL_TIME_ENABLED | ReadFormat::TOTAL_TIME_RUNNING)
            .bits()
            .count_ones();
        if rf.contains(ReadFormat::GROUP) {
            at += 8 * (1 + extra as usize + usize::from(rf.contains(ReadFormat::ID)));
        } else {
            let nr = read_u64(body.get(at..at + 8)?, 0);
            let per_value = if rf.contains(ReadFormat::ID) { 16 } else { 8 };
            let values = usize::try_from(nr).ok()?.checked_mul(per_value)?;
            at = at
                .checked_add(8 + 8 * extra as usize)?
                .checked_add(values)?;
        }
    }
    Some(at)
}

fn cpu_mode(mode: ReaderCpuMode) -> CpuMode {
    match mode {
        ReaderCpuMode::Kernel => CpuMode::Kernel,
        ReaderCpuMode::User => CpuMode::User,
        ReaderCpuMode::Hypervisor => CpuMode::Hypervisor,
        ReaderCpuMode::GuestKernel => CpuMode::GuestKernel,
        ReaderCpuMode::GuestUser => CpuMode::GuestUser,
        _ => CpuMode::Unknown,
    }
}

/// Map one kernel record to an [`Event`]; `Ok(None)` for record types rprof does not use.
pub(super) fn convert(attr: &AttrInfo, record: &RawEventRecord) -> Result<Option<Event>, String> {
    let record_type = record.record_type.0;
    let body = record.data.as_slice();
    let bad = |what: &str| format!("a {what} record ({} bytes) is corrupt", body.len() + 8);
    if record_type == PERF_RECORD_SAMPLE && attr.simple_samples {
        return read_simple_sample(attr, record.misc, &body).map(|s| Some(Event::Sample(s)));
    }
    check_raw(attr, record_type, record.misc, &body)?;
    if record_type == PERF_RECORD_LOST_SAMPLES {
        let count = body
            .get(..8)
            .map(|b| read_u64(b, 0))
            .ok_or_else(|| bad("LOST_SAMPLES"))?;
        return Ok(Some(Event::LostSamples { count }));
    }
    let parsed = record
        .parse()
        .map_err(|e| format!("a record of type {record_type} cannot be parsed: {e}"))?;
    let event = match parsed {
        EventRecord::Sample(s) => sample_event(attr, s),
        EventRecord::Comm(c) => Event::Comm {
            pid: c.pid as u32,
            tid: c.tid as u32,
            name: String::from_utf8_lossy(&c.name.as_slice()).into_owned(),
            exec: c.is_execve,
        },
        EventRecord::Mmap(m) => Event::Mmap {
            pid: m.pid,
            tid: m.tid,
            start: m.address,
            len: m.length,
            pgoff: m.page_offset,
            path: String::from_utf8_lossy(&m.path.as_slice()).into_owned(),
            build_id: None,
            cpu_mode: cpu_mode(m.cpu_mode),
        },
        EventRecord::Mmap2(m) => Event::Mmap {
            pid: m.pid,
            tid: m.tid,
            start: m.address,
            len: m.length,
            pgoff: m.page_offset,
            path: String::from_utf8_lossy(&m.path.as_slice()).into_owned(),
            build_id: match m.file_id {
                Mmap2FileId::BuildId(id) => Some(id),
                Mmap2FileId::InodeAndVersion(_) => None,
            },
            cpu_mode: cpu_mode(m.cpu_mode),
        },
        EventRecord::Fork(f) => Event::Fork {
            pid: f.pid as u32,
            ppid: f.ppid as u32,
            tid: f.tid as u32,
            ptid: f.ptid as u32,
        },
        EventRecord::Exit(e) => Event::Exit {
            pid: e.pid as u32,
            tid: e.tid as u32,
        },
        EventRecord::Lost(l) => Event::Lost { count: l.count },
        EventRecord::Throttle(_) => Event::Throttle { throttled: true },
        EventRecord::Unthrottle(_) => Event::Throttle { throttled: false },
        _ => return Ok(None),
    };
    Ok(Some(event))
}

/// Refuse inputs that would make linux-perf-event-reader panic: a callchain longer than its SAMPLE record, an
/// MMAP2 build id longer than 20 bytes.
fn check_raw(attr: &AttrInfo, record_type: u32, misc: u16, body: &[u8]) -> Result<(), String> {
    let bad = |what: &str| format!("a {what} record ({} bytes) is corrupt", body.len() + 8);
    if record_type == PERF_RECORD_SAMPLE && attr.sample_type & PERF_SAMPLE_CALLCHAIN != 0 {
        let at = callchain_offset(body, attr.sample_type, attr.read_format)
            .ok_or_else(|| bad("SAMPLE"))?;
        let end = at.checked_add(8).ok_or_else(|| bad("SAMPLE"))?;
        let nr = body
            .get(at..end)
            .map(|b| read_u64(b, 0))
            .ok_or_else(|| bad("SAMPLE"))?;
        if nr > ((body.len() - end) / 8) as u64 {
            return Err(format!(
                "a SAMPLE record has a callchain of {nr} entries, longer than the record"
            ));
        }
    }
    if record_type == PERF_RECORD_MMAP2 && misc & PERF_RECORD_MISC_MMAP_BUILD_ID != 0 {
        match body.get(32) {
            Some(&len) if len <= 20 => {}
            _ => return Err(bad("MMAP2")),
        }
    }
    Ok(())
}

/// A parsed SAMPLE record as an [`Event`].
fn sample_event(attr: &AttrInfo, s: SampleRecord<'_>) -> Event {
    let mut callchain = Vec::new();
    if let Some(chain) = s.callchain {
        callchain.reserve(chain.len());
        for i in 0..chain.len() {
            callchain.extend(chain.get(i));
        }
    }
    let user_stack =
        s.user_regs
            .as_ref()
            .zip(s.user_stack.as_ref())
            .and_then(|(regs, (stack, dyn_size))| {
                Some(UserStack {
                    regs: UserRegs::from_sample(regs)?,
                    stack: stack.as_slice().into_owned(),
                    dyn_size: *dyn_size,
                })
            });
    Event::Sample(Sample {
        pid: s.pid.unwrap_or(0) as u32,
        tid: s.tid.unwrap_or(0) as u32,
        time: s.timestamp,
        cpu: s.cpu,
        period: s.period.unwrap_or(attr.default_period),
        ip: s.ip.unwrap_or(0),
        cpu_mode: cpu_mode(s.cpu_mode),
        callchain,
        user_stack,
        off_cpu: attr.off_cpu,
        attr: attr.index,
        raw: s.raw.map(|r| r.as_slice().into_owned()).unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that the callchain offset follows the sample layout (IDENTIFIER..PERIOD, then READ).
    #[test]
    fn callchain_offset_counts_fixed_fields() {
        let st = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_PERIOD;
        assert_eq!(callchain_offset(&[], st, 0), Some(32));
        // READ without GROUP: nr, then nr values (with ids).
        let mut body = vec![0u8; 40];
        body[32..40].copy_from_slice(&2u64.to_le_bytes());
        let rf = ReadFormat::ID.bits();
        assert_eq!(
            callchain_offset(&body, st | PERF_SAMPLE_READ, rf),
            Some(32 + 8 + 32)
        );
        // A corrupt huge nr does not overflow.
        body[32..40].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(callchain_offset(&body, st | PERF_SAMPLE_READ, rf), None);
    }
}
