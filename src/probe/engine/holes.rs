//! Where the streams of a session have holes, and what they cost.
//!
//! A ring that is full when an event comes loses it. perf says so with a LOST record (a count, and with
//! `sample_id_all` the time it was written, when the ring had room again); the tracefs ring, run in overwrite
//! mode, flags the first page read after events were overwritten (`RB_MISSED_EVENTS` in its commit word: with
//! overwrite off, Linux 6.18 only counts the drops in `per_cpu/cpuN/stats` and marks no page, so a hole could
//! not be placed in time). Either way the lost events lie between the last event read from that CPU's ring and
//! the event (or LOST record) after them: a [`Hole`] from `after` to `until`. The sink never pairs an entry and
//! a return around a hole (see [`crate::probe::analysis::Pairer`]).
//!
//! The same accounting gives the ring size that would have held what was written between two reads: the bytes
//! each CPU's ring received in a round (read, or lost at the round's mean event size), at their peak. The peak
//! rate is measured on the events' own timestamps (events read over the span of time they were written in), not
//! on the wall time between reads: the last drain after the target stopped reads a full ring at once, which
//! divided by a short round would give a rate the target never reached.
use crate::resolve::FastMap;
use std::time::Duration;

/// A hole in one CPU's stream: events were lost after `after` and before `until` (event times, ns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hole {
    pub cpu: u32,
    pub after: u64,
    pub until: u64,
    /// Events lost, when the ring says (perf's LOST records do; tracefs pages often have no room for it).
    pub count: Option<u64>,
}

/// The holes' costs and the rates read, per CPU ring and per round.
#[derive(Debug)]
pub struct Holes {
    /// The time of the last record read from each CPU's perf ring.
    last: FastMap<u32, u64>,
    /// This round, per CPU: events read, bytes read, events lost.
    round: FastMap<u32, (u64, u64, u64)>,
    /// The window the peak rate is measured over: events read, and the times of its first and last.
    window: (u64, u64, u64),
    /// Events lost (LOST records and the tracefs ring's counts).
    pub lost: u64,
    /// Holes found.
    pub holes: u64,
    /// The most bytes one CPU's ring received in one round (read or lost), or over the rounds it took to
    /// drain a backlog.
    pub peak_bytes: u64,
    /// Bytes each CPU's ring received since rings were last all drained.
    carried: FastMap<u32, u64>,
    /// A ring was left with records at the end of this round.
    behind: bool,
    /// The highest rate events were written at, all CPUs, over a window of at least [`MIN_ROUND`] of event
    /// time (the events read in it over the span of their timestamps).
    pub peak_rate: f64,
    /// Events read and the time spent reading and applying them (rprof's own throughput).
    pub read: u64,
    pub busy: Duration,
}

/// A rate is measured over at least this much event time (rounds read in less are added together).
const MIN_ROUND: u64 = 200_000;

impl Default for Holes {
    fn default() -> Self {
        Holes {
            last: FastMap::default(),
            round: FastMap::default(),
            window: (0, u64::MAX, 0),
            lost: 0,
            holes: 0,
            peak_bytes: 0,
            carried: FastMap::default(),
            behind: false,
            peak_rate: 0.0,
            read: 0,
            busy: Duration::ZERO,
        }
    }
}

impl Holes {
    /// A record of `bytes` written at `time` was read from CPU `cpu`'s ring.
    pub fn seen(&mut self, cpu: u32, time: u64, bytes: usize) {
        let last = self.last.entry(cpu).or_insert(0);
        *last = (*last).max(time);
        let r = self.round.entry(cpu).or_default();
        r.0 += 1;
        r.1 += bytes as u64;
        self.timed(time, time);
    }

    /// `events` of `bytes`, written from `first` to `last` (ns), were read from CPU `cpu`'s tracefs ring this
    /// round.
    pub fn ring_read(&mut self, cpu: u32, events: u64, bytes: u64, (first, last): (u64, u64)) {
        let r = self.round.entry(cpu).or_default();
        r.0 += events;
        r.1 += bytes;
        self.timed(first, last);
    }

