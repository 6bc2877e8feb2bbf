//! The one event loop of `rprof record` and `rprof probe`: poll the rings, hand each record to the caller, end
//! the round, and stop on one set of conditions (SIGINT, SIGTERM, SIGHUP, the duration, the target's end);
//! then disable the events, read what is left and end the last round.
use super::{EventInfos, EventSet, PerfError, RawRecord, Workload};
use signal_hook::SigId;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The signals that end a session: SIGINT (Ctrl-C), SIGTERM, SIGHUP (the terminal closed). Registered for as
/// long as this value lives; while it does, they set a flag instead of killing rprof, so the recording is
/// finished, the report printed and the probes removed.
pub struct StopSignals {
    /// The last of the signals that arrived (0: none).
    flag: Arc<AtomicUsize>,
    ids: Vec<SigId>,
}

/// How long a launched command may take to end on its own after rprof got SIGINT or SIGHUP: a Ctrl-C or a
/// hangup at the terminal reaches the whole foreground process group, the command too, which then exits of
/// it (or cleans up first) before rprof would send SIGTERM.
const GROUP_SIGNAL_GRACE: Duration = Duration::from_millis(500);

impl StopSignals {
    pub const SIGNALS: [i32; 3] = [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ];

    pub fn register() -> Result<StopSignals, PerfError> {
        let flag = Arc::new(AtomicUsize::new(0));
        let mut ids = Vec::new();
        for sig in Self::SIGNALS {
            let id = signal_hook::flag::register_usize(sig, Arc::clone(&flag), sig as usize)
                .map_err(PerfError::Signal)?;
            ids.push(id);
        }
        Ok(StopSignals { flag, ids })
    }

    /// Whether one of the signals arrived.
    pub fn raised(&self) -> bool {
        self.flag.load(Ordering::Relaxed) != 0
    }

    /// How long to let the launched command end on its own before [`Workload::end`] sends it SIGTERM: a
    /// moment after SIGINT or SIGHUP (the terminal sent it to the command too), none otherwise (`-d`, the
    /// target's end, or a SIGTERM sent to rprof alone).
    pub fn grace(&self) -> Duration {
        match self.flag.load(Ordering::Relaxed) as i32 {
            signal_hook::consts::SIGINT | signal_hook::consts::SIGHUP => GROUP_SIGNAL_GRACE,
            _ => Duration::ZERO,
        }
    }
}

impl Drop for StopSignals {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}

/// When to stop, besides the signals.
pub struct StopWhen<'a> {
    /// A flag the caller sets (e.g. its own signal handler).
    pub flag: Option<&'a AtomicBool>,
    /// `-d`: this long after the loop starts.
    pub duration: Option<Duration>,
    /// The launched command exited (the loop reaps it).
    pub workload: Option<&'a mut Workload>,
    /// `-p`/`-t`: these processes or threads are all gone (or every ring hung up).
    pub pids: &'a [i32],
    /// Call [`Handler::tick`] this often (probe's `-i` reports); not at the end, which the caller reports.
    pub tick: Option<Duration>,
}

/// Why the loop ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    Signal,
    Duration,
    TargetGone,
}

/// What the caller does with the records.
pub trait Handler<I> {
    type Error: From<PerfError>;

    /// One record read from a ring.
    fn record(&mut self, infos: &EventInfos<I>, rec: RawRecord<'_>) -> Result<(), Self::Error>;

    /// Every ring has been read once and `records` were read: release what is now in order. `last`: the
    /// final round, after the events were disabled (release everything).
    fn end_round(&mut self, records: usize, last: bool) -> Result<(), Self::Error>;

    /// More descriptors to wait on beside the perf rings (the tracefs ring of `rprof probe`); the handler reads
    /// their data in [`Handler::end_round`].
    fn extra_fds(&self) -> Vec<BorrowedFd<'_>> {
        Vec::new()
    }

    /// The periodic tick ([`StopWhen::tick`]).
    fn tick(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }

    /// At most this many records of ring `ring` in this round (None: all of them): a handler that holds a
    /// round's records until the next rounds (a time-ordered merge) bounds its memory so. The last round reads
    /// all.
    fn round_records(&self, ring: usize) -> Option<usize> {
        let _ = ring;
        None
    }

