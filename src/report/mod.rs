//! `rprof report`: replay a recording (rprof's or perf's), symbolize each sample's stack, aggregate, and print a
//! top table, folded stacks or an SVG flame graph.
use crate::process::AddressSpaces;
use crate::recording::{CpuMode, Event, Reader, RecordingError, Sample, Sampling};
use crate::resolve::FastMap;
use crate::symbols::SymbolizerOptions;
use crate::unwind::dwarf::{DwarfStats, DwarfUnwinder};
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};

mod callgraph;
mod diff;
mod exports;
mod firefox;
mod otlp;
mod output;
mod pprof;
mod quality;
pub mod sched;
mod script;
mod script_fields;
mod table;
mod tracepoint_fields;
pub use crate::replay::Salvaged;
pub(crate) use crate::replay::{resolver_for, stream_events, track, QUEUED_BATCHES};
pub use crate::resolve::{folded_name, is_jit_like, FrameId, FrameInfo, Origin, StackResolver};
pub use crate::text::thousands;
pub use callgraph::{CallGraph, CallOrder};
pub use diff::write_diff_table;
pub(crate) use exports::build as exports_of;
pub use exports::{ExportLocation, ExportModule, Exports, TimedSample};
pub use firefox::{write_firefox, FirefoxOptions};
pub use otlp::{proto as otlp_proto, to_otlp, write_otlp};
pub use output::{
    write_diff_flamegraph, write_diff_folded, write_flamegraph, write_flamegraph_lines,
    write_folded, OFF_CPU_FRAME,
};
pub use pprof::{proto, to_pprof, to_pprof_with, write_pprof, PprofLabels};
pub use quality::{interval_points, samples_needed, Quality, UnnamedShare};
pub use script::{script, Fields, ScriptOptions, ScriptSummary, FIELD_NAMES};
pub use table::{frame_name, write_table, SortKey, TableOptions};

/// Errors of the report stage.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Recording(#[from] RecordingError),
    #[error("cannot write the report: {0}")]
    Output(#[from] std::io::Error),
    #[error(
        "{0} needs each sample's stack and thread: load the recording with `Filter::exports` set"
    )]
    NoExports(&'static str),
    #[error("cannot write the flame graph {path}: {source}")]
    Svg {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Which samples to keep, and what to keep of them.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    pub pids: Vec<u32>,
    pub tids: Vec<u32>,
    pub comms: Vec<String>,
    /// On-CPU samples, off-CPU samples, or both.
    pub kinds: SampleKinds,
    /// Keep every sample with its time, thread and stack ([`Profile::exports`]), for the pprof and Firefox
    /// profiler outputs.
    pub exports: bool,
    /// Count the stacks of each process and thread apart ([`Profile::thread_stacks`]), for tables by pid or
    /// tid.
    pub threads: bool,
    /// Only samples of these events (attr indexes, [`crate::recording::Sample::attr`]); empty: every event.
    pub attrs: Vec<u16>,
}

/// One stack of one thread: (pid, tid, comm index, frames outermost first).
pub type ThreadStack = (u32, u32, u32, Vec<FrameId>);

/// Which kinds of samples a report covers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SampleKinds {
    #[default]
    Both,
    /// Only CPU time (`--on-cpu-only`).
    OnCpu,
    /// Only off-CPU (blocked) time (`--off-cpu-only`).
    OffCpu,
}

impl SampleKinds {
    fn keeps(self, off_cpu: bool) -> bool {
        match self {
            SampleKinds::Both => true,
            SampleKinds::OnCpu => !off_cpu,
            SampleKinds::OffCpu => off_cpu,
        }
    }
}

/// One distinct stack of one command, with how often it was sampled on CPU and off CPU.
#[derive(Clone, Debug, Default)]
pub struct StackCount {
    pub samples: u64,
    /// Sum of sample periods (nanoseconds of CPU time for the clock events).
    pub period: u64,
    /// Off-CPU samples at this stack, and the nanoseconds their threads waited there.
    pub off_samples: u64,
    pub off_period: u64,
}

