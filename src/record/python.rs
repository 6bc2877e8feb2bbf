//! Python frames in recorded stacks: each sample of a CPython process gets the sampled thread's Python stack,
//! read from the process as the sample arrives ([`crate::python`]), merged into its callchain in place of the
//! `_PyEval_EvalFrameDefault` frames that ran it. Python frames are written as addresses that name entries of
//! the recording's PYTHON section ([`crate::python::frame_addr`]).
use crate::perf::RawRecord;
use crate::python::{self, Detected, PythonError, Runtime, Sampled};
use crate::recording::{self, SampleFields, SampleId};
use linux_perf_event_reader::{EventRecord, RecordParseInfo, SampleRecord};
use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::Arc;

const PERF_CONTEXT_USER: u64 = (-512i64) as u64;
/// Callchain entries at or above this are context markers, not addresses.
const PERF_CONTEXT_MAX: u64 = (-4095i64) as u64;
/// The sample fields [`recording::encode_sample`] writes back (a sample with others is left as it is).
const REWRITABLE: u64 = linux_perf_event_reader::constants::PERF_SAMPLE_IDENTIFIER
    | linux_perf_event_reader::constants::PERF_SAMPLE_IP
    | linux_perf_event_reader::constants::PERF_SAMPLE_TID
    | linux_perf_event_reader::constants::PERF_SAMPLE_TIME
    | linux_perf_event_reader::constants::PERF_SAMPLE_ID
    | linux_perf_event_reader::constants::PERF_SAMPLE_STREAM_ID
    | linux_perf_event_reader::constants::PERF_SAMPLE_CPU
    | linux_perf_event_reader::constants::PERF_SAMPLE_PERIOD
    | linux_perf_event_reader::constants::PERF_SAMPLE_CALLCHAIN
    | linux_perf_event_reader::constants::PERF_SAMPLE_RAW;

/// How the samples of Python processes fared.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PythonStats {
    /// Samples of threads of CPython processes.
    pub samples: u64,
    /// With a Python stack read as the sample arrived.
    pub with_stack: u64,
    /// With a stack whose frames changed under two reads in a row (possibly of two stacks): kept, marked late
    /// ([`python::STALE_MARK`]), never counted as read in time.
    pub torn: u64,
    /// The thread had no Python frame (it had not started Python, or ran C code outside any Python call).
    pub no_frames: u64,
    /// No thread state has the thread's id (a thread that never ran Python, or one that just ended).
    pub no_thread: u64,
    /// The read failed: the process exited, or memory changed under the read.
    pub exited: u64,
    pub failed: u64,
    /// `--call-graph dwarf`: the sample's stack copy held the thread's `_PyCFrame`: its `current_frame` was
    /// the one read (`fresh`), one the thread still ran deeper down (`deeper`: the stack is cut to it, exact),
    /// or one it had returned from (`stale`: the stack read is the thread's at the read).
    pub fresh: u64,
    pub deeper: u64,
    pub stale: u64,
    /// `--call-graph dwarf` samples of versions without a `_PyCFrame` (3.13): nothing in the stack copy to
    /// compare the read with.
    pub unchecked: u64,
    /// Processes by version (`3.11.2`), and those of versions rprof cannot read.
    pub versions: Vec<(u32, String)>,
    pub unsupported: Vec<(u32, String)>,
    /// Samples of Python threads without a callchain to put Python frames in (no `-g`): not read.
    pub no_callchain: u64,
}

/// How many reads of a thread's stack look for its `threading` name (a thread `threading` did not start has
/// none), and the mark of a thread named.
const NAME_TRIES: u32 = 8;
const NAMED: u32 = u32::MAX;

/// How many processes the verdict names.
const PIDS_SHOWN: usize = 4;

impl PythonStats {
    /// Whether a Python process was met.
    pub fn seen(&self) -> bool {
        !self.versions.is_empty() || !self.unsupported.is_empty()
    }

