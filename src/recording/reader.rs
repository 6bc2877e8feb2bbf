//! The perf.data reader. linux-perf-data parses the header, the attrs and the feature sections; this module
//! validates everything that crate would trust (section bounds, counts that size allocations) so that no input
//! can make it panic or allocate without bound. The data section is read into memory once and walked here:
//! each record is parsed in place (linux-perf-event-reader, zero-copy) and records are put in time order by
//! FINISHED_ROUND the way perf does ([`OrderedMerge`]), then mapped to [`Event`]s.
//!
//! A data section that is cut short (the file was truncated, or `rprof record` / `perf record` was killed
//! before writing the final header) yields the records before the cut and then an error.
use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use byteorder::LittleEndian;
use linux_perf_data::linux_perf_event_reader::constants::{
    PERF_RECORD_LOST_SAMPLES, PERF_RECORD_MISC_MMAP_BUILD_ID, PERF_RECORD_MMAP2,
    PERF_RECORD_SAMPLE, PERF_SAMPLE_ADDR, PERF_SAMPLE_CALLCHAIN, PERF_SAMPLE_CPU, PERF_SAMPLE_ID,
    PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_IP, PERF_SAMPLE_PERIOD, PERF_SAMPLE_READ,
    PERF_SAMPLE_STACK_USER, PERF_SAMPLE_STREAM_ID, PERF_SAMPLE_TID, PERF_SAMPLE_TIME,
};
use linux_perf_data::linux_perf_event_reader::{
    get_record_id, get_record_identifier, get_record_timestamp, AttrFlags,
    CpuMode as ReaderCpuMode, Endianness, EventRecord, Mmap2FileId, RawData, RawEventRecord,
    ReadFormat, RecordIdParseInfo, RecordParseInfo, RecordType, SamplingPolicy,
};
use linux_perf_data::{Feature, PerfFile, PerfFileReader};

use super::encode::PERF_RECORD_FINISHED_ROUND;
use super::features::{
    check_cmdline, check_event_desc, parse_build_ids, HEADER_CMDLINE, HEADER_EVENT_DESC,
};
use super::writer::{FileHeader, HEADER_SIZE};
use super::{BuildIdEntry, CpuMode, Event, Meta, RecordingError, Sample, UserStack};
use crate::merge::OrderedMerge;
use crate::unwind::dwarf::UserRegs;

/// PERF_RECORD_AUXTRACE and the compressed record types, which this reader refuses.
const PERF_RECORD_AUXTRACE: u32 = 71;
const PERF_RECORD_COMPRESSED: u32 = 81;
const PERF_RECORD_COMPRESSED2: u32 = 83;

/// The file as linux-perf-data sees it: the real file with some byte ranges replaced (a header with
/// validated sections, and the feature table moved to where the crate looks for it).
struct PatchedFile {
    inner: BufReader<File>,
    patches: Vec<(u64, Vec<u8>)>,
    pos: u64,
}

impl Read for PatchedFile {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut limit = buf.len() as u64;
        for (start, bytes) in &self.patches {
            let end = start + bytes.len() as u64;
            if (*start..end).contains(&self.pos) {
                let from = (self.pos - start) as usize;
                let n = (bytes.len() - from).min(buf.len());
                buf[..n].copy_from_slice(&bytes[from..from + n]);
                self.pos += n as u64;
                self.inner.seek(SeekFrom::Start(self.pos))?;
                return Ok(n);
            }
            if *start > self.pos {
                limit = limit.min(start - self.pos);
            }
        }
        let n = self.inner.read(&mut buf[..limit as usize])?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for PatchedFile {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        self.pos = self.inner.seek(to)?;
        Ok(self.pos)
    }
}

/// What the attr of a record says about parsing it.
struct AttrInfo {
    sample_type: u64,
    read_format: u64,
    /// The period of samples without PERF_SAMPLE_PERIOD.
    default_period: u64,
    parse_info: RecordParseInfo,
    /// Whether its samples hold only the fields [`read_simple_sample`] reads.
    simple_samples: bool,
}

