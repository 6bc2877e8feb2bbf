//! Pairing entry and return events into calls, per thread, with a shadow stack.
//!
//! Events must arrive in time order (merged across CPU buffers). Each thread has a stack of open calls. With the
//! user stack pointer (`sp`) of both events, a return is matched exactly: at a uprobe on a function's first
//! instruction, SP points at the return address; after the return, SP is 8 bytes higher. So a return whose SP is
//! `s` closes the open call that entered with SP `s - 8`. Open calls deeper than that (a lower SP) never returned:
//! longjmp, an exception, the kernel's 64 pending uretprobes limit, or a lost event. They are counted as
//! unpaired, never turned into durations. Without SP (kernel functions, syscalls), the nearest open call of the
//! same probe is taken, and those above it are unpaired.
//!
//! Where the stream has a hole (events lost, see [`crate::probe::engine::holes`]), a return after it may belong
//! to an entry that was lost, and the return of an entry before it may be the one lost: an open call whose
//! entry came before the end of a hole is never given a duration. It is counted as `timing_lost` whatever ends
//! it (a return, a frame unwound past, its thread's exit, the end of the run).
use super::calls::Call;
use super::stats::Stats;
use crate::probe::target::{PerTarget, TargetId};
use crate::probe::value::Value;
use crate::resolve::FastMap;

/// Open calls kept per thread at most; beyond this the oldest are dropped as unpaired.
pub const MAX_DEPTH: usize = 4096;

/// Threads tracked before empty stacks are swept out of the map.
const SWEEP_THREADS: usize = 1024;

#[derive(Clone, Debug)]
struct OpenCall {
    sp: Option<u64>,
    /// Time spent in probed callees that returned (as reported: net with `--net`).
    child_ns: u64,
    /// The whole probe cost of the probed callees that returned (`--net`).
    child_cost: u64,
    /// The call as its entry made it (target, thread, entry time, values fetched at entry, caller, stack).
    call: Call,
}

/// What `--net` takes out of a target's durations: the bias of its probe (inside its own durations) and the
/// whole cost of its probe pair (inside its callers' durations).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetCost {
    pub bias_ns: u64,
    pub cost_ns: u64,
}

/// What a shadow stack belongs to: a thread, or (Go) a goroutine, which moves between threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StackKey {
    Thread(u32),
    Goroutine(u64),
}

/// The shadow stacks, one per thread (or goroutine).
#[derive(Debug, Default)]
pub struct Pairer {
    threads: FastMap<StackKey, Vec<OpenCall>>,
    /// `--net`: each target's probe bias and cost.
    net: Option<PerTarget<NetCost>>,
    /// The latest end of the holes released so far: calls entered before it were open across a hole.
    pub hole_end: u64,
}

/// Count an open call that ends without a duration: `timing_lost` when it was open across a hole (entered
/// before `hole_end`, and open when the hole was released), else unpaired.
fn count_dropped(stats: &mut Stats, call: &Call, hole_end: u64) {
    let f = &mut stats.funcs[call.target];
    if call.time < hole_end {
        f.timing_lost += 1;
    } else {
        f.unpaired += 1;
    }
}

/// A return event: its time, stack pointer and the values read at it.
pub struct Return {
    pub time: u64,
    pub sp: Option<u64>,
    pub values: Vec<Option<Value>>,
}

impl Pairer {
    /// No open calls; durations net of the probes' costs when `net` gives them.
    pub fn new(net: Option<PerTarget<NetCost>>) -> Pairer {
        Pairer {
            threads: FastMap::default(),
            net,
            hole_end: 0,
        }
    }

