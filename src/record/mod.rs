//! `rprof record`: open CPU-clock sampling events on a command, processes, threads or the whole system, read
//! the ring buffers until told to stop, and stream the records into a perf.data recording.
use crate::perf::attr::sample;
use crate::perf::record_type;
use crate::perf::{self, Attr, PerfError, PerfEvent, Ring, Workload};
use crate::process::{self, ProcessError};
use crate::recording::{
    self, BuildIdEntry, FileAttr, Meta, Mmap2, RecordingError, SampleId, Writer,
};
use std::collections::BTreeSet;

mod dwarf;
pub use crate::unwind::dwarf::DwarfStats;
use dwarf::DwarfState;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What to sample.
#[derive(Clone, Debug)]
pub enum Target {
    /// Launch this command (argv) and follow it and its children from its first instruction.
    Command(Vec<String>),
    /// These processes, with all their threads now and later.
    Pids(Vec<i32>),
    /// Only these threads.
    Tids(Vec<i32>),
    /// Every task on the chosen CPUs.
    System,
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
    /// Do not copy /proc/kallsyms into the build-id cache (perf's `-N`).
    pub no_buildid_cache: bool,
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
        }
    }
}

/// What a recording session produced.
#[derive(Clone, Debug, Default)]
pub struct RecordSummary {
    pub samples: u64,
    /// Records the kernel could not write because the buffer was full (PERF_RECORD_LOST).
    pub lost: u64,
    /// Samples dropped inside the kernel (PERF_RECORD_LOST_SAMPLES).
    pub lost_samples: u64,
    /// Times the kernel throttled sampling (PERF_RECORD_THROTTLE).
    pub throttled: u64,
    pub output: PathBuf,
    pub bytes: u64,
    /// The launched command's exit code, when there was one.
    pub exit_code: Option<i32>,
    /// DWARF mode: how the unwinds ended.
    pub dwarf: Option<DwarfStats>,
}

impl std::fmt::Display for RecordSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rprof record: {} samples, {} lost events, {} lost samples, throttled {} times; wrote {} ({})",
            self.samples,
            self.lost,
            self.lost_samples,
            self.throttled,
            self.output.display(),
            human_size(self.bytes)
        )?;
        if let Some(d) = &self.dwarf {
            write!(f, "\nrprof record: {d}")?;
        }
        Ok(())
    }
}

/// Format a byte count as B / KiB / MiB.
pub fn human_size(bytes: u64) -> String {
    match bytes {
        b if b < 1024 => format!("{b} B"),
        b if b < 1024 * 1024 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0)),
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
}