    /// The verdict on the Python stacks, a line each.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        let pids = |list: &[(u32, String)]| {
            let shown: Vec<String> = list
                .iter()
                .take(PIDS_SHOWN)
                .map(|(pid, v)| format!("{pid} ({v})"))
                .collect();
            match list.len().saturating_sub(PIDS_SHOWN) {
                0 => shown.join(", "),
                n => format!("{} and {n} more", shown.join(", ")),
            }
        };
        if !self.versions.is_empty() {
            lines.push(format!(
                "{} CPython processes: {}",
                self.versions.len(),
                pids(&self.versions)
            ));
        }
        if !self.unsupported.is_empty() {
            lines.push(format!(
                "CPython versions rprof cannot read (their samples have native frames only; 3.11 to 3.13 are read): {}",
                pids(&self.unsupported)
            ));
        }
        if self.no_callchain > 0 {
            lines.push(format!(
                "{} samples of Python threads without a call graph: no Python frames; add -g, or \
                 --call-graph dwarf for whole mixed stacks",
                self.no_callchain
            ));
        }
        if self.samples > self.no_callchain {
            let pct = |n: u64| 100.0 * n as f64 / (self.samples - self.no_callchain) as f64;
            lines.push(format!(
                "{} samples of Python threads: {} ({:.1}%) with a Python stack read as they arrived, {} \
                 ({:.1}%) whose frames changed under two reads (memory changed under the read: kept, marked \
                 late), {} ({:.1}%) with no Python frame (no Python code running on the thread), {} ({:.1}%) \
                 of threads without a Python thread state, {} reads failed ({} after the process exited, {} \
                 as memory changed under the read)",
                self.samples - self.no_callchain,
                self.with_stack,
                pct(self.with_stack),
                self.torn,
                pct(self.torn),
                self.no_frames,
                pct(self.no_frames),
                self.no_thread,
                pct(self.no_thread),
                self.exited + self.failed,
                self.exited,
                self.failed
            ));
        }
        let checked = self.fresh + self.deeper + self.stale;
        if checked > 0 {
            let pct = |n: u64| 100.0 * n as f64 / checked as f64;
            lines.push(format!(
                "timing, from {checked} stack copies holding the thread's _PyCFrame: {} ({:.1}%) read while \
                 the thread ran the sampled frame, {} ({:.1}%) after it called further (cut to the sampled \
                 frame: exact), {} ({:.1}%) after it returned from the sampled frame (the stack then: may \
                 differ from the sampled one)",
                self.fresh,
                pct(self.fresh),
                self.deeper,
                pct(self.deeper),
                self.stale,
                pct(self.stale),
            ));
        }
        if self.unchecked > 0 {
            lines.push(format!(
                "timing not measurable on 3.13 ({} samples with a stack copy): its current frame is in the \
                 thread state (tstate->current_frame), not on the C stack the sample copied; these stacks are \
                 the thread's at the read, which follows the sample by rprof's wakeup",
                self.unchecked
            ));
        }
        lines
    }
}

/// One sample's Python frames (leaf first, as callchain addresses, with 3.11's `is_entry`), and where the
/// evaluator's code is.
struct Read {
    frames: Vec<(u64, bool)>,
    eval: Range<u64>,
}

/// The Python side of a recording session.
pub(super) struct PythonStacks {
    procs: HashMap<u32, Option<Box<Runtime>>>,
    /// `Some` when the whole host is recorded (`-a`, `-G`): the processes that map an interpreter file, as the
    /// MMAP2 and FORK records (and the mappings of the processes that existed at the start) say. Only they
    /// are looked at (their /proc/PID/maps read); on a host that starts many processes a second, reading every
    /// new process's maps at its first sample cost a push a tenth of its CPU. `None`: every sampled process is
    /// looked at (a few targets).
    mapping_python: Option<HashSet<u32>>,
    names: python::Names,
    index: HashMap<Arc<str>, usize>,
    /// DWARF mode: the reads of samples waiting for their unwinding, by (tid, time).
    pending: HashMap<(u32, u64), Read>,
    info: RecordParseInfo,
    /// The samples have callchains (else Python processes are only noted).
    call_graph: bool,
    /// Threads by tid: how many of their stacks were read, or [`NAMED`] once their `threading` name was found.
    named: HashMap<u32, u32>,
    /// A COMM record naming a thread (its `threading` name, or its own comm back), to write before the sample
    /// just read.
    comm: Option<Vec<u8>>,
    sample_type: u64,
    pub(super) stats: PythonStats,
}

impl PythonStacks {
    /// `names`: where the frames' names go (shared with a tap's reader), else a table of its own.
    /// `whole_host`: only processes seen mapping an interpreter file are looked at (see
    /// [`PythonStacks::mapped`]).
    pub(super) fn new(
        info: RecordParseInfo,
        call_graph: bool,
        names: Option<python::Names>,
        whole_host: bool,
    ) -> PythonStacks {
        PythonStacks {
            procs: HashMap::new(),
            mapping_python: whole_host.then(HashSet::new),
            names: names.unwrap_or_default(),
            index: HashMap::new(),
            pending: HashMap::new(),
            info,
            call_graph,
            named: HashMap::new(),
            comm: None,
            sample_type: 0,
            stats: PythonStats::default(),
        }
    }

