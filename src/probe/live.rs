//! The live part of `rprof probe`: create the probes, open one perf event per probe, CPU and task (all of a CPU's
//! events write into one ring buffer through SET_OUTPUT), read the buffers, merge them by time, pair and report.
use super::group::{self, ProbeGroup};
use super::output::{self, Report};
use super::pairing::Pairer;
use super::resolve::{Target, TargetKind};
use super::stacks::StackCounter;
use super::stats::Stats;
use super::{ProbeError, ProbeOptions, RunSummary, TaskTarget};
use crate::perf::attr::{regs, sample};
use crate::perf::{ring, Attr, OrderedMerge, PerfError, PerfEvent, Ring, Workload};
use crate::tracefs::{self, Tracefs};
use linux_perf_event_reader::{EventRecord, RecordParseInfo, RecordType};
use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

const PERF_RECORD_LOST: u32 = 2;
const PERF_RECORD_EXIT: u32 = 4;
const PERF_RECORD_SAMPLE: u32 = 9;

/// What one perf event stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Entry,
    Return,
    /// A counted tracepoint hit.
    Hit,
}

#[derive(Clone, Copy)]
struct EventInfo {
    target: u32,
    role: Role,
    /// The event's samples carry the user SP (uprobes and uretprobes).
    has_sp: bool,
    parse: RecordParseInfo,
}

