//! Where a program enters the kernel for a given syscall: the `syscall` instructions of a file (libc, or a
//! static binary) whose `eax` holds that syscall's number, found by decoding its code. A uprobe there sees the
//! syscall's arguments in their registers (`rdi, rsi, rdx, r10, r8, r9`), so it can read the strings they
//! point to at the moment of the call: what a syscall tracepoint cannot (it holds the pointer only) and what an
//! event probe does in the kernel, on kernels that have them.
//!
//! The code is decoded in one linear sweep per executable section (compiled code decodes so), twice: first to
//! learn every address a direct branch lands on, then following `eax`: a `mov $N,%eax` sets it, any other write
//! to it, any branch and any branch target forget it (another path may arrive there), and a `syscall` with a
//! known `eax` is a site of syscall N. Calls through `syscall(2)` (the number in a register from elsewhere) are
//! not found.
use crate::elf_layout::ElfLayout;
use crate::mapped::MappedFile;
use iced_x86::{
    Code, Decoder, DecoderOptions, FlowControl, InstructionInfoFactory, OpAccess, Register,
};
use object::{Object, ObjectSection, SectionFlags};
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// The syscall argument registers, as tracefs names them.
pub const SYSCALL_REGS: [&str; 6] = ["di", "si", "dx", "r10", "r8", "r9"];

/// The file offsets of the `syscall` instructions of each syscall number in `path`.
pub fn find(path: &Path) -> Result<HashMap<u32, Vec<u64>>, String> {
    let file =
        MappedFile::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let elf = object::File::parse(&*file)
        .map_err(|e| format!("{}: not an ELF file: {e}", path.display()))?;
    let layout = ElfLayout::of(&elf);
    let mut sites: HashMap<u32, Vec<u64>> = HashMap::new();
    for section in elf.sections() {
        let exec = matches!(section.flags(), SectionFlags::Elf { sh_flags } if sh_flags & u64::from(object::elf::SHF_EXECINSTR) != 0);
        let Ok(code) = section.data() else {
            continue;
        };
        if !exec || code.is_empty() {
            continue;
        }
        for (nr, addr) in sweep(section.address(), code) {
            if let Some(off) = layout.file_offset(crate::addr::ElfAddr(addr)) {
                sites.entry(nr).or_default().push(off.0);
            }
        }
    }
    Ok(sites)
}

/// The (syscall number, address) of every `syscall` instruction of `code` (at `start`) with a known `eax`.
pub fn sweep(start: u64, code: &[u8]) -> Vec<(u32, u64)> {
    let mut targets = HashSet::new();
    for insn in Decoder::with_ip(64, code, start, DecoderOptions::NONE).into_iter() {
        if matches!(
            insn.flow_control(),
            FlowControl::ConditionalBranch | FlowControl::UnconditionalBranch | FlowControl::Call
        ) {
            targets.insert(insn.near_branch_target());
        }
    }
    let mut info = InstructionInfoFactory::new();
    let mut eax: Option<u32> = None;
    let mut out = Vec::new();
    for insn in Decoder::with_ip(64, code, start, DecoderOptions::NONE).into_iter() {
        if targets.contains(&insn.ip()) {
            eax = None;
        }
        if insn.code() == Code::Syscall {
            if let Some(nr) = eax {
                out.push((nr, insn.ip()));
            }
            eax = None;
            continue;
        }
        if insn.code() == Code::Mov_r32_imm32 && insn.op0_register() == Register::EAX {
            eax = Some(insn.immediate32());
            continue;
        }
        let writes_eax = info.info(&insn).used_registers().iter().any(|r| {
            r.register().full_register() == Register::RAX
                && !matches!(r.access(), OpAccess::Read | OpAccess::CondRead)
        });
        if writes_eax || insn.flow_control() != FlowControl::Next {
            eax = None;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that `mov $N,%eax; syscall` is a site of N, also with an unrelated instruction between, and that a
    /// branch target or another write to eax in between forgets N.
    #[test]
    fn sites_follow_eax() {
        let code = [
            0xb8, 0x01, 0x01, 0x00, 0x00, // +0  mov $0x101,%eax
            0x48, 0x89, 0xfe, // +5  mov %rdi,%rsi
            0x0f, 0x05, // +8  syscall            -> site of 257
            0xb8, 0x3b, 0x00, 0x00, 0x00, // +10 mov $0x3b,%eax
            0x01, 0xc0, // +15 add %eax,%eax
            0x0f, 0x05, // +17 syscall            -> eax unknown
            0xb8, 0x02, 0x00, 0x00, 0x00, // +19 mov $2,%eax
            0x0f, 0x05, // +24 syscall            -> but a branch lands here
            0xeb, 0xfc, // +26 jmp +24
        ];
        assert_eq!(sweep(0x1000, &code), vec![(257, 0x1008)]);
    }

    /// Check that libc's `openat` and `execve` have sites (when this machine's libc is where Debian puts it).
    #[test]
    fn libc_has_sites() {
        let libc = Path::new("/lib/x86_64-linux-gnu/libc.so.6");
        if !libc.exists() {
            return;
        }
        let sites = find(libc).unwrap();
        assert!(
            sites.get(&257).is_some_and(|s| !s.is_empty()),
            "no openat sites"
        );
        assert!(
            sites.get(&59).is_some_and(|s| !s.is_empty()),
            "no execve sites"
        );
    }
}
