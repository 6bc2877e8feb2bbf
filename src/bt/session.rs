//! Running a planned program: the probes through `probe`'s one session (its engines, filters, time-ordered
//! merge), every hit handed to the runtime as an [`Event`] of the blocks its attach point runs; BEGIN when the
//! probes are enabled, `interval` blocks at the end of each reading round that passed their time, END and the
//! maps at the end. A program without probes (BEGIN, END and intervals alone) runs without a session.
use super::attach::ProbeType;
use super::plan::{BtPlan, PlannedProbe};
use super::print::Printer;
use super::run::{Event, Flow, Io, Runtime, Symbols};
use super::value::{Frame, IntType, Value};
use super::values::ValueRef;
use crate::probe::{self, HitRole, ObservedFrame, ObservedHit, Observer, TargetKind, Targets};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What a session needs besides the program: how it runs and what it probes.
pub struct SessionOptions {
    /// The tasks: system-wide, or `-p PID` (uprobes and USDT alone).
    pub target: probe::TaskTarget,
    /// `-c CMD`: launched beside the probes; the program ends when it exits.
    pub launch: Option<probe::Command>,
    /// `-q`: no "Attaching N probes..." line.
    pub quiet: bool,
    /// Where separate debug files are looked for (stacks, `usym`).
    pub debug: crate::symbols::DebugSources,
    /// Set by the caller's signal handler (Ctrl-C) when the program runs without probes.
    pub interrupted: Arc<AtomicBool>,
    /// `-f json`.
    pub format: super::print::OutputFormat,
    /// `BPFTRACE_STRLEN`: fetched strings are cut to this many bytes less one.
    pub strlen: usize,
    /// `target` is the process every probe's `pid == N` names: its end does not end the program.
    pub outlive_target: bool,
}

/// Errors of a session.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Probe(#[from] probe::ProbeError),
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
}

/// How a session ended.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The exit code of `-c`'s command, where it ran.
    pub exit_code: Option<i32>,
    /// Events the rings lost (bpftrace's "Lost N events").
    pub lost: u64,
    /// Probe hits handed to the program (before its predicates).
    pub received: u64,
}

/// CLOCK_MONOTONIC now, in ns (bpftrace's `nsecs`).
pub fn monotonic_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

/// Run `runtime` with the probes of `plan`, writing to `io`; `notice` gets what the probe session says.
pub fn run(
    runtime: &mut Runtime<'_>,
    plan: &BtPlan,
    opts: &SessionOptions,
    io: &mut Io<'_>,
    notice: &mut dyn FnMut(probe::Notice),
) -> Result<Outcome, SessionError> {
    let printer = Printer::new(opts.format);
    if !opts.quiet {
        io.out
            .write_all(printer.attached_probes(plan.attached as u64).as_bytes())?;
        io.out.flush()?;
    }
    let intervals = Intervals::new(runtime.interval_blocks());
    if plan.probes.is_empty() {
        return run_without_probes(runtime, intervals, opts, io);
    }
    let popts = probe::ProbeOptions {
        patterns: plan.patterns(),
        target: opts.target.clone(),
        launch: opts.launch.clone(),
        count_only: !plan.returns,
        each_hit: true,
        stacks: plan.stacks,
        folded: true,
        debug: opts.debug.clone(),
        outlive_target: opts.outlive_target,
        names_addresses: plan.usym,
        ..probe::ProbeOptions::default()
    };
    let mut glue = Glue {
        runtime,
        plan,
        io,
        targets: Vec::new(),
        intervals,
        flow: Flow::Continue,
        error: None,
        strlen: opts.strlen,
        argv: std::collections::HashMap::new(),
        round_ends: std::collections::VecDeque::new(),
        received: 0,
    };
    let summary = probe::run_observed(&popts, &mut std::io::sink(), notice, &mut glue)?;
    let Glue {
        runtime,
        io,
        error,
        received,
        ..
    } = glue;
    if let Some(e) = error {
        return Err(e.into());
    }
    runtime.end(monotonic_ns(), io);
    io.out.flush()?;
    Ok(Outcome {
        exit_code: summary.exit_code,
        lost: 0,
        received,
    })
}

