//! The records of a data section (or of a pipe-mode stream) as one continuous stream of whole records.
//!
//! perf writes three kinds of records that are not a record followed by the next one: `perf record -z` packs
//! the kernel's records into PERF_RECORD_COMPRESSED (81) and, since perf 6.16, COMPRESSED2 (83) records,
//! whose zstd data form one stream across records (a record may start in one and end in a later one, with
//! uncompressed records such as FINISHED_ROUND between them); HEADER_TRACING_DATA (66) and AUXTRACE (71)
//! are followed by a payload that their size does not count. [`RecordStream`] reads the raw bytes and yields
//! the records as perf's reader (tools/perf/util/session.c) sees them: a compressed record's whole records
//! in its place (a record cut at its end waits for the next compressed record), payloads taken out. It
//! decompresses in steps of [`STEP`] bytes, so that no input can make it allocate without bound.
use std::fs::File;
use std::io::Read;

use zstd::stream::raw::{Decoder, Operation};

const PERF_RECORD_HEADER_TRACING_DATA: u32 = 66;
const PERF_RECORD_AUXTRACE: u32 = 71;
pub(super) const PERF_RECORD_COMPRESSED: u32 = 81;
pub(super) const PERF_RECORD_COMPRESSED2: u32 = 83;

/// How many decompressed bytes one step produces at most.
const STEP: usize = 1 << 20;
/// How many raw bytes are read at a time.
const RAW_CHUNK: u64 = 1 << 20;
/// The most tracing data (event formats, and perf's copy of kallsyms) kept from HEADER_TRACING_DATA.
const MAX_TRACING_DATA: u64 = 256 << 20;

/// Where a stretch of the stream comes from: from `logical` on, the bytes at file offset `file` on, or (when
/// `compressed`) the records decompressed from the compressed record at `file`.
#[derive(Clone, Copy, Debug)]
struct Segment {
    logical: u64,
    file: u64,
    compressed: bool,
}

/// The records of a data section, read from its raw bytes. See the module documentation.
pub(super) struct RecordStream {
    raw: File,
    /// Raw bytes not yet read from `raw` (u64::MAX for a pipe: until its end).
    raw_left: u64,
    /// Raw bytes read; those from `raw_pos` on are not yet used.
    raw_buf: Vec<u8>,
    raw_pos: usize,
    /// The file offset of `raw_buf[raw_pos]`.
    raw_offset: u64,
    /// Whole records ready to be read; those from `out_pos` on are not yet read.
    out: Vec<u8>,
    out_pos: usize,
    /// How many bytes were put in `out` so far.
    produced: u64,
    /// Decompressed bytes that do not yet make a whole record.
    decomp: Vec<u8>,
    decoder: Option<Decoder<'static>>,
    step: Vec<u8>,
    /// The zstd data of the compressed record being decompressed, how much of it was used, and where the
    /// record is in the file; whether the last step filled its output (zstd may hold more).
    compressed: Vec<u8>,
    compressed_pos: usize,
    compressed_at: u64,
    more_output: bool,
    tracing_data: Vec<u8>,
    segments: Vec<Segment>,
    /// Why the stream ended before the raw bytes did, and whether because they were cut short (rather than
    /// corrupt).
    damage: Option<(String, bool)>,
    done: bool,
}

impl RecordStream {
    /// The stream of the `len` raw bytes (u64::MAX: up to the end) of `raw`, which is positioned at file
    /// offset `offset`.
    pub(super) fn new(raw: File, offset: u64, len: u64) -> RecordStream {
        RecordStream {
            raw,
            raw_left: len,
            raw_buf: Vec::new(),
            raw_pos: 0,
            raw_offset: offset,
            out: Vec::new(),
            out_pos: 0,
            produced: 0,
            decomp: Vec::new(),
            decoder: None,
            step: Vec::new(),
            compressed: Vec::new(),
            compressed_pos: 0,
            compressed_at: 0,
            more_output: false,
            tracing_data: Vec::new(),
            segments: vec![Segment {
                logical: 0,
                file: offset,
                compressed: false,
            }],
            damage: None,
            done: false,
        }
    }

    /// Why the stream ended before its raw bytes did (a damaged compressed record), if it did, and whether
    /// because they were cut short.
    pub(super) fn damage(&self) -> Option<(&str, bool)> {
        self.damage
            .as_ref()
            .map(|(reason, cut)| (reason.as_str(), *cut))
    }

    /// The payloads of the HEADER_TRACING_DATA records read so far (perf's tracing data: event formats).
    pub(super) fn tracing_data(&self) -> &[u8] {
        &self.tracing_data
    }

