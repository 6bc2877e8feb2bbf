//! `rprof sched latency` and `rprof sched timehist`: perf sched's analyses of a recording of the sched
//! tracepoints (`rprof sched record` or `perf sched record`), computed as perf sched computes them
//! (tools/perf/builtin-sched.c): per task, the delay from its wakeup (or preemption) to running again, and per
//! context switch, the time the task that leaves waited, was delayed and ran.
use crate::recording::{decode_tracing_data, Event, Reader, Sample};
use crate::tracefs::{parse_format, FormatField};
use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use super::ReportError;

/// The fields of each tracepoint of a recording, by tracepoint id.
struct Formats {
    by_attr: Vec<Option<(String, Vec<FormatField>)>>,
}

impl Formats {
    fn of(reader: &Reader) -> Formats {
        let decoded = decode_tracing_data(reader.tracing_data()).unwrap_or_default();
        let by_attr = reader
            .tracepoint_ids()
            .iter()
            .zip(reader.event_names())
            .map(|(id, name)| {
                let id = (*id)?;
                let event = decoded.iter().find(|e| e.id == Some(id))?;
                Some((name.clone(), parse_format(&event.format)))
            })
            .collect();
        Formats { by_attr }
    }

    /// The event name of a sample and a reader of its fields.
    fn fields<'a>(&'a self, s: &'a Sample) -> Option<(&'a str, Fields<'a>)> {
        let (name, format) = self.by_attr.get(usize::from(s.attr))?.as_ref()?;
        Some((
            name.as_str(),
            Fields {
                format,
                raw: &s.raw,
            },
        ))
    }
}

/// A sample's tracepoint fields.
struct Fields<'a> {
    format: &'a [FormatField],
    raw: &'a [u8],
}

impl Fields<'_> {
    fn int(&self, name: &str) -> Option<u64> {
        let f = self.format.iter().find(|f| f.name == name)?;
        let bytes = self.raw.get(f.offset..f.offset + f.size.min(8))?;
        let mut v = [0u8; 8];
        v[..bytes.len()].copy_from_slice(bytes);
        Some(u64::from_le_bytes(v))
    }
}

/// One sched event of the recording, its fields read.
enum SchedEvent {
    Switch {
        prev_pid: u32,
        /// The task that left is still runnable (preempted): perf's 'R'.
        prev_runnable: bool,
        next_pid: u32,
    },
    Runtime {
        pid: u32,
        runtime: u64,
    },
    Wakeup {
        pid: u32,
        /// sched_waking (the wakeup begins), which perf 6.1's sched latency does not read (it reads
        /// sched_wakeup and sched_wakeup_new; perf sched record records sched_waking where it exists), and
        /// timehist does.
        waking: bool,
    },
}

fn sched_event(formats: &Formats, s: &Sample) -> Option<SchedEvent> {
    let (name, f) = formats.fields(s)?;
    Some(match name {
        "sched:sched_switch" => SchedEvent::Switch {
            prev_pid: f.int("prev_pid")? as u32,
            prev_runnable: f.int("prev_state")? == 0,
            next_pid: f.int("next_pid")? as u32,
        },
        "sched:sched_stat_runtime" => SchedEvent::Runtime {
            pid: f.int("pid")? as u32,
            runtime: f.int("runtime")?,
        },
        "sched:sched_wakeup" | "sched:sched_wakeup_new" => SchedEvent::Wakeup {
            pid: f.int("pid")? as u32,
            waking: false,
        },
        "sched:sched_waking" => SchedEvent::Wakeup {
            pid: f.int("pid")? as u32,
            waking: true,
        },
        _ => return None,
    })
}

/// Read a recording's sched events in time order: (sample, event), with the commands COMM records give.
fn each_event(
    input: &Path,
    mut visit: impl FnMut(&Sample, SchedEvent, &HashMap<u32, String>),
) -> Result<HashMap<u32, String>, ReportError> {
    let mut reader = Reader::open(input)?;
    let formats = Formats::of(&reader);
    let mut comms: HashMap<u32, String> = HashMap::new();
    while let Some(event) = reader.next_event()? {
        match event {
            Event::Comm { tid, name, .. } => {
                comms.insert(tid, name);
            }
            // A new thread has its parent's command until its own COMM, as perf's threads.
            Event::Fork { tid, ptid, .. } => {
                if let Some(c) = comms.get(&ptid).cloned() {
                    comms.entry(tid).or_insert(c);
                }
            }
            Event::Sample(s) => {
                if let Some(e) = sched_event(&formats, &s) {
                    visit(&s, e, &comms);
                }
            }
            _ => {}
        }
    }
    Ok(comms)
}

/// A task's state between its events (perf's work atom): how it left the CPU and when it became runnable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AtomState {
    Sleeping,
    WaitCpu,
    SchedIn,
    Ignore,
}

#[derive(Clone, Copy, Debug)]
struct Atom {
    state: AtomState,
    sched_out: u64,
    wake_up: u64,
}

