//! Per-function statistics in bounded memory: count, total, self, min, max, a log2 histogram (`--hist`) and
//! the durations' quantiles.
use super::quantiles::Quantiles;
use crate::probe::target::PerTarget;

/// Number of log2 buckets: bucket 0 is unused, bucket `i` (1..=64) holds values in `[2^(i-1), 2^i - 1]`,
/// with 0 counted in bucket 1 (as bcc's `bpf_log2l` does).
pub const BUCKETS: usize = 65;

/// A log2 histogram, in funclatency's bucket layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Histogram {
    pub buckets: [u64; BUCKETS],
    /// Of durations: the nanoseconds one counted unit holds (1,000 for funclatency's `-u` usecs); values are
    /// divided by it before they are bucketed. 0 and 1: as they are.
    pub unit: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: [0; BUCKETS],
            unit: 1,
        }
    }
}

/// The bucket of a value: `floor(log2(v)) + 1`, and 1 for 0.
pub fn bucket_of(v: u64) -> usize {
    if v == 0 {
        1
    } else {
        (64 - v.leading_zeros()) as usize
    }
}

/// The inclusive value range of bucket `i` as funclatency prints it (`0 -> 1`, `2 -> 3`, `4 -> 7`, ...).
pub fn bucket_range(i: usize) -> (u64, u64) {
    let high = if i >= 64 { u64::MAX } else { (1u64 << i) - 1 };
    let low = (1u64 << (i.max(1) - 1)).min(high);
    if low == high {
        (low.saturating_sub(1), high)
    } else {
        (low, high)
    }
}

impl Histogram {
    /// Count one value.
    pub fn record(&mut self, v: u64) {
        self.buckets[bucket_of(v / self.unit.max(1))] += 1;
    }

    /// Number of values.
    pub fn total(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// Add another histogram's counts.
    pub fn merge(&mut self, other: &Histogram) {
        if self.total() == 0 {
            self.unit = other.unit;
        }
        for (a, b) in self.buckets.iter_mut().zip(other.buckets.iter()) {
            *a += b;
        }
    }
}

/// Statistics of one probed function (or syscall, or tracepoint).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FuncStats {
    /// Entries (calls, hits).
    pub count: u64,
    /// Calls whose return was seen and paired with their entry.
    pub paired: u64,
    /// Entries whose return never came (longjmp, exception, lost events, too deep for the kernel, a thread
    /// that exited mid-call).
    pub unpaired: u64,
    /// Entries whose return had not come when the run ended: still running (set for the last report).
    pub open: u64,
    /// Entries open across a hole in the stream (events lost): their return may be among the lost events, or a
    /// return after the hole another call's, so they are counted but never timed.
    pub timing_lost: u64,
    /// Sum of the paired calls' durations.
    pub total_ns: u64,
    /// `total_ns` minus the time spent in probed callees.
    pub self_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    /// funclatency's log2 histogram, for `--hist`.
    pub hist: Histogram,
    /// P50, P90, P99.
    pub latency: Quantiles,
}

impl FuncStats {
    /// Empty statistics whose duration histogram counts in `unit` nanoseconds.
    pub fn with_hist_unit(unit: u64) -> FuncStats {
        let mut f = FuncStats::default();
        f.hist.unit = unit;
        f
    }

    /// Count one entry.
    pub fn enter(&mut self) {
        self.count += 1;
    }

    /// Count one paired call of `dur_ns`, of which `self_ns` outside probed callees.
    pub fn paired_call(&mut self, dur_ns: u64, self_ns: u64) {
        if self.paired == 0 || dur_ns < self.min_ns {
            self.min_ns = dur_ns;
        }
        self.max_ns = self.max_ns.max(dur_ns);
        self.paired += 1;
        self.total_ns += dur_ns;
        self.self_ns += self_ns;
        self.hist.record(dur_ns);
        self.latency.record(dur_ns);
    }

    /// Average duration of the paired calls.
    pub fn avg_ns(&self) -> u64 {
        self.total_ns.checked_div(self.paired).unwrap_or(0)
    }

    /// The `q` quantile of the paired durations (exact for few calls, else within 0.8%), kept within
    /// [min, max].
    pub fn quantile(&self, q: f64) -> Option<u64> {
        self.latency
            .quantile(q)
            .map(|v| v.clamp(self.min_ns, self.max_ns))
    }

