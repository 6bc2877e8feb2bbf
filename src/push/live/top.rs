//! The live session's samples as `rprof top` counts them: the function each sample was taken in.
use super::{HeldSample, Live};
use std::sync::Arc;

/// One sample's innermost function (perf top's self overhead).
#[derive(Clone, Debug)]
pub struct Leaf {
    /// The function's name (`[unknown]` without one).
    pub name: String,
    /// The binary's file name (`[kernel.kallsyms]` for the kernel).
    pub module: String,
    pub kernel: bool,
    pub comm: Arc<str>,
    pub pid: u32,
    pub weight: u64,
}

impl Live {
    /// The innermost function of each sample of `samples`, symbolized (the symbol the sampled address is in:
    /// a function inlined there is named by the one it was inlined into, as perf top names it).
    pub(crate) fn leaves(&mut self, samples: &[HeldSample]) -> Vec<Leaf> {
        self.resolver.finish();
        let mut frames = Vec::new();
        let mut out = Vec::with_capacity(samples.len());
        for s in samples.iter().filter(|s| !s.off_cpu) {
            frames.clear();
            self.resolver
                .expand(&self.stacks[s.stack as usize].1, true, &mut frames);
            let leaf = frames
                .iter()
                .rev()
                .map(|&id| self.resolver.frame(id))
                .find(|f| !f.inlined);
            let Some(f) = leaf else { continue };
            out.push(Leaf {
                name: f.name.clone(),
                module: f.module.clone(),
                kernel: f.kernel,
                comm: Arc::clone(&s.comm),
                pid: s.pid,
                weight: s.weight,
            });
        }
        out
    }
}
