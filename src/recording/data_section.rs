//! The data section: read in chunks and walked record by record. Each record's header is checked (its size is
//! valid and inside the section, its type is one this reader can follow), and its bytes stay in the buffer
//! until it was returned; FINISHED_ROUNDs tell which bytes no record needs any more. The bytes come from a
//! [`RecordStream`], which decompresses `perf record -z`'s records and takes payloads out.
use std::collections::VecDeque;
use std::io::Read;

use super::stream::RecordStream;

/// PERF_RECORD_AUXTRACE, which this reader refuses.
const PERF_RECORD_AUXTRACE: u32 = 71;

/// How many bytes of the data section are read at a time.
pub(super) const CHUNK: u64 = 1 << 20;

/// The data section, read in chunks and walked record by record. Each record stays in the buffer (and is
/// parsed there) until it has been returned; rounds tell which bytes no record needs any more.
pub(super) struct DataSection {
    /// Positioned at the end of `buf`.
    stream: RecordStream,
    /// Whether `stream` has ended.
    ended: bool,
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
    /// A truncated, invalid or unsupported record: why, and whether the section was cut short inside it (a
    /// killed recorder) rather than corrupt.
    Damaged {
        reason: String,
        cut: bool,
    },
}

impl DataSection {
    /// The records of `stream`.
    pub(super) fn new(stream: RecordStream) -> DataSection {
        DataSection {
            stream,
            ended: false,
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
        if self.ended {
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
        let want = (end - buf_end).max(CHUNK);
        let got = (&mut self.stream).take(want).read_to_end(&mut self.buf)? as u64;
        if got < want {
            // The end of the data section (or the file became shorter while being read).
            self.ended = true;
        }
        Ok(end <= buf_end + got)
    }

    /// Walk to the next record, checking its header: its size must be valid and inside the data section.
    pub(super) fn next(&mut self) -> std::io::Result<Walked> {
        let start = self.walk_pos;
        let at = self.describe(start);
        let truncated = || Walked::Damaged {
            reason: format!("the data section is truncated inside the record at {at}"),
            cut: true,
        };
        if !self.fill_to(start + 8)? {
            if self.buf_start + self.buf.len() as u64 > start {
                return Ok(truncated());
            }
            return Ok(match self.stream.damage() {
                Some((reason, cut)) => Walked::Damaged {
                    reason: reason.to_string(),
                    cut,
                },
                None => Walked::End,
            });
        }
        let header = self.record(start, 8);
        let record_type = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
        let size = usize::from(u16::from_le_bytes([header[6], header[7]]));
        if size < 8 {
            let reason = format!("the record at {at} has an invalid size {size}");
            return Ok(Walked::Damaged { reason, cut: false });
        }
        if !self.fill_to(start + size as u64)? {
            return Ok(truncated());
        }
        if record_type == PERF_RECORD_AUXTRACE {
            let reason = format!("AUXTRACE data (record at {at}) is not supported");
            return Ok(Walked::Damaged { reason, cut: false });
        }
        self.walk_pos += size as u64;
        Ok(Walked::Record {
            start,
            record_type,
            size,
        })
    }

    /// The file offset of `start` (a position in the stream of records): for a record decompressed from a
    /// compressed record, the offset of that record.
    pub(super) fn file_offset(&self, start: u64) -> u64 {
        self.stream.place(start).0
    }

    /// Where `start` is, for messages: "byte N", or the compressed record it was decompressed from.
    fn describe(&self, start: u64) -> String {
        match self.stream.place(start) {
            (file, false) => format!("byte {file}"),
            (file, true) => {
                format!("a record decompressed from the compressed record at byte {file}")
            }
        }
    }

    /// The stream the records come from.
    pub(super) fn stream(&self) -> &RecordStream {
        &self.stream
    }

    /// Walk again from the start (the records walked so far, none of them queued, are still in the buffer).
    pub(super) fn rewind(&mut self) {
        debug_assert_eq!(self.buf_start, 0);
        self.walk_pos = 0;
    }

    /// The bytes in the buffer from where the walk stands (after a damaged record: up to the end read).
    pub(super) fn rest(&self) -> &[u8] {
        let at = (self.walk_pos - self.buf_start) as usize;
        self.buf.get(at..).unwrap_or_default()
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
