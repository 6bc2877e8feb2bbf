//! Pairing entry and return events into calls, per thread, with a shadow stack.
//!
//! Events must arrive in time order (merged across CPU buffers). Each thread has a stack of open calls. With the
//! user stack pointer (`sp`) of both events, a return is matched exactly: at a uprobe on a function's first
//! instruction, SP points at the return address; after the return, SP is 8 bytes higher. So a return whose SP is
//! `s` closes the open call that entered with SP `s - 8`. Open calls deeper than that (a lower SP) never returned:
//! longjmp, an exception, the kernel's 64 pending uretprobes limit, or a lost event. They are counted as
//! unpaired, never turned into durations. Without SP (kernel functions, syscalls), the nearest open call of the
//! same probe is taken, and those above it are unpaired.
use super::stats::Stats;
use std::collections::HashMap;

/// Open calls kept per thread at most; beyond this the oldest are dropped as unpaired.
pub const MAX_DEPTH: usize = 4096;

/// Threads tracked before empty stacks are swept out of the map.
const SWEEP_THREADS: usize = 1024;

#[derive(Clone, Debug)]
struct OpenCall {
    probe: u32,
    time: u64,
    sp: Option<u64>,
    /// Time spent in probed callees that returned.
    child_ns: u64,
    /// What the entry carried for the call's consumers (values, stacks), when they want it.
    data: Option<Box<CallData>>,
}

/// What an entry carries to its return: the values fetched at entry (indexed like the target's fetches), the
/// caller's frames and the stack at entry.
#[derive(Clone, Debug, Default)]
pub struct CallData {
    pub values: Vec<Option<crate::probe::fetch::Value>>,
    pub caller: Option<std::sync::Arc<[crate::resolve::FrameId]>>,
    pub stack: Option<std::sync::Arc<[crate::resolve::FrameId]>>,
}

/// A call closed by its return.
#[derive(Debug)]
pub struct Closed {
    /// Entry time.
    pub time: u64,
    pub dur: u64,
    pub self_ns: u64,
    pub data: Option<Box<CallData>>,
}

/// The per-thread shadow stacks.
#[derive(Debug, Default)]
pub struct Pairer {
    threads: HashMap<u32, Vec<OpenCall>>,
}

impl Pairer {
    /// No open calls.
    pub fn new() -> Pairer {
        Pairer::default()
    }

    /// A function entry of `probe` on thread `tid` at `time` (ns), with the user SP when known, and what its
    /// return should get back.
    pub fn entry(
        &mut self,
        stats: &mut Stats,
        tid: u32,
        probe: u32,
        time: u64,
        sp: Option<u64>,
        data: Option<Box<CallData>>,
    ) {
        stats.funcs[probe as usize].enter();
        let stack = self.threads.entry(tid).or_default();
        if let Some(sp) = sp {
            // Open calls at a lower address than a new entry are frames that were unwound without returning.
            drop_frames_below(stack, sp, stats);
        }
        if stack.len() >= MAX_DEPTH {
            let old = stack.remove(0);
            stats.funcs[old.probe as usize].unpaired += 1;
        }
        stack.push(OpenCall {
            probe,
            time,
            sp,
            child_ns: 0,
            data,
        });
    }

    /// A function return of `probe` on thread `tid` at `time`, with the user SP after the return when known.
    /// Returns the call it closes.
    pub fn ret(
        &mut self,
        stats: &mut Stats,
        tid: u32,
        probe: u32,
        time: u64,
        sp: Option<u64>,
    ) -> Option<Closed> {
        let Some(stack) = self.threads.get_mut(&tid) else {
            stats.orphan_returns += 1;
            return None;
        };
        let entry_sp = sp.map(|s| s.wrapping_sub(8));
        // The open call this return closes: the nearest one of the same probe, at the same SP when known.
        let found = stack.iter().rposition(|c| {
            c.probe == probe
                && match (c.sp, entry_sp) {
                    (Some(a), Some(b)) => a == b,
                    _ => true,
                }
        });
        let Some(idx) = found else {
            // No entry: it came before probing began or was lost. Frames below the returning one are gone.
            if let Some(esp) = entry_sp {
                drop_frames_below(stack, esp, stats);
            }
            stats.orphan_returns += 1;
            return None;
        };
        for skipped in stack.drain(idx + 1..) {
            stats.funcs[skipped.probe as usize].unpaired += 1;
        }
        let call = stack.pop().expect("idx is in the stack");
        let dur = time.saturating_sub(call.time);
        let self_ns = dur.saturating_sub(call.child_ns);
        stats.funcs[probe as usize].paired_call(dur, self_ns);
        if let Some(parent) = stack.last_mut() {
            parent.child_ns += dur;
        }
        if stack.is_empty() && self.threads.len() > SWEEP_THREADS {
            self.threads.retain(|_, s| !s.is_empty());
        }
        Some(Closed {
            time: call.time,
            dur,
            self_ns,
            data: call.data,
        })
    }

    /// A thread exited: its open calls will never return.
    pub fn thread_exit(&mut self, stats: &mut Stats, tid: u32) {
        if let Some(stack) = self.threads.remove(&tid) {
            for c in stack {
                stats.funcs[c.probe as usize].unpaired += 1;
            }
        }
    }

    /// Calls still open (running at the end of the run, or waiting for a return that will never come).
    pub fn open_calls(&self) -> usize {
        self.threads.values().map(Vec::len).sum()
    }
}