impl StackCount {
    /// Count one sample of `period` (periods come from the file: a corrupt one must not overflow the sums).
    fn add_sample(&mut self, off_cpu: bool, period: u64) {
        if off_cpu {
            self.off_samples += 1;
            self.off_period = self.off_period.saturating_add(period);
        } else {
            self.samples += 1;
            self.period = self.period.saturating_add(period);
        }
    }

    pub(crate) fn add(&mut self, other: &StackCount) {
        self.samples += other.samples;
        self.period = self.period.saturating_add(other.period);
        self.off_samples += other.off_samples;
        self.off_period = self.off_period.saturating_add(other.off_period);
    }
}

/// The aggregated, symbolized samples of a recording.
#[derive(Debug, Default)]
pub struct Profile {
    pub frames: Vec<FrameInfo>,
    pub comms: Vec<String>,
    /// (comm index, frames outermost first) -> counts.
    pub stacks: HashMap<(u32, Vec<FrameId>), StackCount>,
    pub samples: u64,
    pub period: u64,
    /// Off-CPU samples and their nanoseconds of waiting.
    pub off_samples: u64,
    pub off_period: u64,
    /// LOST records and the events they lost, LOST_SAMPLES, THROTTLE records seen in the file.
    pub lost: u64,
    pub lost_samples: u64,
    pub throttled: u64,
    /// How the user stack copies of the samples unwound (recordings of `perf record --call-graph dwarf`).
    pub unwound: DwarfStats,
    /// The recording was not finished or is damaged: what was read of it (the report holds what was).
    pub salvaged: Option<Salvaged>,
    /// Host pid -> pid in the process's own pid namespace (containers), for the processes where they differ.
    pub ns_pids: HashMap<u32, u32>,
    /// Each sample with its thread, time and located stack, when [`Filter::exports`] asked for them.
    pub exports: Option<Exports>,
    /// How the recording sampled (`-F` or a fixed period), when its attrs say.
    pub sampling: Option<Sampling>,
    /// The samples in the file before the filters (on and off CPU), and how many each process had, with its
    /// command: what a filter that keeps nothing can name instead.
    pub read: u64,
    pub read_by_pid: std::collections::BTreeMap<u32, (String, u64)>,
    /// With [`Filter::threads`]: the stacks of [`Profile::stacks`] by process and thread.
    pub thread_stacks: Option<HashMap<ThreadStack, StackCount>>,
    /// How many distinct sampled addresses an unnamed frame standing for a range of code holds, where more
    /// than one (the table says so, rather than rank them as one function).
    pub addresses: HashMap<FrameId, u32>,
    /// The kept samples that carried a stack (a callchain, or a user stack copy that unwound): none when the
    /// recording asked for no stacks (no `-g`).
    pub stack_samples: u64,
    /// The name of each event (attr) of the recording, by attr index.
    pub event_names: Vec<String>,
    /// Samples read of each event (attr index -> samples, sum of periods), before the filters.
    pub read_by_attr: std::collections::BTreeMap<u16, (u64, u64)>,
}

impl Profile {
    /// Whether the recording has off-CPU samples (then weights are shown as time).
    pub fn has_off_cpu(&self) -> bool {
        self.off_samples > 0
    }

    /// Whether the recording holds every event of its event rather than a sample of them: its shares have
    /// no sampling error. That is an event other than a clock recorded at a fixed period whose every sample
    /// counts one event: a tracepoint without -F (the kernel writes every hit of a software event whose
    /// samples carry their period, at any -c, each with period 1; `perf record -e TRACEPOINT` alike).
    pub fn every_event(&self) -> bool {
        self.sampling.is_some_and(|s| s.every_event())
            && self.samples > 0
            && self.period == self.samples
    }
}