    /// Where byte `logical` of the stream comes from: its file offset, or that of the compressed record it
    /// was decompressed from (then `true`).
    pub(super) fn place(&self, logical: u64) -> (u64, bool) {
        let i = self.segments.partition_point(|s| s.logical <= logical);
        let s = self.segments[i.saturating_sub(1)];
        match s.compressed {
            true => (s.file, true),
            false => (s.file + (logical - s.logical), false),
        }
    }

    /// Make `raw_buf` hold `n` unused bytes if the raw bytes have them; returns how many it holds.
    fn raw_fill(&mut self, n: usize) -> std::io::Result<usize> {
        let have = self.raw_buf.len() - self.raw_pos;
        if have >= n || self.raw_left == 0 {
            return Ok(have);
        }
        self.raw_buf.drain(..self.raw_pos);
        self.raw_pos = 0;
        let want = ((n - have) as u64).max(RAW_CHUNK).min(self.raw_left);
        let got = (&mut self.raw).take(want).read_to_end(&mut self.raw_buf)? as u64;
        self.raw_left = match got < want {
            true => 0,
            false => self.raw_left.saturating_sub(got),
        };
        Ok(self.raw_buf.len())
    }

    /// Note that the bytes put in `out` next come from file offset `file` (or were decompressed from the
    /// compressed record there).
    fn note(&mut self, file: u64, compressed: bool) {
        let logical = self.produced + self.out.len() as u64;
        let last = self.segments[self.segments.len() - 1];
        let continues = match (last.compressed, compressed) {
            (false, false) => last.file + (logical - last.logical) == file,
            (true, true) => last.file == file,
            _ => false,
        };
        if !continues {
            self.segments.push(Segment {
                logical,
                file,
                compressed,
            });
        }
    }

    /// Put `n` raw bytes in `out` as they are.
    fn pass_raw(&mut self, n: usize) {
        self.note(self.raw_offset, false);
        self.out
            .extend_from_slice(&self.raw_buf[self.raw_pos..self.raw_pos + n]);
        self.consume_raw(n);
    }

    fn consume_raw(&mut self, n: usize) {
        self.raw_pos += n;
        self.raw_offset += n as u64;
    }

    /// The type and size of the raw record at `raw_pos + at` (its header must be in `raw_buf`).
    fn raw_header(&self, at: usize) -> (u32, usize) {
        let h = &self.raw_buf[self.raw_pos + at..self.raw_pos + at + 8];
        let record_type = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        (record_type, usize::from(u16::from_le_bytes([h[6], h[7]])))
    }

    /// Read the next raw record (or a run of plain ones) into `out`, or start decompressing a compressed one.
    fn next_raw(&mut self) -> std::io::Result<()> {
        let have = self.raw_fill(8)?;
        if have < 8 {
            // The end, or a header cut short: what is there goes out, and the walk reports it.
            if !self.decomp.is_empty() && self.damage.is_none() {
                self.damage = Some((
                    format!(
                        "the compressed records end inside a record ({} bytes of it)",
                        self.decomp.len()
                    ),
                    true,
                ));
            }
            self.pass_raw(have);
            self.done = true;
            return Ok(());
        }
        let (record_type, size) = self.raw_header(0);
        let have = self.raw_fill(size.max(8))?;
        if size < 8 || have < size {
            // An invalid size or a record cut short: the walk of the stream reports it.
            self.pass_raw(have.min(size.max(8)));
            self.done = true;
            return Ok(());
        }
        match record_type {
            PERF_RECORD_COMPRESSED | PERF_RECORD_COMPRESSED2 => {
                self.start_compressed(record_type, size)
            }
            PERF_RECORD_HEADER_TRACING_DATA | PERF_RECORD_AUXTRACE => {
                self.with_payload(record_type, size)?
            }
            _ => {
                // A run of plain records, as many as are whole in the buffer.
                let mut run = size;
                while self.raw_buf.len() - self.raw_pos >= run + 8 {
                    let (t, s) = self.raw_header(run);
                    let special = matches!(
                        t,
                        PERF_RECORD_COMPRESSED
                            | PERF_RECORD_COMPRESSED2
                            | PERF_RECORD_HEADER_TRACING_DATA
                            | PERF_RECORD_AUXTRACE
                    );
                    if special || s < 8 || self.raw_buf.len() - self.raw_pos < run + s {
                        break;
                    }
                    run += s;
                }
                self.pass_raw(run);
            }
        }
        Ok(())
    }

