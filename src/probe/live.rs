//! The live part of `rprof probe`: create the probes, open one perf event per probe, CPU and task (all of a CPU's
//! events write into one ring buffer through SET_OUTPUT), read the buffers, merge them by time, pair and report.
use super::addrmap::AddrMap;
use super::group::{self, PlannedEvent, ProbeGroup, Role};
use super::output::{self, Report};
use super::pairing::Pairer;
use super::resolve::Target;
use super::stacks::{self, StackCounter};
use super::stats::Stats;
use super::{ProbeError, ProbeOptions, RunSummary, TaskTarget};
use crate::perf::attr::{regs, sample};
use crate::perf::{ring, Attr, OrderedMerge, PerfError, PerfEvent, Ring, Workload};
use crate::process::{AddressSpaces, TaskEvent};
use crate::tracefs::{self, Tracefs};
use linux_perf_event_reader::{EventRecord, RecordParseInfo, RecordType};
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::perf::record_type::{
    EXIT as PERF_RECORD_EXIT, LOST as PERF_RECORD_LOST, SAMPLE as PERF_RECORD_SAMPLE,
};

#[derive(Clone, Copy)]
struct EventInfo {
    /// The target, when the event stands for one (kernel functions, syscalls, tracepoints).
    target: Option<u32>,
    role: Role,
    /// Offset in the raw data of the probed address (`__probe_ip` / `__probe_func`), for shared user events.
    addr_field: Option<usize>,
    /// The event's samples carry the user SP (uprobes and uretprobes).
    has_sp: bool,
    parse: RecordParseInfo,
}

/// An event read from a ring, waiting in the time-ordered merge.
enum Item {
    /// A hit of `target`, or of the user function at runtime address `addr`.
    Sample {
        target: Option<u32>,
        addr: u64,
        role: Role,
        pid: u32,
        tid: u32,
        sp: Option<u64>,
        stack: Option<Box<[u64]>>,
    },
    /// A change of a process's mappings (MMAP2, COMM exec, FORK).
    Task(TaskEvent),
    Exit {
        pid: u32,
        tid: u32,
    },
}

/// The open perf events: one ring per CPU, every other event redirected into its CPU's ring.
struct Events {
    rings: Vec<Ring>,
    others: Vec<PerfEvent>,
    infos: HashMap<u64, EventInfo>,
    /// Parse info for non-sample records (EXIT, LOST): their fixed fields parse the same under any attr.
    any_parse: Option<RecordParseInfo>,
}

impl Events {
    fn all(&self) -> impl Iterator<Item = &PerfEvent> {
        self.rings.iter().map(Ring::event).chain(self.others.iter())
    }
}

impl Drop for Events {
    /// Close every event, from many threads at once. Closing the last perf event of a tracepoint waits for an
    /// RCU grace period (tens of ms here); concurrent waiters share grace periods, so 1,000 probes close in
    /// about a second instead of minutes.
    fn drop(&mut self) {
        let others = std::mem::take(&mut self.others);
        let threads = CLOSE_THREADS.min(others.len().max(1));
        let mut buckets: Vec<Vec<PerfEvent>> = (0..threads).map(|_| Vec::new()).collect();
        for (i, ev) in others.into_iter().enumerate() {
            buckets[i % threads].push(ev);
        }
        std::thread::scope(|s| {
            for b in buckets {
                s.spawn(move || drop(b));
            }
        });
        self.rings.clear();
    }
}

/// Threads used to close perf events.
const CLOSE_THREADS: usize = 256;

/// Raise RLIMIT_NOFILE to the hard limit, and higher (as root) when `need` descriptors do not fit.
fn raise_nofile(need: u64) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    let want = need + 256;
    if want > hard {
        let nr_open: u64 = std::fs::read_to_string("/proc/sys/fs/nr_open")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(hard);
        let new = want.min(nr_open).max(hard);
        if setrlimit(Resource::RLIMIT_NOFILE, new, new).is_ok() {
            return;
        }
    }
    if soft < hard {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
}

