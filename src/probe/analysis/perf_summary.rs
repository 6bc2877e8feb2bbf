//! `rprof trace -s`: perf trace -s's summary, per thread (`COMM (TID), N events, P%`) a table of its
//! syscalls with their calls, errors, total, min, avg and max in milliseconds and the relative standard
//! deviation of the mean, largest total first.
use super::Call;
use crate::probe::target::Targets;
use crate::probe::value::Value;
use std::collections::HashMap;
use std::io::{self, Write};

/// One syscall's calls on one thread (Welford's running mean and variance of the durations, in ns).
#[derive(Clone, Debug, Default)]
struct SyscallStats {
    calls: u64,
    errors: u64,
    total: f64,
    min: f64,
    max: f64,
    mean: f64,
    m2: f64,
}

impl SyscallStats {
    fn add(&mut self, ns: f64, error: bool) {
        self.calls += 1;
        self.errors += u64::from(error);
        self.total += ns;
        self.min = if self.calls == 1 {
            ns
        } else {
            self.min.min(ns)
        };
        self.max = self.max.max(ns);
        let delta = ns - self.mean;
        self.mean += delta / self.calls as f64;
        self.m2 += delta * (ns - self.mean);
    }

    /// perf's stddev column: the standard deviation of the mean, in percent of the mean.
    fn rel_stddev(&self) -> f64 {
        if self.calls < 2 || self.mean == 0.0 {
            return 0.0;
        }
        let variance_of_mean = self.m2 / (self.calls - 1) as f64 / self.calls as f64;
        100.0 * variance_of_mean.sqrt() / self.mean
    }
}

/// One thread's syscalls.
#[derive(Clone, Debug, Default)]
struct ThreadStats {
    comm: String,
    /// Entry and exit events (a call that never returned has one).
    events: u64,
    syscalls: HashMap<String, SyscallStats>,
}

/// The summary being gathered.
#[derive(Clone, Debug, Default)]
pub struct PerfSummary {
    threads: HashMap<u32, ThreadStats>,
    events: u64,
}

impl PerfSummary {
    /// Count one traced call.
    pub fn add(&mut self, call: &Call, targets: &Targets) {
        let t = &targets[call.target];
        let name = t.name.strip_prefix("syscall:").unwrap_or(&t.name);
        let thread = self
            .threads
            .entry(call.ctx.tid.unwrap_or(call.tid))
            .or_default();
        if let Some(comm) = &call.ctx.comm {
            thread.comm = comm.to_string();
        }
        let events = if call.dur.is_some() { 2 } else { 1 };
        thread.events += events;
        self.events += events;
        let Some((dur, _)) = call.dur else {
            return;
        };
        let error = t.fetches.iter().zip(&call.values).any(|(f, v)| {
            f.on_return
                && f.label == "ret"
                && matches!(v, Some(Value::Errno(r)) if *r < 0 && *r > -4096)
        });
        thread
            .syscalls
            .entry(name.to_string())
            .or_default()
            .add(dur as f64, error);
    }

    /// Write the summary as perf trace -s prints it.
    pub fn write(&self, w: &mut dyn Write) -> io::Result<()> {
        writeln!(w, "\n Summary of events:\n")?;
        let mut threads: Vec<(&u32, &ThreadStats)> = self.threads.iter().collect();
        threads.sort_by(|a, b| b.1.events.cmp(&a.1.events).then(a.0.cmp(b.0)));
        for (tid, t) in threads {
            let ratio = t.events as f64 * 100.0 / self.events.max(1) as f64;
            writeln!(w, " {} ({tid}), {} events, {ratio:.1}%", t.comm, t.events)?;
            writeln!(w)?;
            writeln!(
                w,
                "   syscall            calls  errors  total       min       avg       max       stddev"
            )?;
            writeln!(
                w,
                "                                     (msec)    (msec)    (msec)    (msec)        (%)"
            )?;
            writeln!(
                w,
                "   --------------- --------  ------ -------- --------- --------- ---------     ------"
            )?;
            let mut rows: Vec<(&String, &SyscallStats)> = t.syscalls.iter().collect();
            rows.sort_by(|a, b| b.1.total.total_cmp(&a.1.total).then(a.0.cmp(b.0)));
            for (name, s) in rows {
                let ms = |ns: f64| ns / 1e6;
                writeln!(
                    w,
                    "   {name:<15} {:>8} {:>6} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.2}%",
                    s.calls,
                    s.errors,
                    ms(s.total),
                    ms(s.min),
                    ms(s.mean),
                    ms(s.max),
                    s.rel_stddev()
                )?;
            }
            writeln!(w)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// perf's stddev column: 0 for one call; for durations 1, 2, 3 ms the deviation of the mean is
    /// sqrt(1/3) ms of a 2 ms mean.
    #[test]
    fn stddev_of_the_mean() {
        let mut s = SyscallStats::default();
        s.add(1e6, false);
        assert_eq!(s.rel_stddev(), 0.0);
        s.add(2e6, true);
        s.add(3e6, false);
        let want = 100.0 * (1.0f64 / 3.0).sqrt() / 2.0;
        assert!((s.rel_stddev() - want).abs() < 1e-9, "{}", s.rel_stddev());
        assert_eq!((s.calls, s.errors, s.min, s.max), (3, 1, 1e6, 3e6));
    }
}
