//! What `rprof probe` does with each call beyond counting and timing it: rows split by a fetched value
//! (`--by`, `--callers`), log2 histograms of a value (`--hist VALUE`), the list of slow calls
//! (`--min-duration`), and one line per call (`--trace`). Everything is bounded: [`MAX_KEYS`] distinct values
//! per function, [`MAX_SLOW`] listed slow calls, and a trace rate.
use super::context::Ctx;
use super::join::Join;
use super::stats::{FuncStats, Histogram};
use crate::probe::engine::holes::Hole;
use crate::probe::spec::fetch::Fetch;
use crate::probe::target::{PerTarget, TargetId};
use crate::probe::value::Value;
use crate::resolve::FrameId;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

/// Distinct values kept per function for `--by`; calls with further values go to the function's
/// `[other: past 10000 values]` row.
pub const MAX_KEYS: usize = 10_000;
/// Slow calls listed at most; more are only counted.
pub const MAX_SLOW: usize = 10_000;

/// What to do with each call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallOptions {
    /// `--trace-format`: the trace's lines in these columns (implies `trace`).
    pub trace_format: Option<crate::probe::output::TraceFormat>,
    /// `--by VALUE` / `--callers`: split each function's row by this value (a fetch label).
    pub by: Option<String>,
    /// `--hist VALUE`: a log2 histogram of this value per function.
    pub hist_of: Option<String>,
    /// `--trace`: one line per call.
    pub trace: bool,
    /// Trace lines per second of the run at most (the rest is counted); 0: no limit.
    pub trace_rate: u64,
    /// `--min-duration`: list the calls at least this long (ns).
    pub min_duration: Option<u64>,
    /// Rows per function shown with `--by` (the rest is summed into `[other: past --top N]`).
    pub top: usize,
    /// How `--trace` lines look.
    pub style: TraceStyle,
    /// `--hist-unit`: the nanoseconds one unit of the duration histograms holds (0 and 1: nanoseconds).
    pub hist_unit: u64,
    /// `--trace-join FIRST,THEN`: the names of the targets whose trace lines are joined (see [`super::join`]).
    pub trace_join: Option<(String, String)>,
    /// `rprof trace -s`: the traced calls make perf trace -s's summary ([`super::PerfSummary`]) instead of
    /// lines.
    pub perf_summary: bool,
}

/// The layout of `--trace` lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TraceStyle {
    /// rprof probe's: `TIME COMM PID TID DURATION func(name=value) = ret`.
    #[default]
    Probe,
    /// perf trace's (`rprof trace`): `MS ( DUR ms): COMM/TID name(field: value, ...)   = ret`, errors as
    /// `-1 ENOENT (No such file or directory)`; a syscall's entry fields are all fetched.
    PerfTrace,
}

impl CallOptions {
    /// True when any per-call work is asked for.
    pub fn any(&self) -> bool {
        self.by.is_some() || self.hist_of.is_some() || self.trace || self.min_duration.is_some()
    }
}

/// The key of a `--by` row.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Key {
    Value(Value),
    /// The caller, as resolved frames (leaf first), named when the report is written.
    Frames(Arc<[FrameId]>),
    /// The value was not fetched (its event lost, or a return that never came).
    Missing,
    /// Calls beyond [`MAX_KEYS`] distinct values.
    Other,
}

/// One call: what an entry opens, pairing closes (with its duration) and per-call work uses. For a probe
/// without returns (USDT, tracepoints, `--count`), one hit.
#[derive(Clone, Debug)]
pub struct Call {
    pub target: TargetId,
    pub tid: u32,
    /// Entry time (ns, the session clock; relative to the first call once kept in a list).
    pub time: u64,
    /// Duration and self time (ns), once paired.
    pub dur: Option<(u64, u64)>,
    /// The values, indexed like the target's fetches (those of the entry, then the return's).
    pub values: Vec<Option<Value>>,
    /// The caller's frames (for `caller`), and the stack at entry (`-g` with `--min-duration`).
    pub caller: Option<Arc<[FrameId]>>,
    pub stack: Option<Arc<[FrameId]>>,
    /// Who made it: process, thread, command name, CPU (at the entry).
    pub ctx: Ctx,
}

