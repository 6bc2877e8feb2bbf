//! The perf.data reader: [`Reader`] opens a recording and returns its events in time order.
//!
//! linux-perf-data parses the header, the attrs and the feature sections, after `header` has checked
//! everything that crate would trust (section bounds, counts that size allocations), so that no input can make
//! it panic or allocate without bound. The data section is walked by `data_section`; here each record finds its
//! attr and is put in time order by FINISHED_ROUND the way perf does ([`OrderedMerge`]), then `convert` maps it
//! to an [`Event`].
//!
//! A data section that is cut short (the file was truncated, or `rprof record` / `perf record` was killed
//! before writing the final header) yields the records before the cut and then
//! [`RecordingError::Incomplete`], which says where reading stopped; `rprof report` keeps what was read and
//! prints it as one warning. Any other record that cannot be read (a corrupt zstd frame or record, an invalid
//! size, a record running past the end of a complete data section, a pipe-mode stream cut inside a record)
//! ends the reading with [`RecordingError::Damaged`]: an error naming the file, the offset and the fix.
use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use byteorder::LittleEndian;
use linux_perf_data::linux_perf_event_reader::constants::PERF_SAMPLE_STACK_USER;
use linux_perf_data::linux_perf_event_reader::{
    get_record_timestamp, PerfEventType, RawData, RawEventRecord, RecordType,
};
use linux_perf_data::{AttributeDescription, Feature};

use super::attrs::{attr_index, attr_infos, attr_lookup, sampling_of, AttrLookup};
use super::convert::{convert, read_u32, AttrInfo};
use super::data_section::{DataSection, Walked};
use super::encode::PERF_RECORD_FINISHED_ROUND;
use super::event_update::{event_names, names_at_start};
use super::features::{
    parse_ns_pids, parse_python_names, HEADER_RPROF_NS_PIDS, HEADER_RPROF_PYTHON,
};
use super::header::{
    attr_ids, check_attrs, check_header, parse_patched, read_feature_table, read_meta, DataExtent,
};
use super::stream::RecordStream;
use super::writer::{FileHeader, HEADER_SIZE};
use super::{BuildIdEntry, Event, Meta, RecordingError, Sampling};
use crate::merge::OrderedMerge;

/// What was found about a recording besides its attrs.
pub(super) struct Found {
    pub(super) meta: Meta,
    pub(super) build_ids: Vec<BuildIdEntry>,
    pub(super) ns_pids: HashMap<u32, u32>,
    pub(super) python_names: Vec<std::sync::Arc<str>>,
    /// See [`Reader`]'s fields of the same names.
    pub(super) problems: Vec<String>,
    pub(super) walk_problem_at: usize,
    pub(super) unfinished: bool,
    /// The file ends before its data section does (a killed recorder, a full disk): a record cut at its
    /// end is a warning, not an error.
    pub(super) short_file: bool,
    /// A pipe-mode stream.
    pub(super) pipe: bool,
    /// The HEADER_TRACING_DATA feature section (a pipe-mode stream has it as a record instead).
    pub(super) tracing: Vec<u8>,
}

/// Why a record cannot be read, and whether because the data was cut short there (else it is corrupt).
pub(super) struct Damage {
    pub(super) reason: String,
    pub(super) cut: bool,
}

