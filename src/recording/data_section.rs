//! The data section: read in chunks and walked record by record. Each record's header is checked (its size is
//! valid and inside the section, its type is one this reader can follow), and its bytes stay in the buffer
//! until it was returned; FINISHED_ROUNDs tell which bytes no record needs any more.
use std::collections::VecDeque;
use std::fs::File;
use std::io::Read;

/// PERF_RECORD_AUXTRACE and the compressed record types, which this reader refuses.
const PERF_RECORD_AUXTRACE: u32 = 71;
const PERF_RECORD_COMPRESSED: u32 = 81;
const PERF_RECORD_COMPRESSED2: u32 = 83;

/// How many bytes of the data section are read at a time.
pub(super) const CHUNK: u64 = 1 << 20;

/// The data section, read in chunks and walked record by record. Each record stays in the buffer (and is
/// parsed there) until it has been returned; rounds tell which bytes no record needs any more.
pub(super) struct DataSection {
    /// Positioned at the end of `buf`.
    file: File,
    /// The file offset of the data section, and how many of its bytes are there to read.
    offset: u64,
    len: u64,
    /// The bytes of the data section from `buf_start` on.
    buf: Vec<u8>,
    buf_start: u64,
    /// Where the next record header is, relative to the data section.
    walk_pos: u64,
    /// The rounds (between FINISHED_ROUNDs) that still have records to return: where each starts and how
    /// many. The last one is the round being walked.
    rounds: VecDeque<(u64, usize)>,
}

/// What the walk of the data section found next.
pub(super) enum Walked {
    /// A whole record of a supported type at `start` (relative to the data section).
    Record {
        start: u64,
        record_type: u32,
        size: usize,
    },
    End,
    /// A truncated, invalid or unsupported record: why.
    Damaged(String),
}

impl DataSection {
    /// The data section of `len` bytes at `offset` in `file`, which is positioned there.
    pub(super) fn new(file: File, offset: u64, len: u64) -> DataSection {
        DataSection {
            file,
            offset,
            len,
            buf: Vec::new(),
            buf_start: 0,
            walk_pos: 0,
            rounds: VecDeque::from([(0, 0)]),
        }
    }

    /// The record of `size` bytes at `start`, which must be in the buffer.
    pub(super) fn record(&self, start: u64, size: usize) -> &[u8] {
        let at = (start - self.buf_start) as usize;
        &self.buf[at..at + size]
    }

    /// Make sure the buffer holds the data section up to `end`; false if the section or the file ends first.
    fn fill_to(&mut self, end: u64) -> std::io::Result<bool> {
        let buf_end = self.buf_start + self.buf.len() as u64;
        if end <= buf_end {
            return Ok(true);
        }
        if end > self.len {
            return Ok(false);
        }
        // Drop the bytes no record needs any more, when that frees at least half of the buffer (a file without
        // rounds keeps everything, and must cost no quadratic copying).
        let keep_from = self.rounds.front().map_or(self.walk_pos, |r| r.0);
        let keep_from = keep_from.min(self.walk_pos);
        let unused = (keep_from - self.buf_start) as usize;
        if unused >= self.buf.len() / 2 {
            self.buf.drain(..unused);
            self.buf_start = keep_from;
        }
        let want = (end - buf_end).max(CHUNK).min(self.len - buf_end);
        self.buf.reserve(want as usize);
        let got = (&mut self.file).take(want).read_to_end(&mut self.buf)? as u64;
        if got < want {
            // The file became shorter while being read: what is there is all there is.
            self.len = buf_end + got;
        }
        Ok(end <= self.len)
    }

    /// Walk to the next record, checking its header: its size must be valid and inside the data section.
    pub(super) fn next(&mut self) -> std::io::Result<Walked> {
        let start = self.walk_pos;
        if start >= self.len {
            return Ok(Walked::End);
        }
        let at = self.offset + start;
        let truncated = || {
            Walked::Damaged(format!(
                "the data section is truncated inside the record at byte {at}"
            ))
        };
        if !self.fill_to(start + 8)? {
            return Ok(truncated());
        }
        let header = self.record(start, 8);
        let record_type = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
        let size = usize::from(u16::from_le_bytes([header[6], header[7]]));
        if size < 8 {
            let reason = format!("the record at byte {at} has an invalid size {size}");
            return Ok(Walked::Damaged(reason));
        }
        if !self.fill_to(start + size as u64)? {
            return Ok(truncated());
        }
        match record_type {
            PERF_RECORD_AUXTRACE => {
                let reason = format!("AUXTRACE data (record at byte {at}) is not supported");
                return Ok(Walked::Damaged(reason));
            }
            PERF_RECORD_COMPRESSED | PERF_RECORD_COMPRESSED2 => {
                let reason =
                    format!("compressed records (byte {at}) are not supported: record without -z");
                return Ok(Walked::Damaged(reason));
            }
            _ => {}
        }
        self.walk_pos += size as u64;
        Ok(Walked::Record {
            start,
            record_type,
            size,
        })
    }

    /// The file offset of `start` (relative to the data section).
    pub(super) fn file_offset(&self, start: u64) -> u64 {
        self.offset + start
    }

    /// The file offset where the walk stands: the end of the last whole record walked.
    pub(super) fn walked_to(&self) -> u64 {
        self.file_offset(self.walk_pos)
    }

    /// A record of the current round was queued.
    pub(super) fn queued(&mut self) {
        if let Some(round) = self.rounds.back_mut() {
            round.1 += 1;
        }
    }

    /// A FINISHED_ROUND was walked: a new round starts.
    pub(super) fn new_round(&mut self) {
        self.rounds.push_back((self.walk_pos, 0));
        self.forget_finished_rounds();
    }

    /// The record at `start` was returned: its bytes are no longer needed.
    pub(super) fn returned(&mut self, start: u64) {
        let round = self.rounds.partition_point(|r| r.0 <= start);
        if let Some(round) = round.checked_sub(1).and_then(|i| self.rounds.get_mut(i)) {
            round.1 = round.1.saturating_sub(1);
        }
        self.forget_finished_rounds();
    }

    fn forget_finished_rounds(&mut self) {
        while self.rounds.len() > 1 && self.rounds.front().is_some_and(|r| r.1 == 0) {
            self.rounds.pop_front();
        }
    }
}
