//! What `rprof probe` does with each call beyond counting and timing it: rows split by a fetched value
//! (`--by`, `--callers`), log2 histograms of a value (`--hist VALUE`), the list of slow calls
//! (`--min-duration`), and one line per call (`--trace`). Everything is bounded: [`MAX_KEYS`] distinct values
//! per function, [`MAX_SLOW`] listed slow calls, and a trace rate.
use super::fetch::{Fetch, Value};
use super::stats::{FuncStats, Histogram};
use crate::resolve::FrameId;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

/// Distinct values kept per function for `--by`; calls with further values go to the function's `[other]` row.
pub const MAX_KEYS: usize = 10_000;
/// Slow calls listed at most; more are only counted.
pub const MAX_SLOW: usize = 10_000;

/// What to do with each call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallOptions {
    /// `--by VALUE` / `--callers`: split each function's row by this value (a fetch label).
    pub by: Option<String>,
    /// `--hist VALUE`: a log2 histogram of this value per function.
    pub hist_of: Option<String>,
    /// `--trace`: one line per call.
    pub trace: bool,
    /// Trace lines per second of the run at most (the rest is counted).
    pub trace_rate: u64,
    /// `--min-duration`: list the calls at least this long (ns).
    pub min_duration: Option<u64>,
    /// Rows per function shown with `--by` (the rest is summed into `[other]`).
    pub top: usize,
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

/// One call, as the pairing closes it (or as an entry, for untimed probes).
#[derive(Clone, Debug)]
pub struct Call<'a> {
    pub target: u32,
    pub tid: u32,
    /// Entry time (ns, the session clock).
    pub time: u64,
    /// Duration and self time, for paired calls.
    pub dur: Option<(u64, u64)>,
    /// The values, indexed like the target's fetches.
    pub values: &'a [Option<Value>],
    /// The caller's frames (for `caller`), and the stack at entry (`-g` with `--min-duration`).
    pub caller: Option<Arc<[FrameId]>>,
    pub stack: Option<Arc<[FrameId]>>,
}

/// A slow call, kept for the report.
#[derive(Clone, Debug)]
pub struct SlowCall {
    pub target: u32,
    pub tid: u32,
    pub time: u64,
    pub dur: u64,
    pub values: Vec<Option<Value>>,
    pub caller: Option<Arc<[FrameId]>>,
    pub stack: Option<Arc<[FrameId]>>,
}

/// The per-call results of a run or interval.
#[derive(Debug, Default)]
pub struct Calls {
    pub opts: CallOptions,
    /// Per target: the index of the `--by` and `--hist` values in its fetches.
    by_index: Vec<Option<usize>>,
    hist_index: Vec<Option<usize>>,
    /// (target, key) -> statistics.
    pub keyed: HashMap<(u32, Key), FuncStats>,
    keys_per_target: Vec<usize>,
    pub hists: Vec<Histogram>,
    pub slow: Vec<SlowCall>,
    /// Calls at or above the minimum duration, listed or not.
    pub slow_count: u64,
    /// Trace lines waiting to be written, and calls not traced because of the rate limit.
    pub trace_lines: Vec<TraceLine>,
    pub trace_skipped: u64,
    window: (u64, u64),
    /// The time the first event came (trace times are relative to it).
    pub epoch: Option<u64>,
}

/// One `--trace` call, formatted when written (its caller's name may need the resolver).
#[derive(Clone, Debug)]
pub struct TraceLine {
    pub call: SlowCall,
    /// Calls skipped by the rate limit just before this one.
    pub skipped_before: u64,
}

fn index_of(fetches: &[Fetch], label: &Option<String>) -> Option<usize> {
    let label = label.as_deref()?;
    fetches.iter().position(|f| f.label == label)
}

impl Calls {
    /// Empty results for targets with these fetches.
    pub fn new(opts: CallOptions, fetches: &[&[Fetch]]) -> Calls {
        Calls {
            by_index: fetches.iter().map(|f| index_of(f, &opts.by)).collect(),
            hist_index: fetches.iter().map(|f| index_of(f, &opts.hist_of)).collect(),
            keys_per_target: vec![0; fetches.len()],
            hists: vec![Histogram::default(); fetches.len()],
            opts,
            ..Calls::default()
        }
    }

    /// The same settings, with nothing counted (for the next `-i` interval).
    pub fn take(&mut self) -> Calls {
        let fresh = Calls {
            opts: self.opts.clone(),
            by_index: self.by_index.clone(),
            hist_index: self.hist_index.clone(),
            keys_per_target: vec![0; self.keys_per_target.len()],
            hists: vec![Histogram::default(); self.hists.len()],
            epoch: self.epoch,
            window: self.window,
            ..Calls::default()
        };
        std::mem::replace(self, fresh)
    }