/// BEGIN, intervals until `exit()` or Ctrl-C, END.
fn run_without_probes(
    runtime: &mut Runtime<'_>,
    mut intervals: Intervals,
    opts: &SessionOptions,
    io: &mut Io<'_>,
) -> Result<Outcome, SessionError> {
    let mut flow = runtime.begin(monotonic_ns(), io);
    io.out.flush()?;
    while flow == Flow::Continue && !opts.interrupted.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(10));
        flow = intervals.run_due(runtime, io, monotonic_ns());
        io.out.flush()?;
    }
    runtime.end(monotonic_ns(), io);
    io.out.flush()?;
    Ok(Outcome::default())
}

/// How long an event can wait in probe's time-ordered merge before it is handed over: two rounds of lag and
/// the round it was read in, each at most the event loop's 100 ms poll, and a margin.
const MERGE_WAIT_NS: u64 = 400_000_000;

/// Reading rounds an event can wait in the merge (three), and the round it was read in.
const MERGE_ROUNDS: usize = 4;

/// The `interval` blocks and when each runs next.
struct Intervals {
    /// (block, period ns, next time ns).
    blocks: Vec<(usize, u64, u64)>,
}

impl Intervals {
    fn new(blocks: Vec<(usize, u64)>) -> Intervals {
        let now = monotonic_ns();
        Intervals {
            blocks: blocks
                .into_iter()
                .map(|(b, period)| (b, period.max(1), now + period.max(1)))
                .collect(),
        }
    }

    /// Run the blocks whose time came by `upto` (CLOCK_MONOTONIC ns; each once per period passed), in time
    /// order.
    fn run_due(&mut self, runtime: &mut Runtime<'_>, io: &mut Io<'_>, upto: u64) -> Flow {
        loop {
            let Some(due) = self
                .blocks
                .iter_mut()
                .filter(|b| b.2 <= upto)
                .min_by_key(|b| b.2)
            else {
                return Flow::Continue;
            };
            let (block, at) = (due.0, due.2);
            due.2 += due.1;
            if runtime.run_block(block, at, io) == Flow::Exit {
                return Flow::Exit;
            }
        }
    }
}

/// What a target of the probe session is to the program: its planned probe, its name, its values.
struct TargetInfo {
    /// The planned probe (None: a target no attach point claims).
    probe: Option<usize>,
    /// `probe` as bpftrace names it (`tracepoint:sched:sched_switch`), and at a function's return
    /// (`uretprobe:/bin/bash:readline`).
    name: String,
    return_name: String,
    /// `func` (uprobes).
    func: String,
    /// Each planned value's place among the target's fetches.
    values: Vec<(ValueRef, usize, Option<IntType>)>,
    /// The plan's argv probe (libc's `execve`): the places of its `arg1[N]` strings.
    argv: Option<Vec<usize>>,
    /// A `sys_enter_execve` tracepoint: its `args->argv` is the strings the argv probe read.
    execve: bool,
}

/// The observer that turns hits into the runtime's events.
struct Glue<'r, 'p, 'i, 'o> {
    runtime: &'r mut Runtime<'p>,
    plan: &'r BtPlan,
    io: &'i mut Io<'o>,
    targets: Vec<TargetInfo>,
    intervals: Intervals,
    flow: Flow,
    error: Option<std::io::Error>,
    strlen: usize,
    /// execve's arguments by thread, read at libc's `execve`, until the thread's `sys_enter_execve`.
    argv: std::collections::HashMap<u32, Vec<Value>>,
    /// When the last reading rounds ended (CLOCK_MONOTONIC ns), the latest last: an event that happened before
    /// the oldest was read and handed over by now.
    round_ends: std::collections::VecDeque<u64>,
    /// Hits handed over by the session.
    received: u64,
}

