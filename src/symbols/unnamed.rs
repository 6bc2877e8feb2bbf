//! What the symbolizer says of an address: frames, or why there is no name (blazesym's `Unknown(Reason)`).
use super::Frame;
use crate::addr::FileOffset;
use std::ops::Range;
use std::sync::Arc;

/// Why an address has no name. Each cause has its own fix, which the command line words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unnamed {
    /// The binary has no symbol table (it is stripped; at most its exported `.dynsym` names remain) and no
    /// debug file was found for it.
    Stripped,
    /// The binary (or its debug file) has symbols, but none covers the address.
    NoSymbol,
    /// The file on disk has another build id than the recorded one: it was rebuilt or replaced.
    BuildIdMismatch,
    /// The file is not on this system (deleted, or the recording was made elsewhere).
    FileGone,
    /// The file is there but cannot be read as ELF.
    Unreadable,
    /// The address lies in no mapping of its process.
    NoMapping,
    /// Code in anonymous memory (a JIT), and the process left no `/tmp/perf-PID.map`.
    JitWithoutMap,
    /// Code in anonymous memory, and the process's `/tmp/perf-PID.map` does not list it.
    JitNotInMap,
    /// A kernel address, and no symbols of the recorded kernel (kallsyms) are at hand.
    KernelWithoutSymbols,
    /// The kernel's uprobe trampoline page (`[uprobes]`): a return probe put its address in place of the return
    /// address of the function it probes, so the frame stands for that function's caller.
    UprobeTrampoline,
    /// The binary was not read: `rprof record --push` was over its CPU or memory budget when the address came
    /// (the profile carries its build id and file offset for the store to symbolize).
    OverBudget,
}

/// An address without a name: why, and the code around it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unknown {
    pub cause: Unnamed,
    /// The file offsets of the code around it that the unwind tables bound (an `.eh_frame` FDE: about one
    /// function), when they do.
    pub range: Option<Range<FileOffset>>,
}

impl Unknown {
    /// An unknown address with nothing known around it.
    pub fn alone(cause: Unnamed) -> Unknown {
        Unknown { cause, range: None }
    }
}

/// What the symbolizer says of an address in a mapped file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Symbolized {
    /// Frames, outermost first: inlined functions after the function they were inlined into.
    Frames(Arc<[Frame]>),
    /// No name, and why.
    Unknown(Unknown),
}

impl Symbolized {
    /// Why there is no name (None when there are frames).
    pub fn unknown(&self) -> Option<&Unknown> {
        match self {
            Symbolized::Frames(_) => None,
            Symbolized::Unknown(unknown) => Some(unknown),
        }
    }
}

/// The frames (empty when unknown).
impl std::ops::Deref for Symbolized {
    type Target = [Frame];

    fn deref(&self) -> &[Frame] {
        match self {
            Symbolized::Frames(frames) => frames,
            Symbolized::Unknown(_) => &[],
        }
    }
}