impl Call {
    /// A call entered at `time` on thread `tid`, carrying nothing yet.
    pub fn entry(target: TargetId, tid: u32, time: u64) -> Call {
        Call {
            target,
            tid,
            time,
            dur: None,
            values: Vec::new(),
            caller: None,
            stack: None,
            ctx: Ctx::default(),
        }
    }

    /// Add the values fetched at the return (set slots win over empty ones).
    pub fn join_return(&mut self, values: Vec<Option<Value>>) {
        if self.values.len() < values.len() {
            self.values.resize(values.len(), None);
        }
        for (slot, v) in self.values.iter_mut().zip(values) {
            if v.is_some() {
                *slot = v;
            }
        }
    }
}

/// What per-call work keeps for one target: where its `--by` and `--hist` values are among its fetches, how
/// many distinct `--by` values it has, and its value histogram.
#[derive(Clone, Debug, Default)]
pub struct TargetCalls {
    by: Option<Slots>,
    hist_of: Option<Slots>,
    keys: usize,
    pub hist: Histogram,
}

/// The per-call results of a run or interval.
#[derive(Debug, Default)]
pub struct Calls {
    pub opts: CallOptions,
    pub per_target: PerTarget<TargetCalls>,
    /// (target, key) -> statistics.
    pub keyed: HashMap<(TargetId, Key), FuncStats>,
    /// (target, key) -> the latest values of `--by`'s further names (`--by pid,comm`: the comm).
    pub by_shown: HashMap<(TargetId, Key), String>,
    pub slow: Vec<Call>,
    /// Calls at or above the minimum duration, listed or not.
    pub slow_count: u64,
    /// Trace lines waiting to be written, and calls not traced because of the rate limit.
    pub trace_lines: Vec<TraceLine>,
    pub trace_skipped: u64,
    /// Calls not traced because of the rate limit, in the whole run.
    pub trace_skipped_total: u64,
    /// The `--trace` column header was written.
    pub trace_header: bool,
    window: (u64, u64),
    /// The time the first event came (trace times are relative to it).
    pub epoch: Option<u64>,
    /// Events were lost since the last trace line: the next one says so first.
    hole: Option<Hole>,
    /// `--trace-join`: the lines waiting for their second half.
    join: Option<Join>,
    /// [`CallOptions::perf_summary`]'s summary, over the whole run.
    pub perf_summary: super::PerfSummary,
}

/// One `--trace` call, formatted when written (its caller's name may need the resolver).
#[derive(Clone, Debug)]
pub struct TraceLine {
    pub call: Call,
    /// Calls skipped by the rate limit just before this one.
    pub skipped_before: u64,
    /// Events were lost just before this line (the latest hole, its time relative to the epoch).
    pub hole_before: Option<Hole>,
    /// The call joined to this one (`--trace-join`'s THEN): its values complete the line.
    pub then: Option<Call>,
}

/// Where a value is among a target's fetches: every fetch of its label (a pair's STARTs may each have it; a
/// call holds the one of the START that opened it).
type Slots = Box<[usize]>;

fn index_of(fetches: &[Fetch], label: &Option<String>) -> Option<Slots> {
    let label = label.as_deref()?;
    let slots: Slots = (0..fetches.len())
        .filter(|&i| fetches[i].label == label)
        .collect();
    (!slots.is_empty()).then_some(slots)
}

/// The call's value in the first of `slots` that holds one.
fn first(call: &Call, slots: &[usize]) -> Option<Value> {
    slots
        .iter()
        .find_map(|&i| call.values.get(i).cloned().flatten())
}

