//! How DWARF unwinds end, one by one ([`UnwindOutcome`]) and counted over a recording ([`DwarfStats`]).

/// How an unwind ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnwindOutcome {
    /// Reached the outermost frame (no more return address / CFI says end).
    Complete,
    /// Ran off the end of the captured stack copy (the copy was too small), or hit the frame limit.
    Truncated,
    /// A frame could not be unwound (no CFI for the address, unreadable memory...).
    Failed,
}

/// How DWARF unwinds ended.
#[derive(Clone, Copy, Debug, Default)]
pub struct DwarfStats {
    /// Samples with user registers and a stack copy.
    pub unwound: u64,
    /// Unwinds that ran off the end of the stack copy.
    pub truncated: u64,
    /// Unwinds that stopped at a frame without unwind information.
    pub failed: u64,
    /// Unwinds that met a module still being loaded (a slow file read): cut or frame-pointer-unwound there.
    pub cut_loading: u64,
    /// The stack copy size asked for.
    pub copy_size: u64,
    /// The most stack a complete unwind read (bytes from the stack pointer): about the deepest stack seen.
    pub deepest: u64,
}

impl DwarfStats {
    /// Count one unwind of a stack copy of `copy` bytes, which read `used` bytes of it.
    pub fn count(&mut self, outcome: UnwindOutcome, copy: u64, used: u64) {
        self.unwound += 1;
        self.copy_size = self.copy_size.max(copy);
        match outcome {
            UnwindOutcome::Complete => self.deepest = self.deepest.max(used),
            UnwindOutcome::Truncated => self.truncated += 1,
            UnwindOutcome::Failed => self.failed += 1,
        }
    }
}
