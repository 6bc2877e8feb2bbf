//! Off-CPU time while recording (`rprof record --off-cpu`): the `context-switches` event samples each thread's
//! stack as it leaves a CPU, and its switch records say when it left (and whether it was preempted, still
//! runnable, or blocked) and when it came back. Records arrive here in time order, across CPUs (a thread often
//! leaves on one CPU and comes back on another), and the state is kept per thread, never per CPU.
//!
//! Each blocked interval becomes weight on the stack it blocked at: an `offcpu-time` sample whose period is the
//! nanoseconds off CPU (perf's `--off-cpu` writes the same event). So that a program switching 100,000 times
//! a second does not write 100,000 samples a second, a thread's consecutive intervals at the same stack are
//! summed into one sample, written when the stack changes, when [`WINDOW`] has passed since the first of them,
//! or when the thread ends. No interval is dropped or shortened, so short waits keep their true weight (a
//! minimum wait time would skew them). A sample is written at the time of the record that closed it, so the
//! file stays in time order.
//!
//! Preempted intervals (the thread was runnable, the CPU went to another) are not waits of the program: they
//! are counted in [`OffCpuStats::preempted_ns`] but not written. A thread whose first record is a switch-in
//! (it went off CPU before recording started) has no known stack: that first wait is not counted either.
//!
//! By default every switch-out carries its stack. Taking a stack costs a thread that switches a hundred
//! thousand times a second more than the switch itself, so `--off-cpu-stack-hz` samples the stacks instead
//! (the `context-switches` event in frequency mode), while the switch records still time every wait. A wait
//! whose switch-out has no stack sample is then charged to the thread's last sampled stack, as a CPU sample
//! stands for the time since the one before; [`OffCpuStats::estimated`] counts them.
use crate::recording::SampleFields;
use std::collections::HashMap;
use std::rc::Rc;

/// Intervals of one thread at one stack within this many nanoseconds are written as one sample.
pub(super) const WINDOW: u64 = 10_000_000;

/// What the off-CPU accounting saw.
#[derive(Clone, Copy, Debug, Default)]
pub struct OffCpuStats {
    /// Blocked intervals, and their total time in nanoseconds (written as samples).
    pub blocked: u64,
    pub blocked_ns: u64,
    /// Preempted intervals (runnable, waiting for a CPU), and their total time: not written.
    pub preempted: u64,
    pub preempted_ns: u64,
    /// `offcpu-time` samples written.
    pub samples: u64,
    /// Blocked intervals whose switch-out was not sampled, charged to the thread's last sampled stack.
    pub estimated: u64,
    /// Intervals with no stack to charge: no stack of the thread was sampled before (it was already off CPU
    /// when recording started, or its samples were lost).
    pub unattributed: u64,
}

/// Where a thread went off CPU.
struct Out {
    /// The switch-out sample: the stack, pid, tid, cpu and id to charge.
    sample: Rc<SampleFields>,
    /// When it left the CPU (the switch record's time, else the sample's).
    since: u64,
    preempted: bool,
}

/// Blocked time summed at one stack, not yet written.
struct Pending {
    sample: Rc<SampleFields>,
    first: u64,
    weight: u64,
}

#[derive(Default)]
struct Thread {
    out: Option<Out>,
    pending: Option<Pending>,
    /// The last stack sampled at a switch-out of this thread.
    last: Option<Rc<SampleFields>>,
}

/// The per-thread off-CPU state machine.
#[derive(Default)]
pub(super) struct OffCpu {
    threads: HashMap<u32, Thread>,
    pub(super) stats: OffCpuStats,
    /// The newest time seen (where waits still open at the end are closed).
    last_time: u64,
}

impl OffCpu {
    /// The `context-switches` sample of a thread leaving the CPU (its stack is where it waits).
    pub(super) fn switch_sample(&mut self, sample: SampleFields) {
        self.last_time = self.last_time.max(sample.time);
        if sample.tid == 0 {
            return; // the idle task
        }
        let (since, tid) = (sample.time, sample.tid);
        let sample = Rc::new(sample);
        let thread = self.threads.entry(tid).or_default();
        thread.last = Some(Rc::clone(&sample));
        thread.out = Some(Out {
            sample,
            since,
            preempted: false,
        });
    }