    /// The names of the Python frames written (the recording's PYTHON section).
    pub(super) fn names(&self) -> Vec<Arc<str>> {
        self.names.to_vec()
    }

    /// A process exec'd or exited: what was known of it goes.
    pub(super) fn forget(&mut self, pid: u32) {
        self.procs.remove(&pid);
    }

    /// Process `pid` exec'd (its mappings go) or ended (`tid` is `pid`): it maps no interpreter until an
    /// MMAP2 record says so.
    pub(super) fn unmapped(&mut self, pid: u32, tid: u32) {
        if pid == tid {
            if let Some(set) = &mut self.mapping_python {
                set.remove(&pid);
            }
        }
    }

    /// Process `pid` mapped the file `path` (an MMAP2 record, or /proc/PID/maps at the start): an
    /// interpreter file makes it one to look at; it is looked at again (a sample before this record found
    /// nothing, or what it found was another image).
    pub(super) fn mapped(&mut self, pid: u32, path: &str) {
        if let Some(set) = &mut self.mapping_python {
            if python::is_python_file(path) && set.insert(pid) {
                self.procs.remove(&pid);
            }
        }
    }

    /// Process `pid` was forked by `ppid`: it maps what its parent maps.
    pub(super) fn forked(&mut self, pid: u32, ppid: u32) {
        if let Some(set) = &mut self.mapping_python {
            if pid != ppid && set.contains(&ppid) {
                set.insert(pid);
            }
        }
    }

    /// A sample as it arrives: a sample of a Python thread gets its Python stack read now. Without `dwarf`
    /// the merged sample is returned (encoded with `sample_type`); in DWARF mode the read waits for
    /// [`PythonStacks::unwound`].
    pub(super) fn arrived(
        &mut self,
        rec: &RawRecord<'_>,
        dwarf: bool,
        sample_type: u64,
    ) -> Option<Vec<u8>> {
        let Ok(EventRecord::Sample(s)) = rec.event(&self.info).parse() else {
            return None;
        };
        self.sample_type = sample_type;
        let read = self.read(&s)?;
        if dwarf {
            self.pending
                .insert((s.tid? as u32, s.timestamp.unwrap_or(0)), read);
            return None;
        }
        if sample_type & !REWRITABLE != 0 || s.callchain.is_none() {
            return None;
        }
        let mut fields = SampleFields::from_record(&s, rec.misc);
        merge(&read, &mut fields.callchain);
        Some(recording::encode_sample(sample_type, &fields))
    }

    /// DWARF mode: the sample's callchain was unwound; merge the Python frames read when it arrived.
    pub(super) fn unwound(&mut self, fields: &mut SampleFields) {
        if let Some(read) = self.pending.remove(&(fields.tid, fields.time)) {
            merge(&read, &mut fields.callchain);
        }
    }