    /// Widen the rate window to events written from `first` to `last`.
    fn timed(&mut self, first: u64, last: u64) {
        self.window.1 = self.window.1.min(first);
        self.window.2 = self.window.2.max(last);
    }

    /// A LOST record of `count` events, written at `time` into CPU `cpu`'s ring: the hole since the last record
    /// read from that ring.
    pub fn perf_lost(&mut self, cpu: u32, time: u64, count: u64) -> Hole {
        let after = self.last.get(&cpu).copied().unwrap_or(0);
        self.lost += count;
        self.holes += 1;
        self.round.entry(cpu).or_default().2 += count;
        Hole {
            cpu,
            after,
            until: time.max(after),
            count: Some(count),
        }
    }

    /// A tracefs ring page flagged lost events before it: a hole with no count (see [`Holes::ring_lost`]).
    pub fn ring_gap(&mut self, gap: crate::perf::Gap) -> Hole {
        self.holes += 1;
        Hole {
            cpu: gap.cpu,
            after: gap.after,
            until: gap.before.max(gap.after),
            count: None,
        }
    }

    /// Events the tracefs ring of CPU `cpu` lost this round (from its `stats`).
    pub fn ring_lost(&mut self, cpu: u32, count: u64) {
        self.lost += count;
        self.round.entry(cpu).or_default().2 += count;
    }

    /// The end of a round that took `spent` to read and apply: update the peaks.
    pub fn end_round(&mut self, spent: Duration) {
        self.busy += spent;
        // The rate counts the events read only: the tracefs ring's lost counts come in batches (read from
        // its `stats` when a page says events were lost), and have no times.
        let mut events = 0;
        for (cpu, (read, bytes, lost)) in &self.round {
            let mean = bytes.checked_div(*read).unwrap_or(64);
            *self.carried.entry(*cpu).or_default() += bytes + lost * mean;
            events += read;
            self.read += read;
        }
        // While rings are read a bounded round at a time, a ring's backlog is read over several rounds: what
        // it received counts from the round it fell behind to the round it was drained.
        if !std::mem::take(&mut self.behind) {
            for (_, received) in self.carried.drain() {
                self.peak_bytes = self.peak_bytes.max(received);
            }
        }
        self.window.0 += events;
        let (read, first, last) = self.window;
        // Rounds are added together until their events span MIN_ROUND: a round of a few events would give
        // noise. The events of a round are written between its first and last (a read drains the rings).
        if last > first && last - first >= MIN_ROUND {
            let rate = read.saturating_sub(1) as f64 / ((last - first) as f64 / 1e9);
            self.peak_rate = self.peak_rate.max(rate);
            self.window = (0, u64::MAX, 0);
        }
        self.round.clear();
    }

    /// A ring had records left at the end of this round (a bounded round): what each CPU's ring receives is
    /// added up over the rounds until none is left behind.
    pub fn left_behind(&mut self) {
        self.behind = true;
    }

    /// Events a second rprof read and applied while busy (None before enough were).
    pub fn capacity(&self) -> Option<f64> {
        (self.read >= 10_000 && !self.busy.is_zero())
            .then(|| self.read as f64 / self.busy.as_secs_f64())
    }

    /// The `--mmap-pages` (a power of two) that would have held the most one ring received between two reads.
    pub fn pages_needed(&self, page_size: usize) -> usize {
        (self.peak_bytes as usize)
            .div_ceil(page_size.max(1))
            .max(1)
            .next_power_of_two()
    }

    /// What the closing report says of the holes.
    pub fn summary(&self, page_size: usize) -> LossSummary {
        LossSummary {
            holes: self.holes,
            peak_rate: self.peak_rate,
            pages_needed: (self.holes > 0).then(|| self.pages_needed(page_size)),
            capacity: self.capacity(),
            counted: None,
        }
    }
}

