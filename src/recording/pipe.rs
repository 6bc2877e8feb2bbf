//! Pipe mode (`perf record -o -`, `rprof record -o -`): a 16-byte header, then a stream of records in which
//! the attrs and the feature sections travel as records of their own (HEADER_ATTR, HEADER_FEATURE, and
//! HEADER_BUILD_ID, EVENT_UPDATE, HEADER_TRACING_DATA, FINISHED_INIT...) before the kernel's records.
//!
//! The reader walks these leading records (the prologue) with the same [`DataSection`] that then walks the
//! whole stream again from its start, which they still are in the buffer; linux-perf-data parses the attrs
//! and features from the prologue's HEADER_ATTR and HEADER_FEATURE records once they are checked as the file
//! mode's sections are. The writer's side is [`encode_header`], [`encode_attr`] and [`encode_feature`].
use std::collections::HashMap;
use std::fs::File;
use std::io::Cursor;
use std::path::Path;

use linux_perf_data::PerfFileReader;

use super::data_section::{DataSection, Walked};
use super::event_update::{event_names, parse_name, PERF_RECORD_EVENT_UPDATE};
use super::features::{
    attr_size_is_exact, check_cmdline, check_event_desc, parse_build_ids, HEADER_CMDLINE,
    HEADER_EVENT_DESC,
};
use super::header::read_meta;
use super::reader::{Found, Reader};
use super::stream::RecordStream;
use super::{Meta, RecordingError};

/// The size of the pipe-mode header (`struct perf_pipe_file_header`: the magic and this size).
pub(super) const PIPE_HEADER_SIZE: u64 = 16;
pub(super) const PERF_RECORD_HEADER_ATTR: u32 = 64;
pub(super) const PERF_RECORD_HEADER_BUILD_ID: u32 = 67;
pub(super) const PERF_RECORD_HEADER_FEATURE: u32 = 80;
pub(super) const PERF_RECORD_FINISHED_INIT: u32 = 82;
/// The most attrs a stream may have (as in file mode).
const MAX_ATTRS: usize = 65_536;

/// Whether `start` (the first 16 bytes of an input) is a pipe-mode header.
pub(super) fn is_pipe_header(start: &[u8]) -> bool {
    start.len() == 16
        && &start[..8] == b"PERFILE2"
        && u64::from_le_bytes(start[8..16].try_into().unwrap_or_default()) == PIPE_HEADER_SIZE
}

/// What the prologue of a stream holds.
#[derive(Default)]
struct Prologue {
    /// The pipe header and the HEADER_ATTR and HEADER_FEATURE records, for linux-perf-data.
    for_crate: Vec<u8>,
    attrs: usize,
    names: HashMap<u64, String>,
    /// HEADER_BUILD_ID records, laid out as a BUILD_ID section.
    build_ids: Vec<u8>,
}

