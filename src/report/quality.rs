//! How far a profile can be trusted: the facts the command line turns into its closing verdict (the library
//! prints nothing). Each fact is what this profile shows: the share of its hottest rows and how many samples
//! stand behind them, samples the kernel lost or throttled, stacks that were cut short and why, and code that
//! has no name and why.
use super::{FrameId, Profile};
use crate::resolve::FrameInfo;
use crate::symbols::Unnamed;
use std::collections::HashMap;

/// How many of the table's top rows the precision is given for.
pub const TOP_ROWS: usize = 5;

/// The facts behind a report's verdict.
#[derive(Clone, Debug, Default)]
pub struct Quality {
    /// On-CPU samples.
    pub samples: u64,
    /// The recording holds every event, not a sample of them (see [`Profile::every_event`]): no sampling
    /// error.
    pub every_event: bool,
    /// The self shares (0..1, by samples) of the table's top rows, highest first, at most [`TOP_ROWS`].
    pub top_shares: Vec<f64>,
    /// LOST records' lost events, LOST_SAMPLES, THROTTLE records.
    pub lost: u64,
    pub lost_samples: u64,
    pub throttled: u64,
    /// Samples whose user stack does not reach a thread's first function (`_start`, `start_thread`, `clone`...):
    /// a frame without a frame pointer or unwind information cut it, or the unwinder stopped.
    pub cut_stacks: u64,
    /// Samples with a user stack at all (what `cut_stacks` is a share of).
    pub user_stacks: u64,
    /// Unnamed code by module and cause, most samples first.
    pub unnamed: Vec<UnnamedShare>,
}

/// Unnamed code of one module for one cause.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnnamedShare {
    pub module: String,
    pub cause: Unnamed,
    /// Samples whose leaf is such code.
    pub self_samples: u64,
    /// Samples with such code anywhere in their stack.
    pub stack_samples: u64,
}

/// The functions a complete user stack starts at (the outermost frame), by their names in libc, the dynamic
/// loader and the Go runtime.
const THREAD_ENTRIES: &[&str] = &[
    "_start",
    "__libc_start_main",
    "__libc_start_call_main",
    "_dl_start_user",
    "start_thread",
    "clone",
    "clone3",
    "__clone",
    "__clone3",
    "__GI___clone3",
    "thread_start",
    "runtime.goexit",
    "runtime.goexit.abi0",
    "runtime.rt0_go",
    "runtime.rt0_go.abi0",
    "runtime.mstart",
    "runtime.mstart.abi0",
];

impl Quality {
    /// The facts of a profile's on-CPU samples.
    pub fn of(p: &Profile) -> Quality {
        let mut q = Quality {
            samples: p.samples,
            lost: p.lost,
            lost_samples: p.lost_samples,
            throttled: p.throttled,
            every_event: p.every_event(),
            ..Quality::default()
        };
        // Without stacks in the recording, no stack is cut short.
        let stacks = p.stack_samples > 0;
        // (comm, leaf's function, what it was inlined into) -> samples, as the table's rows.
        let mut rows: HashMap<(u32, Option<FrameId>, Option<FrameId>), u64> = HashMap::new();
        // (module, cause) -> (self, in stack)
        let mut unnamed: HashMap<(&str, Unnamed), (u64, u64)> = HashMap::new();
        let mut seen: Vec<(&str, Unnamed)> = Vec::new();
        for ((comm, stack), count) in &p.stacks {
            let n = count.samples;
            let frames = || stack.iter().map(|&f| &p.frames[f as usize]);
            if n == 0 {
                continue;
            }
            if let Some(leaf) = stack.len().checked_sub(1) {
                let (sym, into) = super::table::symbol_at(p, stack, leaf);
                *rows.entry((*comm, sym, into)).or_default() += n;
            }
            if let Some(outer) = frames().next().filter(|f| stacks && !f.kernel) {
                q.user_stacks += n;
                if !is_thread_entry(outer) {
                    q.cut_stacks += n;
                }
            }
            seen.clear();
            for f in frames() {
                let Some(u) = &f.unnamed else { continue };
                let key = (f.module.as_str(), u.cause);
                if !seen.contains(&key) {
                    seen.push(key);
                    unnamed.entry(key).or_default().1 += n;
                }
            }
            let leaf = stack.last().map(|&f| &p.frames[f as usize]);
            if let Some((leaf, u)) = leaf.and_then(|f| Some((f, f.unnamed.as_ref()?))) {
                unnamed
                    .entry((leaf.module.as_str(), u.cause))
                    .or_default()
                    .0 += n;
            }
        }
        let mut top: Vec<u64> = rows.into_values().collect();
        top.sort_unstable_by(|a, b| b.cmp(a));
        let total = p.samples.max(1) as f64;
        q.top_shares = top
            .iter()
            .take(TOP_ROWS)
            .map(|&n| n as f64 / total)
            .collect();
        q.unnamed = unnamed
            .into_iter()
            .map(
                |((module, cause), (self_samples, stack_samples))| UnnamedShare {
                    module: module.to_string(),
                    cause,
                    self_samples,
                    stack_samples,
                },
            )
            .collect();
        q.unnamed.sort_by(|a, b| {
            (b.stack_samples, &a.module, a.cause).cmp(&(a.stack_samples, &b.module, b.cause))
        });
        q
    }
}

/// Whether a stack's outermost frame is where a thread starts.
fn is_thread_entry(f: &FrameInfo) -> bool {
    // Names with `--lines` carry their location after a space.
    let name = f.name.split(' ').next().unwrap_or_default();
    THREAD_ENTRIES.contains(&name)
}

/// The half-width (in points of percentage) of the 95% binomial interval around a share `p` (0..1) measured on
/// `n` samples: how far the true share may lie from the measured one.
pub fn interval_points(p: f64, n: u64) -> f64 {
    1.96 * (p * (1.0 - p) / n.max(1) as f64).sqrt() * 100.0
}

/// The samples a share `p` needs for its 95% binomial interval to be within ±`points` points.
pub fn samples_needed(p: f64, points: f64) -> u64 {
    let half = points / 100.0;
    (1.96 * 1.96 * p * (1.0 - p) / (half * half)).ceil() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check the binomial interval and the samples it needs: a share of 50% needs 2,401 samples for ±2
    /// points, and 2,401 samples give it ±2 points.
    #[test]
    fn binomial_precision() {
        assert_eq!(samples_needed(0.5, 2.0), 2401);
        assert!((interval_points(0.5, 2401) - 2.0).abs() < 0.001);
        assert_eq!(samples_needed(0.1, 2.0), 865);
        assert_eq!(samples_needed(0.0, 2.0), 0);
        assert!(interval_points(0.3, 100) > 8.9);
    }
}
