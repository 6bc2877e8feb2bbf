//! DWARF unwinding of user stacks captured with PERF_SAMPLE_REGS_USER + PERF_SAMPLE_STACK_USER.
//!
//! OWNER: dwarf helper. Interface contract used by `record`:
//! - `DwarfUnwinder::new(debug_dirs: Vec<PathBuf>) -> DwarfUnwinder`
//! - `add_mapping(&mut self, pid: u32, start: u64, len: u64, pgoff: u64, path: &str)` on each MMAP2/MMAP
//!   (executable mappings only are interesting; others may be ignored),
//! - `fork(&mut self, parent_pid: u32, child_pid: u32)` (a new process inherits the parent's mappings),
//! - `exit(&mut self, pid: u32)` drops a process,
//! - `unwind(&mut self, pid: u32, regs: &UserRegs, stack: &[u8], dyn_size: u64, out: &mut Vec<u64>) -> UnwindOutcome`
//!   pushes the user frames leaf first (the first is `regs.ip`, then return addresses as found on the stack).

/// The user registers that DWARF unwinding needs (x86_64).
#[derive(Clone, Copy, Debug, Default)]
pub struct UserRegs {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
}

/// How an unwind ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnwindOutcome {
    /// Reached the outermost frame (no more return address / CFI says end).
    Complete,
    /// Ran off the end of the captured stack copy (the copy was too small).
    Truncated,
    /// A frame could not be unwound (no CFI for the address, unreadable memory...).
    Failed,
}
