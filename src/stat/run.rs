//! One `rprof stat` session: open the counters, run the command (or wait for the processes, the companion
//! command, -d or Ctrl-C), print every `-I` interval, and the summary with its footer; `-r` runs it again.
use super::counters::{self, Counters, Reading, Scope, Unit};
use super::print::{self, Label, Layout, Row, Value};
use super::{Aggr, StatConfig, StatError, StatTarget};
use crate::events::Plan;
use crate::perf::{self, StopSignals, Workload};
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Readings per (event index, aggregate); None for an event none of whose counters opened.
type Totals = BTreeMap<(usize, Unit), Option<Reading>>;

/// The counts of one run, per (event, aggregate), with its elapsed seconds and the command's user and sys.
struct Counted {
    totals: Totals,
    elapsed: f64,
    user_sys: Option<(f64, f64)>,
    exit: Option<i32>,
    /// The comm of each counted thread.
    comms: BTreeMap<i32, String>,
}

/// Run `cfg` (`-r` times), printing to `out`.
pub(super) fn run(
    cfg: &StatConfig,
    plan: &Plan,
    out: &mut dyn Write,
) -> Result<Option<i32>, StatError> {
    let signals = StopSignals::register()?;
    let layout = Layout {
        csv: cfg.csv.clone(),
    };
    let mut runs = Vec::new();
    for _ in 0..cfg.repeat {
        let counted = run_once(cfg, plan, &layout, &signals, out)?;
        let stop = signals.raised();
        runs.push(counted);
        if stop {
            break;
        }
    }
    let exit = runs.last().and_then(|r| r.exit);
    if cfg.interval.is_none() {
        summary(cfg, plan, &layout, &runs, out)?;
    }
    Ok(exit)
}

