//! `rprof record`: open CPU-clock sampling events on a command, processes, threads or the whole system, read
//! the ring buffers until told to stop, and stream the records into a perf.data recording.
//!
//! [`attrs`] builds the attrs and lists the tasks; [`stream`] counts and writes the records (through
//! [`dwarf`]'s online unwinder in DWARF mode); [`summary`] is what the session produced. The event set and
//! the loop are `perf`'s, shared with `rprof probe`.
use crate::events;
use crate::perf::{self, EventSet, PerfError, Refused, StopSignals, StopWhen, Workload};
use crate::process::{self, Cgroup, ProcessError};
use crate::recording::{self, FileAttr, Meta, RecordingError, SampleId, Writer};

mod attrs;
pub use attrs::default_mmap_pages;
mod buildids;
mod dwarf;
mod hits;
mod offcpu;
mod python;
mod rate;
mod sink;
mod stream;
mod summary;
mod synth;
pub use crate::events::EventSpec;
use dwarf::DwarfState;
use offcpu::OffCpu;
pub use offcpu::OffCpuStats;
use python::PythonStacks;
pub use python::PythonStats;
pub use rate::{max_sample_rate, LoweredRate, MAX_SAMPLE_RATE_PATH};
use sink::Sink;
pub use sink::Tap;
use std::collections::HashSet;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Duration;
use stream::{Collected, Members, Ordered, Source, Stream};
pub use summary::{human_size, CgroupSummary, RecordSummary};

/// What to sample.
#[derive(Clone, Debug)]
pub enum Target {
    /// Launch this command and follow it and its children from its first instruction.
    Command(perf::Command),
    /// These processes, with all their threads now and later.
    Pids(Vec<i32>),
    /// Only these threads.
    Tids(Vec<i32>),
    /// Every task on the chosen CPUs.
    System,
    /// The tasks of this cgroup (a path relative to the cgroup2 mount, as perf's `-G` takes it) and of its
    /// descendants, now and later, on the chosen CPUs.
    Cgroup(String),
}

/// How to collect stacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallGraph {
    /// No stacks: the sampled instruction only.
    None,
    /// Frame pointers, walked by the kernel.
    Fp,
    /// User registers + a copy of this many bytes of user stack, unwound online with DWARF CFI.
    Dwarf { stack_size: u32 },
}

/// Sampling rate.
#[derive(Clone, Copy, Debug)]
pub enum Rate {
    Frequency(u64),
    Period(u64),
}

/// Everything `rprof record` needs.
#[derive(Clone, Debug)]
pub struct RecordConfig {
    pub target: Target,
    /// CPUs to sample on (default: all online).
    pub cpus: Option<Vec<u32>>,
    pub rate: Rate,
    /// `task-clock` instead of `cpu-clock`.
    pub task_clock: bool,
    pub call_graph: CallGraph,
    pub output: PathBuf,
    pub user_only: bool,
    pub kernel_only: bool,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Data pages per ring buffer (a power of two).
    pub mmap_pages: usize,
    /// The command line, stored in the recording.
    pub cmdline: Vec<String>,
    /// Debug-file roots (DWARF mode looks for .debug_frame there).
    pub debug_dirs: Vec<PathBuf>,
    /// Do not copy /proc/kallsyms, the vDSO and the sampled binaries into the build-id cache (perf's `-N`).
    pub no_buildid_cache: bool,
    /// The bound on the bytes of the copies rprof keeps in the build-id cache (its own: perf's are not counted
    /// and never evicted).
    pub buildid_cache_size: u64,
    /// Leave the launched command running when rprof ends or dies.
    pub keep_workload: bool,
    /// Also record where threads wait: each blocked interval as an `offcpu-time` sample at the stack where the
    /// thread left the CPU, weighted by its nanoseconds.
    pub off_cpu: bool,
    /// A command to run while another target is recorded (`-p PID -- sleep 3`, perf's idiom for "this long"):
    /// recording stops when it exits, and rprof exits with its status. It is sampled only when the target
    /// covers it (`-a`), never followed on its own.
    pub companion: Option<perf::Command>,
    /// `--off-cpu-stack-hz`: sample switch-out stacks at about this rate per thread and CPU (frequency mode)
    /// instead of taking one at every switch; waits without their own stack are charged to the thread's last
    /// sampled one. None: every switch (exact, and a few microseconds per switch).
    pub off_cpu_stack_hz: Option<u64>,
    /// `--strict-freq`: refuse a frequency above `kernel.perf_event_max_sample_rate` instead of lowering it.
    pub strict_freq: bool,
    /// `-e`: the events to sample (tracepoints, probe points, clocks), each with its `--filter`; empty: the
    /// clock of `task_clock`.
    pub events: Vec<EventSpec>,
    /// `-c` or `-F` was given: tracepoints and probes use `rate` too (else every hit is a sample).
    pub rate_given: bool,
    /// `-R`: raw fields (PERF_SAMPLE_RAW) and the CPU in every sample (tracepoints have their fields anyway).
    pub raw: bool,
    /// `-x`: the binary whose functions `-e probe:FUNC` names.
    pub binary: Option<PathBuf>,
    /// Write the recording file `output` (false: the records only go to the tap of [`record_with_tap`]).
    pub write_file: bool,
    /// Time samples with CLOCK_MONOTONIC (which maps onto wall-clock time) instead of perf's local clock.
    pub clock_monotonic: bool,
}

