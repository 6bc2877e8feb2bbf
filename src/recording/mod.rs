//! The recording file: perf.data (PERFILE2), written by `rprof record` and read by `rprof report`.
//!
//! [`Writer`] streams raw perf records (as the kernel produced them, or built by the `encode_*` functions:
//! COMM and MMAP2 for existing processes, samples with a DWARF-unwound callchain, FINISHED_ROUND) into the data
//! section, and writes the header, the attrs and the feature sections when it finishes. [`Reader`] reads
//! rprof's files and those of `perf record` into [`Event`]s; every error names the file, and no input can make
//! it panic.
use std::path::PathBuf;

mod attrs;
mod convert;
mod data_section;
mod decoder;
mod encode;
mod event_update;
mod features;
mod header;
mod pipe;
mod reader;
mod stream;
mod tracing_data;
mod writer;

pub use decoder::Decoder;
pub use encode::{encode_comm, encode_finished_round, encode_mmap2, encode_sample};
pub use pipe::claim_stdout;
pub use reader::{EventAttr, Reader};
pub use tracing_data::{decode_tracing_data, encode_tracing_data, DecodedEvent, TracingEvent};
pub use writer::Writer;

/// Errors of the recording stage.
#[derive(Debug, thiserror::Error)]
pub enum RecordingError {
    #[error("cannot create recording {path}: {source} (choose a writable output path with -o)")]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write recording {path}: event attr {index} is invalid: {reason}")]
    InvalidAttr {
        path: PathBuf,
        index: usize,
        reason: String,
    },
    #[error("cannot write recording {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read recording {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a valid perf.data recording: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    /// The events before `read_to` were read, and then the data section ended early or was damaged, or the
    /// feature sections (build ids, command line) are missing or damaged. Returned after those events.
    #[error("{path} {}: {reason}; the events up to byte {read_to} were read", if *.unfinished { "was not finished" } else { "is damaged" })]
    Incomplete {
        path: PathBuf,
        reason: String,
        /// The header was never completed: the recorder was killed (data size 0, no feature sections).
        unfinished: bool,
        /// The file offset where the last whole record read ends.
        read_to: u64,
    },
    /// A record of the data section or stream cannot be read (corrupt, cut short in a finished recording or
    /// in a pipe-mode stream, or of a type rprof does not read). Returned after the events before it.
    #[error("{path} has an unreadable record: {reason}; the events up to byte {read_to} were read; {fix}")]
    Damaged {
        path: PathBuf,
        reason: String,
        read_to: u64,
        /// What to do about it.
        fix: &'static str,
    },
    /// A recording that was not finished or is damaged, from which no sample could be read.
    #[error("{warning}: no sample could be read from it: record again")]
    NothingRead { warning: String },
}

/// One event attribute as stored in the file.
#[derive(Clone, Debug)]
pub struct FileAttr {
    /// The raw `perf_event_attr` bytes (its `size` field says how many), as given to perf_event_open
    /// (or as rewritten for the file, e.g. DWARF mode stores CALLCHAIN without REGS_USER/STACK_USER).
    pub attr: Vec<u8>,
    /// The event ids (PERF_EVENT_IOC_ID) of the fds opened for this attr; may be empty with one attr.
    pub ids: Vec<u64>,
    /// The event name for EVENT_DESC, e.g. "cpu-clock".
    pub name: String,
}

/// Facts written as feature sections.
#[derive(Clone, Debug, Default)]
pub struct Meta {
    pub hostname: String,
    pub os_release: String,
    pub nr_cpus_online: u32,
    pub nr_cpus_available: u32,
    pub cmdline: Vec<String>,
}

/// How the recording's sampled event was set to fire (its first attr that is not the off-CPU event).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sampling {
    /// Samples per second (`-F`), or a fixed period in the event's unit.
    pub policy: SamplingPolicy,
    /// The event is a clock (cpu-clock, task-clock): its periods are nanoseconds.
    pub clock: bool,
}

/// See [`Sampling`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SamplingPolicy {
    Frequency(u64),
    Period(u64),
}

impl Sampling {
    /// The nominal time between two samples of a thread running on CPU, in nanoseconds: 1e9 / F, or the
    /// fixed period of a clock event. None for a fixed period of another event (cycles), whose unit is not time.
    pub fn interval_ns(&self) -> Option<u64> {
        match self.policy {
            SamplingPolicy::Frequency(f) if f > 0 => Some(1_000_000_000 / f),
            SamplingPolicy::Period(p) if self.clock && p > 0 => Some(p),
            _ => None,
        }
    }

    /// Whether the event may have been recorded at every hit: a fixed period of an event that is not a clock
    /// (a tracepoint, a probe; see [`crate::report::Profile::every_event`] for the samples' part). A clock's
    /// period is time, which stays sampled at any period, and `-F` samples any event.
    pub fn every_event(&self) -> bool {
        !self.clock && matches!(self.policy, SamplingPolicy::Period(_))
    }
}

/// One BUILD_ID feature entry: the build id of a binary that was mapped.
#[derive(Clone, Debug)]
pub struct BuildIdEntry {
    /// The machine's pid: -1 for the host (perf's HOST_KERNEL_ID), which every entry rprof writes has; a
    /// guest's pid in perf's recordings of guests.
    pub pid: i32,
    /// PERF_RECORD_MISC_USER or PERF_RECORD_MISC_KERNEL.
    pub misc: u16,
    pub build_id: Vec<u8>,
    pub path: String,
}