    /// Apply one call: its `--by` row, its value histogram, the slow list and the trace.
    pub fn add(&mut self, call: &Call) {
        let t = call.target as usize;
        let epoch = *self.epoch.get_or_insert(call.time);
        if self.opts.by.is_some() {
            let key = match self.by_index.get(t).copied().flatten() {
                Some(i) if self.opts.by.as_deref() == Some("caller") => match &call.caller {
                    Some(frames) => Key::Frames(Arc::clone(frames)),
                    None => call
                        .values
                        .get(i)
                        .cloned()
                        .flatten()
                        .map_or(Key::Missing, Key::Value),
                },
                Some(i) => call
                    .values
                    .get(i)
                    .cloned()
                    .flatten()
                    .map_or(Key::Missing, Key::Value),
                None => Key::Missing,
            };
            let key = if self.keyed.contains_key(&(call.target, key.clone())) {
                key
            } else if self.keys_per_target[t] < MAX_KEYS {
                self.keys_per_target[t] += 1;
                key
            } else {
                Key::Other
            };
            let row = self.keyed.entry((call.target, key)).or_default();
            row.enter();
            if let Some((dur, own)) = call.dur {
                row.paired_call(dur, own);
            }
        }
        if let Some(i) = self.hist_index.get(t).copied().flatten() {
            if let Some(v) = call
                .values
                .get(i)
                .cloned()
                .flatten()
                .and_then(|v| v.as_u64())
            {
                self.hists[t].record(v);
            }
        }
        let kept = || SlowCall {
            target: call.target,
            tid: call.tid,
            time: call.time - epoch.min(call.time),
            dur: call.dur.map_or(0, |d| d.0),
            values: call.values.to_vec(),
            caller: call.caller.clone(),
            stack: call.stack.clone(),
        };
        if let (Some(min), Some((dur, _))) = (self.opts.min_duration, call.dur) {
            if dur >= min {
                self.slow_count += 1;
                if self.slow.len() < MAX_SLOW {
                    self.slow.push(kept());
                }
            }
        }
        if self.opts.trace {
            // At most `trace_rate` lines per second of the run.
            let second = (call.time - epoch.min(call.time)) / 1_000_000_000;
            if self.window.0 != second {
                self.window = (second, 0);
            }
            if self.window.1 < self.opts.trace_rate.max(1) {
                self.window.1 += 1;
                let skipped_before = std::mem::take(&mut self.trace_skipped);
                self.trace_lines.push(TraceLine {
                    call: kept(),
                    skipped_before,
                });
            } else {
                self.trace_skipped += 1;
            }
        }
    }
}

/// `name(label=value, ...)`, ` = ret` and the duration, as `--trace` and the slow list show a call.
pub fn describe(
    name: &str,
    fetches: &[Fetch],
    call: &SlowCall,
    caller_name: &dyn Fn(&Arc<[FrameId]>) -> String,
) -> String {
    let mut s = String::new();
    let _ = write!(s, "{name}(");
    let mut first = true;
    for (f, v) in fetches.iter().zip(&call.values) {
        if f.on_return {
            continue;
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
    for (f, v) in fetches.iter().zip(&call.values) {
        if f.on_return {
            let _ = write!(
                s,
                " = {}",
                v.as_ref().map_or("?".to_string(), Value::to_string)
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::fetch::FetchType;

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

    fn call(values: &[Option<Value>], dur: u64, time: u64) -> Call<'_> {
        Call {
            target: 0,
            tid: 7,
            time,
            dur: Some((dur, dur)),
            values,
            caller: None,
            stack: None,
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
        let mut c = Calls::new(opts, &[&f]);
        for i in 0..10i64 {
            let v = [Some(Value::Int(i % 2)), Some(Value::Int(i * 2))];
            c.add(&call(&v, 100 + i as u64, i as u64));
        }
        let even = &c.keyed[&(0, Key::Value(Value::Int(0)))];
        assert_eq!(
            (even.count, even.paired, even.total_ns),
            (5, 5, 100 + 102 + 104 + 106 + 108)
        );
        assert_eq!(c.hists[0].total(), 10);
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
        let mut c = Calls::new(opts, &[&f]);
        for i in 0..10u64 {
            let v = [Some(Value::Int(i as i64)), Some(Value::Int(0))];
            c.add(&call(&v, if i % 5 == 0 { 5000 } else { 10 }, i));
        }
        assert_eq!(c.slow_count, 2);
        assert_eq!(c.slow[1].values[0], Some(Value::Int(5)));
        assert_eq!((c.trace_lines.len(), c.trace_skipped), (3, 7));
        let line = describe("f", &f, &c.slow[1], &|_| String::new());
        assert_eq!(line, "f(arg0=5) = 0");
    }
}