    /// Start decompressing the compressed record of `size` bytes at `raw_pos`.
    fn start_compressed(&mut self, record_type: u32, size: usize) {
        let body = &self.raw_buf[self.raw_pos + 8..self.raw_pos + size];
        let data = match record_type {
            PERF_RECORD_COMPRESSED => Some(body),
            // COMPRESSED2: the size of the zstd data, then the data and padding to 8 bytes.
            _ => body.get(..8).and_then(|n| {
                let n = u64::from_le_bytes(n.try_into().unwrap_or_default());
                body.get(8..usize::try_from(n).ok()?.checked_add(8)?)
            }),
        };
        let Some(data) = data else {
            self.damage = Some((
                format!(
                    "the COMPRESSED2 record at byte {} holds fewer bytes than it says",
                    self.raw_offset
                ),
                false,
            ));
            self.done = true;
            return;
        };
        self.compressed.clear();
        self.compressed.extend_from_slice(data);
        self.compressed_pos = 0;
        self.compressed_at = self.raw_offset;
        self.consume_raw(size);
    }

    /// Pass on a HEADER_TRACING_DATA (its payload kept) or AUXTRACE record (its payload dropped).
    fn with_payload(&mut self, record_type: u32, size: usize) -> std::io::Result<()> {
        let at = self.raw_offset;
        let body = &self.raw_buf[self.raw_pos + 8..self.raw_pos + size];
        let payload = match record_type {
            PERF_RECORD_AUXTRACE => body
                .get(..8)
                .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default())),
            _ => body
                .get(..4)
                .map(|b| u64::from(u32::from_le_bytes(b.try_into().unwrap_or_default()))),
        };
        self.pass_raw(size);
        let mut left = payload.unwrap_or(0);
        let keep = record_type == PERF_RECORD_HEADER_TRACING_DATA
            && self.tracing_data.len() as u64 + left <= MAX_TRACING_DATA;
        while left > 0 {
            let have = self.raw_fill(1)?;
            if have == 0 {
                self.damage = Some((
                    format!(
                        "the data section is truncated inside the payload of the record at byte {at}"
                    ),
                    true,
                ));
                self.done = true;
                return Ok(());
            }
            let n = have.min(usize::try_from(left).unwrap_or(usize::MAX));
            if keep {
                let bytes = &self.raw_buf[self.raw_pos..self.raw_pos + n];
                self.tracing_data.extend_from_slice(bytes);
            }
            self.consume_raw(n);
            left -= n as u64;
        }
        Ok(())
    }

    /// Decompress one step of the current compressed record, and put the whole records decompressed so far
    /// in `out`.
    fn decompress_step(&mut self) -> std::io::Result<()> {
        let decoder = match &mut self.decoder {
            Some(d) => d,
            None => self.decoder.insert(Decoder::new()?),
        };
        self.step.resize(STEP, 0);
        let status =
            decoder.run_on_buffers(&self.compressed[self.compressed_pos..], &mut self.step);
        let status = match status {
            Ok(status) => status,
            Err(e) => {
                self.damage = Some((
                    format!(
                        "the zstd data of the compressed record at byte {} cannot be decompressed: {e}",
                        self.compressed_at
                    ),
                    false,
                ));
                self.done = true;
                return Ok(());
            }
        };
        self.compressed_pos += status.bytes_read;
        self.more_output = status.bytes_written == STEP;
        self.decomp
            .extend_from_slice(&self.step[..status.bytes_written]);
        let mut whole = 0;
        while let Some(h) = self.decomp.get(whole..whole + 8) {
            let size = usize::from(u16::from_le_bytes([h[6], h[7]]));
            if size < 8 {
                // Let the walk report the invalid size.
                whole += 8;
                self.done = true;
                break;
            }
            if self.decomp.len() - whole < size {
                break;
            }
            whole += size;
        }
        self.note(self.compressed_at, true);
        self.out.extend_from_slice(&self.decomp[..whole]);
        self.decomp.drain(..whole);
        if status.bytes_read == 0 && status.bytes_written == 0 {
            // zstd made no progress: what is left of this record is of no use.
            self.compressed_pos = self.compressed.len();
            self.more_output = false;
        }
        Ok(())
    }

    /// Fill `out` with the next bytes of the stream (none at its end).
    fn produce(&mut self) -> std::io::Result<()> {
        self.produced += self.out.len() as u64;
        self.out.clear();
        self.out_pos = 0;
        while self.out.is_empty() && !self.done {
            if self.compressed_pos < self.compressed.len() || self.more_output {
                self.decompress_step()?;
            } else {
                self.next_raw()?;
            }
        }
        Ok(())
    }
}

impl Read for RecordStream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.out_pos == self.out.len() {
            self.produce()?;
        }
        let n = buf.len().min(self.out.len() - self.out_pos);
        buf[..n].copy_from_slice(&self.out[self.out_pos..self.out_pos + n]);
        self.out_pos += n;
        Ok(n)
    }
}