impl Observer for Glue<'_, '_, '_, '_> {
    fn targets(&mut self, targets: &Targets) {
        // Software targets are made in the order of their patterns: the nth is the nth planned one.
        let mut software = self
            .plan
            .probes
            .iter()
            .enumerate()
            .filter(|(_, p)| matches!(p.kind, ProbeType::Profile | ProbeType::Software))
            .map(|(i, _)| i);
        self.targets = targets
            .iter()
            .map(|(_, t)| match &t.kind {
                TargetKind::Software { .. } => {
                    let probe = software.next();
                    let name = probe.map_or(t.name.clone(), |i| {
                        super::plan::software_name(&self.plan.probes[i].spec)
                    });
                    TargetInfo {
                        probe,
                        return_name: name.clone(),
                        name,
                        func: String::new(),
                        values: fetched_values(self.plan, probe, t),
                        argv: None,
                        execve: false,
                    }
                }
                _ => target_info(self.plan, t),
            })
            .collect();
    }

    fn started(&mut self, command: Option<u32>) {
        if let Some(pid) = command {
            self.runtime.set_cpid(pid);
        }
        self.flow = self.runtime.begin(monotonic_ns(), self.io);
        self.flush();
    }

    fn hit(&mut self, hit: &ObservedHit, names: &mut dyn probe::AddrNames) -> bool {
        if self.flow == Flow::Exit {
            return false;
        }
        self.received += 1;
        let Some(info) = self.targets.get(hit.target.index()) else {
            return true;
        };
        let Some(planned) = info.probe.map(|i| &self.plan.probes[i]) else {
            return true;
        };
        let blocks = match hit.role {
            HitRole::Return => &planned.return_blocks,
            HitRole::Entry | HitRole::Hit => &planned.blocks,
        };
        // An interval's time came before this event's: it runs first, as in bpftrace's one time order.
        if self.intervals.run_due(self.runtime, self.io, hit.time) == Flow::Exit {
            self.flow = Flow::Exit;
            return false;
        }
        if let Some(places) = &info.argv {
            self.argv.insert(hit.tid, argv_strings(hit, places));
            return true;
        }
        if blocks.is_empty() {
            return true;
        }
        let mut values: Vec<(ValueRef, Value)> = info
            .values
            .iter()
            .filter_map(|(r, i, int)| {
                let v = hit.values.get(*i)?.as_ref()?;
                Some((r.clone(), bt_value(v, *int, self.strlen)))
            })
            .collect();
        if info.execve {
            let argv = self.argv.remove(&hit.tid);
            for (r, v) in values.iter_mut() {
                match (r, &argv) {
                    (ValueRef::Field(f), Some(strings)) if f == "argv" => {
                        *v = Value::Tuple(strings.clone())
                    }
                    _ => {}
                }
            }
        }
        let (kstack, ustack) = split_stack(hit.stack.as_deref());
        let comm = hit.comm.as_deref().unwrap_or("");
        let (uid, gid) = match self.plan.uid {
            true => crate::process::ids(hit.tid as i32).unwrap_or((0, 0)),
            false => (0, 0),
        };
        let name = match hit.role {
            HitRole::Return => &info.return_name,
            _ => &info.name,
        };
        let ev = Event {
            blocks,
            probe: name,
            func: &info.func,
            time_ns: hit.time,
            pid: hit.pid.unwrap_or(0),
            tid: hit.tid,
            cpu: hit.cpu.unwrap_or(0),
            comm: comm.as_bytes(),
            uid,
            gid,
            values: &values,
            kstack: kstack.as_deref(),
            ustack: ustack.as_deref(),
            symbols: &Names(std::cell::RefCell::new(names)),
        };
        self.flow = self.runtime.event(&ev, self.io);
        self.flow == Flow::Continue
    }