/// One task's latency: perf sched latency's row.
#[derive(Clone, Debug, Default)]
pub struct TaskLatency {
    pub comm: String,
    pub tid: u32,
    /// Tasks of this command merged into the row (perf's `comm:(N)`).
    pub merged: u32,
    /// Nanoseconds on CPU (sched_stat_runtime).
    pub runtime: u64,
    /// Times it was switched in after waiting ("Switches").
    pub switches: u64,
    pub total_delay: u64,
    pub max_delay: u64,
    pub max_start: u64,
    pub max_end: u64,
    last: Option<Atom>,
}

impl TaskLatency {
    fn sched_out(&mut self, runnable: bool, time: u64) {
        self.last = Some(Atom {
            state: match runnable {
                true => AtomState::WaitCpu,
                false => AtomState::Sleeping,
            },
            sched_out: time,
            wake_up: if runnable { time } else { 0 },
        });
    }

    fn sched_in(&mut self, time: u64) {
        let Some(atom) = self.last.as_mut() else {
            return;
        };
        if atom.state != AtomState::WaitCpu {
            return;
        }
        if time < atom.wake_up {
            atom.state = AtomState::Ignore;
            return;
        }
        atom.state = AtomState::SchedIn;
        let delay = time - atom.wake_up;
        self.total_delay += delay;
        if delay > self.max_delay {
            (self.max_delay, self.max_start, self.max_end) = (delay, atom.wake_up, time);
        }
        self.switches += 1;
    }

    fn wakeup(&mut self, time: u64) {
        let Some(atom) = self.last.as_mut() else {
            return;
        };
        if atom.state != AtomState::Sleeping || atom.sched_out > time {
            return;
        }
        (atom.state, atom.wake_up) = (AtomState::WaitCpu, time);
    }

    fn merge(&mut self, other: &TaskLatency) {
        self.merged += 1;
        self.runtime += other.runtime;
        self.switches += other.switches;
        self.total_delay += other.total_delay;
        if other.max_delay > self.max_delay {
            (self.max_delay, self.max_start, self.max_end) =
                (other.max_delay, other.max_start, other.max_end);
        }
    }

    /// perf's average: whole nanoseconds.
    pub fn avg_delay(&self) -> u64 {
        self.total_delay / self.switches.max(1)
    }
}

/// perf sched latency's rows: per command (or per task with `per_pid`), the idle task left out, sorted as
/// perf's default `avg, max, switch, runtime`.
pub fn latency(input: &Path, per_pid: bool) -> Result<Vec<TaskLatency>, ReportError> {
    let mut tasks: HashMap<u32, TaskLatency> = HashMap::new();
    let comms = each_event(input, |s, e, _| {
        let time = s.time.unwrap_or(0);
        match e {
            SchedEvent::Switch {
                prev_pid,
                prev_runnable,
                next_pid,
                ..
            } => {
                tasks_entry(&mut tasks, prev_pid, time, prev_runnable)
                    .sched_out(prev_runnable, time);
                tasks_entry(&mut tasks, next_pid, time, true).sched_in(time);
            }
            SchedEvent::Runtime { pid, runtime } => {
                tasks_entry(&mut tasks, pid, time, true).runtime += runtime;
            }
            SchedEvent::Wakeup { waking: true, .. } => {}
            SchedEvent::Wakeup { pid, .. } => {
                tasks_entry(&mut tasks, pid, time, false).wakeup(time)
            }
        }
    })?;
    // perf names a task by its last COMM record (`:PID` without one), not by the switch's fields.
    for (pid, t) in tasks.iter_mut() {
        if let Some(c) = comms.get(pid) {
            t.comm = c.clone();
        }
    }
    let mut rows: Vec<TaskLatency> = Vec::new();
    let mut tids: Vec<&TaskLatency> = tasks.values().filter(|t| t.tid != 0).collect();
    tids.sort_by_key(|t| t.tid);
    for t in tids {
        match rows.iter_mut().find(|r| !per_pid && r.comm == t.comm) {
            Some(row) => row.merge(t),
            None => rows.push(t.clone()),
        }
    }
    // Tasks that never waited merge into their command's row too (perf counts them in `comm:(N)`).
    rows.retain(|r| r.switches > 0);
    rows.sort_by(|a, b| {
        (b.avg_delay(), b.max_delay, b.switches, b.runtime).cmp(&(
            a.avg_delay(),
            a.max_delay,
            a.switches,
            a.runtime,
        ))
    });
    Ok(rows)
}

/// The task `pid`, created as perf does on its first event (runnable or asleep).
fn tasks_entry(
    tasks: &mut HashMap<u32, TaskLatency>,
    pid: u32,
    time: u64,
    runnable: bool,
) -> &mut TaskLatency {
    tasks.entry(pid).or_insert_with(|| {
        let mut t = TaskLatency {
            tid: pid,
            merged: 1,
            comm: format!(":{pid}"),
            ..TaskLatency::default()
        };
        t.sched_out(runnable, time);
        t
    })
}

/// A time as perf prints sample times: seconds with 6 decimals.
fn usec(ns: u64) -> String {
    format!("{}.{:06}", ns / 1_000_000_000, ns % 1_000_000_000 / 1000)
}