/// One run: the counters opened, the target run or waited for, the intervals printed.
fn run_once(
    cfg: &StatConfig,
    plan: &Plan,
    layout: &Layout,
    signals: &StopSignals,
    out: &mut dyn Write,
) -> Result<Counted, StatError> {
    let mut workload = match &cfg.target {
        StatTarget::Command(cmd) => Some(Workload::prepare(cmd, false)?),
        _ => None,
    };
    let (tasks, cpus) = units(cfg, workload.as_ref())?;
    let scope = Scope {
        tasks: &tasks,
        cpus: &cpus,
        inherit: cfg.aggr != Aggr::PerThread,
        on_exec: workload.is_some(),
        user_only: cfg.user_only,
    };
    let counters = Counters::open(plan, &scope)?;
    let comms = thread_names(&counters);
    let mut companion = match &cfg.companion {
        Some(cmd) => Some(Workload::prepare(cmd, false)?),
        None => None,
    };
    if workload.is_none() {
        counters.enable()?;
    }
    let start = Instant::now();
    let waited = workload.as_mut().or(companion.as_mut());
    if let Some(w) = waited {
        w.start()?;
    }
    let exited = wait_thread(workload.as_ref().or(companion.as_ref()).map(Workload::pid));
    let mut last = (start, counters.read());
    let mut interval = Intervals {
        layout,
        cfg,
        plan,
        comms: &comms,
        printed: 0,
    };
    let mut tick = 1u32;
    loop {
        let now = Instant::now();
        let next_tick = cfg.interval.map(|i| start + i * tick);
        let deadline = cfg.duration.map(|d| start + d);
        let until = [next_tick, deadline, Some(now + Duration::from_millis(100))]
            .into_iter()
            .flatten()
            .min()
            .expect("one bound");
        let ended = match exited.recv_timeout(until.saturating_duration_since(now)) {
            Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => true,
            Err(mpsc::RecvTimeoutError::Timeout) => false,
        };
        let now = Instant::now();
        let done =
            ended || signals.raised() || deadline.is_some_and(|d| now >= d) || pids_gone(cfg);
        if next_tick.is_some_and(|t| now >= t) || (done && cfg.interval.is_some()) {
            let read = counters.read();
            interval.print(&counters, &read, &last, start, now, out)?;
            last = (now, read);
            tick += 1;
        }
        if done {
            break;
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let readings = counters.read();
    let units: Vec<(usize, Unit)> = counters
        .counters
        .iter()
        .map(|c| (c.event, c.unit))
        .collect();
    drop(counters);
    let exit = finish(workload.as_mut().or(companion.as_mut()), signals);
    let user_sys = workload.as_ref().map(|_| children_times());
    Ok(Counted {
        totals: aggregate(cfg.aggr, &readings, &units),
        elapsed,
        comms,
        user_sys,
        exit,
    })
}

/// The tasks (or the CPUs) the counters open on.
fn units(cfg: &StatConfig, workload: Option<&Workload>) -> Result<(Vec<i32>, Vec<u32>), StatError> {
    Ok(match &cfg.target {
        StatTarget::Command(_) => (
            vec![workload.expect("a command's workload").pid()],
            Vec::new(),
        ),
        StatTarget::Pids(pids) if cfg.aggr == Aggr::PerThread => {
            let mut tids = Vec::new();
            for &p in pids {
                tids.extend(crate::process::threads(p)?);
            }
            (tids, Vec::new())
        }
        StatTarget::Pids(tasks) | StatTarget::Tids(tasks) => (tasks.clone(), Vec::new()),
        StatTarget::Cpus { cpus, .. } => (Vec::new(), cpus.clone()),
    })
}

/// The comm of each counted thread (`--per-thread` labels).
fn thread_names(counters: &Counters) -> BTreeMap<i32, String> {
    counters
        .counters
        .iter()
        .filter_map(|c| match c.unit {
            Unit::Task(t) => Some((t, crate::process::comm(t, t).unwrap_or_default())),
            Unit::Cpu(_) => None,
        })
        .collect()
}

/// A thread that says when process `pid` has exited (without reaping it); none: never.
fn wait_thread(pid: Option<i32>) -> mpsc::Receiver<()> {
    let (tx, rx) = mpsc::channel();
    match pid {
        Some(pid) => {
            std::thread::spawn(move || {
                use nix::sys::wait::{waitid, Id, WaitPidFlag};
                let pid = nix::unistd::Pid::from_raw(pid);
                let _ = waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT);
                let _ = tx.send(());
            });
        }
        None => std::mem::forget(tx),
    }
    rx
}

/// Whether every process of a `-p` target without a companion is gone.
fn pids_gone(cfg: &StatConfig) -> bool {
    match (&cfg.target, &cfg.companion) {
        (StatTarget::Pids(pids) | StatTarget::Tids(pids), None) => pids
            .iter()
            .all(|&p| !std::path::Path::new(&format!("/proc/{p}")).exists()),
        _ => false,
    }
}

/// End the command (or companion) and return its exit code.
fn finish(workload: Option<&mut Workload>, signals: &StopSignals) -> Option<i32> {
    workload.and_then(|w| w.end(signals.grace()))
}

/// The user and system seconds of the reaped children (the command).
fn children_times() -> (f64, f64) {
    use nix::sys::resource::{getrusage, UsageWho};
    match getrusage(UsageWho::RUSAGE_CHILDREN) {
        Ok(u) => {
            let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
            (secs(u.user_time()), secs(u.system_time()))
        }
        Err(_) => (0.0, 0.0),
    }
}

/// Readings summed per (event, aggregate); an event none of whose counters opened is None.
fn aggregate(aggr: Aggr, readings: &[Option<Reading>], units: &[(usize, Unit)]) -> Totals {
    let mut totals: Totals = BTreeMap::new();
    for (r, &(event, unit)) in readings.iter().zip(units) {
        let slot = totals
            .entry((event, counters::key_of(aggr, unit)))
            .or_insert(None);
        if let Some(r) = r {
            *slot = Some(slot.unwrap_or_default().add(*r));
        }
    }
    totals
}

/// The printer of `-I` intervals.
struct Intervals<'a> {
    layout: &'a Layout,
    cfg: &'a StatConfig,
    plan: &'a Plan,
    comms: &'a BTreeMap<i32, String>,
    printed: u32,
}

