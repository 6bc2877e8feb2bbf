//! Writing what [`Calls`] gathered: the `--by` rows as a report, `--hist VALUE` histograms, the slow calls
//! of `--min-duration` and the `--trace` lines; and [`write_report`], which writes a run's or an interval's report
//! with them.
use super::calls::{describe, Calls, Key, SlowCall};
use super::fetch::Fetch;
use super::output::{self, Report};
use super::output::{human_ns, write_log2_hist};
use super::resolve::Target;
use super::stacks::StackCounter;
use super::stats::{FuncStats, Stats};
use super::{Format, ProbeError, ProbeOptions};
use crate::resolve::FrameId;
use std::collections::HashMap;
use std::io::{self, Write};
use std::sync::Arc;
use std::time::SystemTime;

/// The `--by` rows as report rows: function names, values and statistics, grouped by function (the function
/// with the most time, or calls, first), each function's values by time then count, the top `top` of them and
/// an `[other]` row for the rest. Callers that resolve to one function are one row.
pub fn keyed_rows(
    calls: &Calls,
    names: &[String],
    stacks: &StackCounter,
) -> (Vec<String>, Vec<String>, Stats) {
    let mut per_target: HashMap<u32, HashMap<String, FuncStats>> = HashMap::new();
    for ((target, key), f) in &calls.keyed {
        let shown = match key {
            Key::Value(v) => v.plain(),
            Key::Frames(frames) => caller_name(stacks, frames),
            Key::Missing => "[none]".into(),
            Key::Other => "[other]".into(),
        };
        per_target
            .entry(*target)
            .or_default()
            .entry(shown)
            .or_default()
            .merge(f);
    }
    let weight = |f: &FuncStats| (f.total_ns, f.count);
    let mut groups: Vec<(u32, Vec<(String, FuncStats)>)> = per_target
        .into_iter()
        .map(|(t, rows)| {
            let mut rows: Vec<(String, FuncStats)> = rows.into_iter().collect();
            rows.sort_by(|a, b| weight(&b.1).cmp(&weight(&a.1)).then_with(|| a.0.cmp(&b.0)));
            let top = calls.opts.top.max(1);
            if rows.len() > top {
                let mut other = FuncStats::default();
                for (_, f) in rows.drain(top..) {
                    other.merge(&f);
                }
                rows.push(("[other]".into(), other));
            }
            (t, rows)
        })
        .collect();
    let group_weight = |rows: &[(String, FuncStats)]| {
        rows.iter()
            .map(|(_, f)| weight(f))
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    };
    groups.sort_by(|a, b| {
        group_weight(&b.1)
            .cmp(&group_weight(&a.1))
            .then(a.0.cmp(&b.0))
    });
    let (mut fnames, mut keys, mut stats) = (Vec::new(), Vec::new(), Stats::new(0));
    for (t, rows) in groups {
        for (k, f) in rows {
            fnames.push(names[t as usize].clone());
            keys.push(k);
            stats.funcs.push(f);
        }
    }
    (fnames, keys, stats)
}

/// The innermost function of a caller's frames.
fn caller_name(stacks: &StackCounter, frames: &Arc<[FrameId]>) -> String {
    stacks
        .names(frames)
        .into_iter()
        .next()
        .unwrap_or_else(|| "[unknown]".into())
}

/// `--hist VALUE`: one log2 histogram of the value per function that has one.
pub fn write_value_hists(
    w: &mut dyn Write,
    calls: &Calls,
    names: &[String],
    label: &str,
) -> io::Result<()> {
    for (t, h) in calls.hists.iter().enumerate() {
        if h.total() == 0 {
            continue;
        }
        writeln!(w, "\nFunction = {}, {label}", names[t])?;
        write_log2_hist(w, h, label)?;
        writeln!(w, "\ncount: {}", h.total())?;
    }
    Ok(())
}

/// `--min-duration`: how many calls were slow out of how many, then each (time, thread, call, duration) and,
/// with `-g`, its stack at entry.
pub fn write_slow(
    w: &mut dyn Write,
    calls: &Calls,
    all_calls: u64,
    names: &[String],
    fetches: &[&[Fetch]],
    stacks: &StackCounter,
) -> io::Result<()> {
    let Some(min) = calls.opts.min_duration else {
        return Ok(());
    };
    writeln!(
        w,
        "\nSLOW CALLS (at least {}): {} of {all_calls} calls",
        human_ns(min),
        calls.slow_count
    )?;
    writeln!(w, "{:>12} {:>8} {:>10}  CALL", "TIME(s)", "TID", "DURATION")?;
    for call in &calls.slow {
        writeln!(w, "{}", line(call, names, fetches, stacks))?;
        if let Some(frames) = &call.stack {
            for name in stacks.names(frames) {
                writeln!(w, "{:>34}{name}", "")?;
            }
        }
    }
    if calls.slow_count > calls.slow.len() as u64 {
        writeln!(
            w,
            "... {} more slow calls not listed",
            calls.slow_count - calls.slow.len() as u64
        )?;
    }
    Ok(())
}