/// perf sched latency's table.
pub fn write_latency(rows: &[TaskLatency], out: &mut impl Write) -> std::io::Result<()> {
    let rule = format!(" {}", "-".repeat(139));
    writeln!(out, "\n{rule}")?;
    writeln!(out, "  Task                  |   Runtime ms  | Switches | Avg delay ms    | Max delay ms    | Max delay start           | Max delay end          |")?;
    writeln!(out, "{rule}")?;
    let ms = |ns: u64| ns as f64 / 1e6;
    let (mut runtime, mut switches) = (0u64, 0u64);
    for r in rows {
        runtime += r.runtime;
        switches += r.switches;
        let name = match r.merged > 1 {
            true => format!("  {}:({}) ", r.comm, r.merged),
            false => format!("  {}:{} ", r.comm, r.tid),
        };
        writeln!(
            out,
            "{name:<24}|{:11.3} ms |{:9} | avg:{:8.3} ms | max:{:8.3} ms | max start: {:>12} s | max end: {:>12} s",
            ms(r.runtime),
            r.switches,
            ms(r.avg_delay()),
            ms(r.max_delay),
            usec(r.max_start),
            usec(r.max_end)
        )?;
    }
    writeln!(out, " {}", "-".repeat(113))?;
    writeln!(
        out,
        "  TOTAL:                |{:11.3} ms |{switches:9} |",
        ms(runtime)
    )?;
    writeln!(out, " {}\n", "-".repeat(51))?;
    Ok(())
}

/// A thread's state for timehist (perf's thread_runtime).
#[derive(Default)]
struct Runtime {
    last_time: u64,
    ready_to_run: u64,
}

/// perf sched timehist: a line per context switch, for the task that leaves: when, on which CPU, how long it
/// had waited before it ran (sleeping or preempted), its scheduling delay (runnable to running) and how long
/// it ran.
pub fn write_timehist(input: &Path, out: &mut impl Write) -> Result<(), ReportError> {
    writeln!(
        out,
        "           time    cpu  task name                       wait time  sch delay   run time"
    )?;
    writeln!(
        out,
        "                        [tid/pid]                          (msec)     (msec)     (msec)"
    )?;
    writeln!(
        out,
        "--------------- ------  ------------------------------  ---------  ---------  ---------"
    )?;
    let mut threads: HashMap<(u32, u32), Runtime> = HashMap::new();
    let mut cpu_last: HashMap<u32, u64> = HashMap::new();
    let mut first_pid: HashMap<i32, i32> = HashMap::new();
    let mut width = 30;
    let mut result = Ok(());
    each_event(input, |s, e, comms| {
        let t = s.time.unwrap_or(0);
        let cpu = s.cpu.unwrap_or(0);
        match e {
            SchedEvent::Wakeup { pid, .. } => {
                let r = threads.entry((pid, 0)).or_default();
                if r.ready_to_run == 0 {
                    r.ready_to_run = t;
                }
            }
            SchedEvent::Switch { prev_runnable, .. } => {
                // perf's thread is the sample's (the task that leaves, as the kernel wrote it).
                // Its pid is the first one seen with its tid, as perf's thread keeps it (tid -1, an exited
                // task's last switch, has several).
                let tid = s.tid as i32;
                let pid = *first_pid.entry(tid).or_insert(s.pid as i32);
                let tprev = cpu_last.insert(cpu, t).unwrap_or(0);
                // The idle task has a thread per CPU, as perf's `<idle>`.
                let key = match tid {
                    0 => (0, cpu),
                    _ => (s.tid, 0),
                };
                let r = threads.entry(key).or_default();
                let (mut run, mut delay, mut wait) = (0, 0, 0);
                if tprev > 0 {
                    run = t - tprev;
                    if r.ready_to_run > 0 && r.ready_to_run <= tprev {
                        delay = tprev - r.ready_to_run;
                    }
                    if r.last_time > 0 && r.last_time <= tprev {
                        wait = tprev - r.last_time;
                    }
                }
                if result.is_ok() {
                    let comm = comms.get(&s.tid).cloned().unwrap_or(format!(":{tid}"));
                    let name = match (tid, pid == tid || pid == -1) {
                        (0, _) => "<idle>".to_string(),
                        (_, true) => format!("{comm}[{tid}]"),
                        (_, false) => format!("{comm}[{tid}/{pid}]"),
                    };
                    // perf keeps 31 bytes of it (a 32-byte buffer), and widens the column from 30 to the
                    // longest name printed so far.
                    let name: String = name.chars().take(31).collect();
                    width = width.max(name.len());
                    let ms =
                        |ns: u64| format!("{:>6}.{:03} ", ns / 1_000_000, ns % 1_000_000 / 1000);
                    result = writeln!(
                        out,
                        "{:>15} [{cpu:04}]  {name:<width$} {}{}{}",
                        usec(t),
                        ms(wait),
                        ms(delay),
                        ms(run)
                    );
                }
                r.last_time = t;
                r.ready_to_run = if prev_runnable { t } else { 0 };
            }
            SchedEvent::Runtime { .. } => {}
        }
    })?;
    Ok(result?)
}