/// Pop the open calls on top of `stack` whose SP is below `sp` (frames unwound without returning: longjmp,
/// exceptions, lost returns), counting each as unpaired.
fn drop_frames_below(stack: &mut Vec<OpenCall>, sp: u64, stats: &mut Stats) {
    while let Some(top) = stack.last() {
        match top.sp {
            Some(top_sp) if top_sp < sp => {
                stats.funcs[top.probe as usize].unpaired += 1;
                stack.pop();
            }
            _ => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SP: u64 = 0x7ffd_0000_1000;

    /// Check that nested calls pair exactly and that SELF excludes probed callees.
    #[test]
    fn nested_calls_and_self_time() {
        let mut s = Stats::new(2);
        let mut p = Pairer::new();
        p.entry(&mut s, 1, 0, 100, Some(SP), None);
        p.entry(&mut s, 1, 1, 110, Some(SP - 64), None);
        let _ = p.ret(&mut s, 1, 1, 150, Some(SP - 56));
        let _ = p.ret(&mut s, 1, 0, 200, Some(SP + 8));
        assert_eq!((s.funcs[0].total_ns, s.funcs[0].self_ns), (100, 60));
        assert_eq!((s.funcs[1].total_ns, s.funcs[1].self_ns), (40, 40));
        assert_eq!(s.unpaired(), 0);
        assert_eq!(p.open_calls(), 0);
    }

    /// Check that recursion gives each level its own duration.
    #[test]
    fn recursion() {
        let mut s = Stats::new(1);
        let mut p = Pairer::new();
        for d in 0..3u64 {
            p.entry(&mut s, 7, 0, 10 * d, Some(SP - 32 * d), None);
        }
        for d in (0..3u64).rev() {
            let _ = p.ret(&mut s, 7, 0, 100 - 10 * d, Some(SP - 32 * d + 8));
        }
        let f = &s.funcs[0];
        assert_eq!((f.count, f.paired, f.max_ns, f.min_ns), (3, 3, 100, 60));
        assert_eq!(f.self_ns, 60 + 20 + 20);
    }

    /// Check that a longjmp past open calls counts them as unpaired and later calls still pair.
    #[test]
    fn longjmp_skips_returns() {
        let mut s = Stats::new(2);
        let mut p = Pairer::new();
        // main-level caller 0 enters, 1 enters deeper, longjmp back: 1's return never comes.
        p.entry(&mut s, 1, 0, 0, Some(SP), None);
        p.entry(&mut s, 1, 1, 10, Some(SP - 100), None);
        let _ = p.ret(&mut s, 1, 0, 50, Some(SP + 8));
        assert_eq!((s.funcs[1].unpaired, s.funcs[0].paired), (1, 1));
        // A longjmp out of the outer call too: a new entry at a higher SP pops the stale frame.
        p.entry(&mut s, 1, 1, 60, Some(SP - 100), None);
        p.entry(&mut s, 1, 1, 70, Some(SP - 40), None);
        assert_eq!(s.funcs[1].unpaired, 2);
        let _ = p.ret(&mut s, 1, 1, 75, Some(SP - 32));
        assert_eq!((s.funcs[1].paired, s.funcs[1].total_ns), (1, 5));
    }

    /// Check that a return without an entry is an orphan, and threads are independent.
    #[test]
    fn orphans_and_threads() {
        let mut s = Stats::new(1);
        let mut p = Pairer::new();
        let _ = p.ret(&mut s, 1, 0, 5, Some(SP));
        p.entry(&mut s, 2, 0, 10, Some(SP), None);
        p.entry(&mut s, 3, 0, 12, Some(SP), None);
        let _ = p.ret(&mut s, 2, 0, 20, Some(SP + 8));
        let _ = p.ret(&mut s, 3, 0, 30, Some(SP + 8));
        assert_eq!(s.orphan_returns, 1);
        assert_eq!((s.funcs[0].paired, s.funcs[0].total_ns), (2, 28));
    }

    /// Check that a tail call chain (two entries at the same SP) pairs both returns in LIFO order.
    #[test]
    fn tail_calls_share_sp() {
        let mut s = Stats::new(2);
        let mut p = Pairer::new();
        p.entry(&mut s, 1, 0, 0, Some(SP), None);
        p.entry(&mut s, 1, 1, 5, Some(SP), None);
        let _ = p.ret(&mut s, 1, 1, 20, Some(SP + 8));
        let _ = p.ret(&mut s, 1, 0, 20, Some(SP + 8));
        assert_eq!(
            (s.funcs[0].paired, s.funcs[1].paired, s.unpaired()),
            (1, 1, 0)
        );
    }

    /// Check that without SP (syscalls) the nearest entry of the same probe is taken.
    #[test]
    fn pairs_without_sp() {
        let mut s = Stats::new(2);
        let mut p = Pairer::new();
        p.entry(&mut s, 1, 0, 0, None, None);
        p.entry(&mut s, 1, 1, 5, None, None);
        let _ = p.ret(&mut s, 1, 0, 20, None);
        assert_eq!((s.funcs[0].paired, s.funcs[1].unpaired), (1, 1));
        p.entry(&mut s, 1, 1, 30, None, None);
        p.thread_exit(&mut s, 1);
        assert_eq!(s.funcs[1].unpaired, 2);
    }
}