impl Calls {
    /// Empty results for targets with these fetches.
    pub fn new(opts: CallOptions, fetches: &PerTarget<&[Fetch]>) -> Calls {
        let per_target = fetches.map(|f| TargetCalls {
            by: index_of(f, &opts.by),
            hist_of: index_of(f, &opts.hist_of),
            ..TargetCalls::default()
        });
        Calls {
            per_target,
            opts,
            ..Calls::default()
        }
    }

    /// The same settings, with nothing counted (for the next `-i` interval).
    pub fn take(&mut self) -> Calls {
        let fresh = Calls {
            opts: self.opts.clone(),
            per_target: self.per_target.map(|t| TargetCalls {
                by: t.by.clone(),
                hist_of: t.hist_of.clone(),
                ..TargetCalls::default()
            }),
            epoch: self.epoch,
            window: self.window,
            trace_header: self.trace_header,
            hole: self.hole.take(),
            join: self.join.as_mut().map(Join::take),
            perf_summary: std::mem::take(&mut self.perf_summary),
            ..Calls::default()
        };
        std::mem::replace(self, fresh)
    }

    /// Join the trace lines of `first` to the same thread's next line of `then` (`--trace-join`).
    pub fn join(&mut self, first: Vec<TargetId>, then: Vec<TargetId>) {
        self.join = Some(Join::new(first, then));
    }

    /// Thread `tid` ended: a line it had waiting for its join is traced alone.
    pub fn thread_exit(&mut self, tid: u32) {
        if let Some(j) = self.join.as_mut() {
            j.thread_exit(tid, &mut self.trace_lines);
        }
    }

    /// The lines waiting for their join too long (with `all`, every one) are traced alone.
    pub fn release_joins(&mut self, all: bool) {
        if let Some(j) = self.join.as_mut() {
            j.release(std::time::Instant::now(), all, &mut self.trace_lines);
        }
    }

    /// Events were lost: the next trace line follows a hole.
    pub fn hole(&mut self, hole: Hole) {
        if self.opts.trace {
            self.hole = Some(hole);
        }
    }

    /// The call's `--by` value, when it has one (not `caller`): a fetched value, or the process context's
    /// (`--by pid,comm`: its values joined by a space, as bcc's syscount -P shows PID and COMM).
    pub fn by_value(&self, call: &Call) -> Option<Value> {
        let by = self.opts.by.as_deref()?;
        match &self.per_target[call.target].by {
            Some(slots) => first(call, slots),
            None => call.ctx.value(by.split(',').next().unwrap_or(by)),
        }
    }

    /// `--by pid,comm`: the names after the first, the call's values of them joined by spaces (shown beside
    /// the first's, the latest of each row: a process is one row under the name it has last, as bcc's
    /// syscount -P shows it).
    fn by_more(&self, call: &Call) -> Option<String> {
        let (_, more) = self.opts.by.as_deref()?.split_once(',')?;
        let words: Vec<String> = more
            .split(',')
            .map(|n| call.ctx.value(n).map_or("-".into(), |v| v.word()))
            .collect();
        Some(words.join(" "))
    }

    /// The `--by` key of a call.
    fn key(&self, call: &Call) -> Key {
        let value = |slots: &[usize]| first(call, slots).map_or(Key::Missing, Key::Value);
        match &self.per_target[call.target].by {
            Some(i) if self.opts.by.as_deref() == Some("caller") => match &call.caller {
                Some(frames) => Key::Frames(Arc::clone(frames)),
                None => value(i),
            },
            Some(i) => value(i),
            None => self.by_value(call).map_or(Key::Missing, Key::Value),
        }
    }

    /// Count a call in its `--by` row (a new value past [`MAX_KEYS`] goes to [`Key::Other`]).
    fn add_keyed(&mut self, call: &Call) {
        let key = self.key(call);
        let t = &mut self.per_target[call.target];
        let key = if self.keyed.contains_key(&(call.target, key.clone())) {
            key
        } else if t.keys < MAX_KEYS {
            t.keys += 1;
            key
        } else {
            Key::Other
        };
        if let Some(more) = self.by_more(call) {
            self.by_shown.insert((call.target, key.clone()), more);
        }
        let unit = self.opts.hist_unit;
        let row = self
            .keyed
            .entry((call.target, key))
            .or_insert_with(|| FuncStats::with_hist_unit(unit));
        row.enter();
        if let Some((dur, own)) = call.dur {
            row.paired_call(dur, own);
        }
    }