/// A raw stack as sampled: what [`Session::add_sample`] resolves, and the key of its cache.
#[derive(Debug, PartialEq, Eq, Hash)]
struct ChainKey {
    pid: u32,
    /// The process's address-space generation: a changed mapping retires the stacks resolved before it.
    generation: u64,
    comm: u32,
    /// The sample's CPU mode was kernel.
    kernel: bool,
    /// `addrs` is the raw callchain (leaf first, with PERF_CONTEXT_* markers); else it holds only the IP.
    chain: bool,
    addrs: Vec<u64>,
}

/// The state of replaying a recording.
struct Session {
    resolver: StackResolver,
    spaces: AddressSpaces,
    comm_of_tid: crate::replay::ThreadComms<u32>,
    comm_ids: HashMap<String, u32>,
    /// Raw stack -> index in `stacks`: most samples repeat a stack seen before, and skip resolving it.
    chains: FastMap<ChainKey, usize>,
    /// Distinct resolved stacks (comm, frames outermost first, some pending) with their counts, and their index.
    stacks: Vec<((u32, Vec<FrameId>), StackCount)>,
    stack_ids: FastMap<(u32, Vec<FrameId>), usize>,
    /// For recordings whose samples carry user stacks (`perf record --call-graph dwarf`): unwinds them.
    unwinder: Option<DwarfUnwinder>,
    /// [`Filter::exports`]: each sample, its stack an index in `stacks`.
    timeline: Option<Vec<TimedSample>>,
    /// [`Filter::threads`]: (pid, tid, index in `stacks`) -> counts.
    thread_counts: Option<FastMap<(u32, u32, usize), StackCount>>,
    /// Every sample read, before the filters, by pid: (comm index, samples).
    read_by_pid: FastMap<u32, (u32, u64)>,
    profile: Profile,
}

/// Read, symbolize and aggregate a recording.
pub fn load(
    input: &Path,
    filter: &Filter,
    opts: SymbolizerOptions,
) -> Result<Profile, ReportError> {
    let reader = Reader::open(input)?;
    let sampling = reader.sampling();
    let debug_dirs = opts.debug.dirs.clone();
    let ns_pids = reader.ns_pids().clone();
    let event_names = reader.event_names().to_vec();
    let mut resolver = resolver_for(&reader, opts);
    // Memory: the kernel's symbols are read after the files' DWARF is released (see `Session::finish`).
    resolver.defer_kernel();
    let mut s = Session {
        resolver,
        spaces: AddressSpaces::new(),
        comm_of_tid: crate::replay::ThreadComms::new(),
        comm_ids: HashMap::new(),
        chains: FastMap::default(),
        stacks: Vec::new(),
        stack_ids: FastMap::default(),
        unwinder: reader
            .has_user_stacks()
            .then(|| DwarfUnwinder::new(debug_dirs)),
        timeline: filter.exports.then(Vec::new),
        thread_counts: filter.threads.then(FastMap::default),
        read_by_pid: FastMap::default(),
        profile: Profile {
            ns_pids,
            ..Profile::default()
        },
    };
    let pid_set: HashSet<u32> = filter.pids.iter().copied().collect();
    let tid_set: HashSet<u32> = filter.tids.iter().copied().collect();
    let keep = |sample: &Sample| {
        (pid_set.is_empty() || pid_set.contains(&sample.pid))
            && (tid_set.is_empty() || tid_set.contains(&sample.tid))
            && filter.kinds.keeps(sample.off_cpu)
            && (filter.attrs.is_empty() || filter.attrs.contains(&sample.attr))
    };
    let mut read_by_attr = std::collections::BTreeMap::new();
    let mut samples_read = 0u64;
    // The file is parsed on a thread of its own, in batches, while this one resolves and symbolizes.
    let salvaged = stream_events::<ReportError>(reader, QUEUED_BATCHES, |event| {
        if let Event::Sample(sample) = &event {
            samples_read += 1;
            let per_attr: &mut (u64, u64) = read_by_attr.entry(sample.attr).or_default();
            per_attr.0 += 1;
            per_attr.1 = per_attr.1.saturating_add(sample.period);
            let comm = s.comm_for(sample);
            let seen = s.read_by_pid.entry(sample.pid).or_insert((comm, 0));
            seen.1 += 1;
        }
        match event {
            Event::Sample(sample) if !keep(&sample) => {}
            event => s.handle(event, &filter.comms),
        }
        Ok(())
    })?;
    let mut profile = s.finish();
    profile.sampling = sampling;
    profile.read = samples_read;
    profile.read_by_attr = read_by_attr;
    profile.event_names = event_names;
    profile.salvaged = salvaged.map(|error| Salvaged {
        samples: samples_read,
        error,
    });
    Ok(profile)
}

