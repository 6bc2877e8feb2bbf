//! The perf.data writer.
//!
//! Layout (the same order `perf record` uses): header (104 bytes) | event ids of each attr | attrs section
//! (`perf_file_attr` = attr + `perf_file_section` of its ids) | data section | feature section table |
//! feature sections. The header, ids and attrs are written by [`Writer::create`] with a placeholder header
//! (data size 0, no features), so a recording cut short by a kill still has its attrs and records and the
//! reader can tell it was not finished. [`Writer::flush_if_due`] gets the records to the file as the session
//! goes (a SIGKILL loses the last quarter of a second at most) and then updates the header's data size, so
//! that `perf report` reads a killed recording too; the feature bits stay 0, which is how rprof's reader tells
//! that the file was not finished. The data section starts with a PERF_RECORD_EVENT_UPDATE naming each event,
//! so that such a file still tells its events apart (the off-CPU event from the clock) without the EVENT_DESC
//! section. [`Writer::finish`] appends the features and rewrites the header.
//!
//! With the path `-`, the recording is a pipe-mode stream on the standard output (as `perf record -o -`
//! writes it): the 16-byte pipe header, a HEADER_ATTR record per attr, EVENT_DESC as a HEADER_FEATURE
//! record, the names, FINISHED_INIT, the records, and at the end the other features as HEADER_FEATURE
//! records and the build ids as HEADER_BUILD_ID records.
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::event_update::encode_name;
use super::features::{
    encode_build_ids, encode_cmdline, encode_event_desc, encode_nrcpus, encode_ns_pids,
    encode_python_names, put_string, HEADER_BUILD_ID, HEADER_CMDLINE, HEADER_EVENT_DESC,
    HEADER_HOSTNAME, HEADER_NRCPUS, HEADER_OSRELEASE, HEADER_RPROF_NS_PIDS, HEADER_RPROF_PYTHON,
    HEADER_TRACING_DATA,
};
use super::{pipe, BuildIdEntry, FileAttr, Meta, RecordingError};
use std::collections::BTreeMap;

/// `sizeof(struct perf_file_header)`.
pub(crate) const HEADER_SIZE: u64 = 104;
/// Where `perf_file_header.data.size` is.
const DATA_SIZE_AT: u64 = 48;
/// `sizeof(struct perf_file_section)`.
const SECTION_SIZE: u64 = 16;
/// PERF_ATTR_SIZE_VER0, the smallest `perf_event_attr`.
const ATTR_SIZE_VER0: usize = 64;
/// PERF_ATTR_SIZE_VER7, the `perf_event_attr` of perf 6.1.
const ATTR_SIZE_VER7: usize = 128;
/// The write buffer: records arrive in small pieces on the hot path of `rprof record`.
const BUFFER_SIZE: usize = 4 << 20;
/// [`Writer::flush_if_due`] writes the buffer out when it is this old or holds this many bytes.
const FLUSH_EVERY: std::time::Duration = std::time::Duration::from_millis(250);
const FLUSH_BYTES: usize = 1 << 20;

/// The fields of `struct perf_file_header`.
#[derive(Debug)]
pub(crate) struct FileHeader {
    pub attr_size: u64,
    pub attrs: (u64, u64),
    pub data: (u64, u64),
    pub features: [u64; 4],
}

impl FileHeader {
    /// The header bytes (magic "PERFILE2", little-endian, event_types section empty).
    pub(crate) fn to_bytes(&self) -> [u8; HEADER_SIZE as usize] {
        let words: [u64; 13] = [
            HEADER_SIZE,
            self.attr_size,
            self.attrs.0,
            self.attrs.1,
            self.data.0,
            self.data.1,
            0,
            0,
            self.features[0],
            self.features[1],
            self.features[2],
            self.features[3],
            0,
        ];
        let mut out = [0u8; HEADER_SIZE as usize];
        out[..8].copy_from_slice(b"PERFILE2");
        for (i, w) in words[..12].iter().enumerate() {
            out[8 + 8 * i..16 + 8 * i].copy_from_slice(&w.to_le_bytes());
        }
        out
    }
}

