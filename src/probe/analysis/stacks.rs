//! `-g`: distinct user and kernel stacks at function entry, counted (stackcount), printed as text or folded.
use crate::probe::target::{TargetId, Targets};
use crate::process::AddressSpace;
use crate::resolve::{folded_name, FrameId, StackResolver};
use crate::symbols::SymbolizerOptions;
use std::collections::HashMap;
use std::io::{self, Write};
use std::sync::Arc;

/// Distinct stacks kept at most; more are counted in [`StackCounter::dropped`].
pub const MAX_STACKS: usize = 100_000;

use perf_event_open_sys::bindings::PERF_CONTEXT_USER;

/// Insert the caller's return address `ret` (read at SP at function entry) after the first user frame, unless
/// the kernel already put it there. A frame-pointer walk that starts at a function's first instruction skips the
/// immediate caller, because the function has not pushed its frame yet.
pub fn add_entry_caller(chain: &mut Vec<u64>, ret: u64) {
    let Some(user) = chain.iter().position(|&a| a == PERF_CONTEXT_USER) else {
        return;
    };
    let ip = user + 1;
    if ip >= chain.len() || ret == 0 || chain.get(ip + 1) == Some(&ret) {
        return;
    }
    chain.insert(ip + 1, ret);
}

/// A raw stack of a process: (pid, address-space generation, callchain with its context markers).
type RawStack = (u32, u64, Box<[u64]>);

/// Counts of distinct stacks per target, in bounded memory. Each new raw stack is resolved into frames when it is
/// counted, with the process's mappings of that moment, by the same [`StackResolver`] as `rprof report`.
pub struct StackCounter {
    resolver: StackResolver,
    /// (pid, address-space generation, raw callchain) -> frames, leaf first (some symbolized at the end).
    chains: HashMap<RawStack, Arc<[FrameId]>>,
    /// (target, frames leaf first) -> hits.
    counts: HashMap<(TargetId, Arc<[FrameId]>), u64>,
    /// Hits whose stack was not kept because [`MAX_STACKS`] distinct stacks were already counted.
    pub dropped: u64,
}

impl Default for StackCounter {
    fn default() -> Self {
        StackCounter::new()
    }
}

impl StackCounter {
    /// An empty counter.
    pub fn new() -> StackCounter {
        StackCounter {
            resolver: StackResolver::new(SymbolizerOptions::default(), HashMap::new()),
            chains: HashMap::new(),
            counts: HashMap::new(),
            dropped: 0,
        }
    }

    /// The frames (leaf first) of a callchain of process `pid`, whose mappings are `space`; named at [`finish`].
    ///
    /// [`finish`]: StackCounter::finish
    pub fn frames(
        &mut self,
        pid: u32,
        space: Option<&AddressSpace>,
        chain: &[u64],
    ) -> Arc<[FrameId]> {
        let key = (
            pid,
            space.map_or(0, AddressSpace::generation),
            Box::from(chain),
        );
        match self.chains.get(&key) {
            Some(frames) => Arc::clone(frames),
            None => {
                let mut frames = Vec::with_capacity(chain.len());
                self.resolver
                    .resolve_chain(pid, space, false, chain, &mut frames);
                let frames: Arc<[FrameId]> = Arc::from(frames);
                if self.chains.len() < MAX_STACKS {
                    self.chains.insert(key, Arc::clone(&frames));
                }
                frames
            }
        }
    }

    /// The frames of the function that holds return address `ret` (the caller of a function entered at a
    /// user or kernel address).
    pub fn caller(
        &mut self,
        pid: u32,
        space: Option<&AddressSpace>,
        ret: u64,
        kernel: bool,
    ) -> Arc<[FrameId]> {
        use perf_event_open_sys::bindings::PERF_CONTEXT_KERNEL;
        let marker = if kernel {
            PERF_CONTEXT_KERNEL
        } else {
            PERF_CONTEXT_USER
        };
        // The call instruction, not the one after it (which may belong to the next function).
        self.frames(pid, space, &[marker, ret.saturating_sub(1)])
    }

    /// The frames of a callchain of process `pid`, named now (leaf first), for
    /// a caller that keeps stacks by name ([`crate::probe::Observer`]); a frame names the function that holds its
    /// address, not the functions inlined there.
    pub fn named(
        &mut self,
        pid: u32,
        space: Option<&AddressSpace>,
        chain: &[u64],
    ) -> Vec<crate::probe::ObservedFrame> {
        let parts: Vec<_> = crate::unwind::fp::split(chain, false).collect();
        let ids: Vec<Arc<[FrameId]>> = parts
            .iter()
            .map(|p| {
                self.resolver
                    .resolve_addr(pid, space, p.addr, p.kernel, p.exact)
            })
            .collect();
        self.resolver.finish();
        let mut expanded = Vec::new();
        parts
            .iter()
            .zip(ids)
            .filter_map(|(part, ids)| {
                let first = *ids.first()?;
                // A return address was looked up one byte back: its offset is the address's own, as bpftrace
                // prints it.
                let offset = self
                    .resolver
                    .symbol_offset(first)
                    .map(|o| o + u64::from(!part.exact));
                expanded.clear();
                self.resolver.expand(&ids, true, &mut expanded);
                let f = expanded.first().map(|&id| self.resolver.frame(id));
                Some(crate::probe::ObservedFrame {
                    addr: part.addr,
                    name: f.filter(|f| f.unnamed.is_none()).map(|f| f.name.clone()),
                    offset: offset.unwrap_or(0),
                    module: match self.resolver.module_of(first) {
                        Some((m, _)) => m.path.display().to_string(),
                        None => f.map(|f| f.module.clone()).unwrap_or_default(),
                    },
                    kernel: part.kernel,
                })
            })
            .collect()
    }