impl Default for RecordConfig {
    fn default() -> Self {
        RecordConfig {
            target: Target::System,
            cpus: None,
            rate: Rate::Frequency(4000),
            task_clock: false,
            call_graph: CallGraph::None,
            output: PathBuf::from("rprof.data"),
            user_only: false,
            kernel_only: false,
            duration: None,
            mmap_pages: 128,
            cmdline: Vec::new(),
            debug_dirs: vec![PathBuf::from("/usr/lib/debug")],
            no_buildid_cache: false,
            buildid_cache_size: crate::buildid::DEFAULT_BOUND,
            keep_workload: false,
            off_cpu: false,
            off_cpu_stack_hz: None,
            strict_freq: false,
            companion: None,
            events: Vec::new(),
            rate_given: false,
            raw: false,
            binary: None,
            write_file: true,
            clock_monotonic: false,
        }
    }
}

/// Errors of `rprof record`.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error(transparent)]
    Perf(#[from] PerfError),
    #[error(transparent)]
    Process(#[from] ProcessError),
    #[error(transparent)]
    Recording(#[from] RecordingError),
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Event(#[from] crate::events::EventError),
    #[error("{option} {asked} Hz is above the kernel's limit kernel.perf_event_max_sample_rate = {max} Hz and --strict-freq refuses to lower it: ask for at most {max} Hz, or raise the limit with `sysctl -w kernel.perf_event_max_sample_rate={asked}`")]
    FrequencyAboveLimit {
        option: &'static str,
        asked: u64,
        max: u64,
    },
    #[error("cannot keep the previous recording {path} as {path}.old: {source} (move it away, or choose another output with -o)")]
    KeepPrevious {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What `rprof record` has to say once sampling is on.
#[derive(Clone, Debug)]
pub struct Started {
    /// The number of perf events opened.
    pub events: usize,
    /// Frequencies lowered to `kernel.perf_event_max_sample_rate`.
    pub lowered: Vec<LoweredRate>,
}

/// Sample until `stop` is set, SIGINT, SIGTERM or SIGHUP arrives, the duration passes, or the target exits;
/// write the recording. `on_start` is called once sampling is on.
pub fn record(
    cfg: &RecordConfig,
    stop: &AtomicBool,
    on_start: &mut dyn FnMut(&Started),
) -> Result<RecordSummary, RecordError> {
    record_with_tap(cfg, stop, on_start, None)
}

/// [`record`], with every record also handed to `tap` as it is written (dropped when recording ends).
pub fn record_with_tap(
    cfg: &RecordConfig,
    stop: &AtomicBool,
    on_start: &mut dyn FnMut(&Started),
    tap: Option<Box<dyn Tap>>,
) -> Result<RecordSummary, RecordError> {
    if cfg.user_only && cfg.kernel_only {
        return Err(RecordError::Config(
            "--user-only and --kernel-only exclude each other; pick one".into(),
        ));
    }
    let (cfg, lowered) = rate::cap(cfg, rate::max_sample_rate())?;
    let cfg = &cfg;
    let signals = StopSignals::register()?;
    let cpus = match &cfg.cpus {
        Some(c) => c.clone(),
        None => perf::online_cpus()?,
    };
    let mut session = Session::open(cfg, &cpus)?;
    // The output is created once the target is known to exist and before sampling starts: a bad -p leaves no
    // file behind, and an unwritable -o fails before anything is sampled. A previous recording there is kept
    // as FILE.old, as perf keeps it.
    let previous = match cfg.write_file {
        true => keep_previous(&cfg.output)?,
        false => None,
    };
    let mut stream = session.stream(cfg, tap)?;
    // Enabled before the processes are described from /proc: a mapping made after /proc/PID/maps was read
    // then comes as a record (disabled events get none). A target caught in its exec or its dynamic loader
    // (a process just spawned) would else lose its program and libraries, and every stack through them.
    if !matches!(cfg.target, Target::Command(_)) {
        session.events.enable()?;
    }
    let kernel = describe_existing(cfg, &mut stream, session.cgroup.as_ref())?;
    // The command's events are enabled at its exec (enable_on_exec); a companion command just starts.
    if let Some(w) = session.workload.as_mut() {
        w.start()?;
    }
    on_start(&Started {
        events: session.events.len(),
        lowered,
    });
    let watched = match &cfg.target {
        Target::Pids(p) | Target::Tids(p) => p.as_slice(),
        _ => &[],
    };
    let when = StopWhen {
        flag: Some(stop),
        duration: cfg.duration,
        workload: session.workload.as_mut(),
        pids: watched,
        tick: None,
    };
    perf::run_loop::run(&mut session.events, &signals, when, &mut stream)?;
    let grace = signals.grace();
    let exit_code = session.workload.as_mut().and_then(|w| w.end(grace));
    let mut summary = finish(cfg, stream, session, cpus.len(), kernel)?;
    summary.previous = previous;
    summary.exit_code = exit_code;
    Ok(summary)
}

/// Rename a non-empty file at `output` to `output.old` (replacing an older one), as `perf record` does;
/// returns the new name when there was one.
fn keep_previous(output: &Path) -> Result<Option<PathBuf>, RecordError> {
    if !std::fs::metadata(output).is_ok_and(|m| m.is_file() && m.len() > 0) {
        return Ok(None);
    }
    let mut old = output.as_os_str().to_owned();
    old.push(".old");
    let old = PathBuf::from(old);
    std::fs::rename(output, &old).map_err(|source| RecordError::KeepPrevious {
        path: output.to_path_buf(),
        source,
    })?;
    Ok(Some(old))
}

/// The opened events of a recording session, with what they sample.
struct Session {
    events: EventSet<Source>,
    /// `-- CMD`: the command, forked and waiting to exec.
    workload: Option<Workload>,
    /// `-G`: the cgroup.
    cgroup: Option<Cgroup>,
    /// The first sampled event as given to the kernel and as stored in the file.
    kernel_attr: perf::Attr,
    file_attr: perf::Attr,
    /// Each sampled event as given to the kernel (the first is `kernel_attr`).
    attrs: Vec<perf::Attr>,
    /// `--off-cpu`: the context-switch event as given to the kernel.
    switch_attr: Option<perf::Attr>,
    /// The sampled events (names, formats) and the probe points made for them, removed after the events
    /// above are closed (fields drop in order).
    resolved: events::Plan,
}

impl Session {
    /// Prepare the command or open the cgroup, and open the events on the target.
    fn open(cfg: &RecordConfig, cpus: &[u32]) -> Result<Session, RecordError> {
        let resolved = attrs::plan(cfg)?;
        let attrs: Vec<perf::Attr> = resolved
            .events
            .iter()
            .enumerate()
            .map(|(i, e)| attrs::build_attr(cfg, e, i == 0))
            .collect();
        let mut attrs = attrs;
        if python::targets_python(cfg) {
            // Python stacks are read as samples arrive: the reader wakes for each sample. For each sample
            // only: a byte watermark would wake it for every side-band record too (MMAP2, COMM, FORK, EXIT of
            // every process of a busy host: a poll and a round per record, which made `-a --push` cost 3-5x
            // `perf record` on a host running builds beside any python process).
            attrs[0] = attrs[0].wakeup_samples(1);
        }
        let kernel_attr = attrs[0];
        let workload = match (&cfg.target, &cfg.companion) {
            (Target::Command(cmd), _) | (_, Some(cmd)) => {
                Some(Workload::prepare(cmd, cfg.keep_workload)?)
            }
            _ => None,
        };
        let cgroup = match &cfg.target {
            Target::Cgroup(name) => Some(Cgroup::open(name)?),
            _ => None,
        };
        let switch_attr = cfg.off_cpu.then(|| attrs::switch_attr(cfg));
        let mut specs: Vec<(perf::Attr, Source)> = attrs
            .iter()
            .enumerate()
            .map(|(i, &a)| (a, Source::of_event(i)))
            .collect();
        specs.extend(switch_attr.map(|a| (a, Source::Switches)));
        let events = match &cgroup {
            Some(cg) => {
                EventSet::open_cgroup(&specs, cpus, cg.dir.as_fd(), cfg.mmap_pages, &mut |_, _| {
                    Refused::Fail
                })?
            }
            None => EventSet::open(
                &specs,
                cpus,
                &attrs::tasks(cfg, workload.as_ref())?,
                cfg.mmap_pages,
                &mut |_, _| Refused::Fail,
            )?,
        };
        events.try_each(|ev, source| {
            let filter = source
                .event()
                .and_then(|i| resolved.events[i].filter.as_deref());
            filter.map_or(Ok(()), |f| ev.set_filter(f))
        })?;
        Ok(Session {
            events,
            workload,
            cgroup,
            kernel_attr,
            file_attr: attrs::file_attr_for(cfg, kernel_attr),
            attrs,
            switch_attr,
            resolved,
        })
    }

    /// The attrs of the recording file, each with the ids of the events it describes.
    fn file_attrs(&self, cfg: &RecordConfig) -> Vec<FileAttr> {
        let ids_of = |source: Source| -> Vec<u64> {
            let infos = self.events.infos();
            let ids = self.events.ids().iter().copied();
            ids.filter(|&id| infos.get(id) == Some(&source)).collect()
        };
        let mut file_attrs: Vec<FileAttr> = self
            .attrs
            .iter()
            .zip(&self.resolved.events)
            .enumerate()
            .map(|(i, (&attr, event))| FileAttr {
                attr: attrs::file_attr_for(cfg, attr).to_bytes(),
                ids: ids_of(Source::of_event(i)),
                name: event.name.clone(),
            })
            .collect();
        if let Some(switch_attr) = self.switch_attr {
            file_attrs.push(FileAttr {
                attr: attrs::file_attr_for(cfg, switch_attr).to_bytes(),
                ids: ids_of(Source::Switches),
                name: recording::OFF_CPU_EVENT.to_string(),
            });
        }
        file_attrs
    }

    /// The stream of records into a new recording file.
    fn stream(&self, cfg: &RecordConfig, tap: Option<Box<dyn Tap>>) -> Result<Stream, RecordError> {
        let dwarf_mode = matches!(cfg.call_graph, CallGraph::Dwarf { .. });
        let sample_type = self.file_attr.get_sample_type();
        let info = self.kernel_attr.parse_info();
        let attrs = self.file_attrs(cfg);
        let file = match cfg.write_file {
            true => {
                let tracing = self.resolved.tracing_data();
                Some(Writer::create_with_tracing(
                    &cfg.output,
                    attrs.clone(),
                    tracing,
                )?)
            }
            false => None,
        };
        let python_names = tap.as_ref().and_then(|t| t.python_names());
        Ok(Stream {
            writer: Sink::new(file, tap, &attrs),
            identified: sample_type & perf::attr::sample::IDENTIFIER != 0,
            st: Collected {
                note_paths: cfg.write_file,
                ..Collected::default()
            },
            dwarf: dwarf_mode.then(|| DwarfState::new(cfg.debug_dirs.clone())),
            offcpu: cfg.off_cpu.then(OffCpu::default),
            ordered: (dwarf_mode || cfg.off_cpu).then(|| Ordered::new(info)),
            file_sample_type: sample_type,
            python: Some(PythonStacks::new(
                info,
                cfg.call_graph != CallGraph::None,
                python_names,
                matches!(cfg.target, Target::System | Target::Cgroup(_)),
            )),
            members: self.cgroup.as_ref().map(|_| Members {
                pids: HashSet::new(),
                late: 0,
                info,
                sample_type,
            }),
        })
    }
}

/// Describe what exists before sampling starts: the kernel, and the processes already running. Returns
/// whether the kernel was described.
fn describe_existing(
    cfg: &RecordConfig,
    stream: &mut Stream,
    cgroup: Option<&Cgroup>,
) -> Result<bool, RecordError> {
    let sample_type = stream.file_sample_type;
    let kernel = buildids::kernel_mmap();
    if let Some(k) = &kernel {
        let record = recording::encode_mmap2(sample_type, k, &SampleId::default());
        stream.writer.write_record(&[&record])?;
    }
    for pid in synth_pids(cfg, cgroup) {
        let Stream {
            writer,
            st,
            dwarf,
            members,
            python,
            ..
        } = stream;
        synthesize_process(
            writer,
            sample_type,
            pid,
            st,
            dwarf.as_mut(),
            python.as_mut(),
        )?;
        st.note_ns_pid(pid as u32);
        if let Some(m) = members {
            m.pids.insert(pid as u32);
        }
    }
    Ok(kernel.is_some())
}

/// Close the events, complete the recording (namespace pids, build ids, header) and say what was recorded.
fn finish(
    cfg: &RecordConfig,
    stream: Stream,
    session: Session,
    ncpus: usize,
    kernel: bool,
) -> Result<RecordSummary, RecordError> {
    let every_event = attrs::every_event(cfg, &session.resolved);
    let Session { events, cgroup, .. } = session;
    drop(events);
    let Stream {
        mut writer,
        st,
        dwarf,
        offcpu,
        members,
        python,
        ..
    } = stream;
    if let Some(file) = &mut writer.file {
        for (&host, &ns) in &st.ns_pids {
            file.add_ns_pid(host, ns);
        }
        if let Some(py) = &python {
            file.set_python_names(py.names());
        }
    }
    let mut build_ids = Vec::new();
    let bytes = writer.finish(&meta(cfg, ncpus), || {
        build_ids = buildids::build_ids(&st.paths);
        build_ids.extend(buildids::kernel_build_ids(cfg.no_buildid_cache, kernel));
        build_ids.clone()
    })?;
    let file = cfg.write_file && cfg.output != Path::new("-");
    if file && !cfg.no_buildid_cache {
        buildids::keep_sampled(&cfg.output, &build_ids, &st.paths, cfg.buildid_cache_size);
    }
    Ok(RecordSummary {
        samples: st.samples,
        every_event,
        lost: st.lost,
        lost_samples: st.lost_samples,
        throttled: st.throttled,
        output: match cfg.write_file {
            true => cfg.output.clone(),
            false => PathBuf::new(),
        },
        bytes,
        dwarf: dwarf.map(|d| d.stats),
        off_cpu: offcpu.map(|o| o.stats),
        cgroup: cgroup.zip(members).map(|(cg, m)| CgroupSummary {
            name: cg.name,
            processes: m.pids.len(),
            late: m.late,
        }),
        ns_pids: st.ns_pids,
        python: python.map(|p| p.stats).filter(|s| s.seen()),
        previous: None,
        exit_code: None,
    })
}

pub(crate) const PROT_EXEC: u32 = libc::PROT_EXEC as u32;

/// Which processes to describe with synthesized COMM/MMAP2 records.
fn synth_pids(cfg: &RecordConfig, cgroup: Option<&Cgroup>) -> Vec<i32> {
    match &cfg.target {
        Target::Command(_) => vec![],
        Target::Pids(p) => p.clone(),
        Target::Tids(t) => {
            let mut pids: Vec<i32> = t
                .iter()
                .filter_map(|&tid| process::tgid(tid).ok())
                .collect();
            pids.dedup();
            pids
        }
        Target::System => process::all_pids(),
        Target::Cgroup(_) => cgroup.map(Cgroup::pids).unwrap_or_default(),
    }
}

/// Write the synthesized COMM/MMAP2 records of `pid` (see [`synth::process_records`]), noting its mapped
/// files and feeding its mappings to the DWARF unwinder.
fn synthesize_process(
    writer: &mut Sink,
    sample_type: u64,
    pid: i32,
    st: &mut Collected,
    mut dwarf: Option<&mut DwarfState>,
    mut python: Option<&mut PythonStacks>,
) -> Result<(), RecordError> {
    for rec in synth::process_records(sample_type, pid, 0) {
        if let Some(mmap) = &rec.mmap {
            if mmap.path.starts_with('/') {
                st.note_path(pid, &mmap.path);
            }
            if let Some(py) = python.as_deref_mut() {
                py.mapped(pid as u32, &mmap.path);
            }
            if let Some(d) = dwarf.as_deref_mut() {
                d.add_mapping(mmap);
            }
        }
        writer.write_record(&[&rec.bytes])?;
    }
    Ok(())
}

fn meta(cfg: &RecordConfig, ncpus: usize) -> Meta {
    let uname = nix::sys::utsname::uname().ok();
    let online = perf::online_cpus().map(|c| c.len()).unwrap_or(ncpus) as u32;
    Meta {
        hostname: uname
            .as_ref()
            .map(|u| u.nodename().to_string_lossy().into_owned())
            .unwrap_or_default(),
        os_release: uname
            .as_ref()
            .map(|u| u.release().to_string_lossy().into_owned())
            .unwrap_or_default(),
        nr_cpus_online: online,
        nr_cpus_available: std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(online)
            .max(online),
        cmdline: cfg.cmdline.clone(),
    }
}
