//! Writing what per-call work gathered ([`Calls`]): the `--by` rows, `--hist VALUE` histograms, the slow calls
//! of `--min-duration` and the `--trace` lines.
use super::table::{human_ns, plural, write_log2_hist, Row};
use crate::probe::analysis::{
    describe, Call, Calls, FuncStats, Key, StackCounter, TraceStyle, MAX_KEYS,
};
use crate::probe::target::{TargetId, Targets};
use crate::probe::value::{errno_name, Value};
use crate::resolve::FrameId;
use std::collections::HashMap;
use std::io::{self, Write};
use std::sync::Arc;

/// The `--by` rows of each target: its values and their statistics.
pub type KeyedRows = Vec<(TargetId, Vec<(String, FuncStats)>)>;

/// The `--by` rows, grouped by function (the function with the most time, or calls, first), each function's
/// values by time then count: the top `top` of them, then `[other: past --top N]` for the rest, then
/// `[other: past 10000 values]` for the calls whose value came after the function had [`MAX_KEYS`] distinct
/// values (never merged into the first: they are values rprof did not keep apart, not values it did not show).
/// Callers that resolve to one function are one row.
pub fn keyed_rows(calls: &Calls, stacks: &StackCounter) -> KeyedRows {
    let mut per_target: HashMap<TargetId, HashMap<String, FuncStats>> = HashMap::new();
    let mut capped: HashMap<TargetId, FuncStats> = HashMap::new();
    for ((target, key), f) in &calls.keyed {
        let shown = match key {
            Key::Value(v) => match calls.by_shown.get(&(*target, key.clone())) {
                Some(more) => format!("{} {more}", v.plain()),
                None => v.plain(),
            },
            Key::Frames(frames) => caller_name(stacks, frames),
            Key::Missing => "[none]".into(),
            Key::Other => {
                capped.entry(*target).or_default().merge(f);
                per_target.entry(*target).or_default();
                continue;
            }
        };
        per_target
            .entry(*target)
            .or_default()
            .entry(shown)
            .or_default()
            .merge(f);
    }
    let weight = |f: &FuncStats| (f.total_ns, f.count);
    let top = calls.opts.top.max(1);
    let mut groups: KeyedRows = per_target
        .into_iter()
        .map(|(t, rows)| {
            let mut rows: Vec<(String, FuncStats)> = rows.into_iter().collect();
            rows.sort_by(|a, b| weight(&b.1).cmp(&weight(&a.1)).then_with(|| a.0.cmp(&b.0)));
            if rows.len() > top {
                let mut other = FuncStats::default();
                for (_, f) in rows.drain(top..) {
                    other.merge(&f);
                }
                rows.push((past_top(top), other));
            }
            if let Some(f) = capped.remove(&t) {
                rows.push((past_cap(), f));
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
    groups
}

/// The row of the values past the `top` shown.
fn past_top(top: usize) -> String {
    format!("[other: past --top {top}]")
}

/// The row of the calls whose value came when [`MAX_KEYS`] distinct values were kept already (no thousands
/// separator: CSV).
fn past_cap() -> String {
    format!("[other: past {MAX_KEYS} values]")
}

/// The keyed rows as report rows.
pub fn report_rows<'a>(targets: &'a Targets, keyed: &'a KeyedRows) -> Vec<Row<'a>> {
    keyed
        .iter()
        .flat_map(|(t, rows)| {
            rows.iter().map(move |(k, f)| Row {
                name: targets.name(*t),
                key: Some(k.as_str()),
                class: None,
                f,
            })
        })
        .collect()
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
    targets: &Targets,
    label: &str,
) -> io::Result<()> {
    for (t, c) in calls.per_target.iter() {
        let h = &c.hist;
        if h.total() == 0 {
            continue;
        }
        writeln!(w, "\nFunction = {}, {label}", targets.name(t))?;
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
    targets: &Targets,
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
        writeln!(w, "{}", line(call, targets, stacks))?;
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
    targets: &Targets,
    stacks: &StackCounter,
    end: bool,
) -> io::Result<()> {
    let rate = calls.opts.trace_rate;
    let note = |w: &mut dyn Write, n: u64| {
        writeln!(
            w,
            "--- {n} calls not shown here (over --trace-rate {rate} lines per second) ---"
        )
    };
    if calls.opts.perf_summary {
        for t in std::mem::take(&mut calls.trace_lines) {
            calls.perf_summary.add(&t.call, targets);
        }
        return match end {
            true => calls.perf_summary.write(w),
            false => Ok(()),
        };
    }
    let format = calls.opts.trace_format.clone();
    let style = calls.opts.style;
    let header = format.is_some() || style == TraceStyle::Probe;
    if !calls.trace_lines.is_empty() && !calls.trace_header && header {
        calls.trace_header = true;
        if let Some(f) = &format {
            writeln!(w, "{}", f.header())?;
        } else {
            writeln!(
                w,
                "{:>12} {:<16} {:>7} {:>7} {:>10}  CALL",
                "TIME", "COMM", "PID", "TID", "DURATION"
            )?;
        }
    }
    for t in std::mem::take(&mut calls.trace_lines) {
        if t.skipped_before > 0 {
            note(w, t.skipped_before)?;
        }
        if let Some(h) = t.hole_before {
            let count = h.count.map_or("events".to_string(), |n| {
                format!("{} {}", crate::text::thousands(n), plural(n, "event"))
            });
            writeln!(
                w,
                "--- {count} lost on CPU {} between {:.6} and {:.6}: calls open across it are not timed ---",
                h.cpu,
                h.after as f64 / 1e9,
                h.until as f64 / 1e9
            )?;
        }
        match (&format, style) {
            (Some(f), _) => {
                let target = &targets[t.call.target];
                let then = t
                    .then
                    .as_ref()
                    .map(|c| (c, targets[c.target].fetches.as_slice()));
                let text = f.line(&t.call, &target.fetches, &target.name, then);
                writeln!(w, "{text}")?
            }
            (None, TraceStyle::Probe) => writeln!(w, "{}", line(&t.call, targets, stacks))?,
            (None, TraceStyle::PerfTrace) => writeln!(w, "{}", perf_trace_line(&t.call, targets))?,
        }
    }
    if end && calls.trace_skipped > 0 {
        note(w, calls.trace_skipped)?;
        calls.trace_skipped = 0;
    }
    Ok(())
}

/// `TIME COMM PID TID DURATION func(args) = ret`; an event in an interrupt has `-` for its process.
fn line(call: &Call, targets: &Targets, stacks: &StackCounter) -> String {
    let t = &targets[call.target];
    let dur = match call.dur {
        Some((d, _)) => human_ns(d),
        _ => "-".into(),
    };
    let several = t.pair().is_some_and(|p| p.starts.len() > 1);
    let text = describe(
        &t.name,
        &t.fetches,
        call,
        &|f| caller_name(stacks, f),
        several,
    );
    let id = |v: Option<u32>| v.map_or("-".to_string(), |v| v.to_string());
    let comm = call.ctx.comm.as_deref().unwrap_or("-");
    format!(
        "{:>12.6} {comm:<16} {:>7} {:>7} {dur:>10}  {text}",
        call.time as f64 / 1e9,
        id(call.ctx.pid),
        id(call.ctx.tid),
    )
}

/// The syscalls whose return perf trace shows in hex (addresses).
const HEX_RETURNS: [&str; 4] = ["brk", "mmap", "mremap", "shmat"];

/// A return value as perf trace shows it: an error as `-1 ENOENT (No such file or directory)`, an address
/// in hex, else the number.
fn perf_trace_return(syscall: &str, v: Option<&Value>) -> String {
    let raw = match v {
        Some(Value::Errno(r)) => *r,
        Some(v) => return v.to_string(),
        None => return "?".into(),
    };
    match errno_name(raw) {
        Some(name) => {
            // The C library's text (strerror), as perf trace prints it: `Bad file descriptor`.
            let text = std::io::Error::from_raw_os_error((-raw) as i32).to_string();
            let text = text.split(" (os error").next().unwrap_or_default();
            format!("-1 {name} ({text})")
        }
        None if HEX_RETURNS.contains(&syscall) => format!("{raw:#x}"),
        None => raw.to_string(),
    }
}

/// perf trace's line (`rprof trace`): `MS ( DUR ms): COMM/TID name(field: value, ...)` padded to 70
/// columns, then ` = RET`; a call without a return has no duration and no `= RET`.
fn perf_trace_line(call: &Call, targets: &Targets) -> String {
    let t = &targets[call.target];
    let name = t.name.strip_prefix("syscall:").unwrap_or(&t.name);
    let args: Vec<String> = t
        .fetches
        .iter()
        .zip(&call.values)
        .filter(|(f, _)| !f.on_return)
        .map(|(f, v)| {
            let shown = v.as_ref().map_or("?".to_string(), Value::to_string);
            format!("{}: {shown}", f.label)
        })
        .collect();
    let dur = match call.dur {
        Some((d, _)) => format!("{:6.3} ms", d as f64 / 1e6),
        None => " ".repeat(9),
    };
    let comm = call.ctx.comm.as_deref().unwrap_or("-");
    let comm: String = comm.chars().take(14).collect();
    let tid = call.ctx.tid.map_or("-".to_string(), |v| v.to_string());
    let head = format!("{:10.3} ({dur}): {comm}/{tid} ", call.time as f64 / 1e6);
    let text = format!("{name}({})", args.join(", "));
    // A call that never returned (exit_group, a thread that exited inside a call): `= ?`, as perf trace.
    let has_ret = t.fetches.iter().any(|f| f.on_return && f.label == "ret");
    let ret = t
        .fetches
        .iter()
        .zip(&call.values)
        .find(|(f, _)| f.on_return && f.label == "ret")
        .and_then(|(_, v)| v.as_ref());
    match has_ret {
        true => format!("{head}{text:<69} = {}", perf_trace_return(name, ret)),
        false => format!("{head}{text}"),
    }
}