    fn round(&mut self) -> bool {
        // Events wait in probe's merge for up to three reading rounds (100 ms each at most): an interval runs
        // once every event before its time was handed over, so that it sees what bpftrace's would.
        // Under load (stacks to name, a busy CPU) a round takes longer than its 100 ms poll: the events are then
        // settled as of the end of the round three rounds back, if that is earlier.
        let now = monotonic_ns();
        self.round_ends.push_back(now);
        if self.round_ends.len() > MERGE_ROUNDS {
            self.round_ends.pop_front();
        }
        let rounds_back = match self.round_ends.len() {
            MERGE_ROUNDS => self.round_ends[0],
            _ => 0,
        };
        let settled = now.saturating_sub(MERGE_WAIT_NS).min(rounds_back);
        if self.flow == Flow::Continue {
            self.flow = self.intervals.run_due(self.runtime, self.io, settled);
        }
        self.flush();
        self.flow == Flow::Continue
    }
}

impl Glue<'_, '_, '_, '_> {
    fn flush(&mut self) {
        if let Err(e) = self.io.out.flush() {
            self.error.get_or_insert(e);
            self.flow = Flow::Exit;
        }
    }
}

/// The strings of execve's argv that the argv probe read (`arg1[0]`, `arg1[1]`...), up to the first it could
/// not read (the array's NULL end).
fn argv_strings(hit: &ObservedHit, places: &[usize]) -> Vec<Value> {
    let mut out = Vec::new();
    for &i in places {
        let text = match hit.values.get(i).and_then(Option::as_ref) {
            Some(probe::Value::Str(s)) => s.as_bytes().to_vec(),
            Some(probe::Value::Bytes(b)) => b.to_vec(),
            _ => break,
        };
        out.push(Value::Str(text));
    }
    out
}

/// Symbols of other addresses (`usym()`, `ksym()`, frames left unnamed): named when the event is handed over,
/// by the resolver and mappings that name its stacks (a process that exited since is still known then).
struct Names<'n>(std::cell::RefCell<&'n mut dyn probe::AddrNames>);

impl Symbols for Names<'_> {
    fn user(&self, pid: u32, addr: u64) -> Option<(String, u64)> {
        let f = self.0.borrow_mut().user(pid, addr)?;
        Some((f.name?, f.offset))
    }
    fn kernel(&self, addr: u64) -> Option<(String, u64)> {
        let f = self.0.borrow_mut().kernel(addr)?;
        Some((f.name?, f.offset))
    }
}

/// Which planned probe a target of the session is, by what it probes.
fn target_info(plan: &BtPlan, t: &probe::Target) -> TargetInfo {
    let glob = |g: &str, s: &str| {
        globset::Glob::new(g)
            .map(|g| g.compile_matcher().is_match(s))
            .unwrap_or(g == s)
    };
    let matches = |p: &PlannedProbe| match &t.kind {
        TargetKind::Tracepoint { category, event } => {
            p.kind == super::attach::ProbeType::Tracepoint
                && glob(&p.spec.target, category)
                && glob(&p.spec.func, event)
        }
        TargetKind::User { .. } => {
            p.kind == super::attach::ProbeType::Uprobe
                && (p.spec.address != 0
                    || std::iter::once(&t.name)
                        .chain(&t.aliases)
                        .any(|n| glob(&p.spec.func, n)))
        }
        TargetKind::Kernel { symbol } => {
            p.kind == super::attach::ProbeType::Kprobe && glob(&p.spec.func, symbol)
        }
        TargetKind::Usdt { .. } => {
            let (provider, name) = usdt_names(&t.name);
            p.kind == super::attach::ProbeType::Usdt
                && (p.spec.ns.is_empty() || glob(&p.spec.ns, provider))
                && glob(&p.spec.func, name)
        }
        _ => false,
    };
    let probe = plan.probes.iter().position(matches);
    let argv = match probe.is_some() && probe == plan.argv {
        true => Some(
            (0..super::plan::ARGV_STRINGS)
                .filter_map(|n| {
                    t.fetches
                        .iter()
                        .position(|f| f.label == format!("arg1[{n}]"))
                })
                .collect(),
        ),
        false => None,
    };
    let execve = matches!(&t.kind, TargetKind::Tracepoint { category, event }
        if category == "syscalls" && event == "sys_enter_execve");
    // The binary as the attach point names it (`/bin/bash`, not the file it links to), as bpftrace prints it.
    let written = |path: &std::path::Path| match probe.map(|i| &plan.probes[i].spec.target) {
        Some(t) if t.starts_with('/') => t.clone(),
        _ => path.display().to_string(),
    };
    let (name, return_name) = match &t.kind {
        TargetKind::Tracepoint { category, event } => {
            let n = format!("tracepoint:{category}:{event}");
            (n.clone(), n)
        }
        TargetKind::User { path, .. } => (
            format!("uprobe:{}:{}", written(path), t.name),
            format!("uretprobe:{}:{}", written(path), t.name),
        ),
        TargetKind::Usdt { path, .. } => {
            let (provider, event) = usdt_names(&t.name);
            let n = format!("usdt:{}:{provider}:{event}", written(path));
            (n.clone(), n)
        }
        TargetKind::Kernel { symbol } => {
            (format!("kprobe:{symbol}"), format!("kretprobe:{symbol}"))
        }
        _ => (t.name.clone(), t.name.clone()),
    };
    let values = fetched_values(plan, probe, t);
    TargetInfo {
        probe,
        name,
        return_name,
        func: t.name.clone(),
        values,
        argv,
        execve,
    }
}