    /// Apply one call: its `--by` row, its value histogram, the slow list and the trace.
    pub fn add(&mut self, call: &Call) {
        let epoch = *self.epoch.get_or_insert(call.time);
        if self.opts.by.is_some() {
            self.add_keyed(call);
        }
        let t = &mut self.per_target[call.target];
        let hist_value = match (&t.hist_of, &self.opts.hist_of) {
            (Some(slots), _) => first(call, slots),
            (None, Some(name)) => call.ctx.value(name),
            (None, None) => None,
        };
        if let Some(v) = hist_value.and_then(|v| v.as_u64()) {
            t.hist.record(v);
        }
        let kept = || Call {
            time: call.time - epoch.min(call.time),
            ..call.clone()
        };
        if let (Some(min), Some((dur, _))) = (self.opts.min_duration, call.dur) {
            if dur >= min {
                self.slow_count += 1;
                if self.slow.len() < MAX_SLOW {
                    self.slow.push(kept());
                }
            }
        }
        // With a trace format (a tool's lines), --min-duration chooses the calls traced.
        // perf trace's --duration: only the calls longer than it (so none that never returned).
        let slow_enough = match (&self.opts.trace_format, self.opts.min_duration) {
            (Some(_), Some(min)) => call.dur.is_some_and(|(d, _)| d >= min),
            (None, Some(min)) if self.opts.style == TraceStyle::PerfTrace => {
                call.dur.is_some_and(|(d, _)| d > min)
            }
            _ => true,
        };
        if self.opts.trace && slow_enough {
            // At most `trace_rate` lines per second of the run.
            let second = (call.time - epoch.min(call.time)) / 1_000_000_000;
            if self.window.0 != second {
                self.window = (second, 0);
            }
            let rate = self.opts.trace_rate;
            if rate == 0 || self.window.1 < rate {
                self.window.1 += 1;
                let skipped_before = std::mem::take(&mut self.trace_skipped);
                let hole_before = self.hole.take().map(|h| Hole {
                    after: h.after.saturating_sub(epoch),
                    until: h.until.saturating_sub(epoch),
                    ..h
                });
                let line = TraceLine {
                    call: kept(),
                    skipped_before,
                    hole_before,
                    then: None,
                };
                match self.join.as_mut() {
                    Some(j) => j.line(line, &mut self.trace_lines),
                    None => self.trace_lines.push(line),
                }
            } else {
                self.trace_skipped += 1;
                self.trace_skipped_total += 1;
            }
        }
    }
}

/// The array `NAME` of an element label `NAME[i]` (`argv:str[N]`'s values).
fn array_of(label: &str) -> Option<&str> {
    let (array, index) = label.strip_suffix(']')?.rsplit_once('[')?;
    index.parse::<u16>().ok().map(|_| array)
}

