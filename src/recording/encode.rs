//! Encoders for the records rprof synthesizes, in the kernel's exact layouts (little-endian, this machine).
use linux_perf_event_reader::constants::{
    PERF_RECORD_COMM, PERF_RECORD_MISC_COMM_EXEC, PERF_RECORD_MISC_KERNEL, PERF_RECORD_MISC_USER,
    PERF_RECORD_MMAP2, PERF_RECORD_SAMPLE, PERF_SAMPLE_ADDR, PERF_SAMPLE_CALLCHAIN,
    PERF_SAMPLE_CPU, PERF_SAMPLE_ID, PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_IP, PERF_SAMPLE_PERIOD,
    PERF_SAMPLE_RAW, PERF_SAMPLE_STREAM_ID, PERF_SAMPLE_TID, PERF_SAMPLE_TIME,
};

use super::{Mmap2, SampleFields, SampleId};

/// PERF_RECORD_FINISHED_ROUND, a perf user record type.
pub(crate) const PERF_RECORD_FINISHED_ROUND: u32 = 68;

/// The largest record the 16-bit `perf_event_header.size` can describe, rounded down to 8 bytes.
const MAX_RECORD_SIZE: usize = 0xfff8;

/// A record under construction: the 8-byte header is patched with the final size by [`RecordBuf::finish`].
struct RecordBuf {
    bytes: Vec<u8>,
}

impl RecordBuf {
    fn new(record_type: u32, misc: u16) -> RecordBuf {
        let mut bytes = Vec::with_capacity(64);
        bytes.extend_from_slice(&record_type.to_le_bytes());
        bytes.extend_from_slice(&misc.to_le_bytes());
        bytes.extend_from_slice(&0u16.to_le_bytes());
        RecordBuf { bytes }
    }

    fn u32(&mut self, v: u32) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }

    fn u64(&mut self, v: u64) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }

    /// A NUL-terminated string, NUL-padded to a multiple of 8 bytes (as the kernel pads comm and filename).
    fn padded_str(&mut self, s: &[u8]) {
        self.bytes.extend_from_slice(s);
        let padded = (s.len() + 1).next_multiple_of(8);
        self.bytes.resize(self.bytes.len() + padded - s.len(), 0);
    }

    /// The `sample_id_all` trailer: TID, TIME, ID, STREAM_ID, CPU, IDENTIFIER, in the kernel's order.
    fn sample_id(&mut self, sample_type: u64, id: &SampleId) {
        if sample_type & PERF_SAMPLE_TID != 0 {
            self.u32(id.pid);
            self.u32(id.tid);
        }
        if sample_type & PERF_SAMPLE_TIME != 0 {
            self.u64(id.time);
        }
        if sample_type & PERF_SAMPLE_ID != 0 {
            self.u64(id.id);
        }
        if sample_type & PERF_SAMPLE_STREAM_ID != 0 {
            self.u64(id.id);
        }
        if sample_type & PERF_SAMPLE_CPU != 0 {
            self.u32(id.cpu);
            self.u32(0);
        }
        if sample_type & PERF_SAMPLE_IDENTIFIER != 0 {
            self.u64(id.id);
        }
    }

    fn finish(mut self) -> Vec<u8> {
        debug_assert!(self.bytes.len().is_multiple_of(8) && self.bytes.len() <= MAX_RECORD_SIZE);
        let size = self.bytes.len() as u16;
        self.bytes[6..8].copy_from_slice(&size.to_le_bytes());
        self.bytes
    }
}

/// The bytes of a `sample_id_all` trailer for `sample_type`.
fn sample_id_len(sample_type: u64) -> usize {
    let bits = PERF_SAMPLE_TID
        | PERF_SAMPLE_TIME
        | PERF_SAMPLE_ID
        | PERF_SAMPLE_STREAM_ID
        | PERF_SAMPLE_CPU;
    8 * ((sample_type & (bits | PERF_SAMPLE_IDENTIFIER)).count_ones() as usize)
}

/// `s` cut so that a record of `fixed` other bytes plus `s` NUL-padded to 8 still fits in a record.
fn fit_str(s: &str, fixed: usize) -> &[u8] {
    let max = MAX_RECORD_SIZE - fixed - 1;
    let bytes = s.as_bytes();
    &bytes[..bytes.len().min(max)]
}