    /// A function entry: `call` as the entry makes it (its thread, entry time and what its return should get
    /// back), on the shadow stack `key`, with the user SP when known.
    pub fn entry(&mut self, stats: &mut Stats, call: Call, key: StackKey, sp: Option<u64>) {
        stats.funcs[call.target].enter();
        let stack = self.threads.entry(key).or_default();
        if let Some(sp) = sp {
            // Open calls at a lower address than a new entry are frames that were unwound without returning.
            drop_frames_below(stack, sp, stats, self.hole_end);
        }
        if stack.len() >= MAX_DEPTH {
            let old = stack.remove(0);
            count_dropped(stats, &old.call, self.hole_end);
        }
        stack.push(OpenCall {
            sp,
            child_ns: 0,
            child_cost: 0,
            call,
        });
    }

    /// A function return of `target` on the shadow stack `key` at `time`, with the user SP after the return
    /// when known. Returns the call it closes, with its duration.
    pub fn ret(
        &mut self,
        stats: &mut Stats,
        key: StackKey,
        target: TargetId,
        time: u64,
        sp: Option<u64>,
    ) -> Option<Call> {
        let ret = Return {
            time,
            sp,
            values: Vec::new(),
        };
        self.ret_with(stats, key, target, ret, &|_| true)
    }

    /// A return with its values: closes the open call as [`Pairer::ret`] does, unless `keep` rejects the call
    /// (its entry's values joined with the return's): then the call is forgotten, uncounted and untimed, as if
    /// a filter had rejected its entry.
    pub fn ret_with(
        &mut self,
        stats: &mut Stats,
        key: StackKey,
        target: TargetId,
        ret: Return,
        keep: &dyn Fn(&Call) -> bool,
    ) -> Option<Call> {
        let (time, sp) = (ret.time, ret.sp);
        let Some(stack) = self.threads.get_mut(&key) else {
            stats.orphan_returns += 1;
            return None;
        };
        let entry_sp = sp.map(|s| s.wrapping_sub(8));
        // The open call this return closes: the nearest one of the same probe, at the same SP when known.
        let found = stack.iter().rposition(|c| {
            c.call.target == target
                && match (c.sp, entry_sp) {
                    (Some(a), Some(b)) => a == b,
                    _ => true,
                }
        });
        let Some(idx) = found else {
            // No entry: it came before probing began or was lost. Frames below the returning one are gone.
            if let Some(esp) = entry_sp {
                drop_frames_below(stack, esp, stats, self.hole_end);
            }
            stats.orphan_returns += 1;
            return None;
        };
        for skipped in stack.drain(idx + 1..) {
            count_dropped(stats, &skipped.call, self.hole_end);
        }
        let mut open = stack.pop().expect("idx is in the stack");
        if open.call.time < self.hole_end {
            // Open across a hole: this return may be another call's (the entry's own return lost).
            stats.funcs[target].timing_lost += 1;
            return None;
        }
        open.call.join_return(ret.values);
        if !keep(&open.call) {
            let f = &mut stats.funcs[target];
            f.count = f.count.saturating_sub(1);
            return None;
        }
        let net = self.net.as_ref().map(|n| n[target]);
        let raw = time.saturating_sub(open.call.time);
        let dur = match net {
            Some(n) => raw.saturating_sub(n.bias_ns + open.child_cost),
            None => raw,
        };
        let self_ns = dur.saturating_sub(open.child_ns);
        stats.funcs[target].paired_call(dur, self_ns);
        if let Some(parent) = stack.last_mut() {
            parent.child_ns += dur;
            parent.child_cost += net.map_or(0, |n| n.cost_ns);
        }
        if stack.is_empty() && self.threads.len() > SWEEP_THREADS {
            self.threads.retain(|_, s| !s.is_empty());
        }
        let mut call = open.call;
        call.dur = Some((dur, self_ns));
        Some(call)
    }

    /// The calls open on thread `tid` (entered, not returned): what perf trace shows as `= ?` once it exits.
    pub fn open_on(&self, tid: u32) -> Vec<Call> {
        self.threads
            .get(&StackKey::Thread(tid))
            .map_or(Vec::new(), |s| s.iter().map(|c| c.call.clone()).collect())
    }

