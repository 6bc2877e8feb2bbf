//! Signal frames: a signal handler returns into the rt_sigreturn trampoline (glibc's `__restore_rt`, the vDSO's
//! `__vdso_rt_sigreturn`), and the interrupted code's registers are in the `ucontext_t` on the stack. framehop
//! does not unwind these frames; the unwinder recognizes the trampoline by its code and reads the registers.

use std::collections::HashMap;
use std::sync::Arc;

use super::modules::{open_file, MAX_LAYOUTS};
use crate::process::Mapping;

/// `mov $15, %rax; syscall`: the x86_64 rt_sigreturn trampoline that signal handlers return into.
const SIGRETURN_CODE: [u8; 9] = [0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05];
/// Offset of `uc_mcontext.gregs` in the x86_64 `ucontext_t` (after uc_flags, uc_link and the 24-byte uc_stack).
const UC_MCONTEXT: u64 = 40;
/// Indexes of rbp, rsp and rip in `gregs` (`REG_RBP`, `REG_RSP`, `REG_RIP` of `<sys/ucontext.h>`).
const REG_RBP: u64 = 10;
const REG_RSP: u64 = 15;
const REG_RIP: u64 = 16;

/// The addresses of the interrupted code's ip, sp and bp saved by the kernel in the `ucontext_t` at `ucontext`
/// (the stack pointer at the trampoline).
pub(super) fn saved_regs(ucontext: u64) -> [u64; 3] {
    let greg = |i: u64| ucontext + UC_MCONTEXT + 8 * i;
    [greg(REG_RIP), greg(REG_RSP), greg(REG_RBP)]
}

/// Code already checked for the trampoline: (file, offset) -> whether it is.
#[derive(Default)]
pub(super) struct SigreturnSites {
    sites: HashMap<(Arc<str>, u64), bool>,
}

impl SigreturnSites {
    /// Whether the code at `address`, in `mapping` of process `pid`, is the rt_sigreturn trampoline. `vdso` is
    /// the vDSO image, for mappings of `[vdso]`.
    pub(super) fn is_sigreturn(
        &mut self,
        pid: u32,
        mapping: &Mapping,
        address: u64,
        vdso: Option<&[u8]>,
    ) -> bool {
        let offset = mapping.file_offset(address);
        let site = (mapping.path.clone(), offset);
        if let Some(&known) = self.sites.get(&site) {
            return known;
        }
        let mut code = [0u8; SIGRETURN_CODE.len()];
        let read = if &*mapping.path == "[vdso]" {
            let at = usize::try_from(address - mapping.start).ok();
            match (vdso, at) {
                (Some(bytes), Some(at)) => bytes
                    .get(at..at + code.len())
                    .map(|b| code.copy_from_slice(b))
                    .is_some(),
                _ => false,
            }
        } else {
            use std::os::unix::fs::FileExt;
            open_file(pid, &mapping.path)
                .is_ok_and(|(file, _)| file.read_exact_at(&mut code, offset).is_ok())
        };
        let found = read && code == SIGRETURN_CODE;
        if self.sites.len() >= MAX_LAYOUTS {
            self.sites.clear();
        }
        self.sites.insert(site, found);
        found
    }
}