/// Streams records into a new recording file.
pub struct Writer {
    path: PathBuf,
    out: BufWriter<File>,
    attrs: Vec<FileAttr>,
    attr_len: usize,
    attrs_offset: u64,
    data_offset: u64,
    data_size: u64,
    last_flush: std::time::Instant,
    /// Host pid -> pid in its own namespace, for rprof's NS_PIDS section.
    ns_pids: BTreeMap<u32, u32>,
    /// The names of the Python frames, for rprof's PYTHON section.
    python_names: Vec<std::sync::Arc<str>>,
    /// A pipe-mode stream (`-o -`): no header to update, and the features go out as records.
    pipe: bool,
    /// Bytes written before the data section's records (the pipe mode's header and metadata records).
    before_data: u64,
    /// The HEADER_TRACING_DATA section (tracepoint formats), when the recording has tracepoint events.
    tracing_data: Option<Vec<u8>>,
    /// Where the copy of the tracing data before the data section is (file mode): the feature table that
    /// [`Writer::flush`] keeps after the records points to it, so that perf reads a killed recording's formats.
    tracing_at: Option<u64>,
}

/// Make every attr `attr_len` bytes long (zero-extended, with its `size` field updated), where `attr_len`
/// is the largest `size` among them: the file header has one attr size for all attrs.
///
/// All-zero trailing fields beyond PERF_ATTR_SIZE_VER7 (128 bytes) are dropped first: perf refuses attrs
/// larger than its own `perf_event_attr` ("file uses a more recent and unsupported ABI"), so the 136-byte
/// attr of a newer kernel with `config3` unused is stored as the 128-byte attr perf 6.1 writes itself.
fn normalize_attrs(path: &Path, attrs: &mut [FileAttr]) -> Result<usize, RecordingError> {
    let invalid = |index: usize, reason: String| RecordingError::InvalidAttr {
        path: path.to_path_buf(),
        index,
        reason,
    };
    if attrs.is_empty() {
        return Err(invalid(
            0,
            "a recording needs at least one event attr".to_string(),
        ));
    }
    let mut attr_len = ATTR_SIZE_VER0;
    for (i, a) in attrs.iter_mut().enumerate() {
        if a.attr.len() < 8 {
            return Err(invalid(
                i,
                format!("{} bytes is shorter than perf_event_attr", a.attr.len()),
            ));
        }
        let size = u32::from_le_bytes([a.attr[4], a.attr[5], a.attr[6], a.attr[7]]) as usize;
        if size < ATTR_SIZE_VER0 || size > a.attr.len() || size > 4096 || !size.is_multiple_of(8) {
            return Err(invalid(
                i,
                format!(
                    "size field {size} does not match its {} bytes",
                    a.attr.len()
                ),
            ));
        }
        a.attr.truncate(size);
        while a.attr.len() > ATTR_SIZE_VER7 && a.attr[a.attr.len() - 8..].iter().all(|&b| b == 0) {
            a.attr.truncate(a.attr.len() - 8);
        }
        attr_len = attr_len.max(a.attr.len());
    }
    for a in attrs.iter_mut() {
        a.attr.resize(attr_len, 0);
        a.attr[4..8].copy_from_slice(&(attr_len as u32).to_le_bytes());
    }
    Ok(attr_len)
}

impl Writer {
    /// Create `path` now (so an unwritable path fails before sampling starts) and write the header
    /// placeholder, the event ids and the attrs. Attrs are stored with their own `size` (the largest one if
    /// they differ; smaller ones are zero-extended), less all-zero trailing fields past 128 bytes.
    pub fn create(path: &Path, attrs: Vec<FileAttr>) -> Result<Writer, RecordingError> {
        Self::create_with_tracing(path, attrs, None)
    }