/// How a record finds its attr (as linux-perf-data does it).
enum AttrLookup {
    /// One attr: every record belongs to it.
    Only,
    /// Several attrs whose records hold the sample id at the same place.
    SameLayout(RecordIdParseInfo),
    /// Several attrs, all with PERF_SAMPLE_IDENTIFIER (the id is first in a SAMPLE, last elsewhere).
    Identifier { sample_id_all: bool },
}

/// Reads a recording written by rprof or by `perf record`.
pub struct Reader {
    path: PathBuf,
    data: DataSection,
    attrs: Vec<AttrInfo>,
    lookup: AttrLookup,
    /// Sample id -> attr index, for files with several attrs.
    id_to_attr: HashMap<u64, usize>,
    /// Records walked but not yet safe to release: (offset in the data section, attr index) by time.
    pending: OrderedMerge<(u64, usize)>,
    /// Records released in time order, not yet returned.
    ready: VecDeque<(u64, usize)>,
    /// Whether the walk has reached the end of the data section (or the damage in it).
    walked_all: bool,
    meta: Meta,
    build_ids: Vec<BuildIdEntry>,
    /// What to report after the last good record (truncated or corrupt data section, bad feature sections),
    /// and where in that list a damaged record found by the walk goes.
    problems: Vec<String>,
    walk_problem_at: usize,
    done: bool,
}

/// How many bytes of the data section are read at a time.
const CHUNK: u64 = 1 << 20;