/// An event read from a ring, waiting in the time-ordered merge.
enum Item {
    Sample { target: u32, role: Role, pid: u32, tid: u32, sp: Option<u64>, stack: Option<Box<[u64]>> },
    Exit { tid: u32 },
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

/// The tracefs (group, event) pairs of a target, with their roles.
fn tracefs_events(group: &str, index: usize, t: &Target, count_only: bool) -> Vec<(String, String, Role)> {
    let (e, r) = group::event_names(index);
    let mut v = Vec::new();
    match &t.kind {
        TargetKind::User { .. } | TargetKind::Kernel { .. } => {
            v.push((group.to_string(), e, Role::Entry));
            if !count_only {
                v.push((group.to_string(), r, Role::Return));
            }
        }
        TargetKind::Syscall { name } => {
            v.push(("syscalls".into(), format!("sys_enter_{name}"), Role::Entry));
            if !count_only {
                v.push(("syscalls".into(), format!("sys_exit_{name}"), Role::Return));
            }
        }
        TargetKind::Tracepoint { category, event } => v.push((category.clone(), event.clone(), Role::Hit)),
    }
    v
}

/// Raise RLIMIT_NOFILE to the hard limit, and higher (as root) when `need` descriptors do not fit.
fn raise_nofile(need: u64) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else { return };
    let want = need + 256;
    if want > hard {
        let nr_open: u64 =
            std::fs::read_to_string("/proc/sys/fs/nr_open").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(hard);
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
    group: &str,
    targets: &[Target],
    tasks: &[i32],
) -> Result<(Events, Vec<bool>), ProbeError> {
    let cpus = crate::perf::online_cpus()?;
    let page = ring::page_size();
    let pages = opts.mmap_pages.max(1).next_power_of_two();
    let watermark = (pages * page / 4) as u32;
    // Per target: (tracefs id, role, attr).
    let mut plan: Vec<Vec<(Role, Attr, bool)>> = Vec::new();
    let mut first = true;
    for (i, t) in targets.iter().enumerate() {
        let mut v = Vec::new();
        for (g, e, role) in tracefs_events(group, i, t, opts.count_only) {
            let id = tracefs.event_id(&g, &e)?;
            let has_sp = matches!(t.kind, TargetKind::User { .. });
            let mut bits = sample::IDENTIFIER | sample::TID | sample::TIME;
            if has_sp {
                bits |= sample::REGS_USER;
            }
            if opts.stacks && role != Role::Return {
                bits |= sample::CALLCHAIN;
            }
            let mut attr = Attr::tracepoint(id).sample_type(bits).sample_id_all().wakeup_watermark(watermark);
            if has_sp {
                attr = attr.regs_user(1 << regs::SP);
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
            if first && !opts.count_only {
                // One event per task and CPU reports thread exits, so open calls of dead threads are closed.
                attr = attr.task_events();
                first = false;
            }
            v.push((role, attr, has_sp));
        }
        plan.push(v);
    }
    let mut usable = vec![true; targets.len()];
    let mut events = Events { rings: Vec::new(), others: Vec::new(), infos: HashMap::new(), any_parse: None };
    for (ci, &cpu) in cpus.iter().enumerate() {
        let mut ring: Option<Ring> = None;
        for (ti, &task) in tasks.iter().enumerate() {
            for (i, evs) in plan.iter().enumerate() {
                if !usable[i] {
                    continue;
                }
                for (role, attr, has_sp) in evs {
                    let ev = match PerfEvent::open(attr, task, cpu as i32) {
                        Ok(ev) => ev,
                        Err(PerfError::NoSuchProcess { .. }) if ti > 0 => continue, // a thread that just ended
                        Err(PerfError::Open { source, .. }) if ci == 0 && ti == 0 && *role != Role::Hit => {
                            eprintln!("rprof: warning: skipping {}: the kernel refused its probe ({source})", targets[i].name);
                            usable[i] = false;
                            break;
                        }
                        Err(e) => return Err(e.into()),
                    };
                    let info = EventInfo { target: i as u32, role: *role, has_sp: *has_sp, parse: attr.parse_info() };
                    events.any_parse.get_or_insert(info.parse);
                    events.infos.insert(ev.id(), info);
                    match &ring {
                        Some(r) => {
                            ev.set_output(r.event())?;
                            events.others.push(ev);
                        }
                        None => ring = Some(Ring::new(ev, pages)?),
                    }
                }
            }
        }
        events.rings.extend(ring);
    }
    Ok((events, usable))
}

/// Reads all rings into the merge; counts lost events.
fn read_rings(events: &mut Events, merge: &mut OrderedMerge<Item>, stats: &mut Stats) {
    let infos = &events.infos;
    let any = events.any_parse;
    for r in events.rings.iter_mut() {
        r.read(|rec| match rec.kind {
            PERF_RECORD_SAMPLE => {
                let body = rec.body();
                let Some(id) = linux_perf_event_reader::get_record_identifier::<byteorder::NativeEndian>(
                    RecordType(rec.kind),
                    body,
                    true,
                ) else {
                    return;
                };
                let Some(info) = infos.get(&id) else { return };
                let Ok(EventRecord::Sample(s)) = rec.event(&info.parse).parse() else { return };
                let (Some(time), Some(tid)) = (s.timestamp, s.tid) else { return };
                let sp = if info.has_sp { s.user_regs.as_ref().and_then(|r| r.get(regs::SP as u64)) } else { None };
                let stack = s.callchain.map(|c| (0..c.len()).filter_map(|i| c.get(i)).collect::<Box<[u64]>>());
                merge.push(
                    time,
                    Item::Sample {
                        target: info.target,
                        role: info.role,
                        pid: s.pid.unwrap_or(0) as u32,
                        tid: tid as u32,
                        sp,
                        stack,
                    },
                );
            }
            PERF_RECORD_LOST => {
                if let Some(p) = &any {
                    if let Ok(EventRecord::Lost(l)) = rec.event(p).parse() {
                        stats.lost += l.count;
                    }
                }
            }
            PERF_RECORD_EXIT => {
                if let Some(p) = &any {
                    if let Ok(EventRecord::Exit(e)) = rec.event(p).parse() {
                        merge.push(e.timestamp, Item::Exit { tid: e.tid as u32 });
                    }
                }
            }
            _ => {}
        });
    }
}

fn apply(item: Item, time: u64, pairer: &mut Pairer, stats: &mut Stats, stacks: &mut StackCounter) {
    match item {
        Item::Sample { target, role, pid, tid, sp, stack } => {
            match role {
                Role::Entry => pairer.entry(stats, tid, target, time, sp),
                Role::Return => pairer.ret(stats, tid, target, time, sp),
                Role::Hit => stats.funcs[target as usize].enter(),
            }
            if let Some(chain) = stack {
                stacks.add(target, pid, &chain);
            }
        }
        Item::Exit { tid } => pairer.thread_exit(stats, tid),
    }
}

/// Entries only, or counted without pairing.
fn apply_count_only(item: Item, stats: &mut Stats, stacks: &mut StackCounter) {
    if let Item::Sample { target, pid, stack, .. } = item {
        stats.funcs[target as usize].enter();
        if let Some(chain) = stack {
            stacks.add(target, pid, &chain);
        }
    }
}

/// Release what the merge holds (all of it with `drain`) into pairing and statistics.
fn release(
    merge: &mut OrderedMerge<Item>,
    stats: &mut Stats,
    pairer: &mut Pairer,
    stacks: &mut StackCounter,
    timed: bool,
    drain: bool,
) {
    let mut f = |time: u64, item: Item| {
        if timed {
            apply(item, time, pairer, stats, stacks)
        } else {
            apply_count_only(item, stats, stacks)
        }
    };
    if drain {
        merge.drain(&mut f);
    } else {
        merge.finish_round(&mut f);
    }
}

/// The wall clock as `HH:MM:SS` (UTC).
fn clock() -> String {
    let s = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0) % 86_400;
    format!("{:02}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60)
}

/// Create the probes, run until the end of the duration, the target's exit or a signal, and print reports.
pub fn run(opts: &ProbeOptions, tracefs: &Tracefs, targets: &[Target], out: &mut dyn Write) -> Result<RunSummary, ProbeError> {
    let term = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP] {
        signal_hook::flag::register(sig, Arc::clone(&term)).map_err(ProbeError::Output)?;
    }
    // Fork the command before anything else starts (the child waits for us before exec).
    let mut workload = match &opts.target {
        TaskTarget::Command(argv) => Some(Workload::prepare(argv)?),
        _ => None,
    };
    let tasks: Vec<i32> = match &opts.target {
        TaskTarget::SystemWide => vec![-1],
        TaskTarget::Pid(p) => crate::process::threads(*p).map_err(|_| PerfError::NoSuchProcess { pid: *p })?,
        TaskTarget::Command(_) => vec![workload.as_ref().map_or(-1, Workload::pid)],
    };
    let cpus = crate::perf::online_cpus()?.len() as u64;
    raise_nofile(targets.len() as u64 * 2 * cpus * tasks.len() as u64);

    let removed = group::remove_stale_groups(tracefs)?;
    if !removed.is_empty() {
        eprintln!("rprof: removed probe groups left by rprof processes that are gone: {}", removed.join(", "));
    }
    let group_name = tracefs::group_name(std::process::id());
    let defs = group::probe_defs(&group_name, targets, opts.count_only);
    let setup = Instant::now();
    // Declared before the events: dropped after them (the kernel refuses to delete probes that are open).
    let _group = ProbeGroup::create(tracefs, &group_name, &defs)?;
    let (mut events, usable) = open_events(opts, tracefs, &group_name, targets, &tasks)?;
    let probed = usable.iter().filter(|u| **u).count();
    if probed == 0 {
        return Err(ProbeError::NoMatch {
            what: "probeable functions",
            pattern: opts.patterns.join(" "),
            place: "the kernel's view (every probe was refused)".into(),
        });
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
        "rprof: probing {probed} targets ({} probes, {} perf events) set up in {:.2}s; Ctrl-C to end",
        defs.len(),
        events.infos.len(),
        setup.elapsed().as_secs_f64()
    );

    let names: Vec<String> = targets.iter().map(|t| t.name.clone()).collect();
    let timed = !opts.count_only && targets.iter().any(Target::can_time);
    let mut stats = Stats::new(targets.len());
    let mut pairer = Pairer::new();
    let mut stacks = StackCounter::new();
    let mut merge: OrderedMerge<Item> = OrderedMerge::new();
    let start = Instant::now();
    let deadline = opts.duration.map(|d| start + d);
    let mut next_report = opts.interval.map(|i| start + i);
    let report = |out: &mut dyn Write, stats: &Stats, open: usize| -> Result<(), ProbeError> {
        let r = Report {
            names: &names,
            stats,
            timed,
            timestamp: opts.timestamps.then(clock),
            open_calls: open,
            show_zero: false,
        };
        output::write(out, &r, opts.format)?;
        if stats.lost > 0 && matches!(opts.format, super::Format::Csv | super::Format::Json) {
            eprintln!("rprof: warning: {} events were lost (the ring buffers overflowed)", stats.lost);
        }
        out.flush()?;
        Ok(())
    };
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
        ring::poll_rings(&events.rings, wait.as_millis().max(1) as u16)?;
        read_rings(&mut events, &mut merge, &mut stats);
        release(&mut merge, &mut stats, &mut pairer, &mut stacks, timed, false);
        if let (Some(at), Some(every)) = (next_report, opts.interval) {
            if Instant::now() >= at {
                let interval = stats.take();
                report(out, &interval, pairer.open_calls())?;
                next_report = Some(at + every);
            }
        }
    }
    for ev in events.all() {
        let _ = ev.disable();
    }
    read_rings(&mut events, &mut merge, &mut stats);
    release(&mut merge, &mut stats, &mut pairer, &mut stacks, timed, true);
    drop(events);
    report(out, &stats, pairer.open_calls())?;
    if opts.stacks {
        stacks.write(out, &names, opts.folded)?;
        out.flush()?;
    }
    let exit_code = workload.as_mut().and_then(|w| {
        w.try_wait();
        w.exit_code()
    });
    Ok(RunSummary { exit_code })
}