    /// A switch record of thread `tid` at `time`: leaving the CPU (`out`, `preempted` when still runnable) or
    /// coming back. Returns the samples to write.
    pub(super) fn switch(
        &mut self,
        tid: u32,
        time: u64,
        out: bool,
        preempted: bool,
        emit: &mut impl FnMut(SampleFields),
    ) {
        self.last_time = self.last_time.max(time);
        if tid == 0 {
            return;
        }
        let thread = self.threads.entry(tid).or_default();
        if out {
            match &mut thread.out {
                // The sample came first (it is taken before the switch record); the record's time is closer
                // to the switch itself.
                Some(o) if o.since <= time && time - o.since < SAME_SWITCH => {
                    o.since = time;
                    o.preempted = preempted;
                }
                // A switch-out whose stack was not sampled: the thread's last sampled stack stands for it.
                _ => {
                    thread.out = thread.last.as_ref().map(|sample| Out {
                        sample: Rc::clone(sample),
                        since: time,
                        preempted,
                    });
                    match &thread.out {
                        Some(_) => self.stats.estimated += (!preempted) as u64,
                        None => self.stats.unattributed += (!preempted) as u64,
                    }
                }
            }
            return;
        }
        if let Some(o) = thread.out.take() {
            close(thread, o, time, &mut self.stats, emit);
        }
    }

    /// Thread `tid` ended at `time`: a wait still open ends here, and what is pending is written.
    pub(super) fn exit(&mut self, tid: u32, time: u64, emit: &mut impl FnMut(SampleFields)) {
        self.last_time = self.last_time.max(time);
        if let Some(mut thread) = self.threads.remove(&tid) {
            if let Some(o) = thread.out.take() {
                close(&mut thread, o, time, &mut self.stats, emit);
            }
            flush(&mut thread, time, &mut self.stats, emit);
        }
    }

    /// Write what has been pending longer than [`WINDOW`] (called after each round's records).
    pub(super) fn flush_old(&mut self, emit: &mut impl FnMut(SampleFields)) {
        let now = self.last_time;
        for thread in self.threads.values_mut() {
            if thread
                .pending
                .as_ref()
                .is_some_and(|p| now.saturating_sub(p.first) >= WINDOW)
            {
                flush(thread, now, &mut self.stats, emit);
            }
        }
    }

    /// Recording ends: waits still open are counted up to the last time seen, and everything is written.
    pub(super) fn finish(&mut self, emit: &mut impl FnMut(SampleFields)) {
        let now = self.last_time;
        let mut tids: Vec<u32> = self.threads.keys().copied().collect();
        tids.sort_unstable();
        for tid in tids {
            let thread = self.threads.get_mut(&tid).expect("listed");
            if let Some(o) = thread.out.take() {
                close(thread, o, now, &mut self.stats, emit);
            }
            flush(thread, now, &mut self.stats, emit);
        }
        self.threads.clear();
    }
}

/// A switch record this close after a switch-out sample belongs to the same switch (the kernel writes the
/// sample, then the record, microseconds apart).
const SAME_SWITCH: u64 = 1_000_000;

/// The wait `o` ended at `time`: charge it (blocked) or count it (preempted).
fn close(
    thread: &mut Thread,
    o: Out,
    time: u64,
    stats: &mut OffCpuStats,
    emit: &mut impl FnMut(SampleFields),
) {
    let ns = time.saturating_sub(o.since);
    if o.preempted {
        stats.preempted += 1;
        stats.preempted_ns += ns;
        return;
    }
    stats.blocked += 1;
    stats.blocked_ns += ns;
    let same = thread.pending.as_ref().is_some_and(|p| {
        (Rc::ptr_eq(&p.sample, &o.sample)
            || (p.sample.callchain == o.sample.callchain && p.sample.ip == o.sample.ip))
            && time.saturating_sub(p.first) < WINDOW
    });
    if !same {
        flush(thread, time, stats, emit);
        thread.pending = Some(Pending {
            sample: o.sample,
            first: o.since,
            weight: 0,
        });
    }
    if let Some(p) = &mut thread.pending {
        p.weight += ns;
    }
}

