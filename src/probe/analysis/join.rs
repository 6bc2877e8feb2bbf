//! `--trace-join FIRST,THEN`: a trace line of FIRST waits for the same thread's next hit of THEN, and the two
//! are one line with the values of both. execsnoop's: `sched:sched_process_exec` (every exec, with its path)
//! and ld.so's `_dl_start` (the argv of a dynamically linked program, as it starts): a static program's exec
//! never reaches `_dl_start` and is printed alone, with its path, once its thread exits, execs again, or
//! [`WAIT`] has passed.
use super::calls::TraceLine;
use crate::probe::target::TargetId;
use crate::resolve::FastMap;
use std::time::{Duration, Instant};

/// How long a FIRST line waits for its THEN (ld.so starts within microseconds of the exec; a loaded machine
/// may delay it by a scheduling slice or a few).
pub const WAIT: Duration = Duration::from_millis(200);

/// The targets joined and the FIRST lines waiting, by thread.
#[derive(Debug, Default)]
pub struct Join {
    first: Vec<TargetId>,
    then: Vec<TargetId>,
    waiting: FastMap<u32, (Instant, TraceLine)>,
}

impl Join {
    /// Lines of `first` wait for the same thread's next line of `then`.
    pub fn new(first: Vec<TargetId>, then: Vec<TargetId>) -> Join {
        Join {
            first,
            then,
            waiting: FastMap::default(),
        }
    }

    /// A trace line: it waits (a FIRST), completes the thread's waiting FIRST (a THEN), or goes to `out` as it
    /// is. A FIRST that replaces a waiting one lets that one go first.
    pub fn line(&mut self, line: TraceLine, out: &mut Vec<TraceLine>) {
        let tid = line.call.tid;
        let target = line.call.target;
        if self.first.contains(&target) {
            if let Some((_, old)) = self.waiting.insert(tid, (Instant::now(), line)) {
                out.push(old);
            }
        } else if self.then.contains(&target) {
            match self.waiting.remove(&tid) {
                Some((_, mut head)) => {
                    head.then = Some(line.call);
                    out.push(head);
                }
                None => out.push(line),
            }
        } else {
            out.push(line);
        }
    }

    /// The thread ended: its waiting line, if any, goes to `out` alone.
    pub fn thread_exit(&mut self, tid: u32, out: &mut Vec<TraceLine>) {
        if let Some((_, line)) = self.waiting.remove(&tid) {
            out.push(line);
        }
    }

    /// The lines that waited longer than [`WAIT`] at `now` (all of them with `all`) go to `out` alone, oldest
    /// first.
    pub fn release(&mut self, now: Instant, all: bool, out: &mut Vec<TraceLine>) {
        let mut gone: Vec<(Instant, TraceLine)> = Vec::new();
        self.waiting.retain(|_, (at, line)| {
            let keep = !all && now.duration_since(*at) < WAIT;
            if !keep {
                gone.push((*at, line.clone()));
            }
            keep
        });
        gone.sort_by_key(|(_, l)| l.call.time);
        out.extend(gone.into_iter().map(|(_, l)| l));
    }

    /// The same targets, the waiting lines moved along (to the next `-i` interval's results).
    pub fn take(&mut self) -> Join {
        Join {
            first: self.first.clone(),
            then: self.then.clone(),
            waiting: std::mem::take(&mut self.waiting),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::analysis::Call;

    fn line(target: usize, tid: u32, time: u64) -> TraceLine {
        TraceLine {
            call: Call::entry(TargetId::new(target), tid, time),
            skipped_before: 0,
            hole_before: None,
            then: None,
        }
    }

    /// Check that a FIRST takes its thread's next THEN, and waits alone at most until its thread exits, the
    /// thread's next FIRST, or the release.
    #[test]
    fn first_waits_for_then() {
        let mut j = Join::new(vec![TargetId::new(0)], vec![TargetId::new(1)]);
        let mut out = Vec::new();
        j.line(line(0, 7, 1), &mut out);
        j.line(line(0, 8, 2), &mut out);
        j.line(line(2, 7, 3), &mut out);
        assert_eq!(out.len(), 1, "another target's line goes on");
        j.line(line(1, 7, 4), &mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(out[1].call.time, 1);
        assert_eq!(out[1].then.as_ref().map(|c| c.time), Some(4));
        j.line(line(1, 9, 5), &mut out);
        assert!(
            out[2].then.is_none() && out[2].call.time == 5,
            "a THEN alone"
        );
        j.line(line(0, 8, 6), &mut out);
        assert_eq!(out[3].call.time, 2, "a newer FIRST lets the older go");
        j.thread_exit(8, &mut out);
        assert_eq!(out[4].call.time, 6);
        j.line(line(0, 10, 7), &mut out);
        j.release(Instant::now(), false, &mut out);
        assert_eq!(out.len(), 5, "not yet");
        j.release(Instant::now() + WAIT, false, &mut out);
        assert_eq!(out.len(), 6);
    }
}