impl Intervals<'_> {
    /// Print the interval from `last` to `now`, with the header every 25 intervals (as perf).
    fn print(
        &mut self,
        counters: &Counters,
        read: &[Option<Reading>],
        last: &(Instant, Vec<Option<Reading>>),
        start: Instant,
        now: Instant,
        out: &mut dyn Write,
    ) -> Result<(), StatError> {
        if self.cfg.interval.is_none() {
            return Ok(());
        }
        let delta: Vec<Option<Reading>> = read
            .iter()
            .zip(&last.1)
            .map(|(r, l)| Some(r.as_ref()?.since(l.unwrap_or_default())))
            .collect();
        let units: Vec<(usize, Unit)> = counters
            .counters
            .iter()
            .map(|c| (c.event, c.unit))
            .collect();
        let totals = aggregate(self.cfg.aggr, &delta, &units);
        if self.printed.is_multiple_of(25) {
            if let Some(h) = self.layout.interval_header(self.cfg.aggr) {
                writeln!(out, "{h}")?;
            }
        }
        self.printed += 1;
        let prefix = self.layout.interval_prefix((now - start).as_secs_f64());
        let wall = (now - last.0).as_secs_f64();
        let rows = rows(self.cfg, self.plan, &[(totals, wall)], self.comms);
        for row in &rows {
            writeln!(out, "{}", self.layout.row(&prefix, row))?;
        }
        Ok(())
    }
}

/// The summary after the runs: the title, the rows (means over `-r` runs), the footer.
fn summary(
    cfg: &StatConfig,
    plan: &Plan,
    layout: &Layout,
    runs: &[Counted],
    out: &mut dyn Write,
) -> Result<(), StatError> {
    let comms = runs.last().map(|r| r.comms.clone()).unwrap_or_default();
    let per_run: Vec<(Totals, f64)> = runs.iter().map(|r| (r.totals.clone(), r.elapsed)).collect();
    let rows = rows(cfg, plan, &per_run, &comms);
    if layout.csv.is_none() {
        let runs_text = match runs.len() {
            1 => String::new(),
            n => format!(" ({n} runs)"),
        };
        writeln!(
            out,
            "\n Performance counter stats for {}{runs_text}:\n",
            title(cfg)
        )?;
    }
    for row in &rows {
        writeln!(out, "{}", layout.row("", row))?;
    }
    if layout.csv.is_none() {
        let elapsed: Vec<f64> = runs.iter().map(|r| r.elapsed).collect();
        let user_sys = runs.last().and_then(|r| r.user_sys);
        write!(out, "{}", print::footer(&elapsed, user_sys))?;
    }
    Ok(())
}

/// perf's words for what was counted: `'CMD ARGS'`, `process id 'PID'`, `'system wide'`, `'CPU(s) 0-1'`.
fn title(cfg: &StatConfig) -> String {
    match &cfg.target {
        StatTarget::Command(cmd) => format!("'{cmd}'"),
        StatTarget::Pids(pids) => {
            let list: Vec<String> = pids.iter().map(|p| p.to_string()).collect();
            format!("process id '{}'", list.join(","))
        }
        StatTarget::Tids(tids) => {
            let list: Vec<String> = tids.iter().map(|t| t.to_string()).collect();
            format!("thread id '{}'", list.join(","))
        }
        StatTarget::Cpus { list: Some(l), .. } => format!("'CPU(s) {l}'"),
        StatTarget::Cpus { list: None, .. } => "'system wide'".to_string(),
    }
}

/// The rows of the counts of one or more runs (each with its wall seconds): per event, then per aggregate
/// (per aggregate first for `--per-core`, as perf), with the metrics and, over several runs, the noise.
fn rows<'a>(
    cfg: &StatConfig,
    plan: &'a Plan,
    runs: &[(Totals, f64)],
    comms: &BTreeMap<i32, String>,
) -> Vec<Row<'a>> {
    let first = &runs[0].0;
    let mut keys: Vec<(usize, Unit)> = first.keys().copied().collect();
    if cfg.aggr == Aggr::PerCore {
        keys.sort_by_key(|&(e, u)| (u, e));
    }
    let clock = plan.events.iter().position(|e| e.is_clock());
    keys.iter()
        .map(|&(event, unit)| {
            let e = &plan.events[event];
            let values: Vec<Option<(f64, Reading, f64)>> = runs
                .iter()
                .map(|(t, wall)| {
                    let r = t.get(&(event, unit)).copied().flatten()?;
                    let clock_ns = clock
                        .and_then(|c| t.get(&(c, unit)).copied().flatten())
                        .map(scaled);
                    Some((scaled(r), r, metric_base(e.is_clock(), clock_ns, *wall)))
                })
                .collect();
            row_of(cfg, e, unit, &values, comms)
        })
        .collect()
}