/// What the closing report says of the holes: how many, the rate at its peak, the ring that would have held
/// it, and rprof's own reading rate (a rate above it is lost whatever the ring).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LossSummary {
    pub holes: u64,
    pub peak_rate: f64,
    pub pages_needed: Option<usize>,
    pub capacity: Option<f64>,
    /// The kernel's own count of the events that were counted (counters beside the rings, `--count`), when it
    /// covers every event the rings carried: the loss is then that count less the events read, exactly.
    pub counted: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that a LOST record's hole starts at the last record read from its CPU's ring, not another's.
    #[test]
    fn perf_hole_starts_at_its_ring() {
        let mut h = Holes::default();
        h.seen(0, 100, 64);
        h.seen(1, 300, 64);
        h.seen(0, 150, 64);
        let hole = h.perf_lost(0, 400, 7);
        assert_eq!((hole.after, hole.until, hole.count), (150, 400, Some(7)));
        assert_eq!((h.lost, h.holes), (7, 1));
        let other = h.perf_lost(2, 500, 1);
        assert_eq!(
            other.after, 0,
            "a ring never read: the hole starts at the beginning"
        );
    }

    /// Check that the peak rate comes from the events' timestamps: a final drain of a full ring read in a
    /// moment after the target stopped is not a burst (the wall time between reads was the old measure).
    #[test]
    fn peak_rate_from_event_times() {
        let mut h = Holes::default();
        // 1000 events written 1 us apart (1M events/s) over 1 ms, read in two rounds.
        for t in 0..500 {
            h.seen(0, 1_000_000 + t * 1000, 40);
        }
        h.end_round(Duration::from_micros(10));
        h.ring_read(1, 500, 20_000, (1_500_000, 1_999_000));
        h.end_round(Duration::from_micros(10));
        assert!((h.peak_rate - 1e6).abs() < 1e3, "{}", h.peak_rate);
        // The target stops for a second, then 100 events 10 us apart, drained in a round of no time.
        h.ring_read(0, 100, 4000, (3_000_000_000, 3_000_990_000));
        h.end_round(Duration::ZERO);
        assert!(
            (h.peak_rate - 1e6).abs() < 1e3,
            "the drain is no peak: {}",
            h.peak_rate
        );
        // A window shorter than MIN_ROUND waits for more events.
        let mut h = Holes::default();
        h.ring_read(0, 50, 2000, (0, 49_000));
        h.end_round(Duration::ZERO);
        assert_eq!(h.peak_rate, 0.0);
        h.ring_read(0, 151, 6040, (50_000, 200_000));
        h.end_round(Duration::ZERO);
        assert!((h.peak_rate - 1e6).abs() < 1e3, "{}", h.peak_rate);
    }

    /// Check that the pages needed hold the bytes read and lost in the busiest ring's round.
    #[test]
    fn pages_hold_the_peak_round() {
        let mut h = Holes::default();
        for t in 0..100 {
            h.seen(0, t, 40);
        }
        h.perf_lost(0, 200, 300);
        h.end_round(Duration::from_millis(1));
        // 100 x 40 read + 300 x 40 lost = 16,000 bytes: 4 pages of 4 KiB, a power of two.
        assert_eq!(h.peak_bytes, 16_000);
        assert_eq!(h.pages_needed(4096), 4);
    }

    /// Check that a backlog read over bounded rounds counts as what the ring received until it was drained.
    #[test]
    fn backlog_read_over_rounds_adds_up() {
        let mut h = Holes::default();
        for round in 0..3u64 {
            h.ring_read(0, 100, 4_000, (round * 10, round * 10 + 9));
            if round < 2 {
                h.left_behind();
            }
            h.end_round(Duration::from_millis(1));
            let want = if round < 2 { 0 } else { 12_000 };
            assert_eq!(h.peak_bytes, want, "round {round}");
        }
        h.ring_read(0, 100, 4_000, (40, 49));
        h.end_round(Duration::from_millis(1));
        assert_eq!(h.peak_bytes, 12_000, "a drained ring starts over");
    }
}