/// Encode a PERF_RECORD_COMM (with the sample_id trailer for `sample_type`; pass 0 when the attr has no
/// `sample_id_all`). `exec` sets PERF_RECORD_MISC_COMM_EXEC, as the kernel does for the comm change of an exec.
pub fn encode_comm(
    sample_type: u64,
    pid: u32,
    tid: u32,
    name: &str,
    exec: bool,
    id: &SampleId,
) -> Vec<u8> {
    let misc = if exec { PERF_RECORD_MISC_COMM_EXEC } else { 0 };
    let mut r = RecordBuf::new(PERF_RECORD_COMM, misc);
    r.u32(pid);
    r.u32(tid);
    r.padded_str(fit_str(name, 16 + sample_id_len(sample_type)));
    r.sample_id(sample_type, id);
    r.finish()
}

/// Encode a PERF_RECORD_MMAP2 (with the sample_id trailer for `sample_type`; pass 0 when the attr has no
/// `sample_id_all`). The header's cpumode is PERF_RECORD_MISC_KERNEL for kernel mappings, else
/// PERF_RECORD_MISC_USER. The filename is NUL-padded to 8 bytes.
pub fn encode_mmap2(sample_type: u64, m: &Mmap2, id: &SampleId) -> Vec<u8> {
    let misc = if m.kernel {
        PERF_RECORD_MISC_KERNEL
    } else {
        PERF_RECORD_MISC_USER
    };
    let mut r = RecordBuf::new(PERF_RECORD_MMAP2, misc);
    r.u32(m.pid as u32);
    r.u32(m.tid as u32);
    r.u64(m.start);
    r.u64(m.len);
    r.u64(m.pgoff);
    r.u32(m.maj);
    r.u32(m.min);
    r.u64(m.ino);
    r.u64(0); // ino_generation
    r.u32(m.prot);
    r.u32(m.flags);
    r.padded_str(fit_str(&m.path, 72 + sample_id_len(sample_type)));
    r.sample_id(sample_type, id);
    r.finish()
}

/// Encode a PERF_RECORD_SAMPLE with the fields that `sample_type` selects (IDENTIFIER, IP, TID, TIME, ID, CPU,
/// PERIOD, CALLCHAIN, RAW are supported; ADDR is written as 0 and STREAM_ID as `id` to keep the layout; other bits
/// such as READ, REGS_USER or STACK_USER must not be in the stored attr's `sample_type` and are ignored).
/// A callchain too long for the 16-bit record size is cut at the outermost frames.
pub fn encode_sample(sample_type: u64, s: &SampleFields) -> Vec<u8> {
    let mut r = RecordBuf::new(PERF_RECORD_SAMPLE, s.misc);
    if sample_type & PERF_SAMPLE_IDENTIFIER != 0 {
        r.u64(s.id);
    }
    if sample_type & PERF_SAMPLE_IP != 0 {
        r.u64(s.ip);
    }
    if sample_type & PERF_SAMPLE_TID != 0 {
        r.u32(s.pid);
        r.u32(s.tid);
    }
    if sample_type & PERF_SAMPLE_TIME != 0 {
        r.u64(s.time);
    }
    if sample_type & PERF_SAMPLE_ADDR != 0 {
        r.u64(0);
    }
    if sample_type & PERF_SAMPLE_ID != 0 {
        r.u64(s.id);
    }
    if sample_type & PERF_SAMPLE_STREAM_ID != 0 {
        r.u64(s.id);
    }
    if sample_type & PERF_SAMPLE_CPU != 0 {
        r.u32(s.cpu);
        r.u32(0);
    }
    if sample_type & PERF_SAMPLE_PERIOD != 0 {
        r.u64(s.period);
    }
    if sample_type & PERF_SAMPLE_CALLCHAIN != 0 {
        let room = (MAX_RECORD_SIZE - r.bytes.len() - 8) / 8;
        let chain = &s.callchain[..s.callchain.len().min(room)];
        r.u64(chain.len() as u64);
        for &frame in chain {
            r.u64(frame);
        }
    }
    if sample_type & PERF_SAMPLE_RAW != 0 {
        // The u32 size and the data end on 8 bytes, as the kernel pads them.
        let room = MAX_RECORD_SIZE.saturating_sub(r.bytes.len() + 4);
        let data = &s.raw[..s.raw.len().min(room)];
        let padded = (4 + data.len()).next_multiple_of(8) - 4;
        r.u32(padded as u32);
        r.bytes.extend_from_slice(data);
        r.bytes.resize(r.bytes.len() + padded - data.len(), 0);
    }
    r.finish()
}

/// Encode a PERF_RECORD_FINISHED_ROUND (a user record: everything before it may be sorted and flushed).
pub fn encode_finished_round() -> Vec<u8> {
    RecordBuf::new(PERF_RECORD_FINISHED_ROUND, 0).finish()
}
