//! What the decoded events become, applied in time order by the [`Sink`]: calls paired per thread
//! ([`pairing`]) or by key ([`keyed`]), per-function statistics ([`stats`]), per-call work ([`calls`]: values, slow calls, trace
//! lines), stacks at entry ([`stacks`]), and the map from runtime addresses back to targets ([`addrmap`]).
mod addrmap;
mod calls;
mod context;
mod filter;
mod join;
mod keyed;
mod pair_hit;
mod pairing;
mod perf_summary;
mod quantiles;
mod sink;
mod stacks;
mod stats;

pub use addrmap::AddrMap;
pub use calls::{describe, Call, CallOptions, Calls, Key, TraceStyle, MAX_KEYS};
#[cfg(test)]
pub(crate) use context::Ctx;
pub use keyed::KeyedPairer;
pub use pairing::NetCost;
pub use perf_summary::PerfSummary;
pub use sink::Sink;
pub use stacks::{add_entry_caller, FoldedStacks, StackCounter, MAX_STACKS};
pub use stats::{bucket_range, FuncStats, Histogram, KeyedCounts, Stats};