/// Sample until `stop` is set, the duration passes, or the target exits; write the recording.
/// `on_start` is called once sampling is on, with the number of perf events opened.
pub fn record(
    cfg: &RecordConfig,
    stop: &AtomicBool,
    on_start: &mut dyn FnMut(usize),
) -> Result<RecordSummary, RecordError> {
    if cfg.user_only && cfg.kernel_only {
        return Err(RecordError::Config(
            "--user-only and --kernel-only exclude each other; pick one".into(),
        ));
    }
    let cpus = match &cfg.cpus {
        Some(c) => c.clone(),
        None => perf::online_cpus()?,
    };
    let kernel_attr = build_attr(cfg);
    let file_attr = file_attr_for(cfg, kernel_attr);
    let mut workload = match &cfg.target {
        Target::Command(argv) => Some(Workload::prepare(argv)?),
        _ => None,
    };
    let events_by_cpu = open_events(cfg, &kernel_attr, &cpus, workload.as_ref())?;
    let mut rings = Vec::new();
    let mut ids = Vec::new();
    for (_cpu, events) in events_by_cpu {
        let mut events = events.into_iter();
        let Some(first) = events.next() else { continue };
        ids.push(first.id());
        let ring = Ring::new(first, cfg.mmap_pages)?;
        let mut rest = Vec::new();
        for e in events {
            e.set_output(ring.event())?;
            ids.push(e.id());
            rest.push(e);
        }
        rings.push((ring, rest));
    }

    let attr = FileAttr {
        attr: file_attr.to_bytes(),
        ids,
        name: if cfg.task_clock {
            "task-clock"
        } else {
            "cpu-clock"
        }
        .to_string(),
    };
    // The output is created once the target is known to exist and before sampling starts: a bad -p leaves no
    // file behind, and an unwritable -o fails before anything is sampled.
    let mut writer = Writer::create(&cfg.output, vec![attr])?;
    let sample_type = file_attr.get_sample_type();
    let mut state = Collected::default();
    let mut dwarf = matches!(cfg.call_graph, CallGraph::Dwarf { .. })
        .then(|| DwarfState::new(&kernel_attr, &file_attr, cfg.debug_dirs.clone()));
    // Describe what exists before sampling starts: the kernel, and the processes already running.
    let kernel = kernel_mmap();
    if let Some(k) = &kernel {
        writer.write_record(&[&recording::encode_mmap2(
            sample_type,
            k,
            &SampleId::default(),
        )])?;
    }
    for pid in synth_pids(cfg) {
        synthesize_process(&mut writer, sample_type, pid, &mut state, dwarf.as_mut())?;
    }

    // Start.
    match workload.as_mut() {
        Some(w) => w.start()?, // enable_on_exec does the rest
        None => {
            for (ring, rest) in &rings {
                ring.event().enable()?;
                for e in rest {
                    e.enable()?;
                }
            }
        }
    }
    on_start(rings.iter().map(|(_, rest)| 1 + rest.len()).sum());
    let started = Instant::now();
    let mut target_gone = false;
    loop {
        let ring_list: Vec<&Ring> = rings.iter().map(|(r, _)| r).collect();
        let all_hup = perf::ring::poll_rings(&ring_list, 100)?;
        drain(&mut rings, &mut writer, &mut state, &mut dwarf)?;
        if stop.load(Ordering::Relaxed) || target_gone {
            break;
        }
        if cfg.duration.is_some_and(|d| started.elapsed() >= d) {
            break;
        }
        // The target's end: read once more after it (its last records may still be in flight).
        target_gone = match workload.as_mut() {
            Some(w) => w.try_wait().is_some(),
            None => match &cfg.target {
                Target::Pids(p) | Target::Tids(p) => {
                    all_hup || !p.iter().any(|&pid| process::exists(pid))
                }
                _ => false,
            },
        };
    }
    for (ring, rest) in &rings {
        let _ = ring.event().disable();
        for e in rest {
            let _ = e.disable();
        }
    }
    drain(&mut rings, &mut writer, &mut state, &mut dwarf)?;
    if let Some(d) = dwarf.as_mut() {
        d.release(&mut writer, true)?;
    }

    let mut build_ids = build_ids(&state.paths);
    build_ids.extend(kernel_build_ids(cfg.no_buildid_cache, kernel.is_some()));
    let meta = meta(cfg, cpus.len());
    let bytes = writer.finish(&meta, &build_ids)?;
    Ok(RecordSummary {
        samples: state.samples,
        lost: state.lost,
        lost_samples: state.lost_samples,
        throttled: state.throttled,
        output: cfg.output.clone(),
        bytes,
        dwarf: dwarf.map(|d| d.stats),
        exit_code: workload.as_mut().and_then(|w| {
            w.try_wait();
            w.exit_code()
        }),
    })
}

/// The attr handed to the kernel.
fn build_attr(cfg: &RecordConfig) -> Attr {
    let mut st = sample::IP | sample::TID | sample::TIME | sample::PERIOD;
    // As perf does: the CPU of each sample only when sampling CPUs rather than tasks (8 bytes a sample).
    if matches!(cfg.target, Target::System) || cfg.cpus.is_some() {
        st |= sample::CPU;
    }
    let mut attr = Attr::software_clock(cfg.task_clock);
    attr = match cfg.rate {
        Rate::Frequency(hz) => attr.frequency(hz),
        Rate::Period(p) => attr.period(p),
    };
    match cfg.call_graph {
        CallGraph::None => {}
        CallGraph::Fp => st |= sample::CALLCHAIN,
        CallGraph::Dwarf { stack_size } => {
            st |= sample::CALLCHAIN | sample::REGS_USER | sample::STACK_USER;
            attr = attr
                .regs_user(
                    (1 << perf::attr::regs::IP)
                        | (1 << perf::attr::regs::SP)
                        | (1 << perf::attr::regs::BP),
                )
                .stack_user(stack_size);
        }
    }
    attr = attr
        .sample_type(st)
        .side_band()
        .sample_id_all()
        .exclude(cfg.kernel_only, cfg.user_only)
        .wakeup_watermark((cfg.mmap_pages * perf::ring::page_size() / 2) as u32);
    if matches!(cfg.call_graph, CallGraph::Dwarf { .. }) {
        attr = attr.callchain_user(false);
    }
    match cfg.target {
        Target::Command(_) => attr.inherit().enable_on_exec(),
        Target::Pids(_) => attr.inherit(),
        Target::Tids(_) | Target::System => attr,
    }
}

/// The attr stored in the file: what the samples in the file contain (DWARF mode stores the unwound
/// callchain in place of registers and stack copies).
fn file_attr_for(cfg: &RecordConfig, kernel: Attr) -> Attr {
    match cfg.call_graph {
        CallGraph::Dwarf { .. } => kernel
            .sample_type(kernel.get_sample_type() & !(sample::REGS_USER | sample::STACK_USER))
            .regs_user(0)
            .stack_user(0)
            .callchain_user(true),
        _ => kernel,
    }
}

