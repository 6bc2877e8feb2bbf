//! The sampling thread's side of the push: every record copied into the round's batch, and the batch handed
//! to the profile thread through a bounded channel when the round ends. Nothing else happens on the sampling
//! thread; when the profile thread falls a whole channel behind, the sampling loop waits for it (the kernel's
//! rings hold the samples meanwhile) rather than lose a sample.
use crate::record::Tap;
use crate::recording::FileAttr;
use std::sync::mpsc::SyncSender;

/// What the sampling thread sends.
pub(super) enum Message {
    /// The attrs of the records that follow.
    Start(Vec<FileAttr>),
    /// One round's records (whole, one after another).
    Round(Round),
}

pub(super) struct Round {
    pub(super) records: Vec<u8>,
    /// CLOCK_MONOTONIC nanoseconds when the round ended: every record timed before the start of the round
    /// after the next has been sent by then.
    pub(super) ended: u64,
    pub(super) last: bool,
}

/// Rounds queued between the two threads (at most ten seconds of a busy machine's records at 100 ms rounds).
pub(super) const QUEUED_ROUNDS: usize = 100;

pub(super) struct PushTap {
    pub(super) sender: SyncSender<Message>,
    pub(super) records: Vec<u8>,
    /// The Python frames' names, shared with the profile thread.
    pub(super) python_names: crate::python::Names,
}

impl Tap for PushTap {
    fn start(&mut self, attrs: &[FileAttr]) {
        let _ = self.sender.send(Message::Start(attrs.to_vec()));
    }

    fn record(&mut self, parts: &[&[u8]]) {
        for p in parts {
            self.records.extend_from_slice(p);
        }
    }

    fn python_names(&self) -> Option<crate::python::Names> {
        Some(self.python_names.clone())
    }

    fn end_round(&mut self, last: bool) {
        let round = Round {
            records: std::mem::take(&mut self.records),
            ended: monotonic_ns(),
            last,
        };
        // A profile thread that is gone has said why through its own result.
        let _ = self.sender.send(Message::Round(round));
    }
}

/// CLOCK_MONOTONIC now, in nanoseconds (the clock of the samples of a pushing session).
pub(super) fn monotonic_ns() -> u64 {
    clock_ns(nix::time::ClockId::CLOCK_MONOTONIC)
}

/// CLOCK_REALTIME now, in nanoseconds since the epoch.
pub(super) fn realtime_ns() -> u64 {
    clock_ns(nix::time::ClockId::CLOCK_REALTIME)
}

fn clock_ns(clock: nix::time::ClockId) -> u64 {
    nix::time::clock_gettime(clock).map_or(0, |t| {
        (t.tv_sec() as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(t.tv_nsec() as u64)
    })
}