fn open_events(
    opts: &ProbeOptions,
    tracefs: &Tracefs,
    planned: &[PlannedEvent],
    targets: &[Target],
    tasks: &[i32],
) -> Result<(Events, Vec<bool>), ProbeError> {
    let cpus = crate::perf::online_cpus()?;
    let page = ring::page_size();
    let pages = opts.mmap_pages.max(1).next_power_of_two();
    let watermark = (pages * page / 4) as u32;
    let any_user = planned.iter().any(|p| p.user);
    let mut plan: Vec<(EventInfo, Attr)> = Vec::new();
    for (n, p) in planned.iter().enumerate() {
        let id = tracefs.event_id(&p.group, &p.event)?;
        let mut bits = sample::IDENTIFIER | sample::TID | sample::TIME;
        let mut addr_field = None;
        if p.user {
            bits |= sample::REGS_USER | sample::RAW;
            let field = if p.role == Role::Return {
                "__probe_func"
            } else {
                "__probe_ip"
            };
            addr_field = Some(
                tracefs
                    .field_offset(&p.group, &p.event, field)?
                    .unwrap_or(8),
            );
        }
        if opts.stacks && p.role != Role::Return {
            bits |= sample::CALLCHAIN;
            if p.user {
                // The return address at SP: the caller, which a frame-pointer walk at function entry skips.
                bits |= sample::STACK_USER;
            }
        }
        let mut attr = Attr::tracepoint(id)
            .sample_type(bits)
            .sample_id_all()
            .wakeup_watermark(watermark);
        if p.user {
            attr = attr.regs_user(1 << regs::SP);
            if bits & sample::STACK_USER != 0 {
                attr = attr.stack_user(8);
            }
        }
        if opts.stacks {
            attr = attr.max_stack(127);
        }
        if opts.target != TaskTarget::SystemWide {
            attr = attr.inherit();
        }
        if matches!(opts.target, TaskTarget::Command(_)) {
            attr = attr.enable_on_exec();
        }
        if n == 0 {
            // One event per task and CPU reports mmaps (to map user addresses back to functions) and thread
            // exits (to close the open calls of threads that end mid-call).
            if any_user || opts.stacks {
                attr = attr.side_band();
            } else if !opts.count_only {
                attr = attr.task_events();
            }
        }
        let target = if p.members.len() == 1 && !p.user {
            Some(p.members[0])
        } else {
            None
        };
        let info = EventInfo {
            target,
            role: p.role,
            addr_field,
            has_sp: p.user,
            parse: attr.parse_info(),
        };
        plan.push((info, attr));
    }
    let mut usable = vec![true; targets.len()];
    let mut skipped = vec![false; plan.len()];
    let mut events = Events {
        rings: Vec::new(),
        others: Vec::new(),
        infos: HashMap::new(),
        any_parse: None,
    };
    for (ci, &cpu) in cpus.iter().enumerate() {
        let mut ring: Option<Ring> = None;
        for (ti, &task) in tasks.iter().enumerate() {
            for (pi, (info, attr)) in plan.iter().enumerate() {
                if skipped[pi] {
                    continue;
                }
                let ev = match PerfEvent::open(attr, task, cpu as i32) {
                    Ok(ev) => ev,
                    Err(PerfError::NoSuchProcess { .. }) if ti > 0 => break, // a thread that just ended
                    Err(PerfError::Open { source, .. })
                        if ci == 0 && ti == 0 && info.role != Role::Hit && pi > 0 =>
                    {
                        let names: Vec<&str> = planned[pi]
                            .members
                            .iter()
                            .take(3)
                            .map(|&m| targets[m as usize].name.as_str())
                            .collect();
                        eprintln!(
                            "rprof: warning: skipping {} target(s) ({}...): the kernel refused the probe ({source})",
                            planned[pi].members.len(),
                            names.join(", ")
                        );
                        for &m in &planned[pi].members {
                            usable[m as usize] = false;
                        }
                        skipped[pi] = true;
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                };
                events.any_parse.get_or_insert(info.parse);
                events.infos.insert(ev.id(), *info);
                match &ring {
                    Some(r) => {
                        ev.set_output(r.event())?;
                        events.others.push(ev);
                    }
                    None => ring = Some(Ring::new(ev, pages)?),
                }
            }
        }
        events.rings.extend(ring);
    }
    Ok((events, usable))
}

/// Reads all rings into the merge; counts lost events.
fn read_rings(
    events: &mut Events,
    merge: &mut OrderedMerge<Item>,
    stats: &mut Stats,
    addrs: &AddrMap,
    want_paths: bool,
) {
    let infos = &events.infos;
    let any = events.any_parse;
    for r in events.rings.iter_mut() {
        r.read(|rec| {
            if rec.kind == PERF_RECORD_SAMPLE {
                let Some(id) = linux_perf_event_reader::get_record_identifier::<
                    byteorder::NativeEndian,
                >(RecordType(rec.kind), rec.body(), true) else {
                    return;
                };
                let Some(info) = infos.get(&id) else { return };
                let Ok(EventRecord::Sample(s)) = rec.event(&info.parse).parse() else {
                    return;
                };
                let (Some(time), Some(tid)) = (s.timestamp, s.tid) else {
                    return;
                };
                let sp = if info.has_sp {
                    s.user_regs.as_ref().and_then(|r| r.get(regs::SP as u64))
                } else {
                    None
                };
                let addr = match (info.addr_field, &s.raw) {
                    (Some(off), Some(raw)) => {
                        let mut b = [0u8; 8];
                        let mut d = *raw;
                        if d.skip(off).is_err() || d.read_exact(&mut b).is_err() {
                            return;
                        }
                        u64::from_ne_bytes(b)
                    }
                    _ => 0,
                };
                let stack = s.callchain.map(|c| {
                    let mut chain: Vec<u64> = (0..c.len()).filter_map(|i| c.get(i)).collect();
                    if let Some((mut data, size)) = s.user_stack {
                        let mut b = [0u8; 8];
                        if size >= 8 && data.read_exact(&mut b).is_ok() {
                            stacks::add_entry_caller(&mut chain, u64::from_ne_bytes(b));
                        }
                    }
                    chain.into_boxed_slice()
                });
                let pid = s.pid.unwrap_or(0) as u32;
                let item = Item::Sample {
                    target: info.target,
                    addr,
                    role: info.role,
                    pid,
                    tid: tid as u32,
                    sp,
                    stack,
                };
                merge.push(time, item);
                return;
            }
            let Some(p) = &any else { return };
            let raw = rec.event(p);
            let time = raw.timestamp().unwrap_or(0);
            match (rec.kind, raw.parse()) {
                (PERF_RECORD_LOST, Ok(EventRecord::Lost(l))) => stats.lost += l.count,
                (PERF_RECORD_EXIT, Ok(EventRecord::Exit(e))) => merge.push(
                    e.timestamp,
                    Item::Exit {
                        pid: e.pid as u32,
                        tid: e.tid as u32,
                    },
                ),
                (_, Ok(record)) if want_paths || !addrs.is_empty() => {
                    let time = match &record {
                        EventRecord::Fork(f) => f.timestamp,
                        _ => time,
                    };
                    if let Some(task) = TaskEvent::from_record(&record) {
                        merge.push(time, Item::Task(task));
                    }
                }
                _ => {}
            }
        });
    }
}

/// The state that released events update.
struct Sink {
    stats: Stats,
    pairer: Pairer,
    stacks: StackCounter,
    addrs: AddrMap,
    /// Every process's mappings.
    spaces: AddressSpaces,
    /// Processes whose mappings were read from /proc on their first hit.
    synthesized: HashSet<u32>,
    timed: bool,
    /// User hits whose address matched no probed function (a process whose mappings were missed).
    unresolved: u64,
}

impl Sink {
    fn apply(&mut self, time: u64, item: Item) {
        match item {
            Item::Sample {
                target,
                addr,
                role,
                pid,
                tid,
                sp,
                stack,
            } => {
                // A process whose mappings came before we looked (or were missed): read them now.
                if self.spaces.get(pid).is_none() && self.synthesized.insert(pid) {
                    self.spaces.synthesize(pid);
                }
                let target = match target {
                    Some(t) => t,
                    None => match self.addrs.lookup(self.spaces.get(pid), addr) {
                        Some(t) => t,
                        None => {
                            self.unresolved += 1;
                            return;
                        }
                    },
                };
                match role {
                    Role::Entry if self.timed => {
                        self.pairer.entry(&mut self.stats, tid, target, time, sp)
                    }
                    Role::Return if self.timed => {
                        self.pairer.ret(&mut self.stats, tid, target, time, sp)
                    }
                    Role::Return => {}
                    Role::Entry | Role::Hit => self.stats.funcs[target as usize].enter(),
                }
                if let Some(chain) = stack {
                    self.stacks.add(target, pid, self.spaces.get(pid), &chain);
                }
            }
            Item::Task(task) => self.spaces.apply(task),
            Item::Exit { pid, tid } => {
                self.pairer.thread_exit(&mut self.stats, tid);
                if pid == tid {
                    self.spaces.apply(TaskEvent::Exit { pid });
                }
            }
        }
    }

    /// Release what the merge holds (all of it with `drain`).
    fn release(&mut self, merge: &mut OrderedMerge<Item>, drain: bool) {
        if drain {
            merge.drain(|t, item| self.apply(t, item));
        } else {
            merge.finish_round(|t, item| self.apply(t, item));
        }
    }
}

/// The wall clock as `HH:MM:SS` (UTC).
fn clock() -> String {
    let s = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
        % 86_400;
    format!("{:02}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60)
}

/// Create the probes, run until the end of the duration, the target's exit or a signal, and print reports.
pub fn run(
    opts: &ProbeOptions,
    tracefs: &Tracefs,
    targets: &[Target],
    out: &mut dyn Write,
) -> Result<RunSummary, ProbeError> {
    let term = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(sig, Arc::clone(&term)).map_err(ProbeError::Output)?;
    }
    // Fork the command before anything else starts (the child waits for us before exec).
    let mut workload = match &opts.target {
        TaskTarget::Command(argv) => Some(Workload::prepare(argv)?),
        _ => None,
    };
    let tasks: Vec<i32> = match &opts.target {
        TaskTarget::SystemWide => vec![-1],
        TaskTarget::Pid(p) => {
            crate::process::threads(*p).map_err(|_| PerfError::NoSuchProcess { pid: *p })?
        }
        TaskTarget::Command(_) => vec![workload.as_ref().map_or(-1, Workload::pid)],
    };
    let group_name = tracefs::group_name(std::process::id());
    let (defs, planned) = group::plan(&group_name, targets, opts.count_only);
    let cpus = crate::perf::online_cpus()?.len() as u64;
    raise_nofile(planned.len() as u64 * cpus * tasks.len() as u64);

    let removed = group::remove_stale_groups(tracefs)?;
    if !removed.is_empty() {
        eprintln!(
            "rprof: removed probe groups left by rprof processes that are gone: {}",
            removed.join(", ")
        );
    }
    let setup = Instant::now();
    // Declared before the events: dropped after them (the kernel refuses to delete probes that are open).
    let _group = ProbeGroup::create(tracefs, &group_name, &defs)?;
    let (mut events, usable) = open_events(opts, tracefs, &planned, targets, &tasks)?;
    let probed = usable.iter().filter(|u| **u).count();
    if probed == 0 {
        return Err(ProbeError::NoMatch {
            what: "probeable functions",
            pattern: opts.patterns.join(" "),
            place: "the kernel's view (every probe was refused)".into(),
        });
    }
    let mut sink = Sink {
        stats: Stats::new(targets.len()),
        pairer: Pairer::new(),
        stacks: StackCounter::new(),
        addrs: AddrMap::new(targets),
        spaces: AddressSpaces::new(),
        synthesized: HashSet::new(),
        timed: !opts.count_only && targets.iter().any(Target::can_time),
        unresolved: 0,
    };
    // Processes that exist already: their mappings of the probed binaries come from /proc.
    if !sink.addrs.is_empty() {
        match &opts.target {
            TaskTarget::Pid(p) => sink.spaces.synthesize(*p as u32),
            TaskTarget::SystemWide => {
                for pid in crate::process::all_pids() {
                    sink.spaces.synthesize(pid as u32);
                }
            }
            TaskTarget::Command(_) => {}
        }
    }
    match workload.as_mut() {
        Some(w) => w.start()?,
        None => {
            for ev in events.all() {
                ev.enable()?;
            }
        }
    }
    eprintln!(
        "rprof: probing {probed} targets ({} probe points, {} perf events) set up in {:.2}s; Ctrl-C to end",
        defs.len(),
        events.infos.len(),
        setup.elapsed().as_secs_f64()
    );

    let names: Vec<String> = targets.iter().map(|t| t.name.clone()).collect();
    let report = |out: &mut dyn Write, sink: &Sink, stats: &Stats| -> Result<(), ProbeError> {
        let r = Report {
            names: &names,
            stats,
            timed: sink.timed,
            timestamp: opts.timestamps.then(clock),
            open_calls: sink.pairer.open_calls(),
            show_zero: false,
        };
        output::write(out, &r, opts.format)?;
        if stats.lost > 0 && matches!(opts.format, super::Format::Csv | super::Format::Json) {
            eprintln!(
                "rprof: warning: {} events were lost (the ring buffers overflowed)",
                stats.lost
            );
        }
        out.flush()?;
        Ok(())
    };
    let mut merge: OrderedMerge<Item> = OrderedMerge::new();
    let start = Instant::now();
    let deadline = opts.duration.map(|d| start + d);
    let mut next_report = opts.interval.map(|i| start + i);
    loop {
        if term.load(Ordering::Relaxed) {
            break;
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            break;
        }
        let target_gone = match (&opts.target, workload.as_mut()) {
            (_, Some(w)) => w.try_wait().is_some(),
            (TaskTarget::Pid(p), None) => !crate::process::exists(*p),
            _ => false,
        };
        if target_gone {
            break;
        }
        let mut wait = Duration::from_millis(50);
        for t in [deadline, next_report].into_iter().flatten() {
            wait = wait.min(t.saturating_duration_since(now));
        }
        let rings: Vec<&Ring> = events.rings.iter().collect();
        ring::poll_rings(&rings, wait.as_millis().max(1) as u16)?;
        read_rings(
            &mut events,
            &mut merge,
            &mut sink.stats,
            &sink.addrs,
            opts.stacks,
        );
        sink.release(&mut merge, false);
        if let (Some(at), Some(every)) = (next_report, opts.interval) {
            let now = Instant::now();
            // The last interval is reported at the end, with everything still in the buffers.
            if now >= at && deadline.is_none_or(|d| now < d) {
                let interval = sink.stats.take();
                report(out, &sink, &interval)?;
                next_report = Some(at + every);
            }
        }
    }
    for ev in events.all() {
        let _ = ev.disable();
    }
    read_rings(
        &mut events,
        &mut merge,
        &mut sink.stats,
        &sink.addrs,
        opts.stacks,
    );
    sink.release(&mut merge, true);
    drop(events);
    report(out, &sink, &sink.stats)?;
    if sink.unresolved > 0 {
        eprintln!(
            "rprof: warning: {} hits in processes whose mappings were not seen were not counted",
            sink.unresolved
        );
    }
    if opts.stacks {
        sink.stacks.write(out, &names, opts.folded)?;
        out.flush()?;
    }
    let exit_code = workload.as_mut().and_then(|w| {
        w.try_wait();
        w.exit_code()
    });
    Ok(RunSummary { exit_code })
}