/// The values planned probe `probe` reads, each with its fetch's index in target `t` and its type.
fn fetched_values(
    plan: &BtPlan,
    probe: Option<usize>,
    t: &probe::Target,
) -> Vec<(ValueRef, usize, Option<IntType>)> {
    probe
        .map(|i| &plan.probes[i].values)
        .into_iter()
        .flatten()
        .filter_map(|v| {
            let at = t.fetches.iter().position(|f| f.label == v.label)?;
            Some((v.r.clone(), at, v.int))
        })
        .collect()
}

/// A USDT target's provider and probe name (probe names it `usdt:PROVIDER:NAME`).
fn usdt_names(target: &str) -> (&str, &str) {
    let rest = target.strip_prefix("usdt:").unwrap_or(target);
    rest.split_once(':').unwrap_or(("", rest))
}

/// A fetched value as bpftrace types it: an integer of the planned type, or text.
fn bt_value(v: &probe::Value, int: Option<IntType>, strlen: usize) -> Value {
    use probe::Value as P;
    let number = match v {
        P::Int(i) | P::Signal(i) | P::Errno(i) | P::Named { raw: i, .. } => Some(*i),
        P::UInt(u) | P::Hex(u) | P::Addr(u) => Some(*u as i64),
        P::Dev(d) => Some(i64::from(*d)),
        _ => None,
    };
    match (number, int) {
        (Some(n), Some(ty)) => Value::typed(n, ty),
        (Some(n), None) => Value::int(n),
        (None, _) => match v {
            P::Str(s) => Value::str_bytes(s.as_bytes(), strlen),
            P::Bytes(b) => Value::str_bytes(b, strlen),
            other => Value::str(&other.to_string()),
        },
    }
}

/// A hit's stack (kernel frames, then user frames) as bpftrace's two stacks.
fn split_stack(stack: Option<&[ObservedFrame]>) -> (Option<Vec<Frame>>, Option<Vec<Frame>>) {
    let Some(frames) = stack else {
        return (None, None);
    };
    let frame = |f: &ObservedFrame| match &f.name {
        Some(name) => Frame::named(f.addr, name, f.offset, Some(&f.module)),
        None => Frame {
            addr: f.addr,
            sym: None,
            module: Some(f.module.clone()),
        },
    };
    let kernel = frames.iter().filter(|f| f.kernel).map(frame).collect();
    let user = frames.iter().filter(|f| !f.kernel).map(frame).collect();
    (Some(kernel), Some(user))
}
