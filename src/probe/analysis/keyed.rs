//! Pairing by key: a keyed pair's START opens a call under its key values (a request's device and sector, a
//! woken task's pid), and the DONE with equal key values closes it, on whatever thread or CPU it fires (a
//! completion interrupt, the scheduler switching the task in).
//!
//! Open STARTs are bounded: at most `max_open` (a START beyond drops the oldest) and none older than
//! `max_age` (dropped as later events pass them). A second START of an open key replaces the first, as bcc's
//! biolatency and runqlat do: the pair times the latest request of that key (or with `--keep first` is
//! dropped: the pair times from the first). A DONE without an open START is
//! counted, never turned into a duration. Every drop is counted in [`super::stats::KeyedCounts`]; a START
//! that a hole (lost events) followed is never timed: whatever ends it, it counts as `timing_lost`.
use super::calls::Call;
use super::stats::Stats;
use crate::probe::target::{Keep, TargetId};
use crate::probe::value::Value;
use crate::resolve::FastMap;
use std::collections::BTreeMap;

/// A pair's key: its target and the key values, in `--key` order.
type Key = (TargetId, Box<[Value]>);

/// The open STARTs of every keyed pair, by key and by age.
#[derive(Debug)]
pub struct KeyedPairer {
    max_open: usize,
    max_age_ns: u64,
    /// key -> (its place in `by_age`, the call its START opened).
    open: FastMap<Key, ((u64, u64), Call)>,
    /// (START time, sequence) -> key, oldest first.
    by_age: BTreeMap<(u64, u64), Key>,
    seq: u64,
    /// The latest end of the holes released so far: a START before it may have lost its DONE (and a DONE after
    /// it may close a later, lost START of the same key), so it is never timed.
    pub hole_end: u64,
}

impl KeyedPairer {
    /// No open STARTs; at most `max_open` kept, none older than `max_age_ns`.
    pub fn new(max_open: usize, max_age_ns: u64) -> KeyedPairer {
        KeyedPairer {
            max_open: max_open.max(1),
            max_age_ns,
            open: FastMap::default(),
            by_age: BTreeMap::new(),
            seq: 0,
            hole_end: 0,
        }
    }

    /// A START of `call.target` with these key values at `call.time`. Of an open key, it replaces the open
    /// START (`Keep::Latest`) or is dropped (`Keep::First`). Either way the call keeps a process context: a
    /// START in an interrupt (a socket's state change in softirq) takes the one of the START it replaces, and
    /// a dropped START in a process gives its own to an open one that has none.
    pub fn start(&mut self, stats: &mut Stats, mut call: Call, key: Box<[Value]>, keep: Keep) {
        stats.funcs[call.target].enter();
        self.expire(stats, call.time);
        let key = (call.target, key);
        if let Some((age, open)) = self.open.get_mut(&key) {
            let in_process = |c: &Call| c.ctx.tid.is_some();
            match keep {
                Keep::First => {
                    if !in_process(open) && in_process(&call) {
                        open.ctx = call.ctx;
                    }
                    stats.keyed.later += 1;
                    return;
                }
                Keep::Latest => {
                    if !in_process(&call) && in_process(open) {
                        call.ctx = open.ctx.clone();
                    }
                    let age = *age;
                    self.open.remove(&key);
                    self.by_age.remove(&age);
                    stats.keyed.replaced += 1;
                }
            }
        }
        if self.open.len() >= self.max_open {
            if let Some((_, oldest)) = self.by_age.pop_first() {
                self.open.remove(&oldest);
                stats.keyed.capped += 1;
            }
        }
        self.seq += 1;
        let age = (call.time, self.seq);
        self.by_age.insert(age, key.clone());
        self.open.insert(key, (age, call));
    }

    /// A DONE of `target` with these key values at `time`: the call it closes, with its duration.
    pub fn done(
        &mut self,
        stats: &mut Stats,
        target: TargetId,
        key: Box<[Value]>,
        time: u64,
    ) -> Option<Call> {
        self.expire(stats, time);
        let Some((age, mut call)) = self.open.remove(&(target, key)) else {
            stats.keyed.done_alone += 1;
            return None;
        };
        self.by_age.remove(&age);
        if call.time < self.hole_end {
            stats.funcs[target].timing_lost += 1;
            return None;
        }
        let dur = time.saturating_sub(call.time);
        stats.funcs[target].paired_call(dur, dur);
        call.dur = Some((dur, dur));
        Some(call)
    }

    /// Drop the STARTs older than the age limit at `now`: expired, or their timing lost when a hole came after
    /// them.
    fn expire(&mut self, stats: &mut Stats, now: u64) {
        let Some(limit) = now.checked_sub(self.max_age_ns) else {
            return;
        };
        while let Some(entry) = self.by_age.first_entry() {
            if entry.key().0 >= limit {
                break;
            }
            let ((time, _), key) = entry.remove_entry();
            self.open.remove(&key);
            match time < self.hole_end {
                true => stats.funcs[key.0].timing_lost += 1,
                false => stats.keyed.expired += 1,
            }
        }
    }

    /// STARTs still waiting for their DONE.
    pub fn open_calls(&self) -> usize {
        self.open.len()
    }