impl Session {
    /// Apply one event (samples already filtered by pid and tid).
    fn handle(&mut self, event: Event, comms: &[String]) {
        track(
            &event,
            &mut self.spaces,
            &mut self.resolver,
            self.unwinder.as_mut(),
        );
        let s = self;
        match event {
            Event::Comm { tid, name, .. } => {
                let id = s.comm_id(&name);
                s.comm_of_tid.comm(tid, id);
            }
            Event::Fork { tid, ptid, .. } => s.comm_of_tid.fork(tid, ptid),
            Event::Exit { tid, .. } => s.comm_of_tid.exit(tid),
            Event::Sample(sample) => {
                let comm = s.comm_for(&sample);
                if comms.is_empty() || comms.iter().any(|c| *c == s.profile.comms[comm as usize]) {
                    s.add_sample(sample, comm);
                }
            }
            Event::Lost { count } => s.profile.lost = s.profile.lost.saturating_add(count),
            Event::LostSamples { count } => {
                s.profile.lost_samples = s.profile.lost_samples.saturating_add(count)
            }
            Event::Throttle { throttled } => s.profile.throttled += throttled as u64,
            Event::Mmap { .. } => {}
        }
    }

    fn comm_id(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.comm_ids.get(name) {
            return id;
        }
        let id = self.profile.comms.len() as u32;
        self.profile.comms.push(name.to_string());
        self.comm_ids.insert(name.to_string(), id);
        id
    }

    fn comm_for(&mut self, sample: &Sample) -> u32 {
        match crate::replay::sample_comm(&self.comm_of_tid, sample) {
            Ok(&c) => c,
            Err(name) => self.comm_id(&name),
        }
    }

    fn add_sample(&mut self, mut sample: Sample, comm: u32) {
        crate::replay::unwind_sample(
            self.unwinder.as_mut(),
            &self.spaces,
            &mut sample,
            &mut self.profile.unwound,
        );
        let chain = !sample.callchain.is_empty();
        self.profile.stack_samples += u64::from(chain);
        let key = ChainKey {
            pid: sample.pid,
            generation: self.spaces.generation(sample.pid),
            comm,
            kernel: sample.cpu_mode == CpuMode::Kernel,
            chain,
            addrs: if chain {
                sample.callchain
            } else {
                vec![sample.ip]
            },
        };
        let index = match self.chains.get(&key) {
            Some(&index) => index,
            None => {
                let stack = self.resolve_stack(&key);
                let index = match self.stack_ids.get(&(comm, stack.clone())) {
                    Some(&index) => index,
                    None => {
                        self.stacks
                            .push(((comm, stack.clone()), StackCount::default()));
                        self.stack_ids.insert((comm, stack), self.stacks.len() - 1);
                        self.stacks.len() - 1
                    }
                };
                self.chains.insert(key, index);
                index
            }
        };
        if let Some(timeline) = &mut self.timeline {
            timeline.push(TimedSample {
                time: sample.time.unwrap_or(0),
                pid: sample.pid,
                tid: sample.tid,
                comm,
                stack: index as u32,
                weight: sample.period,
                off_cpu: sample.off_cpu,
            });
        }
        if let Some(threads) = &mut self.thread_counts {
            let count = threads.entry((sample.pid, sample.tid, index)).or_default();
            count.add_sample(sample.off_cpu, sample.period);
        }
        let count = &mut self.stacks[index].1;
        let p = &mut self.profile;
        count.add_sample(sample.off_cpu, sample.period);
        // Periods come from the file: a corrupt one must not overflow the sums.
        if sample.off_cpu {
            p.off_samples += 1;
            p.off_period = p.off_period.saturating_add(sample.period);
        } else {
            p.samples += 1;
            p.period = p.period.saturating_add(sample.period);
        }
    }