/// A count scaled for the time its counter did not run (multiplexing), as perf scales.
fn scaled(r: Reading) -> f64 {
    match r.running < r.enabled && r.running > 0 {
        true => r.value as f64 * r.enabled as f64 / r.running as f64,
        false => r.value as f64,
    }
}

/// What a row's metric divides by: the wall nanoseconds for a clock (CPUs utilized), the clock's seconds
/// for a rate (0: no clock counted, no rate).
fn metric_base(is_clock: bool, clock_ns: Option<f64>, wall: f64) -> f64 {
    match is_clock {
        true => wall * 1e9,
        false => clock_ns.unwrap_or(0.0) / 1e9,
    }
}

/// One row from its values over the runs.
fn row_of<'a>(
    cfg: &StatConfig,
    e: &'a crate::events::PlannedEvent,
    unit: Unit,
    values: &[Option<(f64, Reading, f64)>],
    comms: &BTreeMap<i32, String>,
) -> Row<'a> {
    let label = label(cfg.aggr, unit, comms);
    let unit_text = if e.is_clock() { "msec" } else { "" };
    let counted: Vec<(f64, Reading, f64)> = values.iter().flatten().copied().collect();
    let Some(&(_, last, base)) = counted.last() else {
        return Row {
            label,
            value: Value::NotSupported,
            unit: unit_text,
            name: &e.name,
            metric: None,
            // perf prints a noise of 0 for a row without counts (its CSV has the column over -r runs).
            noise: (cfg.repeat > 1).then_some(0.0),
            running: 0,
            share: 100.0,
        };
    };
    let xs: Vec<f64> = counted.iter().map(|c| c.0).collect();
    let (mean, sd) = print::mean_and_error(&xs);
    let value = match last.enabled == 0 || last.running == 0 {
        true => Value::NotCounted,
        false if e.is_clock() => Value::Num(mean / 1e6),
        false => Value::Num(mean),
    };
    let metric = match (e.is_clock(), base > 0.0) {
        (true, true) => Some((mean / base, "CPUs utilized".to_string())),
        (false, true) => Some(print::rate(mean / base)),
        (_, false) => None,
    };
    Row {
        label,
        value,
        unit: unit_text,
        name: &e.name,
        metric,
        noise: (cfg.repeat > 1).then(|| match mean > 0.0 {
            true => 100.0 * sd / mean,
            false => 0.0,
        }),
        running: last.running,
        share: match last.enabled {
            0 => 100.0,
            en => 100.0 * last.running as f64 / en as f64,
        },
    }
}

/// The label of an aggregate.
fn label(aggr: Aggr, unit: Unit, comms: &BTreeMap<i32, String>) -> Label {
    match (aggr, unit) {
        (Aggr::PerCpu, Unit::Cpu(c)) => Label::Cpu(c),
        (Aggr::PerCore, Unit::Cpu(k)) => {
            let (socket, die, core) = (k >> 20, (k >> 10) & 0x3ff, k & 0x3ff);
            let cpus = perf::online_cpus()
                .unwrap_or_default()
                .into_iter()
                .filter(|&c| counters::core_of(c) == (socket, die, core))
                .count();
            Label::Core {
                socket,
                die,
                core,
                cpus,
            }
        }
        (Aggr::PerThread, Unit::Task(t)) => Label::Thread {
            comm: comms
                .get(&t)
                .cloned()
                .unwrap_or_else(|| crate::process::comm(t, t).unwrap_or_default()),
            tid: t,
        },
        _ => Label::Total,
    }
}