type EventsByCpu = Vec<(u32, Vec<PerfEvent>)>;

/// Open one event per (task, CPU); returns them grouped by CPU (each CPU gets one ring buffer).
fn open_events(
    cfg: &RecordConfig,
    attr: &Attr,
    cpus: &[u32],
    workload: Option<&Workload>,
) -> Result<EventsByCpu, RecordError> {
    let tasks: Vec<i32> = match &cfg.target {
        Target::Command(_) => vec![workload.expect("command target has a workload").pid()],
        Target::Pids(pids) => {
            let mut tids = Vec::new();
            for &pid in pids {
                tids.extend(process::threads(pid)?);
            }
            tids
        }
        Target::Tids(tids) => {
            for &tid in tids {
                if !process::exists(tid) {
                    return Err(ProcessError::NoSuchProcess { pid: tid }.into());
                }
            }
            tids.clone()
        }
        Target::System => vec![-1],
    };
    let mut out = Vec::new();
    for &cpu in cpus {
        let mut events = Vec::new();
        for &task in &tasks {
            match PerfEvent::open(attr, task, cpu as i32) {
                Ok(e) => events.push(e),
                // A thread that exited between listing and opening is not an error.
                Err(PerfError::NoSuchProcess { .. }) if matches!(cfg.target, Target::Pids(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        out.push((cpu, events));
    }
    if out.iter().all(|(_, e)| e.is_empty()) {
        let pid = tasks.first().copied().unwrap_or(-1);
        return Err(ProcessError::NoSuchProcess { pid }.into());
    }
    Ok(out)
}

/// Counters and facts gathered while streaming records.
#[derive(Default)]
struct Collected {
    samples: u64,
    lost: u64,
    lost_samples: u64,
    throttled: u64,
    /// Executable files that were mapped (for the BUILD_ID section).
    paths: BTreeSet<(i32, String)>,
}

pub(crate) const PROT_EXEC: u32 = libc::PROT_EXEC as u32;

/// Read every ring once and append its records; end the round with FINISHED_ROUND. In DWARF mode records go
/// through the time-ordered merge first, so that a mapping is known before the samples that run in it.
fn drain(
    rings: &mut [(Ring, Vec<PerfEvent>)],
    writer: &mut Writer,
    st: &mut Collected,
    dwarf: &mut Option<DwarfState>,
) -> Result<(), RecordError> {
    let mut result = Ok(());
    let mut any = 0;
    for (ring, _) in rings.iter_mut() {
        any += ring.read(|rec| {
            if result.is_err() {
                return;
            }
            match rec.kind {
                record_type::SAMPLE => st.samples += 1,
                record_type::LOST => st.lost += body_u64(&rec, 8),
                record_type::LOST_SAMPLES => st.lost_samples += body_u64(&rec, 0),
                record_type::THROTTLE => st.throttled += 1,
                record_type::MMAP2 => note_mmap2(&rec, st),
                _ => {}
            }
            result = match dwarf {
                Some(d) => {
                    d.queue(&rec);
                    Ok(())
                }
                None => writer.write_record(&rec.parts()),
            };
        });
    }
    result?;
    if let Some(d) = dwarf {
        d.release(writer, false)?;
    }
    if any > 0 {
        writer.write_record(&[&recording::encode_finished_round()])?;
    }
    Ok(())
}

fn body_u64(rec: &perf::RawRecord<'_>, offset: usize) -> u64 {
    let body = rec.body();
    body.get(offset..offset + 8)
        .map(|b| u64::from_ne_bytes(b.as_slice().as_ref().try_into().unwrap_or([0; 8])))
        .unwrap_or(0)
}

fn note_mmap2(rec: &perf::RawRecord<'_>, st: &mut Collected) {
    use linux_perf_event_reader::Mmap2Record;
    if let Ok(m) = Mmap2Record::parse::<byteorder::NativeEndian>(rec.body(), rec.misc) {
        let path = String::from_utf8_lossy(&m.path.as_slice()).into_owned();
        if m.protection & PROT_EXEC != 0 && path.starts_with('/') {
            st.paths.insert((m.pid, path));
        }
    }
}

/// Which processes to describe with synthesized COMM/MMAP2 records.
fn synth_pids(cfg: &RecordConfig) -> Vec<i32> {
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
    }
}

/// COMM for each thread and MMAP2 for each executable mapping of `pid`, as perf synthesizes them.
fn synthesize_process(
    writer: &mut Writer,
    sample_type: u64,
    pid: i32,
    st: &mut Collected,
    mut dwarf: Option<&mut DwarfState>,
) -> Result<(), RecordError> {
    // A process may exit while we look at it: skip what disappeared.
    let Ok(tids) = process::threads(pid) else {
        return Ok(());
    };
    for &tid in &tids {
        let Ok(name) = process::comm(pid, tid) else {
            continue;
        };
        let id = SampleId {
            pid: pid as u32,
            tid: tid as u32,
            ..Default::default()
        };
        writer.write_record(&[&recording::encode_comm(
            sample_type,
            pid as u32,
            tid as u32,
            &name,
            false,
            &id,
        )])?;
    }
    let Ok(maps) = process::maps(pid) else {
        return Ok(());
    };
    let id = SampleId {
        pid: pid as u32,
        tid: pid as u32,
        ..Default::default()
    };
    for m in maps.iter().filter(|m| m.exec) {
        let mmap = Mmap2 {
            pid,
            tid: pid,
            start: m.start,
            len: m.end - m.start,
            pgoff: m.offset,
            maj: m.dev_major,
            min: m.dev_minor,
            ino: m.inode,
            prot: 1 | 4 | if m.write { 2 } else { 0 },
            flags: if m.private { 2 } else { 1 },
            path: if m.path.is_empty() {
                "//anon".to_string()
            } else {
                m.path.clone()
            },
            kernel: false,
        };
        if mmap.path.starts_with('/') {
            st.paths.insert((pid, mmap.path.clone()));
        }
        if let Some(d) = dwarf.as_deref_mut() {
            d.add_mapping(&mmap);
        }
        writer.write_record(&[&recording::encode_mmap2(sample_type, &mmap, &id)])?;
    }
    Ok(())
}

/// The kernel's text mapping as perf describes it: `[kernel.kallsyms]_text` from `_text` on.
fn kernel_mmap() -> Option<Mmap2> {
    let start = crate::symbols::running_text()?;
    Some(Mmap2 {
        pid: -1,
        tid: 0,
        start,
        len: u64::MAX - start,
        pgoff: start,
        prot: 5,
        flags: 2,
        path: "[kernel.kallsyms]_text".to_string(),
        kernel: true,
        ..Default::default()
    })
}

/// The BUILD_ID entries of the running kernel and its vDSO, as perf writes them. Unless `no_cache`, a copy of
/// /proc/kallsyms and of the vDSO image is kept in the build-id cache (once per kernel build), so that `report`
/// names the kernel's and the vDSO's frames from them, also after a reboot or on another machine (see
/// `symbols::kernel`). kallsyms is copied only when its addresses are `visible` (not hidden by kptr_restrict).
fn kernel_build_ids(no_cache: bool, visible: bool) -> Vec<BuildIdEntry> {
    let mut entries = Vec::new();
    let dir = (!no_cache).then(crate::symbols::buildid_dir).flatten();
    let warn = |e: std::io::Error, what: &str, dir: &Path| {
        eprintln!(
            "rprof: warning: cannot keep a copy of {what} in {}: {e} (use -N to skip)",
            dir.display()
        )
    };
    if let Some(build_id) = crate::symbols::running_build_id() {
        if let Some(dir) = dir.as_ref().filter(|_| visible) {
            if let Err(e) = crate::symbols::store_kallsyms(dir, &build_id) {
                warn(e, "/proc/kallsyms", dir);
            }
        }
        entries.push(BuildIdEntry {
            pid: -1,
            misc: 1, // PERF_RECORD_MISC_KERNEL
            build_id,
            path: "[kernel.kallsyms]".to_string(),
        });
    }
    let vdso = match &dir {
        Some(dir) => crate::symbols::store_vdso(dir).unwrap_or_else(|e| {
            warn(e, "the vDSO", dir);
            None
        }),
        None => None,
    };
    if let Some(build_id) = vdso.or_else(|| crate::symbols::running_vdso().map(|(_, id)| id)) {
        entries.push(BuildIdEntry {
            pid: -1,
            misc: 2, // PERF_RECORD_MISC_USER
            build_id,
            path: crate::symbols::VDSO.to_string(),
        });
    }
    entries
}

fn build_ids(paths: &BTreeSet<(i32, String)>) -> Vec<BuildIdEntry> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for (pid, path) in paths {
        if !seen.insert(path.clone()) {
            continue;
        }
        let opened = PathBuf::from(format!("/proc/{pid}/root{path}"));
        let file = if opened.exists() {
            opened
        } else {
            PathBuf::from(path)
        };
        if let Ok(info) = crate::symbols::elf_info(&file) {
            if let Some(build_id) = info.build_id {
                out.push(BuildIdEntry {
                    pid: *pid,
                    misc: 2, // PERF_RECORD_MISC_USER
                    build_id,
                    path: path.clone(),
                });
            }
        }
    }
    out
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