    /// The function holding one address of process `pid` (or of the kernel), named as [`named`] names a
    /// stack's leaf (`usym()`, `ksym()`); None where no symbol covers it.
    ///
    /// [`named`]: StackCounter::named
    pub fn name_one(
        &mut self,
        pid: u32,
        space: Option<&AddressSpace>,
        addr: u64,
        kernel: bool,
    ) -> Option<crate::probe::ObservedFrame> {
        use perf_event_open_sys::bindings::PERF_CONTEXT_KERNEL;
        let marker = match kernel {
            true => PERF_CONTEXT_KERNEL,
            false => PERF_CONTEXT_USER,
        };
        let frame = self.named(pid, space, &[marker, addr]).into_iter().next()?;
        frame.name.is_some().then_some(frame)
    }

    /// Name the frames resolved so far (symbolization is batched).
    pub fn finish(&mut self) {
        self.resolver.finish();
    }

    /// The frames' names, leaf first (inlined functions expanded), as `rprof report --folded` names them.
    pub fn names(&self, frames: &[FrameId]) -> Vec<String> {
        let mut ids = Vec::new();
        self.resolver.expand(frames, false, &mut ids);
        ids.iter()
            .map(|&id| folded_name(self.resolver.frame(id)))
            .collect()
    }

    /// Count one entry of `target` in process `pid`, whose mappings are `space`, with this callchain.
    pub fn add(&mut self, target: TargetId, pid: u32, space: Option<&AddressSpace>, chain: &[u64]) {
        let frames = self.frames(pid, space, chain);
        let key = (target, frames);
        if let Some(n) = self.counts.get_mut(&key) {
            *n += 1;
        } else if self.counts.len() < MAX_STACKS {
            self.counts.insert(key, 1);
        } else {
            self.dropped += 1;
        }
    }

    /// Print the stacks: per target, each stack innermost frame first then its count (stackcount's layout).
    pub fn write(&mut self, w: &mut dyn Write, targets: &Targets) -> io::Result<()> {
        let mut last: Option<TargetId> = None;
        for ((target, frames), n) in &self.merged() {
            if last != Some(*target) {
                writeln!(w, "\nSTACKS of {}", targets.name(*target))?;
                last = Some(*target);
            }
            for f in frames {
                writeln!(w, "  {f}")?;
            }
            writeln!(w, "    {n}\n")?;
        }
        if self.dropped > 0 {
            writeln!(
                w,
                "({} hits not shown: more than {MAX_STACKS} distinct stacks)",
                self.dropped
            )?;
        }
        Ok(())
    }

    /// The stacks folded for flame graphs: `outermost;...;innermost COUNT` (frames named as `rprof report
    /// --folded` names them; a stack without frames is the target's name).
    pub fn folded(&mut self, targets: &Targets) -> FoldedStacks {
        let merged = self.merged();
        let calls = merged.iter().map(|(_, n)| n).sum::<u64>() + self.dropped;
        let lines = merged
            .into_iter()
            .map(|((target, frames), n)| {
                let mut parts: Vec<&str> = frames.iter().rev().map(String::as_str).collect();
                if parts.is_empty() {
                    parts.push(targets.name(target));
                }
                format!("{} {n}", parts.join(";"))
            })
            .collect();
        FoldedStacks {
            lines,
            calls,
            dropped: self.dropped,
        }
    }

    /// The counted stacks named, leaf first, those that symbolize the same merged (different pids, addresses
    /// in the same function); by target, then most hits first.
    fn merged(&mut self) -> Vec<((TargetId, Vec<String>), u64)> {
        self.resolver.finish();
        let mut lines: HashMap<(TargetId, Vec<String>), u64> = HashMap::new();
        let mut ids = Vec::new();
        for ((target, frames), n) in &self.counts {
            ids.clear();
            self.resolver.expand(frames, false, &mut ids);
            let frames: Vec<String> = ids
                .iter()
                .map(|&id| folded_name(self.resolver.frame(id)))
                .collect();
            *lines.entry((*target, frames)).or_default() += n;
        }
        let mut lines: Vec<((TargetId, Vec<String>), u64)> = lines.into_iter().collect();
        lines.sort_by(|a, b| {
            a.0 .0
                .cmp(&b.0 .0)
                .then(b.1.cmp(&a.1))
                .then(a.0 .1.cmp(&b.0 .1))
        });
        lines
    }
}

/// `-g --folded`: the stacks at entry folded for flame graphs, which the caller writes (alone on standard
/// output, or as an SVG).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FoldedStacks {
    /// `outermost;...;innermost COUNT`, one line per distinct stack.
    pub lines: Vec<String>,
    /// Entries counted (those in `dropped` included).
    pub calls: u64,
    /// Hits whose stack was not kept (more than [`MAX_STACKS`] distinct stacks).
    pub dropped: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use perf_event_open_sys::bindings::PERF_CONTEXT_KERNEL;

    /// Check that the caller is inserted after the probed IP once, and not twice.
    #[test]
    fn inserts_entry_caller() {
        let mut c = vec![PERF_CONTEXT_USER, 0x1000, 0x3000];
        add_entry_caller(&mut c, 0x2000);
        assert_eq!(c, vec![PERF_CONTEXT_USER, 0x1000, 0x2000, 0x3000]);
        add_entry_caller(&mut c, 0x2000);
        assert_eq!(c.len(), 4);
        let mut k = vec![PERF_CONTEXT_KERNEL, 0xffff_ffff_8100_0000];
        add_entry_caller(&mut k, 0x2000);
        assert_eq!(k.len(), 2);
    }
}