    /// A thread exited: its open calls will never return.
    pub fn thread_exit(&mut self, stats: &mut Stats, tid: u32) {
        if let Some(stack) = self.threads.remove(&StackKey::Thread(tid)) {
            for c in stack {
                count_dropped(stats, &c.call, self.hole_end);
            }
        }
    }

    /// Whether a call of `target` is open on `key`.
    pub fn is_open(&self, key: StackKey, target: TargetId) -> bool {
        self.threads
            .get(&key)
            .is_some_and(|s| s.iter().any(|c| c.call.target == target))
    }

    /// Calls still open (running at the end of the run, or waiting for a return that will never come).
    pub fn open_calls(&self) -> usize {
        self.threads.values().map(Vec::len).sum()
    }

    /// Count the calls still open as `open` in their targets' statistics (at the end of the run: every entry
    /// is then paired, unpaired, open, or lost its timing in a hole, as those open across one are counted).
    pub fn count_open(&self, stats: &mut Stats) {
        for c in self.threads.values().flatten() {
            match c.call.time < self.hole_end {
                true => stats.funcs[c.call.target].timing_lost += 1,
                false => stats.funcs[c.call.target].open += 1,
            }
        }
    }
}

/// Pop the open calls on top of `stack` whose SP is below `sp` (frames unwound without returning: longjmp,
/// exceptions, lost returns), counting each as unpaired.
fn drop_frames_below(stack: &mut Vec<OpenCall>, sp: u64, stats: &mut Stats, hole_end: u64) {
    while let Some(top) = stack.last() {
        match top.sp {
            Some(top_sp) if top_sp < sp => {
                count_dropped(stats, &top.call, hole_end);
                stack.pop();
            }
            _ => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(i: usize) -> TargetId {
        TargetId::new(i)
    }

    /// An entry of target `target` on thread `tid` at `time`.
    fn enter(p: &mut Pairer, s: &mut Stats, tid: u32, target: usize, time: u64, sp: Option<u64>) {
        p.entry(
            s,
            Call::entry(t(target), tid, time),
            StackKey::Thread(tid),
            sp,
        );
    }

    fn th(tid: u32) -> StackKey {
        StackKey::Thread(tid)
    }

    const SP: u64 = 0x7ffd_0000_1000;

    /// Check that nested calls pair exactly and that SELF excludes probed callees.
    #[test]
    fn nested_calls_and_self_time() {
        let mut s = Stats::new(2);
        let mut p = Pairer::new(None);
        enter(&mut p, &mut s, 1, 0, 100, Some(SP));
        enter(&mut p, &mut s, 1, 1, 110, Some(SP - 64));
        let _ = p.ret(&mut s, th(1), t(1), 150, Some(SP - 56));
        let _ = p.ret(&mut s, th(1), t(0), 200, Some(SP + 8));
        assert_eq!((s.funcs[t(0)].total_ns, s.funcs[t(0)].self_ns), (100, 60));
        assert_eq!((s.funcs[t(1)].total_ns, s.funcs[t(1)].self_ns), (40, 40));
        assert_eq!(s.unpaired(), 0);
        assert_eq!(p.open_calls(), 0);
    }

    /// Check that recursion gives each level its own duration.
    #[test]
    fn recursion() {
        let mut s = Stats::new(1);
        let mut p = Pairer::new(None);
        for d in 0..3u64 {
            enter(&mut p, &mut s, 7, 0, 10 * d, Some(SP - 32 * d));
        }
        for d in (0..3u64).rev() {
            let _ = p.ret(&mut s, th(7), t(0), 100 - 10 * d, Some(SP - 32 * d + 8));
        }
        let f = &s.funcs[t(0)];
        assert_eq!((f.count, f.paired, f.max_ns, f.min_ns), (3, 3, 100, 60));
        assert_eq!(f.self_ns, 60 + 20 + 20);
    }

    /// Check that a longjmp past open calls counts them as unpaired and later calls still pair.
    #[test]
    fn longjmp_skips_returns() {
        let mut s = Stats::new(2);
        let mut p = Pairer::new(None);
        // main-level caller 0 enters, 1 enters deeper, longjmp back: 1's return never comes.
        enter(&mut p, &mut s, 1, 0, 0, Some(SP));
        enter(&mut p, &mut s, 1, 1, 10, Some(SP - 100));
        let _ = p.ret(&mut s, th(1), t(0), 50, Some(SP + 8));
        assert_eq!((s.funcs[t(1)].unpaired, s.funcs[t(0)].paired), (1, 1));
        // A longjmp out of the outer call too: a new entry at a higher SP pops the stale frame.
        enter(&mut p, &mut s, 1, 1, 60, Some(SP - 100));
        enter(&mut p, &mut s, 1, 1, 70, Some(SP - 40));
        assert_eq!(s.funcs[t(1)].unpaired, 2);
        let _ = p.ret(&mut s, th(1), t(1), 75, Some(SP - 32));
        assert_eq!((s.funcs[t(1)].paired, s.funcs[t(1)].total_ns), (1, 5));
    }

    /// Check that a return without an entry is an orphan, and threads are independent.
    #[test]
    fn orphans_and_threads() {
        let mut s = Stats::new(1);
        let mut p = Pairer::new(None);
        let _ = p.ret(&mut s, th(1), t(0), 5, Some(SP));
        enter(&mut p, &mut s, 2, 0, 10, Some(SP));
        enter(&mut p, &mut s, 3, 0, 12, Some(SP));
        let _ = p.ret(&mut s, th(2), t(0), 20, Some(SP + 8));
        let _ = p.ret(&mut s, th(3), t(0), 30, Some(SP + 8));
        assert_eq!(s.orphan_returns, 1);
        assert_eq!((s.funcs[t(0)].paired, s.funcs[t(0)].total_ns), (2, 28));
    }

    /// Check that a tail call chain (two entries at the same SP) pairs both returns in LIFO order.
    #[test]
    fn tail_calls_share_sp() {
        let mut s = Stats::new(2);
        let mut p = Pairer::new(None);
        enter(&mut p, &mut s, 1, 0, 0, Some(SP));
        enter(&mut p, &mut s, 1, 1, 5, Some(SP));
        let _ = p.ret(&mut s, th(1), t(1), 20, Some(SP + 8));
        let _ = p.ret(&mut s, th(1), t(0), 20, Some(SP + 8));
        assert_eq!(
            (s.funcs[t(0)].paired, s.funcs[t(1)].paired, s.unpaired()),
            (1, 1, 0)
        );
    }

    /// Check that without SP (syscalls) the nearest entry of the same probe is taken.
    #[test]
    fn pairs_without_sp() {
        let mut s = Stats::new(2);
        let mut p = Pairer::new(None);
        enter(&mut p, &mut s, 1, 0, 0, None);
        enter(&mut p, &mut s, 1, 1, 5, None);
        let _ = p.ret(&mut s, th(1), t(0), 20, None);
        assert_eq!((s.funcs[t(0)].paired, s.funcs[t(1)].unpaired), (1, 1));
        enter(&mut p, &mut s, 1, 1, 30, None);
        p.thread_exit(&mut s, 1);
        assert_eq!(s.funcs[t(1)].unpaired, 2);
    }

    /// Check that at the end every entry is paired, unpaired or open: calls still running are counted open
    /// under their own targets.
    #[test]
    fn entries_are_paired_unpaired_or_open() {
        let mut s = Stats::new(2);
        let mut p = Pairer::new(None);
        enter(&mut p, &mut s, 1, 0, 0, Some(SP));
        enter(&mut p, &mut s, 1, 1, 5, Some(SP - 64));
        let _ = p.ret(&mut s, th(1), t(1), 9, Some(SP - 56));
        enter(&mut p, &mut s, 1, 1, 10, Some(SP - 64));
        enter(&mut p, &mut s, 2, 1, 11, Some(SP));
        p.count_open(&mut s);
        for f in s.funcs.values() {
            assert_eq!(f.count, f.paired + f.unpaired + f.open, "{f:?}");
        }
        assert_eq!((s.funcs[t(0)].open, s.funcs[t(1)].open), (1, 2));
        assert_eq!(s.open(), p.open_calls() as u64);
    }

    /// Check that `--net` takes a call's own bias out of its duration, and its probed callees' whole cost out
    /// of its caller's, so that self time is the caller's own.
    #[test]
    fn net_durations() {
        let mut s = Stats::new(2);
        let net = NetCost {
            bias_ns: 10,
            cost_ns: 30,
        };
        let mut p = Pairer::new(Some(PerTarget::filled(2, net)));
        // Outer: entry at 0, return at 200. Inner, within: 50..110 (true body 50 + its bias 10).
        enter(&mut p, &mut s, 1, 0, 0, Some(SP));
        enter(&mut p, &mut s, 1, 1, 50, Some(SP - 64));
        let _ = p.ret(&mut s, th(1), t(1), 110, Some(SP - 56));
        let _ = p.ret(&mut s, th(1), t(0), 200, Some(SP + 8));
        assert_eq!(s.funcs[t(1)].total_ns, 50);
        // 200 - 10 (own bias) - 30 (the inner call's probes) = 160, of which 50 in the inner call.
        assert_eq!((s.funcs[t(0)].total_ns, s.funcs[t(0)].self_ns), (160, 110));
    }

    /// Check that no call open across a hole is timed: a lost return, then a lost entry at the same SP,
    /// would otherwise pair the stale entry with the next call's return; every entry is still counted.
    #[test]
    fn never_pairs_across_a_hole() {
        let mut s = Stats::new(1);
        let mut p = Pairer::new(None);
        enter(&mut p, &mut s, 1, 0, 100, Some(SP));
        assert_eq!(
            p.ret(&mut s, th(1), t(0), 110, Some(SP + 8)).unwrap().dur,
            Some((10, 10))
        );
        enter(&mut p, &mut s, 1, 0, 200, Some(SP));
        // Events lost from 205 to 5,000: the return at ~210 and the next entry (~4,990) among them.
        p.hole_end = 5_000;
        assert!(p.ret(&mut s, th(1), t(0), 5_010, Some(SP + 8)).is_none());
        enter(&mut p, &mut s, 1, 0, 6_000, Some(SP));
        let after = p.ret(&mut s, th(1), t(0), 6_020, Some(SP + 8)).unwrap();
        assert_eq!(after.dur, Some((20, 20)));
        enter(&mut p, &mut s, 1, 0, 7_000, Some(SP));
        p.hole_end = 7_500;
        p.count_open(&mut s);
        let f = &s.funcs[t(0)];
        assert_eq!((f.count, f.paired, f.timing_lost, f.max_ns), (4, 2, 2, 20));
        assert_eq!(f.count, f.paired + f.unpaired + f.open + f.timing_lost);
    }

    /// Check that calls keyed by goroutine pair across threads: entered on thread 1, returned on thread 2.
    #[test]
    fn goroutines_move_between_threads() {
        let mut s = Stats::new(1);
        let mut p = Pairer::new(None);
        let g = StackKey::Goroutine(0x00c0_0000_1000);
        p.entry(&mut s, Call::entry(t(0), 1, 100), g, None);
        p.entry(&mut s, Call::entry(t(0), 1, 150), g, None);
        assert!(p.ret(&mut s, th(2), t(0), 160, None).is_none());
        let inner = p.ret(&mut s, g, t(0), 170, None).unwrap();
        let outer = p.ret(&mut s, g, t(0), 400, None).unwrap();
        assert_eq!((inner.dur, outer.dur), (Some((20, 20)), Some((300, 280))));
        p.thread_exit(&mut s, 1);
        assert_eq!(
            (s.funcs[t(0)].paired, s.unpaired(), s.orphan_returns),
            (2, 0, 1)
        );
    }
}