    /// [`Writer::create`] for a recording with tracepoint events: `tracing` (see
    /// [`super::encode_tracing_data`]) is written now, before the data section, and a HEADER_TRACING_DATA
    /// feature table pointing to it is kept after the records at each flush (the header's only feature bit
    /// until [`Writer::finish`]), so that a killed recording still has its formats for `perf script`.
    pub fn create_with_tracing(
        path: &Path,
        mut attrs: Vec<FileAttr>,
        tracing: Option<Vec<u8>>,
    ) -> Result<Writer, RecordingError> {
        let attr_len = normalize_attrs(path, &mut attrs)?;
        let pipe = path == Path::new("-");
        let file = match pipe {
            true => pipe::stdout_file(),
            false => File::create(path),
        };
        let file = file.map_err(|source| RecordingError::Create {
            path: path.to_path_buf(),
            source,
        })?;
        let mut w = Writer {
            path: path.to_path_buf(),
            out: BufWriter::with_capacity(BUFFER_SIZE, file),
            attrs,
            attr_len,
            attrs_offset: 0,
            data_offset: 0,
            data_size: 0,
            last_flush: std::time::Instant::now(),
            ns_pids: BTreeMap::new(),
            python_names: Vec::new(),
            pipe,
            before_data: 0,
            tracing_data: None,
            tracing_at: None,
        };
        w.tracing_data = tracing;
        if pipe {
            w.write_pipe_prologue()?;
            w.write_names()?;
            w.write(&pipe::encode_finished_init())?;
            w.flush()?;
            return Ok(w);
        }
        let mut head = Vec::new();
        let mut id_sections = Vec::new();
        let mut offset = HEADER_SIZE;
        for a in &w.attrs {
            for id in &a.ids {
                head.extend_from_slice(&id.to_le_bytes());
            }
            let size = 8 * a.ids.len() as u64;
            id_sections.push((offset, size));
            offset += size;
        }
        w.attrs_offset = offset;
        for (a, (ids_offset, ids_size)) in w.attrs.iter().zip(id_sections) {
            head.extend_from_slice(&a.attr);
            head.extend_from_slice(&ids_offset.to_le_bytes());
            head.extend_from_slice(&ids_size.to_le_bytes());
        }
        let mut features = [0; 4];
        if let Some(tracing) = &w.tracing_data {
            w.tracing_at = Some(HEADER_SIZE + head.len() as u64);
            head.extend_from_slice(tracing);
            head.resize(head.len().next_multiple_of(8), 0);
            features[0] = 1 << HEADER_TRACING_DATA;
        }
        w.data_offset = HEADER_SIZE + head.len() as u64;
        let placeholder = w.header(features);
        w.write(&placeholder)?;
        w.write(&head)?;
        w.write_names()?;
        w.flush()?;
        Ok(w)
    }

    /// Name each event in the data section (PERF_RECORD_EVENT_UPDATE, see [`super::event_update`]), so that
    /// a recording killed before [`Writer::finish`] writes EVENT_DESC still tells its events apart, in
    /// `perf report` too. An event is found by one of its ids (any id when there is one attr).
    fn write_names(&mut self) -> Result<(), RecordingError> {
        let only = self.attrs.len() == 1;
        let records: Vec<Vec<u8>> = self
            .attrs
            .iter()
            .filter(|a| !a.name.is_empty())
            .filter_map(|a| {
                a.ids
                    .first()
                    .copied()
                    .or(only.then_some(0))
                    .map(|id| (id, a))
            })
            .map(|(id, a)| encode_name(id, &a.name))
            .collect();
        for record in records {
            self.write_record(&[&record])?;
        }
        Ok(())
    }

