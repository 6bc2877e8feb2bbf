//! Pairing by key: a keyed pair's START opens a call under its key values (a request's device and sector, a
//! woken task's pid), and the DONE with equal key values closes it, on whatever thread or CPU it fires (a
//! completion interrupt, the scheduler switching the task in).
//!
//! Open STARTs are bounded: at most `max_open` (a START beyond drops the oldest) and none older than
//! `max_age` (dropped as later events pass them). A second START of an open key replaces the first, as bcc's
//! biolatency and runqlat do: the pair times the latest request of that key (or with `--keep first` is
//! dropped: the pair times from the first). A DONE without an open START is
//! counted, never turned into a duration. Every drop is counted in [`KeyedCounts`].
use super::calls::Call;
use super::stats::{KeyedCounts, Stats};
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
        }
    }

    /// A START of `call.target` with these key values at `call.time`. Of an open key, it replaces the open
    /// START (`Keep::Latest`) or is dropped (`Keep::First`). Either way the call keeps a process context: a
    /// START in an interrupt (a socket's state change in softirq) takes the one of the START it replaces, and
    /// a dropped START in a process gives its own to an open one that has none.
    pub fn start(&mut self, stats: &mut Stats, mut call: Call, key: Box<[Value]>, keep: Keep) {
        stats.funcs[call.target].enter();
        self.expire(&mut stats.keyed, call.time);
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
        self.expire(&mut stats.keyed, time);
        let Some((age, mut call)) = self.open.remove(&(target, key)) else {
            stats.keyed.done_alone += 1;
            return None;
        };
        self.by_age.remove(&age);
        let dur = time.saturating_sub(call.time);
        stats.funcs[target].paired_call(dur, dur);
        call.dur = Some((dur, dur));
        Some(call)
    }

    /// Drop the STARTs older than the age limit at `now`.
    fn expire(&mut self, counts: &mut KeyedCounts, now: u64) {
        let Some(limit) = now.checked_sub(self.max_age_ns) else {
            return;
        };
        while let Some(entry) = self.by_age.first_entry() {
            if entry.key().0 >= limit {
                break;
            }
            let key = entry.remove();
            self.open.remove(&key);
            counts.expired += 1;
        }
    }

    /// STARTs still waiting for their DONE.
    pub fn open_calls(&self) -> usize {
        self.open.len()
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