/// CPU mode of a sample or mapping, from the record header's misc bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuMode {
    Kernel,
    User,
    Hypervisor,
    GuestKernel,
    GuestUser,
    Unknown,
}

/// A sample as read back from a file.
#[derive(Clone, Debug)]
pub struct Sample {
    pub pid: u32,
    pub tid: u32,
    pub time: Option<u64>,
    pub cpu: Option<u32>,
    pub period: u64,
    pub ip: u64,
    pub cpu_mode: CpuMode,
    /// The raw callchain, leaf first, including PERF_CONTEXT_* marker entries (>= 0xffff_ffff_ffff_f000).
    /// Empty when the attr had no CALLCHAIN.
    pub callchain: Vec<u64>,
    /// The user registers and stack copy of a sample taken with REGS_USER and STACK_USER (`perf record
    /// --call-graph dwarf`), to be unwound; None otherwise (rprof's own recordings store unwound callchains).
    pub user_stack: Option<UserStack>,
    /// An off-CPU sample (of the event [`OFF_CPU_EVENT`]): `period` is how long, in nanoseconds, the thread
    /// waited off CPU at this stack.
    pub off_cpu: bool,
    /// The index of the sample's event attr in the file ([`reader::Reader::event_names`] names it).
    pub attr: u16,
    /// PERF_SAMPLE_RAW: a tracepoint's record, its fields as the event's format lays them out (empty
    /// without).
    pub raw: Vec<u8>,
}

/// The event name of off-CPU samples in a recording (perf's `--off-cpu` uses the same name and meaning): each
/// sample is a stack where a thread blocked, its period the nanoseconds it stayed off CPU.
pub const OFF_CPU_EVENT: &str = "offcpu-time";

/// What DWARF unwinding needs from a sample (x86_64).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserStack {
    pub regs: crate::regs::UserRegs,
    /// The copy of the user stack from `regs.sp` up.
    pub stack: Vec<u8>,
    /// How many bytes of `stack` the kernel filled.
    pub dyn_size: u64,
}

/// One event read from a recording.
#[derive(Clone, Debug)]
pub enum Event {
    Comm {
        pid: u32,
        tid: u32,
        name: String,
        exec: bool,
    },
    /// A memory mapping. `pid` is -1 (as u32::MAX never; use i32) for kernel mappings.
    Mmap {
        pid: i32,
        tid: i32,
        start: u64,
        len: u64,
        pgoff: u64,
        path: String,
        build_id: Option<Vec<u8>>,
        cpu_mode: CpuMode,
    },
    Fork {
        pid: u32,
        ppid: u32,
        tid: u32,
        ptid: u32,
    },
    Exit {
        pid: u32,
        tid: u32,
    },
    Sample(Sample),
    /// PERF_RECORD_LOST: this many records were lost.
    Lost {
        count: u64,
    },
    /// PERF_RECORD_LOST_SAMPLES.
    LostSamples {
        count: u64,
    },
    /// PERF_RECORD_THROTTLE (true) / UNTHROTTLE (false).
    Throttle {
        throttled: bool,
    },
}

/// The `sample_id_all` trailer of a non-sample record (which fields are present follows the attr's sample_type:
/// TID, TIME, ID, STREAM_ID, CPU, IDENTIFIER, in the kernel's order).
#[derive(Clone, Copy, Debug, Default)]
pub struct SampleId {
    pub pid: u32,
    pub tid: u32,
    pub time: u64,
    pub cpu: u32,
    pub id: u64,
}

/// A PERF_RECORD_MMAP2 to synthesize (for mappings that existed before recording started, and the kernel).
#[derive(Clone, Debug, Default)]
pub struct Mmap2 {
    pub pid: i32,
    pub tid: i32,
    pub start: u64,
    pub len: u64,
    pub pgoff: u64,
    pub maj: u32,
    pub min: u32,
    pub ino: u64,
    pub prot: u32,
    pub flags: u32,
    pub path: String,
    /// Kernel mappings set this; user mappings do not.
    pub kernel: bool,
}

/// A sample to encode (DWARF mode rewrites kernel samples with the unwound user callchain).
#[derive(Clone, Debug, Default)]
pub struct SampleFields {
    pub ip: u64,
    pub pid: u32,
    pub tid: u32,
    pub time: u64,
    pub id: u64,
    pub cpu: u32,
    pub period: u64,
    /// Leaf first, with PERF_CONTEXT_KERNEL / PERF_CONTEXT_USER markers.
    pub callchain: Vec<u64>,
    /// The header misc bits (cpu mode, exact ip...).
    pub misc: u16,
    /// PERF_SAMPLE_RAW: a tracepoint's record (its fields as the event's format lays them out).
    pub raw: Vec<u8>,
}

impl SampleFields {
    /// The fields of a sample as the kernel wrote it (its raw callchain; registers and stack copies are not
    /// kept).
    pub fn from_record(s: &linux_perf_event_reader::SampleRecord<'_>, misc: u16) -> SampleFields {
        SampleFields {
            ip: s.ip.unwrap_or(0),
            pid: s.pid.unwrap_or(0) as u32,
            tid: s.tid.unwrap_or(0) as u32,
            time: s.timestamp.unwrap_or(0),
            id: s.id.unwrap_or(0),
            cpu: s.cpu.unwrap_or(0),
            period: s.period.unwrap_or(1),
            callchain: match &s.callchain {
                Some(c) => (0..c.len()).filter_map(|i| c.get(i)).collect(),
                None => Vec::new(),
            },
            misc,
            raw: s.raw.map(|r| r.as_slice().into_owned()).unwrap_or_default(),
        }
    }
}
