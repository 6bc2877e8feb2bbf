//! The user registers a sample carries (PERF_SAMPLE_REGS_USER), which DWARF unwinding starts from (x86_64).
//!
//! Both the recording format (a sample's registers) and the unwinder use them, so they sit below both.

/// x86_64 user register indices for `sample_regs_user` (arch/x86/include/uapi/asm/perf_regs.h).
pub mod index {
    pub const BP: u32 = 6;
    pub const SP: u32 = 7;
    pub const IP: u32 = 8;
}

/// The `sample_regs_user` mask of the general registers: ax, bx, cx, dx, si, di, bp, sp, ip and r8-r15 (DWARF
/// mode copies them all, as perf does: the Python reader looks in them for the evaluator's instruction pointer).
pub const GENERAL: u64 = 0x1ff | (0xff << 16);

/// The user registers that DWARF unwinding needs (x86_64).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UserRegs {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
}

impl UserRegs {
    /// The registers of a sample's REGS_USER (rprof's register mask or perf's); None when one is missing.
    pub fn from_sample(regs: &linux_perf_event_reader::Regs<'_>) -> Option<UserRegs> {
        Some(UserRegs {
            ip: regs.get(u64::from(index::IP))?,
            sp: regs.get(u64::from(index::SP))?,
            bp: regs.get(u64::from(index::BP))?,
        })
    }
}