/// `name(label=value, ...)`, ` = ret` and the duration, as `--trace` and the slow list show a call; with
/// `present_only` (a pair of several STARTs, whose call holds the values of the one that opened it), the
/// entry's values that it holds only.
pub fn describe(
    name: &str,
    fetches: &[Fetch],
    call: &Call,
    caller_name: &dyn Fn(&Arc<[FrameId]>) -> String,
    present_only: bool,
) -> String {
    let mut s = String::new();
    let _ = write!(s, "{name}(");
    let mut first = true;
    // A string array (`argv:str[N]`) ends at its first empty string: the NULL after the last one (its
    // fetch faults) and whatever the memory past it holds.
    let mut ended: Option<&str> = None;
    for (f, v) in fetches.iter().zip(&call.values) {
        if f.on_return || (present_only && v.is_none()) {
            continue;
        }
        if let Some(array) = array_of(&f.label) {
            if ended == Some(array) {
                continue;
            }
            if matches!(v, Some(Value::Str(t)) if t.is_empty()) {
                ended = Some(array);
                continue;
            }
        }
        if !first {
            s.push_str(", ");
        }
        first = false;
        let shown = match (&call.caller, f.label.as_str()) {
            (Some(frames), "caller") => caller_name(frames),
            _ => v.as_ref().map_or("?".to_string(), Value::to_string),
        };
        let _ = write!(s, "{}={shown}", f.label);
    }
    s.push(')');
    let shown = |v: &Option<Value>| v.as_ref().map_or("?".to_string(), Value::to_string);
    // A return value as ` = V`; a pair's DONE values as ` -> (NAME=V, ...)`.
    let mut done = Vec::new();
    for (f, v) in fetches
        .iter()
        .zip(&call.values)
        .filter(|(f, _)| f.on_return)
    {
        match f.label.as_str() {
            "ret" => {
                let _ = write!(s, " = {}", shown(v));
            }
            label => done.push(format!("{label}={}", shown(v))),
        }
    }
    if !done.is_empty() {
        let _ = write!(s, " -> ({})", done.join(", "));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::spec::fetch::FetchType;

    fn fetches() -> Vec<Fetch> {
        vec![
            Fetch::new(
                "arg0",
                "v0".into(),
                "%di",
                FetchType::Int {
                    size: 8,
                    signed: true,
                },
                false,
            ),
            Fetch::new(
                "ret",
                "v1".into(),
                "$retval",
                FetchType::Int {
                    size: 8,
                    signed: true,
                },
                true,
            ),
        ]
    }

    fn call(values: &[Option<Value>], dur: u64, time: u64) -> Call {
        Call {
            dur: Some((dur, dur)),
            values: values.to_vec(),
            ..Call::entry(TargetId::new(0), 7, time)
        }
    }

    /// Check that `--by` splits counts and durations by value, and `--hist` bins the value.
    #[test]
    fn by_value_and_hist() {
        let f = fetches();
        let opts = CallOptions {
            by: Some("arg0".into()),
            hist_of: Some("ret".into()),
            top: 10,
            ..CallOptions::default()
        };
        let mut c = Calls::new(opts, &PerTarget::filled(1, f.as_slice()));
        for i in 0..10i64 {
            let v = [Some(Value::Int(i % 2)), Some(Value::Int(i * 2))];
            c.add(&call(&v, 100 + i as u64, i as u64));
        }
        let even = &c.keyed[&(TargetId::new(0), Key::Value(Value::Int(0)))];
        assert_eq!(
            (even.count, even.paired, even.total_ns),
            (5, 5, 100 + 102 + 104 + 106 + 108)
        );
        assert_eq!(c.per_target[TargetId::new(0)].hist.total(), 10);
    }

    /// Check that only slow calls are kept, with their values, and that the trace is rate-limited.
    #[test]
    fn slow_calls_and_trace_rate() {
        let f = fetches();
        let opts = CallOptions {
            min_duration: Some(1000),
            trace: true,
            trace_rate: 3,
            ..CallOptions::default()
        };
        let mut c = Calls::new(opts, &PerTarget::filled(1, f.as_slice()));
        for i in 0..10u64 {
            let v = [Some(Value::Int(i as i64)), Some(Value::Int(0))];
            c.add(&call(&v, if i % 5 == 0 { 5000 } else { 10 }, i));
        }
        assert_eq!(c.slow_count, 2);
        assert_eq!(c.slow[1].values[0], Some(Value::Int(5)));
        assert_eq!((c.trace_lines.len(), c.trace_skipped), (3, 7));
        assert_eq!(c.trace_skipped_total, 7);
        let line = describe("f", &f, &c.slow[1], &|_| String::new(), false);
        assert_eq!(line, "f(arg0=5) = 0");
    }
}