    /// Count the STARTs still open as `open` in their targets' statistics, or as `timing_lost` when a hole came
    /// after them (their DONE may be among the events lost: with keys used once, a lost DONE leaves its START
    /// open to the end).
    pub fn count_open(&self, stats: &mut Stats) {
        for ((target, _), (_, call)) in &self.open {
            match call.time < self.hole_end {
                true => stats.funcs[*target].timing_lost += 1,
                false => stats.funcs[*target].open += 1,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(i: usize) -> TargetId {
        TargetId::new(i)
    }

    fn key(v: &[i64]) -> Box<[Value]> {
        v.iter().map(|&x| Value::Int(x)).collect()
    }

    fn start(p: &mut KeyedPairer, s: &mut Stats, k: &[i64], time: u64, tid: u32) {
        p.start(s, Call::entry(t(0), tid, time), key(k), Keep::Latest);
    }

    /// Check that a DONE closes the START of its key whatever the thread, out of order between keys.
    #[test]
    fn pairs_by_key_across_threads() {
        let mut s = Stats::new(1);
        let mut p = KeyedPairer::new(100, 1_000_000);
        start(&mut p, &mut s, &[7, 100], 10, 1);
        start(&mut p, &mut s, &[7, 200], 20, 2);
        let b = p.done(&mut s, t(0), key(&[7, 200]), 50).unwrap();
        let a = p.done(&mut s, t(0), key(&[7, 100]), 60).unwrap();
        assert_eq!((a.tid, a.dur), (1, Some((50, 50))));
        assert_eq!((b.tid, b.dur), (2, Some((30, 30))));
        assert!(p.done(&mut s, t(0), key(&[7, 100]), 70).is_none());
        assert_eq!(s.keyed.done_alone, 1);
        assert_eq!((s.funcs[t(0)].count, s.funcs[t(0)].paired), (2, 2));
        assert_eq!(p.open_calls(), 0);
    }

    /// Check the bounds: a repeated key replaces its START, the cap drops the oldest, age expires STARTs,
    /// and each is counted.
    #[test]
    fn bounded_and_counted() {
        let mut s = Stats::new(1);
        let mut p = KeyedPairer::new(2, 1_000);
        start(&mut p, &mut s, &[1], 10, 1);
        start(&mut p, &mut s, &[1], 20, 1);
        assert_eq!(s.keyed.replaced, 1);
        assert_eq!(
            p.done(&mut s, t(0), key(&[1]), 25).unwrap().dur,
            Some((5, 5))
        );
        start(&mut p, &mut s, &[1], 30, 1);
        start(&mut p, &mut s, &[2], 40, 1);
        start(&mut p, &mut s, &[3], 50, 1);
        assert_eq!((s.keyed.capped, p.open_calls()), (1, 2));
        assert!(p.done(&mut s, t(0), key(&[1]), 60).is_none());
        // 2 (at 40) and 3 (at 50) are older than 1,000 at 1,051.
        start(&mut p, &mut s, &[4], 1_051, 1);
        assert_eq!((s.keyed.expired, p.open_calls()), (2, 1));
        assert_eq!(s.keyed.done_alone, 1);
    }

    /// Check that a START open across a hole is counted, not timed, and a START after it pairs.
    #[test]
    fn never_pairs_across_a_hole() {
        let mut s = Stats::new(1);
        let mut p = KeyedPairer::new(100, u64::MAX);
        start(&mut p, &mut s, &[1], 10, 1);
        p.hole_end = 50;
        assert!(p.done(&mut s, t(0), key(&[1]), 60).is_none());
        start(&mut p, &mut s, &[1], 70, 1);
        assert_eq!(
            p.done(&mut s, t(0), key(&[1]), 75).unwrap().dur,
            Some((5, 5))
        );
        let f = &s.funcs[t(0)];
        assert_eq!((f.count, f.paired, f.timing_lost, f.max_ns), (2, 1, 1, 5));
        // Keys used once: the DONE of a START before a hole is lost with it, and the START stays open.
        start(&mut p, &mut s, &[2], 80, 1);
        start(&mut p, &mut s, &[3], 90, 1);
        p.hole_end = 85;
        p.count_open(&mut s);
        let f = &s.funcs[t(0)];
        assert_eq!((f.timing_lost, f.open), (2, 1));
    }

    /// Check `Keep::First`: a later START of an open key is dropped (counted), the pair times from the first,
    /// and a START in a process gives its context to an open call opened in an interrupt; `Keep::Latest`
    /// keeps the replaced START's context when the new one has none.
    #[test]
    fn keep_first_and_context() {
        let mut s = Stats::new(1);
        let mut p = KeyedPairer::new(100, 1_000_000);
        let in_irq = Call::entry(t(0), 9, 10);
        let mut in_proc = Call::entry(t(0), 5, 20);
        in_proc.ctx.tid = Some(5);
        in_proc.ctx.pid = Some(5);
        p.start(&mut s, in_irq.clone(), key(&[1]), Keep::First);
        p.start(&mut s, in_proc.clone(), key(&[1]), Keep::First);
        let c = p.done(&mut s, t(0), key(&[1]), 50).unwrap();
        assert_eq!(
            (c.dur, c.ctx.pid, s.keyed.later),
            (Some((40, 40)), Some(5), 1)
        );
        p.start(&mut s, in_proc, key(&[2]), Keep::Latest);
        p.start(&mut s, Call::entry(t(0), 9, 30), key(&[2]), Keep::Latest);
        let c = p.done(&mut s, t(0), key(&[2]), 50).unwrap();
        assert_eq!(
            (c.dur, c.ctx.pid, s.keyed.replaced),
            (Some((20, 20)), Some(5), 1)
        );
    }

    /// Check that memory stays bounded when DONEs never come: the maps never pass the cap.
    #[test]
    fn never_done_stays_bounded() {
        let mut s = Stats::new(1);
        let mut p = KeyedPairer::new(1_000, u64::MAX);
        for i in 0..100_000 {
            start(&mut p, &mut s, &[i], i as u64, 1);
        }
        assert_eq!(p.open_calls(), 1_000);
        assert_eq!(p.by_age.len(), 1_000);
        assert_eq!(s.keyed.capped, 99_000);
    }
}
