//! The engines that carry out a [`crate::probe::plan::Plan`] (the session's tracefs probe group and its
//! supervisor are the event layer's: [`crate::events::group`], [`crate::events::supervisor`]): per-task perf events ([`perf`]), the tracefs instance ring ([`ring`]), counters ([`counters`]),
//! the decoding of what they read ([`decode`]), where their streams have holes ([`holes`]), and the measurement of the probe's own cost ([`cost`]).
//! [`sharing`] finds which other processes map the probed files, for the plan's choice of engine.
pub mod cost;
pub mod counters;
pub mod decode;
pub mod holes;
pub mod perf;
pub mod ring;
pub mod sharing;

use crate::probe::target::TargetId;

/// A probe the kernel refused: the targets it stood for are not probed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub targets: Vec<TargetId>,
    /// The kernel's error.
    pub reason: String,
}