/// The data section, read in chunks and walked record by record. Each record stays in the buffer (and is
/// parsed there) until it has been returned; rounds tell which bytes no record needs any more.
struct DataSection {
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
enum Walked {
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
    /// The record of `size` bytes at `start`, which must be in the buffer.
    fn record(&self, start: u64, size: usize) -> &[u8] {
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
    fn next(&mut self) -> std::io::Result<Walked> {
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

    /// A record of the current round was queued.
    fn queued(&mut self) {
        if let Some(round) = self.rounds.back_mut() {
            round.1 += 1;
        }
    }

    /// A FINISHED_ROUND was walked: a new round starts.
    fn new_round(&mut self) {
        self.rounds.push_back((self.walk_pos, 0));
        self.forget_finished_rounds();
    }

    /// The record at `start` was returned: its bytes are no longer needed.
    fn returned(&mut self, start: u64) {
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

fn read_u32(bytes: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(b)
}

fn read_u64(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(b)
}

/// `offset + size` if that range lies inside a file of `file_len` bytes.
fn section_end(offset: u64, size: u64, file_len: u64) -> Option<u64> {
    offset.checked_add(size).filter(|&end| end <= file_len)
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
const SIMPLE_SAMPLE_FIELDS: u64 = FIXED_SAMPLE_FIELDS | PERF_SAMPLE_CALLCHAIN;

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

/// Read the feature section table at `table_at` and check that every section lies inside the file and that
/// the counts in EVENT_DESC and CMDLINE fit their sections.
fn read_feature_table(
    file: &mut BufReader<File>,
    features: [u64; 4],
    table_at: u64,
    file_len: u64,
) -> Result<(), String> {
    let count: u32 = features.iter().map(|w| w.count_ones()).sum();
    let table_len = 16 * u64::from(count);
    if section_end(table_at, table_len, file_len).is_none() {
        return Err(format!(
            "its feature section table ({table_len} bytes at byte {table_at}) is missing: the file is truncated"
        ));
    }
    let io = |e: std::io::Error| format!("cannot read its feature sections: {e}");
    let mut table = vec![0u8; table_len as usize];
    file.seek(SeekFrom::Start(table_at)).map_err(io)?;
    file.read_exact(&mut table).map_err(io)?;
    let set_bits = (0..256).filter(|bit| features[bit / 64] & (1 << (bit % 64)) != 0);
    for (i, bit) in set_bits.enumerate() {
        let (offset, size) = (read_u64(&table, 16 * i), read_u64(&table, 16 * i + 8));
        if section_end(offset, size, file_len).is_none() {
            return Err(format!(
                "its feature section {bit} ({size} bytes at byte {offset}) is past the end of the file"
            ));
        }
        if bit == HEADER_EVENT_DESC || bit == HEADER_CMDLINE {
            let mut bytes = vec![0u8; size as usize];
            file.seek(SeekFrom::Start(offset)).map_err(io)?;
            file.read_exact(&mut bytes).map_err(io)?;
            if bit == HEADER_EVENT_DESC {
                check_event_desc(&bytes)?;
            } else {
                check_cmdline(&bytes)?;
            }
        }
    }
    Ok(())
}

/// Let linux-perf-data parse `path` with `patches` laid over its bytes.
fn parse_patched(
    path: &Path,
    patches: Vec<(u64, Vec<u8>)>,
) -> Result<PerfFileReader<PatchedFile>, linux_perf_data::Error> {
    let inner = BufReader::with_capacity(1 << 16, File::open(path)?);
    PerfFileReader::parse_file(PatchedFile {
        inner,
        patches,
        pos: 0,
    })
}

/// The HOSTNAME, OSRELEASE, NRCPUS, CMDLINE and BUILD_ID feature sections.
fn read_meta(perf_file: &PerfFile) -> Result<(Meta, Vec<BuildIdEntry>), String> {
    let bad = |e: linux_perf_data::Error| format!("its feature sections are corrupt: {e}");
    let nr_cpus = perf_file.nr_cpus().map_err(bad)?;
    let string = |s: Option<&str>| s.unwrap_or_default().to_string();
    let meta = Meta {
        hostname: string(perf_file.hostname().map_err(bad)?),
        os_release: string(perf_file.os_release().map_err(bad)?),
        nr_cpus_online: nr_cpus.map_or(0, |n| n.nr_cpus_online),
        nr_cpus_available: nr_cpus.map_or(0, |n| n.nr_cpus_available),
        cmdline: perf_file
            .cmdline()
            .map_err(bad)?
            .unwrap_or_default()
            .into_iter()
            .map(str::to_string)
            .collect(),
    };
    let build_ids = match perf_file.feature_section_data(Feature::BUILD_ID) {
        Some(section) => parse_build_ids(section)?,
        None => Vec::new(),
    };
    Ok((meta, build_ids))
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

impl Reader {
    fn corrupt(path: &Path, reason: impl Into<String>) -> RecordingError {
        RecordingError::Corrupt {
            path: path.to_path_buf(),
            reason: reason.into(),
        }
    }

    /// Open and validate the header, the attrs and the feature sections, and check the record framing of the
    /// data section. A bad header or attrs section is an error here; a truncated or corrupt data section or
    /// feature section is reported by [`Reader::next_event`] after the events that could be read.
    pub fn open(path: &Path) -> Result<Reader, RecordingError> {
        let read_err = |source| RecordingError::Read {
            path: path.to_path_buf(),
            source,
        };
        let corrupt = |reason: String| Self::corrupt(path, reason);
        let file = File::open(path).map_err(read_err)?;
        let file_len = file.metadata().map_err(read_err)?.len();
        let mut file = BufReader::with_capacity(1 << 16, file);

        let mut header = [0u8; HEADER_SIZE as usize];
        if file_len < HEADER_SIZE {
            return Err(corrupt(format!(
                "it is {file_len} bytes, shorter than the {HEADER_SIZE}-byte header"
            )));
        }
        file.read_exact(&mut header).map_err(read_err)?;
        match &header[..8] {
            b"PERFILE2" => {}
            b"2ELIFREP" => {
                return Err(corrupt(
                    "big-endian perf.data files are not supported".into(),
                ))
            }
            b"PERFFILE" => {
                return Err(corrupt(
                    "the old perf.data version 1 format is not supported".into(),
                ))
            }
            _ => return Err(corrupt("it does not start with the PERFILE2 magic".into())),
        }
        let word = |i: usize| read_u64(&header, 8 + 8 * i);
        let (header_size, attr_size) = (word(0), word(1));
        let (attrs, data) = ((word(2), word(3)), (word(4), word(5)));
        let features = [word(8), word(9), word(10), word(11)];
        if header_size < HEADER_SIZE || header_size > file_len {
            return Err(corrupt(format!("invalid header size {header_size}")));
        }
        if !(64 + 16..=4096 + 16).contains(&attr_size) {
            return Err(corrupt(format!("invalid attr size {attr_size}")));
        }
        if attrs.1 < attr_size || section_end(attrs.0, attrs.1, file_len).is_none() {
            return Err(corrupt(format!(
                "the attrs section ({} bytes at {}) is not inside the file",
                attrs.1, attrs.0
            )));
        }
        if data.0 < header_size || data.0 > file_len {
            return Err(corrupt(format!(
                "the data section offset {} is not inside the file",
                data.0
            )));
        }

        // How much of the data section to read, and whether the feature sections exist.
        let available = file_len - data.0;
        let unfinished = data.1 == 0 && features == [0; 4] && available > 0;
        let truncated = section_end(data.0, data.1, file_len).is_none();
        let (data_len, tail_error, keep_features) = if unfinished {
            let why = "the recording was not finished (the recorder was killed before writing its header)";
            (available, Some(why.to_string()), false)
        } else if truncated {
            let why = format!(
                "the file is truncated: its data section needs {} bytes after byte {}",
                data.1, data.0
            );
            (available, Some(why), false)
        } else {
            (data.1, None, true)
        };

        // The feature sections: any problem there is reported after the events, which are still read.
        let mut problems: Vec<String> = tail_error.into_iter().collect();
        let mut features_ok = false;
        if keep_features {
            match read_feature_table(&mut file, features, data.0 + data.1, file_len) {
                Ok(()) => features_ok = true,
                Err(reason) => problems.push(reason),
            }
        }
        // A damaged record found while walking the data section is reported here in the list.
        let walk_problem_at = problems.len();

        // What linux-perf-data sees: validated sections only (no legacy event_types section), and an empty
        // data section right before the feature table (this module reads the data section itself).
        let shown = |data_at: u64, features: [u64; 4]| {
            let header = FileHeader {
                attr_size,
                attrs,
                data: (data_at, 0),
                features,
            };
            vec![(0, header.to_bytes().to_vec())]
        };
        let parsed = match features_ok {
            true => match parse_patched(path, shown(data.0 + data.1, features)) {
                Ok(parsed) => Some(parsed),
                Err(e) => {
                    problems.push(format!("its feature sections are corrupt: {e}"));
                    None
                }
            },
            false => None,
        };
        let PerfFileReader { perf_file, .. } = match parsed {
            Some(parsed) => parsed,
            None => parse_patched(path, shown(data.0, [0; 4]))
                .map_err(|e| Self::crate_error(path, e))?,
        };

        let descs = perf_file.event_attributes();
        let attrs: Vec<AttrInfo> = descs
            .iter()
            .map(|desc| AttrInfo {
                sample_type: desc.attr.sample_format.bits(),
                read_format: desc.attr.read_format.bits(),
                default_period: match desc.attr.sampling_policy {
                    SamplingPolicy::Period(p) => p.get(),
                    _ => 1,
                },
                parse_info: RecordParseInfo::new(&desc.attr, Endianness::LittleEndian),
                simple_samples: desc.attr.sample_format.bits() & !SIMPLE_SAMPLE_FIELDS == 0,
            })
            .collect();
        // linux-perf-data has checked that records of several attrs can be told apart.
        let first = &attrs[0].parse_info;
        let lookup = if attrs.len() == 1 {
            AttrLookup::Only
        } else if attrs
            .iter()
            .all(|a| a.parse_info.id_parse_info == first.id_parse_info)
        {
            AttrLookup::SameLayout(first.id_parse_info)
        } else {
            AttrLookup::Identifier {
                sample_id_all: descs[0].attr.flags.contains(AttrFlags::SAMPLE_ID_ALL),
            }
        };
        let mut id_to_attr = HashMap::new();
        for (index, desc) in descs.iter().enumerate() {
            for &id in &desc.event_ids {
                id_to_attr.insert(id, index);
            }
        }
        let (meta, build_ids) = read_meta(&perf_file).unwrap_or_else(|reason| {
            problems.push(reason);
            (Meta::default(), Vec::new())
        });
        // The data section is read on the first call of next_event (report runs that on its own thread).
        let mut file = file.into_inner();
        file.seek(SeekFrom::Start(data.0)).map_err(read_err)?;
        let data = DataSection {
            file,
            offset: data.0,
            len: data_len,
            buf: Vec::new(),
            buf_start: 0,
            walk_pos: 0,
            rounds: VecDeque::from([(0, 0)]),
        };
        Ok(Reader {
            path: path.to_path_buf(),
            data,
            attrs,
            lookup,
            id_to_attr,
            pending: OrderedMerge::new(),
            ready: VecDeque::new(),
            walked_all: false,
            meta,
            build_ids,
            problems,
            walk_problem_at,
            done: false,
        })
    }

    fn crate_error(path: &Path, e: linux_perf_data::Error) -> RecordingError {
        match e {
            linux_perf_data::Error::IoError(source)
                if source.kind() != std::io::ErrorKind::UnexpectedEof =>
            {
                RecordingError::Read {
                    path: path.to_path_buf(),
                    source,
                }
            }
            e => Self::corrupt(path, e.to_string()),
        }
    }

    /// Build ids from the BUILD_ID feature section.
    /// True when some samples carry user registers and a stack copy to unwind (PERF_SAMPLE_STACK_USER).
    pub fn has_user_stacks(&self) -> bool {
        self.attrs
            .iter()
            .any(|a| a.sample_type & PERF_SAMPLE_STACK_USER != 0)
    }

    pub fn build_ids(&self) -> &[BuildIdEntry] {
        &self.build_ids
    }

    /// The HOSTNAME, OSRELEASE, NRCPUS and CMDLINE feature sections (empty / 0 where the file has none).
    pub fn meta(&self) -> &Meta {
        &self.meta
    }

    /// The attr index of a kernel record (0 when its id is unknown, as linux-perf-data does).
    fn attr_index(&self, record_type: RecordType, body: &[u8]) -> usize {
        let id = match &self.lookup {
            AttrLookup::Only => return 0,
            AttrLookup::SameLayout(info) => {
                get_record_id::<LittleEndian>(record_type, RawData::Single(body), info)
            }
            AttrLookup::Identifier { sample_id_all } => get_record_identifier::<LittleEndian>(
                record_type,
                RawData::Single(body),
                *sample_id_all,
            ),
        };
        id.and_then(|id| self.id_to_attr.get(&id).copied())
            .unwrap_or(0)
    }

    /// Walk records into `pending` until a FINISHED_ROUND releases some into `ready`, or, at the end of the
    /// data section or at a damaged record, release them all.
    fn walk_round(&mut self) -> std::io::Result<()> {
        loop {
            let (start, record_type, size) = match self.data.next()? {
                Walked::Record {
                    start,
                    record_type,
                    size,
                } => (start, record_type, size),
                Walked::End => break,
                Walked::Damaged(reason) => {
                    self.problems.insert(self.walk_problem_at, reason);
                    break;
                }
            };
            if record_type == PERF_RECORD_FINISHED_ROUND {
                let ready = &mut self.ready;
                self.pending
                    .finish_round(|_, record| ready.push_back(record));
                self.data.new_round();
                if !self.ready.is_empty() {
                    return Ok(());
                }
                continue;
            }
            let record_type = RecordType(record_type);
            if record_type.is_user_type() {
                continue;
            }
            let body = &self.data.record(start, size)[8..];
            let attr = self.attr_index(record_type, body);
            let time = get_record_timestamp::<LittleEndian>(
                record_type,
                RawData::Single(body),
                &self.attrs[attr].parse_info,
            );
            // Records without a time sort first, as in linux-perf-data (None < Some(0)).
            let key = time.map_or(0, |t| t.saturating_add(1));
            self.pending.push(key, (start, attr));
            self.data.queued();
        }
        let ready = &mut self.ready;
        self.pending.drain(|_, record| ready.push_back(record));
        self.walked_all = true;
        Ok(())
    }

    /// The next event in time order (as perf orders them, by FINISHED_ROUND), or None at the end. Records of
    /// other types are skipped. After an error, returns None.
    pub fn next_event(&mut self) -> Result<Option<Event>, RecordingError> {
        while !self.done {
            let Some((start, attr)) = self.ready.pop_front() else {
                if !self.walked_all {
                    if let Err(source) = self.walk_round() {
                        self.done = true;
                        let path = self.path.clone();
                        return Err(RecordingError::Read { path, source });
                    }
                    continue;
                }
                self.done = true;
                if self.problems.is_empty() {
                    return Ok(None);
                }
                return Err(Self::corrupt(&self.path, self.problems.join("; ")));
            };
            let header = self.data.record(start, 8);
            let size = usize::from(u16::from_le_bytes([header[6], header[7]]));
            let record = self.data.record(start, size);
            let attr = &self.attrs[attr];
            let record = RawEventRecord::new(
                RecordType(read_u32(record, 0)),
                u16::from_le_bytes([record[4], record[5]]),
                RawData::Single(&record[8..]),
                attr.parse_info,
            );
            let event = convert(attr, &record);
            self.data.returned(start);
            match event {
                Ok(Some(event)) => return Ok(Some(event)),
                Ok(None) => continue,
                Err(reason) => {
                    self.done = true;
                    return Err(Self::corrupt(&self.path, reason));
                }
            }
        }
        Ok(None)
    }
}

/// Map one kernel record to an [`Event`]; `Ok(None)` for record types rprof does not use.
fn convert(attr: &AttrInfo, record: &RawEventRecord) -> Result<Option<Event>, String> {
    let record_type = record.record_type.0;
    let body = record.data.as_slice();
    let bad = |what: &str| format!("a {what} record ({} bytes) is corrupt", body.len() + 8);
    if record_type == PERF_RECORD_SAMPLE && attr.simple_samples {
        return read_simple_sample(attr, record.misc, &body).map(|s| Some(Event::Sample(s)));
    }
    // Checks for inputs that would make linux-perf-event-reader panic.
    if record_type == PERF_RECORD_SAMPLE && attr.sample_type & PERF_SAMPLE_CALLCHAIN != 0 {
        let at = callchain_offset(&body, attr.sample_type, attr.read_format)
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
    if record_type == PERF_RECORD_MMAP2 && record.misc & PERF_RECORD_MISC_MMAP_BUILD_ID != 0 {
        match body.get(32) {
            Some(&len) if len <= 20 => {}
            _ => return Err(bad("MMAP2")),
        }
    }
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
        EventRecord::Sample(s) => {
            let mut callchain = Vec::new();
            if let Some(chain) = s.callchain {
                callchain.reserve(chain.len());
                for i in 0..chain.len() {
                    callchain.extend(chain.get(i));
                }
            }
            let user_stack = s.user_regs.as_ref().zip(s.user_stack.as_ref()).and_then(
                |(regs, (stack, dyn_size))| {
                    Some(UserStack {
                        regs: UserRegs::from_sample(regs)?,
                        stack: stack.as_slice().into_owned(),
                        dyn_size: *dyn_size,
                    })
                },
            );
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
            })
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::{encode_finished_round, encode_sample, FileAttr, SampleFields, Writer};

    /// A cpu-clock attr (PERF_ATTR_SIZE_VER0 bytes) with `sample_type`, period 1000 and sample_id_all.
    fn attr_bytes(sample_type: u64) -> Vec<u8> {
        let mut attr = vec![0u8; 64];
        attr[0..4].copy_from_slice(&1u32.to_le_bytes()); // PERF_TYPE_SOFTWARE, config 0 = cpu-clock
        attr[4..8].copy_from_slice(&64u32.to_le_bytes());
        attr[16..24].copy_from_slice(&1000u64.to_le_bytes());
        attr[24..32].copy_from_slice(&sample_type.to_le_bytes());
        attr[40..48].copy_from_slice(&(1u64 << 18).to_le_bytes()); // sample_id_all
        attr
    }

    /// Check that records two CPUs wrote out of order within and across rounds come out in time order, all
    /// of them, over a data section several read chunks long (records stay valid across buffer compaction).
    #[test]
    fn rounds_come_out_in_time_order_across_chunks() {
        let st = PERF_SAMPLE_IP
            | PERF_SAMPLE_TID
            | PERF_SAMPLE_TIME
            | PERF_SAMPLE_CPU
            | PERF_SAMPLE_PERIOD
            | PERF_SAMPLE_CALLCHAIN;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rounds.data");
        let attr = FileAttr {
            attr: attr_bytes(st),
            ids: vec![],
            name: "cpu-clock".into(),
        };
        let mut w = Writer::create(&path, vec![attr]).unwrap();
        let sample = |time: u64, cpu: u32| SampleFields {
            ip: time,
            pid: 7,
            tid: 7 + cpu,
            time,
            id: 0,
            cpu,
            period: 1000,
            callchain: vec![time; 8],
            misc: 2,
        };
        // Round r: CPU 0 has times [1000r, 1000r + 1000), then CPU 1 has [1000r - 990, 1000r + 10): each
        // round overlaps the one before, never the one before that (perf's FINISHED_ROUND contract).
        let rounds = 400u64;
        for r in 1..=rounds {
            for t in (1000 * r..1000 * r + 1000).step_by(20) {
                w.write_record(&[&encode_sample(st, &sample(t, 0))])
                    .unwrap();
            }
            for t in (1000 * r - 990..1000 * r + 10).step_by(20) {
                w.write_record(&[&encode_sample(st, &sample(t, 1))])
                    .unwrap();
            }
            w.write_record(&[&encode_finished_round()]).unwrap();
        }
        let data_size = w.data_size();
        assert!(
            data_size > 4 * CHUNK,
            "{data_size} bytes span several chunks"
        );
        w.finish(&Meta::default(), &[]).unwrap();

        let mut r = Reader::open(&path).unwrap();
        let mut times = Vec::new();
        while let Some(event) = r.next_event().unwrap() {
            let Event::Sample(s) = event else {
                panic!("only samples were written: {event:?}")
            };
            assert_eq!(
                s.callchain,
                vec![s.ip; 8],
                "the record at time {:?}",
                s.time
            );
            assert_eq!(s.tid - s.pid, s.cpu.unwrap());
            times.push(s.time.unwrap());
        }
        assert_eq!(times.len() as u64, rounds * 100);
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "time order");
    }

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

    /// Check that the BUILD_ID parser rejects a record whose size runs past the section.
    #[test]
    fn build_id_section_bounds() {
        let mut section = Vec::new();
        section.extend_from_slice(&0u32.to_le_bytes());
        section.extend_from_slice(&0u16.to_le_bytes());
        section.extend_from_slice(&200u16.to_le_bytes());
        section.resize(60, 0);
        assert!(parse_build_ids(&section).is_err());
    }
}