    /// Ring `ring` was read in a round bounded by [`Handler::round_records`]; `more` when records were left in
    /// it (its records read so far are older than those left, which come in later rounds).
    fn ring_read(&mut self, ring: usize, more: bool) {
        let _ = (ring, more);
    }

    /// The perf events were disabled at the end: disable the handler's own sources too, before the rounds that
    /// read what is left.
    fn disable(&mut self) {}

    /// Records were left in the handler's own descriptors ([`Handler::extra_fds`]) at the end of the round:
    /// the next round starts without waiting.
    fn behind(&self) -> bool {
        false
    }
}

/// Longest wait in poll; a signal interrupts it at once.
const POLL_MS: u64 = 100;

/// Run `events` (already enabled, or enabled on exec) until a stop condition, feeding `handler`.
pub fn run<I, H: Handler<I>>(
    events: &mut EventSet<I>,
    signals: &StopSignals,
    mut when: StopWhen<'_>,
    handler: &mut H,
) -> Result<Stopped, H::Error> {
    let start = Instant::now();
    let deadline = when.duration.map(|d| start + d);
    let mut next_tick = when.tick.map(|t| start + t);
    // Records were left in a ring by a bounded round: no waiting for the next.
    let mut behind = false;
    let stopped = loop {
        let now = Instant::now();
        let mut wait = Duration::from_millis(POLL_MS);
        for t in [deadline, next_tick].into_iter().flatten() {
            wait = wait.min(t.saturating_duration_since(now));
        }
        let all_hup = match behind {
            true => false,
            false => events.poll(&handler.extra_fds(), wait.as_millis().max(1) as u16)?,
        };
        behind = read_round(events, handler, false)?;
        if signals.raised() || when.flag.is_some_and(|f| f.load(Ordering::Relaxed)) {
            break Stopped::Signal;
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            break Stopped::Duration;
        }
        let gone = match when.workload.as_deref_mut() {
            Some(w) => w.try_wait().is_some(),
            None if !when.pids.is_empty() => {
                all_hup || !when.pids.iter().any(|&p| crate::process::exists(p))
            }
            None => false,
        };
        if gone {
            break Stopped::TargetGone;
        }
        if all_hup && when.workload.is_none() && when.pids.is_empty() {
            // Every ring's task ended, and their end does not end this loop (a session that outlives its
            // target): poll would return at once from now on, so wait its time out instead of spinning.
            std::thread::sleep(wait);
        }
        if let (Some(at), Some(every)) = (next_tick, when.tick) {
            if now >= at {
                handler.tick()?;
                next_tick = Some(at + every);
            }
        }
    };
    events.disable();
    handler.disable();
    // What is left, in bounded rounds (the rings no longer fill), then the last round.
    let mut rounds = 0;
    while read_round(events, handler, false)? && rounds < MAX_FINAL_ROUNDS {
        rounds += 1;
    }
    read_round(events, handler, true)?;
    Ok(stopped)
}

/// Bounded rounds after the events were disabled, at most (a safety bound: a full 4 MiB ring takes about a
/// hundred rounds of a thousand records).
const MAX_FINAL_ROUNDS: usize = 100_000;

/// Read every ring once (at most [`Handler::round_records`] of each, but all in the last round) and end the
/// round; returns whether records were left. The first handler error stops the handing out of records.
fn read_round<I, H: Handler<I>>(
    events: &mut EventSet<I>,
    handler: &mut H,
    last: bool,
) -> Result<bool, H::Error> {
    let mut result = Ok(());
    let (mut records, mut behind) = (0, false);
    for i in 0..events.ring_count() {
        let bound = handler.round_records(i).filter(|_| !last);
        let (n, more) = events.read_ring(i, bound.unwrap_or(usize::MAX), |infos, rec| {
            if result.is_ok() {
                result = handler.record(infos, rec);
            }
        });
        records += n;
        behind |= more;
        if bound.is_some() {
            handler.ring_read(i, more);
        }
    }
    result?;
    handler.end_round(records, last)?;
    Ok(behind || handler.behind())
}