    /// The pipe mode's header, a HEADER_ATTR record per attr, and EVENT_DESC as a HEADER_FEATURE record.
    fn write_pipe_prologue(&mut self) -> Result<(), RecordingError> {
        let mut head = pipe::encode_header();
        for (index, a) in self.attrs.iter().enumerate() {
            let record = pipe::encode_attr(&a.attr, &a.ids).ok_or_else(|| {
                RecordingError::InvalidAttr {
                    path: self.path.clone(),
                    index,
                    reason: format!(
                        "its {} event ids do not fit in one pipe-mode record (record to a file with -o FILE)",
                        a.ids.len()
                    ),
                }
            })?;
            head.extend_from_slice(&record);
        }
        let desc = encode_event_desc(&self.attrs, self.attr_len);
        // Too many ids for one record: perf's EVENT_UPDATE names (written next) name the events instead.
        head.extend(pipe::encode_feature(HEADER_EVENT_DESC, &desc).unwrap_or_default());
        self.before_data = head.len() as u64;
        self.write(&head)
    }

    /// End a pipe-mode stream: the features as HEADER_FEATURE records (rprof's NS_PIDS and PYTHON, which perf
    /// would refuse there, are left out), the build ids as HEADER_BUILD_ID records. Returns the bytes written.
    fn finish_pipe(mut self, sections: &[(usize, Vec<u8>)]) -> Result<u64, RecordingError> {
        let mut tail = Vec::new();
        for (bit, bytes) in sections {
            match *bit {
                HEADER_BUILD_ID => tail.extend(pipe::encode_build_id_records(bytes)),
                HEADER_EVENT_DESC | HEADER_RPROF_NS_PIDS | HEADER_RPROF_PYTHON => {}
                bit => tail.extend(pipe::encode_feature(bit, bytes).unwrap_or_default()),
            }
        }
        self.write(&tail)?;
        self.flush()?;
        Ok(self.before_data + self.data_size + tail.len() as u64)
    }

    fn header(&self, features: [u64; 4]) -> [u8; HEADER_SIZE as usize] {
        let attr_size = self.attr_len as u64 + SECTION_SIZE;
        FileHeader {
            attr_size,
            attrs: (self.attrs_offset, attr_size * self.attrs.len() as u64),
            data: (self.data_offset, self.data_size),
            features,
        }
        .to_bytes()
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), RecordingError> {
        self.out
            .write_all(bytes)
            .map_err(|source| RecordingError::Write {
                path: self.path.clone(),
                source,
            })
    }

    /// Append one whole record; `parts` are concatenated (a record that wrapped the ring comes in two parts).
    /// The bytes are not parsed.
    pub fn write_record(&mut self, parts: &[&[u8]]) -> Result<(), RecordingError> {
        for part in parts {
            self.write(part)?;
            self.data_size += part.len() as u64;
        }
        Ok(())
    }