    /// Add another interval's statistics.
    pub fn merge(&mut self, o: &FuncStats) {
        if o.paired > 0 && (self.paired == 0 || o.min_ns < self.min_ns) {
            self.min_ns = o.min_ns;
        }
        self.max_ns = self.max_ns.max(o.max_ns);
        self.count += o.count;
        self.paired += o.paired;
        self.unpaired += o.unpaired;
        self.open += o.open;
        self.timing_lost += o.timing_lost;
        self.total_ns += o.total_ns;
        self.self_ns += o.self_ns;
        self.hist.merge(&o.hist);
        self.latency.merge(&o.latency);
    }
}

/// What keyed pairing did besides pairing (see `keyed`): every START is paired, replaced, dropped at the
/// cap, expired, or still open; every DONE is paired or alone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyedCounts {
    /// STARTs replaced by a later START of the same key (`--keep latest`).
    pub replaced: u64,
    /// STARTs of a key already open, dropped (`--keep first`).
    pub later: u64,
    /// STARTs dropped, oldest first, to keep the open ones under the cap.
    pub capped: u64,
    /// STARTs dropped for being older than the age limit.
    pub expired: u64,
    /// DONEs without an open START of their key (it came before probing began, was dropped, or never was).
    pub done_alone: u64,
    /// STARTs and DONEs whose key values could not be read.
    pub no_key: u64,
}

/// Statistics of every probe target of a run (or of one interval), indexed like the targets.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub funcs: PerTarget<FuncStats>,
    /// Events the kernel dropped (PERF_RECORD_LOST, the tracefs ring's counts).
    pub lost: u64,
    /// Holes in the stream: places where events were lost.
    pub holes: u64,
    /// Returns that came without a matching entry (calls already running when probing began, lost entries).
    pub orphan_returns: u64,
    /// Keyed pairing's drops and lone DONEs.
    pub keyed: KeyedCounts,
    /// The unit of the duration histograms, in nanoseconds (`--hist-unit`).
    pub hist_unit: u64,
}

impl Stats {
    /// Empty statistics for `n` targets.
    pub fn new(n: usize) -> Stats {
        Stats {
            funcs: PerTarget::filled(n, FuncStats::default()),
            lost: 0,
            holes: 0,
            orphan_returns: 0,
            keyed: KeyedCounts::default(),
            hist_unit: 1,
        }
    }

    /// Bucket the duration histograms in `unit` nanoseconds (1,000: usecs).
    pub fn set_hist_unit(&mut self, unit: u64) {
        self.hist_unit = unit;
        for f in self.funcs.values_mut() {
            f.hist.unit = unit;
        }
    }

    /// Total unpaired entries over all functions.
    pub fn unpaired(&self) -> u64 {
        self.funcs.values().map(|f| f.unpaired).sum()
    }

    /// Total calls whose timing was lost in a hole, over all functions.
    pub fn timing_lost(&self) -> u64 {
        self.funcs.values().map(|f| f.timing_lost).sum()
    }

    /// Total calls still running at the end over all functions.
    pub fn open(&self) -> u64 {
        self.funcs.values().map(|f| f.open).sum()
    }

    /// Take the counts so far and start a new interval from zero.
    pub fn take(&mut self) -> Stats {
        let mut next = Stats::new(self.funcs.len());
        next.set_hist_unit(self.hist_unit);
        std::mem::replace(self, next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that buckets follow bcc's log2 layout.
    #[test]
    fn log2_buckets() {
        assert_eq!(bucket_of(0), 1);
        assert_eq!(bucket_of(1), 1);
        assert_eq!(bucket_of(2), 2);
        assert_eq!(bucket_of(3), 2);
        assert_eq!(bucket_of(4), 3);
        assert_eq!(bucket_of(u64::MAX), 64);
        assert_eq!(bucket_range(1), (0, 1));
        assert_eq!(bucket_range(2), (2, 3));
        assert_eq!(bucket_range(3), (4, 7));
        assert_eq!(bucket_range(64), (1 << 63, u64::MAX));
    }

    /// Check that count, min, max, total and self add up, and that merging intervals gives the same result.
    #[test]
    fn func_stats_and_merge() {
        let mut a = FuncStats::default();
        a.enter();
        a.paired_call(100, 40);
        a.enter();
        a.paired_call(300, 300);
        let mut b = FuncStats::default();
        b.enter();
        b.paired_call(50, 50);
        b.enter();
        b.unpaired += 1;
        assert_eq!(
            (a.min_ns, a.max_ns, a.total_ns, a.self_ns, a.avg_ns()),
            (100, 300, 400, 340, 200)
        );
        a.merge(&b);
        assert_eq!(
            (a.count, a.paired, a.unpaired, a.min_ns, a.max_ns),
            (4, 3, 1, 50, 300)
        );
        assert_eq!(a.hist.total(), 3);
    }
}