/// `--trace`: write the lines gathered since the last call, and say how many calls the rate limit skipped.
pub fn write_trace(
    w: &mut dyn Write,
    calls: &mut Calls,
    names: &[String],
    fetches: &[&[Fetch]],
    stacks: &StackCounter,
    end: bool,
) -> io::Result<()> {
    for t in std::mem::take(&mut calls.trace_lines) {
        if t.skipped_before > 0 {
            writeln!(w, "... {} more calls (over --trace-rate)", t.skipped_before)?;
        }
        writeln!(w, "{}", line(&t.call, names, fetches, stacks))?;
    }
    if end && calls.trace_skipped > 0 {
        writeln!(
            w,
            "... {} more calls (over --trace-rate)",
            calls.trace_skipped
        )?;
        calls.trace_skipped = 0;
    }
    Ok(())
}

/// `TIME TID DURATION func(args) = ret`.
fn line(call: &SlowCall, names: &[String], fetches: &[&[Fetch]], stacks: &StackCounter) -> String {
    let t = call.target as usize;
    let dur = if call.dur > 0 {
        human_ns(call.dur)
    } else {
        "-".into()
    };
    let text = describe(
        &names[t],
        fetches.get(t).copied().unwrap_or(&[]),
        call,
        &|f| caller_name(stacks, f),
    );
    format!(
        "{:>12.6} {:>8} {dur:>10}  {text}",
        call.time as f64 / 1e9,
        call.tid
    )
}

/// The per-call results to write with a report.
pub(super) struct PerCall<'a> {
    pub(super) calls: &'a mut Calls,
    pub(super) stacks: &'a mut StackCounter,
    pub(super) fetches: &'a [&'a [Fetch]],
}

/// Each target's fetches.
pub(super) fn fetch_lists(targets: &[Target]) -> Vec<&[Fetch]> {
    targets.iter().map(|t| t.fetches.as_slice()).collect()
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

#[allow(clippy::too_many_arguments)]
pub(super) fn write_report(
    out: &mut dyn Write,
    opts: &ProbeOptions,
    names: &[String],
    stats: &Stats,
    timed: bool,
    open_calls: usize,
    probe_cost_ns: Option<u64>,
    per_call: Option<&mut PerCall<'_>>,
) -> Result<(), ProbeError> {
    let mut r = Report {
        names,
        stats,
        timed,
        timestamp: opts.timestamps.then(clock),
        open_calls,
        show_zero: false,
        probe_cost_ns,
        keys: None,
    };
    let Some(pc) = per_call else {
        output::write(out, &r, opts.format)?;
        return finish_report(out, opts, stats);
    };
    // `--by`: the rows by value replace the rows by function.
    let keyed;
    if let Some(header) = pc.calls.opts.by.as_deref() {
        keyed = keyed_rows(pc.calls, names, pc.stacks);
        let mut keyed_stats = keyed.2.clone();
        keyed_stats.lost = stats.lost;
        keyed_stats.orphan_returns = stats.orphan_returns;
        let report = Report {
            names: &keyed.0,
            stats: &keyed_stats,
            keys: Some(output::KeyColumn {
                header,
                values: &keyed.1,
            }),
            ..r.clone()
        };
        output::write(out, &report, opts.format)?;
        r.keys = None;
    } else {
        output::write(out, &r, opts.format)?;
    }
    if matches!(opts.format, Format::Table | Format::Hist) {
        if let Some(label) = pc.calls.opts.hist_of.as_deref() {
            write_value_hists(out, pc.calls, names, label)?;
        }
        let all: u64 = stats.funcs.iter().map(|f| f.paired).sum();
        write_slow(out, pc.calls, all, names, pc.fetches, pc.stacks)?;
    }
    finish_report(out, opts, stats)
}

fn finish_report(
    out: &mut dyn Write,
    opts: &ProbeOptions,
    stats: &Stats,
) -> Result<(), ProbeError> {
    if stats.lost > 0 && matches!(opts.format, Format::Csv | Format::Json) {
        eprintln!(
            "rprof: warning: {} events were lost (the ring buffers overflowed)",
            stats.lost
        );
    }
    out.flush()?;
    Ok(())
}