/// What a recording says of one of its events besides its name.
#[derive(Clone, Debug)]
pub struct EventAttr {
    /// The ids its records carry (one per CPU or thread it was opened on).
    pub ids: Vec<u64>,
    /// PERF_SAMPLE_* bits.
    pub sample_type: u64,
    /// `-F` or a period; None for an event that does not sample.
    pub policy: Option<super::SamplingPolicy>,
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
    /// rprof's NS_PIDS section: host pid -> pid in its own pid namespace.
    ns_pids: HashMap<u32, u32>,
    /// rprof's PYTHON section: the names of the Python frames.
    python_names: Vec<std::sync::Arc<str>>,
    sampling: Option<Sampling>,
    /// The name of each attr's event (EVENT_DESC), by attr index.
    event_names: Vec<String>,
    /// The tracepoint id (`config`) of each attr of PERF_TYPE_TRACEPOINT, by attr index.
    tracepoint_ids: Vec<Option<u64>>,
    /// See [`Found::tracing`].
    tracing: Vec<u8>,
    /// Each attr's event ids and sampling, by attr index ([`Reader::event_attrs`]).
    event_attrs: Vec<EventAttr>,
    /// What to report after the last good record (truncated or corrupt data section, bad feature sections),
    /// and where in that list a damaged record found by the walk goes.
    problems: Vec<String>,
    walk_problem_at: usize,
    /// The header was never completed (a data size of 0, or no feature bits).
    unfinished: bool,
    /// The first record that cannot be read, unless it is where a short file ends: an error.
    damage: Option<Damage>,
    short_file: bool,
    pipe: bool,
    done: bool,
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
    /// feature section is reported by [`Reader::next_event`] after the events that could be read. `-` is the
    /// standard input (as in perf); a pipe-mode stream (`perf record -o -`) is read from a file or a pipe.
    pub fn open(path: &Path) -> Result<Reader, RecordingError> {
        let path = match path == Path::new("-") {
            true => Path::new("/dev/stdin"),
            false => path,
        };
        let read_err = |source| RecordingError::Read {
            path: path.to_path_buf(),
            source,
        };
        let mut file = File::open(path).map_err(read_err)?;
        let mut start = Vec::with_capacity(16);
        (&mut file)
            .take(16)
            .read_to_end(&mut start)
            .map_err(read_err)?;
        if super::pipe::is_pipe_header(&start) {
            return super::pipe::open(path, file);
        }
        if file.seek(SeekFrom::Start(0)).is_err() {
            let why = "it is not a pipe-mode stream (`record -o -`), and a perf.data file cannot be read \
                       from a pipe: give the file with -i FILE";
            return Err(Self::corrupt(path, why));
        }
        Self::open_file(path, file)
    }

    /// Open a perf.data file (not pipe mode).
    fn open_file(path: &Path, file: File) -> Result<Reader, RecordingError> {
        let read_err = |source| RecordingError::Read {
            path: path.to_path_buf(),
            source,
        };
        let file_len = file.metadata().map_err(read_err)?.len();
        let mut file = BufReader::with_capacity(1 << 16, file);
        let header = Self::read_header(path, &mut file, file_len)?;
        let extent = DataExtent::of(&header, file_len);
        let mut problems: Vec<String> = extent.problem.iter().cloned().collect();
        let perf_file =
            Self::parse_sections(path, &mut file, &header, &extent, file_len, &mut problems)?;
        // A damaged record found while walking the data section is reported here in the list.
        let walk_problem_at = problems.len();
        let descs = perf_file.event_attributes();
        let ids = match descs.iter().all(|d| d.event_ids.is_empty()) {
            true => attr_ids(file.get_ref(), header.attrs, header.attr_size, file_len),
            false => descs.iter().map(|d| d.event_ids.clone()).collect(),
        };
        let event_names = event_names(descs, &ids, || {
            names_at_start(file.get_ref(), header.data.0, extent.len)
        });
        let (meta, build_ids) = read_meta(&perf_file).unwrap_or_else(|reason| {
            problems.push(reason);
            (Meta::default(), Vec::new())
        });
        let ns_pids = perf_file
            .feature_section_data(Feature(HEADER_RPROF_NS_PIDS as u32))
            .map_or(Ok(HashMap::new()), parse_ns_pids)
            .unwrap_or_else(|reason| {
                problems.push(reason);
                HashMap::new()
            });
        let python_names = perf_file
            .feature_section_data(Feature(HEADER_RPROF_PYTHON as u32))
            .map_or(Ok(Vec::new()), parse_python_names)
            .unwrap_or_else(|reason| {
                problems.push(reason);
                Vec::new()
            });
        // The data section is read on the first call of next_event (report runs that on its own thread).
        let mut file = file.into_inner();
        file.seek(SeekFrom::Start(header.data.0))
            .map_err(read_err)?;
        let data = DataSection::new(RecordStream::new(file, header.data.0, extent.len));
        let found = Found {
            meta,
            build_ids,
            ns_pids,
            python_names,
            problems,
            walk_problem_at,
            unfinished: extent.unfinished,
            short_file: extent.unfinished || extent.truncated,
            pipe: false,
            tracing: perf_file
                .feature_section_data(Feature::TRACING_DATA)
                .map(<[u8]>::to_vec)
                .unwrap_or_default(),
        };
        Ok(Self::assemble(path, data, descs, ids, event_names, found))
    }

