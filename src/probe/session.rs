//! Running `rprof probe`: create the probes, open the events, synthesize the mappings of running processes,
//! run `perf`'s loop (the one `rprof record` uses) with the records decoded into the time-ordered merge and
//! applied in order, and print the reports (every `-i` and at the end).
use super::addrmap::AddrMap;
use super::events::{open_events, Opened};
use super::group::{self, ProbeGroup};
use super::live::{decode, EventInfo, Item, Sink};
use super::output::{self, Report};
use super::pairing::Pairer;
use super::resolve::Target;
use super::stacks::StackCounter;
use super::stats::Stats;
use super::{ProbeError, ProbeOptions, RunSummary, TaskTarget};
use crate::merge::OrderedMerge;
use crate::perf::{
    self, EventInfos, Handler, PerfError, RawRecord, StopSignals, StopWhen, Workload,
};
use crate::process::AddressSpaces;
use crate::tracefs::Tracefs;
use linux_perf_event_reader::RecordParseInfo;
use std::collections::HashSet;
use std::io::Write;
use std::time::{Instant, SystemTime};

/// The wall clock as `HH:MM:SS` (UTC).
fn clock() -> String {
    let s = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
        % 86_400;
    format!("{:02}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60)
}

/// Create the probes, run until the end of the duration, the target's exit or SIGINT/SIGTERM/SIGHUP, and print
/// reports. The probes are removed on every way out.
pub fn run(
    opts: &ProbeOptions,
    tracefs: &Tracefs,
    targets: &[Target],
    out: &mut dyn Write,
) -> Result<RunSummary, ProbeError> {
    let signals = StopSignals::register()?;
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
    let group_name = group::group_name(std::process::id());
    let (defs, planned) = group::plan(&group_name, targets, opts.count_only);

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
    let Opened {
        mut events,
        any_parse,
        usable,
    } = open_events(opts, tracefs, &planned, targets, &tasks)?;
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
        None => events.enable()?,
    }
    eprintln!(
        "rprof: probing {probed} targets ({} probe points, {} perf events) set up in {:.2}s; Ctrl-C to end",
        defs.len(),
        events.len(),
        setup.elapsed().as_secs_f64()
    );

    let names: Vec<String> = targets.iter().map(|t| t.name.clone()).collect();
    let mut live = Live {
        sink,
        merge: OrderedMerge::new(),
        any_parse,
        opts,
        names: &names,
        out,
    };
    let pid = match &opts.target {
        TaskTarget::Pid(p) => vec![*p],
        _ => vec![],
    };
    let when = StopWhen {
        flag: None,
        duration: opts.duration,
        workload: workload.as_mut(),
        pids: &pid,
        tick: opts.interval,
    };
    perf::run_loop::run(&mut events, &signals, when, &mut live)?;
    drop(events);
    let Live { mut sink, out, .. } = live;
    write_report(out, opts, &names, &sink, &sink.stats)?;
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

/// The loop's handler: records are decoded into the merge, released in time order into the sink, and each
/// tick prints the interval's report.
struct Live<'a> {
    sink: Sink,
    merge: OrderedMerge<Item>,
    any_parse: Option<RecordParseInfo>,
    opts: &'a ProbeOptions,
    names: &'a [String],
    out: &'a mut dyn Write,
}

impl Handler<EventInfo> for Live<'_> {
    type Error = ProbeError;

    fn record(
        &mut self,
        infos: &EventInfos<EventInfo>,
        rec: RawRecord<'_>,
    ) -> Result<(), ProbeError> {
        decode(
            rec,
            infos,
            self.any_parse,
            &mut self.merge,
            &mut self.sink.stats,
            &self.sink.addrs,
            self.opts.stacks,
        );
        Ok(())
    }

    fn end_round(&mut self, _records: usize, last: bool) -> Result<(), ProbeError> {
        self.sink.release(&mut self.merge, last);
        Ok(())
    }

    /// The `-i` report of the interval that ended (the last one is reported at the end, with everything still
    /// in the buffers).
    fn tick(&mut self) -> Result<(), ProbeError> {
        let interval = self.sink.stats.take();
        write_report(self.out, self.opts, self.names, &self.sink, &interval)
    }
}

fn write_report(
    out: &mut dyn Write,
    opts: &ProbeOptions,
    names: &[String],
    sink: &Sink,
    stats: &Stats,
) -> Result<(), ProbeError> {
    let r = Report {
        names,
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
}