    /// The frames of a raw stack, outermost first.
    fn resolve_stack(&mut self, key: &ChainKey) -> Vec<FrameId> {
        let mut stack: Vec<FrameId> = Vec::with_capacity(key.addrs.len() + 4);
        let space = self.spaces.get(key.pid);
        if key.chain {
            self.resolver
                .resolve_chain(key.pid, space, key.kernel, &key.addrs, &mut stack);
        } else {
            self.resolver
                .resolve_ip(key.pid, space, key.kernel, key.addrs[0], &mut stack);
        }
        stack.reverse();
        stack
    }

    /// Resolve the pending addresses and merge the stacks that turn out to be the same.
    fn finish(mut self) -> Profile {
        self.resolver.finish_last();
        if let Some(samples) = self.timeline.take() {
            self.profile.exports = Some(exports::build(&self.resolver, &self.stacks, samples));
        }
        let expanded: Vec<(u32, Vec<FrameId>)> = self
            .stacks
            .iter()
            .map(|((comm, stack), _)| {
                let mut frames = Vec::with_capacity(stack.len() + 2);
                self.resolver.expand(stack, true, &mut frames);
                (*comm, frames)
            })
            .collect();
        if let Some(threads) = self.thread_counts.take() {
            let mut by_thread: HashMap<ThreadStack, StackCount> = HashMap::new();
            for ((pid, tid, index), count) in threads {
                let (comm, frames) = &expanded[index];
                let key = (pid, tid, *comm, frames.clone());
                by_thread.entry(key).or_default().add(&count);
            }
            self.profile.thread_stacks = Some(by_thread);
        }
        let mut stacks: HashMap<(u32, Vec<FrameId>), StackCount> = HashMap::new();
        for (key, (_, count)) in expanded.into_iter().zip(std::mem::take(&mut self.stacks)) {
            stacks.entry(key).or_default().add(&count);
        }
        self.profile.stacks = stacks;
        for (pid, (comm, samples)) in std::mem::take(&mut self.read_by_pid) {
            let comm = self.profile.comms[comm as usize].clone();
            self.profile.read_by_pid.insert(pid, (comm, samples));
        }
        self.profile.addresses = self.resolver.addresses();
        self.profile.frames = self.resolver.into_frames();
        self.profile
    }
}

/// The table's first line: what it counts (of what the file holds, when filters left some out), and what
/// was lost or throttled.
pub fn write_summary_line(p: &Profile, out: &mut impl Write) -> std::io::Result<()> {
    let kept = p.samples + p.off_samples;
    let of_read = match kept < p.read {
        true => format!(" (of {} in the file)", thousands(p.read)),
        false => String::new(),
    };
    let lost = format!(
        "{} lost events, {} lost samples, throttled {} times",
        p.lost, p.lost_samples, p.throttled
    );
    if p.has_off_cpu() {
        writeln!(
            out,
            "# {} on CPU in {} samples, {} off CPU (blocked) in {} samples{of_read}; {lost}",
            seconds(p.period),
            p.samples,
            seconds(p.off_period),
            p.off_samples,
        )
    } else {
        writeln!(out, "# {} samples{of_read}, {lost}", p.samples)
    }
}

/// Nanoseconds as seconds with millisecond precision (`1.234 s`).
pub fn seconds(ns: u64) -> String {
    format!("{:.3} s", ns as f64 / 1e9)
}