    /// The reader of `data`, whose attrs are `descs` with the event ids `ids` and the names `event_names`.
    pub(super) fn assemble(
        path: &Path,
        data: DataSection,
        descs: &[AttributeDescription],
        ids: Vec<Vec<u64>>,
        event_names: Vec<String>,
        found: Found,
    ) -> Reader {
        let attrs = attr_infos(descs, &event_names);
        let event_attrs = descs
            .iter()
            .zip(&ids)
            .map(|(d, ids)| EventAttr {
                ids: ids.clone(),
                sample_type: d.attr.sample_format.bits(),
                policy: super::attrs::policy_of(&d.attr.sampling_policy),
            })
            .collect();
        Reader {
            event_attrs,
            path: path.to_path_buf(),
            data,
            lookup: attr_lookup(&attrs, descs),
            attrs,
            id_to_attr: ids
                .iter()
                .enumerate()
                .flat_map(|(index, ids)| ids.iter().map(move |&id| (id, index)))
                .collect(),
            pending: OrderedMerge::new(),
            ready: VecDeque::new(),
            walked_all: false,
            meta: found.meta,
            build_ids: found.build_ids,
            ns_pids: found.ns_pids,
            python_names: found.python_names,
            sampling: sampling_of(descs, &event_names),
            event_names,
            tracepoint_ids: descs
                .iter()
                .map(|d| match d.attr.type_ {
                    PerfEventType::Tracepoint(id) => Some(id),
                    _ => None,
                })
                .collect(),
            tracing: found.tracing,
            problems: found.problems,
            walk_problem_at: found.walk_problem_at,
            unfinished: found.unfinished,
            damage: None,
            short_file: found.short_file,
            pipe: found.pipe,
            done: false,
        }
    }

    /// Read and check the file header and the attrs section.
    fn read_header(
        path: &Path,
        file: &mut BufReader<File>,
        file_len: u64,
    ) -> Result<FileHeader, RecordingError> {
        let corrupt = |reason: String| Self::corrupt(path, reason);
        if file_len < HEADER_SIZE {
            return Err(corrupt(format!(
                "it is {file_len} bytes, shorter than the {HEADER_SIZE}-byte header"
            )));
        }
        let mut header = [0u8; HEADER_SIZE as usize];
        file.read_exact(&mut header)
            .map_err(|source| RecordingError::Read {
                path: path.to_path_buf(),
                source,
            })?;
        let header = check_header(&header, file_len).map_err(corrupt)?;
        check_attrs(file, header.attrs, header.attr_size).map_err(corrupt)?;
        Ok(header)
    }