    /// Write the buffered records to the file if the last write was [`FLUSH_EVERY`] ago or the buffer holds
    /// [`FLUSH_BYTES`]; call it between whole records (at the end of a round), so that a killed recorder leaves
    /// a file that ends with a whole record.
    pub fn flush_if_due(&mut self) -> Result<(), RecordingError> {
        if self.last_flush.elapsed() >= FLUSH_EVERY || self.out.buffer().len() >= FLUSH_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    /// Write the buffer out, then the data size into the header (records first: the size never covers bytes
    /// that are not in the file).
    fn flush(&mut self) -> Result<(), RecordingError> {
        use std::os::unix::fs::FileExt;
        self.last_flush = std::time::Instant::now();
        let size = self.data_size.to_le_bytes();
        let pipe = self.pipe;
        // The feature table of an unfinished recording with tracepoints: its one section, the formats.
        let table = match (self.tracing_at, &self.tracing_data) {
            (Some(at), Some(tracing)) => {
                let mut t = at.to_le_bytes().to_vec();
                t.extend_from_slice(&(tracing.len() as u64).to_le_bytes());
                Some((t, self.data_offset + self.data_size))
            }
            _ => None,
        };
        self.out
            .flush()
            .and_then(|_| match &table {
                Some((t, end)) => self.out.get_ref().write_all_at(t, *end),
                None => Ok(()),
            })
            .and_then(|_| match pipe {
                true => Ok(()),
                false => self.out.get_ref().write_all_at(&size, DATA_SIZE_AT),
            })
            .map_err(|source| RecordingError::Write {
                path: self.path.clone(),
                source,
            })
    }

    /// Note that process `host_pid` is `ns_pid` in its own pid namespace (a container): [`Writer::finish`]
    /// stores these in rprof's NS_PIDS feature section, which perf ignores.
    pub fn add_ns_pid(&mut self, host_pid: u32, ns_pid: u32) {
        self.ns_pids.insert(host_pid, ns_pid);
    }

    /// The names of the Python frames the callchains carry (see [`crate::python::frame_addr`]), stored by
    /// [`Writer::finish`] in rprof's PYTHON section, which perf ignores.
    pub fn set_python_names(&mut self, names: Vec<std::sync::Arc<str>>) {
        self.python_names = names;
    }

    /// Bytes of records written so far.
    pub fn data_size(&self) -> u64 {
        self.data_size
    }

    /// Store `bytes` (see [`super::encode_tracing_data`]) as the HEADER_TRACING_DATA section when the
    /// recording is finished: the formats of its tracepoint events.
    pub fn set_tracing_data(&mut self, bytes: Vec<u8>) {
        self.tracing_data = Some(bytes);
    }

    /// Write the feature sections (BUILD_ID, HOSTNAME, OSRELEASE, NRCPUS, CMDLINE, EVENT_DESC, and rprof's
    /// NS_PIDS when a process was in another pid namespace) and the final header; returns the file size in
    /// bytes.
    pub fn finish(
        mut self,
        meta: &Meta,
        build_ids: &[BuildIdEntry],
    ) -> Result<u64, RecordingError> {
        let mut hostname = Vec::new();
        put_string(&mut hostname, &meta.hostname);
        let mut os_release = Vec::new();
        put_string(&mut os_release, &meta.os_release);
        let mut sections = Vec::new();
        // In bit order, as the section table is: TRACING_DATA (bit 1) comes first.
        if let Some(tracing) = self.tracing_data.take().filter(|_| !self.pipe) {
            sections.push((HEADER_TRACING_DATA, tracing));
        }
        sections.extend([
            (HEADER_BUILD_ID, encode_build_ids(build_ids)),
            (HEADER_HOSTNAME, hostname),
            (HEADER_OSRELEASE, os_release),
            (
                HEADER_NRCPUS,
                encode_nrcpus(meta.nr_cpus_available, meta.nr_cpus_online),
            ),
            (HEADER_CMDLINE, encode_cmdline(&meta.cmdline)),
            (
                HEADER_EVENT_DESC,
                encode_event_desc(&self.attrs, self.attr_len),
            ),
        ]);
        // In bit order, as the section table is: the highest bit comes last.
        if !self.ns_pids.is_empty() {
            sections.push((HEADER_RPROF_NS_PIDS, encode_ns_pids(&self.ns_pids)));
        }
        if !self.python_names.is_empty() {
            sections.push((HEADER_RPROF_PYTHON, encode_python_names(&self.python_names)));
        }
        if self.pipe {
            return self.finish_pipe(&sections);
        }
        let mut features = [0u64; 4];
        let mut table = Vec::new();
        let mut offset = self.data_offset + self.data_size + SECTION_SIZE * sections.len() as u64;
        for (bit, bytes) in &sections {
            features[bit / 64] |= 1 << (bit % 64);
            table.extend_from_slice(&offset.to_le_bytes());
            table.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            offset += bytes.len() as u64;
        }
        self.write(&table)?;
        for (_, bytes) in &sections {
            self.write(bytes)?;
        }
        let header = self.header(features);
        let write_err = |source| RecordingError::Write {
            path: self.path.clone(),
            source,
        };
        self.out.flush().map_err(write_err)?;
        let file = self.out.get_mut();
        file.seek(SeekFrom::Start(0)).map_err(write_err)?;
        file.write_all(&header).map_err(write_err)?;
        Ok(offset)
    }
}
