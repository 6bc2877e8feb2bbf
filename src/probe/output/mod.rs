//! What `rprof probe` writes: the per-function report ([`table`]: table, histograms, CSV, JSON), what per-call
//! work gathered ([`percall`]), and the `-l` listing ([`list`]). [`write_report`] writes one run's or
//! interval's report with all of it.
mod hist;
mod list;
mod percall;
mod structured;
mod table;
pub mod trace_events;
mod trace_format;

pub use list::write_list;
pub use percall::write_trace;
pub use table::{human_ns, Format, Report, Totals};
pub use trace_events::TraceOut;
pub use trace_format::TraceFormat;

use crate::probe::analysis::{Calls, StackCounter, Stats};
use crate::probe::engine::cost::Costs;
use crate::probe::engine::holes::LossSummary;
use crate::probe::plan::Placement;
use crate::probe::target::{PerTarget, Targets};
use crate::probe::ProbeOptions;
use std::io::{self, Write};
use std::time::SystemTime;

/// What a report is made of: the interval's statistics, and its per-call results when asked for.
pub struct ReportParts<'a> {
    pub targets: &'a Targets,
    pub stats: &'a Stats,
    /// Returns are probed.
    pub timed: bool,
    /// Calls open at the time of the report.
    pub open_calls: usize,
    /// The probe's cost per call of each class of probed instruction, and where each function is probed.
    pub costs: Costs,
    pub placements: &'a PerTarget<Option<Placement>>,
    pub calls: Option<&'a Calls>,
    /// The stacks that name callers and slow calls' frames.
    pub stacks: &'a StackCounter,
    /// What the losses of the run cost (its last report).
    pub loss: Option<LossSummary>,
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

/// Write a run's or an interval's report: its rows (by function, or by `--by` value), then with the table the
/// value histograms and the slow calls.
pub fn write_report(
    out: &mut dyn Write,
    opts: &ProbeOptions,
    parts: &ReportParts<'_>,
) -> io::Result<()> {
    // perf trace's lines are the whole output, as perf trace's are (-s gives the table instead).
    if opts.calls.trace && opts.calls.style == crate::probe::TraceStyle::PerfTrace {
        return out.flush();
    }
    let keyed = match (parts.calls, opts.calls.by.as_deref()) {
        (Some(calls), Some(_)) => Some(percall::keyed_rows(calls, parts.stacks)),
        _ => None,
    };
    let rows = match &keyed {
        Some(k) => percall::report_rows(parts.targets, k),
        None => table::function_rows(parts.targets, parts.stats, parts.placements),
    };
    let report = Report {
        rows,
        key_header: keyed.as_ref().and(opts.calls.by.as_deref()),
        timed: parts.timed,
        timestamp: opts.timestamps.then(clock),
        open_calls: parts.open_calls,
        totals: Totals {
            loss: parts.loss.unwrap_or_default(),
            ..Totals::of(parts.stats)
        },
        costs: parts.costs,
        net: opts.net,
        notes: sampled_notes(parts.targets),
    };
    if opts.calls.trace_format.is_some() {
        // The lines are the output, as bcc's tools print theirs: no table after them.
        return out.flush();
    }
    table::write(out, &report, opts.format)?;
    if let (Some(calls), Format::Table | Format::Hist | Format::HistOnly) =
        (parts.calls, opts.format)
    {
        if let Some(label) = calls.opts.hist_of.as_deref() {
            percall::write_value_hists(out, calls, parts.targets, label)?;
        }
        let all: u64 = parts.stats.funcs.values().map(|f| f.paired).sum();
        percall::write_slow(out, calls, all, parts.targets, parts.stacks)?;
    }
    out.flush()
}

/// What COUNT is for the sampled software events among `targets`: samples of CPU time for the clocks, a hit
/// per COUNT events for the others (none where every event is a hit).
fn sampled_notes(targets: &Targets) -> Vec<String> {
    use crate::perf::software::{rate_text, Sample};
    targets
        .iter()
        .filter_map(|(_, t)| {
            let (event, sample) = t.software()?;
            let rate = rate_text(event, sample);
            match (event.is_clock(), sample) {
                (true, _) => Some(format!("{}: COUNT is samples ({rate}), not calls", t.name)),
                (false, Sample::Period(1)) => None,
                (false, _) => Some(format!("{}: COUNT is hits ({rate})", t.name)),
            }
        })
        .collect()
}