    /// Read the sampled thread's Python stack (None for other processes, and when there is none).
    fn read(&mut self, s: &SampleRecord<'_>) -> Option<Read> {
        let (pid, tid) = (s.pid? as u32, s.tid? as u32);
        if pid == 0 {
            return None;
        }
        if self
            .mapping_python
            .as_ref()
            .is_some_and(|set| !set.contains(&pid))
        {
            // Not known to map an interpreter (yet: nothing is kept, so an MMAP2 record read later counts).
            return None;
        }
        let stats = &mut self.stats;
        let runtime = self
            .procs
            .entry(pid)
            .or_insert_with(|| match python::detect(pid) {
                Detected::Python(r) => {
                    stats.versions.push((pid, r.version.clone()));
                    Some(r)
                }
                Detected::Unsupported(version) => {
                    stats.unsupported.push((pid, version));
                    None
                }
                Detected::NotPython => None,
            });
        let runtime = runtime.as_mut()?;
        // A thread started after the main thread was named takes that name (a new thread's comm is its
        // parent's): its first sample read gives it back its own, the OS's (its `threading` name, when found
        // below, replaces it).
        if pid != tid && self.named.get(&pid) == Some(&NAMED) && !self.named.contains_key(&tid) {
            self.named.insert(tid, 0);
            if let Ok(comm) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")) {
                self.comm = Some(comm_record(self.sample_type, s, comm.trim_end()));
            }
        }
        self.stats.samples += 1;
        if !self.call_graph {
            self.stats.no_callchain += 1;
            return None;
        }
        let regs = copied_regs(s);
        let copied = copied_stack(s);
        let copy = copied.as_ref().map(|(sp, stack)| python::SampleCopy {
            sp: *sp,
            stack,
            regs: &regs,
        });
        let stack = match runtime.stack(tid, copy.as_ref()) {
            Ok(stack) => stack,
            Err(PythonError::NoThread(_)) => {
                self.stats.no_thread += 1;
                return None;
            }
            Err(PythonError::Read(python::memory::ReadError::Exited)) => {
                self.stats.exited += 1;
                return None;
            }
            Err(_) => {
                self.stats.failed += 1;
                return None;
            }
        };
        if stack.frames.is_empty() {
            self.stats.no_frames += 1;
            return None;
        }
        match stack.torn {
            true => self.stats.torn += 1,
            false => self.stats.with_stack += 1,
        }
        let late = stack.torn || stack.sampled == Sampled::MovedOn;
        // A late read names the thread too: its outermost frame, `Thread._bootstrap`, lives as long as the
        // thread, and a thread's first samples must carry its name (those read late did not: one in a run).
        if let Some(name) = threading_name(&mut self.named, runtime, &stack, pid, tid) {
            self.comm = Some(comm_record(self.sample_type, s, &name));
        }
        match stack.sampled {
            Sampled::Same => self.stats.fresh += 1,
            Sampled::Deeper => self.stats.deeper += 1,
            Sampled::MovedOn => self.stats.stale += 1,
            Sampled::Unknown if s.user_stack.is_some() && !runtime.cframe_on_stack() => {
                self.stats.unchecked += 1
            }
            Sampled::Unknown => {}
        }
        let eval = runtime.eval.clone();
        let mut frames: Vec<(u64, bool)> = stack
            .frames
            .into_iter()
            .map(|f| (self.addr_of(f.name), f.entry))
            .collect();
        if late {
            frames[0].0 += python::STALE_MARK;
        }
        Some(Read { frames, eval })
    }

    /// A COMM record that names the thread of the sample just read by its `threading` name (once per thread),
    /// or gives it back its own comm, to write before that sample.
    pub(super) fn take_comm(&mut self) -> Option<Vec<u8>> {
        self.comm.take()
    }

    fn addr_of(&mut self, name: Arc<str>) -> u64 {
        let index = match self.index.get(&name) {
            Some(&i) => i,
            None => {
                let i = self.names.push(Arc::clone(&name));
                self.index.insert(name, i);
                i
            }
        };
        python::frame_addr(index)
    }
}

/// The `threading` name of thread `tid`, when this read finds it (once per thread; `named` counts the reads):
/// the main thread's by `threading._main_thread`, at each read until found (a script imports `threading` after
/// its first samples; `sys.modules` is looked through again only when it changed); the others' by their
/// `Thread._bootstrap` frame, at their first [`NAME_TRIES`] reads.
fn threading_name(
    named: &mut HashMap<u32, u32>,
    runtime: &mut python::Runtime,
    stack: &python::PyStack,
    pid: u32,
    tid: u32,
) -> Option<String> {
    let reads = named.entry(tid).or_default();
    if *reads == NAMED {
        return None;
    }
    *reads = (*reads + 1).min(NAMED - 1);
    let name = match pid == tid {
        true => runtime.main_thread_name(),
        false if *reads <= NAME_TRIES => runtime.thread_name(stack),
        _ => None,
    }?;
    *reads = NAMED;
    Some(name)
}

/// A COMM record that names the thread of sample `s` `name`, at the sample's time.
fn comm_record(sample_type: u64, s: &SampleRecord<'_>, name: &str) -> Vec<u8> {
    let (pid, tid) = (s.pid.unwrap_or(0) as u32, s.tid.unwrap_or(0) as u32);
    let id = SampleId {
        pid,
        tid,
        time: s.timestamp.unwrap_or(0),
        cpu: s.cpu.unwrap_or(0),
        id: s.id.unwrap_or(0),
    };
    recording::encode_comm(sample_type, pid, tid, name, false, &id)
}

/// Whether the target runs CPython (a `python*` command, or a process among the targets that maps an
/// interpreter): its samples are then read as each one arrives (the reader woken per sample), so that the
/// Python stack read is the sampled one, not one a ring-buffer's fill later.
pub(super) fn targets_python(cfg: &super::RecordConfig) -> bool {
    use super::Target;
    let runs_python = |pid: i32| {
        crate::process::maps(pid)
            .is_ok_and(|maps| maps.iter().any(|m| python::is_python_file(&m.path)))
    };
    match &cfg.target {
        Target::Command(cmd) => cmd
            .program
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("python")),
        Target::Pids(pids) => pids.iter().any(|&p| runs_python(p)),
        Target::Tids(tids) => tids
            .iter()
            .filter_map(|&t| crate::process::tgid(t).ok())
            .any(runs_python),
        // A host or cgroup: any process whose executable is a python.
        Target::System | Target::Cgroup(_) => crate::process::all_pids().into_iter().any(|p| {
            std::fs::read_link(format!("/proc/{p}/exe")).is_ok_and(|exe| {
                exe.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("python"))
            })
        }),
    }
}