/// Open the pipe-mode stream of `file` (its 16-byte header already read).
pub(super) fn open(path: &Path, file: File) -> Result<Reader, RecordingError> {
    let corrupt = |reason: String| RecordingError::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    let mut data = DataSection::new(RecordStream::new(file, PIPE_HEADER_SIZE, u64::MAX));
    let prologue = read_prologue(&mut data).map_err(|source| RecordingError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let prologue = prologue.map_err(corrupt)?;
    if prologue.attrs == 0 {
        return Err(corrupt(
            "its stream has no HEADER_ATTR record before its first sample (is it a perf.data stream?)"
                .into(),
        ));
    }
    data.rewind();
    let parsed = PerfFileReader::parse_pipe(Cursor::new(prologue.for_crate))
        .map_err(|e| corrupt(e.to_string()))?;
    let perf_file = parsed.perf_file;
    let descs = perf_file.event_attributes();
    let ids: Vec<Vec<u64>> = descs.iter().map(|d| d.event_ids.clone()).collect();
    let names = event_names(descs, &ids, || prologue.names);
    let mut problems = Vec::new();
    let (meta, mut build_ids) = read_meta(&perf_file).unwrap_or_else(|reason| {
        problems.push(reason);
        (Meta::default(), Vec::new())
    });
    match parse_build_ids(&prologue.build_ids) {
        Ok(more) => build_ids.extend(more),
        Err(reason) => problems.push(reason),
    }
    let found = Found {
        meta,
        build_ids,
        ns_pids: HashMap::new(),
        python_names: Vec::new(),
        walk_problem_at: problems.len(),
        problems,
        unfinished: false,
        short_file: false,
        pipe: true,
        tracing: Vec::new(),
    };
    Ok(Reader::assemble(path, data, descs, ids, names, found))
}

/// Walk the records before the first kernel record, keeping what describes the recording. A damaged
/// record ends the prologue (the walk of the whole stream reports it); a record that would make
/// linux-perf-data misread is an error.
fn read_prologue(data: &mut DataSection) -> std::io::Result<Result<Prologue, String>> {
    let mut p = Prologue::default();
    p.for_crate.extend_from_slice(b"PERFILE2");
    p.for_crate
        .extend_from_slice(&PIPE_HEADER_SIZE.to_le_bytes());
    while let Walked::Record {
        start,
        record_type,
        size,
    } = data.next()?
    {
        if record_type < PERF_RECORD_HEADER_ATTR {
            break;
        }
        let record = data.record(start, size);
        let checked = match record_type {
            PERF_RECORD_HEADER_ATTR => {
                p.attrs += 1;
                check_header_attr(record, p.attrs)
            }
            PERF_RECORD_HEADER_FEATURE => check_header_feature(record),
            PERF_RECORD_EVENT_UPDATE => {
                p.names.extend(parse_name(record));
                continue;
            }
            PERF_RECORD_HEADER_BUILD_ID => {
                p.build_ids.extend_from_slice(record);
                continue;
            }
            _ => continue,
        };
        if let Err(reason) = checked {
            return Ok(Err(reason));
        }
        p.for_crate.extend_from_slice(record);
    }
    Ok(Ok(p))
}

/// Check a HEADER_ATTR record (the `attrs`-th): an attr of a size linux-perf-data reads exactly, then ids.
fn check_header_attr(record: &[u8], attrs: usize) -> Result<(), String> {
    if attrs > MAX_ATTRS {
        return Err(format!(
            "its stream holds more than {MAX_ATTRS} HEADER_ATTR records"
        ));
    }
    let size = record
        .get(12..16)
        .map(|b| u32::from_le_bytes(b.try_into().unwrap_or_default()) as usize);
    match size {
        Some(size)
            if attr_size_is_exact(size)
                && size + 8 <= record.len()
                && (record.len() - 8 - size).is_multiple_of(8) =>
        {
            Ok(())
        }
        _ => Err(format!(
            "its HEADER_ATTR record {attrs} holds an attr of an invalid size {}",
            size.unwrap_or(0)
        )),
    }
}

/// Check a HEADER_FEATURE record whose counts linux-perf-data would trust (EVENT_DESC, CMDLINE).
fn check_header_feature(record: &[u8]) -> Result<(), String> {
    let Some(feature) = record.get(8..16) else {
        return Err("a HEADER_FEATURE record is shorter than its feature id".into());
    };
    let feature = u64::from_le_bytes(feature.try_into().unwrap_or_default());
    let section = &record[16..];
    match feature {
        f if f == HEADER_EVENT_DESC as u64 => check_event_desc(section),
        f if f == HEADER_CMDLINE as u64 => check_cmdline(section),
        f if f >= 256 => Err(format!("a HEADER_FEATURE record has feature id {f}")),
        _ => Ok(()),
    }
}

/// The pipe-mode header.
pub(super) fn encode_header() -> Vec<u8> {
    let mut out = b"PERFILE2".to_vec();
    out.extend_from_slice(&PIPE_HEADER_SIZE.to_le_bytes());
    out
}

/// A user record of `record_type` with `body` (whose length must keep the record under 64 KiB).
fn user_record(record_type: u32, body: &[u8]) -> Option<Vec<u8>> {
    let size = u16::try_from(8 + body.len()).ok()?;
    let mut out = Vec::with_capacity(usize::from(size));
    out.extend_from_slice(&record_type.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&size.to_le_bytes());
    out.extend_from_slice(body);
    Some(out)
}

/// A HEADER_ATTR record: the attr and its event ids; None when they make a record of 64 KiB or more.
pub(super) fn encode_attr(attr: &[u8], ids: &[u64]) -> Option<Vec<u8>> {
    let mut body = attr.to_vec();
    for id in ids {
        body.extend_from_slice(&id.to_le_bytes());
    }
    user_record(PERF_RECORD_HEADER_ATTR, &body)
}

/// A HEADER_FEATURE record carrying the feature section `section` of feature `bit`; None when it makes a
/// record of 64 KiB or more.
pub(super) fn encode_feature(bit: usize, section: &[u8]) -> Option<Vec<u8>> {
    let mut body = (bit as u64).to_le_bytes().to_vec();
    body.extend_from_slice(section);
    // perf reads the section up to the record's end: pad to 8 bytes as perf does.
    body.resize(body.len().next_multiple_of(8), 0);
    user_record(PERF_RECORD_HEADER_FEATURE, &body)
}

/// FINISHED_INIT: the end of the records that describe the recording.
pub(super) fn encode_finished_init() -> Vec<u8> {
    user_record(PERF_RECORD_FINISHED_INIT, &[]).unwrap_or_default()
}

/// The standard output kept for a pipe-mode recording by [`claim_stdout`].
static STDOUT: std::sync::Mutex<Option<File>> = std::sync::Mutex::new(None);

/// For `record -o -`: keep the standard output for the recording, and send everything else that would be
/// written to it (rprof's own output, and the recorded command's, which inherits it) to the standard error,
/// as perf does. Call it before the command is started.
pub fn claim_stdout() -> std::io::Result<()> {
    use std::os::fd::AsFd;
    // try_clone_to_owned duplicates with FD_CLOEXEC: the recorded command does not inherit the stream.
    let out = std::io::stdout().as_fd().try_clone_to_owned()?;
    nix::unistd::dup2_stdout(std::io::stderr())?;
    *STDOUT.lock().unwrap_or_else(|e| e.into_inner()) = Some(File::from(out));
    Ok(())
}

/// The standard output for a pipe-mode recording: the one [`claim_stdout`] kept, else a duplicate of it.
pub(super) fn stdout_file() -> std::io::Result<File> {
    use std::os::fd::AsFd;
    match STDOUT.lock().unwrap_or_else(|e| e.into_inner()).take() {
        Some(file) => Ok(file),
        None => Ok(File::from(std::io::stdout().as_fd().try_clone_to_owned()?)),
    }
}

/// HEADER_BUILD_ID records of `entries` (a BUILD_ID section's entries, each typed as a record).
pub(super) fn encode_build_id_records(section: &[u8]) -> Vec<u8> {
    let mut out = section.to_vec();
    let mut at = 0;
    while let Some(header) = out.get_mut(at..at + 8) {
        header[..4].copy_from_slice(&PERF_RECORD_HEADER_BUILD_ID.to_le_bytes());
        let size = usize::from(u16::from_le_bytes([header[6], header[7]]));
        at += size.max(8);
    }
    out
}
