//! Two functions whose first instruction is known, on which `rprof probe` measures what a uprobe costs for
//! each class of probed instruction: one the kernel emulates (`push %rbp`), one it copies out of line and
//! single-steps (`mov`). Naked, so that no compiler decides their first instruction; here because defining a
//! naked function is an unsafe attribute, and the perf layer is where unsafe code is allowed.
use core::arch::naked_asm;

/// `push %rbp; mov %rdi,%rax; pop %rbp; ret`: its first instruction is emulated at a uprobe.
#[unsafe(naked)]
pub extern "C" fn emulated_entry(x: u64) -> u64 {
    // SAFETY: a complete function body in the C ABI: it saves and restores rbp, returns x in rax and touches
    // nothing else.
    naked_asm!("push rbp", "mov rax, rdi", "pop rbp", "ret")
}

/// `mov %rdi,%rax; ret`: its first instruction is single-stepped at a uprobe.
#[unsafe(naked)]
pub extern "C" fn stepped_entry(x: u64) -> u64 {
    // SAFETY: a complete function body in the C ABI: it returns x in rax and touches nothing else.
    naked_asm!("mov rax, rdi", "ret")
}

#[cfg(test)]
mod tests {
    /// Check that both functions return their argument.
    #[test]
    fn identity() {
        assert_eq!(super::emulated_entry(7), 7);
        assert_eq!(super::stepped_entry(9), 9);
    }
}