/// Write the thread's pending sample, timed `time`.
fn flush(
    thread: &mut Thread,
    time: u64,
    stats: &mut OffCpuStats,
    emit: &mut impl FnMut(SampleFields),
) {
    let Some(p) = thread.pending.take() else {
        return;
    };
    if p.weight == 0 {
        return;
    }
    stats.samples += 1;
    let sample = Rc::try_unwrap(p.sample).unwrap_or_else(|shared| (*shared).clone());
    emit(SampleFields {
        time,
        period: p.weight,
        ..sample
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(tid: u32, time: u64, leaf: u64) -> SampleFields {
        SampleFields {
            pid: 7,
            tid,
            time,
            ip: leaf,
            callchain: vec![leaf, 0x1000],
            period: 1,
            ..Default::default()
        }
    }

    /// Check that a blocked wait is charged to the switch-out stack with its length, and a preempted one is not.
    #[test]
    fn blocked_waits_are_charged_preempted_ones_counted() {
        let mut oc = OffCpu::default();
        let mut out = Vec::new();
        let mut emit = |s: SampleFields| out.push(s);
        oc.switch_sample(sample(5, 1_000, 0xa));
        oc.switch(5, 1_010, true, false, &mut emit);
        oc.switch(5, 50_001_010, false, false, &mut emit);
        oc.switch_sample(sample(5, 60_000_000, 0xb));
        oc.switch(5, 60_000_010, true, true, &mut emit);
        oc.switch(5, 60_500_010, false, false, &mut emit);
        oc.finish(&mut emit);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].period, 50_000_000);
        assert_eq!(out[0].ip, 0xa);
        assert_eq!((oc.stats.blocked, oc.stats.preempted), (1, 1));
        assert_eq!(oc.stats.preempted_ns, 500_000);
    }

    /// Check that many short waits at one stack sum into one sample per window, losing no time.
    #[test]
    fn short_waits_at_one_stack_sum_exactly() {
        let mut oc = OffCpu::default();
        let mut out = Vec::new();
        let mut emit = |s: SampleFields| out.push(s);
        let mut t = 0;
        for _ in 0..10_000 {
            oc.switch_sample(sample(9, t, 0xc));
            oc.switch(9, t + 1, true, false, &mut emit);
            oc.switch(9, t + 7_001, false, false, &mut emit); // 7 us off
            t += 10_000; // 3 us on
            oc.flush_old(&mut emit);
        }
        oc.finish(&mut emit);
        let total: u64 = out.iter().map(|s| s.period).sum();
        assert_eq!(total, 10_000 * 7_000);
        // 100 ms of switching in 10 ms windows.
        assert!((10..=11).contains(&out.len()), "{} samples", out.len());
        assert!(out.windows(2).all(|w| w[0].time <= w[1].time));
    }

    /// Check that a switch-out without its own stack sample is charged to the thread's last sampled stack.
    #[test]
    fn unsampled_switches_take_the_last_stack() {
        let mut oc = OffCpu::default();
        let mut out = Vec::new();
        let mut emit = |s: SampleFields| out.push(s);
        oc.switch(6, 10, true, false, &mut emit); // no stack known yet
        oc.switch(6, 20, false, false, &mut emit);
        oc.switch_sample(sample(6, 1_000, 0xf));
        oc.switch(6, 1_000, true, false, &mut emit);
        oc.switch(6, 3_000, false, false, &mut emit);
        oc.switch(6, 5_000_000, true, false, &mut emit); // not sampled
        oc.switch(6, 5_004_000, false, false, &mut emit);
        oc.finish(&mut emit);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].ip, out[0].period), (0xf, 6_000));
        assert_eq!((oc.stats.estimated, oc.stats.unattributed), (1, 1));
    }

    /// Check that a wait still open when the thread exits, or when recording ends, is counted up to then, and
    /// that a switch-in with no known switch-out charges nothing.
    #[test]
    fn open_waits_end_at_exit_or_at_the_end() {
        let mut oc = OffCpu::default();
        let mut out = Vec::new();
        let mut emit = |s: SampleFields| out.push(s);
        oc.switch(3, 100, false, false, &mut emit); // was already off CPU
        oc.switch_sample(sample(3, 1_000, 0xd));
        oc.switch(3, 1_000, true, false, &mut emit);
        oc.exit(3, 9_000, &mut emit);
        oc.switch_sample(sample(4, 2_000, 0xe));
        oc.switch(4, 2_000, true, false, &mut emit);
        oc.switch(8, 20_000, false, false, &mut emit);
        oc.finish(&mut emit);
        let by_tid: Vec<(u32, u64)> = out.iter().map(|s| (s.tid, s.period)).collect();
        assert_eq!(by_tid, vec![(3, 8_000), (4, 18_000)]);
    }
}