/// The general registers of sample `s` (DWARF mode copies them all: [`crate::regs::GENERAL`]).
fn copied_regs(s: &SampleRecord<'_>) -> Vec<u64> {
    let Some(regs) = s.user_regs.as_ref() else {
        return Vec::new();
    };
    (0..64).filter_map(|i| regs.get(i)).collect()
}

/// The user stack sample `s` copied (as far as the kernel filled it) and the stack pointer it starts at.
fn copied_stack<'a>(s: &SampleRecord<'a>) -> Option<(u64, std::borrow::Cow<'a, [u8]>)> {
    let sp = crate::unwind::dwarf::UserRegs::from_sample(s.user_regs.as_ref()?)?.sp;
    let (stack, size) = s.user_stack.as_ref()?;
    let filled = (*size as usize).min(stack.len());
    let stack = match stack.as_slice() {
        std::borrow::Cow::Borrowed(b) => std::borrow::Cow::Borrowed(&b[..filled]),
        std::borrow::Cow::Owned(mut v) => {
            v.truncate(filled);
            std::borrow::Cow::Owned(v)
        }
    };
    Some((sp, stack))
}

/// Put the Python frames of `read` into `callchain` (leaf first, perf's context markers): each user frame in
/// `_PyEval_EvalFrameDefault` is replaced by the Python frames it ran (from the next one up to and including
/// an entry frame); Python frames left when the native chain has no more such frames (a chain cut short:
/// frame pointers in a binary without them) go at its outer end.
fn merge(read: &Read, callchain: &mut Vec<u64>) {
    let mut groups = Vec::new();
    let mut group = Vec::new();
    for &(addr, entry) in &read.frames {
        group.push(addr);
        if entry {
            groups.push(std::mem::take(&mut group));
        }
    }
    if !group.is_empty() {
        groups.push(group);
    }
    let mut groups = groups.into_iter();
    let user = match callchain.iter().position(|&a| a == PERF_CONTEXT_USER) {
        Some(i) => i + 1,
        None => {
            callchain.push(PERF_CONTEXT_USER);
            callchain.len()
        }
    };
    let mut out: Vec<u64> = callchain[..user].to_vec();
    for (i, &addr) in callchain[user..].iter().enumerate() {
        // A return address is looked up one byte back (its call); the first is the sampled IP.
        let lookup = if i == 0 { addr } else { addr.wrapping_sub(1) };
        if addr < PERF_CONTEXT_MAX && read.eval.contains(&lookup) {
            if let Some(g) = groups.next() {
                out.extend(g);
                continue;
            }
        }
        out.push(addr);
    }
    out.extend(groups.flatten());
    *callchain = out;
}

#[cfg(test)]
mod tests {
    use super::{merge, Read, PERF_CONTEXT_USER};

    const KERNEL: u64 = (-128i64) as u64;

    /// Check the merge: two evaluator frames each take their run of Python frames (down to an entry frame), a
    /// C extension's frame between them and the kernel's keep their places, and frames left over go at the
    /// outer end.
    #[test]
    fn evaluator_frames_become_python_frames() {
        let read = Read {
            frames: vec![
                (0xa1, false),
                (0xa2, true),
                (0xb1, false),
                (0xb2, true),
                (0xc1, true),
            ],
            eval: 0x1000..0x2000,
        };
        let mut chain = vec![
            KERNEL,
            0xffff_ffff_8100_0000,
            PERF_CONTEXT_USER,
            0x1500,
            0x7000,
            0x1801,
            0x9000,
        ];
        merge(&read, &mut chain);
        let want = [
            KERNEL,
            0xffff_ffff_8100_0000,
            PERF_CONTEXT_USER,
            0xa1,
            0xa2,
            0x7000,
            0xb1,
            0xb2,
            0x9000,
            0xc1,
        ];
        assert_eq!(chain, want);
        // A return address just past the evaluator's end is still in it (looked up one byte back); the IP
        // is not.
        let mut chain = vec![PERF_CONTEXT_USER, 0x2000, 0x2000];
        merge(&read, &mut chain);
        assert_eq!(
            chain,
            [PERF_CONTEXT_USER, 0x2000, 0xa1, 0xa2, 0xb1, 0xb2, 0xc1]
        );
    }
}
