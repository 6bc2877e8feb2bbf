//! The push's CPU and memory budget (`--push-cpu-budget`, `--push-mem-budget`): before a binary not yet read
//! is opened for its symbols, the process's own CPU time since it started (all threads: sampling, profile,
//! sender) is compared with the budget's share of the wall-clock time gone, and its resident memory with the
//! memory budget. Over either, the binary is not read: its addresses go out as build ids and file offsets,
//! for the store to symbolize, as `--push-unsymbolized` sends them.
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the push may use.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PushBudget {
    /// Of one core, averaged since the start: 0.01 is 1%.
    pub cpu: f64,
    /// Resident memory, bytes.
    pub mem: u64,
}

impl Default for PushBudget {
    fn default() -> PushBudget {
        PushBudget {
            cpu: 0.01,
            mem: 64 << 20,
        }
    }
}

/// Why a binary was not read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Over {
    Cpu {
        used: Duration,
        allowed: Duration,
    },
    /// `need`: about what the binary refused would have taken.
    Memory {
        rss: u64,
        need: u64,
        max: u64,
    },
}

impl Over {
    /// The value of the profile's `rprof_unsymbolized` label.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Over::Cpu { .. } => "cpu_budget",
            Over::Memory { .. } => "memory_budget",
        }
    }
}

impl std::fmt::Display for Over {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Over::Cpu { used, allowed } => write!(
                f,
                "over its CPU budget ({:.3} s used where {:.3} s were allowed so far)",
                used.as_secs_f64(),
                allowed.as_secs_f64()
            ),
            Over::Memory { rss, need, max } => write!(
                f,
                "over its memory budget ({} MiB resident, ~{} MiB more for a binary's symbols, at most {} MiB)",
                rss >> 20,
                need >> 20,
                max >> 20
            ),
        }
    }
}

/// The budget kept from the start of the push; [`Keeper::gate`] asks it before each new binary.
#[derive(Clone)]
pub(crate) struct Keeper {
    budget: PushBudget,
    started: Instant,
    /// The process's CPU time when the push started (what came before is not the push's).
    cpu_at_start: Duration,
    /// The first refusal since [`Keeper::take_over`].
    over: Arc<Mutex<Option<Over>>>,
}

impl Keeper {
    pub(crate) fn new(budget: PushBudget) -> Keeper {
        Keeper {
            budget,
            started: Instant::now(),
            cpu_at_start: own_cpu(),
            over: Arc::new(Mutex::new(None)),
        }
    }

    /// Why a new binary whose symbols take about `need` bytes may not be read now (None: it may).
    pub(crate) fn over(&self, need: u64) -> Option<Over> {
        if self.budget.cpu.is_finite() {
            let used = own_cpu().saturating_sub(self.cpu_at_start);
            let allowed = self.started.elapsed().mul_f64(self.budget.cpu);
            if used > allowed {
                return Some(Over::Cpu { used, allowed });
            }
        }
        let rss = own_rss();
        (rss.saturating_add(need) > self.budget.mem).then_some(Over::Memory {
            rss,
            need,
            max: self.budget.mem,
        })
    }

    /// The symbolizer's gate: admits a binary when within the budget, else remembers why not.
    pub(crate) fn gate(&self) -> crate::symbols::OpenGate {
        let keeper = self.clone();
        Box::new(move |need| match keeper.over(need) {
            None => true,
            Some(over) => {
                let mut first = keeper.over.lock().unwrap_or_else(|e| e.into_inner());
                first.get_or_insert(over);
                false
            }
        })
    }

    /// The first refusal since the last call.
    pub(crate) fn take_over(&self) -> Option<Over> {
        self.over.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// The process's CPU time (user + system, all threads).
fn own_cpu() -> Duration {
    use nix::sys::resource::{getrusage, UsageWho};
    match getrusage(UsageWho::RUSAGE_SELF) {
        Ok(u) => {
            let t = |tv: nix::sys::time::TimeVal| {
                Duration::new(tv.tv_sec().max(0) as u64, tv.tv_usec().max(0) as u32 * 1000)
            };
            t(u.user_time()) + t(u.system_time())
        }
        Err(_) => Duration::ZERO,
    }
}

/// The process's resident memory in bytes (VmRSS of /proc/self/status), 0 when unknown.
fn own_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    kb << 10
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A budget of nothing refuses at once (this process has used some CPU), and says why, once; a budget of
    /// everything admits.
    #[test]
    fn gate_follows_the_budget() {
        let tight = Keeper::new(PushBudget { cpu: 1.0, mem: 1 });
        assert!(!(tight.gate())(0));
        assert!(matches!(
            tight.take_over(),
            Some(Over::Memory { max: 1, .. })
        ));
        assert_eq!(tight.take_over(), None);
        let wide = Keeper::new(PushBudget {
            cpu: 1e9,
            mem: u64::MAX,
        });
        assert!((wide.gate())(1 << 30));
        assert_eq!(wide.take_over(), None);
        assert!(own_rss() > 0 && own_cpu() > Duration::ZERO);
    }
}