    /// The attrs and feature sections, parsed by linux-perf-data from validated sections only (no legacy
    /// event_types section) and an empty data section right before the feature table (this module reads the
    /// data section itself). Problems with the feature sections go to `problems`: the events are still read.
    fn parse_sections(
        path: &Path,
        file: &mut BufReader<File>,
        header: &FileHeader,
        extent: &DataExtent,
        file_len: u64,
        problems: &mut Vec<String>,
    ) -> Result<linux_perf_data::PerfFile, RecordingError> {
        let data = header.data;
        let mut features_ok = false;
        if extent.keep_features {
            match read_feature_table(file, header.features, data.0 + data.1, file_len) {
                Ok(()) => features_ok = true,
                Err(reason) => problems.push(reason),
            }
        }
        let shown = |data_at: u64, features: [u64; 4]| {
            let shown = FileHeader {
                attr_size: header.attr_size,
                attrs: header.attrs,
                data: (data_at, 0),
                features,
            };
            vec![(0, shown.to_bytes().to_vec())]
        };
        if features_ok {
            match parse_patched(path, shown(data.0 + data.1, header.features)) {
                Ok(parsed) => return Ok(parsed.perf_file),
                Err(e) => problems.push(format!("its feature sections are corrupt: {e}")),
            }
        }
        parse_patched(path, shown(data.0, [0; 4]))
            .map(|parsed| parsed.perf_file)
            .map_err(|e| Self::crate_error(path, e))
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

    /// The payloads of the HEADER_TRACING_DATA records read so far (event formats, in perf's layout): those
    /// of a pipe-mode stream's start once opened, and those in the data section as it is read.
    /// A perf.data file has them in its HEADER_TRACING_DATA feature section.
    pub fn tracing_data(&self) -> &[u8] {
        match self.tracing.is_empty() {
            true => self.data.stream().tracing_data(),
            false => &self.tracing,
        }
    }

    /// The tracepoint id (the `ID:` of its format) of each attr of a tracepoint event, by
    /// [`super::Sample::attr`]; None for the other events.
    pub fn tracepoint_ids(&self) -> &[Option<u64>] {
        &self.tracepoint_ids
    }

    pub fn build_ids(&self) -> &[BuildIdEntry] {
        &self.build_ids
    }

    /// Host pid -> pid in the process's own pid namespace, for the recorded processes that were in another
    /// pid namespace (rprof's NS_PIDS feature section; empty for other recordings).
    pub fn ns_pids(&self) -> &HashMap<u32, u32> {
        &self.ns_pids
    }

    /// The names of the Python frames the callchains carry (rprof's PYTHON section; empty for others).
    pub fn python_names(&self) -> &[std::sync::Arc<str>] {
        &self.python_names
    }

    /// How the sampled event fired (`-F` or a period), from the first attr other than the off-CPU event.
    pub fn sampling(&self) -> Option<Sampling> {
        self.sampling
    }

    /// The event name of each attr (from EVENT_DESC, or the data section's EVENT_UPDATE records; `[unknown]`
    /// without either), indexed by [`super::Sample::attr`].
    pub fn event_names(&self) -> &[String] {
        &self.event_names
    }

    /// Each attr's event ids and sampling, by attr index (what `perf report --header-only` prints of them).
    pub fn event_attrs(&self) -> &[EventAttr] {
        &self.event_attrs
    }

    /// The HOSTNAME, OSRELEASE, NRCPUS and CMDLINE feature sections (empty / 0 where the file has none).
    pub fn meta(&self) -> &Meta {
        &self.meta
    }

    /// The attr index of a kernel record (0 when its id is unknown, as linux-perf-data does).
    fn attr_index(&self, record_type: RecordType, body: &[u8]) -> usize {
        attr_index(&self.lookup, &self.id_to_attr, record_type, body)
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
                Walked::Damaged { reason, cut } => {
                    let rest = self.data.rest();
                    if self.pipe && rest.starts_with(b"[ perf record:") {
                        // `perf record -o - > FILE 2>&1`: perf's own messages after the stream.
                        self.problems.insert(self.walk_problem_at, format!(
                            "{} bytes of perf's messages (\"{}\") follow the stream's last record and were \
                             ignored (perf record -o - was run with 2>&1)",
                            rest.len(),
                            String::from_utf8_lossy(rest.split(|&b| b == b'\n').next().unwrap_or_default())
                        ));
                    } else if cut && self.short_file {
                        // Where a killed recorder (or a full disk) stopped the file.
                        self.problems.insert(self.walk_problem_at, reason);
                    } else if self.damage.is_none() {
                        self.damage = Some(Damage { reason, cut });
                    }
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

    fn incomplete(&self, reason: String, read_to: u64) -> RecordingError {
        RecordingError::Incomplete {
            path: self.path.clone(),
            reason,
            unfinished: self.unfinished,
            read_to,
        }
    }

    fn damaged(&self, damage: Damage, read_to: u64) -> RecordingError {
        let fix = match (damage.cut, self.pipe) {
            (true, true) => {
                "the stream was cut inside a record (its recorder killed, or the pipe closed early): \
                 record again, or record to a file (-o FILE), which a killed recorder leaves readable"
            }
            (true, false) => {
                "its last record runs past the end of the data section its header gives (a bad copy?): \
                 copy it again, or record again"
            }
            (false, _) => {
                "the recording is corrupt from there on (a bad copy?): copy it again, or record again"
            }
        };
        RecordingError::Damaged {
            path: self.path.clone(),
            reason: damage.reason,
            read_to,
            fix,
        }
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
                if let Some(damage) = self.damage.take() {
                    return Err(self.damaged(damage, self.data.walked_to()));
                }
                if self.problems.is_empty() {
                    return Ok(None);
                }
                let reason = self.problems.join("; ");
                return Err(self.incomplete(reason, self.data.walked_to()));
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
                    let damage = Damage { reason, cut: false };
                    return Err(self.damaged(damage, self.data.file_offset(start)));
                }
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
#[path = "reader_tests.rs"]
mod tests;
